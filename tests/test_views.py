"""governor.views: the read-only views behind the CLI and the exporter.

The governors are set up through the library on an injected clock that
starts a known time before the Redis server's clock, so ages and TTLs read
with the server's TIME are known to within the test's own run time.
Runs on a real Redis and on fakeredis, decode_responses off and on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from governor import Governor, GovernorConfig, Lease, Outcome, views
from governor.core import Granted, Queued, new_id
from governor.errors import StateError
from governor.policies import AdaptivePolicy, FixedPolicy, SeedPolicy
from governor.protocol import KEY_NAMES, KEYS, QUEUE_BAND, SCHEMA_VERSION, SENTINEL, governor_keys

from .conftest import FakeClock
from .support.servers import wait_until

MakeGov = Callable[..., Governor]
BEHIND = 100.0  # the injected clock runs this many seconds behind the server's


@pytest.fixture
def past(sync_client: Any) -> FakeClock:
    """A clock BEHIND seconds behind the Redis server's."""
    return FakeClock(views.server_time_ms(sync_client) / 1000 - BEHIND)


def test_host_of() -> None:
    assert views.host_of("host-3/agent-17") == "host-3"
    assert views.host_of("host-3/pool/agent-17") == "host-3"
    assert views.host_of("lonely") == "lonely"
    assert views.host_of("") == ""


def test_list_governors_finds_every_governor_and_nothing_else(make_gov: MakeGov, sync_client: Any, name: str) -> None:
    odd = f"{name}:gpt-4o/eu@team.x"
    for n in (name, odd):
        make_gov(GovernorConfig(max_capacity=2), governor_name=n).status()
    v = SCHEMA_VERSION
    sync_client.set(f"governor:v{v}:{{{name}-str}}:state", "not a hash")  # wrong type: not a governor
    sync_client.hset(f"other:v{v}:{{{name}-other}}:state", "x", "1")  # another prefix
    sync_client.hset(f"governor:v{v - 1}:{{{name}-old}}:state", "x", "1")  # another schema
    found = views.list_governors(sync_client)
    assert {name, odd} <= set(found)
    assert not {f"{name}-str", f"{name}-other", f"{name}-old"} & set(found)
    assert found == sorted(found)
    assert f"{name}-other" in views.list_governors(sync_client, prefix="other")


def test_read_leases(make_gov: MakeGov, sync_client: Any, past: FakeClock) -> None:
    gov = make_gov(GovernorConfig(policy="fixed", max_capacity=8, lease_ttl=300), clock=past)
    held = [gov.try_acquire(holder=f"host-{i % 2}/agent-{i}") for i in range(3)]
    # its lease is past expiry
    short = make_gov(GovernorConfig(policy="fixed", max_capacity=8, lease_ttl=30), clock=past)
    stale = short.try_acquire(holder="host-9/agent-9")
    listing = views.read_leases(sync_client, gov.keys)
    assert sync_client.zscore(gov.keys.leases, SENTINEL) is not None  # kept in Redis, never listed nor counted
    assert listing.total == 4 and SENTINEL not in {x.id for x in listing.items}
    assert [x.fence for x in listing.items] == sorted(x.fence for x in listing.items)
    by_id = {x.id: x for x in listing.items}
    for lease in held:
        assert lease is not None
        info = by_id[lease.id]
        assert (info.holder, info.fence, info.ttl) == (lease.holder, lease.fence, 300)
        assert (info.priority, info.tenant) == ("default", "default")  # a caller naming none
        assert info.host == lease.holder.split("/")[0]
        assert info.live
        assert BEHIND <= info.age < BEHIND + 10
        assert 300 - BEHIND - 10 < info.ttl_left <= 300 - BEHIND
    assert stale is not None
    assert not by_id[stale.id].live and by_id[stale.id].ttl_left < 0
    limited = views.read_leases(sync_client, gov.keys, limit=2)
    assert (limited.total, len(limited.items)) == (4, 2)
    for lease in [*held, stale]:
        assert lease is not None
        lease.release()
    empty = views.read_leases(sync_client, gov.keys)
    assert (empty.total, empty.items) == (0, ())  # only the sentinel is left
    assert sync_client.zscore(gov.keys.leases, SENTINEL) is not None


