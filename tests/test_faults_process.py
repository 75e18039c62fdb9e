"""Faults around processes, connection pools, script failures and a full Redis.

- a child forked from a process that uses a ``Governor`` queues and is
  admitted on the same object; a lease it takes is renewed by its own heartbeat;
- 128 and 2,000 asyncio callers on one default ``AsyncGovernor.from_url``;
- a script that fails after it began (a bad field in the state hash) writes
  nothing and never hands a fence out twice;
- Redis out of memory (``maxmemory`` with ``noeviction``): ``RedisFull``;
- a refused connection fails at once; a hung Redis behind a user's client
  without socket timeouts fails within ``redis_timeout``; a lost state comes
  back with the config the clients last saw; a process's first admission
  loads its scripts without NOSCRIPT round trips.

Every test counts simultaneous holders itself (a witness: holders enter when
``acquire`` returns and leave right before they release or when they see
``lease.lost``), never from the governor's status. Worker processes live in
tests/support/process_workers.py and report through a *control* Redis (the session's
``redis_url``). Every wait is bounded; figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

import governor
import governor.scripts
from governor import (
    AsyncGovernor,
    Governor,
    GovernorConfig,
    GovernorError,
    GovernorUnavailable,
    LeaseLost,
    Outcome,
    StateError,
)
from governor.protocol import SENTINEL

from .support import process_workers
from .support.faultkit import FAST, SPAWN, Processes, figure, next_event
from .support.servers import RedisServer, free_port, wait_until

#: a private Redis the test has just started held no fleet's leases before: no
#: admission hold for the restart it might have been
FRESH: dict[str, Any] = {"restart_hold": False}


@pytest.fixture
def witness() -> str:
    return f"witness:{uuid.uuid4().hex}"


def witness_max(control: redis.Redis, witness: str) -> int:
    return int(control.get(f"{witness}:max") or 0)


class Witness:
    """In one process: holders counted under a lock, with the highest count
    and the time of every admission."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holding = 0
        self.max = 0
        self.admitted: list[float] = []

    def enter(self) -> None:
        with self.lock:
            self.holding += 1
            self.max = max(self.max, self.holding)
            self.admitted.append(time.monotonic())

    def leave(self) -> None:
        with self.lock:
            self.holding -= 1


def dump(client: redis.Redis, gov: Governor | AsyncGovernor) -> dict[str, Any]:
    """Everything the governor keeps in Redis, key by key (no TTLs: they tick)."""
    out: dict[str, Any] = {}
    for key in gov.keys.keys:
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "hash":
            out[key] = ("hash", sorted(client.hgetall(key).items()))
        elif kind == "zset":
            out[key] = ("zset", client.zrange(key, 0, -1, withscores=True))
        elif kind == "stream":
            out[key] = ("stream", client.xlen(key), [entry[0] for entry in client.xrange(key)])
        else:
            out[key] = (kind,)
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {
        key: (before.get(key), after.get(key)) for key in set(before) | set(after) if before.get(key) != after.get(key)
    }


# -- 1. a forked child that must queue ----------------------------------------------------


def test_forked_children_queue_on_the_parents_governor_and_every_slot_comes_home(
    redis_url: str, control: redis.Redis, name: str, events: str, witness: str, processes: Processes
) -> None:
    """The parent holds the whole capacity, then forks three children that
    call blocking ``acquire`` on the same object: they must queue, be
    admitted one after another as slots free up, hold their leases past a
    TTL (renewed by their own heartbeat) and give every slot back."""
    config = GovernorConfig(policy="fixed", max_capacity=2, **FAST)
    children = 3
    processes.start(
        process_workers.fork_parent,
        redis_url,
        name,
        config,
        2,
        children,
        "queue",
        12.0,
        1.5,
        redis_url,
        events,
        witness,
        daemon=False,  # it forks children of its own
    )
    forked = next_event(control, events, "forked")
    processes.pids += forked["children"]
    gov = Governor.from_url(redis_url, name, config)
    try:
        try:  # the children queue behind the parent's two leases
            wait_until(lambda: gov.status().queued == children, 5, what="three queued children")
            queued = children
        except AssertionError:
            queued = gov.status().queued
        control.set(f"{events}:release", 1, ex=300)
        released_at = time.monotonic()
        done = [next_event(control, events, "child-done", 12.0 + 1.5 + 20) for _ in range(children)]
        next_event(control, events, "parent-done", 30)
        last = time.monotonic()
        # every slot comes home at once, none stranded for a TTL
        wait_until(lambda: gov.status().in_flight == 0, 5, interval=0.01, what="every slot home")
        home = time.monotonic() - last
        st = gov.status()
        figure("forked children: queued behind the parent (of 3)", queued, "")
        for event in done:
            figure(f"forked child {event['pid']}: waited", event["waited"])
        figure("forked children: all done after the parent released", last - released_at)
        figure("forked children: last slot home after", home)
        figure("forked children: witness max holders (max 2)", witness_max(control, witness), "")
        errors = [event["error"] for event in done if event["error"]]
        assert not errors, f"children not admitted: {errors}"
        assert all(event["held"] and not event["lost"] for event in done), done
        assert witness_max(control, witness) <= config.max_capacity
        assert len({event["fence"] for event in done}) == children
        assert home < 0.5, f"a slot came home only after {home:.2f} s (stranded until its TTL)"
        assert (st.in_flight, st.queued) == (0, 0)
    finally:
        gov.close()


