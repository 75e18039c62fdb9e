"""The decision log (the ``events`` stream written by the scripts): every kind
of decision and the exact fields that explain it, read back through
``governor.views``; and the log stays bounded under a burst of decisions.

Runs on a real Redis and on fakeredis, decode_responses off and on; policy
time comes from the injected clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from governor import Governor, GovernorConfig, Outcome
from governor.policies import FixedPolicy, SeedPolicy
from governor.views import DecisionEvent, log_length, read_events, read_events_after

MakeGov = Callable[..., Governor]
S, R = Outcome.SUCCESS, Outcome.RATE_LIMITED


def newest(client: Any, gov: Governor, kind: str | None = None) -> DecisionEvent:
    events = read_events(client, gov.keys, 1, kinds={kind} if kind else None)
    assert events, f"no {kind or ''} decision logged"
    return events[0]


def kinds(client: Any, gov: Governor) -> list[str]:
    """Every kind in the log, oldest first."""
    return [e.kind for e in read_events_after(client, gov.keys, "0")]


def test_create_is_the_first_decision(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=8), clock=clock)
    gov.status()
    event = newest(sync_client, gov)
    # the adaptive policy's slow start: capacity starts at the resume level, max(1, 8 // 4)
    assert (event.kind, event.capacity, event.paused, event.at) == ("create", 2, False, clock.now)
    assert dict(event.fields) == {"why": "first use: no evidence that a fleet held this governor, no hold"}
    assert kinds(sync_client, gov) == ["create"]  # the start is the create entry's, no capacity entry before it


def test_adaptive_cut_logs_from_to_and_the_window(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, resume_fraction=1.0), clock=clock)  # no slow start: at 10
    leases = [gov.try_acquire(holder=f"h/{i}") for i in range(5)]
    clock.advance(1)
    gov.report(R)
    event = newest(sync_client, gov)
    assert event.kind == "capacity"
    assert event.capacity == 4  # floor(5 in flight * 0.9)
    assert dict(event.fields) == {
        "from": "10",
        "why": "rate-limited at 5 in flight: cut",
        "window_rate_limited": "1",
        "window_attempts": "1",
        "level": "5",
        "ceiling": "5",
        "lease_fence": "",  # reported without a lease
        "probe_wait": "15000",
    }
    for lease in leases:
        assert lease is not None
        lease.release()


def test_seed_increase_and_decrease(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(policy=SeedPolicy(), max_capacity=8), clock=clock)
    gov.report(R)
    gov.report(R)  # the second rate-limited attempt halves
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity, event.get("from"), event.get("why")) == (
        "capacity",
        4,
        "8",
        "rate-limited: decrease",
    )
    assert (event.get("window_rate_limited"), event.get("window_attempts")) == ("2", "2")
    gov.report(S)
    gov.report(S)
    gov.report(S)
    event = newest(sync_client, gov)
    assert (event.capacity, event.get("from"), event.get("why")) == (5, "4", "3 successes in a row: increase")
    assert (event.get("window_rate_limited"), event.get("window_attempts")) == ("2", "5")


def test_fixed_logs_no_capacity_change_only_the_hold(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(policy=FixedPolicy(), max_capacity=4, retry_after_cap=10), clock=clock)
    for _ in range(10):
        gov.report(R)
    gov.report(R, retry_after=2)
    for _ in range(10):
        gov.report(S)
    assert kinds(sync_client, gov) == ["create", "hold"]  # 429s are in the window, capacity never moved
    assert newest(sync_client, gov).capacity == 4


def test_policy_pause_and_its_resume(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    config = GovernorConfig(policy="seed", max_capacity=8, window=60)
    gov = make_gov(config, clock=clock)
    for _ in range(4):
        gov.report(R)
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity, event.paused) == ("pause", 0, True)
    assert dict(event.fields) == {
        "from": "2",  # capacity before the pause (8 halved twice)
        "why": "4 rate-limited attempts in the window",
        "window_rate_limited": "4",
        "window_attempts": "4",
    }
    clock.advance(61)
    gov.probe()
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity, event.paused) == ("resume", 2, False)  # max(1, 8 // 4)
    assert dict(event.fields) == {"why": "no rate-limited attempt left in the window"}


def test_operator_pause_resume_and_timed_pause(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=6, resume_fraction=1.0), clock=clock)  # no slow start: at 6
    gov.pause("deploy")
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity, event.paused) == ("pause", 0, True)
    assert dict(event.fields) == {"from": "6", "why": "operator: deploy", "until": "0"}
    gov.resume()
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity, event.paused) == ("resume", 6, False)
    assert dict(event.fields) == {"why": "operator", "was_paused": "1", "not_before": "0", "recovery_hold_kept": "0"}

    gov.pause("maintenance", duration=30)
    assert newest(sync_client, gov).get("until") == str(round((clock.now + 30) * 1000))
    clock.advance(31)
    gov.probe()
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity) == ("resume", 6)
    assert dict(event.fields) == {"why": "operator pause duration over"}

    length = sync_client.xlen(gov.keys.events)
    gov.resume()  # nothing to lift: nothing changed, so nothing is logged
    assert sync_client.xlen(gov.keys.events) == length


def test_resume_logs_a_cleared_hold_only_while_it_runs(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=6, retry_after_cap=10), clock=clock)
    gov.report(R, retry_after=5)
    until = str(round((clock.now + 5) * 1000))
    gov.resume()  # not paused, but a hold was running: it is lifted, and that is logged
    event = newest(sync_client, gov)
    assert (event.kind, event.paused) == ("resume", False)
    assert dict(event.fields) == {"why": "operator", "was_paused": "0", "not_before": until, "recovery_hold_kept": "0"}
    assert not gov.status().holding
    length = sync_client.xlen(gov.keys.events)
    gov.resume()  # again: nothing left to lift
    assert sync_client.xlen(gov.keys.events) == length
    gov.report(R, retry_after=2)
    clock.advance(3)  # the hold is over by itself
    length = sync_client.xlen(gov.keys.events)
    gov.resume()
    assert sync_client.xlen(gov.keys.events) == length


def test_hold_from_a_retry_after(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=6, retry_after_cap=10), clock=clock)
    gov.report(R, retry_after=2.5)
    event = newest(sync_client, gov, "hold")
    assert dict(event.fields) == {"until": str(round((clock.now + 2.5) * 1000)), "why": "provider retry-after 2500 ms"}
    gov.report(R, retry_after=60)  # capped at retry_after_cap
    event = newest(sync_client, gov, "hold")
    assert event.get("until") == str(round((clock.now + 10) * 1000))
    assert event.get("why") == "provider retry-after 60000 ms"


def test_set_max_reset_and_quota(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=6, resume_fraction=1.0), clock=clock)  # a reset back at max at once
    gov.set_max_capacity(9)  # a higher ceiling is approached as any ceiling: capacity stays
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity) == ("set_max", 6)
    assert dict(event.fields) == {"from": "6", "to": "9", "capacity_from": "6", "why": "operator"}
    gov.reset()
    event = newest(sync_client, gov)
    assert (event.kind, event.capacity) == ("reset", 9)
    assert dict(event.fields) == {
        "why": "operator: learnt state cleared",
        "from": "6",
        "was_paused": "0",
        "window_rate_limited": "0",
        "window_attempts": "0",
        "ttl_max_was": "30000",  # the longest lease TTL, counted again from the live leases
    }
    gov.configure()
    assert newest(sync_client, gov).get("why") == "operator: new config stored, learnt state cleared"
    gov.report(Outcome.QUOTA_EXHAUSTED)
    event = newest(sync_client, gov)
    assert event.kind == "quota"
    assert dict(event.fields) == {
        "count": "1",
        "why": "provider reported its quota exhausted (billing, not a throttle)",
    }


def test_state_loss_logs_recreate_and_adopt(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    config = GovernorConfig(max_capacity=8)
    gov = make_gov(config, clock=clock)
    lease = gov.acquire(timeout=5, holder="host-1/agent-1")
    sync_client.delete(*gov.keys.keys)  # a restart without persistence
    gov.renew()
    assert kinds(sync_client, gov) == ["recreate", "adopt"]
    recreate = newest(sync_client, gov, "recreate")
    hold_ms = round(config.lease_ttl * 1000)  # a holder cut off may believe that long
    assert recreate.capacity == 2
    assert dict(recreate.fields) == {
        "until": str(round(clock.now * 1000) + hold_ms),
        "listeners": "0",
        "why": "the state was lost (a Redis restart without it, a flush or an expiry) while a client held leases "
        f"or used it: holding {hold_ms} ms (the longest lease TTL known) for holders to re-register",
    }
    adopt = newest(sync_client, gov, "adopt")
    assert dict(adopt.fields) == {
        "lease": lease.id,
        "fence": str(lease.fence),
        "rank": "1",  # its place is kept: the default class ...
        "tenant": "default",  # ... and its tenant
        "why": "holder of a lease from a lost state renewed",
    }
    lease.release()


def test_events_are_newest_first_and_filtered_by_kind(make_gov: MakeGov, sync_client: Any, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=6), clock=clock)
    for n in (2, 3, 4):
        clock.advance(1)
        gov.set_max_capacity(n)
    gov.pause("x")
    recent = read_events(sync_client, gov.keys, 3)
    assert [e.kind for e in recent] == ["pause", "set_max", "set_max"]
    assert [e.get("to") for e in read_events(sync_client, gov.keys, 10, kinds={"set_max"})] == ["4", "3", "2"]
    assert read_events(sync_client, gov.keys, 0) == []
    everything = read_events_after(sync_client, gov.keys, "0")
    assert [e.kind for e in everything] == ["create", "set_max", "set_max", "set_max", "pause"]
    after = read_events_after(sync_client, gov.keys, everything[2].id)
    assert [e.id for e in after] == [e.id for e in everything[3:]]


def test_the_log_stays_bounded_under_a_burst(redis_url: str, name: str, clock: Any) -> None:
    """Thousands of decisions; the stream keeps about log_length entries (MAXLEN ~
    trims whole radix-tree nodes, 100 entries each by default). Real Redis only:
    fakeredis runs the same scripts, just several times slower."""
    log_len = 50
    client = redis.Redis.from_url(redis_url)
    gov = Governor(client, name, GovernorConfig(policy="seed", max_capacity=64, log_length=log_len), clock=clock)
    try:
        for i in range(1500):
            gov.set_max_capacity(40 + i % 2)
        for _ in range(250):  # seed: two 429s halve, the window drains, three successes add one
            gov.report(R)
            gov.report(R)
            clock.advance(61)
            gov.report(S)
            gov.report(S)
            gov.report(S)
        length = log_length(client, gov.keys)
        assert log_len <= length <= log_len + 100
        assert newest(client, gov).kind == "capacity"
        assert all(e.kind in ("set_max", "capacity") for e in read_events(client, gov.keys, log_len))
        assert len(read_events(client, gov.keys, 10_000)) == length
    finally:
        gov.close()
        client.close()
