"""GENERATED from governor/_async/transport.py by scripts/unasync.py; do not edit.

Change the asyncio source and run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from .._exchange import (
    Charge,
    Estimator,
    _check_library,
    _error_base,
    _library,
    _module,
    _read_body,
    asks_for_stream,
    carried_lease,
    check_options,
    is_model_request,
    is_stream,
    judge_response,
    log,
    report_in_loop,
    report_in_thread,  # noqa: F401 - the sync twin's
    request_ask,
    request_model,
    sdk_twin,
    stream_class,
    stream_outcome,
    tiered,
)
from ..classify import Verdict
from ..config import RetryPolicy
from ..core import Ask
from ..errors import ConfigError, GovernorError
from ..estimate import estimate_request
from ..prices import PriceBook
from ..profiles import Profile
from ..profiles import profile as find_profile
from ..streams import StreamUsage
from .governor import Governor
from .lease import Lease
from .retry import retry_call
from .spend import Reservation

__all__ = ["GovernedTransport"]


class GovernedTransport:
    """An httpx (or httpx2) transport whose model requests are governed by ``governor``.

    ``transport``: the transport that sends (default: an ``HTTPTransport()``
    of the client's library). ``retry``: the retry policy (default
    ``RetryPolicy()``, as ``call()``). ``holder``: the label of the leases.
    ``timeout``: seconds a request may wait in the queue for its lease
    (None: as long as it takes), as ``call(timeout=)``. ``estimate``: the
    token estimate of a request body, ``(body, path) -> Tokens`` (default
    the profile's, else :func:`~governor.estimate.estimate_request`).
    ``priority`` and ``tenant``: where the leases wait (``acquire``; a
    request's ``X-Governor-Priority`` and ``X-Governor-Tenant`` headers win).
    ``profile``: the provider's profile (a name of
    :data:`governor.profiles.REGISTRY` or a Profile): which requests are
    model calls, how errors and usage read, the default estimate; None:
    OpenAI's and Anthropic's endpoints, each error read in its body's shape.
    ``errors``: the SDK's base error class, for an SDK that wraps every
    exception its transport raises (anthropic): governor errors are then
    raised as :func:`~governor.transport.sdk_twin` s, instances of both classes.
    ``ask``: instead of ``holder``, ``priority`` and ``tenant``, the ask they
    make (``governor.ask(...)``), built once for several transports.
    ``prices``: the PriceBook that prices each call for the governor's spend
    budgets (``GovernorConfig.spend``; default ``GovernorConfig.prices``): the most a request
    can cost is reserved before it is sent, its charge settled when it is
    answered (a stream's when it ends); a request no budget can afford
    raises SpendExhausted at once, unless ``wait_for_spend`` and its budget
    resets within ``timeout``.
    """

    def __init__(
        self,
        governor: Governor,
        transport: Any | None = None,
        *,
        retry: RetryPolicy | None = None,
        holder: str | None = None,
        timeout: float | None = None,
        estimate: Estimator | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        profile: str | Profile | None = None,
        errors: type[BaseException] | None = None,
        ask: Ask | None = None,
        prices: PriceBook | None = None,
        wait_for_spend: bool = False,
    ) -> None:
        chosen = None if profile is None else find_profile(profile)
        if prices is not None and not isinstance(prices, PriceBook):
            raise ConfigError(f"prices must be a governor.prices.PriceBook or None, got {prices!r}")
        if isinstance(governor, Governor) and governor.config.spend:
            prices = prices or governor.config.prices
            if prices is None:
                raise ConfigError(
                    f"governor {governor.name!r} has spend budgets: give GovernorConfig(prices=...) or the "
                    "transport's prices= (a governor.prices.PriceBook) to price each call"
                )
        if estimate is None:
            estimate = estimate_request if chosen is None else chosen.estimate
        if not isinstance(governor, Governor):
            raise ConfigError(f"{type(self).__name__} needs a {Governor.__name__}, got {governor!r}")
        check_options(
            transport=transport, method="handle_request", retry=retry, timeout=timeout, estimate=estimate
        )
        self.governor = governor
        if ask is not None and (not isinstance(ask, Ask) or (holder, priority, tenant) != (None, None, None)):
            raise ConfigError(f"give holder=, priority= and tenant=, or an Ask (governor.ask(...)), got ask={ask!r}")
        #: what its requests ask for (each with its own estimate, and its headers' class and tenant)
        self._ask = governor.ask(holder, priority=priority, tenant=tenant) if ask is None else ask
        self._transport = transport
        self._retry = retry
        self._timeout = timeout
        self._estimate = estimate
        self.profile = chosen
        self._errors = _error_base(errors)
        self._lock = threading.Lock()
        self._prices = prices if governor.config.spend else None
        self._wait_for_spend = bool(wait_for_spend)

    def _inner(self, request: Any) -> Any:
        if self._transport is None:
            with self._lock:
                if self._transport is None:
                    self._transport = _module(_library(request) or "httpx").HTTPTransport()
        _check_library(request, self._transport)
        return self._transport

    def handle_request(self, request: Any) -> Any:
        inner = self._inner(request)
        if not is_model_request(request.method, request.url.path, self.profile):
            return inner.handle_request(request)
        ask = request_ask(request, self._ask, self.governor)
        body = request.read()
        ask = ask.reserving(tiered(self._estimate(body, request.url.path), body, request.url.path, self.profile))
        charge = self._charge(body, request.url.path, ask)
        reservation: Reservation | None = None
        asked = asks_for_stream(body)
        read: dict[int, bytes | None] = {}  # id(response) -> its decoded body, for the responses read whole
        loop = None

        def send_once() -> Any:
            try:
                response = inner.handle_request(request)
            except Exception:
                if charge is not None:
                    charge.broke_off()
                raise
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
                settlement = _Settlement(self.governor, lease, response.headers, loop, charge, reservation)
                if charge is not None:
                    charge.handed_over = True
                _hand_over(response, settlement)
                return None
            body_read = read.pop(id(response))
            if charge is not None:
                charge.answered(response.status_code, response.headers, body_read)
            path, asked = request.url.path, ask.tokens.apart
            return judge_response(response.status_code, response.headers, body_read, self.profile, path, asked)

        ahead = carried_lease(self.governor)  # a limiter's lease, for the first attempt
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
                self.governor,
                send_once,
                (),
                {},
                ask,
                retry=self._retry,
                timeout=self._timeout,
                judge=judge,
                lease=ahead,
            )
        except GovernorError as error:
            if self._errors is None:
                raise
            raise sdk_twin(error, self._errors) from error
        finally:
            if charge is not None and reservation is not None and not charge.handed_over:
                _settle(self.governor, reservation, charge)

    def _charge(self, body: bytes, path: str, ask: Ask) -> Charge | None:
        """The request's charge, priced at the tier it asks for (None: no spend budget)."""
        if self._prices is None:
            return None
        # (no profile: OpenAI's and Anthropic's endpoints, told by the path)
        profile = self.profile or find_profile("anthropic" if path.rstrip("/").endswith("messages") else "openai")
        model = request_model(body, path)
        if model is None:
            raise ConfigError(
                f"governor {self.governor.name!r} has spend budgets but the request to {path} names no model: "
                "its price is unknown"
            )
        return Charge(self._prices, profile, model, profile.requested_tier(body), ask.tokens)

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


class _Settlement:
    """Reports a streamed call's outcome and releases its lease, exactly once.
    ``loop``: where the report of an abandoned stream runs (asyncio only)."""

    def __init__(
        self,
        governor: Governor,
        lease: Lease,
        headers: Any,
        loop: asyncio.AbstractEventLoop | None,
        charge: Charge | None = None,
        reservation: Reservation | None = None,
    ) -> None:
        self._governor, self._lease, self._headers, self.loop = governor, lease, headers, loop
        self._charge, self._reservation = charge, reservation
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
            self._governor.report(
                outcome,
                retry_after,
                self._lease,
                release=True,
                usage=spent,
                headers=self._headers,
                load=usage.error is None or usage.error.load,
            )
        except GovernorError as error:  # never fails the caller's stream; the TTL frees the slot
            log.warning("governor %r: could not report a stream (%s): %s", self._governor.name, description, error)
        if self._charge is not None and self._reservation is not None:
            self._charge.streamed(spent, failed, usage.reported, self._headers)
            _settle(self._governor, self._reservation, self._charge)


def _settle(governor: Governor, reservation: Reservation, charge: Charge) -> None:
    """Settle a call's charge; a failure is logged (the reservation is then kept as spent when it expires)."""
    try:
        governor.spend.settle(reservation, charge.charged, tokens=charge.tokens)
    except GovernorError as error:
        log.warning("governor %r: could not settle a call's spend (kept as reserved): %s", governor.name, error)


class _GovernedStream:
    """The body of a streamed response: passes the bytes on, reads usage, reports once at the end."""

    def __init__(self, inner: Any, settlement: _Settlement) -> None:
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
        # Abandoned unclosed: reported later, never from inside the collector.
        settlement = getattr(self, "_settlement", None)
        if settlement is None or not settlement.claim():
            return
        self._usage.finish()
        report_in_thread(settlement.report, self._usage, self._failed)


def _hand_over(response: Any, settlement: _Settlement) -> None:
    """The response's body becomes a governed stream that reports through ``settlement``."""
    cls = stream_class(_GovernedStream, _library(response) or "httpx", False)
    response.stream = cls(response.stream, settlement)
