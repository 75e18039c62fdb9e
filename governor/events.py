"""What the facades tell listeners: typed events and a registry of subscribers.

The facades emit events here and know nothing of who listens; a listener
(governor.metrics, a user's own counters, a test) subscribes here. So the
facades never import their listeners, and this module imports neither: it
depends on the standard library only.

A subscriber is called synchronously, once per event, in the thread (or on
the event loop) of the caller the event is about, so it must be quick and
must not block. An exception it raises is logged (logger ``governor``) and
never reaches the caller, nor keeps the other subscribers from the event.
Only a BaseException that is not an Exception (KeyboardInterrupt,
SystemExit, a cancellation) goes through, as it would from any other line
of the caller's.

Subscribing and unsubscribing are thread-safe; emitting takes no lock (it
reads an immutable snapshot of the subscribers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("governor")


@dataclass(frozen=True)
class Event:
    """Something that happened to one governor in this process."""

    name: str  #: the governor's name


@dataclass(frozen=True)
class AcquireStarted(Event):
    """A caller began ``acquire()`` (its arguments checked). Each one ends
    with exactly one :class:`Admitted` or :class:`AcquireFailed`, emitted
    in the same thread or task."""

    priority: str  #: the class it waits in
    tenant: str  #: the tenant whose share it counts in
    tokens: int  #: the tokens it reserves from the budgets (input + output estimate)
    holder: str  #: the holder's label


@dataclass(frozen=True)
class Waiting(Event):
    """The caller of the acquire under way was queued, or told its place
    again: the admission rule's reason (status ``blocked`` words) and the
    waiters ahead (-1: parked at its tenant's cap)."""

    reason: str
    position: int


@dataclass(frozen=True)
class Admitted(Event):
    """A caller of ``acquire()`` got its lease (``try_acquire()``, which
    never waits, emits nothing)."""

    waited_seconds: float  #: from the call of acquire() to the lease: queue, pauses and holds included
    local: bool  #: admitted by the local fallback limit while Redis was unreachable
    fence: int = 0  #: the lease's fencing token (0: a local lease)


@dataclass(frozen=True)
class AcquireFailed(Event):
    """A caller of ``acquire()`` got no lease: it timed out, was cancelled,
    or the call failed (Redis unreachable, a bad cost, ...)."""

    waited_seconds: float
    error: BaseException  #: what the caller sees raised

    @property
    def outcome(self) -> str:
        """``timeout``, ``cancelled`` or ``error``: a low-cardinality label."""
        kind = type(self.error).__name__
        if kind == "AcquireTimeout":
            return "timeout"
        if kind == "CancelledError" or not isinstance(self.error, Exception):
            return "cancelled"
        return "error"


@dataclass(frozen=True)
class AttemptStarted(Event):
    """``call()`` (and the governed clients, which go through it) admitted an
    attempt and is about to run the provider call. Ends with one
    :class:`AttemptEnded` in the same thread or task."""

    attempt: int  #: 1 for the first try
    fence: int  #: the lease's fence


@dataclass(frozen=True)
class Reported(Event):
    """``call()`` reported an attempt's outcome (and released its lease)."""

    outcome: str  #: the Outcome's name, lower case: success, rate_limited, error, quota_exhausted
    retry_after: float | None  #: seconds the fleet was asked to hold (rate-limited only; None: none)
    input_tokens: int  #: the usage settled (0 when the response said none)
    output_tokens: int


@dataclass(frozen=True)
class AttemptEnded(Event):
    """The provider call of an attempt returned or raised (its lease released),
    or its result (a stream) took the lease over (``handed_over``)."""

    handed_over: bool


@dataclass(frozen=True)
class Retrying(Event):
    """``call()`` waits ``wait_seconds`` (holding no lease) before attempt ``attempt + 1``."""

    attempt: int
    wait_seconds: float


@dataclass(frozen=True)
class MalformedHeaders(Event):
    """A report carried rate-limit headers that could not be read
    (governor/headers.py): they changed nothing and are counted."""

    headers: tuple[str, ...]  #: their names, lower case


Subscriber = Callable[[Event], None]
"""Called with every event emitted in this process; picks its own with isinstance."""

_lock = threading.Lock()
_subscribers: tuple[Subscriber, ...] = ()


def subscribe(subscriber: Subscriber) -> None:
    """Call ``subscriber`` with every event from now on (once, however often
    it is subscribed)."""
    global _subscribers
    if not callable(subscriber):
        raise TypeError(f"a subscriber must be callable, got {subscriber!r}")
    with _lock:
        if subscriber not in _subscribers:
            _subscribers = (*_subscribers, subscriber)


def unsubscribe(subscriber: Subscriber) -> None:
    """Stop calling ``subscriber`` (nothing happens if it was not subscribed)."""
    global _subscribers
    with _lock:
        _subscribers = tuple(s for s in _subscribers if s != subscriber)


def emit(event: Event) -> None:
    """Hand ``event`` to every subscriber, in the order they subscribed."""
    for subscriber in _subscribers:
        try:
            subscriber(event)
        except Exception:  # a listener's failure is never the caller's (logged with its traceback)
            log.exception("governor %r: event subscriber %r failed on %r", event.name, subscriber, event)


@contextmanager
def acquiring(name: str, ask: Any) -> Iterator[float]:
    """Around an acquire's wait: emits :class:`AcquireStarted` (from ``ask``,
    the facade's checked arguments: holder, tokens, place) and yields the
    start (time.monotonic()); emits :class:`AcquireFailed` if the block raises.
    The facade emits :class:`Admitted` itself once the lease is in hand."""
    place = ask.place
    emit(AcquireStarted(name, place.priority, place.tenant, ask.tokens.total, ask.holder))
    started = time.monotonic()
    try:
        yield started
    except BaseException as error:
        emit(AcquireFailed(name, time.monotonic() - started, error))
        raise


def waiting(name: str, reason: str, position: int) -> tuple[str, int]:
    """Emit :class:`Waiting` for the acquire under way; returns (reason, position)
    for the facade to keep."""
    emit(Waiting(name, reason, position))
    return reason, position
