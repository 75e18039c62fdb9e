"""Redis state loss must not break a running fleet: the next
call re-creates the state from the client's config and carries on, and a
re-created governor never comes back unlimited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig, Outcome
from governor.protocol import SENTINEL

from .support.servers import RedisServer, wait_until

MakeGov = Callable[..., Governor]


def wipe(client: Any, gov: Governor) -> None:
    client.delete(*gov.keys.keys)


def test_lost_state_is_recreated_cautiously_and_holders_are_adopted(
    make_gov: MakeGov, sync_client: Any, clock: Any
) -> None:
    config = GovernorConfig(max_capacity=8, lease_ttl=30, poll=1, queue_ttl=5)
    gov = make_gov(config, clock=clock)
    warm(gov)  # past the slow start: the fleet has run a while
    holders = [gov.acquire(timeout=5) for _ in range(3)]
    old_fences = [h.fence for h in holders]
    epoch = gov.status().epoch
    wipe(sync_client, gov)  # as FLUSHDB or a restart without persistence would

    st = gov.status()  # the next call re-creates the state
    assert st.epoch != epoch
    assert st.capacity == 2  # the resume level, max(1, 8 // 4): not unlimited
    assert st.not_before == pytest.approx(clock.now + config.lease_ttl)  # a cut-off holder may believe that long
    assert gov.try_acquire() is None  # held while holders re-register

    gov.renew()  # the heartbeat adopts the running holders into the new state
    st = gov.status()
    assert st.in_flight == 3
    # The background worker renews on the announcement too: whichever call
    # adopted a lease gives it its new epoch and fence.
    wait_until(lambda: all(h.epoch == st.epoch and not h.lost for h in holders), 5, what="adoption")
    assert min(h.fence for h in holders) > max(old_fences)  # fences never go back

    for _ in range(2):  # past the hold, the holders' heartbeat keeping them
        clock.advance(config.lease_ttl / 2 + 0.05)
        gov.renew()
    assert gov.try_acquire() is None  # 3 in flight >= capacity 2: still no room
    for h in holders:
        h.release()
    lease = gov.try_acquire()
    assert lease is not None and lease.fence > max(h.fence for h in holders)
    lease.release()


def test_a_lost_state_hash_takes_the_old_config_and_learnt_state_with_it(
    make_gov: MakeGov, sync_client: Any, clock: Any
) -> None:
    """Only the state hash gone (expired or deleted alone): init deletes the
    config and policy hashes too before it writes a new state, so nothing of
    another policy's fields or of what the old state learnt survives."""
    gov = make_gov(GovernorConfig(max_capacity=8), clock=clock)
    warm(gov)  # past the slow start
    leases = [gov.try_acquire() for _ in range(8)]
    gov.report(Outcome.RATE_LIMITED)  # the adaptive policy learns a ceiling
    assert gov.status().ceiling == 8
    for lease in leases:
        assert lease is not None
        lease.release()
    sync_client.hset(gov.keys.config, "decrease_count", "2")  # another policy's field, left behind
    sync_client.hset(gov.keys.policy, "ceiling", "5")
    sync_client.delete(gov.keys.state)
    st = gov.status()  # re-created from the config this client last saw
    assert (st.capacity, st.ceiling, st.streak, st.policy) == (2, 0, 0, "adaptive")
    config = {text(k) for k in sync_client.hgetall(gov.keys.config)}
    assert "decrease_count" not in config and "cut_factor" in config
    assert {text(k): text(v) for k, v in sync_client.hgetall(gov.keys.policy).items()}["ceiling"] == "0"


def test_the_sentinels_keep_leases_and_holders_alive(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2), clock=clock)
    lease = gov.try_acquire()
    assert lease is not None
    lease.release()  # the last lease: the keys stay, with their expiry
    assert sync_client.zrange(gov.keys.leases, 0, -1, withscores=True) == [(sentinel(sync_client), 0.0)]
    assert sync_client.hlen(gov.keys.holders) == 1 and sync_client.pttl(gov.keys.holders) > 0
    assert sync_client.pttl(gov.keys.leases) > 0
    clock.advance(3600)
    assert gov.probe().in_flight == 0  # reclaim never takes the sentinel
    assert sync_client.zscore(gov.keys.leases, SENTINEL) == 0


def sentinel(client: Any) -> Any:
    """SENTINEL as the client answers it (bytes unless decoding)."""
    return SENTINEL if client.get_encoder().decode_responses else SENTINEL.encode()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_first_use_is_not_a_recovery(make_gov: MakeGov, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=8), clock=clock)
    st = gov.status()
    assert (st.capacity, st.not_before) == (2, None)  # the adaptive slow start, as after a loss, but no hold
    fixed = make_gov(GovernorConfig(policy="fixed", max_capacity=8), clock=clock, governor_name=f"{gov.name}-fixed")
    st = fixed.status()
    assert (st.capacity, st.not_before) == (8, None)  # a fixed governor starts at max_capacity


def warm(gov: Governor) -> None:
    """Successes until the adaptive slow start has climbed to max_capacity."""
    for _ in range(gov.config.max_capacity):
        if gov.status().capacity >= gov.config.max_capacity:
            return
        gov.report(Outcome.SUCCESS)
    assert gov.status().capacity == gov.config.max_capacity


def test_release_and_cancel_do_not_recreate_a_missing_governor(make_gov: MakeGov, sync_client: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    lease = gov.acquire(timeout=5)
    wipe(sync_client, gov)
    lease.release()
    assert sync_client.exists(gov.keys.state) == 0


def test_script_flush_is_survived(private_redis: RedisServer) -> None:
    gov = Governor.from_url(private_redis.url, "flush", GovernorConfig(max_capacity=2, restart_hold=False))
    try:
        lease = gov.acquire(timeout=5)
        redis.Redis(port=private_redis.port).script_flush()
        lease.release()
        assert gov.status().in_flight == 0
    finally:
        gov.close()


def test_redis_restart_mid_run(private_redis: RedisServer) -> None:
    config = GovernorConfig(max_capacity=4, lease_ttl=0.9, poll=0.2, queue_ttl=1, redis_timeout=2)
    gov = Governor.from_url(private_redis.url, "restart", config)
    try:
        holder = gov.acquire(timeout=5)
        private_redis.restart()  # state and scripts gone
        # The heartbeat re-creates the state and adopts the holder.
        wait_until(lambda: _in_flight(gov) == 1, 10, what="the holder to be adopted")
        assert not holder.lost
        st = gov.status()
        assert st.capacity == 1  # resume level: max(1, 4 // 4)
        lease = gov.try_acquire()
        assert lease is None  # 1 in flight of 1: not unlimited
        holder.release()
        lease = gov.acquire(timeout=5)
        lease.release()
    finally:
        gov.close()


def _in_flight(gov: Governor) -> int:
    try:
        return gov.status().in_flight
    except Exception:  # noqa: BLE001 - Redis may still be coming back
        return -1
