"""``python -m bench churn``: admissions under a cancellation storm.

Thousands of asyncio waiters in one process share a few slots that turn
over quickly (capacity 5, 10 ms holds); each waiter gives up after a
random wait (``asyncio.wait_for``: its acquire is cancelled) and asks again
at once. Measured: admissions per second (the first 10 s apart: a storm
starts with every waiter at once), the time from a release to the next
admission (p50, p99), the process's CPU time and the calls it sent to
Redis. The governor's own facade is what runs: nothing is simulated.
"""

from __future__ import annotations

import asyncio
import collections
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from governor import AsyncGovernor, GovernorConfig


@dataclass(frozen=True)
class ChurnResult:
    """What one run measured."""

    waiters: int  #: asyncio tasks, each acquiring in a loop
    seconds: float  #: how long they ran
    admissions: int  #: leases granted in all
    first_10s: int  #: of which in the first 10 s
    per_second: float  #: admissions / seconds
    release_to_admission_p50_ms: float  #: from a release to the next admission
    release_to_admission_p99_ms: float
    most_at_once: int  #: the test's own count of simultaneous holders (at most the capacity)
    cpu_seconds: float  #: the process's CPU time over the run
    calls: dict[str, int]  #: calls to Redis per function

    def lines(self) -> list[str]:
        return [
            f"{self.waiters} waiters for {self.seconds:.0f} s: {self.admissions} admissions "
            f"({self.per_second:.0f}/s; {self.first_10s} in the first 10 s), at most {self.most_at_once} at once",
            f"release to next admission: p50 {self.release_to_admission_p50_ms:.1f} ms, "
            f"p99 {self.release_to_admission_p99_ms:.1f} ms",
            f"client CPU {self.cpu_seconds:.1f} s in {self.seconds:.0f} s; calls to Redis: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.calls.items())),
        ]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_churn(
    client: Any,
    name: str,
    waiters: int = 5000,
    seconds: float = 20.0,
    capacity: int = 5,
    hold: float = 0.01,
    patience: tuple[float, float] = (0.5, 5.0),
    seed: int = 1,
) -> ChurnResult:
    """Run the storm on ``client`` under governor ``name``."""
    gov = AsyncGovernor(client, name, GovernorConfig(max_capacity=capacity, policy="fixed", restart_hold=False))
    calls: collections.Counter[str] = collections.Counter()
    run = gov._connection.run

    async def counting(call: Any) -> Any:
        calls[call.script] += 1
        return await run(call)

    gov._connection.run = counting  # type: ignore[method-assign]
    admitted: list[float] = []
    gaps: list[float] = []
    last_release: list[float] = []
    holding = most = 0
    start = time.monotonic()
    stop = start + seconds

    async def agent(number: int) -> None:
        nonlocal holding, most
        rnd = random.Random(seed * 1_000_003 + number)
        while time.monotonic() < stop:
            try:
                lease = await asyncio.wait_for(gov.acquire(timeout=None), rnd.uniform(*patience))
            except asyncio.TimeoutError:
                continue  # gave up: its acquire was cancelled; ask again
            now = time.monotonic()
            holding += 1
            most = max(most, holding)
            admitted.append(now)
            if last_release:
                gaps.append(now - last_release[-1])
            await asyncio.sleep(hold)
            holding -= 1
            await lease.release()
            last_release.append(time.monotonic())

    cpu = time.process_time()
    try:
        await asyncio.gather(*(agent(i) for i in range(waiters)))
    finally:
        cpu = time.process_time() - cpu
        await gov.aclose()
    elapsed = time.monotonic() - start
    quantiles = statistics.quantiles(gaps, n=100) if len(gaps) >= 2 else [float("nan")] * 99
    return ChurnResult(
        waiters=waiters,
        seconds=elapsed,
        admissions=len(admitted),
        first_10s=sum(1 for t in admitted if t - start < 10),
        per_second=len(admitted) / elapsed,
        release_to_admission_p50_ms=quantiles[49] * 1000,
        release_to_admission_p99_ms=quantiles[98] * 1000,
        most_at_once=most,
        cpu_seconds=cpu,
        calls=dict(calls),
    )
