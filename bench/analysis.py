"""What a strategy achieved: the figures of the swarm benchmark.

All times are seconds since the run's start (the provider's clock; hosts
report Unix times, which are converted with the provider's start time).

The *ideal* is what a perfect gate achieves: the hidden limit busy all the
time, ``limit(t) / mean latency`` successful calls per second (Little's
law). Goodput is compared with it only while the fleet has more work than
the limit can serve: the *saturated* interval runs from the start until
fewer agents have work left than the hidden limit, so the tail of the
workload (agents finishing one by one) does not count against a strategy.
*Steady state* is the saturated interval minus ``settle_windows`` windows
after the start and after each change of the hidden limit; *recovery* is
the number of windows after a change until one window reaches 95 % of the
new ideal.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .host import HostResult
from .kit import percentile
from .provider import LIMITED, OK, RATE, ProviderConfig, RunRecord

#: a window counts as recovered at this share of the ideal
RECOVERED = 0.95


@dataclass
class Recovery:
    """How the fleet followed one change of the hidden limit."""

    at: float  #: when the limit changed
    old: int
    new: int
    #: windows until one reached 95 % of the new ideal (None: not within the run;
    #: with no window in ``window_goodput`` it could not be judged at all)
    windows: int | None
    #: goodput of each window after the change, as a share of the new ideal
    window_goodput: list[float] = field(default_factory=list)
    #: 429s of each window after the change
    window_429s: list[int] = field(default_factory=list)
    #: windows until the governors' mean capacity in one was within 5 % of the new
    #: limit (None: no governor, or not within the run): the policy's answer,
    #: apart from how well the machine turned capacity into goodput
    capacity_windows: int | None = None

    @property
    def measured(self) -> bool:
        """Whether a whole window after the change fell inside the run (the
        saturated part of it), so that recovery could be judged at all."""
        return self.windows is not None or bool(self.window_goodput)


@dataclass
class StrategyMetrics:
    """The figures of one strategy; None where a figure does not apply."""

    strategy: str
    ok: int
    attempts: int
    limited: int  #: 429s for throttling (concurrency or rate), at the provider
    quota: int
    errors: int
    lost: int
    limited_share: float
    goodput: float | None  #: share of the ideal over the saturated interval
    goodput_rps: float | None  #: successes per second over the saturated interval
    ideal_rps: float | None  #: the ideal over the same interval
    saturated_until: float
    steady_goodput: float | None
    steady_limited_share: float | None
    steady_seconds: float
    wait_p50: float | None  #: admission wait (governed strategies)
    wait_p95: float | None
    call_p50: float | None  #: time from wanting a call to its answer, retries included
    call_p95: float | None
    finish: float | None  #: time to finish the workload (None: not finished)
    done: float  #: share of the workload done
    jain: float | None  #: Jain's fairness index of per-host goodput
    peak_over: int  #: largest excess of offered concurrency over the limit
    time_over: float  #: total time above the limit
    longest_over: float  #: longest stretch above the limit
    peak_served: int
    recoveries: list[Recovery] = field(default_factory=list)
    #: per window from the start: goodput share of the ideal, and 429s
    window_goodput: list[float] = field(default_factory=list)
    window_429s: list[int] = field(default_factory=list)
    #: the governors' decisions by kind: cut, increase, probe, pause, resume, hold, ...
    decisions: dict[str, int] = field(default_factory=dict)
    #: mean seconds per attempt in each step (acquire, call, report, release, backoff)
    phases: dict[str, float] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = _rounded(asdict(self))
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StrategyMetrics:
        values = dict(data)
        values["recoveries"] = [Recovery(**r) for r in values.get("recoveries", [])]
        return cls(**values)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


# -- the ideal ---------------------------------------------------------------------------


def limit_integral(config: ProviderConfig, start: float, end: float) -> float:
    """The integral of the hidden limit over [start, end] (limit x seconds)."""
    if end <= start:
        return 0.0
    points = [start] + [at for at, _ in config.schedule if start < at < end] + [end]
    return sum(config.limit_at(a) * (b - a) for a, b in itertools.pairwise(points))


def ideal_calls(config: ProviderConfig, start: float, end: float) -> float:
    """Successful calls a perfect gate completes over [start, end]."""
    return limit_integral(config, start, end) / config.latency_mean


def ideal_finish(config: ProviderConfig, workload: int) -> float:
    """When a perfect gate would have done ``workload`` calls (tail ignored)."""
    t, done = 0.0, 0.0
    changes = [at for at, _ in config.schedule] + [math.inf]
    for change in changes:
        rate = config.limit_at(t) / config.latency_mean
        if change <= t:
            continue
        if rate > 0 and done + rate * (change - t) >= workload:
            return t + (workload - done) / rate
        if change == math.inf:
            return math.inf
        done += rate * (change - t)
        t = change
    return math.inf


# -- small statistics ------------------------------------------------------------------------


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one gets everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return None
    return total * total / (len(values) * squares)


def _minus(times: list[float], theirs: list[float]) -> list[float]:
    """``times`` without, for each of ``theirs``, the nearest time at or after it
    (the provider's end of the same answer, seen a little after the caller's)."""
    if not theirs:
        return times
    out = list(times)
    for t in reversed(theirs):  # from the latest, so indices stay valid
        i = bisect.bisect_left(out, t - 0.05)
        if i < len(out):
            out.pop(i)
    return out


def _count_between(sorted_times: Sequence[float], start: float, end: float) -> int:
    return bisect.bisect_left(sorted_times, end) - bisect.bisect_left(sorted_times, start)


def _intervals_minus(start: float, end: float, cuts: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """[start, end] with the ``cuts`` removed."""
    pieces = [(start, end)]
    for a, b in cuts:
        nxt: list[tuple[float, float]] = []
        for x, y in pieces:
            if b <= x or a >= y:
                nxt.append((x, y))
                continue
            if x < a:
                nxt.append((x, a))
            if b < y:
                nxt.append((b, y))
        pieces = nxt
    return [(x, y) for x, y in pieces if y > x]


# -- the figures ---------------------------------------------------------------------------------


def occupancy(calls: Sequence[tuple[float, float, str]], start: float, end: float) -> float:
    """Slot-seconds that successful ``(start, end, kind)`` calls held within [start, end]."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b, kind in calls if kind == OK)