def test_a_forked_childs_try_acquire_lease_is_renewed_by_the_childs_heartbeat(
    redis_url: str, control: redis.Redis, name: str, events: str, witness: str, processes: Processes
) -> None:
    config = GovernorConfig(policy="fixed", max_capacity=2, **{**FAST, "lease_ttl": 0.6})
    hold = 3 * config.lease_ttl
    processes.start(
        process_workers.fork_parent,
        redis_url,
        name,
        config,
        1,
        1,
        "try",
        5.0,
        hold,
        redis_url,
        events,
        witness,
        daemon=False,  # it forks a child of its own
    )
    forked = next_event(control, events, "forked")
    processes.pids += forked["children"]
    gov = Governor.from_url(redis_url, name, config)
    try:
        done = next_event(control, events, "child-done", hold + 20)
        control.set(f"{events}:release", 1, ex=300)
        next_event(control, events, "parent-done", 30)
        figure("forked child try_acquire: held for (3 TTLs)", hold)
        print("child:", {k: done.get(k) for k in ("error", "held", "lost", "unlisted")})
        assert done["error"] is None
        assert done["held"] and not done["lost"], "the child's lease was lost: nobody renewed it"
        assert done["unlisted"] == [], f"Redis stopped listing the child's lease after {done['unlisted'][:1]} s"
        assert witness_max(control, witness) <= config.max_capacity
        wait_until(lambda: gov.status().in_flight == 0, 3, what="every slot home")
    finally:
        gov.close()


# -- 2. 128 and 2,000 asyncio callers on one default AsyncGovernor.from_url -------------------


async def test_128_asyncio_agents_on_a_default_from_url_use_every_slot(redis_url: str, name: str) -> None:
    """The README's scenario: 128 agents, max_capacity 128, one
    ``AsyncGovernor.from_url``; each loops acquire, a short call, report
    SUCCESS, release. No call may fail for want of a connection."""
    gov = AsyncGovernor.from_url(redis_url, name, GovernorConfig(max_capacity=128))
    wit = Witness()
    errors: dict[str, int] = {}
    lost = 0
    stop = time.monotonic() + 4.0
    all_hold = asyncio.Event()

    async def agent(seed: int) -> None:
        nonlocal lost
        rng = random.Random(seed)
        while time.monotonic() < stop:
            try:
                lease = await gov.acquire(timeout=10, holder=f"agent-{seed}")
            except GovernorError as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                await asyncio.sleep(0.01)
                continue
            wit.enter()
            if wit.max == 128:
                all_hold.set()
            try:
                await asyncio.sleep(rng.uniform(0.02, 0.1))
                if lease.lost:
                    lost += 1
                else:
                    await gov.report(Outcome.SUCCESS, lease=lease)
                if not all_hold.is_set():  # (the successes raise capacity from its slow start)
                    # hold on until all 128 hold at once (10 s at most), however loaded the host
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(all_hold.wait(), 10)
            except LeaseLost:
                lost += 1
            except GovernorError as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
            finally:
                wit.leave()
                try:
                    await lease.release()
                except GovernorError as error:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1

    try:
        await asyncio.wait_for(asyncio.gather(*(agent(i) for i in range(128))), 60)
        st = await gov.status()
    finally:
        await gov.aclose()
    figure("128 agents: admissions in 4 s", len(wit.admitted), "")
    figure("128 agents: witness max holders (max 128)", wit.max, "")
    print("errors:", errors, "lost leases:", lost)
    assert errors.get("GovernorUnavailable", 0) == 0, f"GovernorUnavailable: {errors}"
    assert errors == {}
    assert lost == 0
    assert wit.max == 128, f"at most {wit.max} of 128 slots used"
    assert st.in_flight == 0


