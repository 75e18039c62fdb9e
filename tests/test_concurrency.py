"""Many processes x threads x asyncio tasks against one governor: the number
of simultaneous holders never exceeds capacity, no lease is granted twice,
and every slot comes home. Then a stress round with aborts and capacity
dropping through 0 that must drain back to full capacity."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from governor import AcquireTimeout, AsyncGovernor, Governor, GovernorConfig, Outcome

from .support.servers import until, wait_until
from .support.workers import fleet_host

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


@pytest.mark.parametrize("resume_fraction", [0.25, 1.0], ids=["slow-start", "blind"])
def test_a_new_governor_under_a_flood_starts_at_the_resume_level_and_doubles(
    redis_url: str, resume_fraction: float
) -> None:
    """Two hosts' governor objects on a real Redis, 40 agent threads flooding
    a new adaptive governor (max_capacity 32) whose provider accepts
    everything. The test's own witness counts the leases in the agents'
    hands: never more than the resume level (8) plus the successes reported
    so far (each adds at most one), and at each quiet point (every other
    agent queued) 8, 16, 32, 32: each round of successes doubles it, up to
    max_capacity. The contrast, resume_fraction 1.0 (no slow start): 32 in
    hand before any success, past the witness's bound."""
    name = f"flood-{uuid.uuid4().hex[:8]}"
    config = GovernorConfig(max_capacity=32, resume_fraction=resume_fraction, poll=0.2, restart_hold=False)
    resume_level = 8  # max(1, floor(32 * 0.25))
    govs = [Governor.from_url(redis_url, name, config) for _ in range(2)]
    agents = 40
    lock = threading.Lock()
    in_hand = reported = 0
    over: list[tuple[int, int]] = []  # (in hand, successes reported) past the bound
    gates: list[threading.Event] = []  # one per lease in hand: set, its agent reports success and releases
    stop = threading.Event()
    errors: list[BaseException] = []

    def agent(gov: Governor) -> None:
        nonlocal in_hand, reported
        try:
            while not stop.is_set():
                lease = gov.acquire(timeout=60)
                gate = threading.Event()
                with lock:
                    in_hand += 1  # after the grant: never more than Redis's own count
                    if in_hand > resume_level + reported:
                        over.append((in_hand, reported))
                    gates.append(gate)
                gate.wait(60)
                with lock:
                    in_hand -= 1  # before the release, and the success counted before it is sent
                    reported += 1
                gov.report(Outcome.SUCCESS, lease=lease, release=True)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            errors.append(error)

    def quiet_at(released: int) -> int:
        """The leases in hand once every released agent has reported and every
        agent not holding waits in the queue (no grant on its way, no report
        unprocessed: capacity is what those reports made it)."""

        def settled() -> bool:
            with lock:
                held, done = in_hand, reported
            return done >= released and held > 0 and govs[0].status().queued == agents - held

        wait_until(settled, 30, what="every agent holding or queued")
        with lock:
            return in_hand

    threads = [threading.Thread(target=agent, args=(govs[i % 2],), daemon=True) for i in range(agents)]
    released = 0
    try:
        for thread in threads:
            thread.start()
        levels = [quiet_at(released)]
        for _ in range(3):  # a round: every lease in hand succeeds
            with lock:
                round_, gates[:] = list(gates), []
            released += len(round_)
            for gate in round_:
                gate.set()
            levels.append(quiet_at(released))
    finally:
        stop.set()
        for _ in range(600):  # bounded: every agent's last lease given back
            if not any(t.is_alive() for t in threads):
                break
            with lock:
                for gate in gates:
                    gate.set()
            for thread in threads:
                thread.join(0.01)
        for gov in govs:
            gov.close()
    assert not errors, errors
    if resume_fraction < 1.0:
        assert levels == [8, 16, 32, 32]
        assert over == [], f"more in hand than the resume level plus the successes: {over[:5]}"
    else:
        assert levels == [32, 32, 32, 32]
        assert max(n for n, r in over if r == 0) == 32  # the blind burst: max_capacity before any success


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