def saturated_until(config: ProviderConfig, agents: int, finished: Sequence[float], run_end: float) -> float:
    """The first time fewer agents have work left than the hidden limit."""
    finished = sorted(finished)
    events = sorted({0.0, *finished, *(at for at, _ in config.schedule)})
    for t in events:
        if t > run_end:
            break
        active = agents - bisect.bisect_right(finished, t)
        if active < config.limit_at(t):
            return t
    return run_end


def analyse(
    strategy: str,
    config: ProviderConfig,
    record: RunRecord,
    hosts: Sequence[HostResult],
    *,
    window: float,
    settle_windows: float,
    workload: int,
    max_time: float,
    decisions: Sequence[Mapping[str, Any]] = (),
    capacity: Sequence[tuple[float, int, int, int, bool]] = (),
    background: Sequence[tuple[float, float, str]] = (),
) -> StrategyMetrics:
    """The figures of one strategy's run; ``background``: the ungoverned
    callers' calls (start, end, kind), seconds since the start."""
    t0 = record.started_wall
    total_agents = sum(h.agents for h in hosts)
    finished = [f - t0 for h in hosts for f in h.finished_at if f is not None]
    all_finished = len(finished) == total_agents
    finish = max(finished) if all_finished and finished else None
    run_end = finish if finish is not None else max_time
    sat = saturated_until(config, total_agents, finished, run_end)

    theirs = [(a, b, kind) for a, b, kind in background]
    ok_times = _minus(sorted(end for _, end, kind in record.responses if kind == OK),
                      sorted(b for _, b, kind in theirs if kind == OK))  # fmt: skip
    limited_times = _minus(sorted(end for _, end, kind in record.responses if kind in (LIMITED, RATE)),
                           sorted(b for _, b, kind in theirs if kind in (LIMITED, RATE)))  # fmt: skip
    all_times = _minus(sorted(end for _, end, _ in record.responses), sorted(b for _, b, _ in theirs))
    counts = record.counts()
    ok_total = counts[OK] - sum(1 for _, _, kind in theirs if kind == OK)
    limited = counts[LIMITED] + counts[RATE] - sum(1 for _, _, kind in theirs if kind in (LIMITED, RATE))
    attempts = len(record.responses) - len(theirs)

    def ideal_calls(config: ProviderConfig, start: float, end: float) -> float:  # what the fleet could have had
        left = limit_integral(config, start, end) - occupancy(theirs, start, end)
        return max(0.0, left) / config.latency_mean

    ideal_sat = ideal_calls(config, 0.0, sat)
    ok_sat = _count_between(ok_times, 0.0, sat)
    goodput = ok_sat / ideal_sat if ideal_sat > 0 else None

    settle = settle_windows * window
    changes = [(at, config.limit_at(at - 1e-9) if at > 0 else config.limit, new) for at, new in config.schedule]
    steady = _intervals_minus(0.0, sat, [(0.0, settle)] + [(at, at + settle) for at, _, _ in changes])
    steady_ideal = sum(ideal_calls(config, a, b) for a, b in steady)
    steady_ok = sum(_count_between(ok_times, a, b) for a, b in steady)
    steady_limited = sum(_count_between(limited_times, a, b) for a, b in steady)
    steady_all = sum(_count_between(all_times, a, b) for a, b in steady)

    def window_series(start: float, end: float) -> tuple[list[float], list[int]]:
        shares: list[float] = []
        throttled: list[int] = []
        k = 0
        while start + (k + 1) * window <= end + 1e-9:
            a, b = start + k * window, start + (k + 1) * window
            ideal = ideal_calls(config, a, b)
            shares.append(_count_between(ok_times, a, b) / ideal if ideal > 0 else 0.0)
            throttled.append(_count_between(limited_times, a, b))
            k += 1
        return shares, throttled

    recoveries = []
    for at, old, new in changes:
        if at >= run_end:
            continue  # the run was over before the limit changed
        shares, throttled = window_series(at, sat)  # none when saturation ended first: not measured
        windows = next((i + 1 for i, share in enumerate(shares) if share >= RECOVERED), None)
        followed = _capacity_windows(capacity, at, sat, window, new)
        recoveries.append(Recovery(at, old, new, windows, shares[:6], throttled[:6], followed))
    window_goodput, window_429s = window_series(0.0, run_end)

    per_host = [float(_count_between(sorted(s - t0 for s in h.success_at), 0.0, sat)) for h in hosts]
    waits = [w for h in hosts for w in h.waits]
    calls = [c for h in hosts for c in h.call_times]
    samples = [s for h in hosts for s in h.error_samples][:5]
    return StrategyMetrics(
        strategy=strategy,
        ok=ok_total,
        attempts=attempts,
        limited=limited,
        quota=sum(h.quota for h in hosts),
        errors=sum(h.errors for h in hosts),
        lost=sum(h.lost for h in hosts),
        limited_share=limited / attempts if attempts else 0.0,
        goodput=goodput,
        goodput_rps=ok_sat / sat if sat > 0 else None,
        ideal_rps=ideal_sat / sat if sat > 0 else None,
        saturated_until=sat,
        steady_goodput=steady_ok / steady_ideal if steady_ideal > 0 else None,
        steady_limited_share=steady_limited / steady_all if steady_all else None,
        steady_seconds=sum(b - a for a, b in steady),
        wait_p50=percentile(waits, 50),
        wait_p95=percentile(waits, 95),
        call_p50=percentile(calls, 50),
        call_p95=percentile(calls, 95),
        finish=finish,
        done=sum(h.ok for h in hosts) / workload if workload else 1.0,
        jain=jain(per_host) if len(per_host) > 1 else None,
        peak_over=record.peak_over,
        time_over=record.time_over,
        longest_over=record.longest_over,
        peak_served=record.peak_served,
        recoveries=recoveries,
        window_goodput=window_goodput,
        window_429s=window_429s,
        decisions=decision_counts(decisions),
        phases=_phases(hosts),
        error_samples=samples,
    )


