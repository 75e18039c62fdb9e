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


#: the highest refusal share of the window read as the provider's background
NOISE_MAX = 0.2
#: how long after a cut a refusal may still undo it, in windows
VERDICT_WINDOWS = 4


def explained(share: float, n: int) -> float:
    """The refusals among ``n`` attempts a background ``share`` explains: its
    share of them and two standard deviations."""
    expected = share * n
    return expected + 2 * math.sqrt(expected)


class Policy:
    """A policy's entry: its config fields, its state fields, its reset and
    its reactions to a rate-limited attempt and to a success (not paused)."""

    name: ClassVar[str] = ""
    config: ClassVar[tuple[str, ...]] = ()  #: its own fields of the config hash
    state: ClassVar[tuple[str, ...]] = ()  #: its own fields of the policy hash (streak aside)
    later: ClassVar[tuple[str, ...]] = ()  #: fields added later: absent as 0

    def reset(self, m: Model) -> None:
        """A fresh learnt state into the policy hash (capacity is the caller's)."""

    def limited(self, m: Model, rl: int, total: int, fence: int | None) -> bool | None:
        """A rate-limited attempt; rl and total count the window with it. False:
        it costs the call alone (its Retry-After holds only its caller)."""
        return None

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
    later = (
        "background_ppm",
        "cut_from",
        "cut_ceiling",
        "cut_level",
        "cut_at",
        "cut_share_ppm",
        "round_fence",
        "round_refused",
        "round_at",
        "cut_seq",
        "cut_refused",
    )

    def reset(self, m: Model) -> None:
        m.P.update(ceiling=0, cut_fence=m.S["fence"], probe_at=m.now, probe_step=1, probe_wait=m.C["probe_ms"])
        m.P["climbing"] = 0
        m.P.update({name: 0 for name in self.later})
        # slow start from the resume level: no blind burst; +1 per success doubles per round
        m.set_capacity(min(m.S["capacity"], m._resume_level()))

    def limited(self, m: Model, rl: int, total: int, fence: int | None) -> bool:
        S, C, P = m.S, m.C, m.P
        for name in self.later:  # absent as 0 in a state an older client created
            P.setdefault(name, 0)
        live = m.in_flight()
        level = max(1, min(live, S["capacity"])) if live > 0 else S["capacity"]
        if fence is not None and fence <= P["cut_fence"]:
            # one of the round in flight at the last cut: counted in it, unless most
            # of the round comes back refused: then down to the accepted count
            if P["cut_level"] == 0 or fence > P["round_fence"]:
                return False
            P["round_refused"] += 1
            accepted = max(1, P["cut_level"] - P["round_refused"])
            most = max(P["cut_level"] / 4, 1 + explained(P["background_ppm"] / 1e6, P["cut_level"]))
            if accepted >= S["capacity"] or P["round_refused"] <= most:
                return False
            P["ceiling"] = min(P["ceiling"], accepted + 1)
            m.set_capacity(accepted)
            return True
        if level <= 1 and rl >= C["pause_count"] and rl >= C["pause_ratio"] * total:
            P["cut_fence"] = S["fence"]
            P["cut_level"] = 0
            m.pause("policy", PAUSE_REASON, 0)
            return True
        # the refusals of the round the last cut acted on, still in the window: judged net of them
        counted = 0
        if P["round_at"] > 0 and m.now - P["round_at"] < C["window_ms"]:
            counted = min(P["round_refused"], rl - 1)
        net = rl - counted
        share = net / total
        if P["ceiling"] > 0 and level >= P["ceiling"] and P["climbing"] == 0:  # a refused probe: costs the call
            wait = C["probe_ms"]
            if level == P["ceiling"]:
                wait = min(P["probe_wait"] * 2, probe_cap(C, total))
            P.update(ceiling=level, cut_fence=S["fence"], probe_at=m.now, probe_step=1, probe_wait=wait)
            if not self._verdict_open(m):  # the round in flight with it: mostly refused, it lands
                P.update(cut_level=level, round_fence=S["fence"], round_refused=1, round_at=m.now)
            m.set_capacity(max(1, level - 1))
            return False
        if net <= explained(P["background_ppm"] / 1e6, total):  # the background explains it: no cut
            return False
        since = m.now - P["cut_at"]
        verdict = self._verdict_open(m) and share <= NOISE_MAX
        if verdict:  # refused since the cut more than the highest background explains: load
            P["cut_refused"] += 1
            most = P["background_ppm"] / 1e6 if P["background_ppm"] > 0 else NOISE_MAX
            verdict = P["cut_refused"] <= explained(most, S["event_seq"] - P["cut_seq"])
        if verdict:
            if since < C["window_ms"]:  # a window to tell the background from a lower limit
                return False
            ppm = math.floor(share * 1e6)
            if P["round_refused"] > 1 + explained(share, P["cut_level"]):  # the round said load: the cut stands
                P["cut_level"] = 0
            elif P["cut_share_ppm"] == 0:  # a level lower for a window, to compare
                P.update(cut_share_ppm=ppm, cut_at=m.now, cut_fence=S["fence"], probe_at=m.now + C["window_ms"])
                P.update(cut_seq=S["event_seq"], cut_refused=0)
                P["climbing"] = 1
                m.set_capacity(max(1, math.floor(level * C["cut_factor"])))
                return False
            elif ppm * 2 < P["cut_share_ppm"]:  # the share fell with the level: load, the cuts stand
                P["cut_level"] = 0
                return False
            else:  # refused as often a level lower: the background's share; undo the cuts
                if P["background_ppm"] > 0:
                    ppm = math.floor((P["background_ppm"] + ppm) / 2)
                P.update(background_ppm=ppm, ceiling=P["cut_ceiling"], cut_level=0, climbing=0)
                P.update(probe_at=m.now, probe_wait=C["probe_ms"])
                m.set_capacity(max(S["capacity"], P["cut_from"]))
                return False
        if P["climbing"] == 1 and P["ceiling"] > 0:  # refused again after a cut: lower still
            capacity = math.floor(level * C["cut_factor"])
            return self._cut(m, capacity, capacity + 1, level)
        return self._cut(m, math.floor(level * C["cut_factor"]), level, level)  # the first 429 below the ceiling

    def background(self, m: Model, rl: int, total: int) -> None:
        """A refusal that is no load signal: counted as an attempt, it changes
        nothing of the policy's (its decision log entry is not modelled)."""

    @staticmethod
    def _verdict_open(m: Model) -> bool:
        """Whether a refusal may still undo the last cut (within a few windows of it)."""
        P = m.P
        return P["cut_level"] > 0 and m.now - P["cut_at"] < VERDICT_WINDOWS * m.C["window_ms"]  # type: ignore[no-any-return]

    @staticmethod
    def _cut(m: Model, capacity: int, ceiling: int, level: int) -> bool:
        S, C, P = m.S, m.C, m.P
        P.update(cut_from=S["capacity"], cut_ceiling=P["ceiling"], cut_level=level, cut_at=m.now, round_refused=1)
        P["round_at"] = m.now
        P["cut_share_ppm"] = 0
        P.update(cut_seq=S["event_seq"], cut_refused=0)
        P["round_fence"] = S["fence"]
        P.update(ceiling=ceiling, cut_fence=S["fence"], probe_at=m.now, probe_step=1, probe_wait=C["probe_ms"])
        P["climbing"] = 1  # a 429 before the next probe may mean lower still
        m.set_capacity(max(1, capacity))
        return True

    def success(self, m: Model, rl: int, total: int) -> None:
        S, C, P = m.S, m.C, m.P
        P["streak"] += 1
        if S["capacity"] >= C["max_capacity"]:
            P["streak"] = 0
            return
        if P["probe_at"] > m.now:
            return  # a window held a level lower, to compare
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
        step = min(P["probe_step"], max(1, S["capacity"] // 4))
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