def test_read_leases_skips_unreadable_holder_entries(make_gov: MakeGov, sync_client: Any, past: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=8, lease_ttl=300), clock=past)
    lease = gov.try_acquire(holder="a/b")
    assert lease is not None
    sync_client.hset(gov.keys.holders, lease.id, "garbage")
    assert views.read_leases(sync_client, gov.keys).items == ()
    sync_client.hset(gov.keys.holders, lease.id, f"{lease.fence}|300000|1|0|0|1|a|b/c")  # no rank, no tenant
    assert views.read_leases(sync_client, gov.keys).items == ()
    sync_client.hset(gov.keys.holders, lease.id, f"{lease.fence}|300000|1|0|0|1|0|t|a|b/c")  # '|' in a label is kept
    (info,) = views.read_leases(sync_client, gov.keys).items
    assert (info.holder, info.fence, info.ttl, info.since) == ("a|b/c", lease.fence, 300, 0.001)
    assert (info.priority, info.tenant) == ("interactive", "t")  # rank 0 of the stored classes
    sync_client.hset(gov.keys.holders, lease.id, f"{lease.fence}|300000|1|0|0|1|6|t|a")  # a rank with no name
    assert views.read_leases(sync_client, gov.keys).items[0].priority == "rank-6"


@dataclasses.dataclass
class _Caller:
    label: str
    lease: Lease | None = None
    error: BaseException | None = None


@contextmanager
def queued_callers(gov: Governor, n: int) -> Iterator[list[str]]:
    """``n`` callers queued one after another, each blocked in acquire() in its own
    thread; on the way out they are all admitted, release at once and are joined."""
    callers: list[_Caller] = []
    threads: list[threading.Thread] = []

    def run(caller: _Caller) -> None:
        try:
            caller.lease = gov.acquire(timeout=30, holder=caller.label)
            caller.lease.release()
        except Exception as error:  # noqa: BLE001 - reported by the test below
            caller.error = error

    for i in range(n):
        caller = _Caller(f"waiter/{i}")
        thread = threading.Thread(target=run, args=(caller,), daemon=True)
        thread.start()
        callers.append(caller)
        threads.append(thread)
        wait_until(lambda i=i: gov.status().queued == i + 1, 10, what=f"caller {i} queued")
    try:
        yield [c.label for c in callers]
    finally:
        gov.set_max_capacity(n + 1)
        for thread in threads:
            thread.join(10)
    assert [c.error for c in callers] == [None] * n
    assert all(c.lease is not None for c in callers)


