"""The swarm driver: each strategy in turn, on the same provider settings.

For each strategy the driver creates the strategy's governor(s) afresh
(``configure()``: the stored config and a clean policy state), resets the
provider (which restarts its limit schedule at the common start time),
hands one job per host to the hosts, samples the governors' capacity while
they run, then reads what the provider recorded and computes the figures
(:mod:`governor.sim.analysis`). The governors' keys are deleted afterwards.

The provider runs in this process unless ``provider_url`` points at one
started with ``python -m governor.sim provider`` (its settings are then
read from it). Hosts are processes (:mod:`governor.sim.workers`), or
threads when the Redis is an in-process fakeredis.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import AsyncGovernor, GovernorConfig, __version__
from ..errors import GovernorError
from .analysis import StrategyMetrics, analyse, ideal_finish
from .embedded import Backend
from .host import HostJob, HostResult
from .provider import MockProvider, ProviderConfig, RunRecord
from .scenario import Scenario, governor_config, governor_names, strategy_reports
from .workers import DEFAULT_NAMESPACE, Hosts, QueueHosts, ThreadHosts

#: extra seconds a strategy may take beyond max_time before the driver gives up on its hosts
GRACE = 60.0


@dataclass
class Progress:
    """What the driver knows while a strategy runs (for progress displays)."""

    strategy: str
    index: int  #: 1-based position of the strategy in the run
    count: int
    elapsed: float
    ok: int
    workload: int
    limited: int
    served: int
    limit: int
    capacity: int | None
    finished: bool = False


@dataclass
class StrategyRun:
    """One strategy's figures and traces."""

    metrics: StrategyMetrics
    record: RunRecord
    #: (t, capacity, leases in flight, queued, paused) summed over the strategy's governors
    capacity: list[tuple[float, int, int, int, bool]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics.to_json(),
            "trace": {
                "provider": {
                    "columns": ["t", "limit", "served", "offered", "peak_offered", "ok", "limited"],
                    "rows": [[round(r[0], 4), *r[1:]] for r in self.record.trace],
                },
                "governor": {
                    "columns": ["t", "capacity", "in_flight", "queued", "paused"],
                    "rows": [[round(t, 4), c, f, q, int(p)] for t, c, f, q, p in self.capacity],
                },
            },
        }


@dataclass
class SwarmResult:
    scenario: Scenario
    provider: ProviderConfig
    runs: dict[str, StrategyRun]
    environment: dict[str, Any]

    @property
    def ideal_finish(self) -> float:
        return ideal_finish(self.provider, self.scenario.workload)

    @property
    def ideal_rps(self) -> float:
        return self.provider.limit / self.provider.latency_mean

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.to_json(),
            "provider": self.provider.to_json(),
            "environment": self.environment,
            "ideal": {"rps_at_start": self.ideal_rps, "finish": self.ideal_finish},
            "strategies": {name: run.to_json() for name, run in self.runs.items()},
        }


class _Provider:
    """The provider as the driver sees it: in this process or remote."""

    def __init__(self, config: ProviderConfig | None, url: str | None) -> None:
        self._local = MockProvider(config) if url is None else None
        self._url = url
        self._session: Any = None
        self.config = config or ProviderConfig()

    async def start(self) -> str:
        if self._local is not None:
            return await self._local.start("127.0.0.1", 0)
        import aiohttp

        assert self._url is not None
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        async with self._session.get(f"{self._url}/sim/config") as response:
            response.raise_for_status()
            self.config = ProviderConfig.from_json(await response.json())
        return self._url

    async def reset(self, start_at: float) -> None:
        if self._local is not None:
            self._local.reset(start_at=start_at)
            return
        async with self._session.post(f"{self._url}/sim/reset", json={"start_at": start_at}) as response:
            response.raise_for_status()

    async def live(self) -> dict[str, Any]:
        if self._local is not None:
            return self._local.live()
        async with self._session.get(f"{self._url}/sim/live") as response:
            response.raise_for_status()
            return await response.json()  # type: ignore[no-any-return]

    async def record(self) -> RunRecord:
        if self._local is not None:
            return RunRecord.from_json(self._local.snapshot()["record"])
        async with self._session.get(f"{self._url}/sim/stats") as response:
            response.raise_for_status()
            return RunRecord.from_json((await response.json())["record"])

    async def stop(self) -> None:
        if self._local is not None:
            await self._local.stop()
        if self._session is not None:
            await self._session.close()


