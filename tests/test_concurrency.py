"""Many processes x threads x asyncio tasks against one governor: the number
of simultaneous holders never exceeds capacity, no lease is granted twice,
and every slot comes home. Then a stress round with aborts and capacity
dropping through 0 that must drain back to full capacity."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from governor import AcquireTimeout, AsyncGovernor, Governor, GovernorConfig, Outcome

from .servers import until
from .workers import fleet_host

MakeAGov = Callable[..., AsyncGovernor]


def test_processes_threads_and_tasks_never_exceed_capacity(redis_url: str) -> None:
    name = f"conc-{uuid.uuid4().hex[:8]}"
    capacity, hosts, threads, tasks, rounds = 5, 3, 4, 4, 12
    with ProcessPoolExecutor(hosts, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(fleet_host, redis_url, name, capacity, threads, tasks, rounds, seed) for seed in range(hosts)
        ]
        results = [f.result(timeout=240) for f in futures]
    fences = [fence for r in results for fence in r["fences"]]
    assert sum(r["violations"] for r in results) == 0
    assert len(fences) == hosts * (threads + tasks) * rounds
    assert len(set(fences)) == len(fences)  # no lease granted twice
    gov = Governor.from_url(redis_url, name, GovernorConfig(max_capacity=capacity))
    try:
        st = gov.status()
        assert (st.in_flight, st.queued) == (0, 0)
    finally:
        gov.close()


@pytest.mark.parametrize("policy", ["seed", "adaptive"])
async def test_stress_with_aborts_and_capacity_through_zero_drains_back_to_full(
    make_agov: MakeAGov, policy: str
) -> None:
    max_capacity = 6
    # resume_fraction 1.0: not about the adaptive slow start, a reset is back at full capacity at once
    config = GovernorConfig(policy=policy, max_capacity=max_capacity, poll=0.1, queue_ttl=1, resume_fraction=1.0)  # type: ignore[arg-type]
    gov = make_agov(config)
    rng = random.Random(7)
    stop = asyncio.Event()
    holding = 0
    admitted = 0

    async def agent() -> None:
        nonlocal holding, admitted
        while not stop.is_set():
            try:
                lease = await gov.acquire(timeout=rng.uniform(0.01, 0.3))
            except AcquireTimeout:
                continue
            holding += 1
            admitted += 1
            try:
                await asyncio.sleep(rng.uniform(0, 0.01))
                outcome = rng.choice([Outcome.SUCCESS] * 4 + [Outcome.RATE_LIMITED, Outcome.ERROR])
                await gov.report(outcome, lease=lease)
            finally:
                holding -= 1
                await lease.release()

    async def chaos(agents: list[asyncio.Task[None]]) -> None:
        for step in range(40):
            await asyncio.sleep(0.02)
            action = rng.randrange(4)
            if action == 0:
                await gov.set_max_capacity(rng.randint(1, max_capacity))
            elif action == 1:
                await gov.pause("stress", duration=rng.uniform(0.01, 0.1))
            elif action == 2:
                await gov.resume()
            else:  # abort a random agent mid-flight and start a fresh one
                victim = rng.randrange(len(agents))
                agents[victim].cancel()
                agents[victim] = asyncio.create_task(agent())
                every_agent.append(agents[victim])
            if step % 10 == 0:
                await gov.probe()

    agents = [asyncio.create_task(agent()) for _ in range(15)]
    every_agent = list(agents)
    await asyncio.wait_for(chaos(agents), 60)
    stop.set()
    for task in agents:
        task.cancel()
    await asyncio.gather(*every_agent, return_exceptions=True)
    assert holding == 0 and admitted > 0

    async def drained() -> bool:  # shielded releases of cancelled agents may still be in flight
        return (await gov.status()).in_flight == 0

    await until(drained, what="every slot to come home")

    await gov.set_max_capacity(max_capacity)
    await gov.resume()
    st = await gov.reset()
    assert (st.capacity, st.in_flight, st.queued, st.paused) == (max_capacity, 0, 0, False)
    leases = [await gov.try_acquire() for _ in range(max_capacity)]
    assert all(lease is not None for lease in leases)
    assert await gov.try_acquire() is None
    for lease in leases:
        assert lease is not None
        await lease.release()
