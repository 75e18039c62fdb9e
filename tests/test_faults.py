"""Faults with real processes on loopback: holders killed
with SIGKILL or stalled with SIGSTOP, waiters cancelled at every point of
acquire, Redis restarted or its functions flushed mid-run, Redis unreachable
or hung, and a chaos run. Every wait is bounded; the figures each test
measures are printed (run with ``-s`` to see them).

Worker processes live in tests/support/fault_workers.py. They report through a
*control* Redis that no fault touches (the session's ``redis_url``) and
count themselves there while they hold a lease, so the number of
simultaneous holders across processes can be checked against capacity.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from typing import Any

import pytest
import redis

from governor import (
    AsyncGovernor,
    Governor,
    GovernorConfig,
    GovernorUnavailable,
    Lease,
    Outcome,
    metrics,
)
from governor.policies import SeedPolicy
from governor.protocol import SENTINEL

from .support import fault_workers
from .support.faultkit import FAST, Processes, figure, next_event
from .support.servers import RedisServer, wait_until


def kill(process: BaseProcess, sig: signal.Signals = signal.SIGKILL) -> None:
    assert process.pid is not None
    os.kill(process.pid, sig)


def stopped(process: BaseProcess) -> bool:
    """Whether every thread of ``process`` is stopped (by SIGSTOP)."""
    tasks = f"/proc/{process.pid}/task"
    states = []
    for task in os.listdir(tasks):
        with open(f"{tasks}/{task}/stat") as stat:
            states.append(stat.read().rsplit(")", 1)[1].split()[0])
    return all(state in ("T", "t") for state in states)


# -- a holder killed with SIGKILL -------------------------------------------------------


def test_slots_of_a_sigkilled_holder_come_home_within_one_ttl(
    redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(policy="fixed", max_capacity=3, **FAST)
    holder = processes.start(fault_workers.hold_forever, redis_url, name, config, 3, redis_url, events)
    next_event(control, events, "holding")
    gov = Governor.from_url(redis_url, name, config)
    try:
        assert gov.status().in_flight == 3
        waiting: list[Lease] = []
        waiter = threading.Thread(target=lambda: waiting.append(gov.acquire(timeout=30)), daemon=True)
        waiter.start()
        wait_until(lambda: gov.status().queued == 1, 10, what="a queued waiter")

        kill(holder)
        killed_at = time.monotonic()
        wait_until(lambda: gov.status().in_flight <= 1, 10, interval=0.005, what="the killed holder's slots")
        home = time.monotonic() - killed_at
        waiter.join(10)
        admitted = time.monotonic() - killed_at
        figure("SIGKILL: slots home after", home)
        figure("SIGKILL: queued waiter admitted after", admitted)
        # one TTL since the last renewal, plus one sweep (the waiters' poll)
        assert home <= config.lease_ttl + config.poll + 0.5
        assert waiting and admitted <= config.lease_ttl + 2 * config.poll + 0.5
        st = gov.status()
        assert (st.in_flight, st.queued) == (1, 0)
        waiting[0].release()
        assert gov.status().in_flight == 0
    finally:
        gov.close()


def test_a_killed_parent_slot_comes_home_even_if_a_forked_child_uses_the_governor(
    redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(policy="fixed", max_capacity=3, **FAST)
    parent = processes.start(fault_workers.hold_and_fork, redis_url, name, config, redis_url, events, daemon=False)
    held = next_event(control, events, "holding")
    next_event(control, events, "child-holding")
    gov = Governor.from_url(redis_url, name, config)
    try:
        assert gov.status().in_flight == 2
        kill(parent)
        try:  # the child holds one lease; the dead parent's must expire
            wait_until(lambda: gov.status().in_flight == 1, config.lease_ttl * 4, what="the dead parent's slot")
        finally:
            os.kill(held["child"], signal.SIGKILL)
    finally:
        gov.close()


# -- a holder stalled with SIGSTOP past its TTL ----------------------------------------


def test_a_holder_stalled_past_its_ttl_is_told_and_its_late_calls_touch_nothing(
    redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=1, **FAST)
    stalled = processes.start(fault_workers.stall_then_clean_up, redis_url, name, config, redis_url, events)
    held = next_event(control, events, "holding")
    gov = Governor.from_url(redis_url, name, config)
    try:
        kill(stalled, signal.SIGSTOP)
        stopped_at = time.monotonic()
        successor = gov.acquire(timeout=10, holder="successor")  # admitted once the stalled lease expires
        figure("SIGSTOP: slot of the stalled holder re-granted after", time.monotonic() - stopped_at)
        assert successor.fence > held["fence"]
        before = gov.status()

        kill(stalled, signal.SIGCONT)
        done = next_event(control, events, "done")
        assert done == {**done, "lost": True, "report": "lease-lost"}
        after = gov.status()
        assert after.in_flight == 1 and not successor.lost  # the late release took nothing of ours
        assert (after.window_attempts, after.window_rate_limited) == (before.window_attempts, 0)
        assert after.capacity == before.capacity and not after.paused  # its late 429 counted for nothing
        gov.renew()
        assert not successor.lost
        assert gov.try_acquire() is None  # capacity 1, held by the successor alone
        successor.release()
        assert gov.status().in_flight == 0
    finally:
        gov.close()


def test_a_waiter_stalled_across_its_grant_is_not_handed_a_dead_lease(
    redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=1, **{**FAST, "queue_ttl": 3.0, "lease_ttl": 0.6})
    gov = Governor.from_url(redis_url, name, config)
    try:
        first = gov.acquire(timeout=5, holder="first")
        waiter = processes.start(fault_workers.wait_in_queue, redis_url, name, config, redis_url, events)
        next_event(control, events, "queuing")
        wait_until(lambda: gov.status().queued == 1, 10, what="the waiter to queue")
        kill(waiter, signal.SIGSTOP)
        first.release()  # the grant is made in Redis now; the waiter cannot see it
        wait_until(lambda: gov.status().in_flight == 0, 10, what="the unseen grant to expire")
        second = gov.acquire(timeout=5, holder="second")  # the slot is ours now
        kill(waiter, signal.SIGCONT)
        # the dead grant is not handed out: the waiter queues again behind our lease
        wait_until(lambda: gov.status().queued == 1, 10, what="the waiter to queue again")
        assert control.llen(events) == 0, "the waiter was handed a lease while ours is held"
        second.release()
        granted = next_event(control, events, "granted")
        assert granted["fence"] > second.fence and not granted["lost_at_return"]
        assert not next_event(control, events, "later")["lost"]
    finally:
        gov.close()


# -- waiters cancelled at every point of acquire -----------------------------------------


class Interrupt(BaseException):
    """Stands in for KeyboardInterrupt (which pytest would take for the user's)."""


def _no_leak(gov: Governor, capacity: int) -> None:
    """Nothing queued, nothing held, and every slot can be taken again."""
    st = gov.status()
    assert (st.in_flight, st.queued) == (0, 0)
    leases = [gov.try_acquire() for _ in range(capacity)]
    assert all(lease is not None for lease in leases)
    assert gov.try_acquire() is None
    for lease in leases:
        assert lease is not None
        lease.release()


@pytest.fixture
def fast_gov(redis_url: str, name: str) -> Iterator[Governor]:
    gov = Governor.from_url(redis_url, name, GovernorConfig(policy="fixed", max_capacity=2, **FAST))
    yield gov
    gov.close()


def _interrupt_after(target: Any, attribute: str, script: str | None = None) -> Callable[[], None]:
    """Patch ``target.attribute`` to run, then raise Interrupt (once; for
    ``_execute``, only on a call of ``script``). Returns the undo."""
    original = getattr(target, attribute)
    fired: list[bool] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not fired and (script is None or args[0].script == script):
            fired.append(True)
            raise Interrupt
        return result

    setattr(target, attribute, wrapper)
    return lambda: setattr(target, attribute, original)


@pytest.mark.parametrize("busy", [False, True], ids=["granted-at-once", "queued"])
def test_interrupted_right_after_the_acquire_script_ran(fast_gov: Governor, busy: bool) -> None:
    """The claim happened in Redis (a grant or a place), the reply never reached the caller."""
    holder = fast_gov.acquire(timeout=5) if busy else None
    other = fast_gov.acquire(timeout=5) if busy else None
    undo = _interrupt_after(fast_gov, "_execute", "acquire")
    try:
        with pytest.raises(Interrupt):
            fast_gov.acquire(timeout=5)
    finally:
        undo()
    for lease in (holder, other):
        if lease is not None:
            lease.release()
    _no_leak(fast_gov, 2)


def test_interrupted_before_queueing(fast_gov: Governor) -> None:
    original = fast_gov._background.start

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise Interrupt

    fast_gov._background.start = interrupted  # type: ignore[method-assign]
    try:
        with pytest.raises(Interrupt):
            fast_gov.acquire(timeout=5)
    finally:
        fast_gov._background.start = original  # type: ignore[method-assign]
    _no_leak(fast_gov, 2)


def test_interrupted_while_queued(fast_gov: Governor) -> None:
    leases = [fast_gov.acquire(timeout=5) for _ in range(2)]
    undo = _interrupt_after(fast_gov, "_wait_turn")
    try:
        with pytest.raises(Interrupt):
            fast_gov.acquire(timeout=5)
    finally:
        undo()
    for lease in leases:
        lease.release()
    _no_leak(fast_gov, 2)


def test_interrupted_after_the_grant_before_the_lease_is_made(fast_gov: Governor) -> None:
    """The grant arrived (push or refresh); the interrupt lands before the caller gets a Lease."""
    leases = [fast_gov.acquire(timeout=5) for _ in range(2)]
    background = fast_gov._background
    original = background.add_lease

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise Interrupt

    errors: list[BaseException] = []

    def wait() -> None:
        try:
            fast_gov.acquire(timeout=10)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            errors.append(error)

    background.add_lease = interrupted  # type: ignore[method-assign]
    try:
        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        wait_until(lambda: fast_gov.status().queued == 1, 10, what="a queued waiter")
        leases[0].release()  # grants the slot to the waiter
        thread.join(10)
    finally:
        background.add_lease = original  # type: ignore[method-assign]
    assert errors and isinstance(errors[0], Interrupt)
    leases[1].release()
    _no_leak(fast_gov, 2)


def test_interrupted_as_acquire_returns(fast_gov: Governor, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise Interrupt

    monkeypatch.setattr(metrics, "observe_admission", interrupted)
    with pytest.raises(Interrupt):
        fast_gov.acquire(timeout=5)
    monkeypatch.undo()
    # the lease was never handed out: its slot must come back, at the latest by TTL
    wait_until(
        lambda: fast_gov.status().in_flight == 0,
        fast_gov.config.lease_ttl * 3,
        what="the slot of a lease nobody holds",
    )


def test_interrupted_while_releasing_returns_the_slot_by_ttl(fast_gov: Governor) -> None:
    lease = fast_gov.acquire(timeout=5)
    original_run = fast_gov._connection.run

    def never_sent(call: Any) -> Any:  # the release is interrupted before Redis sees it
        if call.script == "release":
            raise Interrupt
        return original_run(call)

    fast_gov._connection.run = never_sent  # type: ignore[method-assign]
    try:
        with pytest.raises(Interrupt):
            lease.release()
    finally:
        fast_gov._connection.run = original_run  # type: ignore[method-assign]
    started = time.monotonic()
    wait_until(lambda: fast_gov.status().in_flight == 0, 5, what="the unreleased slot to expire")
    figure("release interrupted: slot home after", time.monotonic() - started)
    _no_leak(fast_gov, 2)


async def test_tasks_cancelled_at_every_point_leak_nothing(redis_url: str, name: str) -> None:
    """asyncio: cancel a task before queueing, right after the acquire script
    ran (granted or queued), while queued, and after its grant but before it ran."""
    gov = AsyncGovernor.from_url(redis_url, name, GovernorConfig(policy="fixed", max_capacity=2, **FAST))
    try:
        original_execute = gov._execute
        checkpoint = asyncio.Event()
        stop_after: set[str] = set()

        async def execute(call: Any, **kw: Any) -> Any:  # kw: the background worker's slot=False
            result = await original_execute(call, **kw)
            if call.script in stop_after:
                checkpoint.set()
                await asyncio.Event().wait()  # the task is cancelled here, after Redis answered
            return result

        gov._execute = execute  # type: ignore[method-assign]

        async def cancel_when(ready: Callable[[], Any]) -> None:
            task = asyncio.create_task(gov.acquire(timeout=10))
            await ready()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        async def status_queued(n: int) -> None:
            deadline = time.monotonic() + 10
            while (await gov.status()).queued != n:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

        async def settled() -> None:
            deadline = time.monotonic() + 10
            while True:
                st = await gov.status()
                if (st.in_flight, st.queued) == (0, 0):
                    return
                assert time.monotonic() < deadline, f"leaked: {st.in_flight} held, {st.queued} queued"
                await asyncio.sleep(0.01)

        # 1. before queueing: cancelled at its first await
        await cancel_when(lambda: asyncio.sleep(0))
        await settled()
        # 2. right after the acquire script granted at once
        stop_after.add("acquire")
        checkpoint.clear()
        await cancel_when(checkpoint.wait)
        await settled()
        # 3. right after the acquire script queued it
        stop_after.clear()
        held = [await gov.acquire(timeout=5) for _ in range(2)]
        stop_after.add("acquire")
        checkpoint.clear()
        await cancel_when(checkpoint.wait)
        stop_after.clear()
        await status_queued(0)
        # 4. while queued
        await cancel_when(lambda: status_queued(1))
        await status_queued(0)
        for lease in held:
            await lease.release()
        await settled()
        # every slot can be taken again
        taken = [await gov.try_acquire() for _ in range(2)]
        assert all(t is not None for t in taken) and await gov.try_acquire() is None
        for t in taken:
            assert t is not None
            await t.release()
    finally:
        await gov.aclose()


# -- a fleet drained during a pause -------------------------------------------------------


def test_a_queue_never_freezes_after_the_fleet_drained_during_a_pause(redis_url: str, name: str) -> None:
    """Nobody holds, nobody reports: the waiters' own refreshes probe, lift the
    drained pause and admit them."""
    config = GovernorConfig(policy=SeedPolicy(pause_count=2), max_capacity=4, window=1.0, **FAST)
    gov = Governor.from_url(redis_url, name, config)
    try:
        lease = gov.acquire(timeout=5)
        gov.report(Outcome.RATE_LIMITED, lease=lease)
        gov.report(Outcome.RATE_LIMITED)  # a lease carries one outcome: the second comes from another call
        assert gov.status().paused
        lease.release()  # the fleet has drained: no report, no probe will come
        paused_at = time.monotonic()
        got: list[Lease] = []
        waiter = threading.Thread(target=lambda: got.append(gov.acquire(timeout=15)), daemon=True)
        waiter.start()
        waiter.join(15)
        figure("drained pause: queued waiter admitted after", time.monotonic() - paused_at)
        assert got and time.monotonic() - paused_at < config.window + 2 * config.poll + 1
        st = gov.status()
        assert not st.paused and st.capacity == 1  # resumed at max(1, 4 // 4)
        got[0].release()
    finally:
        gov.close()


# -- Redis state lost -------------------------------------------------------------------


def test_a_fresh_client_does_not_bring_a_lost_governor_back_unlimited(redis_url: str, name: str) -> None:
    config = GovernorConfig(max_capacity=4, **FAST)
    veteran = Governor.from_url(redis_url, name, config)
    newcomer = Governor.from_url(redis_url, name, config)  # a worker started after the loss
    try:
        for _ in range(3):  # past the adaptive slow start (1 of 4): the fleet has run a while
            veteran.report(Outcome.SUCCESS)
        held = [veteran.acquire(timeout=5) for _ in range(4)]
        veteran.client.delete(*veteran.keys.keys)  # Redis restarted without persistence
        admitted = [lease for lease in (newcomer.try_acquire() for _ in range(4)) if lease is not None]
        try:
            # four holders are still running: no new admission may raise the count above 4
            assert not admitted, f"{len(admitted)} admitted beside 4 running holders (max 4)"
        finally:
            for lease in admitted + held:
                lease.release()
    finally:
        veteran.close()
        newcomer.close()


def _run_fleet(
    processes: Processes,
    url: str,
    name: str,
    config: GovernorConfig,
    control_url: str,
    counter: str,
    events: str,
    hosts: int,
    threads: int,
    seconds: float,
) -> None:
    for seed in range(hosts):
        processes.start(
            fault_workers.fleet_worker, url, name, config, control_url, counter, events, threads, seconds, seed
        )
    control = redis.Redis.from_url(control_url, decode_responses=True)
    for _ in range(hosts):
        next_event(control, events, "ready", 60)
    control.set(f"{events}:go", 1, ex=600)
    control.close()


def _fleet_results(control: redis.Redis, events: str, hosts: int, timeout: float) -> list[dict[str, Any]]:
    return [next_event(control, events, "fleet-done", timeout) for _ in range(hosts)]


@pytest.mark.slow
def test_restart_and_function_flush_mid_run_never_come_back_unlimited(
    private_redis: RedisServer, redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=4, **{**FAST, "redis_timeout": 0.5})
    counter = f"holding:{name}"
    hosts, threads, seconds = 3, 3, 7.0
    _run_fleet(processes, private_redis.url, name, config, redis_url, counter, events, hosts, threads, seconds)
    started = time.monotonic()
    admin = redis.Redis(port=private_redis.port, socket_timeout=2)
    time.sleep(1.5)  # the fleet is at work
    admin.function_flush()  # the library is gone: every caller's next call loads it again
    flushed = time.monotonic()
    time.sleep(1.5)
    private_redis.restart()  # state and scripts gone
    restarted = time.monotonic()
    admin.close()
    results = _fleet_results(control, events, hosts, seconds + 30)
    admissions = [a for r in results for a in r["admissions"]]
    peak = max(a["holding"] for a in admissions)
    after_flush = [a for a in admissions if flushed < a["t"] < restarted]
    after_restart = [a for a in admissions if a["t"] > restarted + 0.5]
    figure("restart: admissions in all", len(admissions), "")
    figure("restart: peak simultaneous holders (max 4)", peak, "")
    print("errors seen by the fleet:", [r["errors"] for r in results], "run", time.monotonic() - started)
    assert peak <= config.max_capacity  # never more holders than the limit, across flush and restart
    assert after_flush and after_restart  # the fleet carried on
    assert control.get(counter) in ("0", None)
    gov = Governor.from_url(private_redis.url, name, config)
    try:
        wait_until(lambda: gov.status().in_flight == 0, 5, what="every slot home")
        assert gov.status().queued == 0
    finally:
        gov.close()


# -- Redis unreachable --------------------------------------------------------------------


def _time_to_unavailable(operation: Callable[[], Any]) -> float:
    started = time.monotonic()
    with pytest.raises(GovernorUnavailable):
        operation()
    return time.monotonic() - started


@pytest.mark.parametrize("fault", ["stopped", "hung"])
def test_unreachable_redis_fails_within_a_bound(private_redis: RedisServer, fault: str) -> None:
    config = GovernorConfig(policy="fixed", max_capacity=2, **FAST)
    gov = Governor.from_url(private_redis.url, f"unreach-{fault}", config)
    try:
        holder = gov.acquire(timeout=5)
        holder2 = gov.acquire(timeout=5)
        waiting_error: list[BaseException] = []

        def wait() -> None:
            try:
                gov.acquire(timeout=None)
            except BaseException as error:  # noqa: BLE001 - reported to the test
                waiting_error.append(error)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        wait_until(lambda: gov.status().queued == 1, 10, what="a queued waiter")
        if fault == "stopped":
            private_redis.stop()
        else:
            private_redis.pause()
        cut = time.monotonic()
        try:
            times = {
                "acquire": _time_to_unavailable(lambda: gov.acquire(timeout=None)),
                "try_acquire": _time_to_unavailable(gov.try_acquire),
                "report": _time_to_unavailable(lambda: gov.report(Outcome.SUCCESS)),
                "status": _time_to_unavailable(gov.status),
            }
            waiter.join(config.queue_ttl + 4 * config.redis_timeout + 5)
            times["queued waiter"] = time.monotonic() - cut
            for what, seconds in times.items():
                figure(f"{fault} Redis: {what} -> GovernorUnavailable after", seconds)
            assert waiting_error and isinstance(waiting_error[0], GovernorUnavailable)
            bound = 2 * config.redis_timeout + 1.5  # the listener's wait plus one call, and slack
            assert all(seconds < bound for what, seconds in times.items() if what != "queued waiter")
            # a queued caller learns within queue_ttl of the last contact, plus the call that failed
            assert times["queued waiter"] < config.queue_ttl + 3 * config.redis_timeout + config.poll + 3
            wait_until(lambda: holder.lost, config.lease_ttl + 2 * config.redis_timeout + 2, what="lease lost")
        finally:
            if fault == "hung":
                private_redis.unpause()
            else:
                private_redis.start()
        holder.release()
        holder2.release()
    finally:
        gov.close()


@pytest.mark.slow
def test_local_fallback_holds_its_limit_and_the_fleet_returns_to_the_shared_limit(
    private_redis: RedisServer, redis_url: str, control: redis.Redis, name: str, events: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=2, on_unavailable="local", local_capacity=1, **FAST)
    counter = f"holding:{name}"
    hosts, threads, seconds = 3, 3, 8.0
    _run_fleet(processes, private_redis.url, name, config, redis_url, counter, events, hosts, threads, seconds)
    time.sleep(1.5)
    stopping = time.monotonic()  # admissions while the server shuts down may be local already
    private_redis.stop()
    down = time.monotonic()
    time.sleep(2.5)
    private_redis.start()
    up = time.monotonic()
    results = _fleet_results(control, events, hosts, seconds + 30)
    admissions = [a for r in results for a in r["admissions"]]
    before = [a for a in admissions if a["t"] < stopping]
    during = [a for a in admissions if down + config.redis_timeout < a["t"] < up]
    settled = [a for a in admissions if a["t"] > up + config.renew_interval + config.poll + 0.5]
    for phase, admitted in (("before", before), ("while down (local)", during), ("after", settled)):
        figure(f"fallback: admissions {phase}", len(admitted), "")
    assert before and during and settled
    assert all(a["local"] for a in during)
    over = [dict(a, t=round(a["t"] - stopping, 3)) for a in before if a["holding"] > config.max_capacity]
    assert not over, f"over the shared limit before Redis was stopped (t from the stop): {over}"
    assert not any(a["local"] for a in before)
    assert max(a["holding"] for a in during) <= hosts * config.local_capacity  # each process holds its limit
    over = [dict(a, t=round(a["t"] - up, 3)) for a in settled if a["holding"] > config.max_capacity]
    assert not over, f"over the shared limit after Redis returned (t from its return): {over}"
    assert not any(a["local"] for a in settled)


# -- chaos --------------------------------------------------------------------------------


@pytest.mark.slow
def test_chaos_kills_and_stalls_leave_every_slot_home(
    redis_url: str, control: redis.Redis, name: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=4, **FAST)
    counter = f"holding:{name}"
    rng = random.Random(11)
    workers = [
        processes.start(fault_workers.chaos_worker, redis_url, name, config, redis_url, counter, 3, seed)
        for seed in range(5)
    ]
    kills = stalls = 0
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.6))
        victim_index = rng.randrange(len(workers))
        victim = workers[victim_index]
        assert victim.pid is not None
        if rng.random() < 0.5:  # killed outright, or stalled past its TTL and then killed
            if rng.random() < 0.5:
                kill(victim, signal.SIGSTOP)
                # Its leases expire while it is stopped and their slots go to
                # others, as they should; it never runs again, so once every
                # thread has stopped, its count no longer stands for a holder.
                wait_until(functools.partial(stopped, victim), 5, what="the victim stopped")
                control.sadd(f"{counter}:stopped", str(victim.pid))
                time.sleep(config.lease_ttl * 1.2)
            kill(victim)
            victim.join(5)
            control.hdel(counter, str(victim.pid))  # its leases count in Redis until they expire
            kills += 1
            workers[victim_index] = processes.start(
                fault_workers.chaos_worker, redis_url, name, config, redis_url, counter, 3, rng.randrange(10**6)
            )
        else:  # a stall shorter than the TTL: nothing is lost
            kill(victim, signal.SIGSTOP)
            time.sleep(config.lease_ttl * 0.3)
            kill(victim, signal.SIGCONT)
            stalls += 1
    for worker in workers:
        kill(worker, signal.SIGTERM)
    for worker in workers:
        worker.join(15)
        assert worker.exitcode in (0, -signal.SIGTERM)  # -SIGTERM: stopped while it was starting
    figure("chaos: kills", kills, "")
    figure("chaos: short stalls", stalls, "")
    over = control.lrange(f"{counter}:over", 0, -1)
    assert over == []  # never more holders than max_capacity
    assert sum(int(v) for v in control.hvals(counter)) == 0  # every surviving holder left
    gov = Governor.from_url(redis_url, name, config)
    try:
        started = time.monotonic()
        wait_until(lambda: gov.status().in_flight == 0, config.lease_ttl + 2, what="every slot home")
        figure("chaos: last slot home after the run", time.monotonic() - started)
        st = gov.probe()
        assert (st.in_flight, st.queued) == (0, 0)
        assert gov.client.zrange(gov.keys.leases, 0, -1) == [SENTINEL.encode()]  # reclaimed, nothing left behind
        assert gov.client.zcard(gov.keys.queue) == 0 or gov.status().queued == 0
    finally:
        gov.close()
