"""The budgets benchmark (``python -m bench budgets``): a fleet of agents
against a provider account limited in requests and tokens per minute, with
nobody telling the fleet the limits.

Scenarios (:func:`scenarios`), each a :class:`~bench.provider.ProviderConfig`
with a one-minute period (the governor's budgets are per minute) and agent
classes whose prompts are lognormal (a long tail) and whose completions are
lognormal capped by their ``max_tokens``:

``tokens-bind``
    600,000 tokens a minute, a bucket of a tenth of that; requests and
    concurrency far away. The ideal is the token refill rate.
``requests-bind``
    600 requests a minute (a bucket of 60), small prompts. The ideal is
    the request refill rate.
``concurrency-bind``
    A hidden concurrency limit of 8; the rate limits (announced in headers)
    never bind. The ideal is the limit over the mean service time.
``mixed``
    Tokens bind, and a few agents send prompts twenty times the others'
    (the "huge" class): are they starved?
``uncontended``
    Four agents, every limit far away: what one call costs in Redis round
    trips when nobody waits (the transport against ``call()``).

Strategies (:data:`STRATEGIES`), each agent making one call after another
with the real ``openai`` SDK (async) until the run's end:

``none``
    The SDK with its own retries (``max_retries``, the SDK's backoff and the
    provider's Retry-After), no governor; a call the SDK gives up on is made
    again at once.
``fleet-concurrency``
    ``AsyncGovernor.call`` around a client of
    ``governor.providers.async_openai_client()`` (no ``governor=``): the
    fleet's adaptive concurrency limit, learnt from 429s only.
``fleet-budgets``
    ``governor.providers.async_openai_client(governor=gov)``: every request
    through the governed transport, which reserves the request's token
    estimate, reports the response's usage and rate-limit headers, and
    retries; no limit configured, the budgets are learnt from the headers.

Figures of each cell (scenario x strategy), all from what the provider
recorded, except the waits' starts and the Redis commands:

- *goodput*: what was served whole (tokens, or requests where requests or
  concurrency bind) over the ideal, what the provider could have served:
  over the whole run, the bucket's initial burst plus its refill; in steady
  state (after ``settle`` seconds), what the bucket still held then (a
  strategy slow to start leaves it full) plus its refill;
- *429 share*: throttling refusals over all answers, whole run and steady;
- *learned*: seconds from the start until the fleet's budget of the binding
  kind had the provider's limit (``status().budgets``, sampled);
- *admission wait* per size class, p50 and p99: from the agent wanting a
  call to the request that was served leaving for the provider (its arrival
  there, tagged with ``x-sim-call``), SDK retries and queueing included;
  and the worst agent's p99 over its class's median;
- *Redis round trips per request*: what the hosts' governor clients sent
  (a connection class that counts each command or pipeline written, so
  commands run inside the scripts do not count, nor the driver's status
  samples), over the requests the provider answered, and over the calls
  served.

Agents run on ``hosts`` host processes started here (each an asyncio loop
of its share of the agents, fed its job on stdin), or, with
``in_process``, as asyncio tasks of the driver's own loop (the provider's
loop too: figures are less faithful, fine for a smoke test). The provider
always runs in the driver's process.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import redis.asyncio
from redis.asyncio.connection import Connection

from governor import __version__
from governor.errors import ConfigError

from . import kit
from .kit import ms, num, pct, percentile
from .provider import CALL_TAG, LIMITED, RATE, REQUESTS, TOKENS, TOTAL, MockProvider, ProviderConfig, RunRecord

STRATEGIES: tuple[str, ...] = ("none", "fleet-concurrency", "fleet-budgets")
SCENARIO_NAMES: tuple[str, ...] = ("tokens-bind", "requests-bind", "concurrency-bind", "mixed", "uncontended")
#: what a scenario's goodput is counted in
UNITS = {"tokens": "tokens", "requests": "requests", "concurrency": "requests", "nothing": "requests"}
MODEL = "sim-1"
#: the provider's throttling refusals (429s for concurrency, requests, tokens)
THROTTLED = (LIMITED, RATE, TOKENS)
#: what a host process imports before its first job (bench/kit.py)
HOST_IMPORTS = ("openai", "governor.providers")

Echo = Callable[[str], None]


@dataclass(frozen=True)
class AgentClass:
    """A group of agents alike: how many, and the size of their requests (tokens)."""

    name: str
    agents: int
    #: mean and shape of the lognormal prompt size
    prompt_mean: float
    prompt_sigma: float = 0.5
    #: each request's max_tokens
    max_tokens: int = 512
    #: prompts are cut to this size, so the tail still fits the provider's bucket
    prompt_cap: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError(f"an agent class needs a name, got {self.name!r}")
        for name, low in (("agents", 1), ("max_tokens", 1), ("prompt_cap", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.prompt_mean, (int, float)) and self.prompt_mean >= 1):
            raise ConfigError(f"prompt_mean must be >= 1 token, got {self.prompt_mean!r}")
        if not (isinstance(self.prompt_sigma, (int, float)) and 0 <= self.prompt_sigma <= 3):
            raise ConfigError(f"prompt_sigma must be in [0, 3], got {self.prompt_sigma!r}")

    def prompt(self, rng: random.Random) -> int:
        """One prompt size: lognormal with this mean, at least 8 tokens, at most the cap."""
        sigma = self.prompt_sigma
        size = self.prompt_mean if sigma == 0 else rng.lognormvariate(math.log(self.prompt_mean) - sigma**2 / 2, sigma)
        return max(8, min(self.prompt_cap, round(size)))


@dataclass(frozen=True)
class BudgetScenario:
    """A provider account and the agents that share it."""

    name: str
    description: str
    #: what binds: "tokens", "requests", "concurrency" (the ideal follows) or "nothing" (no ideal)
    binds: str
    provider: ProviderConfig
    classes: tuple[AgentClass, ...]

    def __post_init__(self) -> None:
        if self.binds not in UNITS:
            raise ConfigError(f"binds must be one of {', '.join(UNITS)}, got {self.binds!r}")
        if not self.classes:
            raise ConfigError("a scenario needs at least one agent class")
        if self.binds in ("tokens", "requests") and self.provider.rate_limits().get(_kind(self.binds)) is None:
            raise ConfigError(f"scenario {self.name!r} binds on {self.binds} but the provider has no such limit")

    @property
    def agents(self) -> int:
        return sum(c.agents for c in self.classes)

    @property
    def unit(self) -> str:
        return UNITS[self.binds]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "binds": self.binds,
            "provider": self.provider.to_json(),
            "classes": [asdict(c) for c in self.classes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetScenario:
        return cls(
            name=data["name"],
            description=data["description"],
            binds=data["binds"],
            provider=ProviderConfig.from_json(data["provider"]),
            classes=tuple(AgentClass(**c) for c in data["classes"]),
        )


def _kind(binds: str) -> str:
    """The budget kind of what binds (``tokens`` -> ``tokens``, ``requests`` -> ``requests``)."""
    return TOTAL if binds == "tokens" else REQUESTS


def scenarios(seed: int | None = None) -> dict[str, BudgetScenario]:
    """The four scenarios, by name. Every one: a one-minute period, latency
    that grows with the completion, refused requests counted against the
    requests limit (as OpenAI's are)."""
    common: dict[str, Any] = {
        "rate_period": 60.0, "rpm_bucket": True, "rpm_counts_refused": True, "burst": 0.1,
        "latency_mean": 0.25, "latency_sigma": 0.3, "per_token_latency": 0.002, "reject_latency": 0.005,
        "completion_sigma": 0.8, "seed": seed,
    }  # fmt: skip
    small = AgentClass("small", 24, prompt_mean=1500, prompt_sigma=0.6, max_tokens=400, prompt_cap=20_000)
    return {
        "tokens-bind": BudgetScenario(
            "tokens-bind",
            "600k tokens/min (10k/s, a bucket of 60k); requests and concurrency far away",
            "tokens",
            ProviderConfig(limit=256, rpm=60_000, tpm=600_000, completion_mean=150, **common),
            (small,),
        ),
        "requests-bind": BudgetScenario(
            "requests-bind",
            "600 requests/min (10/s, a bucket of 60); small prompts",
            "requests",
            ProviderConfig(limit=256, rpm=600, tpm=60_000_000, completion_mean=50, **common),
            (AgentClass("small", 24, prompt_mean=200, prompt_sigma=0.5, max_tokens=100),),
        ),
        "concurrency-bind": BudgetScenario(
            "concurrency-bind",
            "a hidden concurrency limit of 8; rate limits announced but never reached",
            "concurrency",
            ProviderConfig(limit=8, rpm=60_000, tpm=60_000_000, completion_mean=100, **common),
            (AgentClass("small", 24, prompt_mean=500, prompt_sigma=0.5, max_tokens=300),),
        ),
        "uncontended": BudgetScenario(
            "uncontended",
            "4 agents, every limit far away: what a call costs in Redis round trips when nobody waits",
            "nothing",
            ProviderConfig(limit=256, rpm=60_000, tpm=60_000_000, completion_mean=20, **common),
            (AgentClass("small", 4, prompt_mean=200, prompt_sigma=0.5, max_tokens=50),),
        ),
        "mixed": BudgetScenario(
            "mixed",
            "tokens bind (600k/min); 20 agents with ~1k-token prompts, 4 with ~20k-token prompts",
            "tokens",
            ProviderConfig(limit=256, rpm=60_000, tpm=600_000, completion_mean=150, **common),
            (
                AgentClass("small", 20, prompt_mean=1000, prompt_sigma=0.6, max_tokens=400, prompt_cap=20_000),
                AgentClass("huge", 4, prompt_mean=20_000, prompt_sigma=0.4, max_tokens=1000, prompt_cap=40_000),
            ),
        ),
    }


@dataclass(frozen=True)
class Settings:
    """How a benchmark run is run (times in seconds)."""

    #: length of each cell
    seconds: float = 15.0
    #: seconds at the start left out of steady state
    settle: float = 5.0
    #: host processes (ignored with in_process)
    hosts: int = 2
    in_process: bool = False
    #: the SDK's own retries of the none strategy
    sdk_retries: int = 2
    #: the governors' ceiling and window
    max_capacity: int = 64
    window: float = 2.0
    #: status samples of the fleet's budgets
    sample_interval: float = 0.1
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, (int, float)) and 1 <= self.seconds <= 600):
            raise ConfigError(f"seconds must be in [1, 600], got {self.seconds!r}")
        if not (isinstance(self.settle, (int, float)) and 0 <= self.settle < self.seconds):
            raise ConfigError(f"settle must be >= 0 and below seconds, got {self.settle!r}")
        for name, low in (("hosts", 1), ("sdk_retries", 0), ("max_capacity", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.window, (int, float)) and self.window > 0):
            raise ConfigError(f"window must be > 0 seconds, got {self.window!r}")
        if not (isinstance(self.sample_interval, (int, float)) and 0.01 <= self.sample_interval <= 5):
            raise ConfigError(f"sample_interval must be in [0.01, 5] seconds, got {self.sample_interval!r}")


