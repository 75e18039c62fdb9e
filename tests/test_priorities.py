"""Priority classes, aging and weighted fair shares between tenants, in the
fleet's one queue (lua/lib/queue.lua): real Redis and fakeredis, an
injected clock, one slot handed over at a time so the order is exact."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from governor import ConfigError, Governor, GovernorConfig, GovernorNotFound
from governor.core import Granted, Queued, new_id, text
from governor.errors import GovernorError
from governor.protocol import QUEUE_BAND
from governor.views import read_events

from .conftest import RAW_BACKENDS, FakeClock

MakeGov = Callable[..., Governor]

#: long TTLs: the injected clock moves by whole seconds and nobody refreshes
SLOW = {"lease_ttl": 600.0, "queue_ttl": 600.0, "poll": 1.0, "restart_hold": False}


class Slot:
    """A governor of capacity 1 whose slot is taken, so every caller queues;
    the slot is handed over one release at a time and the order noted."""

    def __init__(self, make_gov: MakeGov, clock: FakeClock, client: Any, **config: Any) -> None:
        self.gov = make_gov(GovernorConfig(max_capacity=1, policy="fixed", **{**SLOW, **config}), clock=clock)
        self.client = client
        self.holder = new_id()
        self.waiting: dict[str, str] = {}  # id -> label
        assert isinstance(
            self.gov._execute(self.gov._core.acquire(self.holder, self.gov._core.ask("holder"), wait=False)), Granted
        )

    def enqueue(self, label: str, priority: str | None = None, tenant: str | None = None) -> str:
        waiter = new_id()
        assert isinstance(
            self.gov._execute(
                self.gov._core.acquire(waiter, self.gov._core.ask(label, priority=priority, tenant=tenant), wait=True)
            ),
            Queued,
        )
        self.waiting[waiter] = label
        return waiter

    def hand_over(self, n: int) -> list[str]:
        """Release the slot ``n`` times: the labels of the waiters it went to, in order."""
        order = []
        for _ in range(n):
            self.gov._execute(self.gov._core.release(self.holder))
            (self.holder,) = [w for w in self.waiting if self.client.zscore(self.gov.keys.leases, w) is not None]
            order.append(self.waiting.pop(self.holder))
        return order


def test_a_higher_class_is_admitted_first_and_fifo_holds_within_a_class(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    slot = Slot(make_gov, clock, sync_client)
    for label, priority in [("b1", "batch"), ("d1", None), ("i1", "interactive"), ("b2", "batch"),
                            ("d2", "default"), ("i2", "interactive")]:  # fmt: skip
        slot.enqueue(label, priority)
        clock.advance(0.001)
    assert slot.hand_over(6) == ["i1", "i2", "d1", "d2", "b1", "b2"]


def test_weights_share_the_grants_and_a_tenant_alone_gets_them_all(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """Tenants a (weight 3) and b (1) each queue 12 at once: the grants go
    3:1 while both wait; the rest of a's go to a alone, one after another."""
    slot = Slot(make_gov, clock, sync_client, tenant_weights={"a": 3, "b": 1})
    for i in range(12):
        slot.enqueue(f"a{i}", tenant="a")
    for i in range(4):
        slot.enqueue(f"b{i}", tenant="b")
    order = slot.hand_over(16)
    assert sum(label.startswith("a") for label in order[:12]) == 9  # 3:1 while both wait
    assert [label for label in order if label.startswith("a")] == [f"a{i}" for i in range(12)]  # FIFO per tenant
    assert [label for label in order if label.startswith("b")] == [f"b{i}" for i in range(4)]
    assert all(label.startswith("a") for label in order[13:])  # b is done: a alone


