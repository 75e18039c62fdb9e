"""Worker processes for the concurrency tests (imported by spawned children)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import redis
import redis.asyncio

from governor import AsyncGovernor, Governor, GovernorConfig


def fleet_host(url: str, name: str, capacity: int, threads: int, tasks: int, rounds: int, seed: int) -> dict[str, Any]:
    """One host: `threads` threads and `tasks` asyncio tasks, each taking
    `rounds` leases. While holding, each agent counts itself in a Redis
    counter; a count above capacity is an over-admission."""
    config = GovernorConfig(max_capacity=capacity, poll=0.2, queue_ttl=2)
    counter = f"holding:{{{name}}}"
    fences: list[int] = []
    violations = [0]
    rng = random.Random(seed)
    pauses = [rng.uniform(0, 0.003) for _ in range(threads * rounds + tasks * rounds)]

    gov = Governor.from_url(url, name, config)
    client = redis.Redis.from_url(url)

    def thread_agent() -> None:
        for _ in range(rounds):
            with gov.acquire(timeout=60, holder="thread") as lease:
                if client.incr(counter) > capacity:
                    violations[0] += 1
                time.sleep(pauses.pop() if pauses else 0.001)
                client.decr(counter)
                fences.append(lease.fence)

    async def task_agents() -> None:
        agov = AsyncGovernor.from_url(url, name, config)
        aclient = redis.asyncio.Redis.from_url(url)

        async def agent() -> None:
            for _ in range(rounds):
                async with agov.acquire(timeout=60, holder="task") as lease:
                    if await aclient.incr(counter) > capacity:
                        violations[0] += 1
                    await asyncio.sleep(pauses.pop() if pauses else 0.001)
                    await aclient.decr(counter)
                    fences.append(lease.fence)

        try:
            await asyncio.gather(*(agent() for _ in range(tasks)))
        finally:
            await agov.aclose()
            await aclient.aclose()

    workers = [threading.Thread(target=thread_agent) for _ in range(threads)]
    for worker in workers:
        worker.start()
    asyncio.run(task_agents())
    for worker in workers:
        worker.join(120)
    gov.close()
    client.close()
    return {"fences": fences, "violations": violations[0]}
