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
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("governor")


@dataclass(frozen=True)
class Event:
    """Something that happened to one governor in this process."""

    name: str  #: the governor's name


@dataclass(frozen=True)
class Admitted(Event):
    """A caller of ``acquire()`` got its lease (``try_acquire()``, which
    never waits, emits nothing)."""

    waited_seconds: float  #: from the call of acquire() to the lease: queue, pauses and holds included
    local: bool  #: admitted by the local fallback limit while Redis was unreachable


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
