"""What the governed transports share: which requests are governed, how a response is judged.

The transports themselves are in governor/_async/transport.py (the
source) and governor/_sync/transport.py (generated from it by
scripts/unasync.py); governor/transport.py is their public face.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import json
import logging
import math
import re
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast

from .budgets import TIERS_APART, Tokens
from .classify import Verdict, classify_http
from .config import RetryPolicy
from .core import Ask, Outcome
from .errors import ConfigError, GovernorError
from .prices import PriceBook, UnknownPrice
from .prices import Usage as PricedUsage
from .profiles import Profile, request_body, usage_of
from .profiles import profile as find_profile
from .streams import StreamUsage

log = logging.getLogger("governor")

#: path endings of the model endpoints governed (OpenAI and Anthropic)
MODEL_PATHS = ("chat/completions", "completions", "responses", "messages", "embeddings")
#: the HTTP libraries a transport can serve
LIBRARIES = ("httpx", "httpx2")
#: the estimate's signature: (request body, URL path) -> tokens to reserve
Estimator = Callable[[bytes, str], "Tokens | int | None"]

_STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')


def is_model_request(method: str, path: str, profile: Profile | None = None) -> bool:
    """Whether a request is governed: a POST to a model endpoint (of the
    profile's provider; without one, OpenAI's and Anthropic's)."""
    if profile is not None:
        return profile.is_model_request(method, path)
    if method.upper() != "POST":
        return False
    path = path.rstrip("/")
    return any(path == ending or path.endswith("/" + ending) for ending in MODEL_PATHS)


def asks_for_stream(body: bytes) -> bool:
    """Whether a JSON request body sets ``"stream": true``."""
    if b'"stream"' not in body:
        return False
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return bool(_STREAM_FLAG.search(body))
    return isinstance(decoded, dict) and decoded.get("stream") is True


def is_stream(status: int, content_type: str, asked: bool) -> bool:
    """Whether a response is a stream to hand over: a success that is
    server-sent events, or that a streaming request got in anything but JSON.
    Errors are always read whole (they are small, and judged before the
    caller sees them)."""
    if status >= 400:
        return False
    kind = content_type.lower()
    return "text/event-stream" in kind or (asked and "json" not in kind)


def request_profile(profile: Profile | None, path: str) -> Profile:
    """The profile a request is read by: the transport's, else (no profile)
    Anthropic's for a ``messages`` path and OpenAI's for the others."""
    return profile or find_profile("anthropic" if path.rstrip("/").endswith("messages") else "openai")


def tiered(tokens: Tokens | int | None, body: bytes, path: str, profile: Profile | None = None) -> Tokens:
    """A request's estimate in the service tier it asks for, when its provider
    limits that tier apart (Profile.tiers_apart: Anthropic's ``speed:
    "fast"``) and the budgets count it so (governor.budgets.TIERS_APART); an
    estimate that names its tier keeps it."""
    estimate = Tokens.of(tokens)
    if estimate.tier is not None:
        return estimate
    found = request_profile(profile, path)
    tier = found.requested_tier(body)
    return estimate.in_tier(tier) if tier in found.tiers_apart and tier in TIERS_APART else estimate


def judge_response(
    status: int, headers: Any, body: bytes | None, profile: Profile | None = None, path: str = "", asked: str = ""
) -> Verdict:
    """The verdict on a response read whole (``body`` decoded bytes, or None).

    4xx and 5xx: :func:`~governor.classify.classify_http`'s outcome under the
    provider's profile (a throttle with the provider's wait: a header such as
    Azure's ``x-ms-retry-after-ms``, or the body's hint) with no usage spent.
    2xx: success with the JSON's usage as the profile counts it (None when it
    has none).
    1xx and 3xx: success, nothing spent (a redirect is followed as a request
    of its own). ``asked``: the tier the lease asked for when the budgets
    count it apart (Tokens.apart): the usage then names the tier the
    response says served it (``usage.speed``: a fast request may be served
    at the standard speed), or the one asked."""
    if status >= 400:
        verdict = classify_http(status, headers, body, profile=profile)
        counts = True if profile is None else profile.refusals_count
        return Verdict(
            verdict.kind,
            verdict.retry_after,
            Tokens(),
            headers,
            verdict.description,
            refusals_count=counts,
            until=verdict.until,
            load=verdict.load,
        )
    if not 200 <= status < 300:
        return Verdict(Outcome.SUCCESS, usage=Tokens(), headers=headers, description=f"HTTP {status}")
    usage = None
    if body:
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            decoded = None
        usage = usage_of(decoded) if profile is None else profile.usage(decoded, path)
        if usage is not None and asked:
            usage = usage.in_tier(request_profile(profile, path).served_tier(decoded) or asked)
    return Verdict(Outcome.SUCCESS, usage=usage, headers=headers, description=f"HTTP {status}")


def stream_outcome(usage: StreamUsage, failed: bool) -> tuple[Outcome, Tokens | None, str]:
    """What a finished stream reports: (outcome, usage, description)."""
    if usage.error is not None:
        spent = usage.usage
        if spent is None and usage.error.kind is not Outcome.ERROR:
            spent = Tokens()  # refused before it said anything: nothing was generated
        return usage.error.kind, spent, usage.error.description
    if failed:
        return Outcome.ERROR, usage.usage, "the stream broke off"
    return Outcome.SUCCESS, usage.usage, "stream"


def _library(obj: Any) -> str | None:
    root = type(obj).__module__.partition(".")[0]
    return root if root in LIBRARIES else None


@functools.cache
def _module(name: str) -> Any:
    return importlib.import_module(name)


def _read_body(response: Any, raw: bytes) -> bytes | None:
    """The decoded body of ``raw`` under the response's content-encoding; None if it cannot be."""
    try:
        probe = type(response)(response.status_code, headers=response.headers, content=raw)
        return bytes(probe.content)
    except Exception:  # noqa: BLE001 - a body that does not decode is judged by its status alone
        return None


def _check_library(request: Any, transport: Any) -> None:
    wanted, have = _library(request), _library(transport)
    if wanted is not None and have is not None and wanted != have:
        raise ConfigError(
            f"the governed transport wraps a {have} transport but serves a {wanted} client: "
            f"wrap a {wanted}.HTTPTransport (an SDK on httpx2 needs httpx2 objects throughout)"
        )


def _error_base(errors: Any) -> type[BaseException] | None:
    if errors is not None and not (isinstance(errors, type) and issubclass(errors, Exception)):
        raise ConfigError(f"errors must be an exception class (an SDK's base error) or None, got {errors!r}")
    return errors


@functools.cache
def _twin_class(kind: Any, base: Any) -> type[GovernorError]:
    doc = f"{kind.__name__} raised through an SDK that wraps foreign errors: a {kind.__name__} and a {base.__name__}."
    return type(
        kind.__name__, (kind, base), {"__module__": kind.__module__, "__doc__": doc, "__qualname__": kind.__qualname__}
    )


def sdk_twin(error: GovernorError, base: Any) -> GovernorError:
    """``error`` as an instance of a subclass of both its own class and the
    SDK's base error ``base``, so an SDK that wraps every other exception of
    its transport (the anthropic SDK makes them ``APIConnectionError``) lets
    it through unchanged: ``except AcquireTimeout`` and ``except
    GovernorUnavailable`` catch it as they would without the SDK."""
    kind: Any = type(error)
    twin = _twin_class(kind, base)
    copy = twin.__new__(twin)
    copy.__dict__.update(error.__dict__)
    copy.args = error.args
    return copy


#: request headers that name a request's own priority class and tenant (taken off before sending)
PRIORITY_HEADER = "x-governor-priority"
TENANT_HEADER = "x-governor-tenant"


class Carried:
    """A lease taken ahead of a model call (by a framework's limiter:
    governor/frameworks/pydantic_ai.py), carried into it through
    :data:`CARRIED`: the call's first attempt runs on it when the call's
    transport has the same governor, so one lease carries both the limit
    and the call's outcome. Taken at most once; closed by its limiter when
    the operation ends, after which nothing takes it."""

    __slots__ = ("_lock", "governor", "lease", "taken")

    def __init__(self, governor: Any, lease: Any) -> None:
        self.governor, self.lease = governor, lease
        self.taken = False  #: a call took the lease: it reports and releases it
        self._lock = threading.Lock()

    def take(self, governor: Any) -> Any | None:
        """The lease, for a call of ``governor``'s; None when it is another
        governor's, already taken, closed or released."""
        with self._lock:
            if self.taken or self.governor is not governor or self.lease.released:
                return None
            self.taken = True
            return self.lease

    def close(self) -> bool:
        """No call may take the lease from now on; True when none did (its
        limiter gives it back), False when a call took it."""
        with self._lock:
            taken, self.taken = self.taken, True
            return not taken


#: the lease carried into the model calls of this context (an asyncio task, a thread)
CARRIED: contextvars.ContextVar[Carried | None] = contextvars.ContextVar("fleet_governor_carried", default=None)


def carried_lease(governor: Any) -> Any | None:
    """The lease carried into this context for a call of ``governor``'s (see :class:`Carried`), taken."""
    carrier = CARRIED.get()
    return None if carrier is None else carrier.take(governor)


def request_ask(request: Any, ask: Ask, governor: Any) -> Ask:
    """The request's ask: the transport's ``ask``, in the class and for the
    tenant its headers name, if they do (``governor.ask`` checks them); the
    headers are taken off the request (the provider never sees them)."""
    headers = request.headers
    priority, tenant = headers.get(PRIORITY_HEADER), headers.get(TENANT_HEADER)
    for name in (PRIORITY_HEADER, TENANT_HEADER):
        if name in headers:
            del headers[name]
    if not priority and not tenant:
        return ask
    return cast(Ask, governor.ask(ask.holder, priority=priority or ask.priority, tenant=tenant or ask.tenant))


def check_options(*, transport: object, method: str, retry: object, timeout: object, estimate: object) -> None:
    """A governed transport's options (its ask is checked by ``governor.ask``): ConfigError when one is wrong."""
    if transport is not None and not callable(getattr(transport, method, None)):
        raise ConfigError(f"transport must have {method}() (an httpx or httpx2 transport), got {transport!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a RetryPolicy or None, got {retry!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0
    ):
        raise ConfigError(f"timeout must be None or finite seconds >= 0, got {timeout!r}")
    if not callable(estimate):
        raise ConfigError(f"estimate must be a callable (body, path) -> Tokens, got {estimate!r}")


#: reports of abandoned async streams still running (a task must be referenced until it ends)
_PENDING: set[asyncio.Task[None]] = set()


def report_in_loop(
    report: Callable[[StreamUsage, bool], Coroutine[Any, Any, None]],
    usage: StreamUsage,
    failed: bool,
    loop: asyncio.AbstractEventLoop | None,
) -> None:
    """An abandoned async stream's report, as a task of the event loop the
    stream was opened on (never from inside the garbage collector); when
    that loop is closed, the lease's TTL frees the slot."""
    if loop is None or loop.is_closed():
        log.info("governor: a stream was abandoned after its event loop closed; its lease's TTL frees it")
        return

    def spawn() -> None:
        task = loop.create_task(report(usage, failed))
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)

    try:
        loop.call_soon_threadsafe(spawn)
    except RuntimeError:  # the loop closed meanwhile
        pass


