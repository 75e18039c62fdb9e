"""Amazon Bedrock's runtime (``boto3``) under the governor, with no change at the call site.

boto3 is not httpx: it sends through botocore's own HTTP session. The seam
is botocore's event system: a ``before-send`` handler that returns a
response is what botocore uses instead of sending, so :func:`bedrock_client`
registers :class:`GovernedSend` there for the model operations
(``Converse``, ``ConverseStream``, ``InvokeModel``,
``InvokeModelWithResponseStream``). It sends each request through the
client's own HTTP session inside the one retry loop of ``Governor.call``
(governor/_sync/retry.py): a lease with the request's estimate (input
tokens plus ``maxTokens``, times the model's burndown for the output,
governor/profiles/), a ``ThrottlingException`` or
``ServiceUnavailableException`` reported and retried, a success reported
with its usage. A ``converse_stream`` answer is handed over at once and
reported when its ``metadata`` event has passed, or when it is closed or
breaks off; an exception event inside it (``throttlingException``) is
reported as the profile classifies it.

A governor with spend budgets (docs/spend.md) needs prices
(``GovernorConfig(prices=...)`` or ``prices=``): each call reserves the most
it can cost (its estimate at the price of the model its path names, at the
tier it asks for, ``serviceTier.type``) before it is sent, and raises
``SpendExhausted`` at once when no budget affords it (unless
``wait_for_spend``); it settles the usage the answer reports
(``inputTokens``, its cache reads and writes, ``outputTokens``) at the tier
that served it, a ``converse_stream`` at its end (its ``metadata`` event), and
an answer without a usage Bedrock's shape reads, or an attempt that broke
off, at its reservation.

boto3's own retries would fight the governor's (attempts the governor
never sees, on boto3's schedule), so the client is built with
``retries={"total_max_attempts": 1}``: botocore makes one attempt, the
governor's loop makes the retries; when they run out the last answer goes
back to botocore, which raises its own ``ThrottlingException``. A governor
error raised inside the handler (Redis unreachable, an acquire timeout)
reaches the caller as itself: botocore re-raises what a send raised.

Bedrock's runtime is synchronous in boto3, so this takes a
:class:`~governor.Governor`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._exchange import Charge
from .._sync.retry import retry_call
from .._sync.transport import _settle
from ..budgets import Tokens
from ..classify import Verdict
from ..core import Outcome
from ..errors import ConfigError, GovernorError
from ..prices import PriceBook
from ..profiles import REGISTRY
from ..transport import judge_response

if TYPE_CHECKING:
    from .._sync.governor import Governor
    from .._sync.lease import Lease
    from .._sync.spend import Reservation
    from ..config import RetryPolicy

log = logging.getLogger("governor")

#: the operations governed (botocore's names)
OPERATIONS = ("Converse", "ConverseStream", "InvokeModel", "InvokeModelWithResponseStream")
#: what boto3's retry config must say: one attempt, the governor makes the others
NO_RETRIES = {"total_max_attempts": 1, "mode": "standard"}


def bedrock_client(
    governor: Governor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    session: Any = None,
    prices: PriceBook | None = None,
    wait_for_spend: bool = False,
    **options: Any,
) -> Any:
    """``boto3.client("bedrock-runtime", **options)`` with boto3's retries
    off (one attempt); with ``governor=``, every model operation governed
    (see the module docstring). ``session``: a ``boto3.Session`` to build it
    from (default boto3's default session). A ``config=`` of your own is
    kept, its retries replaced; one that asks for more attempts is refused.
    ``prices`` and ``wait_for_spend``: as the governed transport's, for a
    governor with spend budgets."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as error:
        raise ImportError("the 'boto3' package is not installed: pip install 'fleet-governor[bedrock]'") from error
    if governor is None and (any(v is not None for v in (retry, holder, priority, tenant, prices)) or wait_for_spend):
        raise ConfigError(
            "retry=, holder=, priority=, tenant=, prices= and wait_for_spend= are options of the governed client: "
            "pass governor= too"
        )
    config = options.pop("config", None)
    asked = getattr(config, "retries", None) or {}
    attempts = asked.get("total_max_attempts", 1 + asked["max_attempts"] if "max_attempts" in asked else None)
    if attempts not in (None, 1):
        raise ConfigError(
            f"config retries {asked!r}: the governor does the retrying; boto3 retries on top would be "
            "attempts the governor never sees. Build the client yourself if you really want them."
        )
    ours = Config(retries=dict(NO_RETRIES))  # type: ignore[arg-type]
    config = ours if config is None else config.merge(ours)
    client = (session or boto3).client("bedrock-runtime", config=config, **options)
    if governor is not None:
        GovernedSend(
            governor,
            client,
            retry=retry,
            holder=holder,
            priority=priority,
            tenant=tenant,
            prices=prices,
            wait_for_spend=wait_for_spend,
        ).register()
    return client


class GovernedSend:
    """The ``before-send`` handler that governs a Bedrock runtime client's model operations."""

    def __init__(
        self,
        governor: Governor,
        client: Any,
        *,
        retry: RetryPolicy | None = None,
        holder: str | None = None,
        timeout: float | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        prices: PriceBook | None = None,
        wait_for_spend: bool = False,
    ) -> None:
        from .._sync.governor import Governor

        if not isinstance(governor, Governor):
            raise ConfigError(f"the Bedrock runtime client is synchronous: it needs a Governor, got {governor!r}")
        if prices is not None and not isinstance(prices, PriceBook):
            raise ConfigError(f"prices must be a governor.prices.PriceBook or None, got {prices!r}")
        if governor.config.spend:
            prices = prices or governor.config.prices
            if prices is None:
                raise ConfigError(
                    f"governor {governor.name!r} has spend budgets: give GovernorConfig(prices=...) or the "
                    "Bedrock client's prices= (a governor.prices.PriceBook) to price each call"
                )
        #: what prices each call for the spend budgets (None: the governor has none)
        self._prices = prices if governor.config.spend else None
        self._wait_for_spend = bool(wait_for_spend)
        self.governor = governor
        #: what its calls ask for (each with its own estimate)
        self._ask = governor.ask(holder, priority=priority, tenant=tenant)
        self.profile = REGISTRY["bedrock"]
        self._client = client
        self._retry, self._timeout = retry, timeout

    def register(self) -> None:
        events = self._client.meta.events
        for operation in OPERATIONS:
            events.register(f"before-send.bedrock-runtime.{operation}", self)

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        """botocore's before-send: the response to use instead of sending."""
        path = _path(request.url)
        body = request.body
        if hasattr(body, "read"):  # a file-like body: read it once, send the bytes
            body = body.read()
            request.body = body
        raw = body if isinstance(body, bytes) else (body or "").encode()
        ask = self._ask.reserving(self.profile.estimate(raw, path))
        charge = self._charge(raw, path, ask.tokens)
        reservation: Reservation | None = None
        streamed = bool(getattr(request, "stream_output", False))
        read: dict[int, bytes] = {}
        session = self._client._endpoint.http_session

        def send_once() -> Any:
            try:
                response = session.send(request)
            except Exception:
                if charge is not None:
                    charge.broke_off()
                raise
            if streamed and response.status_code < 300:
                return response
            read[id(response)] = response.content  # read whole (botocore keeps it for its parser)
            return response

        def judge(response: Any, lease: Lease) -> Verdict | None:
            if id(response) not in read:
                settlement = _Settlement(self.governor, lease, charge, reservation)
                if charge is not None:
                    charge.handed_over = True
                response.raw = GovernedEventStream(response.raw, settlement, path)
                return None
            body_read = read.pop(id(response))
            if charge is not None:
                charge.answered(response.status_code, response.headers, body_read)
            return judge_response(response.status_code, response.headers, body_read, self.profile, path)

        try:
            if charge is not None:
                reservation = self.governor.spend.reserve(
                    charge.most,
                    tenant=ask.tenant,
                    timeout=self._timeout,
                    wait=self._wait_for_spend,
                    tokens=charge.estimate,
                )
            return retry_call(
                self.governor, send_once, (), {}, ask, retry=self._retry, timeout=self._timeout, judge=judge
            )
        finally:
            if charge is not None and reservation is not None and not charge.handed_over:
                _settle(self.governor, reservation, charge)

    def _charge(self, body: bytes, path: str, estimate: Tokens) -> Charge | None:
        """The call's charge: the model its path names, at the tier it asks for (None: no spend budget)."""
        if self._prices is None:
            return None
        model = _model(path)
        if model is None:
            raise ConfigError(
                f"governor {self.governor.name!r} has spend budgets but the request to {path} names no model: "
                "its price is unknown"
            )
        return Charge(self._prices, self.profile, model, self.profile.requested_tier(body), estimate)


def _path(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path)


def _model(path: str) -> str | None:
    """The model id a runtime path names (``/model/<id>/converse``; an ARN keeps its slashes)."""
    if not path.startswith("/model/"):
        return None
    model = path[len("/model/") :].rsplit("/", 1)[0]
    return model or None


class _Settlement:
    """Reports a stream's outcome and releases its lease, exactly once; settles its charge."""

    def __init__(
        self, governor: Governor, lease: Lease, charge: Charge | None = None, reservation: Reservation | None = None
    ) -> None:
        self._governor, self._lease = governor, lease
        self._charge, self._reservation = charge, reservation
        self._lock = threading.Lock()
        self.done = False

    def claim(self) -> bool:
        with self._lock:
            if self.done:
                return False
            self.done = True
            return True

    def report(
        self,
        outcome: Outcome,
        retry_after: float | None,
        usage: Tokens | None,
        description: str,
        load: bool = True,
        reported: Any = None,
    ) -> None:
        try:
            self._governor.report(outcome, retry_after, self._lease, release=True, usage=usage, load=load)
        except GovernorError as error:  # never fails the caller's stream; the TTL frees the slot
            log.warning("governor %r: could not report a stream (%s): %s", self._governor.name, description, error)
        if self._charge is not None and self._reservation is not None:
            self._charge.streamed(usage, outcome is Outcome.ERROR, reported)
            _settle(self._governor, self._reservation, self._charge)


class GovernedEventStream:
    """The raw body of a ``converse_stream`` answer: passes the bytes on to
    botocore, reads the frames as they pass (the ``metadata`` event's usage,
    an exception event), and reports once: at the stream's end, when it is
    closed, or when it breaks off."""

    def __init__(self, raw: Any, settlement: _Settlement, path: str) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._raw = raw
        self._settlement = settlement
        self._path = path
        self._buffer = EventStreamBuffer()
        self.usage: Tokens | None = None
        #: the ``metadata`` event that said it (its usage priced as a response read whole)
        self.reported: Any = None
        #: the first exception event: (outcome, retry delay, description, whether it is a load signal)
        self.error: tuple[Outcome, float | None, str, bool] | None = None

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        try:
            for chunk in self._raw.stream(*args, **kwargs):
                self._read(chunk)
                yield chunk
        except GeneratorExit:  # the reader let go: close() reports
            raise
        except Exception:
            self._finish(failed=True)
            raise
        self._finish(failed=False)

    def _read(self, chunk: bytes) -> None:
        if self.error is not None:
            return
        try:
            self._buffer.add_data(chunk)
            for message in self._buffer:
                self._frame(message.headers, message.payload)
        except Exception:  # noqa: BLE001 - a frame botocore cannot read: botocore says so to the caller
            self.error = (Outcome.ERROR, None, "an unreadable event-stream frame", True)

    def _frame(self, headers: Any, payload: bytes) -> None:
        kind = headers.get(":message-type")
        if kind == "exception" or kind == "error":
            name = headers.get(":exception-type") or headers.get(":error-code") or "error"
            try:
                body = json.loads(payload)
            except ValueError:
                body = {}
            message = body.get("message") if isinstance(body, dict) else None
            exception = name[:1].upper() + name[1:]
            reading = REGISTRY["bedrock"].classify(None, None, {"__type": exception, "message": message})
            self.error = (reading.kind, reading.retry_after, reading.description, reading.load)
        elif headers.get(":event-type") == "metadata":
            try:
                event = json.loads(payload)
            except ValueError:
                return
            found = REGISTRY["bedrock"].usage(event, self._path)
            if found is not None:
                self.usage, self.reported = found, event

    def _finish(self, failed: bool) -> None:
        if not self._settlement.claim():
            return
        if self.error is not None:
            outcome, retry_after, description, load = self.error
            spent = self.usage if self.usage is not None else (Tokens() if outcome is not Outcome.ERROR else None)
            self._settlement.report(outcome, retry_after, spent, description, load, self.reported)
        elif failed:
            self._settlement.report(Outcome.ERROR, None, self.usage, "the stream broke off", reported=self.reported)
        else:
            self._settlement.report(Outcome.SUCCESS, None, self.usage, "stream", reported=self.reported)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            self._finish(failed=self.usage is None and self.error is None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


__all__ = ["NO_RETRIES", "OPERATIONS", "GovernedEventStream", "GovernedSend", "bedrock_client"]