async def test_2000_asyncio_waiters_on_one_from_url_are_all_admitted_without_stalls(redis_url: str, name: str) -> None:
    """2,000 callers queue against capacity 5 on one default
    ``AsyncGovernor.from_url``; each holds 5-20 ms once."""
    gov = AsyncGovernor.from_url(redis_url, name, GovernorConfig(max_capacity=5))
    wit = Witness()
    errors: dict[str, int] = {}
    admitted = 0
    lost = 0
    deadline = time.monotonic() + 60

    async def waiter(seed: int) -> None:
        nonlocal admitted, lost
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            try:
                lease = await gov.acquire(timeout=max(0.1, deadline - time.monotonic()))
            except GovernorError as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            wit.enter()
            admitted += 1
            try:
                await asyncio.sleep(rng.uniform(0.005, 0.02))
                lost += lease.lost
            finally:
                wit.leave()
                try:
                    await lease.release()
                except GovernorError as error:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
            return

    started = time.monotonic()
    try:
        await asyncio.wait_for(asyncio.gather(*(waiter(i) for i in range(2000))), 90)
    finally:
        await gov.aclose()
    took = time.monotonic() - started
    times = [started, *sorted(wit.admitted)]
    stretch = max((b - a for a, b in itertools.pairwise(times)), default=took)
    figure("2,000 waiters: all done after", took)
    figure("2,000 waiters: admitted", admitted, "")
    figure("2,000 waiters: longest stretch without an admission", stretch)
    figure("2,000 waiters: witness max holders (max 5)", wit.max, "")
    print("errors:", errors, "lost:", lost)
    assert errors == {}, f"errors: {errors}"
    assert admitted == 2000
    assert wit.max <= 5
    assert lost == 0
    assert stretch <= 1.5, f"{stretch:.2f} s without an admission"


# -- 3. a script that fails after it began leaves nothing behind --------------------------


#: a stored field -> (its hash, a good value): state and config fields the hot functions read
FIELDS = {
    "log_length": ("config", "10000"),
    "idle_ms": ("config", "86400000"),
    "window_ms": ("config", "60000"),
    "capacity": ("state", "2"),
}
SCRIPTS = ["acquire", "renew", "report", "release", "refresh"]


def _names_field(message: str, field: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(field)}(?![A-Za-z0-9_])", message) is not None