def test_a_tenant_back_from_idle_gets_its_share_not_a_burst(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """While b was away, a was served 20 times; b's credit did not pile up:
    once back, b gets one grant in two (equal weights), not 20 in a row."""
    slot = Slot(make_gov, clock, sync_client)
    for i in range(30):
        slot.enqueue(f"a{i}", tenant="a")
    slot.hand_over(20)
    for i in range(6):
        slot.enqueue(f"b{i}", tenant="b")
    order = slot.hand_over(8)
    # b starts at the virtual time (one tag ahead of a's next at most): one in two, give or take the first
    assert sum(label.startswith("b") for label in order) in (4, 5), order


def test_a_lower_class_waiter_goes_ahead_of_every_class_once_it_waited_aging(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    slot = Slot(make_gov, clock, sync_client, aging=5.0)
    slot.enqueue("old-batch", "batch")
    clock.advance(1)
    for i in range(3):
        slot.enqueue(f"i{i}", "interactive")
    assert slot.hand_over(1) == ["i0"]  # not aged yet: the higher class first
    clock.advance(4)  # the batch waiter has waited 5 s
    slot.enqueue("i-late", "interactive")
    assert slot.hand_over(2) == ["old-batch", "i1"]
    gov = slot.gov
    (aged,) = [e for e in read_events(sync_client, gov.keys) if e.kind == "age"]
    assert aged.fields["waiters"] == "1" and aged.fields["holder"] == "old-batch"
    assert sync_client.zcard(gov.keys.aging) == 0


def test_a_newcomer_turned_away_at_capacity_ages_the_waiters_due_before_it_takes_its_place(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    """The rule turns the newcomer away (the slot is held) as it would any
    caller, so no grant can follow; the waiters due to age still go ahead
    then, and the newcomer's place says so."""
    slot = Slot(make_gov, clock, sync_client, aging=5.0)
    gov = slot.gov
    slot.enqueue("old-batch", "batch")
    clock.advance(5)
    queued = gov._execute(gov._core.acquire(new_id(), gov._core.ask("i-late", priority="interactive"), wait=True))
    assert isinstance(queued, Queued) and queued.position == 1  # behind the aged waiter, not ahead of it
    assert sync_client.zcard(gov.keys.aging) == 0
    assert [e.fields["holder"] for e in read_events(sync_client, gov.keys) if e.kind == "age"] == ["old-batch"]


def test_an_aged_waiter_keeps_its_tag_and_the_highest_class_never_ages(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    slot = Slot(make_gov, clock, sync_client, aging=2.0)
    gov = slot.gov
    batch = slot.enqueue("b", "batch")
    top = slot.enqueue("i", "interactive")
    assert sync_client.zcard(gov.keys.aging) == 1  # the interactive waiter has nothing to rise above
    before = float(sync_client.zscore(gov.keys.queue, batch))
    clock.advance(2)
    gov._execute(gov._core.refresh([batch, top]))
    after = float(sync_client.zscore(gov.keys.queue, batch))
    assert after == before % QUEUE_BAND < QUEUE_BAND  # band 0, same tag
    assert float(sync_client.zscore(gov.keys.queue, top)) >= QUEUE_BAND


def test_no_aging_when_it_is_off(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    slot = Slot(make_gov, clock, sync_client, aging=None)
    slot.enqueue("b", "batch")
    assert sync_client.exists(slot.gov.keys.aging) == 0


def test_cancel_and_a_dead_waiter_leave_no_aging_entry(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    slot = Slot(make_gov, clock, sync_client, aging=30.0, queue_ttl=2.0)
    gov = slot.gov
    cancelled = slot.enqueue("c", "batch")
    assert gov._execute(gov._core.cancel(cancelled)) == "queued"
    slot.enqueue("dies", "batch")
    clock.advance(3)  # it stopped refreshing: reclaim drops it
    gov._execute(gov._core.refresh([]))
    assert sync_client.zcard(gov.keys.aging) == 0 and sync_client.zcard(gov.keys.queue) == 0


@RAW_BACKENDS
def test_thousands_of_tenants_leave_no_trace_once_served(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    """A tenant's finish tag behind the virtual time says nothing: reclaim
    drops it, so distinct tenants do not grow Redis without bound."""
    slot = Slot(make_gov, clock, sync_client)
    gov = slot.gov
    for i in range(300):
        slot.enqueue(f"t{i}", tenant=f"tenant-{i}")
    assert sync_client.zcard(gov.keys.shares) == 300
    slot.hand_over(300)
    slot.enqueue("again", tenant="tenant-0")  # starts at its finish tag: the virtual time passes the others'
    slot.hand_over(1)
    clock.advance(2)  # reclaim runs at most once a second
    gov._execute(gov._core.refresh([]))
    assert [text(m) for m in sync_client.zrange(gov.keys.shares, 0, -1)] == ["1:tenant-0"]  # class 1, default


def test_a_bad_class_or_tenant_is_a_config_error_before_redis(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)
    with pytest.raises(ConfigError, match="unknown priority 'urgent'"):
        gov.acquire(timeout=1, priority="urgent")
    with pytest.raises(ConfigError, match="tenant"):
        gov.try_acquire(tenant="a b")
    with pytest.raises(ConfigError, match="tenant"):
        gov.acquire(timeout=1, tenant="x" * 65)
    with pytest.raises(GovernorNotFound):
        gov.status(create=False)  # nothing reached Redis


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"tenant_weights": {"a": 0}}, "0 or below"),
        ({"tenant_weights": {"a": -2}}, "0 or below"),
        ({"tenant_weights": {"a": 1.5}}, "integer"),
        ({"tenant_weights": {"a b": 1}}, "tenant"),
        ({"default_weight": 0}, "default_weight"),
        ({"priorities": ()}, "1 to 7"),
        ({"priorities": ("a", "a")}, "distinct"),
        ({"priorities": tuple("abcdefgh"), "default_priority": "a"}, "1 to 7"),
        ({"priorities": ("Hi",)}, "priority class"),
        ({"priorities": "abc"}, "tuple"),
        ({"default_priority": "urgent"}, "not one of"),
        ({"aging": 0}, "aging"),
        ({"aging": float("inf")}, "finite"),
    ],
)
def test_invalid_shares_config_is_refused(config: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GovernorConfig(**config)


def test_the_shares_config_round_trips_through_the_stored_config() -> None:
    config = GovernorConfig(priorities=("now", "later"), default_priority="later", aging=7.5,
                            tenant_weights={"b": 2, "a": 5}, default_weight=3)  # fmt: skip
    pairs = config.script_fields()
    stored = dict(zip(pairs[::2], pairs[1::2], strict=True))
    assert (stored["priorities"], stored["aging_ms"], stored["tenant_weights"]) == ("now,later", "7500", "a=5,b=2")
    assert GovernorConfig.from_stored(stored) == config
    assert config.weight_of("a") == 5 and config.weight_of("zed") == 3 and config.rank_of(None) == 1


def test_the_script_refuses_a_tampered_place(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)
    core = gov._core
    good = core.acquire(new_id(), core.ask("x"), wait=True)
    for bad, what in [(("7", "default", "1"), "rank"), (("0", "a|b", "1"), "tenant"), (("0", "a", "0"), "weight")]:
        call = type(good)(good.script, (*good.args[:-4], *bad, good.args[-1]), good.parse)  # (last: announce)
        with pytest.raises(GovernorError, match=what):
            gov._execute(call)


def test_leases_carry_their_class_and_tenant(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, **SLOW), clock=clock)
    with gov.acquire(timeout=1, priority="interactive", tenant="team-a") as lease:
        assert (lease.priority, lease.tenant) == ("interactive", "team-a")
    lease = gov.try_acquire()
    assert lease is not None and (lease.priority, lease.tenant) == ("default", "default")
    lease.release()


def test_threads_of_two_classes_through_the_facade(make_gov: MakeGov) -> None:
    """Real waiting through acquire(): with the slot taken, a batch caller
    and then an interactive caller queue; the interactive one goes first."""
    gov = make_gov(GovernorConfig(max_capacity=1, restart_hold=False))
    first = gov.acquire(timeout=5)
    got: list[str] = []
    lock = threading.Lock()

    def caller(priority: str) -> None:
        with gov.acquire(timeout=20, priority=priority):
            with lock:
                got.append(priority)

    batch = threading.Thread(target=caller, args=("batch",))
    batch.start()
    _until_queued(gov, 1)
    interactive = threading.Thread(target=caller, args=("interactive",))
    interactive.start()
    _until_queued(gov, 2)
    first.release()
    batch.join(20)
    interactive.join(20)
    assert got == ["interactive", "batch"]


def _until_queued(gov: Governor, n: int) -> None:
    from .support.servers import wait_until

    wait_until(lambda: gov.status().queued == n, 10, what=f"{n} queued")


def test_weights_change_at_run_time_for_every_client(make_gov: MakeGov, clock: FakeClock, sync_client: Any) -> None:
    slot = Slot(make_gov, clock, sync_client, tenant_weights={"a": 1})
    other = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)  # its own config names no weights
    other.status()
    status = other.set_shares(tenant_weights={"a": 3, "b": 2}, aging=None)
    assert status.max_capacity == 1
    assert other._core.ask(tenant="a").place.weight == 3
    slot.gov._learn_config()  # as the config wake makes every client do
    assert slot.gov._core.ask(tenant="b").place.weight == 2 and slot.gov._core.ask(tenant="c").place.weight == 1
    (changed,) = [e for e in read_events(sync_client, slot.gov.keys) if e.kind == "set_shares"]
    assert (changed.fields["tenant_weights"], changed.fields["from_weights"]) == ("a=3,b=2", "a=1")
    assert GovernorConfig.from_stored(slot.gov._core.stored_config or {}).aging is None
    with pytest.raises(ConfigError, match="0 or below"):
        other.set_shares(tenant_weights={"a": 0})


def test_the_script_refuses_tampered_weights(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)
    good = gov._core.set_shares(default_weight=2)
    for bad in [("a=0", "1", "0"), ("a=3,,b=1", "1", "0"), ("a b=1", "1", "0"), ("", "1001", "0")]:
        with pytest.raises(GovernorError, match="weight"):
            gov._execute(type(good)(good.script, (*good.args[:2], *bad), good.parse))


def test_threads_of_every_class_and_two_tenants_never_exceed_capacity_and_share_by_weight(redis_url: str) -> None:
    """Threads of tenants a and b (weighted 3:1), 6 each in the default
    class and 2 each in the others, hammer a capacity of 3 for 2 s. The
    witness is the test's own: a counter of holders under its own lock, and
    the default class's grants per tenant (both always have waiters there).
    Never more than 3 at once, and a took about 3 in 4 of its class's."""
    name = f"test-{new_id()[:12]}"
    config = GovernorConfig(max_capacity=3, policy="fixed", tenant_weights={"a": 3, "b": 1}, restart_hold=False)
    gov = Governor.from_url(redis_url, name, config)
    lock = threading.Lock()
    holding, worst = 0, 0
    grants = {(t, p): 0 for t in "ab" for p in ("interactive", "default", "batch")}
    stop = threading.Event()

    def worker(tenant: str, priority: str) -> None:
        nonlocal holding, worst
        while not stop.is_set():
            with gov.acquire(timeout=10, priority=priority, tenant=tenant):
                with lock:
                    holding += 1
                    worst = max(worst, holding)
                    grants[tenant, priority] += 1
                stop.wait(0.002)
                with lock:
                    holding -= 1

    mix = ["default"] * 6 + ["interactive", "batch"]
    threads = [threading.Thread(target=worker, args=(t, p)) for t in "ab" for p in mix]
    for thread in threads:
        thread.start()
    stop.wait(2.0)
    stop.set()
    for thread in threads:
        thread.join(15)
    gov.client.delete(*gov.keys.keys)
    gov.close()
    assert worst <= 3, f"{worst} held at once under a capacity of 3"
    default = grants["a", "default"] + grants["b", "default"]
    assert default > 30, f"only {default} grants of the default class in 2 s: {grants}"
    assert 0.6 <= grants["a", "default"] / default <= 0.9, grants


def test_set_shares_keeps_what_another_operator_changed_meanwhile(make_gov: MakeGov, clock: FakeClock) -> None:
    """Each call changes only what it names: the aging another client set
    after this one last looked stays when this one changes the weights."""
    one = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)
    other = make_gov(GovernorConfig(max_capacity=1, **SLOW), clock=clock)
    one.set_shares(tenant_weights={"a": 2})
    other.set_shares(aging=None)
    one._learn_config()  # the config wake
    one.set_shares(tenant_weights={"a": 4})
    stored = GovernorConfig.from_stored(one._core.stored_config or {})
    assert (stored.aging, stored.tenant_weights) == (None, (("a", 4),))