def report_in_thread(report: Callable[[StreamUsage, bool], None], usage: StreamUsage, failed: bool) -> None:
    """An abandoned stream's report, from a thread of its own (never from
    inside the collector, which may run while this thread holds a connection
    pool's lock); at interpreter shutdown the lease's TTL frees the slot."""
    if sys.is_finalizing():  # no threads to be had
        return
    thread = threading.Thread(target=report, args=(usage, failed), name="governor-stream-report", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # the interpreter is shutting down
        pass


@functools.cache
def stream_class(base: type, library: str, asynchronous: bool) -> type:
    """The governed stream ``base`` as a subclass of the library's own byte
    stream too (the client asserts ``isinstance(response.stream, SyncByteStream)``)."""
    module = _module(library)
    if asynchronous:
        return type("GovernedAsyncStream", (base, module.AsyncByteStream), {})
    return type("GovernedSyncStream", (base, module.SyncByteStream), {})


# -- what a call costs (the spend budgets: governor/spend.py) ---------------------------------

_MODEL_IN_PATH = re.compile(r"/models?/([^/:]+)")


def request_model(body: bytes, path: str) -> str | None:
    """The model a request names: its JSON body's ``model``, else the path's
    (Gemini's ``/models/<model>:generateContent``, Bedrock's ``/model/<id>/converse``)."""
    decoded = request_body(body)
    model = decoded.get("model") if isinstance(decoded, dict) else None
    if isinstance(model, str) and model.strip():
        return model
    found = _MODEL_IN_PATH.search(path)
    return found.group(1) if found else None


class Charge:
    """What one governed request costs, attempt by attempt: the most it can
    cost is reserved before it is sent (``most``), and each answer adds its
    charge: a response's usage at the tier that served it (the tier asked
    for when it does not say); a refusal or an error answer what the
    provider bills it (``Profile.refusals_charged``: nothing for every
    supported provider); an answer whose usage cannot be read or whose
    tier served has no price, or an attempt that broke off after it was
    sent, its reservation (it may have been billed: nothing is under-counted)."""

    def __init__(self, book: PriceBook, profile: Profile, model: str, tier: str, estimate: Tokens) -> None:
        self.book, self.profile, self.model, self.tier = book, profile, model, tier
        self.most = book.most(profile.name, model, estimate.input, estimate.output, tier)
        self.estimate = estimate.total
        self.charged = 0
        #: the tokens the answers used (the estimate's for an answer that does not say)
        self.tokens = 0
        #: a stream took the charge over: it settles when it ends
        self.handed_over = False

    def _cost(self, usage: PricedUsage, tier: str | None) -> int:
        return self.book.cost(self.profile.name, self.model, usage, tier or self.tier)

    def answered(self, status: int, headers: Any, body: bytes | None) -> None:
        """An answer read whole."""
        if status >= 400:
            self.charged += self.most if self.profile.refusals_charged else 0
            self.tokens += self.estimate if self.profile.refusals_charged else 0
            return
        decoded = None
        if body:
            try:
                decoded = json.loads(body)
            except (ValueError, RecursionError):
                decoded = None
        usage = self.profile.priced_usage(decoded) if decoded is not None else None
        if usage is None:
            self._reserved()
            return
        try:
            cost = self._cost(usage, self.profile.served_tier(decoded, headers))
        except UnknownPrice:
            # a tier served that has no price: the call was billed, so it is charged its reservation
            self._reserved()
            return
        self.charged += cost
        self.tokens += usage.input_tokens + usage.output_tokens

    def streamed(
        self, usage: Tokens | None, failed: bool, reported: Mapping[str, Any] | None = None, headers: Any = None
    ) -> None:
        """A stream that ended: the usage it reported, priced as a response
        read whole (``reported``, what :class:`~governor.streams.StreamUsage`
        read it from: its cached tokens apart, at the tier that served it),
        else its tokens at the input and output prices, else its reservation."""
        if usage is None:
            self.charged += self.most
            self.tokens += self.estimate
            return
        priced = self.profile.priced_usage(reported) if reported is not None else None
        if priced is not None:
            self.charged += self._cost(priced, self.profile.served_tier(reported, headers))
            self.tokens += priced.input_tokens + priced.output_tokens
            return
        self.charged += self._cost(PricedUsage(input_tokens=usage.input, output_tokens=usage.output), None)
        self.tokens += usage.total

    def _reserved(self) -> None:
        self.charged += self.most
        self.tokens += self.estimate

    def broke_off(self) -> None:
        """An attempt that raised after it may have been sent."""
        self._reserved()