@pytest.mark.parametrize("script", SCRIPTS)
# a number out of its range is no longer unusable: it is read as the nearest
# bound and repaired by the next write (tests/test_faults_remaining.py)
@pytest.mark.parametrize("bad", ["abc"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_bad_state_field_stops_every_hot_script_before_it_writes(
    redis_url: str, name: str, field: str, bad: str, script: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The state is re-created under a new epoch while this object holds two
    leases (one of them gone with the old state: ``renew`` would adopt it),
    with an expired lease to reclaim and a field of the state or config hash
    holding a bad value. The call fails with a StateError naming the field,
    writes nothing, and no fence is handed out twice afterwards. A release
    with nobody queued reads no state at all: it removes its lease, and only
    that."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10, decode_responses=True)
    config = GovernorConfig(
        max_capacity=2, resume_fraction=1.0, lease_ttl=30.0, poll=0.2, queue_ttl=1.0, redis_timeout=2.0
    )
    gov = Governor(client, name, config)
    keys = gov.keys
    caught: list[BaseException] = []
    waiter: threading.Thread | None = None
    try:
        adopt = gov.acquire(timeout=5, holder="adopt-me")  # gone with the old state
        kept = gov.acquire(timeout=5, holder="kept")  # still listed
        if script == "refresh":  # a caller of this object waits in the queue

            def wait() -> None:
                try:
                    gov.acquire(timeout=4, holder="waiter").release()
                except BaseException as error:  # noqa: BLE001 - reported to the test
                    caught.append(error)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            wait_until(lambda: gov.status().queued == 1, 5, what="a queued waiter")
        old_fences = {adopt.fence, kept.fence}
        # The state re-created under a new epoch (as after a restart), in one
        # step, with a lease to reclaim and every periodic duty due.
        pipe = client.pipeline(transaction=True)
        hash_name, good = FIELDS[field]
        pipe.hset(keys.state, mapping={"epoch": uuid.uuid4().hex, "touch_due": 0, "reclaim_due": 0})
        pipe.hset(getattr(keys, hash_name), field, bad)
        pipe.zrem(keys.leases, adopt.id)
        pipe.hdel(keys.holders, adopt.id)
        pipe.zadd(keys.leases, {"ghost": 1})
        pipe.hset(keys.holders, "ghost", "1|30000|0|1|ghost")
        pipe.execute()
        before = dump(client, gov)

        error: BaseException | None = None
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="governor"):
            try:
                if script == "acquire":
                    gov.acquire(timeout=1, holder="new")
                elif script == "renew":
                    gov.renew()
                elif script == "report":
                    gov.report(Outcome.SUCCESS, lease=kept)
                elif script == "release":
                    kept.release()
                else:  # the waiter's refreshes run in the background for a while
                    assert waiter is not None
                    waiter.join(8)
                    assert not waiter.is_alive()
                    error = caught[0] if caught else None
            except GovernorError as raised:
                error = raised
        took = time.monotonic() - started
        after = dump(client, gov)
        logged = " ".join(record.getMessage() for record in caplog.records)
        print(f"{script} with {field}={bad!r}: {type(error).__name__ if error else 'no error'}: {error} ({took:.2f} s)")
        if script == "release":  # nobody queued: no state read, the lease and its record go
            assert error is None, repr(error)
            changed = diff(before, after)
            assert set(changed) == {keys.leases, keys.holders}, changed
            assert kept.id not in str(after[keys.leases]) and kept.id not in str(after[keys.holders])
            assert kept.id in str(before[keys.leases]) and kept.id in str(before[keys.holders])
            client.hset(getattr(keys, hash_name), field, good)
            adopt.release()
            return
        assert diff(before, after) == {}, f"{script} wrote to the state before it failed"
        assert error is not None, f"{script} with {field}={bad!r} did not fail"
        if script == "refresh":  # the waiter learns, or the worker's warning says, which field
            assert isinstance(error, GovernorError)
            assert _names_field(str(error), field) or _names_field(logged, field), (str(error), logged)
        else:
            assert isinstance(error, StateError), repr(error)
            assert _names_field(str(error), field), str(error)

        # Mended: no fence is ever handed out twice, to the adopted lease or anyone else.
        client.hset(getattr(keys, hash_name), field, good)
        if kept.released:
            kept = gov.acquire(timeout=5, holder="kept-again")
        gov.renew()
        assert not adopt.lost and not kept.lost
        fences = [adopt.fence, kept.fence]
        extra = gov.try_acquire(holder="extra")  # full (capacity 2): None, unless a lease was lost
        if extra is not None:
            fences.append(extra.fence)
        stored = [
            int(meta.split("|")[0])
            for lease_id, meta in client.hgetall(keys.holders).items()
            if lease_id not in ("ghost", SENTINEL)
        ]
        print("fences: before", sorted(old_fences), "after", fences, "stored", sorted(stored))
        assert len(set(stored)) == len(stored), f"a fence stored twice: {sorted(stored)}"
        assert len(set(fences)) == len(fences), f"a fence handed out twice: {fences}"
        assert adopt.fence not in old_fences
        for lease in (adopt, kept, extra):
            if lease is not None:
                lease.release()
    finally:
        hash_name, good = FIELDS[field]
        client.hset(getattr(keys, hash_name), field, good)
        gov.close()
        if waiter is not None:
            waiter.join(10)
        client.close()


# -- 4. Redis out of memory ------------------------------------------------------------


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    # room for the library and a few states; the test lowers it to what is used + 1 MB before it fills
    server = RedisServer(None, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction").start()
    yield server
    server.cleanup()


def _fill(admin: redis.Redis) -> int:
    """Append to a filler key until Redis refuses writes (OOM); the bytes written."""
    chunk = "x" * 65536
    for i in range(1000):
        try:
            admin.append("filler", chunk)
        except redis.ResponseError as error:  # redis-py: OutOfMemoryError
            assert "maxmemory" in str(error), error
            return i * len(chunk)
    raise AssertionError("Redis never ran out of memory")


def test_a_full_redis_raises_redis_full_writes_nothing_and_recovers(full_redis: RedisServer, name: str) -> None:
    redis_full = getattr(governor, "RedisFull", None)
    admin = redis.Redis(port=full_redis.port, socket_timeout=5, decode_responses=True)
    config = GovernorConfig(max_capacity=4, redis_timeout=2.0, **FRESH)
    gov = Governor.from_url(full_redis.url, name, config)
    local = Governor.from_url(full_redis.url, name, GovernorConfig(max_capacity=4, on_unavailable="local", **FRESH))
    try:
        lease = gov.acquire(timeout=5)
        gov.report(Outcome.SUCCESS)  # the report function loaded; the lease keeps its one outcome for below
        gov.renew()
        local.status()
        # the scripts and state take room too: leave 1 MB above what is used now, for the filler
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", max(2 * 1024 * 1024, used + 1024 * 1024))
        filled = _fill(admin)
        figure("full Redis: filler bytes", filled, "B")
        before = dump(admin, gov)

        raised: dict[str, BaseException | None] = {}
        for what, operation in (
            ("acquire", lambda: gov.acquire(timeout=2)),
            ("report", lambda: gov.report(Outcome.SUCCESS, lease=lease)),
            ("renew", gov.renew),
        ):
            try:
                operation()
                raised[what] = None
            except GovernorError as error:
                raised[what] = error
            print(f"full Redis: {what} -> {type(raised[what]).__name__}: {raised[what]}")
        st = gov.status()  # read-only: still served
        try:
            fallback: Any = local.acquire(timeout=2)
        except GovernorError as error:
            fallback = error
        print("full Redis: acquire with on_unavailable='local' ->", fallback)
        after = dump(admin, gov)

        assert diff(before, after) == {}, "a call wrote to the state while Redis was full"
        assert st.in_flight == 1
        assert redis_full is not None, "governor.RedisFull does not exist"
        assert issubclass(redis_full, GovernorUnavailable)
        for what, error in raised.items():
            assert isinstance(error, redis_full), f"{what}: {error!r}"
            assert re.search(r"\bfull\b|out of memory", str(error), re.I), f"{what}: {error}"
        assert not isinstance(fallback, BaseException), f"the local fallback did not admit: {fallback!r}"
        assert fallback.local

        admin.delete("filler")
        again = gov.acquire(timeout=5)
        gov.report(Outcome.SUCCESS, lease=again)
        gov.renew()
        assert not lease.lost and not again.lost
        fallback.release()
        again.release()
        lease.release()
        assert gov.status().in_flight == 0
    finally:
        admin.delete("filler")
        gov.close()
        local.close()
        admin.close()


# -- 5. smaller ones -------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["acquire", "status", "try_acquire"])
def test_a_refused_connection_fails_at_once(operation: str) -> None:
    port = free_port()  # nothing listens there
    gov = Governor.from_url(f"redis://127.0.0.1:{port}/0", "refused", GovernorConfig(redis_timeout=5))
    try:
        started = time.monotonic()
        with pytest.raises(GovernorUnavailable):
            if operation == "acquire":
                gov.acquire(timeout=1)
            elif operation == "status":
                gov.status()
            else:
                gov.try_acquire()
        took = time.monotonic() - started
        figure(f"refused connection: {operation} -> GovernorUnavailable after", took)
        assert took < 0.5
    finally:
        gov.close()


def _in_thread(operation: Callable[[], Any], bound: float) -> tuple[float, BaseException | None, bool]:
    """Run ``operation`` in a thread: (seconds, what it raised, still running after ``bound``)."""
    outcome: list[BaseException | None] = []
    started = time.monotonic()

    def run() -> None:
        try:
            operation()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    return time.monotonic() - started, outcome[0] if outcome else None, thread.is_alive()


def test_a_users_client_without_timeouts_fails_within_redis_timeout_when_redis_hangs(
    private_redis: RedisServer, name: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=private_redis.port)  # redis-py's defaults, as in the README
    gov = Governor(client, name, GovernorConfig(redis_timeout=1.0, **FRESH))
    bound = gov.config.redis_timeout + 1.5
    results: dict[str, tuple[float, BaseException | None, bool]] = {}
    try:
        gov.status()
        gov.acquire(timeout=5).release()
        private_redis.pause()
        try:
            results["status"] = _in_thread(gov.status, bound + 10)
            results["acquire"] = _in_thread(lambda: gov.acquire(timeout=5), bound + 10)
        finally:
            private_redis.unpause()
        for what, (seconds, error, _) in results.items():
            figure(f"hung Redis, user's client: {what} -> {type(error).__name__} after", seconds)
        for what, (seconds, error, hung) in results.items():
            assert not hung, f"{what} still blocked after {seconds:.1f} s"
            assert isinstance(error, GovernorUnavailable), f"{what}: {error!r}"
            assert seconds < bound, f"{what} took {seconds:.1f} s"
    finally:
        gov.close()
        client.close()


async def test_an_async_users_client_without_timeouts_fails_within_redis_timeout_when_redis_hangs(
    private_redis: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=private_redis.port)
    gov = AsyncGovernor(client, name, GovernorConfig(redis_timeout=1.0, **FRESH))
    bound = gov.config.redis_timeout + 1.5
    results: dict[str, tuple[float, BaseException | None]] = {}
    tasks: list[asyncio.Future[Any]] = []
    try:
        await gov.status()
        await (await gov.acquire(timeout=5)).release()
        private_redis.pause()
        try:
            for what, operation in (("status", gov.status), ("acquire", lambda: gov.acquire(timeout=5))):
                started = time.monotonic()
                task = asyncio.ensure_future(operation())
                tasks.append(task)
                await asyncio.wait({task}, timeout=bound + 10)
                seconds = time.monotonic() - started
                if not task.done():
                    results[what] = (seconds, TimeoutError(f"still blocked after {seconds:.1f} s"))
                else:
                    results[what] = (seconds, task.exception())
        finally:
            private_redis.unpause()
            await asyncio.wait(tasks, timeout=15)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for what, (seconds, error) in results.items():
            figure(f"hung Redis, user's asyncio client: {what} -> {type(error).__name__} after", seconds)
        for what, (seconds, error) in results.items():
            assert isinstance(error, GovernorUnavailable), f"{what}: {error!r} after {seconds:.1f} s"
            assert seconds < bound, f"{what} took {seconds:.1f} s"
    finally:
        await gov.aclose()
        await client.aclose()


@pytest.mark.parametrize("operator", [False, True], ids=["creator-config", "operator-set-max"])
def test_a_lost_state_comes_back_with_the_config_the_clients_last_saw(
    redis_url: str, name: str, operator: bool
) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    creator = Governor(client, name, GovernorConfig(max_capacity=2))
    other = Governor(client, name, GovernorConfig(max_capacity=10))
    admin = Governor(client, name, GovernorConfig(max_capacity=7))
    try:
        assert creator.status().max_capacity == 2
        other.acquire(timeout=5).release()  # in use, and listening
        expected = 2
        if operator:
            admin.set_max_capacity(3)
            expected = 3
        assert other.status().max_capacity == expected  # what the second client last saw
        client.delete(*other.keys.keys)  # the state is lost
        st = other.status()  # the second client's next call re-creates it
        figure(
            f"state re-created by a client configured with 10: max_capacity (expected {expected})", st.max_capacity, ""
        )
        assert st.max_capacity == expected
        assert creator.status().max_capacity == expected
    finally:
        for gov in (creator, other, admin):
            gov.close()
        client.close()


class Monitor:
    """MONITOR on a raw socket in a thread: every command clients send (those
    scripts run are tagged ``lua`` by Redis and left out), with its connection."""

    LINE = re.compile(r'^\+[0-9.]+ \[\d+ ([^\]]+)\] "([^"]*)"(?: "([^"]*)")?')

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"MONITOR\r\n")
        self.commands: list[tuple[str, str]] = []
        self.stopping = threading.Event()
        self.buffer = b""
        self.ok = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.ok.wait(5), "MONITOR did not answer"

    def _read(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stopping.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            self.buffer += data
            *lines, self.buffer = self.buffer.split(b"\r\n")
            for line in lines:
                text = line.decode(errors="replace")
                if text == "+OK":
                    self.ok.set()
                match = self.LINE.match(text)
                if match and match.group(1) != "lua":
                    command = match.group(2).lower()
                    if command in ("script", "client", "config") and match.group(3):
                        command += "|" + match.group(3).lower()
                    self.commands.append((match.group(1), command))

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("loaded", [True, False], ids=["library-loaded", "library-missing"])
def test_a_processes_first_acquire_loads_the_library_only_when_it_is_missing(
    private_redis: RedisServer, name: str, processes: Processes, loaded: bool
) -> None:
    """A fresh process's first acquire. On a Redis that has the library it
    loads nothing (a load compiles the whole library on the server); on one
    that never had it, one FCALL is refused for a missing function, the
    library is loaded once and the call sent again. Either way the caller's
    connection needs a handful of round trips."""
    admin = redis.Redis(port=private_redis.port, socket_timeout=10, decode_responses=True)
    ours, theirs = SPAWN.Pipe()
    admin.function_flush()
    if loaded:
        admin.function_load(governor.scripts.library(), replace=True)
    monitor = Monitor(private_redis.port)
    try:
        admin.config_resetstat()
        process = processes.start(process_workers.first_acquire, private_redis.url, name, theirs)
        assert ours.poll(60), "the first acquire did not return"
        result = ours.recv()
        stats = admin.info("commandstats")
        errors = {k.removeprefix("errorstat_"): int(v["count"]) for k, v in admin.info("errorstats").items()}
        time.sleep(0.2)  # MONITOR's last lines
        seen = [(conn, c) for conn, c in monitor.commands if c not in ("config|resetstat", "info", "function|flush")]
        ours.send("done")
        process.join(20)
        handshake = ("hello", "client|setinfo", "select", "auth")
        per_connection: dict[str, list[str]] = {}
        for conn, command in seen:
            if command not in handshake:
                per_connection.setdefault(conn, []).append(command)
        commands = [c for sent in per_connection.values() for c in sent]
        loads = int(stats.get("cmdstat_function|load", {}).get("calls", 0))
        fcall = stats["cmdstat_fcall"]
        caller = max(per_connection, key=lambda conn: per_connection[conn].count("fcall"))
        caller_trips = len(per_connection[caller])
        state = "loaded" if loaded else "missing"
        figure(f"first acquire, library {state}: seconds", result["seconds"])
        figure(f"first acquire, library {state}: commands sent (besides the handshake)", len(commands), "")
        figure(f"first acquire, library {state}: FUNCTION LOAD", loads, "")
        figure(f"first acquire, library {state}: failed FCALLs (a missing function)", int(fcall["failed_calls"]), "")
        figure(f"first acquire, library {state}: round trips on the caller's connection", caller_trips, "")
        for conn, sent in per_connection.items():
            print(f"connection {conn}: {len(sent)} round trips: {sent}")
        print("errors:", errors)
        # MONITOR names FUNCTION LOAD "function": the only FUNCTION subcommand the client may send
        assert {k for k in stats if k.startswith("cmdstat_function")} <= {"cmdstat_function|load"}, sorted(stats)
        if loaded:
            assert loads == 0 and "function" not in commands, commands
            assert int(fcall["failed_calls"]) == 0, fcall
        else:
            assert loads == 1 and commands.count("function") == 1, f"the library loaded {loads} times: {commands}"
            assert int(fcall["failed_calls"]) == 1, f"{fcall}; {commands}"  # the one that found it missing
            first = per_connection[caller]
            assert first.index("fcall") < first.index("function"), first
        assert int(fcall["rejected_calls"]) == 0, fcall
        assert admin.function_list(library=governor.scripts.library_name()), "the library is not loaded"
        assert caller_trips <= 5, f"{caller_trips} round trips on the caller's connection: {per_connection[caller]}"
        assert len(commands) - loads <= 10, commands
        assert "evalsha" not in commands and "script|load" not in commands, commands
    finally:
        monitor.close()
        ours.close()
        theirs.close()
        admin.close()