async def run_swarm(
    scenario: Scenario,
    provider_config: ProviderConfig | None,
    backend: Backend,
    *,
    provider_url: str | None = None,
    external_workers: bool = False,
    namespace: str | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SwarmResult:
    """Run every strategy of ``scenario`` in turn; returns the figures and traces.

    ``provider_url``: use a provider started elsewhere (its settings win).
    ``external_workers``: hosts are workers already running on ``namespace``
    (``python -m governor.sim worker``), not processes started here.
    """
    run_id = uuid.uuid4().hex[:8]
    provider = _Provider(provider_config, provider_url)
    url = await provider.start()
    hosts: Hosts
    if not backend.shared:
        if external_workers:
            raise ValueError("external workers need a Redis they can reach: pass a Redis URL")
        hosts = ThreadHosts(backend.async_client)
    else:
        assert backend.url is not None
        ns = namespace or (DEFAULT_NAMESPACE if external_workers else f"{DEFAULT_NAMESPACE}:{run_id}")
        hosts = QueueHosts(backend.url, ns, spawn=not external_workers)
    client = backend.async_client()
    runs: dict[str, StrategyRun] = {}
    try:
        await hosts.start(scenario.hosts)
        for index, strategy in enumerate(scenario.strategies, 1):
            runs[strategy] = await _run_strategy(
                scenario, strategy, index, run_id, provider, url, hosts, client, progress
            )
    finally:
        await hosts.stop()
        await provider.stop()
        await client.aclose()
    environment = await _environment(backend, hosts, provider_url)
    return SwarmResult(scenario, provider.config, runs, environment)


async def _run_strategy(
    scenario: Scenario,
    strategy: str,
    index: int,
    run_id: str,
    provider: _Provider,
    provider_url: str,
    hosts: Hosts,
    client: Any,
    progress: Callable[[Progress], None] | None,
) -> StrategyRun:
    config = governor_config(scenario, strategy)
    names = governor_names(f"sim-{run_id}", strategy, scenario.hosts)
    watched = await _configure(client, sorted(set(names)), config)
    await hosts.ready()
    start_at = time.time() + scenario.lead
    await provider.reset(start_at)
    jobs = [
        HostJob(
            run_id=f"{run_id}-{strategy}",
            strategy=strategy,
            host=h,
            agents=scenario.agents,
            calls=scenario.calls,
            start_at=start_at,
            deadline=start_at + scenario.max_time,
            provider_url=provider_url,
            governor=names[h] if names else None,
            config=asdict(config) if config else None,
            report=strategy_reports(strategy),
            report_retry_after=scenario.report_retry_after,
            backoff_base=scenario.backoff_base,
            backoff_cap=scenario.backoff_cap,
            client=scenario.client,
            model=scenario.model,
        )
        for h in range(scenario.hosts)
    ]
    running = asyncio.create_task(hosts.run(jobs, scenario.lead + scenario.max_time + GRACE))
    capacity: list[tuple[float, int, int, int, bool]] = []
    fixed_capacity = config.max_capacity if strategy == "fixed" and config else None
    try:
        while not running.done():
            await asyncio.wait([running], timeout=scenario.sample_interval)
            t = time.time() - start_at
            if t < 0:
                continue
            sample = await _sample(watched)
            if sample is not None:
                capacity.append((t, *sample))
            if progress is not None:
                live = await provider.live()
                cap = fixed_capacity if fixed_capacity is not None else (sample[0] if sample else None)
                progress(
                    Progress(
                        strategy, index, len(scenario.strategies), t, int(live["ok"]), scenario.workload,
                        int(live["limited"]), int(live["served"]), int(live["limit"]), cap,
                    )
                )  # fmt: skip
        results: list[HostResult] = running.result()
    finally:
        if not running.done():
            running.cancel()
        await _forget(client, watched)
    record = await provider.record()
    metrics = analyse(
        strategy,
        provider.config,
        record,
        results,
        window=scenario.window,
        settle_windows=scenario.settle_windows,
        workload=scenario.workload,
        max_time=scenario.max_time,
    )
    if progress is not None:
        live = await provider.live()
        progress(
            Progress(
                strategy, index, len(scenario.strategies), metrics.finish or scenario.max_time, metrics.ok,
                scenario.workload, metrics.limited, 0, int(live["limit"]), None, finished=True,
            )
        )  # fmt: skip
    return StrategyRun(metrics, record, capacity)


async def _configure(client: Any, names: list[str], config: GovernorConfig | None) -> list[AsyncGovernor]:
    """Create each governor afresh with the strategy's config; returns handles for sampling."""
    governors = []
    for name in names:
        governor = AsyncGovernor(client, name, config)
        await governor.configure()
        governors.append(governor)
    return governors


async def _sample(governors: list[AsyncGovernor]) -> tuple[int, int, int, bool] | None:
    if not governors:
        return None
    cap = flight = queued = 0
    paused = False
    for governor in governors:
        try:
            status = await governor.status(create=False)
        except GovernorError:
            return None
        cap += status.capacity
        flight += status.in_flight
        queued += status.queued
        paused = paused or status.paused
    return cap, flight, queued, paused


async def _forget(client: Any, governors: list[AsyncGovernor]) -> None:
    for governor in governors:
        await governor.aclose()
        await client.delete(*governor.keys.keys)


async def _environment(backend: Backend, hosts: Hosts, provider_url: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "fleet_governor": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "redis": backend.describe(),
        "hosts": hosts.description,
        "provider": provider_url or "in the driver's process",
    }
    if backend.shared:
        client = backend.sync_client()
        try:
            info["redis_version"] = client.info("server").get("redis_version")
        finally:
            client.close()
    return info
