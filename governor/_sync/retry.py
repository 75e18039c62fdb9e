"""GENERATED from governor/_async/retry.py by scripts/unasync.py; do not edit.

Change the asyncio source and run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .. import events
from ..backoff import RETRY_AFTER_LIMIT, retry_wait
from ..budgets import Tokens
from ..classify import Classification, Classifier, Verdict, default_classifier
from ..config import RetryPolicy
from ..core import Ask, Outcome
from ..errors import AcquireTimeout, ConfigError, GovernorError, LeaseLost, QuotaExhausted
from ..headers import undated_retry_at
from ..profiles import http_parts, usage_of
from ._compat import sleep

if TYPE_CHECKING:
    from .governor import Governor
    from .lease import Lease

log = logging.getLogger("governor")
T = TypeVar("T")
Args = tuple[Any, ...]
Kwargs = dict[str, Any]
#: judges a call's result: a Verdict to report, or None when the result took
#: the lease over (a stream that reports and releases when it ends)
Judge = Callable[[Any, Any], Verdict | None]

NEEDS = "a plain function (coroutine functions need the asyncio facade)"


#: the retry policy of a call given none (frozen, made once)
DEFAULT_RETRY = RetryPolicy()


class _Misuse(ConfigError):
    """A function of the wrong kind for this facade: a usage error, raised
    as it is and never reported as a provider outcome."""


def retry_call(
    governor: Governor,
    fn: Callable[..., T],
    args: Args,
    kwargs: Kwargs,
    ask: Ask,
    *,
    classify: Classifier | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    judge: Judge | None = None,
    lease: Lease | None = None,
) -> T:
    """``governor.call(fn, *args, **kwargs)``: see the module docstring. Every
    attempt asks for a lease with ``ask`` (``governor.ask(...)``), but the
    first one when ``lease`` is given: one taken ahead (a lease carried into
    the call, governor/_exchange.py ``Carried``), reported and released as
    that attempt's own."""
    if not callable(fn):
        raise ConfigError(f"call() needs a callable, got {fn!r}", name=governor.name)
    if classify is not None and not callable(classify):
        raise ConfigError(f"classify must be a callable or None, got {classify!r}", name=governor.name)
    if judge is not None and not callable(judge):
        raise ConfigError(f"judge must be a callable or None, got {judge!r}", name=governor.name)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a RetryPolicy or None, got {retry!r}", name=governor.name)
    policy = retry if retry is not None else DEFAULT_RETRY
    classifier = classify if classify is not None else default_classifier
    judge_result = judge if judge is not None else default_judge
    deadline = None if policy.deadline is None else time.monotonic() + policy.deadline
    last: _Last[T] | None = None
    ahead = lease
    for attempt in range(1, policy.max_attempts + 1):
        wait_timeout, cut_by_deadline = _queue_timeout(timeout, deadline)
        try:
            if ahead is not None:
                lease, ahead = ahead, None
            else:
                lease = governor._acquire(wait_timeout, ask)
        except AcquireTimeout:
            if last is None or not cut_by_deadline:
                raise
            return last.give()  # the deadline ran out in the queue: the provider's last answer is the news
        handed_over = False
        try:
            events.emit(events.AttemptStarted(governor.name, attempt, lease.fence))
            try:
                result = _invoke(governor, fn, args, kwargs)
            except _Misuse:
                raise
            except Exception as error:
                verdict = _classify(governor, classifier, error)
                if verdict.kind is Outcome.QUOTA_EXHAUSTED:
                    comes_back = None if verdict.until is None else max(0.0, verdict.until - time.time())
                    _report(governor, lease, Outcome.QUOTA_EXHAUSTED, comes_back)
                    raise QuotaExhausted(
                        f"governor {governor.name!r}: the provider says the quota or spend limit is used up "
                        f"({verdict.description}); {_quota_advice(verdict.until)}",
                        name=governor.name,
                        until=verdict.until,
                    ) from error
                if verdict.kind is not Outcome.RATE_LIMITED:
                    _report(governor, lease, Outcome.ERROR)
                    raise
                hint = _by_fleet_clock(governor, verdict.retry_after, http_parts(error)[1])
                retry_after = _retry_after(hint, policy)
                _report(governor, lease, Outcome.RATE_LIMITED, retry_after, load=verdict.load)
                last, description = _Last(error=error), verdict.description
            else:
                judged = _judge(governor, judge_result, result, lease)
                if judged is None:  # the result took the lease over (a stream): it reports and releases
                    handed_over = True
                    return result
                hint = judged.retry_after
                if judged.outcome is Outcome.RATE_LIMITED:
                    hint = _by_fleet_clock(governor, hint, judged.headers)
                retry_after = _retry_after(hint, policy)
                if judged.outcome is Outcome.QUOTA_EXHAUSTED:  # a wait for the quota's reset, never capped
                    retry_after = None if judged.until is None else max(0.0, judged.until - time.time())
                _report(
                    governor,
                    lease,
                    judged.outcome,
                    retry_after,
                    judged.usage,
                    judged.headers,
                    judged.refusals_count,
                    load=judged.load,
                )
                if judged.outcome is not Outcome.RATE_LIMITED:
                    return result
                last, description = _Last(result=result, discard=judged.discard), judged.description
        finally:
            events.emit(events.AttemptEnded(governor.name, handed_over))
            if not handed_over:
                _release(governor, lease)  # its call to Redis is shielded
        # Rate-limited: wait (holding no lease) and try again, within the bounds.
        assert last is not None
        if attempt == policy.max_attempts:
            log.info("governor %r: %s; giving up after %d attempts", governor.name, description, attempt)
            return last.give()
        wait = retry_wait(
            attempt, retry_after, base=policy.base, cap=policy.cap, max_retry_after=policy.max_retry_after
        )
        if deadline is not None and time.monotonic() + wait >= deadline:
            log.info("governor %r: %s; the retry deadline comes before the next try", governor.name, description)
            return last.give()
        log.info(
            "governor %r: %s; retry %d of %d in %.3f s",
            governor.name,
            description,
            attempt,
            policy.max_attempts - 1,
            wait,
        )
        last.let_go()
        events.emit(events.Retrying(governor.name, attempt, wait))
        sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover


