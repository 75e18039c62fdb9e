"""Every request of an SDK client under the governor, with no change at the call site.

:class:`GovernedTransport` (and :class:`AsyncGovernedTransport`) wraps an
httpx transport. The official SDKs take one through their ``http_client``::

    import httpx2, openai
    from governor.transport import GovernedTransport

    transport = GovernedTransport(gov, httpx2.HTTPTransport())
    client = openai.OpenAI(http_client=httpx2.Client(transport=transport), max_retries=0)

(:mod:`governor.providers` builds these clients in one call.) Each POST to
a model endpoint (a path ending in ``chat/completions``, ``completions``,
``responses``, ``messages`` or ``embeddings``) goes through the one retry
loop of ``Governor.call`` (governor/_async/retry.py ``retry_call``):

1. a lease is acquired with a token estimate made from the request body
   (:func:`governor.estimate.estimate_request`, or the ``estimate`` given);
2. the request is sent through the wrapped transport;
3. a response that is not a stream is read whole and judged: a 4xx or 5xx
   by :func:`governor.classify.classify_http` (429 and overloads are
   rate-limited, billing errors quota-exhausted, the rest errors) and
   reported with no usage spent (a refused request spends no tokens; the
   request itself counts against the requests budget); a success with the
   usage of its JSON (:func:`governor.estimate.usage_of`). Every report
   carries the response's headers, which calibrate the budgets;
4. a rate-limited answer is retried after the provider's Retry-After or
   the backoff, by the same loop; when the attempts run out, the last
   answer is returned to the SDK, which raises its own error for it.

A streamed response (``content-type: text/event-stream``, or a request
with ``"stream": true`` answered with anything but JSON) is returned at
once, its body wrapped so that :class:`governor.estimate.StreamUsage`
reads the usage and any error event as the bytes pass. The lease is held
until the stream ends, and reported and released exactly once: when the
stream is exhausted, when it is closed (``response.close()``, leaving the
SDK's ``with`` block, ``stream.close()``), or, as a last resort, when it is
garbage-collected unclosed (best effort: the report then runs on a thread
of its own, or as a task of the event loop the stream was opened on if that
loop still runs; without either, the lease's TTL frees the slot). The
outcome is a success, or rate-limited (an ``overloaded_error`` event inside
the 200) or an error as the event says; the usage is what the stream
reported (OpenAI's ``include_usage`` chunk; Anthropic's ``message_start``
and ``message_delta``), nothing spent for a stream refused by an error
event before any usage, and unknown otherwise (the reservation then stands
as spent, governor/budgets.py).

Anything else (GETs such as ``/models``, file uploads, batch endpoints)
passes through ungoverned.

The leases wait in the transport's ``priority`` class for its ``tenant``
(``Governor.acquire``); one request may name others in the headers
``X-Governor-Priority`` and ``X-Governor-Tenant`` (the SDKs'
``extra_headers``), which are taken off before it is sent.

httpx and httpx2: the transport serves clients of either library (the
SDKs moved to httpx2, which refuses httpx objects), so it derives from
neither's ``BaseTransport``; it has their methods. The wrapped transport
must be of the client's library; when none is given, one
``HTTPTransport()`` of the library of the first request is made. A type
checker that wants a ``BaseTransport`` is told with ``typing.cast``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import math
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any

from ._async.governor import AsyncGovernor
from ._async.lease import AsyncLease
from ._async.retry import retry_call as async_retry_call
from ._sync.governor import Governor
from ._sync.lease import Lease
from ._sync.retry import retry_call as sync_retry_call
from .budgets import Tokens
from .classify import Verdict, classify_http
from .config import RetryPolicy
from .core import Outcome
from .errors import ConfigError, GovernorError
from .estimate import StreamUsage, estimate_request, usage_of

log = logging.getLogger("governor")

#: path endings of the model endpoints governed (OpenAI and Anthropic)
MODEL_PATHS = ("chat/completions", "completions", "responses", "messages", "embeddings")
#: the HTTP libraries a transport can serve
LIBRARIES = ("httpx", "httpx2")
#: the estimate's signature: (request body, URL path) -> tokens to reserve
Estimator = Callable[[bytes, str], "Tokens | int | None"]

_STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')


def is_model_request(method: str, path: str) -> bool:
    """Whether a request is governed: a POST to a model endpoint."""
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


def judge_response(status: int, headers: Any, body: bytes | None) -> Verdict:
    """The verdict on a response read whole (``body`` decoded bytes, or None).

    4xx and 5xx: :func:`~governor.classify.classify_http`'s outcome (a
    throttle with the provider's wait, Azure's ``x-ms-retry-after-ms``
    included) with no usage spent. 2xx: success with the JSON's usage (None
    when it has none).
    1xx and 3xx: success, nothing spent (a redirect is followed as a request
    of its own)."""
    if status >= 400:
        verdict = classify_http(status, headers, body)
        return Verdict(verdict.kind, verdict.retry_after, Tokens(), headers, verdict.description)
    if not 200 <= status < 300:
        return Verdict(Outcome.SUCCESS, usage=Tokens(), headers=headers, description=f"HTTP {status}")
    usage = None
    if body:
        try:
            usage = usage_of(json.loads(body))
        except (ValueError, RecursionError):
            usage = None
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


#: request headers that name a request's own priority class and tenant (taken off before sending)
PRIORITY_HEADER = "x-governor-priority"
TENANT_HEADER = "x-governor-tenant"


def _place(request: Any, priority: str | None, tenant: str | None) -> tuple[str | None, str | None]:
    """The request's class and tenant: its headers', else the transport's;
    the headers are taken off the request (the provider never sees them)."""
    headers = request.headers
    named = headers.get(PRIORITY_HEADER), headers.get(TENANT_HEADER)
    for name in (PRIORITY_HEADER, TENANT_HEADER):
        if name in headers:
            del headers[name]
    return named[0] or priority, named[1] or tenant


def _check(
    governor: Any,
    kind: type,
    transport: Any,
    method: str,
    retry: Any,
    holder: Any,
    timeout: Any,
    estimate: Any,
    priority: Any = None,
    tenant: Any = None,
) -> None:
    if not isinstance(governor, kind):
        raise ConfigError(
            f"{kind.__name__.replace('Governor', '')}GovernedTransport needs a {kind.__name__}, got {governor!r}"
        )
    governor._core.place(priority, tenant)  # type: ignore[attr-defined]  # ConfigError: an unknown class, a bad tenant
    if transport is not None and not callable(getattr(transport, method, None)):
        raise ConfigError(f"transport must have {method}() (an httpx or httpx2 transport), got {transport!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a RetryPolicy or None, got {retry!r}")
    if holder is not None and not isinstance(holder, str):
        raise ConfigError(f"holder must be a string or None, got {holder!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0
    ):
        raise ConfigError(f"timeout must be None or finite seconds >= 0, got {timeout!r}")
    if not callable(estimate):
        raise ConfigError(f"estimate must be a callable (body, path) -> Tokens, got {estimate!r}")


# -- sync -----------------------------------------------------------------------------


class GovernedTransport:
    """An httpx (or httpx2) transport whose model requests are governed by ``governor``.

    ``transport``: the transport that sends (default: an ``HTTPTransport()``
    of the client's library). ``retry``: the retry policy (default
    ``RetryPolicy()``, as ``call()``). ``holder``: the label of the leases.
    ``timeout``: seconds a request may wait in the queue for its lease
    (None: as long as it takes), as ``call(timeout=)``. ``estimate``: the
    token estimate of a request body, ``(body, path) -> Tokens`` (default
    :func:`~governor.estimate.estimate_request`). ``priority`` and
    ``tenant``: where the leases wait (``Governor.acquire``; a request's
    ``X-Governor-Priority`` and ``X-Governor-Tenant`` headers win).
    """

    def __init__(
        self,
        governor: Governor,
        transport: Any | None = None,
        *,
        retry: RetryPolicy | None = None,
        holder: str | None = None,
        timeout: float | None = None,
        estimate: Estimator = estimate_request,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> None:
        _check(governor, Governor, transport, "handle_request", retry, holder, timeout, estimate, priority, tenant)
        self.governor = governor
        self._transport = transport
        self._retry = retry
        self._holder = holder
        self._timeout = timeout
        self._estimate = estimate
        self._priority, self._tenant = priority, tenant
        self._lock = threading.Lock()

    def _inner(self, request: Any) -> Any:
        if self._transport is None:
            with self._lock:
                if self._transport is None:
                    self._transport = _module(_library(request) or "httpx").HTTPTransport()
        _check_library(request, self._transport)
        return self._transport

    def handle_request(self, request: Any) -> Any:
        inner = self._inner(request)
        if not is_model_request(request.method, request.url.path):
            return inner.handle_request(request)
        priority, tenant = _place(request, self._priority, self._tenant)
        body = request.read()
        tokens = self._estimate(body, request.url.path)
        asked = asks_for_stream(body)
        read: dict[int, bytes | None] = {}  # id(response) -> its decoded body, for the responses read whole

        def send_once() -> Any:
            response = inner.handle_request(request)
            if is_stream(response.status_code, response.headers.get("content-type", ""), asked):
                return response
            try:
                raw = b"".join(response.stream)
            finally:
                response.stream.close()
            response.stream = _module(_library(response) or "httpx").ByteStream(raw)
            read[id(response)] = _read_body(response, raw)
            return response

        def judge(response: Any, lease: Lease) -> Verdict | None:
            if id(response) not in read:  # a stream: it reports when it ends
                _hand_over(response, _SyncSettlement(self.governor, lease, response.headers))
                return None
            return judge_response(response.status_code, response.headers, read.pop(id(response)))

        return sync_retry_call(
            self.governor,
            send_once,
            (),
            {},
            retry=self._retry,
            timeout=self._timeout,
            holder=self._holder,
            tokens=tokens,
            judge=judge,
            priority=priority,
            tenant=tenant,
        )

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def __enter__(self) -> GovernedTransport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close()


class _SyncSettlement:
    """Reports a streamed call's outcome and releases its lease, exactly once."""

    def __init__(self, governor: Governor, lease: Lease, headers: Any) -> None:
        self._governor, self._lease, self._headers = governor, lease, headers
        self._lock = threading.Lock()
        self.done = False

    def claim(self) -> bool:
        with self._lock:
            if self.done:
                return False
            self.done = True
            return True

    def report(self, usage: StreamUsage, failed: bool) -> None:
        outcome, spent, description = stream_outcome(usage, failed)
        retry_after = usage.error.retry_after if usage.error is not None else None
        try:
            self._governor.report(outcome, retry_after, self._lease, release=True, usage=spent, headers=self._headers)
        except GovernorError as error:  # never fails the caller's stream; the TTL frees the slot
            log.warning("governor %r: could not report a stream (%s): %s", self._governor.name, description, error)


