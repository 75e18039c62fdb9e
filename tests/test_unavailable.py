"""When Redis cannot be reached: fail closed (default), or a conservative
local fallback limit per governor object that hands its holders back to
the shared limit when Redis returns."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from governor import AcquireTimeout, Governor, GovernorConfig, GovernorUnavailable, Outcome

from .support.servers import RedisServer, wait_until

FAST = {"lease_ttl": 0.6, "poll": 0.2, "queue_ttl": 1.0, "redis_timeout": 1.0}


@pytest.fixture
def server(private_redis: RedisServer) -> RedisServer:
    return private_redis


def test_fail_closed_by_default(server: RedisServer) -> None:
    gov = Governor.from_url(server.url, "closed", GovernorConfig(max_capacity=4, **FAST))  # type: ignore[arg-type]
    try:
        gov.status()
        server.stop()
        with pytest.raises(GovernorUnavailable):
            gov.acquire(timeout=5)
        with pytest.raises(GovernorUnavailable):
            gov.try_acquire()
        with pytest.raises(GovernorUnavailable):
            gov.report(Outcome.SUCCESS)
    finally:
        gov.close()


def test_local_fallback_admits_a_few_then_returns_to_the_shared_limit(server: RedisServer) -> None:
    config = GovernorConfig(max_capacity=4, on_unavailable="local", local_capacity=1, **FAST)  # type: ignore[arg-type]
    gov = Governor.from_url(server.url, "fallback", config)
    try:
        gov.status()
        server.stop()
        local = gov.acquire(timeout=5)
        assert local.local and local.fence == 0 and not local.lost
        with pytest.raises(AcquireTimeout, match="local fallback limit of 1 is full"):
            gov.acquire(timeout=0.2)
        assert gov.try_acquire() is None
        gov.report(Outcome.SUCCESS, lease=local)  # not recorded, not an error in local mode

        server.start()  # same port, empty: the heartbeat re-creates and adopts
        wait_until(lambda: local.epoch != "local", 10, what="the local lease to be adopted")
        st = gov.status()
        assert (st.in_flight, st.capacity) == (1, 1) and local.fence > 0  # recovered cautiously: 4 // 4
        assert gov.try_acquire() is None  # the adopted holder counts in the shared limit
        local.release()
        shared = gov.acquire(timeout=5)  # back on the shared limit
        assert not shared.local
        shared.release()
        assert gov.status().in_flight == 0
    finally:
        gov.close()


def test_a_caller_waiting_for_a_local_permit_asks_redis_again_once_it_is_back(server: RedisServer) -> None:
    # Without this, a caller that began waiting for the local limit while
    # Redis was down was admitted locally after Redis came back, beside the
    # shared limit: one holder over it (seen in the fleet fallback test).
    config = GovernorConfig(max_capacity=8, on_unavailable="local", local_capacity=1, **FAST)  # type: ignore[arg-type]
    gov = Governor.from_url(server.url, "fallback-wait", config)
    waiting = threading.Event()
    permits = gov._local
    original = permits.acquire

    def witnessed(timeout: float | None = None) -> bool:
        waiting.set()
        return original(timeout)

    permits.acquire = witnessed  # type: ignore[method-assign]
    got: list[Any] = []
    try:
        gov.status()
        server.stop()
        local = gov.acquire(timeout=5)
        assert local.local
        waiting.clear()
        caller = threading.Thread(target=lambda: got.append(gov.acquire(timeout=15)))
        caller.start()
        assert waiting.wait(10), "the caller never waited for a local permit"
        server.start()
        caller.join(10)
        assert got, "the caller was still waiting for the local permit after Redis came back"
        assert not got[0].local and not local.released  # admitted by Redis while the local holder holds
        got[0].release()
        local.release()
    finally:
        gov.close()


async def test_async_local_fallback_try_acquire_takes_a_free_unit(server: RedisServer) -> None:
    from governor import AsyncGovernor

    config = GovernorConfig(max_capacity=4, on_unavailable="local", local_capacity=2, **FAST)  # type: ignore[arg-type]
    gov = AsyncGovernor.from_url(server.url, "async-fallback", config)
    try:
        await gov.status()
        server.stop()
        first, second = await gov.try_acquire(), await gov.try_acquire()
        assert first is not None and second is not None and first.local and second.local
        assert await gov.try_acquire() is None
        await first.release()
        third = await gov.acquire(timeout=1)
        assert third.local
        await second.release()
        await third.release()
    finally:
        await gov.aclose()
