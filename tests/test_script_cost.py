"""A guard on script cost: with 10,000 leases, 10,000 waiters and
10,000 window events, the worst call of every script stays far below
Redis's busy-script threshold (5 s), so one governor never blocks Redis.

Time is measured by the server (``INFO commandstats`` of FCALL, reset
before each call: the function's run, as a client calls it through the
facade) on a private redis-server, and printed (``pytest -s``) beside the same
call at N = 1,000 so the calls whose cost grows with N stand out. The
assertion is generous (a 2-core CI machine is noisy): < 50 ms per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig, Outcome
from governor.core import Call
from governor.protocol import QUEUE_BAND, HolderRecord
from governor.scripts import library

from .conftest import FakeClock
from .support.model import init_call
from .support.servers import RedisServer

BOUND_US = 50_000
TTL_MS = 30_000


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    yield s
    s.cleanup()


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, socket_timeout=30)
    c.function_load(library(), replace=True)  # compile once: measure runs, not loads
    yield c
    c.close()


def server_us(client: redis.Redis, run: Callable[[], Any]) -> int:
    """Microseconds the server spent in the function calls (FCALL) made by ``run``."""
    client.config_resetstat()
    run()
    stats = client.info("commandstats")
    assert stats.get("cmdstat_fcall", {}).get("calls", 0) >= 1, f"no FCALL measured: {sorted(stats)}"
    assert "cmdstat_evalsha" not in stats and "cmdstat_function|load" not in stats, sorted(stats)
    return int(stats["cmdstat_fcall"]["usec"])


def record(fence: int, since_ms: int) -> str:
    """A holders entry (governor.protocol.HolderRecord)."""
    return HolderRecord(fence, TTL_MS, since_ms, 1000, 200, 1, 1, "default", "h").format()


def populate(client: redis.Redis, gov: Governor, now_ms: int, n: int, *, expired: bool = False) -> None:
    """n live leases, n queued waiters and n window events (half rate-limited).
    ``expired``: every lease and waiter is already past its time (a mass expiry),
    and every window event older than the window (a mass prune)."""
    keys = gov.keys
    age = -1 if expired else 1
    pipe = client.pipeline(transaction=False)
    fence = int(client.hget(keys.state, "fence") or 0)
    for start in range(0, n, 1000):
        chunk = range(start, min(n, start + 1000))
        pipe.zadd(keys.leases, {f"lease-{i}": now_ms + age * TTL_MS for i in chunk})
        pipe.hset(keys.holders, mapping={f"lease-{i}": record(fence + i + 1, now_ms) for i in chunk})
        pipe.zadd(keys.queue, {f"waiter-{i}": 2 * QUEUE_BAND + i + 1 for i in chunk})  # the default class
        pipe.zadd(keys.aging, {f"waiter-{i}": now_ms + age * 30_000 for i in chunk})  # expired: all due to age
        pipe.zadd(keys.waiters, {f"waiter-{i}": now_ms + age * 5000 for i in chunk})
        pipe.hset(keys.holders, mapping={f"waiter-{i}": record(0, now_ms) for i in chunk})
        when = now_ms - 120_000 if expired else now_ms - 1000
        pipe.zadd(keys.attempts, {f"{i + 1}:{'r' if i % 2 else 's'}": when for i in chunk})
        pipe.zadd(keys.limited, {f"{i + 1}:r": when for i in chunk if i % 2})
    pipe.zadd(keys.shares, {f"1:tenant-{t}": QUEUE_BAND + n + t for t in range(100)})  # none behind vtime_1
    pipe.hset(keys.state, mapping={"fence": fence + n + 1, "event_seq": n, "aging_due": now_ms + age * 30_000})
    pipe.execute()


def scenarios(gov: Governor, lease: str, waiter: str, ids: list[str]) -> dict[str, Call[Any]]:
    core = gov._core
    return {
        "acquire (queued behind N)": core.acquire("newcomer", core.ask("h"), wait=True),
        "try_acquire (denied)": core.acquire("trier", core.ask("h"), wait=False),
        "acquire again (idempotent)": core.acquire(waiter, core.ask("h"), wait=True, fresh=False),
        "refresh (500 ids)": core.refresh(ids[:500]),
        "renew (500 leases)": core.renew([(i, "epoch", core.ask("h")) for i in ids[:500]]),
        "release (grants the head)": core.release(lease),
        "cancel (a waiter)": core.cancel(waiter),
        "report success": core.report(Outcome.SUCCESS, None, None),
        "report rate-limited + retry-after": core.report(Outcome.RATE_LIMITED, 5.0, None),
        "report and release (grants the head)": core.report(Outcome.SUCCESS, None, lease, release=True),
        "probe": core.probe(),
        "status": core.status(),
        "pause": core.pause("cost", None),
        "resume (admits up to capacity)": core.resume(),
        "set_max (admits every waiter)": core.set_max_capacity(1_000_000),
        "reset (drops the window)": core.reset(with_config=False),
    }


MASS_GRANT = "set_max (admits every waiter)"


def measure(client: redis.Redis, n: int, expired: bool, only: str | None = None) -> dict[str, int]:
    """Server time of each scenario, each on a freshly populated governor."""
    clock = FakeClock()
    config = GovernorConfig(max_capacity=n, lease_ttl=TTL_MS / 1000, window=60)
    figures: dict[str, int] = {}
    names = list(scenarios(Governor(client, "probe-names", config), "x", "y", ["z"]))
    for scenario in names:
        if only is not None and scenario != only:
            continue
        gov = Governor(client, f"cost-{n}-{expired}-{names.index(scenario)}", config, clock=clock)
        try:
            gov._connection.run(init_call(gov._core, holds_leases=False))
            now_ms = round(clock.now * 1000)
            populate(client, gov, now_ms, n, expired=expired)
            if expired:
                clock.advance(0.001)
            ids = [f"waiter-{i}" for i in range(250)] + [f"lease-{i}" for i in range(250)]
            call = scenarios(gov, "lease-7", "waiter-9", ids)[scenario]
            figures[scenario] = server_us(client, lambda call=call, gov=gov: gov._connection.run(call))  # type: ignore[misc]
        finally:
            client.delete(*gov.keys.keys)
            gov.close()
    return figures


@pytest.mark.parametrize("expired", [False, True], ids=["live", "mass-expiry"])
def test_every_script_stays_far_below_the_busy_threshold_at_10k(client: redis.Redis, expired: bool) -> None:
    small = measure(client, 1_000, expired)
    large = measure(client, 10_000, expired)
    print(f"\nserver time per call, {'everything expired at once' if expired else 'all live'} (us):")
    print(f"  {'scenario':40} {'N=1,000':>9} {'N=10,000':>9}  growth")
    for scenario, us in large.items():
        growth = us / max(small[scenario], 1)
        flag = "  <- grows with N" if growth > 3 and us > 1000 else ""
        print(f"  {scenario:40} {small[scenario]:>9} {us:>9}  x{growth:.1f}{flag}")
    over = {scenario: us for scenario, us in large.items() if us > BOUND_US and scenario != MASS_GRANT}
    assert not over, f"scripts over {BOUND_US} us with 10,000 of everything: {over}"


def test_one_capacity_jump_under_10k_waiters_stays_under_the_bound(client: redis.Redis) -> None:
    us = measure(client, 10_000, expired=False, only=MASS_GRANT)[MASS_GRANT]
    print(f"\n{MASS_GRANT} with 10,000 waiters: {us} us")
    assert us < BOUND_US
