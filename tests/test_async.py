"""The asyncio facade: the same behaviour as the sync one, plus cancellation
of a waiting task at each point (before its grant, after it)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from governor import AcquireTimeout, AsyncGovernor, Governor, GovernorConfig, LeaseLost, Outcome

from .support.servers import until

MakeAGov = Callable[..., AsyncGovernor]


async def queued(gov: AsyncGovernor, n: int) -> None:
    async def check() -> bool:
        return (await gov.status()).queued == n

    await until(check, what=f"{n} queued")


async def test_await_and_async_with(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(policy="fixed", max_capacity=2))
    lease = await gov.acquire(timeout=5)
    async with gov.acquire(timeout=5, holder="ctx") as second:
        assert second.holder == "ctx"
        assert (await gov.status()).in_flight == 2
    assert second.released
    await gov.report(Outcome.SUCCESS, lease=lease)
    await lease.release()
    st = await gov.status()
    assert (st.in_flight, st.window_attempts) == (0, 1)


async def test_blocks_and_admits_on_release(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(max_capacity=1))
    holder = await gov.acquire(timeout=5)
    task = asyncio.create_task(gov.acquire(timeout=20))
    await queued(gov, 1)
    assert not task.done()
    await holder.release()
    lease = await asyncio.wait_for(task, 10)
    assert not lease.lost
    await lease.release()


async def test_timeout(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(max_capacity=1))
    holder = await gov.try_acquire()
    assert holder is not None
    with pytest.raises(AcquireTimeout):
        await gov.acquire(timeout=0.2)
    assert (await gov.status()).queued == 0
    await holder.release()


async def test_cancelled_before_its_grant_leaves_no_place(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(max_capacity=1))
    holder = await gov.acquire(timeout=5)
    task = asyncio.create_task(gov.acquire())
    await queued(gov, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    st = await gov.status()
    assert (st.in_flight, st.queued) == (1, 0)
    await holder.release()
    assert (await gov.status()).in_flight == 0  # no ghost grant to the cancelled waiter
    again = await gov.try_acquire()
    assert again is not None
    await again.release()


@pytest.mark.parametrize("giving_back", ["release", "report"])
@pytest.mark.parametrize("reached_redis", [False, True], ids=["before-redis", "after-redis"])
async def test_a_release_cancelled_midway_is_sent_again_and_counted_once(
    make_agov: MakeAGov, giving_back: str, reached_redis: bool
) -> None:
    """A task cancelled while the call giving its slot back (a release, a
    report that releases) is on its way: the call is sent again from a task
    of its own, so the slot is back at once, not after the lease's TTL, and
    a report that got through before the cancellation is counted once."""
    gov = make_agov(GovernorConfig(policy="fixed", max_capacity=1, lease_ttl=600))
    original_run = gov._connection.run
    in_flight = asyncio.Event()
    stalled: list[str] = []

    async def run(call: Any) -> Any:
        if call.script == giving_back and not stalled:
            stalled.append(call.script)
            if reached_redis:
                await original_run(call)
            in_flight.set()
            await asyncio.Event().wait()  # the answer never comes: cancelled here
        return await original_run(call)

    gov._connection.run = run  # type: ignore[method-assign]
    lease = await gov.acquire(timeout=5)
    if giving_back == "release":
        task = asyncio.create_task(lease.release())
    else:
        task = asyncio.create_task(gov.report(Outcome.SUCCESS, lease=lease, release=True))
    await in_flight.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def home() -> bool:
        return (await gov.status()).in_flight == 0

    await until(home, what="the slot back well before the lease's TTL")
    assert (await gov.status()).window_attempts == (1 if giving_back == "report" else 0)
    again = await gov.acquire(timeout=5)  # the slot serves the next caller
    await again.release()


async def test_cancelled_after_its_grant_passes_the_slot_on(make_agov: MakeAGov, sync_client: Any) -> None:
    """The grant is made in Redis while the waiting task cannot run (the loop
    is blocked in a sync call); then the task is cancelled before it sees it."""
    gov = make_agov(GovernorConfig(max_capacity=1))
    other = Governor(sync_client, gov.name, GovernorConfig(max_capacity=1))
    try:
        holder = other.acquire(timeout=5)
        task = asyncio.create_task(gov.acquire())
        next_task = asyncio.create_task(gov.acquire())
        await queued(gov, 2)
        holder.release()  # blocking: grants the slot to `task` in Redis, right now
        assert other.status().in_flight == 1  # (no await: the task must not run yet)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        lease = await asyncio.wait_for(next_task, 10)  # the slot went on to the next waiter
        st = await gov.status()
        assert (st.in_flight, st.queued) == (1, 0)
        await lease.release()
        assert (await gov.status()).in_flight == 0
    finally:
        other.close()


async def test_many_tasks_never_exceed_capacity_and_every_slot_comes_home(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(policy="fixed", max_capacity=3))
    holding = 0
    peak = 0

    async def agent() -> None:
        nonlocal holding, peak
        for _ in range(4):
            async with gov.acquire(timeout=30):
                holding += 1
                peak = max(peak, holding)
                await asyncio.sleep(0.005)
                holding -= 1

    await asyncio.wait_for(asyncio.gather(*(agent() for _ in range(12))), 60)
    assert peak == 3
    st = await gov.status()
    assert (st.in_flight, st.queued) == (0, 0)


async def test_lost_lease_is_reported_and_fenced(make_agov: MakeAGov, clock: Any) -> None:
    gov = make_agov(GovernorConfig(max_capacity=2, lease_ttl=10, resume_fraction=1.0), clock=clock)
    lease = await gov.acquire(timeout=5)
    clock.advance(11)
    assert lease.lost
    with pytest.raises(LeaseLost):
        await gov.report(Outcome.RATE_LIMITED, lease=lease)
    st = await gov.status()
    assert (st.in_flight, st.window_attempts, st.capacity) == (0, 0, 2)
    await lease.release()


async def test_admin_and_probe(make_agov: MakeAGov, clock: Any) -> None:
    gov = make_agov(GovernorConfig(policy="seed", max_capacity=8), clock=clock)
    for _ in range(4):
        await gov.report(Outcome.RATE_LIMITED)
    assert (await gov.status()).paused
    clock.advance(61)
    st = await gov.probe()
    assert not st.paused and st.capacity == 2
    assert (await gov.set_max_capacity(4)).capacity == 4
    assert (await gov.pause("ops", duration=5)).paused
    assert not (await gov.resume()).paused
    assert (await gov.reset()).capacity == 4
    assert (await gov.configure()).capacity == 8


async def test_a_cancellation_at_the_moment_of_the_wake_up_reaches_the_caller() -> None:
    """The flag set (or the unit freed) and the waiting task cancelled in the
    same turn of the loop: the task sees its cancellation every time
    (asyncio.wait_for before 3.12 dropped it, and the caller took its grant
    and went on as if never cancelled), and no semaphore unit is lost."""
    from governor._async._compat import Event, Semaphore

    for _ in range(20):
        event = Event()
        waiting = asyncio.ensure_future(event.wait(5.0))
        await asyncio.sleep(0)
        event.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        semaphore = Semaphore(1)
        assert await semaphore.acquire(None)
        taking = asyncio.ensure_future(semaphore.acquire(5.0))
        await asyncio.sleep(0)
        semaphore.release()
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        assert await semaphore.acquire(0.1)  # the unit went back
        assert not await semaphore.acquire(0.01)


def test_the_readme_api_table_names_what_both_facades_have() -> None:
    """Every call the README's API table names exists on Governor, and on
    AsyncGovernor under the same name but for the exceptions the README
    states in words (``close()``, which it calls ``aclose()``)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- --8<-- [start:api] -->", 1)[1].split("<!-- --8<-- [end:api] -->", 1)[0]
    renamed = dict(re.findall(r"but for\s+`(\w+)\(\)`, which it calls `(\w+)\(\)`", table))
    assert renamed == {"close": "aclose"}
    names = set()
    for row in re.findall(r"^\| (.+?) \|", table, re.M):
        for span in re.findall(r"`([^`]+)`", row):
            named = re.match(r"@?(?:gov\.|Governor\.)?([a-z_]+)\(", span)
            if named and not span.startswith("lease."):
                names.add(named.group(1))
    names -= set(renamed.values())  # the asyncio names, checked below
    assert {"acquire", "try_acquire", "report", "call", "limit", "close", "from_url", "set_shares"} <= names
    for name in sorted(names):
        assert callable(getattr(Governor, name, None)), f"Governor has no {name}()"
        assert callable(getattr(AsyncGovernor, renamed.get(name, name), None)), (
            f"AsyncGovernor has no {renamed.get(name, name)}()"
        )
    assert not hasattr(AsyncGovernor, "close")  # one name for one thing: aclose()
