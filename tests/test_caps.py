"""Tenants' caps and the highest class's reserve, in the one admission rule
(lua/lib/shares.lua): real Redis and fakeredis, an injected clock. The
tests keep their own witness of who holds a lease (the ids they were
granted and have not released), never the governor's counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from governor import ConfigError, Governor, GovernorConfig
from governor.core import Denied, Granted, Queued, new_id
from governor.errors import GovernorError
from governor.protocol import PARK_SLOT

from .conftest import FakeClock

MakeGov = Callable[..., Governor]

SLOW = {"lease_ttl": 600.0, "queue_ttl": 600.0, "poll": 1.0, "restart_hold": False, "policy": "fixed"}


class Fleet:
    """One governor, driven call by call; ``holding`` is the test's own
    witness: lease id -> (tenant, priority), granted and not yet released."""

    def __init__(self, make_gov: MakeGov, clock: FakeClock, client: Any, **config: Any) -> None:
        self.gov = make_gov(GovernorConfig(**{**SLOW, **config}), clock=clock)
        self.client = client
        self.holding: dict[str, tuple[str, str | None]] = {}
        self.waiting: dict[str, tuple[str, str | None]] = {}

    def ask(self, tenant: str = "default", priority: str | None = None, wait: bool = True) -> tuple[str, Any]:
        lease = new_id()
        reply = self.gov._execute(
            self.gov._core.acquire(
                lease, self.gov._core.ask(f"{tenant}/{priority}", priority=priority, tenant=tenant), wait=wait
            )
        )
        if isinstance(reply, Granted):
            self.holding[lease] = (tenant, priority)
        elif isinstance(reply, Queued):
            self.waiting[lease] = (tenant, priority)
        return lease, reply

    def sync(self) -> None:
        """Move the waiters Redis granted to ``holding`` (their leases are live)."""
        for lease in list(self.waiting):
            if self.client.zscore(self.gov.keys.leases, lease) is not None:
                self.holding[lease] = self.waiting.pop(lease)

    def release(self, lease: str) -> None:
        self.gov._execute(self.gov._core.release(lease))
        del self.holding[lease]
        self.sync()

    def held_by(self, tenant: str) -> list[str]:
        return [lease for lease, (t, _) in self.holding.items() if t == tenant]

    def parked(self) -> set[str]:
        return {text(m) for m in self.client.zrange(self.gov.keys.parked, 0, -1)}


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


def test_a_tenant_at_its_cap_waits_and_the_others_are_admitted_past_it(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=6, tenant_caps={"a": 2})
    for _ in range(2):
        assert isinstance(fleet.ask("a")[1], Granted)
    _, denied = fleet.ask("a", wait=False)
    assert isinstance(denied, Denied) and denied.reason == "tenant a at its cap: 2 in flight of 2"
    parked = [fleet.ask("a")[0] for _ in range(3)]
    assert all(lease in fleet.waiting for lease in parked) and fleet.parked() == set(parked)
    for _ in range(4):  # b is not held up by a's waiters: the other 4 slots are b's at once
        assert isinstance(fleet.ask("b")[1], Granted)
    assert len(fleet.held_by("a")) == 2 and len(fleet.holding) == 6
    # One of a's leases ends: a's first parked waiter gets it, FIFO within a.
    fleet.release(fleet.held_by("a")[0])
    assert parked[0] in fleet.holding and fleet.parked() == set(parked[1:])
    # One of b's ends: the slot goes to nobody of a (at its cap), so a b newcomer gets it at once.
    fleet.release(fleet.held_by("b")[0])
    assert len(fleet.held_by("a")) == 2 and isinstance(fleet.ask("b")[1], Granted)


def test_a_parked_waiter_keeps_its_place_refreshes_and_cancels_cleanly(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=4, tenant_caps={"a": 1})
    fleet.ask("a")
    first, second = fleet.ask("a")[0], fleet.ask("a")[0]
    reply = fleet.gov._execute(fleet.gov._core.refresh([first, second]))
    assert set(reply.queued) == {first, second} and not reply.unknown  # parked is queued, not unknown
    again = fleet.gov._execute(
        fleet.gov._core.acquire(first, fleet.gov._core.ask("a", tenant="a"), wait=True, fresh=False)
    )
    assert isinstance(again, Queued)  # asked again: still parked once, not queued twice
    assert sync_client.zcard(fleet.gov.keys.queue) == 0 and fleet.parked() == {first, second}
    fleet.gov._execute(fleet.gov._core.cancel(first))
    del fleet.waiting[first]
    assert fleet.parked() == {second} and sync_client.hget(fleet.gov.keys.holders, first) is None
    assert sync_client.zscore(fleet.gov.keys.waiters, first) is None
    fleet.release(fleet.held_by("a")[0])
    assert second in fleet.holding and not fleet.parked()


def test_a_dead_parked_waiter_and_a_crashed_holder_give_their_places_back(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """A parked waiter that stops refreshing is dropped; a capped tenant's
    lease whose holder crashed expires, and a's next parked waiter gets it."""
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=4, tenant_caps={"a": 1}, lease_ttl=10.0, queue_ttl=5.0)
    crashed = fleet.ask("a")[0]
    dead = fleet.ask("a")[0]
    clock.advance(3)
    alive = fleet.ask("a")[0]
    clock.advance(3)  # dead's place ran out; alive's did not
    fleet.gov._execute(fleet.gov._core.refresh([alive]))
    assert fleet.parked() == {alive} and sync_client.hget(fleet.gov.keys.holders, dead) is None
    clock.advance(4.5)  # the crashed holder's lease (10 s) ran out; alive refreshed 4.5 s ago
    fleet.gov._execute(fleet.gov._core.refresh([alive]))
    assert sync_client.zscore(fleet.gov.keys.leases, crashed) is None
    assert sync_client.zscore(fleet.gov.keys.leases, alive) is not None  # a's count went down, alive unparked