class _GovernedSyncStream:
    """The body of a streamed response: passes the bytes on, reads usage, reports once at the end."""

    def __init__(self, inner: Any, settlement: _SyncSettlement) -> None:
        self._inner = inner
        self._settlement = settlement
        self._usage = StreamUsage()
        self._failed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                self._usage.feed(chunk)
                yield chunk
        except GeneratorExit:  # the reader let go mid-stream: close() or the collector reports
            raise
        except Exception:
            self._failed = True
            self._finish()
            raise
        self._finish()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._finish()

    def _finish(self) -> None:
        if self._settlement.claim():
            self._usage.finish()
            self._settlement.report(self._usage, self._failed)

    def __del__(self) -> None:
        # Abandoned unclosed: report from a thread of its own, never from inside
        # the collector (which may run while this thread holds a connection pool's lock).
        settlement = getattr(self, "_settlement", None)
        if settlement is None or not settlement.claim():
            return
        self._usage.finish()
        if sys.is_finalizing():  # no threads to be had: the lease's TTL frees the slot
            return
        thread = threading.Thread(
            target=settlement.report, args=(self._usage, self._failed), name="governor-stream-report", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down
            pass


# -- asyncio --------------------------------------------------------------------------


class AsyncGovernedTransport:
    """The asyncio twin of :class:`GovernedTransport`, for ``httpx.AsyncClient``
    (or httpx2's) and an :class:`~governor.AsyncGovernor`."""

    def __init__(
        self,
        governor: AsyncGovernor,
        transport: Any | None = None,
        *,
        retry: RetryPolicy | None = None,
        holder: str | None = None,
        timeout: float | None = None,
        estimate: Estimator = estimate_request,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> None:
        _check(
            governor,
            AsyncGovernor,
            transport,
            "handle_async_request",
            retry,
            holder,
            timeout,
            estimate,
            priority,
            tenant,
        )
        self.governor = governor
        self._transport = transport
        self._retry = retry
        self._holder = holder
        self._timeout = timeout
        self._estimate = estimate
        self._priority, self._tenant = priority, tenant

    def _inner(self, request: Any) -> Any:
        if self._transport is None:
            self._transport = _module(_library(request) or "httpx").AsyncHTTPTransport()
        _check_library(request, self._transport)
        return self._transport

    async def handle_async_request(self, request: Any) -> Any:
        inner = self._inner(request)
        if not is_model_request(request.method, request.url.path):
            return await inner.handle_async_request(request)
        priority, tenant = _place(request, self._priority, self._tenant)
        body = await request.aread()
        tokens = self._estimate(body, request.url.path)
        asked = asks_for_stream(body)
        read: dict[int, bytes | None] = {}
        loop = asyncio.get_running_loop()

        async def send_once() -> Any:
            response = await inner.handle_async_request(request)
            if is_stream(response.status_code, response.headers.get("content-type", ""), asked):
                return response
            try:
                raw = b"".join([chunk async for chunk in response.stream])
            finally:
                await response.stream.aclose()
            response.stream = _module(_library(response) or "httpx").ByteStream(raw)
            read[id(response)] = _read_body(response, raw)
            return response

        def judge(response: Any, lease: AsyncLease) -> Verdict | None:
            if id(response) not in read:
                _hand_over(response, _AsyncSettlement(self.governor, lease, response.headers, loop))
                return None
            return judge_response(response.status_code, response.headers, read.pop(id(response)))

        return await async_retry_call(
            self.governor,
            send_once,
            (),
            {},
            retry=self._retry,
            timeout=self._timeout,
            holder=self._holder,
            tokens=tokens,
            judge=judge,
            priority=priority,
            tenant=tenant,
        )

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()

    async def __aenter__(self) -> AsyncGovernedTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


#: reports of abandoned async streams still running (a task must be referenced until it ends)
_PENDING: set[asyncio.Task[None]] = set()


class _AsyncSettlement:
    """The asyncio twin of :class:`_SyncSettlement`."""

    def __init__(
        self, governor: AsyncGovernor, lease: AsyncLease, headers: Any, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._governor, self._lease, self._headers, self.loop = governor, lease, headers, loop
        self.done = False

    def claim(self) -> bool:
        if self.done:
            return False
        self.done = True
        return True

    async def report(self, usage: StreamUsage, failed: bool) -> None:
        outcome, spent, description = stream_outcome(usage, failed)
        retry_after = usage.error.retry_after if usage.error is not None else None
        try:
            await self._governor.report(
                outcome, retry_after, self._lease, release=True, usage=spent, headers=self._headers
            )
        except GovernorError as error:
            log.warning("governor %r: could not report a stream (%s): %s", self._governor.name, description, error)


class _GovernedAsyncStream:
    """The asyncio twin of :class:`_GovernedSyncStream`."""

    def __init__(self, inner: Any, settlement: _AsyncSettlement) -> None:
        self._inner = inner
        self._settlement = settlement
        self._usage = StreamUsage()
        self._failed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._usage.feed(chunk)
                yield chunk
        except (GeneratorExit, asyncio.CancelledError):  # let go of, or cancelled: aclose() reports
            raise
        except Exception:
            self._failed = True
            await self._finish()
            raise
        await self._finish()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            await self._finish()

    async def _finish(self) -> None:
        if self._settlement.claim():
            self._usage.finish()
            await self._settlement.report(self._usage, self._failed)

    def __del__(self) -> None:
        settlement = getattr(self, "_settlement", None)
        if settlement is None or not settlement.claim():
            return
        self._usage.finish()
        loop = settlement.loop
        if loop.is_closed():
            log.info("governor: a stream was abandoned after its event loop closed; its lease's TTL frees it")
            return
        usage, failed = self._usage, self._failed

        def spawn() -> None:
            task = loop.create_task(settlement.report(usage, failed))
            _PENDING.add(task)
            task.add_done_callback(_PENDING.discard)

        try:
            loop.call_soon_threadsafe(spawn)
        except RuntimeError:  # the loop closed meanwhile
            pass


# -- the wrapping ---------------------------------------------------------------------


@functools.cache
def _stream_class(library: str, asynchronous: bool) -> type:
    """The governed stream as a subclass of the library's own byte stream
    (the client asserts ``isinstance(response.stream, SyncByteStream)``)."""
    module = _module(library)
    if asynchronous:
        return type("GovernedAsyncStream", (_GovernedAsyncStream, module.AsyncByteStream), {})
    return type("GovernedSyncStream", (_GovernedSyncStream, module.SyncByteStream), {})


def _hand_over(response: Any, settlement: _SyncSettlement | _AsyncSettlement) -> None:
    """The response's body becomes a governed stream that reports through ``settlement``."""
    asynchronous = isinstance(settlement, _AsyncSettlement)
    cls = _stream_class(_library(response) or "httpx", asynchronous)
    response.stream = cls(response.stream, settlement)


__all__ = [
    "MODEL_PATHS",
    "AsyncGovernedTransport",
    "GovernedTransport",
    "asks_for_stream",
    "is_model_request",
    "is_stream",
    "judge_response",
    "stream_outcome",
]
