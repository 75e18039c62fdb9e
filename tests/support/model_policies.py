"""The reference model's policies, one unit each, as in the
POLICIES table of ``lua/lib/policy.lua``: ``seed`` halves, pauses, +1 per
streak; ``adaptive`` starts low, learns the lowest refused in-flight level
(ceiling), holds just below it and probes it; ``fixed`` never moves capacity. Each entry
acts on a :class:`tests.support.model.Model` (its state, config and policy hashes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .model import Model

#: the reason of a policy pause, as lua/lib/policy.lua words it
PAUSE_REASON = "waiting for provider rate-limit recovery"


def probe_cap(C: dict[str, int], total: int) -> int:
    """The longest wait between probes refused at the same level (ms): half a
    window, or the time of 100 attempts at the window's rate, at most two windows."""
    return max(C["probe_ms"], C["window_ms"] // 2, min(2 * C["window_ms"], 100 * C["window_ms"] // total))


class Policy:
    """A policy's entry: its config fields, its state fields, its reset and
    its reactions to a rate-limited attempt and to a success (not paused)."""

    name: ClassVar[str] = ""
    config: ClassVar[tuple[str, ...]] = ()  #: its own fields of the config hash
    state: ClassVar[tuple[str, ...]] = ()  #: its own fields of the policy hash (streak aside)

    def reset(self, m: Model) -> None:
        """A fresh learnt state into the policy hash (capacity is the caller's)."""

    def limited(self, m: Model, rl: int, total: int, fence: int | None) -> None:
        """A rate-limited attempt; rl and total count the window with it."""

    def success(self, m: Model, rl: int, total: int) -> None:
        """A success."""

    def no_news(self, m: Model, waited: int) -> Callable[[], None] | None:
        """Callers wait at a full capacity (the first in line for ``waited``
        ms), nothing refused in the window, no hold: the growth by time due
        now, or None."""
        return None

    def new_max(self, m: Model) -> None:
        """max_capacity changed, not paused: the seed's rule, capacity = max at once."""
        m.S["capacity"] = m.C["max_capacity"]
        m.P["streak"] = 0


class Seed(Policy):
    name = "seed"
    config = (
        "decrease_count",
        "decrease_ratio",
        "ratio_min_attempts",
        "decrease_factor",
        "pause_count",
        "increase_successes",
    )

    def limited(self, m: Model, rl: int, total: int, fence: int | None) -> None:
        S, C = m.S, m.C
        if rl >= C["pause_count"]:
            m.pause("policy", PAUSE_REASON, 0)
        elif rl >= C["decrease_count"] or (total >= C["ratio_min_attempts"] and rl / total > C["decrease_ratio"]):
            m.set_capacity(max(1, math.floor(S["capacity"] * C["decrease_factor"])))

    def success(self, m: Model, rl: int, total: int) -> None:
        S, C, P = m.S, m.C, m.P
        P["streak"] += 1
        if P["streak"] >= C["increase_successes"]:
            P["streak"] = 0
            m.set_capacity(S["capacity"] + 1)


class Adaptive(Policy):
    name = "adaptive"
    config = ("pause_count", "pause_ratio", "increase_successes", "cut_factor", "probe_ms")
    state = ("ceiling", "cut_fence", "probe_at", "probe_step", "probe_wait", "climbing")

    def reset(self, m: Model) -> None:
        m.P.update(ceiling=0, cut_fence=m.S["fence"], probe_at=m.now, probe_step=1, probe_wait=m.C["probe_ms"])
        m.P["climbing"] = 0
        # slow start from the resume level: no blind burst; +1 per success doubles per round
        m.set_capacity(min(m.S["capacity"], m._resume_level()))

    def limited(self, m: Model, rl: int, total: int, fence: int | None) -> None:
        S, C, P = m.S, m.C, m.P
        if fence is not None and fence <= P["cut_fence"]:
            return  # admitted before the last cut: counted in it
        live = m.in_flight()
        level = max(1, min(live, S["capacity"])) if live > 0 else S["capacity"]
        if level <= 1 and rl >= C["pause_count"] and rl >= C["pause_ratio"] * total:
            P["cut_fence"] = S["fence"]
            m.pause("policy", PAUSE_REASON, 0)
            return
        wait = C["probe_ms"]
        probe = P["ceiling"] > 0 and level >= P["ceiling"] and P["climbing"] == 0
        if probe:  # a refused probe
            capacity, ceiling = level - 1, level
            if level == P["ceiling"]:
                wait = min(P["probe_wait"] * 2, probe_cap(C, total))
        elif P["climbing"] == 1 and P["ceiling"] > 0:  # refused again after a cut: lower still
            capacity = math.floor(level * C["cut_factor"])
            ceiling = capacity + 1
        else:  # refused below the ceiling, or the first 429
            capacity, ceiling = math.floor(level * C["cut_factor"]), level
        P.update(ceiling=ceiling, cut_fence=S["fence"], probe_at=m.now, probe_step=1, probe_wait=wait)
        if not probe:  # after a cut a 429 before the next probe means lower still
            P["climbing"] = 1
        m.set_capacity(max(1, capacity))

    def success(self, m: Model, rl: int, total: int) -> None:
        S, C, P = m.S, m.C, m.P
        P["streak"] += 1
        if S["capacity"] >= C["max_capacity"]:
            P["streak"] = 0
            return
        if P["ceiling"] == 0 or S["capacity"] + 1 < P["ceiling"]:
            P["streak"] = 0
            m.set_capacity(S["capacity"] + 1)
        elif P["streak"] >= C["increase_successes"] and self._probe_due(m):
            self._probe(m)

    @staticmethod
    def _probe_due(m: Model, waited: int | None = None) -> bool:
        S, C, P = m.S, m.C, m.P
        wait = P["probe_wait"] if S["capacity"] < P["ceiling"] else C["probe_ms"] // 2
        since = m.now - P["probe_at"] if waited is None else min(m.now - P["probe_at"], waited)
        return since >= wait  # type: ignore[no-any-return]

    @staticmethod
    def _probe(m: Model) -> None:
        S, C, P = m.S, m.C, m.P
        P["streak"] = 0
        P["climbing"] = 0
        if S["capacity"] >= P["ceiling"]:
            P["probe_wait"] = C["probe_ms"]
        P["probe_at"] = m.now
        step = P["probe_step"]
        P["probe_step"] = min(P["probe_step"] * 2, C["max_capacity"])
        m.set_capacity(S["capacity"] + step)

    def no_news(self, m: Model, waited: int) -> Callable[[], None] | None:
        P = m.P
        if P["ceiling"] == 0:  # the slow start without reports: doubles every probe interval at capacity
            if min(m.now - P["probe_at"], waited) < m.C["probe_ms"]:
                return None

            def double() -> None:
                P["probe_at"] = m.now
                m.set_capacity(m.S["capacity"] * 2)

            return double
        if self._probe_due(m, waited):  # a ceiling learnt, nothing refused for a window: a probe by time
            return lambda: self._probe(m)
        return None

    def new_max(self, m: Model) -> None:
        """Keeps what was learnt: a lower max applies at once, a higher one is approached.
        At the max the streak is 0 (a success there leaves it so)."""
        m.S["capacity"] = min(m.S["capacity"], m.C["max_capacity"])
        if m.S["capacity"] >= m.C["max_capacity"]:
            m.P["streak"] = 0


class Fixed(Policy):
    """Capacity stays where the operator put it: nothing is learnt."""

    name = "fixed"

    def success(self, m: Model, rl: int, total: int) -> None:
        m.P["streak"] += 1


#: every policy's unit, by name
POLICIES: dict[str, Policy] = {p.name: p for p in (Adaptive(), Seed(), Fixed())}
#: the base fields of the config hash (governor.protocol.CONFIG)
