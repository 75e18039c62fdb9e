"""The faults a fault-injection run left: one valid config, one stored field
out of range, a cap lowered under a busy tenant, a lease reported twice.

Each test runs the Lua on a real Redis (and on fakeredis, the second
backend, where the parametrised client allows it).
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig, LeaseLost, Outcome, protocol
from governor.core import Granted, Queued, new_id
from governor.errors import ConfigError, LeaseReported, StateError
from governor.scripts import function_name

from .conftest import RAW_BACKENDS, FakeClock, load_library
from .support.holders import Holders
from .support.servers import wait_until


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _events(client: Any, gov: Governor) -> list[dict[str, str]]:
    return [{_text(k): _text(v) for k, v in e.items()} for _, e in client.xrange(gov.keys.events)]


def _init_args(ttl_ms: int, config: GovernorConfig) -> list[str]:
    return ["1000000", "chan", "epoch1", "0", "0", str(ttl_ms), "0", "0", "0", *config.script_fields()]


# -- finding 1: every range checked once, the same everywhere -----------------


def test_a_lease_ttl_the_state_cannot_hold_is_refused_by_the_config() -> None:
    high = protocol.LEASE_TTL.high / 1000
    with pytest.raises(ConfigError, match=r"lease_ttl must be between 0\.003 and 86400(\.0)? seconds"):
        GovernorConfig(lease_ttl=172800)  # two days: the state's ttl_max holds at most a day
    with pytest.raises(ConfigError, match="lease_ttl"):
        GovernorConfig(lease_ttl=high + 0.001)
    GovernorConfig(lease_ttl=high, idle_expiry=2 * high)  # the bound itself is accepted ...


def test_the_longest_accepted_lease_ttl_is_stored_and_read_back(make_gov: Any, clock: FakeClock) -> None:
    high = protocol.LEASE_TTL.high / 1000
    gov = make_gov(GovernorConfig(lease_ttl=high, idle_expiry=2 * high), clock=clock)
    assert gov.status().ttl_max == high  # ... and usable: stored by init, read by every call
    lease = gov.try_acquire()
    assert lease is not None
    lease.release()
    assert make_gov(GovernorConfig(), clock=clock).status().ttl_max == high


@pytest.mark.parametrize("ttl_ms", [2**53 + 1, protocol.LEASE_TTL.high + 1])
def test_init_refuses_a_ttl_the_reader_would_refuse(sync_client: Any, make_gov: Any, ttl_ms: int) -> None:
    gov = make_gov(GovernorConfig())
    keys = gov.keys.script_keys
    load_library(sync_client)
    with pytest.raises(redis.ResponseError, match="GOVERNOR_BADARG ttl_ms must be an integer in"):
        sync_client.fcall(function_name("init"), len(keys), *keys, *_init_args(ttl_ms, GovernorConfig()))
    assert not sync_client.exists(gov.keys.state)  # nothing stored
    assert gov.status().ttl_max == GovernorConfig().lease_ttl


@pytest.mark.parametrize(
    ("field", "stored", "repaired"),
    [
        ("ttl_max", "172800000", protocol.LEASE_TTL.high),  # what an older init stored from lease_ttl=172800
        ("ttl_max", str(2**53), protocol.LEASE_TTL.high),  # a raw init's 2^53 + 1
        ("capacity", "2000000", protocol.MAX_CAPACITY),
    ],
)
def test_a_stored_field_out_of_range_is_repaired_on_the_next_write(
    sync_client: Any, make_gov: Any, clock: FakeClock, field: str, stored: str, repaired: int
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, policy="fixed"), clock=clock)
    gov.status()
    sync_client.hset(gov.keys.state, field, stored)
    st = gov.status()  # read-only: read as the nearest bound, never "unusable"
    assert st.max_capacity == 4
    assert _text(sync_client.hget(gov.keys.state, field)) == stored  # a read-only call writes nothing
    assert not [e for e in _events(sync_client, gov) if e["kind"] == "repair"]
    lease = make_gov(GovernorConfig(max_capacity=4, policy="fixed"), clock=clock).try_acquire()  # a write
    assert lease is not None
    assert _text(sync_client.hget(gov.keys.state, field)) == str(repaired)
    repairs = [e for e in _events(sync_client, gov) if e["kind"] == "repair"]
    assert len(repairs) == 1 and field in repairs[0]["why"] and stored in repairs[0]["why"], repairs
    lease.release()
    gov.status()
    assert len([e for e in _events(sync_client, gov) if e["kind"] == "repair"]) == 1  # repaired once


@pytest.mark.parametrize("field", ["ttl_max", "capacity"])
def test_the_command_a_state_error_advises_helps(sync_client: Any, make_gov: Any, field: str) -> None:
    """A field no range can repair (not a number): the StateError names the
    field, its range and the command; running it makes the governor usable."""
    gov = make_gov(GovernorConfig(max_capacity=4, policy="fixed"))
    gov.status()
    sync_client.hset(gov.keys.state, field, "two days")
    with pytest.raises(StateError, match="unusable") as raised:
        make_gov(GovernorConfig(max_capacity=4, policy="fixed")).status()
    advice = str(raised.value)
    assert "`redis-cli HSET <key> <field> <value>`" in advice, advice
    low = re.search(rf"field {field} holds \"two days\", not an integer in \[(\d+), (\d+)\]", advice)
    assert low is not None, advice
    sync_client.hset(gov.keys.state, field, low.group(2))  # what the advice says, with the value it names
    st = make_gov(GovernorConfig(max_capacity=4, policy="fixed")).status()
    assert st.max_capacity == 4


# -- finding 10: a lease carries one outcome -----------------------------------


def test_a_lease_carries_one_outcome(make_gov: Any, clock: FakeClock) -> None:
    """Three report(RATE_LIMITED, lease=lease, release=True) on one lease
    gave a window of 3/3: the second and third now raise LeaseReported (a
    LeaseLost) and count nothing, with or without release."""
    gov = make_gov(GovernorConfig(max_capacity=4, policy="fixed"), clock=clock)
    lease = gov.acquire(timeout=5)
    gov.report(Outcome.RATE_LIMITED, lease=lease, release=True)
    for release in (True, False):
        with pytest.raises(LeaseReported, match="already carried its outcome"):
            gov.report(Outcome.RATE_LIMITED, lease=lease, release=release)
    st = gov.status()
    assert (st.window_rate_limited, st.window_attempts, st.in_flight) == (1, 1, 0)
    other = gov.acquire(timeout=5)
    gov.report(Outcome.SUCCESS, lease=other)  # reported, still held
    with pytest.raises(LeaseLost):  # the family an existing `except LeaseLost` catches
        gov.report(Outcome.SUCCESS, lease=other)
    other.release()
    assert gov.status().window_attempts == 2
    third = gov.acquire(timeout=5)
    third.release()
    gov.report(Outcome.SUCCESS, lease=third)  # released first, then its one outcome: counted (docs/usage.md)
    with pytest.raises(LeaseReported):
        gov.report(Outcome.SUCCESS, lease=third)
    assert gov.status().window_attempts == 3


# -- finding 3: a lost `held` key is found and counted again ---------------------


@pytest.mark.parametrize("backend", [("redis", False)], ids=["redis"], indirect=True)
def test_a_lost_held_key_is_counted_again_from_the_live_leases(
    make_gov: Any, clock: FakeClock, sync_client: Any
) -> None:
    """A tenant capped at 2 holds 2; `held` is lost (evicted, a mistaken
    DEL). Before: held read 0 and the tenant was admitted up to 4 (the
    witness saw 4). Now an admission that finds neither the tenant's count
    nor held's sentinel counts the tenant's live leases, and the next
    reclaim counts held again and logs it: the witness never sees the
    tenant above its cap, and the others are not held up (no hold)."""
    config = GovernorConfig(
        max_capacity=6, policy="fixed", lease_ttl=30.0, poll=0.2, queue_ttl=1.0, tenant_caps={"capped": 2}
    )
    capped = Holders(now=clock)
    try:
        gov = make_gov(config, clock=clock)
        for _ in range(2):
            lease = gov.try_acquire(tenant="capped")
            assert lease is not None
            capped.entered(lease, "capped")
        sync_client.delete(gov.keys.held)
        clock.advance(1.1)  # reclaim looks at most once a second
        for _ in range(3):
            lease = gov.try_acquire(tenant="capped")
            if lease is not None:
                capped.entered(lease, "capped")
        clock.advance(0.5)  # the holds last a while: the witness measures overlaps over time
        seen = capped.witness(2)
        assert seen.peak <= 2, str(seen)
        assert gov.try_acquire(tenant="other") is not None  # no hold: nothing a holder believes was lost
        gov.probe()  # a writing call that reclaims: held counted again, with the log entry
        assert _text(sync_client.hget(gov.keys.held, "capped")) == "2"
        repairs = [e for e in _events(sync_client, gov) if e["kind"] == "repair"]
        assert any("held" in e["why"] for e in repairs), repairs
    finally:
        capped.close()


# -- a waiter whose place in the queue is lost -----------------------------------


def _waiting(gov: Governor, got: dict[str, Any], tenant: str | None) -> threading.Thread:
    def wait() -> None:
        try:
            got["lease"] = gov.acquire(tenant=tenant)  # timeout=None: it waits as long as it takes
        except Exception as error:  # noqa: BLE001 - handed to the test
            got["error"] = error

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


@RAW_BACKENDS
@pytest.mark.parametrize("key", ["queue", "parked"])
def test_a_waiter_whose_place_is_lost_is_queued_again_within_a_poll(make_gov: Any, sync_client: Any, key: str) -> None:
    """A caller waits with no timeout; its `queue` (or, parked at its
    tenant's cap, `parked`) entry is lost; a later caller comes; the holders
    leave. Before: refresh kept answering "queued" and the first caller
    waited for ever while later ones were admitted. Now the waiters' refresh
    finds a live waiter with no place, queues it again at the front of its
    class (parked: of its tenant's slot) and logs it: admitted within a few
    polls, before the later caller. (Redis's clock: each refresh moves the waiter's deadline,
    as in a running fleet.)"""
    config = GovernorConfig(
        max_capacity=2, policy="fixed", lease_ttl=30.0, poll=0.1, queue_ttl=5.0, tenant_caps={"capped": 1}
    )
    tenant = "capped" if key == "parked" else None
    fleet = make_gov(config)
    held = [fleet.try_acquire(tenant=tenant)] + ([fleet.try_acquire()] if key == "queue" else [])
    assert all(lease is not None for lease in held)
    first: dict[str, Any] = {}
    _waiting(make_gov(config), first, tenant)
    wait_until(lambda: sync_client.zcard(getattr(fleet.keys, key)) == 1, 5, what=f"the caller in {key}")
    (stranded,) = sync_client.zrange(getattr(fleet.keys, key), 0, -1)
    sync_client.delete(getattr(fleet.keys, key))  # evicted, or a mistaken DEL
    later: dict[str, Any] = {}
    _waiting(make_gov(config), later, tenant)
    # back in its place within a few polls, ahead of the later caller
    wait_until(lambda: sync_client.zcard(getattr(fleet.keys, key)) == 2, 2.0, what="the stranded caller back")
    assert sync_client.zrange(getattr(fleet.keys, key), 0, -1)[0] == stranded
    for lease in held:
        assert lease is not None
        lease.release()
        wait_until(lambda: first, 2.0, what="the stranded caller admitted")
    assert "lease" in first, first
    first["lease"].release()
    wait_until(lambda: later, 2.0, what="the later caller admitted")
    later["lease"].release()
    repairs = [e for e in _events(sync_client, fleet) if e["kind"] == "repair"]
    assert any("place" in e["why"] for e in repairs), repairs


# -- the longest lease TTL follows the clients alive now ---------------------------


def test_the_longest_lease_ttl_decays_when_no_client_announces_it(
    make_gov: Any, clock: FakeClock, sync_client: Any
) -> None:
    """A one-off client of lease_ttl 3600 took and gave back one lease.
    Before: ttl_max stayed 3600 s for good, and a restart held a fleet of
    3 s leases for 3,597 s. Now a TTL counts for at least twice its own
    length after its last announcement (a holder cut off then may believe
    in a lease granted up to a third of it later, announced then or not)
    and at most four times: the fleet's next calls after that find 3 s, its
    client learns it, and the hold after a loss is 3 s."""
    fleet = make_gov(
        GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=3.0, poll=0.2, queue_ttl=1.0), clock=clock
    )
    fleet.status()
    one_off = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=3600.0), clock=clock)
    _cycle(one_off)
    assert fleet.status().ttl_max == 3600.0
    clock.advance(3599.0)
    _cycle(one_off)  # announced again just before a new period starts
    clock.advance(3.0)
    _cycle(fleet)  # the new period: a holder cut off 3 s ago may believe for 3597 s more
    assert fleet.status().ttl_max == 3600.0
    one_off.close()
    clock.advance(3601.0)  # past its own length since it was last announced: still counted
    _cycle(fleet)
    assert fleet.status().ttl_max == 3600.0
    clock.advance(7200.0)  # past twice its length since the period after it started: forgotten
    _cycle(fleet)
    assert fleet.status().ttl_max == 3.0
    sync_client.delete(*fleet.keys.keys)  # Redis restarted without persistence
    clock.advance(0.1)
    st = fleet.status()  # re-created by a client that knew the governor: a hold of the fleet's TTL
    assert st.recovery_hold and st.hold_until == pytest.approx(st.now + 3.0), st


def _cycle(gov: Governor) -> None:
    """A lease taken and given back: a client alive now announcing its TTL."""
    lease = gov.try_acquire()
    assert lease is not None
    lease.release()


def test_a_lease_granted_between_announcements_is_counted_through(make_gov: Any, clock: FakeClock) -> None:
    """A client announces its lease TTL at most once a third of it, so a
    lease may be granted up to that long after its holder's last
    announcement: the state counts a TTL for twice its length after the
    announcement, and the longest TTL stays at least as long as any lease
    lives, whatever periods shorter TTLs start meanwhile."""
    holder = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=6.0), clock=clock)
    fleet = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=1.5), clock=clock)
    _cycle(holder)  # announced at 0: a period starts
    clock.advance(5.9)
    _cycle(holder)  # announced again, late in that period
    clock.advance(0.1)
    _cycle(fleet)  # at 6.0
    clock.advance(1.8)
    lease = holder.try_acquire()  # at 7.8: announced 1.9 s ago, less than a third of 6 s: not again
    assert lease is not None
    assert holder._core.announced_at == pytest.approx(clock() - 1.9)
    for _ in range(6):  # until 13.8, when the lease ends: the fleet's short TTL starts periods
        clock.advance(0.95)
        _cycle(fleet)
        assert fleet.status().ttl_max == 6.0, f"at {clock()} s the lease granted at 7.8 s lives until 13.8 s"
    lease.release()


def test_a_client_announces_again_to_a_new_state(make_gov: Any, clock: FakeClock, sync_client: Any) -> None:
    """A client announced its TTL a moment before the state was lost; a
    client that never knew it re-creates the state with its own, shorter
    TTL. The first client's next acquire finds the new epoch, and the one
    after announces again, a third of its TTL early: the new state counts
    its 6 s before it holds its leases long."""
    holder = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=6.0), clock=clock)
    _cycle(holder)  # announced
    sync_client.delete(*holder.keys.keys)  # Redis restarted without persistence
    clock.advance(0.1)
    newcomer = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=1.5), clock=clock)
    assert newcomer.status().ttl_max == 1.5  # re-created by a client that never heard of 6 s
    clock.advance(0.1)
    _try_once(holder)  # 0.2 s after its announcement: not again, but it sees the new epoch
    assert newcomer.status().ttl_max == 1.5
    clock.advance(0.1)
    _try_once(holder)  # announced to the new state
    assert newcomer.status().ttl_max == 6.0


def _try_once(gov: Governor) -> None:
    """One try, admitted or denied (a new state may hold admissions a moment): a client calling now."""
    core, lease_id = gov._core, new_id()
    if isinstance(gov._execute(core.acquire(lease_id, core.ask("h"), wait=False)), Granted):
        gov._execute(core.release(lease_id))


def test_a_waiter_granted_after_a_long_wait_is_counted_through_its_lease(make_gov: Any, clock: FakeClock) -> None:
    """A waiter's client announced its TTL at most a third of it before it
    queued; granted after waiting more than half its TTL, the grant
    announces it again: the longest TTL covers the lease to its end, though
    the waiter's client made no call meanwhile and shorter TTLs started new
    periods."""
    fleet = make_gov(GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=1.5), clock=clock)
    waiter = make_gov(GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=6.0, queue_ttl=60.0), clock=clock)
    start = clock()
    fleet.status()  # a period starts with 1.5 s
    clock.advance(2.9)
    _cycle(waiter)  # 6 s announced late in that period
    clock.advance(0.1)
    fleet.pause("nothing admitted until resumed")
    clock.advance(1.8)
    core = waiter._core
    assert isinstance(waiter._execute(core.acquire(new_id(), core.ask("w"), wait=True)), Queued)
    assert core.announced_at == pytest.approx(clock() - 1.9)  # queued without announcing
    while clock() < start + 20.0:  # the fleet's short TTL starts periods meanwhile
        clock.advance(1.0)
        assert fleet.try_acquire() is None, f"paused, at {clock() - start:.1f} s"
    fleet.resume()  # the waiter is granted: its holder may believe in it for 6 s from now
    granted_at = clock()
    st = fleet.status()
    assert (st.in_flight, st.queued) == (1, 0), st
    while clock() < granted_at + 5.9:
        clock.advance(1.0)
        lease = fleet.try_acquire()  # (announces the short TTL)
        if lease is not None:
            lease.release()
        assert fleet.status().ttl_max == 6.0, f"{clock() - granted_at:.1f} s into a lease of 6 s"


def test_a_ttl_a_holder_renews_keeps_counting(make_gov: Any, clock: FakeClock) -> None:
    """A long-TTL holder that keeps renewing is never forgotten: its renewals announce it."""
    holder = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=60.0), clock=clock)
    fleet = make_gov(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=3.0), clock=clock)
    lease = holder.try_acquire()
    assert lease is not None
    for _ in range(10):  # 200 s: its heartbeat renews every 20 s
        clock.advance(20.0)
        holder.renew()
        _cycle(fleet)
    assert fleet.status().ttl_max == 60.0
    lease.release()


# -- capacity 0 only while paused ------------------------------------------------


@pytest.mark.parametrize("paused", [False, True])
def test_a_negative_stored_capacity_is_never_a_pause_nobody_lifts(
    sync_client: Any, make_gov: Any, clock: FakeClock, paused: bool
) -> None:
    """A stored capacity below its range is read as 0. Before: 0 without a
    pause, which nothing lifts (nobody admitted, status not "paused"). Now
    the next writing call resumes it at the resume level and logs it; a
    paused governor stays paused (its resume restores what it saved)."""
    config = GovernorConfig(max_capacity=4, resume_fraction=0.5, policy="fixed")
    gov = make_gov(config, clock=clock)
    gov.status()
    if paused:
        gov.pause("maintenance")
    sync_client.hset(gov.keys.state, "capacity", "-5")
    lease = make_gov(config, clock=clock).try_acquire()
    st = gov.status()
    if paused:
        assert lease is None and st.paused and st.capacity == 0, st
        assert gov.resume().capacity == 4
    else:
        assert lease is not None and not st.paused and st.capacity == 2, st
        lease.release()
        repairs = [e["why"] for e in _events(sync_client, gov) if e["kind"] == "repair"]
        assert any("capacity 0 without a pause" in why for why in repairs), repairs