def test_read_queue_in_fifo_order(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock(views.server_time_ms(sync_client) / 1000)
    config = GovernorConfig(max_capacity=1, poll=1, queue_ttl=120)
    gov = make_gov(config, clock=clock)
    lease = gov.try_acquire(holder="holder/0")
    assert lease is not None
    with queued_callers(gov, 3) as labels:
        listing = views.read_queue(sync_client, gov.keys)
        assert listing.total == 3
        assert [w.holder for w in listing.items] == labels
        assert [w.position for w in listing.items] == [0, 1, 2]  # waiters ahead, as the waiter is told
        assert [w.place for w in listing.items] == [1, 2, 3]  # as people count
        assert [w.tag for w in listing.items] == sorted(w.tag for w in listing.items)  # one tenant: FIFO
        for waiter in listing.items:
            assert (waiter.priority, waiter.tenant, waiter.aged) == ("default", "default", False)
            assert waiter.live and waiter.host == "waiter"
            assert 0 <= waiter.waited < 30
            assert 90 < waiter.deadline - waiter.now <= 120
        assert [w.holder for w in views.read_queue(sync_client, gov.keys, limit=2).items] == labels[:2]
        lease.release()


#: long TTLs: the injected clock moves by whole seconds and nobody refreshes
SLOW = {"lease_ttl": 600.0, "queue_ttl": 600.0, "poll": 1.0, "restart_hold": False}


def take(gov: Governor, label: str, priority: str | None = None, tenant: str | None = None) -> str:
    """A lease granted at once (the governor has room), of this class and tenant."""
    lease = new_id()
    assert isinstance(
        gov._execute(gov._core.acquire(lease, gov._core.ask(label, priority=priority, tenant=tenant), wait=False)),
        Granted,
    )
    return lease


def enqueue(gov: Governor, label: str, priority: str | None = None, tenant: str | None = None) -> str:
    """A waiter queued (the governor is full), of this class and tenant; nobody refreshes it."""
    waiter = new_id()
    assert isinstance(
        gov._execute(gov._core.acquire(waiter, gov._core.ask(label, priority=priority, tenant=tenant), wait=True)),
        Queued,
    )
    return waiter


def test_read_queue_names_the_class_tenant_band_and_tag(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock(views.server_time_ms(sync_client) / 1000)
    config = GovernorConfig(max_capacity=2, policy="fixed", aging=5.0, tenant_weights={"a": 3}, **SLOW)
    gov = make_gov(config, clock=clock)
    take(gov, "h/interactive", "interactive", "a")
    take(gov, "h/batch", "batch", "b")
    enqueue(gov, "w/old-batch", "batch", "b")
    clock.advance(1)
    enqueue(gov, "w/default-a", None, "a")
    enqueue(gov, "w/interactive", "interactive")
    queue = views.read_queue(sync_client, gov.keys)
    assert [(w.holder, w.priority, w.tenant, w.aged) for w in queue.items] == [
        ("w/interactive", "interactive", "default", False),
        ("w/default-a", "default", "a", False),
        ("w/old-batch", "batch", "b", False),
    ]
    clock.advance(4.5)  # the batch waiter has waited 5.5 s: the next script moves it ahead of every class
    enqueue(gov, "w/late", "interactive")  # the same tenant: after w/interactive (FIFO within a tenant)
    queue = views.read_queue(sync_client, gov.keys)
    assert [(w.holder, w.aged) for w in queue.items] == [
        ("w/old-batch", True),  # aged: ahead of every class, its tag kept
        ("w/interactive", False),
        ("w/late", False),
        ("w/default-a", False),
    ]
    for waiter in queue.items:  # the listing's tag and band are the queue's score
        score = sync_client.zscore(gov.keys.queue, waiter.id)
        assert waiter.tag == int(score) % QUEUE_BAND and waiter.aged == (int(score) < QUEUE_BAND)
    leases = views.read_leases(sync_client, gov.keys)
    assert sorted((x.holder, x.priority, x.tenant) for x in leases.items) == [
        ("h/batch", "batch", "b"),
        ("h/interactive", "interactive", "a"),
    ]
    named = views.read_queue(sync_client, gov.keys, priorities=("hi", "mid", "lo"))  # names given, not read
    assert [w.priority for w in named.items] == ["lo", "hi", "hi", "mid"]
    assert views.read_priorities(sync_client, gov.keys) == ("interactive", "default", "batch")
    assert views.read_priorities(sync_client, governor_keys(f"{gov.name}-none")) == ()


def test_read_queue_reads_the_deadlines_of_a_long_queue_at_once(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock(views.server_time_ms(sync_client) / 1000)
    gov = make_gov(GovernorConfig(max_capacity=1, policy="fixed", **SLOW), clock=clock)
    take(gov, "h/0")
    ids = [enqueue(gov, f"w/{i}", tenant=f"t{i % 7}") for i in range(views._FEW + 6)]
    sync_client.zadd(gov.keys.waiters, {ids[3]: 1})  # its process died: past its deadline, not yet dropped
    whole = views.read_queue(sync_client, gov.keys)  # most of the queue: the waiters zset read in one go
    some = views.read_queue(sync_client, gov.keys, limit=views._FEW)  # a part: one ZSCORE each
    assert whole.total == len(ids) == len(whole.items) and len(some.items) == views._FEW
    same = [dataclasses.replace(w, now=0) for w in whole.items[: views._FEW]]
    assert same == [dataclasses.replace(w, now=0) for w in some.items]  # read at another instant
    dead = [w.holder for w in whole.items if not w.live]
    assert dead == ["w/3"] and all(590 < w.deadline - w.now <= 600 for w in whole.items if w.live)
    counted = views.count_shares((), whole.items)
    assert sum(c.queued for c in counted.by_tenant.values()) == len(ids) - 1


def test_class_name() -> None:
    classes = ("interactive", "default", "batch")
    assert [views.class_name(classes, r) for r in (0, 1, 2)] == list(classes)
    assert views.class_name(classes, 3) == "rank-3" and views.class_name((), 0) == "rank-0"


def _lease(priority: str, tenant: str, live: bool = True) -> views.LeaseInfo:
    return views.LeaseInfo("id", "h/1", priority, tenant, 1, 0.0, 100.0 if live else 5.0, 60.0, 10.0)


def _waiter(priority: str, tenant: str, aged: bool = False, live: bool = True) -> views.WaiterInfo:
    return views.WaiterInfo("id", 0, "h/1", priority, tenant, aged, 0, 0.0, 100.0 if live else 5.0, 10.0)


def test_count_shares_per_class_and_tenant() -> None:
    classes = ("interactive", "default", "batch")
    leases = [_lease("interactive", "a"), _lease("default", "a"), _lease("default", "b"), _lease("batch", "z", False)]
    waiters = [
        _waiter("batch", "b", aged=True),
        _waiter("batch", "b"),
        _waiter("default", "c"),
        _waiter("default", "c", live=False),  # dead, not yet dropped: not counted, as the status does not
        _waiter("rank-5", "c"),
    ]
    counted = views.count_shares(leases, waiters, classes)
    assert list(counted.by_class) == ["interactive", "default", "batch", "rank-5"]  # every class, in rank order
    assert counted.by_class["interactive"] == views.Count(1, 0, 0)
    assert counted.by_class["default"] == views.Count(2, 1, 0)
    assert counted.by_class["batch"] == views.Count(0, 2, 1)  # the expired lease is not counted
    assert list(counted.by_tenant) == ["b", "a", "c"]  # the most loaded first, then by name
    assert (counted.by_tenant["b"], counted.by_tenant["a"]) == (views.Count(1, 2, 1), views.Count(2, 0, 0))
    assert counted.by_tenant["c"].load == 2 and "z" not in counted.by_tenant
    assert counted.by_pair[("batch", "b")] == views.Count(0, 2, 1)
    assert next(iter(counted.by_pair)) == ("interactive", "a")
    assert sum((c for c in counted.by_pair.values()), views.Count()) == views.Count(3, 4, 1)
    assert counted.complete
    top = counted.top_tenants(1)
    assert top == {"b": views.Count(1, 2, 1), views.OTHER: views.Count(2, 2, 0)}  # the rest summed under one name
    assert counted.top_tenants(3) == counted.by_tenant  # nobody left over: no other
    assert counted.top_tenants(0) == {views.OTHER: views.Count(3, 4, 1)}
    pairs = counted.top_pairs(1)
    assert pairs[("default", "b")] == views.Count(1, 0, 0) and pairs[("default", views.OTHER)] == views.Count(1, 1, 0)
    assert sum((c for c in pairs.values()), views.Count()) == views.Count(3, 4, 1)
    empty = views.count_shares((), (), classes)
    assert list(empty.by_class) == list(classes) and not empty.by_tenant and empty.top_tenants(10) == {}


def test_read_breakdown_counts_every_lease_and_waiter_up_to_a_limit(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock(views.server_time_ms(sync_client) / 1000)  # live by the server's clock, which the listings use
    gov = make_gov(GovernorConfig(max_capacity=3, policy="fixed", **SLOW), clock=clock)
    for i in range(3):
        take(gov, f"h/{i}", "batch" if i else None, f"t{i % 2}")
    for i in range(4):
        enqueue(gov, f"w/{i}", "interactive", f"t{i % 2}")
    counted = views.read_breakdown(sync_client, gov.keys)
    assert counted.complete and counted.priorities == ("interactive", "default", "batch")
    assert counted.by_class == {
        "interactive": views.Count(0, 4, 0),
        "default": views.Count(1, 0, 0),
        "batch": views.Count(2, 0, 0),
    }
    assert counted.by_tenant == {"t0": views.Count(2, 2, 0), "t1": views.Count(1, 2, 0)}
    cut = views.read_breakdown(sync_client, gov.keys, limit=2)
    assert not cut.complete and sum(c.load for c in cut.by_class.values()) == 4  # 2 leases, 2 waiters
    none = views.read_breakdown(sync_client, governor_keys(f"{gov.name}-none"))
    assert none.complete and none.priorities == () and not none.by_class and not none.by_tenant


def test_read_events_and_wait_events(make_gov: MakeGov, sync_client: Any, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4), clock=clock)
    gov.status()
    last = views.last_event_id(sync_client, gov.keys)
    assert last != "0"
    assert views.wait_events(sync_client, gov.keys, last, block=0.05) == []
    gov.set_max_capacity(5)
    gov.report(Outcome.QUOTA_EXHAUSTED)
    new = views.wait_events(sync_client, gov.keys, last, block=1)
    assert [e.kind for e in new] == ["set_max", "quota"]
    assert views.log_length(sync_client, gov.keys) == 3
    unknown = governor_keys(f"{gov.name}-none")
    assert views.last_event_id(sync_client, unknown) == "0"
    assert views.read_events(sync_client, unknown, 5) == []
    assert views.log_length(sync_client, unknown) == 0


def test_read_keys(make_gov: MakeGov, sync_client: Any, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, idle_expiry=3600), clock=clock)
    lease = gov.try_acquire(holder="h/1")
    infos = {i.role: i for i in views.read_keys(sync_client, gov.keys)}
    assert list(infos) == list(KEY_NAMES)
    assert [(i.role, i.expected) for i in infos.values()] == list(KEYS)
    assert (infos["state"].type, infos["config"].type, infos["leases"].type, infos["events"].type) == (
        "hash",
        "hash",
        "zset",
        "stream",
    )
    # leases and holders keep a sentinel entry each: not counted
    assert (infos["leases"].size, infos["holders"].size, infos["events"].size) == (1, 1, 1)
    assert sync_client.zcard(gov.keys.leases) == 2 and sync_client.hlen(gov.keys.holders) == 2
    assert infos["config"].size == len(views.read_config(sync_client, gov.keys))
    assert infos["queue"].type == "none" and infos["queue"].ttl is None
    assert infos["state"].ttl is not None and 3500 < infos["state"].ttl <= 3600
    assert infos["state"].key == gov.keys.state
    assert not any(i.wrong_type for i in infos.values())
    assert lease is not None
    lease.release()
    after = {i.role: i for i in views.read_keys(sync_client, gov.keys)}
    assert (after["leases"].type, after["leases"].size, after["holders"].size) == ("zset", 0, 0)
    assert all(i.type == "none" for i in views.read_keys(sync_client, governor_keys(f"{gov.name}-none")))
    other = governor_keys(f"{gov.name}-odd")
    sync_client.set(other.leases, "not a zset")
    odd = {i.role: i for i in views.read_keys(sync_client, other)}
    assert odd["leases"].wrong_type and (odd["leases"].type, odd["leases"].expected) == ("string", "zset")
    assert not odd["state"].wrong_type  # missing is not wrong
    sync_client.delete(other.leases)


@pytest.mark.parametrize(
    "policy",
    [
        AdaptivePolicy(cut_factor=0.8, probe_interval=5),
        SeedPolicy(decrease_count=3, decrease_ratio=0.4),
        FixedPolicy(),
    ],
    ids=lambda p: p.name,
)
def test_the_stored_config_reads_back(make_gov: MakeGov, sync_client: Any, clock: FakeClock, policy: Any) -> None:
    config = GovernorConfig(
        max_capacity=7, policy=policy, window=30, resume_fraction=0.5, retry_after_cap=12.5, idle_expiry=7200,
        log_length=500,
    )  # fmt: skip
    gov = make_gov(config, clock=clock)
    gov.status()
    stored = views.read_config(sync_client, gov.keys)
    assert stored["policy"] == policy.name and stored["max_capacity"] == "7"
    assert GovernorConfig.from_stored(stored) == config  # the inverse of GovernorConfig.script_fields
    assert views.read_config(sync_client, governor_keys(f"{gov.name}-none")) == {}
    with pytest.raises(StateError, match="incomplete"):
        GovernorConfig.from_stored({k: v for k, v in stored.items() if k != "window_ms"}, name=gov.name)


def test_state_of_names_the_scripts_answer(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(policy="fixed", max_capacity=2, retry_after_cap=600), clock=clock)
    st = gov.status()
    assert (views.state_of(st), st.blocked) == ("open", "")
    held = [gov.try_acquire(holder=f"h/{i}") for i in range(2)]
    full = gov.status()
    assert (views.state_of(full), full.blocked) == ("full", "at capacity: 2 in flight of 2")
    for lease in held:
        assert lease is not None
        lease.release()
    gov.report(Outcome.RATE_LIMITED, retry_after=60)
    holding = gov.status()
    assert views.state_of(holding) == "holding"
    assert holding.blocked.startswith("holding until the provider's retry-after (ends in ")
    paused = gov.pause("deploy")
    assert (views.state_of(paused), paused.blocked) == ("paused", "paused: deploy")
    # the word follows the scripts' answer, not a rule of its own
    assert views.state_of(dataclasses.replace(paused, blocked="")) == "open"
    assert views.state_of(dataclasses.replace(st, blocked="earlier callers are queued")) == "full"