class _Last(Generic[T]):
    """The last rate-limited attempt's answer: an error, re-raised when the
    retrying ends, or a result (a 429 response), returned then."""

    def __init__(
        self, error: Exception | None = None, result: T | None = None, discard: Callable[[], Any] | None = None
    ) -> None:
        self.error, self.result, self.discard = error, result, discard

    def give(self) -> T:
        if self.error is not None:
            raise self.error
        return cast(T, self.result)

    def let_go(self) -> None:
        """Before a retry: the result is let go of (it may still be returned
        if the retrying then ends, so a discard must leave it readable)."""
        if self.discard is None:
            return
        try:
            done = self.discard()
            if inspect.isawaitable(done):
                pass
        except Exception:  # letting go of a refused answer never fails the call
            log.warning("governor: discarding a refused result failed", exc_info=True)
        self.discard = None


def default_judge(result: Any, lease: Any) -> Verdict:
    """call()'s judge: every result a success, with the usage an SDK result
    (or its JSON) carries (governor/profiles/ usage_of)."""
    return Verdict(Outcome.SUCCESS, usage=usage_of(result))


def retry_decorator(
    governor: Governor,
    ask: Ask,
    *,
    classify: Classifier | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``@governor.limit(...)``: every call of the decorated function goes
    through :func:`retry_call` with these options."""
    if classify is not None and not callable(classify):
        raise ConfigError(f"classify must be a callable or None, got {classify!r}", name=governor.name)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a RetryPolicy or None, got {retry!r}", name=governor.name)

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        if not callable(fn) or _wrong_kind(fn):
            raise ConfigError(f"{type(governor).__name__}.limit() decorates {NEEDS}; got {fn!r}", name=governor.name)

        @functools.wraps(fn)
        def limited(*args: Any, **kwargs: Any) -> T:
            return retry_call(governor, fn, args, kwargs, ask, classify=classify, retry=retry, timeout=timeout)

        return limited

    return decorate


def _wrong_kind(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` certainly cannot run under this facade (each call checks again)."""
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _invoke(governor: Governor, fn: Callable[..., T], args: Args, kwargs: Kwargs) -> T:
    """Call ``fn``; a value of the wrong kind (a coroutine for the sync
    facade, a plain value for the asyncio one) is a usage error."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it, or Python warns about it
        raise _Misuse(
            f"{type(governor).__name__}.call() needs {NEEDS}; {fn!r} returned {type(value).__name__}",
            name=governor.name,
        )
    return value


def _classify(governor: Governor, classifier: Classifier, error: Exception) -> Classification:
    verdict = classifier(error)
    if not isinstance(verdict, Classification):
        raise ConfigError(
            f"governor {governor.name!r}: classify must return a Classification, got {verdict!r}",
            name=governor.name,
        ) from error
    return verdict


def _by_fleet_clock(governor: Governor, hint: float | None, headers: Any) -> float | None:
    """A Retry-After given as an HTTP date with no ``Date`` header to measure
    it against: the seconds until then by the fleet's clock (Redis ``TIME``,
    one round trip in that rare case), never this host's; any other hint as
    it is. Redis unreachable: the hint as read (the report cannot hold the
    fleet then either)."""
    when = undated_retry_at(headers)
    if when is None:
        return hint
    try:
        now = governor._fleet_time()
    except Exception as error:  # noqa: BLE001 - the wait of this caller alone, as read
        log.warning("governor %r: no clock from Redis for an HTTP-date Retry-After (%s)", governor.name, error)
        return hint
    return min(RETRY_AFTER_LIMIT, max(0.0, when - now))


def _retry_after(retry_after: float | None, policy: RetryPolicy) -> float | None:
    """The provider's Retry-After, cut to the policy's maximum: what this
    caller waits and what the fleet is asked to hold for."""
    if retry_after is None:
        return None
    return min(retry_after, policy.max_retry_after)


def _judge(governor: Governor, judge: Judge, result: Any, lease: Lease) -> Verdict | None:
    verdict = judge(result, lease)
    if verdict is not None and not isinstance(verdict, Verdict):
        raise ConfigError(
            f"governor {governor.name!r}: judge must return a Verdict or None, got {verdict!r}", name=governor.name
        )
    return verdict


def _quota_advice(until: float | None) -> str:
    """What to do about a used-up quota: wait for its reset, or act."""
    if until is None:
        return "not retried, an operator must act"
    moment = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until))
    return f"not retried: it comes back at {moment} (the provider's daily reset); calls before then fail the same way"


def _queue_timeout(timeout: float | None, deadline: float | None) -> tuple[float | None, bool]:
    """The acquire timeout of one attempt, and whether the deadline set it."""
    if deadline is None:
        return timeout, False
    remaining = max(0.0, deadline - time.monotonic())
    if timeout is None or remaining < timeout:
        return remaining, True
    return timeout, False


def _report(
    governor: Governor,
    lease: Lease,
    outcome: Outcome,
    retry_after: float | None = None,
    usage: Tokens | None = None,
    headers: Mapping[str, str] | None = None,
    refusals_count: bool = True,
    *,
    load: bool = True,
) -> None:
    """Report one attempt and release its lease in the same round trip; a
    failure to report is logged, never raised (the TTL frees the slot)."""
    settled = usage or Tokens()
    events.emit(events.Reported(governor.name, outcome.name.lower(), retry_after, settled.input, settled.output))
    try:
        governor.report(
            outcome,
            retry_after=retry_after,
            lease=lease,
            release=True,
            usage=usage,
            headers=headers,
            refusals_count=refusals_count,
            load=load,
        )
    except LeaseLost as error:
        log.warning("governor %r: %s outcome not counted: %s", governor.name, outcome.name.lower(), error)
    except GovernorError as error:
        log.warning("governor %r: could not report %s: %s", governor.name, outcome.name.lower(), error)


def _release(governor: Governor, lease: Lease) -> bool:
    """Release; False if Redis could not be told. Never raises: the
    provider's answer matters more, and the lease's TTL frees the slot."""
    try:
        lease.release()
    except GovernorError as error:
        log.warning("governor %r: release of lease %s failed (%s); its TTL frees it", governor.name, lease.id, error)
        return False
    return True
