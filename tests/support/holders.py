"""An in-process recorder of holds for the witness (tests/support/witness.py).

The fault tests with worker processes report to a control Redis; the tests
of one process record here instead, in the same event shape, so the same
witness measures both. ``entered`` when acquire returned, ``fence`` when a
lease's fence changed (an adoption), ``left`` when it was released, or
when the lease was seen lost (a watcher thread looks every few ms; the
hold ends at the last look that still found it live). A holder the test
only *models* (one cut off from Redis, which believes in its leases until
their TTL runs out) is recorded with :meth:`believed`.

``now`` is the clock of the events: ``time.monotonic`` by default, a
test's FakeClock when the governors run on one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .witness import Overlap, holds_from, overlap


class Holders:
    """Holds recorded as witness events, with a watcher for fences and losses."""

    def __init__(self, now: Callable[[], float] = time.monotonic, interval: float = 0.003) -> None:
        self.now = now
        self.events: list[dict[str, Any]] = []
        self._open: dict[str, tuple[Any, str, int, float]] = {}  # key -> (lease, role, fence, last seen live)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _key(self, lease: Any) -> str:
        return f"{id(lease)}/{lease.id}"

    def entered(self, lease: Any, role: str = "") -> Any:
        t = self.now()
        with self._lock:
            self.events.append({"kind": "entered", "key": self._key(lease), "role": role, "t": t, "fence": lease.fence})
            self._open[self._key(lease)] = (lease, role, lease.fence, t)
        return lease

    def left(self, lease: Any) -> None:
        """Just before ``lease`` is released."""
        self._look()
        with self._lock:
            entry = self._open.pop(self._key(lease), None)
            if entry is not None:
                t = self.now()
                self.events.append(
                    {"kind": "left", "key": self._key(lease), "how": "released", "t": t, "held_until": t}
                )

    def believed(self, key: str, fence: int, start: float, end: float, role: str = "cut-off") -> None:
        """A modelled holder: it held ``fence`` from ``start`` until ``end`` (its TTL ran out)."""
        with self._lock:
            self.events.append({"kind": "entered", "key": key, "role": role, "t": start, "fence": fence})
            self.events.append({"kind": "left", "key": key, "how": "released", "t": end, "held_until": end})

    def _look(self) -> None:
        t = self.now()
        with self._lock:
            for key, (lease, role, fence, seen) in list(self._open.items()):
                if lease.lost:
                    self._open.pop(key)
                    self.events.append({"kind": "left", "key": key, "how": "lost", "t": t, "held_until": seen})
                    continue
                if lease.fence != fence:
                    self.events.append({"kind": "fence", "key": key, "t": t, "fence": lease.fence})
                self._open[key] = (lease, role, lease.fence, t)

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            self._look()

    def held(self) -> int:
        """Holds open now."""
        self._look()
        with self._lock:
            return len(self._open)

    def witness(self, capacity: int, until: float | None = None) -> Overlap:
        self._look()
        with self._lock:
            events = list(self.events)
        return overlap(holds_from(events), capacity, self.now() if until is None else until)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
