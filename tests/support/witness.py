"""An independent witness of who held a lease when, for the fault tests.

Holders in worker processes record themselves in a *control* Redis
(``RPUSH <events> json``, see tests/support/recovery_workers.py): ``entered`` when
``acquire`` returned, ``fence`` when the lease's fence changed (an
adoption), and ``left`` just before it released, or when it saw
``lease.lost`` (holders look every few ms). Times are ``time.monotonic()``,
one clock for every process on the machine. The witness rebuilds each
holder's interval ``[entered, left)`` from those events alone (never from
the governor's status) and measures how many held at once and whether two
holders held the same fence at the same time.

A hold that ended by loss ends at the holder's last look that still found
it live (``held_until``), not at the look that found it lost: the lease
became lost somewhere in between, and the witness gives the library the
benefit of those few ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis


@dataclass
class Hold:
    """One lease as its holder saw it."""

    key: str  #: pid/lease id
    role: str
    start: float
    end: float | None = None
    how: str = "open"  #: 'released', 'lost', or 'open' (still held when the events were read)
    #: (from when, fence): the fence of the lease from that time on
    fences: list[tuple[float, int]] = field(default_factory=list)

    def segments(self, until: float) -> list[tuple[float, float, int]]:
        """(start, end, fence) pieces of the hold, one per fence it had."""
        end = self.end if self.end is not None else until
        out = []
        for i, (since, fence) in enumerate(self.fences):
            stop = self.fences[i + 1][0] if i + 1 < len(self.fences) else end
            if stop > since:
                out.append((since, min(stop, end), fence))
        return out


@dataclass
class Overlap:
    """What the witness saw, against ``capacity``."""

    peak: int  #: most holders at once
    peak_at: float  #: when the peak began (monotonic)
    excess: float  #: seconds during which more than ``capacity`` held
    first_excess: float | None  #: when the first excess began
    #: (fence, key, key): two holders that held one fence at the same time
    shared: list[tuple[int, str, str]]
    holds: int  #: holds seen in all

    def __str__(self) -> str:
        return (
            f"peak {self.peak} holders, {self.excess:.3f} s above capacity, "
            f"{len(self.shared)} fence(s) held twice at once, {self.holds} holds"
        )


def read_events(control: redis.Redis, events: str) -> list[dict[str, Any]]:
    """Every event recorded under ``events`` so far, in the order recorded."""
    return [json.loads(raw) for raw in control.lrange(events, 0, -1)]


def holds_from(events: list[dict[str, Any]]) -> list[Hold]:
    """Each lease's hold, rebuilt from its entered / fence / left events."""
    holds: dict[str, Hold] = {}
    for event in sorted((e for e in events if e.get("kind") in ("entered", "fence", "left")), key=_when):
        key = event["key"]
        if event["kind"] == "entered":
            holds[key] = Hold(key, event.get("role", ""), event["t"], fences=[(event["t"], int(event["fence"]))])
            continue
        hold = holds.get(key)
        if hold is None or hold.end is not None:
            continue
        if event["kind"] == "fence":
            hold.fences.append((event["t"], int(event["fence"])))
        else:
            hold.how = event["how"]
            hold.end = event["held_until"] if event["how"] == "lost" else event["t"]
    return list(holds.values())


def _when(event: dict[str, Any]) -> float:
    return float(event["held_until"] if event.get("kind") == "left" and event.get("how") == "lost" else event["t"])


def overlap(holds: list[Hold], capacity: int, until: float) -> Overlap:
    """Sweep the holds' ``[start, end)`` intervals (open ones end at ``until``)."""
    edges: list[tuple[float, int]] = []
    for hold in holds:
        end = hold.end if hold.end is not None else until
        if end > hold.start:
            edges += [(hold.start, 1), (end, -1)]
    edges.sort()  # at one instant a leave (-1) sorts before an entry: intervals are half-open
    peak, peak_at, excess, first_excess = 0, 0.0, 0.0, None
    current, over_since = 0, None
    for when, step in edges:
        current += step
        if current > peak:
            peak, peak_at = current, when
        if current > capacity and over_since is None:
            over_since = when
            first_excess = when if first_excess is None else first_excess
        elif current <= capacity and over_since is not None:
            excess += when - over_since
            over_since = None
    return Overlap(peak, peak_at, excess, first_excess, shared_fences(holds, until), len(holds))


def shared_fences(holds: list[Hold], until: float) -> list[tuple[int, str, str]]:
    """Fences two different holders held at the same time."""
    by_fence: dict[int, list[tuple[float, float, str]]] = {}
    for hold in holds:
        for start, end, fence in hold.segments(until):
            by_fence.setdefault(fence, []).append((start, end, hold.key))
    shared = []
    for fence, pieces in by_fence.items():
        for i, (s1, e1, k1) in enumerate(pieces):
            for s2, e2, k2 in pieces[i + 1 :]:
                if k1 != k2 and max(s1, s2) < min(e1, e2):
                    shared.append((fence, k1, k2))
    return shared


def witness(control: redis.Redis, events: str, capacity: int, until: float) -> Overlap:
    """Read the events and measure them (see :func:`overlap`)."""
    return overlap(holds_from(read_events(control, events)), capacity, until)