def governor_config(settings: Settings) -> Any:
    """The fleet strategies' GovernorConfig: no budget configured (they are learnt)."""
    from governor.config import GovernorConfig

    return GovernorConfig(
        max_capacity=settings.max_capacity,
        window=settings.window,
        lease_ttl=30.0,
        poll=0.5,
        queue_ttl=5.0,
        restart_hold=False,  # every cell's governor is a new name: nobody held its leases before
    )


def missing_strategy(strategy: str) -> str | None:
    """Why a strategy cannot run in this version (None: it can)."""
    if strategy not in STRATEGIES:
        return f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}"
    if strategy != "fleet-budgets":
        return None
    import importlib.util
    import inspect

    if importlib.util.find_spec("governor.transport") is None:
        return "fleet-budgets needs governor.transport (the governed transport), which this version lacks"
    from governor import providers

    if "governor" not in inspect.signature(providers.async_openai_client).parameters:
        return "fleet-budgets needs governor.providers.async_openai_client(governor=...)"
    return None


# -- a host: its agents ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostJob:
    """What one host runs for one cell (plain JSON, to travel to a host process)."""

    scenario: dict[str, Any]
    strategy: str
    host: int
    #: this host's agents: (class name, agent number within its class)
    agents: list[tuple[str, int]]
    provider_url: str
    redis_url: str | None
    governor: str | None
    start_at: float
    deadline: float
    settings: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostJob:
        return cls(**kit.agents_from_json(data))