def test_caps_changed_at_run_time_apply_at_once(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=8, tenant_caps={"a": 1, "b": 1})
    fleet.ask("a")
    fleet.ask("b")
    parked_a = [fleet.ask("a")[0] for _ in range(4)]
    parked_b = [fleet.ask("b")[0] for _ in range(2)]
    fleet.gov.set_shares(tenant_caps={"a": 3})  # a may hold 3 now; b has no cap
    fleet.sync()
    assert set(fleet.held_by("a")) > set(parked_a[:2]) and len(fleet.held_by("a")) == 3
    assert set(parked_b) <= set(fleet.holding)
    assert fleet.parked() == set(parked_a[2:])
    slot = {text(m): s for m, s in sync_client.zrange(fleet.gov.keys.parked, 0, -1, withscores=True)}
    assert all(int(s) // PARK_SLOT == 1 for s in slot.values())  # a is the first (and only) capped tenant
    fleet.gov.set_shares(tenant_caps={})
    fleet.sync()
    assert not fleet.parked() and len(fleet.held_by("a")) == 5
    assert sync_client.exists(fleet.gov.keys.held) == 0  # nothing counted without caps or a reserve


def test_the_reserve_keeps_slots_for_the_highest_class(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=4, reserve=1)
    for _ in range(3):
        assert isinstance(fleet.ask()[1], Granted)
    _, denied = fleet.ask(wait=False)
    assert isinstance(denied, Denied)
    assert denied.reason == "at capacity below the highest class: 3 in flight of 4 - 1 reserved"
    waiter = fleet.ask()[0]
    assert isinstance(fleet.ask(priority="interactive")[1], Granted)  # at once, past the waiter
    # The interactive lease does not count against the other classes: a default release goes to the waiter.
    fleet.release(next(lease for lease, (_, p) in fleet.holding.items() if p is None))
    assert waiter in fleet.holding and len(fleet.holding) == 4
    assert sum(p is None for _, p in fleet.holding.values()) == 3


def test_an_aged_waiter_may_take_the_reserve(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=2, reserve=1, aging=5.0)
    fleet.ask()
    old = fleet.ask(priority="batch")[0]
    clock.advance(6)
    fleet.gov._execute(fleet.gov._core.refresh([old]))
    fleet.sync()
    assert old in fleet.holding  # it waited aging: ahead of every class, the reserve included


@pytest.mark.parametrize(
    "config, message",
    [
        ({"tenant_caps": {"a": 0}}, r"tenant_caps\['a'\] must be an integer in \[1, 1000000\]"),
        ({"tenant_caps": {"a b": 1}}, "tenant 'a b' is invalid"),
        ({"tenant_caps": {f"t{i}": 1 for i in range(1001)}}, "at most 1000 may have a cap"),
        ({"reserve": 4, "max_capacity": 4}, r"reserve must be an integer in \[0, max_capacity - 1 = 3\]"),
        ({"reserve": -1}, "reserve must be"),
    ],
)
def test_bad_caps_and_reserves_are_config_errors(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GovernorConfig(**config)


def test_a_tampered_set_shares_is_refused_before_any_write(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=4)
    fleet.gov.status()
    before = sync_client.hgetall(fleet.gov.keys.config)
    core = fleet.gov._core
    for caps, reserve, error in [("a=0", "0", "tenant_caps must be"), ("a=1", "4", "reserve must be below")]:
        call = core._call("set_shares", ("", "1", "0", caps, reserve), core._parse_status)
        with pytest.raises(GovernorError, match=error):
            fleet.gov._execute(call)
    assert sync_client.hgetall(fleet.gov.keys.config) == before


def test_threads_never_hold_more_than_a_tenants_cap_or_the_reserve_allows(make_gov: MakeGov) -> None:
    """16 threads of tenant a (cap 3) and b, default class, and 2 threads of
    the interactive class, each acquiring and releasing with a real wait,
    against capacity 8 with a reserve of 2: at no moment does the test's own
    witness see more than 3 of a's, more than 6 below the highest class, or
    more than 8 in all."""
    gov = make_gov(
        GovernorConfig(max_capacity=8, reserve=2, tenant_caps={"a": 3}, policy="fixed", restart_hold=False, poll=0.05)
    )
    lock = threading.Lock()
    holding: dict[str, int] = {"a": 0, "low": 0, "all": 0}
    worst = dict(holding)
    errors: list[BaseException] = []

    def work(tenant: str, priority: str | None) -> None:
        try:
            for _ in range(12):
                with gov.acquire(tenant=tenant, priority=priority, timeout=30):
                    with lock:
                        holding["a"] += tenant == "a"
                        holding["low"] += priority is None
                        holding["all"] += 1
                        for key, value in holding.items():
                            worst[key] = max(worst[key], value)
                    time.sleep(0.002)
                    with lock:
                        holding["a"] -= tenant == "a"
                        holding["low"] -= priority is None
                        holding["all"] -= 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=("a" if i % 2 else "b", None)) for i in range(16)]
    threads += [threading.Thread(target=work, args=("b", "interactive")) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(thread.is_alive() for thread in threads)
    assert worst["a"] == 3 and worst["low"] <= 6 and worst["all"] <= 8, worst


def test_a_cap_lowered_below_what_a_tenant_holds_keeps_its_waiters_in_order(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """a holds 3 under a cap of 3 with 3 parked waiters; the cap drops to 1.
    Each release that leaves a at or above its new cap unparks nobody (no
    room: a waiter let back would be parked again, behind a's later ones);
    the first release that makes room grants a's first waiter, then its
    second: FIFO within the tenant."""
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=8, tenant_caps={"a": 3})
    held = [fleet.ask("a")[0] for _ in range(3)]
    assert set(fleet.held_by("a")) == set(held)
    parked = [fleet.ask("a")[0] for _ in range(3)]
    assert fleet.parked() == set(parked)
    fleet.gov.set_shares(tenant_caps={"a": 1})
    fleet.sync()
    assert fleet.parked() == set(parked) and len(fleet.held_by("a")) == 3
    order = lambda: [text(m) for m in sync_client.zrange(fleet.gov.keys.parked, 0, -1)]  # noqa: E731
    assert order() == parked
    fleet.release(held[0])  # a holds 2, its cap 1
    assert order() == parked and sync_client.zcard(fleet.gov.keys.queue) == 0
    fleet.release(held[1])  # a holds 1: exactly at its cap, still no room
    assert order() == parked, "a waiter let back at the cap is parked again behind the tenant's later ones"
    assert sync_client.zcard(fleet.gov.keys.queue) == 0
    fleet.release(held[2])  # room: the first waiter, then (as each ends) the next, in order
    granted = []
    for expected in parked:
        assert fleet.held_by("a") == [expected], (fleet.held_by("a"), parked)
        granted.append(expected)
        fleet.release(expected)
    assert granted == parked and not fleet.parked()


def test_reclaim_removes_an_expired_leases_record_and_count(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """A holder that stops renewing: reclaim (the next writing call after
    the lease expired) removes the lease, its holder record and its count in
    its tenant's cap, and the tenant's parked waiter takes the slot."""
    fleet = Fleet(make_gov, clock, sync_client, max_capacity=4, tenant_caps={"a": 1}, lease_ttl=5.0, queue_ttl=60.0)
    crashed, _ = fleet.ask("a")
    waiter, _ = fleet.ask("a")
    assert fleet.parked() == {waiter}
    assert sync_client.hget(fleet.gov.keys.holders, crashed) is not None
    assert text(sync_client.hget(fleet.gov.keys.held, "a")) == "1"
    clock.advance(6.0)  # past the lease's TTL, never renewed
    fleet.gov._execute(fleet.gov._core.refresh([waiter]))  # the waiter's poll: a writing call, reclaim runs
    assert sync_client.zscore(fleet.gov.keys.leases, crashed) is None
    assert sync_client.hget(fleet.gov.keys.holders, crashed) is None  # the record goes with the lease
    assert sync_client.zscore(fleet.gov.keys.leases, waiter) is not None  # the count went down: room for the waiter
    assert text(sync_client.hget(fleet.gov.keys.held, "a")) == "1"
