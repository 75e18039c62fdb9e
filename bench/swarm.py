"""The swarm driver: each strategy in turn, on the same provider settings.

For each strategy the driver creates the strategy's governor(s) afresh
(``configure()``: the stored config and a clean policy state), resets the
provider (which restarts its limit schedule at the common start time),
hands one job per host to the hosts, samples the governors' capacity while
they run, then reads what the provider recorded and computes the figures
(:mod:`bench.analysis`). The governors' keys are deleted afterwards.

The provider runs in this process unless ``provider_url`` points at one
started with ``python -m bench provider`` (its settings are then
read from it). Hosts are processes (:mod:`bench.workers`), or
threads when the Redis is an in-process fakeredis.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from governor import AsyncGovernor, GovernorConfig, __version__
from governor.errors import GovernorError

from .analysis import StrategyMetrics, analyse, ideal_finish
from .embedded import Backend
from .host import HostJob, HostResult, config_to_json, node_host_missing
from .provider import MockProvider, ProviderConfig, RunRecord
from .scenario import (
    PROXIES,
    Scenario,
    governor_config,
    governor_names,
    strategy_pattern,
    strategy_reports,
    strategy_runtime,
)
from .workers import DEFAULT_NAMESPACE, Hosts, QueueHosts, ThreadHosts

#: extra seconds a strategy may take beyond max_time before the driver gives up on its hosts
GRACE = 60.0


@dataclass
class Progress:
    """What the driver knows while a strategy runs (for progress displays)."""

    strategy: str
    index: int  #: 1-based position of this strategy run among all of them (rounds included)
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
    #: the governors' decision logs: why capacity, pause and hold changed
    decisions: list[dict[str, Any]] = field(default_factory=list)
    #: this machine's 1-minute load average before and after the run (a busy machine skews figures)
    load: tuple[float, float] = (0.0, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics.to_json(),
            "load_average": [round(x, 2) for x in self.load],
            "trace": {
                "provider": {
                    "columns": ["t", "limit", "served", "offered", "peak_offered", "ok", "limited"],
                    "rows": [[round(r[0], 4), *r[1:]] for r in self.record.trace],
                },
                "governor": {
                    "columns": ["t", "capacity", "in_flight", "queued", "paused"],
                    "rows": [[round(t, 4), c, f, q, int(p)] for t, c, f, q, p in self.capacity],
                },
                "decisions": self.decisions,
            },
        }


@dataclass
class SwarmResult:
    """Everything a swarm run measured: per strategy, the figures and traces."""

    scenario: Scenario
    provider: ProviderConfig
    runs: dict[str, StrategyRun]
    environment: dict[str, Any]
    #: every round's figures, by strategy (``runs`` holds the median round)
    rounds: dict[str, list[StrategyMetrics]] = field(default_factory=dict)

    @property
    def ideal_finish(self) -> float:
        return ideal_finish(self.provider, self.scenario.workload)

    @property
    def ideal_rps(self) -> float:
        return self.provider.limit / self.provider.latency_mean

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SwarmResult:
        """A result read back from its JSON file (to redraw or re-tabulate it)."""
        runs = {}
        every: dict[str, list[StrategyMetrics]] = {}
        for name, run in data["strategies"].items():
            trace = run["trace"]
            record = RunRecord(started_wall=0.0, trace=[tuple(r) for r in trace["provider"]["rows"]])  # type: ignore[misc]
            capacity = [(t, c, f, q, bool(p)) for t, c, f, q, p in trace["governor"]["rows"]]
            load = run.get("load_average", (0.0, 0.0))
            runs[name] = StrategyRun(
                StrategyMetrics.from_json(run["metrics"]), record, capacity, list(trace.get("decisions", [])),
                (float(load[0]), float(load[1])),
            )  # fmt: skip
            every[name] = [StrategyMetrics.from_json(m) for m in run.get("rounds", [])]
        return cls(Scenario.from_json(data["scenario"]), ProviderConfig.from_json(data["provider"]), runs,
                   dict(data["environment"]), every)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.to_json(),
            "provider": self.provider.to_json(),
            "environment": self.environment,
            "ideal": {
                "rps_at_start": self.ideal_rps,
                "finish": self.ideal_finish if math.isfinite(self.ideal_finish) else None,
            },
            "strategies": {
                name: {**run.to_json(), "rounds": [m.to_json() for m in self.rounds.get(name, [])]}
                for name, run in self.runs.items()
            },
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
    echo: Callable[[str], None] | None = None,
) -> SwarmResult:
    """Run every strategy of ``scenario`` in turn; returns the figures and traces.

    ``provider_url``: use a provider started elsewhere (its settings win).
    ``external_workers``: hosts are workers already running on ``namespace``
    (``python -m bench worker``), not processes started here.
    ``echo``: where the output of the host processes started here goes,
    line by line (default: straight to this process's stdout and stderr).

    Everything is closed in order: each strategy's hosts stop their agents
    (which give back their places and leases) before they close their
    governors and clients; then the driver's governors, the host processes,
    the provider and the driver's Redis client; the caller closes the backend.
    """
    if "fleet-mixed" in scenario.strategies:
        if not backend.shared:
            raise ValueError("fleet-mixed runs Node hosts, which need a Redis they can reach: pass a Redis URL")
        missing = node_host_missing()
        if missing is not None:
            raise ValueError(f"fleet-mixed cannot run: {missing}")
    if "fleet-proxy" in scenario.strategies and not backend.shared:
        raise ValueError(
            "fleet-proxy runs `governor proxy` processes, which need a Redis they can reach: pass a Redis URL"
        )
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
        hosts = QueueHosts(backend.url, ns, spawn=not external_workers, echo=echo)
    client = backend.async_client()
    rounds: dict[str, list[StrategyRun]] = {name: [] for name in scenario.strategies}
    count = len(scenario.strategies) * scenario.repeat
    try:
        await hosts.start(scenario.hosts)
        for round_ in range(scenario.repeat):
            # Every other round runs the strategies in reverse, so a machine
            # that gets busier or quieter during the run favours none of them.
            order = scenario.strategies if round_ % 2 == 0 else scenario.strategies[::-1]
            for i, strategy in enumerate(order, 1):
                run = await _run_strategy(
                    scenario, strategy, (round_ * len(order) + i, count), f"{run_id}-{round_}", provider, url,
                    hosts, backend, client, progress,
                )  # fmt: skip
                rounds[strategy].append(run)
    finally:
        await hosts.stop()
        await provider.stop()
        await client.aclose()
    environment = await _environment(backend, hosts, provider_url)
    runs = {name: median_run(rounds[name]) for name in scenario.strategies}
    every = {name: [run.metrics for run in rounds[name]] for name in scenario.strategies}
    return SwarmResult(scenario, provider.config, runs, environment, every)


def median_run(runs: list[StrategyRun]) -> StrategyRun:
    """The run whose goodput is the median of the rounds (the lower one of an even count)."""
    ordered = sorted(runs, key=lambda run: run.metrics.goodput or 0.0)
    return ordered[(len(ordered) - 1) // 2]


async def _run_strategy(
    scenario: Scenario,
    strategy: str,
    position: tuple[int, int],
    run_id: str,
    provider: _Provider,
    provider_url: str,
    hosts: Hosts,
    backend: Backend,
    client: Any,
    progress: Callable[[Progress], None] | None,
) -> StrategyRun:
    config = governor_config(scenario, strategy)
    names = governor_names(f"sim-{run_id}", strategy, scenario.hosts)
    watched = await _configure(client, sorted(set(names)), config)
    proxies: list[Any] = []
    if strategy == "fleet-proxy":  # the hosts call the proxies, which govern
        assert backend.url is not None and names
        proxies = await asyncio.to_thread(_start_proxies, backend.url, names[0], provider_url, PROXIES)
    try:
        return await _run_jobs(
            scenario, strategy, position, run_id, provider, provider_url, hosts, backend, client, progress,
            config, names, watched, [url for url, _ in proxies],
        )  # fmt: skip
    finally:
        for _, process in proxies:
            await asyncio.to_thread(_stop_proxy, process)


def _start_proxies(redis_url: str, name: str, upstream: str, count: int) -> list[tuple[str, Any]]:
    """``count`` ``governor proxy`` processes governing ``upstream`` by the
    governor ``name``: (the base URL its agents call, the process)."""
    from .proxy_bench import _serve
    from .redis_server import free_port

    cli = os.path.join(os.path.dirname(sys.executable), "governor")
    started: list[tuple[str, Any]] = []
    try:
        for _ in range(count):
            port = free_port()
            args = [cli, "--url", redis_url, "proxy", "--openai", name, "--openai-upstream", upstream]
            process = _serve([*args, "--port", str(port)], f"http://127.0.0.1:{port}/healthz")
            started.append((f"http://127.0.0.1:{port}/openai", process))
    except BaseException:
        for _, process in started:
            _stop_proxy(process)
        raise
    return started


def _stop_proxy(process: Any) -> None:
    process.terminate()
    process.wait(10)
    if process.stderr is not None:
        process.stderr.close()


async def _run_jobs(
    scenario: Scenario,
    strategy: str,
    position: tuple[int, int],
    run_id: str,
    provider: _Provider,
    provider_url: str,
    hosts: Hosts,
    backend: Backend,
    client: Any,
    progress: Callable[[Progress], None] | None,
    config: GovernorConfig | None,
    names: list[str],
    watched: list[AsyncGovernor],
    proxies: list[str],
) -> StrategyRun:
    """One strategy's run on its governors (``watched``); with ``proxies``,
    host ``h`` calls ``proxies[h % len(proxies)]`` instead of the provider."""
    await hosts.ready()
    load_before = os.getloadavg()[0]
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
            provider_url=proxies[h % len(proxies)] if proxies else provider_url,
            governor=names[h] if names and not proxies else None,
            config=config_to_json(config) if config and not proxies else None,
            report=strategy_reports(strategy),
            pattern="lease" if strategy_pattern(strategy) == "lease" else "call",
            report_retry_after=scenario.report_retry_after,
            backoff_base=scenario.backoff_base,
            backoff_cap=scenario.backoff_cap,
            client=scenario.client,
            model=scenario.model,
            runtime=strategy_runtime(strategy, h),
        )
        for h in range(scenario.hosts)
    ]
    running = asyncio.create_task(hosts.run(jobs, scenario.lead + scenario.max_time + GRACE))
    stop_background = asyncio.Event()
    background = (
        asyncio.create_task(_ungoverned(scenario, provider_url, start_at, stop_background))
        if scenario.ungoverned
        else None
    )
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
                        strategy, *position, t, int(live["ok"]), scenario.workload,
                        int(live["limited"]), int(live["served"]), int(live["limit"]), cap,
                    )
                )  # fmt: skip
        results: list[HostResult] = running.result()
    finally:
        if not running.done():
            running.cancel()
        stop_background.set()
        theirs = await background if background is not None else []
        decisions = await asyncio.to_thread(_decisions, backend, watched, start_at)
        if not scenario.keep_governors:
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
        decisions=decisions,
        capacity=capacity,
        background=theirs,
    )
    if progress is not None:
        live = await provider.live()
        progress(
            Progress(
                strategy, *position, metrics.finish or scenario.max_time, metrics.ok,
                scenario.workload, metrics.limited, 0, int(live["limit"]), None, finished=True,
            )
        )  # fmt: skip
    return StrategyRun(metrics, record, capacity, decisions, (load_before, os.getloadavg()[0]))


async def _ungoverned(
    scenario: Scenario, provider_url: str, start_at: float, stop: asyncio.Event
) -> list[tuple[float, float, str]]:
    """The shared account's other traffic: ``scenario.ungoverned`` callers, each
    calling the provider one call after another with SDK-style retries (the
    Retry-After, else the backoff), until ``stop``. Returns every answer as
    (start, end, kind), seconds since ``start_at`` (kind: the provider's "ok",
    "limited" or "error")."""
    import aiohttp

    from governor.backoff import retry_wait

    from .provider import LIMITED, OK

    calls: list[tuple[float, float, str]] = []
    url = provider_url.rstrip("/") + "/v1/chat/completions"
    payload = {"model": scenario.model, "messages": [{"role": "user", "content": "Another team's call."}]}
    wanted = 0  # callers the schedule asks for now

    async def caller(index: int, session: Any) -> None:
        failures = 0
        while not stop.is_set() and index < wanted:
            begun = time.time()
            kind, retry_after = "error", None
            try:
                async with session.post(url, json=payload) as response:
                    await response.read()
                    if response.status == 200:
                        kind = OK
                    elif response.status == 429:
                        kind = LIMITED
                        ms = response.headers.get("retry-after-ms")
                        retry_after = int(ms) / 1000 if ms and ms.isdigit() else None
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            calls.append((begun - start_at, time.time() - start_at, kind))
            if kind == OK:
                failures = 0
                continue
            failures += 1
            pause = retry_wait(failures, retry_after, base=scenario.backoff_base, cap=scenario.backoff_cap)
            try:
                await asyncio.wait_for(stop.wait(), pause)
            except asyncio.TimeoutError:
                pass

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=60.0),
        headers={"Authorization": "Bearer sk-sim"},  # as the agents send: without it the provider answers 401
    ) as session:
        tasks: dict[int, asyncio.Task[None]] = {}
        await asyncio.sleep(max(0.0, start_at - time.time()))
        for i, (at, count) in enumerate(scenario.ungoverned):
            await asyncio.sleep(max(0.0, start_at + at - time.time()))
            if stop.is_set():
                break
            wanted = count  # callers above it stop after their call
            for index in range(count):
                if index not in tasks or tasks[index].done():
                    tasks[index] = asyncio.create_task(caller(index, session))
            if i + 1 < len(scenario.ungoverned):
                next_at = start_at + scenario.ungoverned[i + 1][0]
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.time()))
                except asyncio.TimeoutError:
                    pass
        await stop.wait()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    return sorted(calls)


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


def _decisions(backend: Backend, governors: list[AsyncGovernor], start_at: float) -> list[dict[str, Any]]:
    """Every governor's decision log, times in seconds since the start, oldest first."""
    from governor.views import read_events_after

    client = backend.sync_client()
    out: list[dict[str, Any]] = []
    try:
        for governor in governors:
            after = "0"
            while True:
                events = read_events_after(client, governor.keys, after, 1000)
                for event in events:
                    out.append(
                        {
                            "governor": governor.name,
                            "t": round(event.at - start_at, 4),
                            "kind": event.kind,
                            "capacity": event.capacity,
                            "paused": event.paused,
                            **event.fields,
                        }
                    )
                if len(events) < 1000:
                    break
                after = events[-1].id
    except GovernorError:
        pass  # the log is an aid: a run without it still stands
    finally:
        client.close()
    out.sort(key=lambda d: d["t"])
    return out


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