@dataclass
class HostResult(kit.HostErrors):
    """What one host's agents did: one row per call (served or cut by the run's end)."""

    host: int
    #: (tag, class, agent, wanted at (Unix), done at (Unix), served)
    calls: list[tuple[str, str, int, float, float, bool]] = field(default_factory=list)
    #: calls the SDK or the transport gave up on as rate limited (made again at once)
    gave_up: int = 0
    #: what the governor's client sent Redis: commands and pipelines, each one round trip
    round_trips: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostResult:
        values = dict(data)
        values["calls"] = [tuple(c) for c in values["calls"]]
        return cls(**values)


class CountingConnection(Connection):
    """A redis.asyncio connection that counts what it sends: one command, or one
    pipeline, per round trip (the governor's own pool keeps this class)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def counting_client(url: str) -> Any:
    """A ``redis.asyncio`` client whose round trips :class:`CountingConnection` counts."""
    return redis.asyncio.Redis.from_url(url, connection_class=CountingConnection)


def _messages(prompt: int) -> list[dict[str, str]]:
    """One user message the provider counts as ``prompt`` tokens (``ceil(chars / 4) + 4``)."""
    return [{"role": "user", "content": "x" * (4 * max(1, prompt - 4))}]


async def run_host(job: HostJob, redis_client: Any = None) -> HostResult:
    """Run one host's agents from ``start_at`` until ``deadline``; ``redis_client``
    (a ``redis.asyncio`` client, closed here) is the governor's, a
    :func:`counting_client` of ``redis_url`` when not given."""
    import openai

    from governor import AsyncGovernor
    from governor.config import RetryPolicy
    from governor.errors import AcquireTimeout
    from governor.providers import async_openai_client

    scenario = BudgetScenario.from_json(job.scenario)
    settings = Settings(**job.settings)
    classes = {c.name: c for c in scenario.classes}
    result = HostResult(host=job.host)
    base_url = job.provider_url.rstrip("/") + "/v1"
    governor = None
    if job.governor is not None:
        if redis_client is None:
            assert job.redis_url is not None
            redis_client = counting_client(job.redis_url)
        governor = AsyncGovernor(redis_client, job.governor, governor_config(settings))
    retry = RetryPolicy(max_attempts=1_000_000, deadline=job.deadline - time.time() + 5.0)
    if job.strategy == "none":
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim", max_retries=settings.sdk_retries)
    elif job.strategy == "fleet-concurrency":
        client = async_openai_client(base_url=base_url, api_key="sk-sim")
    else:
        client = async_openai_client(governor=governor, retry=retry, holder=f"host-{job.host}", base_url=base_url,
                                     api_key="sk-sim")  # fmt: skip

    async def call_once(cls: AgentClass, prompt: int, tag: str, left: float) -> None:
        create = client.chat.completions.create
        kwargs: dict[str, Any] = {
            "model": MODEL, "messages": _messages(prompt), "max_tokens": cls.max_tokens,
            "extra_headers": {CALL_TAG: tag},
        }  # fmt: skip
        if job.strategy == "fleet-concurrency":
            assert governor is not None
            policy = RetryPolicy(max_attempts=1_000_000, deadline=left)
            await governor.call(create, retry=policy, timeout=left, holder=f"host-{job.host}", **kwargs)
        else:
            await asyncio.wait_for(create(**kwargs), left)

    async def agent(cls: AgentClass, number: int) -> None:
        rng = random.Random(f"{settings.seed}-{cls.name}-{number}" if settings.seed is not None else None)
        seq = 0
        while time.time() < job.deadline:
            prompt = cls.prompt(rng)
            tag = f"{cls.name}/{number}/{seq}"
            seq += 1
            wanted = time.time()
            served = False
            while not served:
                left = job.deadline - time.time()
                if left <= 0:
                    break
                try:
                    await call_once(cls, prompt, tag, left)
                    served = True
                except (asyncio.TimeoutError, AcquireTimeout):
                    break  # the run's end came first
                except openai.RateLimitError:
                    result.gave_up += 1  # retries ran out: make the call again
                except openai.APIError as error:
                    result.note(error)
                    await asyncio.sleep(0.05)
            result.calls.append((tag, cls.name, number, wanted, time.time(), served))

    sent = CountingConnection.sent
    try:
        await asyncio.sleep(max(0.0, job.start_at - time.time()))
        tasks = [asyncio.create_task(agent(classes[name], number)) for name, number in job.agents]
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, job.deadline - time.time()) + 2.0)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        for task in tasks:
            error = task.exception() if task.done() and not task.cancelled() else None
            if error is not None:
                result.note(error)
    finally:
        await client.close()
        if governor is not None:
            await governor.aclose()
            await redis_client.aclose()
        result.round_trips = CountingConnection.sent - sent
    return result


# -- the driver -----------------------------------------------------------------------------------


async def run_budgets(
    chosen: Sequence[BudgetScenario],
    strategies: Sequence[str],
    settings: Settings,
    redis_url: str,
    echo: Echo | None = None,
) -> dict[str, Any]:
    """Run every strategy on every scenario in turn; returns the figures (JSON-able)."""
    import redis

    for strategy in strategies:
        why = missing_strategy(strategy)
        if why is not None:
            raise ConfigError(why)
    say = echo or (lambda _: None)
    run_id = uuid.uuid4().hex[:8]
    provider = MockProvider(chosen[0].provider)
    url = await provider.start("127.0.0.1", 0)
    hosts = None if settings.in_process else kit.HostPool(__name__, HostResult.from_json)
    sync_client = redis.Redis.from_url(redis_url)
    client = redis.asyncio.Redis.from_url(redis_url)
    cells: dict[str, dict[str, Any]] = {}
    try:
        if hosts is not None:
            await hosts.start(settings.hosts)
        for scenario in chosen:
            cells[scenario.name] = {}
            for strategy in strategies:
                say(f"{scenario.name} / {strategy}: {scenario.agents} agents, {settings.seconds:g} s ...")
                cell = await _run_cell(scenario, strategy, settings, provider, url, hosts, redis_url, client,
                                       f"budgets-{run_id}")  # fmt: skip
                cells[scenario.name][strategy] = cell
                say(f"  {summary(scenario, cell)}")
    finally:
        if hosts is not None:
            await hosts.stop()
        await provider.stop()
        await client.aclose()
        server = sync_client.info("server").get("redis_version")
        sync_client.close()
    return {
        "settings": asdict(settings),
        "strategies": list(strategies),
        "scenarios": {s.name: s.to_json() for s in chosen},
        "cells": cells,
        "environment": {
            "fleet_governor": __version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "redis_version": server,
            "hosts": "asyncio tasks of the driver's process" if settings.in_process
            else f"{settings.hosts} host processes on this machine",
            "provider": "in the driver's process",
        },
    }  # fmt: skip


async def _run_cell(
    scenario: BudgetScenario,
    strategy: str,
    settings: Settings,
    provider: MockProvider,
    url: str,
    hosts: kit.HostPool[HostResult] | None,
    redis_url: str,
    client: Any,
    prefix: str,
) -> dict[str, Any]:
    from governor import AsyncGovernor
    from governor.errors import GovernorError

    name = f"{prefix}-{scenario.name}-{strategy}" if strategy != "none" else None
    watched = None
    if name is not None:
        watched = AsyncGovernor(client, name, governor_config(settings))
        await watched.configure()
    count = 1 if settings.in_process else settings.hosts
    everyone = [(c.name, i) for c in scenario.classes for i in range(c.agents)]
    lead = 0.3 if settings.in_process else 1.0
    start_at = time.time() + lead
    deadline = start_at + settings.seconds
    provider.reset(replace(scenario.provider, seed=settings.seed), start_at=start_at)
    jobs = [
        HostJob(
            scenario.to_json(),
            strategy,
            h,
            everyone[h::count],
            url,
            redis_url,
            name,
            start_at,
            deadline,
            asdict(settings),
        )
        for h in range(count)
    ]
    if hosts is None:
        running = asyncio.ensure_future(
            asyncio.gather(*(run_host(job, counting_client(redis_url) if name else None) for job in jobs))
        )
    else:
        running = asyncio.ensure_future(hosts.run(jobs, settings.seconds + 60.0))
    samples: list[tuple[float, list[list[Any]]]] = []
    try:
        while not running.done():
            await asyncio.wait([running], timeout=settings.sample_interval)
            t = time.time() - start_at
            if watched is None or t < 0 or running.done():
                continue
            try:
                status = await watched.status(create=False)
            except GovernorError:
                continue
            samples.append((t, [[b.kind, b.limit, b.burst, round(b.level, 1), b.reserved, b.source]
                                for b in status.budgets]))  # fmt: skip
        results: list[HostResult] = list(running.result())
    finally:
        if not running.done():
            running.cancel()
    if watched is not None:
        await watched.aclose()
        await client.delete(*watched.keys.keys)
    record = RunRecord.from_json(provider.snapshot()["record"])
    return analyse_cell(scenario, strategy, settings, record, results, samples)


# -- the figures ----------------------------------------------------------------------------------


def analyse_cell(
    scenario: BudgetScenario,
    strategy: str,
    settings: Settings,
    record: RunRecord,
    hosts: Sequence[HostResult],
    samples: Sequence[tuple[float, Sequence[Sequence[Any]]]] = (),
) -> dict[str, Any]:
    """The figures of one cell from what the provider recorded, the hosts' calls
    and round trips, and the fleet's budget samples."""
    config = scenario.provider
    end, settle = settings.seconds, settings.settle
    ok_spans = [(a, b) for a, b, kind in record.responses if kind == "ok" and 0 <= b <= end]
    mean_service = statistics.fmean(b - a for a, b in ok_spans) if ok_spans else None
    rate: float | None = None
    stock_at_start = stock_at_settle = 0.0  # what the bucket held: the ideal may spend it too
    if scenario.binds == "concurrency":
        rate = config.limit / mean_service if mean_service else None
    elif scenario.binds != "nothing":
        kind = _kind(scenario.binds)
        rate = config.refill_rate(kind)
        stock_at_start = stock_at_settle = config.capacity(kind) or 0.0
        column = 1 + record.level_kinds.index(kind) if kind in record.level_kinds else None
        later = [row for row in record.levels if row[0] >= settle]
        if column is not None and later:
            stock_at_settle = max(0.0, later[0][column])

    def served(a: float, b: float) -> float:
        if scenario.unit == "tokens":
            return float(record.tokens_between(a, b))
        return float(sum(1 for t, _, _ in record.served if a <= t < b))

    ideal_whole = None if rate is None else stock_at_start + rate * end
    ideal_steady = None if rate is None else stock_at_settle + rate * (end - settle)
    got_whole, got_steady = served(0.0, end), served(settle, end)
    answers = [(b, kind) for _, b, kind in record.responses if 0 <= b <= end]
    throttled = sum(1 for _, kind in answers if kind in THROTTLED)
    steady = [kind for b, kind in answers if b >= settle]
    steady_throttled = sum(1 for kind in steady if kind in THROTTLED)

    # Admission waits: from wanting the call to its served request leaving (arriving at the provider).
    arrivals = {tag: record.started_wall + t for tag, t in record.tagged}
    waits: dict[str, list[float]] = {}
    per_agent: dict[tuple[str, int], list[float]] = {}
    for host in hosts:
        for tag, cls, agent, wanted, _, ok in host.calls:
            if ok and tag in arrivals:
                wait = max(0.0, arrivals[tag] - wanted)
                waits.setdefault(cls, []).append(wait)
                per_agent.setdefault((cls, agent), []).append(wait)
    classes: dict[str, dict[str, Any]] = {}
    for cls in (c.name for c in scenario.classes):
        values = waits.get(cls, [])
        median = percentile(values, 50)
        worst = None
        if median:
            p99s = [percentile(v, 99) or 0.0 for (c, _), v in per_agent.items() if c == cls]
            worst = max(p99s) / median if p99s else None
        served_calls = sum(1 for h in hosts for c in h.calls if c[1] == cls and c[5])
        classes[cls] = {"calls": served_calls, "wait_p50": median, "wait_p99": percentile(values, 99),
                        "worst_agent_p99_over_p50": worst}  # fmt: skip

    learned = None
    if scenario.binds in ("tokens", "requests"):
        limit = config.rate_limits()[_kind(scenario.binds)]
        for t, budgets in samples:
            if any(b[0] == _kind(scenario.binds) and int(b[1]) == limit and b[5] == "header" for b in budgets):
                learned = t
                break
    steps = max(1, math.ceil(end))
    if scenario.unit == "tokens":
        series = [float(x) for x in record.throughput(1.0, TOTAL, end=float(steps))]
    else:
        series = [0.0] * steps
        for t, _, _ in record.served:
            if 0 <= t < steps:
                series[math.floor(t)] += 1
    requests = len(answers)
    trips = sum(h.round_trips for h in hosts)
    calls = sum(1 for h in hosts for c in h.calls if c[5])
    return {
        "strategy": strategy,
        "unit": scenario.unit,
        "ideal_rate": rate,
        "goodput": None if not ideal_whole else got_whole / ideal_whole,
        "steady_goodput": None if not ideal_steady else got_steady / ideal_steady,
        "served": got_whole,
        "share_429": throttled / requests if requests else None,
        "steady_share_429": steady_throttled / len(steady) if steady else None,
        "answers": requests,
        "accepted": record.accepted,
        "refused": dict(record.refused),
        "learned_at": learned,
        "classes": classes,
        "redis_round_trips": trips,
        "redis_per_request": trips / requests if requests else None,
        "redis_per_call": trips / calls if calls else None,
        "mean_service": mean_service,
        "gave_up": sum(h.gave_up for h in hosts),
        "errors": sum(h.errors for h in hosts),
        "error_samples": [s for h in hosts for s in h.error_samples][:5],
        "throughput": series,
        "budgets": [[round(t, 3), b] for t, b in samples[:: max(1, len(samples) // 30)]],
    }


# -- outputs --------------------------------------------------------------------------------------


def summary(scenario: BudgetScenario, cell: Mapping[str, Any]) -> str:
    """One line of a cell's main figures."""
    learned = "-" if cell["learned_at"] is None else f"{cell['learned_at']:.1f} s"
    return (
        f"goodput {num(cell['goodput'])} (steady {num(cell['steady_goodput'])}), "
        f"429s {pct(cell['share_429'])} (steady {pct(cell['steady_share_429'])}), "
        f"learned {learned}, Redis {num(cell['redis_per_request'], 2)} round trips/request"
    )


def markdown(result: Mapping[str, Any], commands: Sequence[str] = ()) -> str:
    """The report: a table per scenario, what the columns mean, and how to run it again."""
    settings = result["settings"]
    env = result["environment"]
    lines = [
        "# Budgets benchmark",
        "",
        "A fleet of agents against a provider account limited in requests and tokens per minute "
        "(the mock provider, `bench.provider`), with no limit configured anywhere: "
        "each strategy in turn, the real `openai` SDK (async) in every agent. "
        "See `bench/budget_bench.py` for the scenarios and how each figure is measured.",
        "",
        f"Each cell ran {settings['seconds']:g} s ({settings['settle']:g} s left out of steady state), "
        f"agents on {env['hosts']}, the provider in the driver's process, Redis "
        f"{env.get('redis_version') or '?'}; {env['cpus']} CPUs, Python {env['python']}, "
        f"fleet-governor {env['fleet_governor']}.",
        "",
    ]
    if commands:
        lines += ["Reproduce:", "", "```", *commands, "```", ""]
        if len(commands) > 1:
            lines += ["(each scenario alone, with `--update`; all of them in one run: "
                      "`python -m bench budgets --out DIR`)", ""]  # fmt: skip
    verdicts = goals(result)
    if verdicts:
        lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
        lines += [f"| {goal} | {measured} | {'-' if met is None else ('yes' if met else 'no')} |"
                  for goal, measured, met in verdicts]  # fmt: skip
        lines.append("")
    for name, cells in result["cells"].items():
        scenario = BudgetScenario.from_json(result["scenarios"][name])
        lines += [f"## {name}", "", scenario.description + ".", ""]
        names = [c.name for c in scenario.classes]
        head = ["strategy", f"goodput ({scenario.unit})", "steady", "429s", "steady 429s", "learned (s)"]
        for cls in names:
            head += [f"{cls} calls", f"{cls} wait p50 / p99 (ms)", f"{cls} worst p99 / p50"]
        head += ["Redis round trips / request", "/ call served"]
        body = []
        for strategy, cell in cells.items():
            row = [strategy, num(cell["goodput"]), num(cell["steady_goodput"]), pct(cell["share_429"]),
                   pct(cell["steady_share_429"]), num(cell["learned_at"], 1)]  # fmt: skip
            for cls in names:
                c = cell["classes"].get(cls, {})
                row += [str(c.get("calls", "-")), f"{ms(c.get('wait_p50'), 0)} / {ms(c.get('wait_p99'), 0)}",
                        num(c.get("worst_agent_p99_over_p50"), 1)]  # fmt: skip
            row += [num(cell["redis_per_request"], 2), num(cell["redis_per_call"], 2)]
            body.append(row)
        lines += [*kit.markdown_table(head, body), ""]
    lines += [
        "Columns: *goodput* is what the provider served whole (tokens, or requests where requests or "
        "concurrency bind) over the ideal, what it could have served: the bucket's initial burst plus its "
        "refill over the run (the hidden limit over the mean service time where concurrency binds); *steady* "
        "leaves out the first seconds (the ideal: what the bucket still held then plus its refill; calls "
        "admitted before that and served after it can put it a little above 1). "
        "*429s*: throttling refusals over all answers. "
        "*learned*: seconds until `status().budgets` had the provider's limit from its headers. "
        "*wait*: from an agent wanting a call to the request that was served leaving for the provider "
        "(retries and queueing included), per size class; *worst p99 / p50*: the worst agent's p99 over "
        "its class's median. *Redis round trips*: commands and pipelines the hosts' governor clients "
        "sent (the scripts' own commands and the driver's status samples not counted), over the "
        "provider's answers and over the calls served.",
        "",
    ]
    return "\n".join(lines)


def goals(result: Mapping[str, Any]) -> list[tuple[str, str, bool | None]]:
    """The benchmark's goals, each with what was measured and whether it was met
    (None: a cell it needs did not run)."""
    cells: Mapping[str, Mapping[str, Any]] = result["cells"]
    out: list[tuple[str, str, bool | None]] = []

    def get(scenario: str, strategy: str) -> Mapping[str, Any] | None:
        return cells.get(scenario, {}).get(strategy)

    for scenario in ("tokens-bind", "requests-bind"):
        cell = get(scenario, "fleet-budgets")
        if cell is None:
            continue
        steady, share, learned = cell["steady_goodput"], cell["steady_share_429"], cell["learned_at"]
        out.append((
            f"{scenario}: fleet-budgets steady goodput >= 0.95, steady 429s <= 1 %, limit learnt within 2 s",
            f"{num(steady)}, {pct(share)}, {num(learned, 1)} s",
            steady is not None and steady >= 0.95 and share is not None and share <= 0.01
            and learned is not None and learned <= 2.0,
        ))  # fmt: skip
        others = {k: v for k, v in cells[scenario].items() if k != "fleet-budgets"}
        if others:
            ahead = all(
                (cell["goodput"] or 0) > (o["goodput"] or 0) and (cell["share_429"] or 0) < (o["share_429"] or 0)
                for o in others.values()
            )
            out.append((
                f"{scenario}: fleet-budgets ahead of every other strategy on goodput and 429s, whole run",
                ", ".join(f"{k} {num(v['goodput'])} / {pct(v['share_429'])}" for k, v in cells[scenario].items()),
                ahead,
            ))  # fmt: skip
    budgets, today = get("concurrency-bind", "fleet-budgets"), get("concurrency-bind", "fleet-concurrency")
    if budgets is not None and today is not None:
        out.append((
            "concurrency-bind: fleet-budgets no worse than fleet-concurrency (steady goodput within 2 %, 429s "
            "no higher)",
            f"{num(budgets['steady_goodput'])} vs {num(today['steady_goodput'])}, "
            f"{pct(budgets['share_429'])} vs {pct(today['share_429'])}",
            (budgets["steady_goodput"] or 0) >= 0.98 * (today["steady_goodput"] or 0)
            and (budgets["share_429"] or 0) <= (today["share_429"] or 0),
        ))  # fmt: skip
    mixed = get("mixed", "fleet-budgets")
    if mixed is not None:
        worst = {k: v["worst_agent_p99_over_p50"] for k, v in mixed["classes"].items()}
        out.append((
            "mixed: fleet-budgets, every agent's p99 admission wait under 3x its size class's median",
            ", ".join(f"{k} {num(v, 1)}x" for k, v in worst.items()),
            all(v is not None and v < 3 for v in worst.values()),
        ))  # fmt: skip
    budgets, today = get("uncontended", "fleet-budgets"), get("uncontended", "fleet-concurrency")
    if budgets is not None and today is not None:
        out.append((
            "uncontended: the transport at most one Redis round trip per request beyond call()",
            f"{num(budgets['redis_per_request'], 2)} vs {num(today['redis_per_request'], 2)}",
            (budgets["redis_per_request"] or 0) <= (today["redis_per_request"] or 0) + 1,
        ))  # fmt: skip
    return out


def table(result: Mapping[str, Any]) -> str:
    """The terminal table: one line per cell."""
    lines = [f"{'scenario':<17}{'strategy':<19}{'goodput':>8}{'steady':>8}{'429s':>8}{'learned':>9}{'Redis/req':>10}"]
    for name, cells in result["cells"].items():
        for strategy, cell in cells.items():
            learned = "-" if cell["learned_at"] is None else f"{cell['learned_at']:.1f} s"
            lines.append(
                f"{name:<17}{strategy:<19}{num(cell['goodput']):>8}{num(cell['steady_goodput']):>8}"
                f"{pct(cell['share_429']):>8}{learned:>9}{num(cell['redis_per_request'], 2):>10}"
            )
    return "\n".join(lines)


def write_chart(result: Mapping[str, Any], path: Path) -> None:
    """A PNG: per scenario, what each strategy served per second against the ideal rate."""
    names = list(result["cells"])
    with kit.chart(path, 1, len(names), (4.4 * len(names), 3.6)) as axes:
        for ax, name in zip(axes[0], names, strict=True):
            cells = result["cells"][name]
            unit = "tokens"
            for strategy, cell in cells.items():
                unit = cell["unit"]
                series = cell["throughput"]
                ax.plot([i + 0.5 for i in range(len(series))], series, lw=1.2, label=strategy)
            rates = [c["ideal_rate"] for c in cells.values() if c["ideal_rate"]]
            if rates:
                ax.axhline(statistics.fmean(rates), color="black", ls="--", lw=0.9, label="ideal")
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("seconds")
            ax.set_ylabel(f"{unit} served / s")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)


def merge(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new``'s cells over ``old``'s (scenarios run again replace theirs; the others stay)."""
    out: dict[str, Any] = json.loads(json.dumps(old))
    out["settings"], out["environment"] = new["settings"], new["environment"]
    out["strategies"] = list(dict.fromkeys([*old.get("strategies", []), *new["strategies"]]))
    for name, cells in new["cells"].items():
        out.setdefault("cells", {})[name] = cells
        out.setdefault("scenarios", {})[name] = new["scenarios"][name]
    out["commands"] = {**old.get("commands", {}), **new.get("commands", {})}
    return out


__all__ = [
    "SCENARIO_NAMES",
    "STRATEGIES",
    "AgentClass",
    "BudgetScenario",
    "HostJob",
    "HostResult",
    "Settings",
    "analyse_cell",
    "goals",
    "markdown",
    "merge",
    "missing_strategy",
    "run_budgets",
    "run_host",
    "scenarios",
    "summary",
    "table",
    "write_chart",
]