def _capacity_windows(
    capacity: Sequence[tuple[float, int, int, int, bool]], at: float, end: float, window: float, limit: int
) -> int | None:
    """Windows after ``at`` until one whose mean sampled capacity is within 5 % of ``limit``."""
    k = 0
    while capacity and at + (k + 1) * window <= end + 1e-9:
        a, b = at + k * window, at + (k + 1) * window
        values = [c for t, c, *_ in capacity if a <= t < b]
        if values and abs(sum(values) / len(values) / limit - 1) <= 1 - RECOVERED:
            return k + 1
        k += 1
    return None


def decision_counts(decisions: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Decisions by kind; capacity changes split into cuts, probes and increases."""
    counts: dict[str, int] = {}
    for decision in decisions:
        kind = str(decision.get("kind", "?"))
        if kind == "capacity":
            why = str(decision.get("why", ""))
            kind = "cut" if "cut" in why or "decrease" in why else "probe" if "probe" in why else "increase"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _phases(hosts: Sequence[HostResult]) -> dict[str, float]:
    attempts = sum(h.attempts for h in hosts)
    totals: dict[str, float] = {}
    for h in hosts:
        for phase, seconds in h.phases.items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    return {phase: seconds / attempts for phase, seconds in totals.items()} if attempts else {}
