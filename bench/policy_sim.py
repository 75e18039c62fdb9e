"""The fleet's policy against a moving limit and random refusals, on a fake clock.

    python -m bench.policy_sim --seeds 20
    python -m bench.policy_sim --seeds 20 --seed0 20 --noise 0.05 --schedule ""

A discrete-time swarm in one process, for comparing rules of the policy
over many seeds in a minute (the real swarm, ``python -m bench swarm``,
takes half a minute a run and varies with the machine's load): ``--agents``
callers on one governor (the real Lua on a private redis-server, or
``--redis-url``), time in ticks of ``--tick`` seconds on an injected clock.
Each tick the finished calls report success, then every idle caller asks
for a lease; a call the provider refuses (more in flight than the hidden
limit, or refused at random with ``--noise``) is answered after the tick's
admissions (a round admitted together hears its refusals together) and its
caller tries again the next tick. Calls last a lognormal time (mean
``--latency``, sigma 0.5).

Per seed and in the mean: windows after each limit change until a window's
mean capacity is within 5 % of the new limit, the seconds until capacity
first reaches the new limit less one, and the 429 share of the run. Compare
two checkouts by putting one's ``governor`` and ``lua`` first on
``PYTHONPATH`` (``git archive <rev> governor lua | tar -x -C /tmp/rev``).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from governor import Governor, GovernorConfig, Outcome
from governor.policies import AdaptivePolicy

from .provider import parse_schedule


class Clock:
    """Seconds that move only when the simulation says so."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    #: (seconds since the start, capacity) at the end of each tick
    trace: list[tuple[float, int]]
    ok: int
    refused: int


def simulate(
    client: Any,
    seed: int,
    *,
    limit: int = 37,
    schedule: Sequence[tuple[float, int]] = ((8.0, 20), (16.0, 37)),
    noise: float = 0.02,
    agents: int = 96,
    seconds: float = 25.0,
    tick: float = 0.02,
    latency: float = 0.25,
    window: float = 2.0,
    max_capacity: int = 96,
) -> Run:
    """One run on ``client`` (a sync redis-py client) with the default policy."""
    rng = random.Random(seed)
    clock = Clock()
    config = GovernorConfig(max_capacity=max_capacity, window=window, policy=AdaptivePolicy())
    gov = Governor(client, f"policy-sim-{uuid.uuid4().hex[:8]}", config, clock=clock)
    mu = math.log(latency) - 0.125  # a lognormal of sigma 0.5 with this mean
    busy: list[tuple[float, Any]] = []
    idle, ok, refused, t = agents, 0, 0, 0.0
    trace: list[tuple[float, int]] = []
    try:
        while t < seconds:
            now_limit = limit
            for at, new in schedule:
                if at <= t:
                    now_limit = new
            still = []
            for end, lease in busy:
                if end <= t:
                    gov.report(Outcome.SUCCESS, lease=lease, release=True)
                    ok += 1
                    idle += 1
                else:
                    still.append((end, lease))
            busy = still
            answered_later = []
            while idle > 0 and (lease := gov.try_acquire()) is not None:
                idle -= 1
                if len(busy) >= now_limit or rng.random() < noise:
                    answered_later.append(lease)
                else:
                    busy.append((t + rng.lognormvariate(mu, 0.5), lease))
            for lease in answered_later:
                gov.report(Outcome.RATE_LIMITED, lease=lease, release=True)
                refused += 1
                idle += 1
            trace.append((t, gov.status().capacity))
            clock.now += tick
            t += tick
        for _, lease in busy:
            lease.release()
    finally:
        gov.close()
    return Run(trace, ok, refused)


def windows_until(trace: Sequence[tuple[float, int]], at: float, new: int, window: float) -> int | None:
    """Windows after ``at`` until one whose mean capacity is within 5 % of ``new``."""
    k = 0
    while True:
        caps = [c for t, c in trace if at + k * window <= t < at + (k + 1) * window]
        if not caps:
            return None
        if abs(sum(caps) / len(caps) - new) <= 0.05 * new:
            return k + 1
        k += 1


def seconds_until(trace: Sequence[tuple[float, int]], at: float, new: int) -> float | None:
    """Seconds after ``at`` (a rise to ``new``) until capacity first reaches ``new - 1``."""
    for t, c in trace:
        if t >= at and c >= new - 1:
            return round(t - at, 2)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy_sim", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="runs, one per seed")
    parser.add_argument("--seed0", type=int, default=0, help="the first seed")
    parser.add_argument("--limit", type=int, default=37, help="the hidden concurrency limit at the start")
    parser.add_argument("--schedule", default="8:20,16:37", help="limit changes, SECONDS:LIMIT,... ('' for none)")
    parser.add_argument("--noise", type=float, default=0.02, help="share of calls refused at random")
    parser.add_argument("--agents", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=25.0, help="length of each run (simulated)")
    parser.add_argument("--latency", type=float, default=0.25, help="mean call time, seconds")
    parser.add_argument("--tick", type=float, default=0.02, help="simulated seconds per step")
    parser.add_argument("--window", type=float, default=2.0, help="the governor's window, seconds")
    parser.add_argument("--max-capacity", type=int, default=96)
    parser.add_argument("--redis-url", default=None, help="a Redis to run on (default: a private redis-server)")
    args = parser.parse_args(argv)
    from .embedded import open_backend

    schedule = parse_schedule(args.schedule)
    with open_backend(args.redis_url) as backend:
        client = backend.sync_client()
        changes = list(schedule)
        rows = []
        for seed in range(args.seed0, args.seed0 + args.seeds):
            run = simulate(
                client, seed, limit=args.limit, schedule=schedule, noise=args.noise, agents=args.agents,
                seconds=args.seconds, tick=args.tick, latency=args.latency, window=args.window,
                max_capacity=args.max_capacity,
            )  # fmt: skip
            share = run.refused / max(1, run.ok + run.refused)
            windows = [windows_until(run.trace, at, new, args.window) for at, new in changes]
            before = [args.limit, *[new for _, new in changes][:-1]]
            pairs = zip(changes, before, strict=True)
            rises = [seconds_until(run.trace, at, new) for (at, new), old in pairs if new > old]
            rows.append((windows, share))
            print(f"seed {seed}: windows to each new limit {windows}, seconds after each rise to its "
                  f"limit less one {rises}, 429 share {100 * share:.1f} %", flush=True)  # fmt: skip
        client.close()
    for i, (at, new) in enumerate(changes):
        seen = [w[i] for w, _ in rows]
        done = [w for w in seen if w is not None]
        mean = f"{sum(done) / len(done):.2f}" if done else "-"
        print(f"limit -> {new} at {at:g} s: mean windows {mean} (never within the run: {len(seen) - len(done)})")
    print(f"mean 429 share {100 * sum(s for _, s in rows) / max(1, len(rows)):.2f} % over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
