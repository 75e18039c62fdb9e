"""The shares benchmark (``python -m bench shares``): priority classes
and tenants' weighted fair shares in the fleet's one queue, measured on real
governors at a saturated limit.

In every scenario ``agents`` agents share one governor with
``policy="fixed"`` and ``max_capacity=capacity``. They run as asyncio tasks
on ``hosts`` host processes started here (one ``AsyncGovernor`` each, as a
process of a fleet has), or, with ``in_process``, on as many governor
objects in the driver's own loop. Each agent acquires a lease, holds it for
a lognormal time (``hold_mean``, ``hold_sigma``), releases it and asks again
at once, so the limit stays saturated and a queue always waits. No provider
is called: what is measured is the order in which the queue admits, and a
timed hold stands for the call the lease would cover.

Scenarios (:func:`scenarios`):

``interactive``
    1 agent with ``priority="interactive"`` among ``agents - 1`` sub-agents
    of the default class, the limit keeping ``RESERVE`` slot for the
    interactive class (``GovernorConfig.reserve``: no queue can do better
    than the first slot freeing, several hand-overs at p99, without one).
    Goals: the interactive agent's p99 admission wait
    at most 2 hand-overs, and so its p99 wait beyond the first slot freeing
    after it asked (what the queue and the client add to an ideal queue's
    wait); the fleet kept at the limit (utilisation >= 0.97).
``tenants``
    Two tenants, ``tenant_weights={"a": 3, "b": 1}``, half the agents each.
    Goal: over every ``share_interval`` (10 s), each tenant's share of the
    in-flight time within 5 points of 75 / 25. Then every agent of tenant a
    stops at once (its waiters leave the queue, its holders release):
    goal, tenant b holds the whole limit within one hand-over of a's last
    lease ending (the time from the stop itself is printed beside it, and
    how many of a's agents ``acquire()`` handed a lease although their task
    had just been cancelled: an agent also stops at its next request).
``aging``
    A flood of ``flood`` interactive agents and ``agents - flood - batch``
    default ones, with ``batch`` agents of the lowest class, ``batch``;
    the config's ``aging`` (2 s). Without aging a batch waiter would never be
    admitted; goal: no batch wait longer than the aging time plus one lease's
    (mean) hold.

Each host makes one call of its governor object before the start (the
library loaded, the grants' channel listened to), so no first wait counts
an object's warm-up. Figures (times from the agents' own clocks: the host
processes run on one machine and share it):

- *hand-over*: the mean hold over the capacity, the mean time between two
  slots freeing at saturation; waits are given in ms and in hand-overs;
- *admission wait*: from calling ``acquire()`` to the lease in hand, the
  grant's pub/sub wake-up included;
- *grants to others while waiting* (agents of the ``interactive`` and
  ``batch`` groups only): the fence of the lease granted, minus the
  governor's fence counter read just before asking, minus one, that is
  the leases granted to anyone else between asking and being granted: 0 in
  a perfect priority queue (a grant racing with the request counts too);
- *first slot freeing*: from asking to the next release by any agent, the
  wait of an ideal queue that hands the very next free slot to the highest
  class at no cost: a floor no queue beats (with holds that end at random
  phases it is close to exponential, its p99 several hand-overs);
- *utilisation*: the time leases spent in the agents' hands over capacity x
  time (a slot between its grant in Redis and its holder's wake-up counts as
  idle), and the idle time per grant (from a release to the next holder's
  wake-up, on average); beside it Redis's own in-flight count, sampled by
  the driver;
- *shares*: each tenant's in-flight time (leases in hand) over each
  interval, over all tenants';
- *switch*: the time from tenant a's stop, and from a's last lease leaving
  Redis, until tenant b holds every lease in Redis (the driver polls the
  leases and their holder records around the stop, as often as Redis
  answers); beside it, when b's leases in the agents' hands first reach the
  capacity after a's last release;
- *batch waits*: max and p50, against the aging time plus the mean hold;
  and how many waiters the decision log says were aged (``age`` entries).
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from governor import __version__
from governor.errors import ConfigError

from . import kit
from .kit import goal_lines, ms, num, pct, percentile, quantiles

SCENARIO_NAMES: tuple[str, ...] = ("interactive", "tenants", "aging")
#: interactive: the slots of the limit kept for the interactive class (GovernorConfig.reserve)
RESERVE = 1
#: what a host process imports before its first job (bench/kit.py)
HOST_IMPORTS = ("redis.asyncio", "governor")
#: goal thresholds: the interactive agent's p99 wait (hand-overs); fleet utilisation;
#: a tenant's share off its weight's (points); b at the whole limit after a stops (hand-overs)
INTERACTIVE_P99, UTILISATION, SHARE_POINTS, SWITCH_HANDOVERS = 2.0, 0.97, 0.05, 1.0
#: tenant weights of the tenants scenario
WEIGHTS: tuple[tuple[str, int], ...] = (("a", 3), ("b", 1))

Echo = Callable[[str], None]
#: a lease as the hosts record it: group, agent number, wanted, granted, released
#: (seconds), fence, the fence counter before asking (None: not read), stopped
Lease = tuple[str, int, float, float, float, int, "int | None", bool]
Interval = tuple[float, float]


@dataclass(frozen=True)
class Group:
    """Agents alike: how many, their class and tenant, and whether each of
    their requests reads the fence counter first (grants to others while waiting)."""

    name: str
    agents: int
    priority: str
    tenant: str | None = None
    measured: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError(f"an agent group needs a name, got {self.name!r}")
        if isinstance(self.agents, bool) or not isinstance(self.agents, int) or self.agents < 1:
            raise ConfigError(f"agents must be an integer >= 1, got {self.agents!r}")


@dataclass(frozen=True)
class ShareScenario:
    """The agents sharing one governor, and what its config says of them."""

    name: str
    description: str
    groups: tuple[Group, ...]
    tenant_weights: tuple[tuple[str, int], ...] = ()
    #: the config's aging (None: the config's default)
    aging: float | None = None
    #: a group every agent of which stops at the end of the measured part
    stop: str | None = None
    #: the config's reserve: slots only the highest class takes
    reserve: int = 0

    def __post_init__(self) -> None:
        if not self.groups:
            raise ConfigError("a scenario needs at least one agent group")
        if self.stop is not None and self.stop not in {g.name for g in self.groups}:
            raise ConfigError(f"scenario {self.name!r} stops group {self.stop!r}, which it does not have")

    @property
    def agents(self) -> int:
        return sum(g.agents for g in self.groups)

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    def length(self, settings: Settings) -> float:
        """Seconds from the agents' start to their deadline."""
        return settings.settle + settings.seconds + (settings.after_stop if self.stop else 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "groups": [asdict(g) for g in self.groups],
            "tenant_weights": [list(p) for p in self.tenant_weights],
            "aging": self.aging,
            "stop": self.stop,
            "reserve": self.reserve,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShareScenario:
        return cls(
            name=data["name"],
            description=data["description"],
            groups=tuple(Group(**g) for g in data["groups"]),
            tenant_weights=tuple((str(t), int(w)) for t, w in data["tenant_weights"]),
            aging=data["aging"],
            stop=data["stop"],
            reserve=int(data.get("reserve", 0)),
        )


@dataclass(frozen=True)
class Settings:
    """How a run is run (times in seconds)."""

    #: the measured part of each scenario (tenants: before a stops)
    seconds: float = 60.0
    #: seconds at the start left out of the figures (the queue fills)
    settle: float = 2.0
    agents: int = 128
    capacity: int = 16
    #: each hold: lognormal of this mean and shape
    hold_mean: float = 0.05
    hold_sigma: float = 0.5
    #: host processes (ignored with in_process: then as many governor objects)
    hosts: int = 4
    in_process: bool = False
    #: tenants: the intervals the shares are judged over, and how long b runs alone
    share_interval: float = 10.0
    after_stop: float = 3.0
    #: aging: the config's aging, and the agents of the interactive flood and of batch
    aging: float = 2.0
    flood: int = 8
    batch: int = 4
    #: Redis in-flight samples
    sample_interval: float = 0.1
    seed: int | None = None

    def __post_init__(self) -> None:
        for name, low, high in (("seconds", 0.5, 3600), ("settle", 0, 600), ("hold_mean", 0.001, 10),
                                ("hold_sigma", 0, 3), ("share_interval", 0.1, 3600), ("after_stop", 0.1, 600),
                                ("aging", 0.01, 3600), ("sample_interval", 0.01, 5)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ConfigError(f"{name} must be in [{low}, {high}], got {value!r}")
        for name, low in (("agents", 2), ("capacity", 1), ("hosts", 1), ("flood", 1), ("batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.flood + self.batch >= self.agents:
            raise ConfigError(f"flood + batch ({self.flood + self.batch}) must leave default agents of {self.agents}")


def scenarios(settings: Settings) -> dict[str, ShareScenario]:
    """The three scenarios, by name, sized by ``settings``."""
    n, half = settings.agents, settings.agents // 2
    default = n - settings.flood - settings.batch
    return {
        "interactive": ShareScenario(
            "interactive",
            f"1 interactive agent among {n - 1} default sub-agents, a fixed limit of {settings.capacity} "
            f"with a reserve of {RESERVE} for the interactive class",
            (Group("interactive", 1, "interactive", measured=True), Group("sub-agents", n - 1, "default")),
            reserve=min(RESERVE, settings.capacity - 1),
        ),
        "tenants": ShareScenario(
            "tenants",
            f"tenants a and b weighted 3:1, {half} and {n - half} agents, a fixed limit of {settings.capacity}; "
            f"every agent of a stops after {settings.settle + settings.seconds:g} s",
            (Group("a", half, "default", tenant="a"), Group("b", n - half, "default", tenant="b")),
            tenant_weights=WEIGHTS,
            stop="a",
        ),
        "aging": ShareScenario(
            "aging",
            f"{settings.flood} interactive and {default} default agents flooding a fixed limit of "
            f"{settings.capacity}; {settings.batch} batch agents; aging {settings.aging:g} s",
            (
                Group("interactive", settings.flood, "interactive"),
                Group("default", default, "default"),
                Group("batch", settings.batch, "batch", measured=True),
            ),
            aging=settings.aging,
        ),
    }


def config_values(scenario: ShareScenario, settings: Settings) -> dict[str, Any]:
    """The GovernorConfig of a scenario's governor, as keyword arguments (JSON-able)."""
    values: dict[str, Any] = {
        "max_capacity": settings.capacity, "policy": "fixed", "lease_ttl": 30.0, "poll": 0.5, "queue_ttl": 5.0,
        "restart_hold": False,  # every scenario's governor is a new name: nobody held its leases before
    }  # fmt: skip
    if scenario.tenant_weights:
        values["tenant_weights"] = dict(scenario.tenant_weights)
    if scenario.aging is not None:
        values["aging"] = scenario.aging
    if scenario.reserve:
        values["reserve"] = scenario.reserve
    return values


# -- a host: its agents ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostJob:
    """What one host runs for one scenario (plain JSON, to travel to a host process)."""

    scenario: dict[str, Any]
    host: int
    #: this host's agents: (group name, agent number within its group)
    agents: list[tuple[str, int]]
    redis_url: str
    governor: str
    config: dict[str, Any]
    start_at: float
    deadline: float
    #: when the scenario's stopped group stops (None: it does not)
    stop_at: float | None
    settings: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostJob:
        return cls(**kit.agents_from_json(data))


@dataclass
class HostResult(kit.HostErrors):
    """What one host's agents did: every lease they held (:data:`Lease`, absolute times)."""

    host: int
    leases: list[Lease] = field(default_factory=list)
    #: requests that ended without a lease (the run's end, or the stop, came first)
    unfinished: int = 0
    #: when this host stopped the stopped group (None: it did not)
    stopped_at: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostResult:
        values = dict(data)
        values["leases"] = [tuple(x) for x in values["leases"]]
        return cls(**values)


async def run_host(job: HostJob, redis_client: Any = None) -> HostResult:
    """Run one host's agents from ``start_at`` until ``deadline`` on one
    AsyncGovernor; ``redis_client`` (a ``redis.asyncio`` client, closed here)
    is the governor's, one of ``redis_url`` when not given."""
    import redis.asyncio

    from governor import AsyncGovernor
    from governor.config import GovernorConfig
    from governor.errors import AcquireTimeout

    scenario = ShareScenario.from_json(job.scenario)
    settings = Settings(**job.settings)
    result = HostResult(host=job.host)
    client = redis_client if redis_client is not None else redis.asyncio.Redis.from_url(job.redis_url)
    governor = AsyncGovernor(client, job.governor, GovernorConfig(**job.config))
    fences = redis.asyncio.Redis.from_url(job.redis_url)  # the fence counter's reads, beside the governor's pool
    sigma = settings.hold_sigma
    mu = math.log(settings.hold_mean) - sigma**2 / 2

    async def agent(group: Group, number: int) -> None:
        rng = random.Random(f"{settings.seed}-{group.name}-{number}" if settings.seed is not None else None)
        holder = f"{group.name}-{number}"
        while group.name not in stopping:  # a cancellation lost in acquire() still stops it
            before = None
            if group.measured:
                raw = await fences.hget(governor.keys.state, "fence")
                before = int(raw) if raw is not None else 0
            wanted = time.time()
            left = job.deadline - wanted
            if left <= 0:
                return
            try:
                lease = await governor.acquire(timeout=left, holder=holder, priority=group.priority,
                                               tenant=group.tenant)  # fmt: skip
            except AcquireTimeout:
                result.unfinished += 1  # the run's end came first
                return
            except asyncio.CancelledError:
                result.unfinished += 1  # stopped while waiting
                raise
            granted = time.time()
            hold = settings.hold_mean if sigma == 0 else rng.lognormvariate(mu, sigma)
            stopped = False
            try:
                await asyncio.sleep(hold)
            except asyncio.CancelledError:
                stopped = True
                raise
            finally:
                released = time.time()
                result.leases.append((group.name, number, wanted, granted, released, lease.fence, before, stopped))
                await lease.release()

    async def stop(tasks: Sequence[asyncio.Task[None]]) -> None:
        assert job.stop_at is not None
        await asyncio.sleep(max(0.0, job.stop_at - time.time()))
        result.stopped_at = time.time()
        stopping.add(scenario.stop or "")
        for task in tasks:
            task.cancel()

    groups = {g.name: g for g in scenario.groups}
    stopping: set[str] = set()
    try:
        # Warm up before the start: the library loaded, the config learnt, the grants' channel
        # listened to, so no agent's first wait includes this object's first call.
        async with governor.acquire(timeout=max(1.0, job.start_at - time.time())):
            pass
        await asyncio.sleep(max(0.0, job.start_at - time.time()))
        tasks = {(name, number): asyncio.create_task(agent(groups[name], number)) for name, number in job.agents}
        stopper = None
        if job.stop_at is not None and scenario.stop is not None:
            doomed = [task for (name, _), task in tasks.items() if name == scenario.stop]
            if doomed:
                stopper = asyncio.create_task(stop(doomed))
        grace = 5.0 + 20 * settings.hold_mean
        _, pending = await asyncio.wait(tasks.values(), timeout=max(0.0, job.deadline - time.time()) + grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        if stopper is not None and not stopper.done():
            stopper.cancel()
        for task in tasks.values():
            if task.done() and not task.cancelled():
                error = task.exception()
                if error is not None:
                    result.note(error)
    finally:
        await governor.aclose()
        await client.aclose()
        await fences.aclose()
    return result


# -- the driver -----------------------------------------------------------------------------------


async def run_shares(
    chosen: Sequence[ShareScenario],
    settings: Settings,
    redis_url: str,
    echo: Echo | None = None,
    keep_governors: bool = False,
) -> dict[str, Any]:
    """Run each scenario in turn on a governor of its own; returns the figures
    (JSON-able). ``keep_governors`` leaves each scenario's keys in Redis
    (their names in the result's ``governors``)."""
    import redis
    import redis.asyncio

    say = echo or (lambda _: None)
    run_id = uuid.uuid4().hex[:8]
    hosts = None if settings.in_process else kit.HostPool(__name__, HostResult.from_json)
    sync_client = redis.Redis.from_url(redis_url)
    client = redis.asyncio.Redis.from_url(redis_url)
    results: dict[str, dict[str, Any]] = {}
    try:
        if hosts is not None:
            await hosts.start(settings.hosts)
        for scenario in chosen:
            say(f"{scenario.name}: {scenario.agents} agents, {scenario.length(settings):g} s ...")
            load = os.getloadavg()[0]
            figures = await _run_scenario(scenario, settings, hosts, redis_url, client, sync_client,
                                          f"shares-{run_id}", keep_governors)  # fmt: skip
            figures["load"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            results[scenario.name] = figures
            say(f"  {summary(scenario.name, figures)}")
    finally:
        if hosts is not None:
            await hosts.stop()
        await client.aclose()
        server = sync_client.info("server").get("redis_version")
        sync_client.close()
    return {
        "settings": asdict(settings),
        "scenarios": {s.name: s.to_json() for s in chosen},
        "results": results,
        "environment": {
            "fleet_governor": __version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "redis_version": server,
            "hosts": f"{settings.hosts} governor objects in the driver's process" if settings.in_process
            else f"{settings.hosts} host processes on this machine, one governor object each",
        },
    }  # fmt: skip


async def _run_scenario(
    scenario: ShareScenario,
    settings: Settings,
    hosts: kit.HostPool[HostResult] | None,
    redis_url: str,
    client: Any,
    sync_client: Any,
    prefix: str,
    keep: bool = False,
) -> dict[str, Any]:
    from governor import AsyncGovernor
    from governor.config import GovernorConfig
    from governor.errors import GovernorError
    from governor.views import read_events

    name = f"{prefix}-{scenario.name}"
    values = config_values(scenario, settings)
    watched = AsyncGovernor(client, name, GovernorConfig(**values))
    await watched.configure()  # the config stored before any agent asks
    everyone = [(g.name, i) for g in scenario.groups for i in range(g.agents)]
    lead = 0.5 if settings.in_process else 1.5
    start_at = time.time() + lead
    deadline = start_at + scenario.length(settings)
    stop_at = start_at + settings.settle + settings.seconds if scenario.stop else None
    jobs = [
        HostJob(scenario.to_json(), h, everyone[h :: settings.hosts], redis_url, name, values, start_at,
                deadline, stop_at, asdict(settings))
        for h in range(settings.hosts)
    ]  # fmt: skip
    if hosts is None:
        running = asyncio.ensure_future(asyncio.gather(*(run_host(job) for job in jobs)))
    else:
        running = asyncio.ensure_future(hosts.run(jobs, scenario.length(settings) + 90.0))
    samples: list[tuple[float, int]] = []
    polls: list[tuple[float, dict[str, int]]] = []
    poller = None
    if stop_at is not None:
        poller = asyncio.ensure_future(_poll_tenants(client, watched.keys, start_at, stop_at - 0.05,
                                                     stop_at + min(1.0, settings.after_stop), polls))  # fmt: skip
    try:
        while not running.done():
            await asyncio.wait([running], timeout=settings.sample_interval)
            t = time.time() - start_at
            if t < 0 or running.done():
                continue
            try:
                status = await watched.status(create=False)
            except GovernorError:
                continue
            samples.append((round(t, 3), status.in_flight))
        host_results: list[HostResult] = list(running.result())
    finally:
        if not running.done():
            running.cancel()
        if poller is not None:
            await poller
    aged = [(round(e.at - start_at, 3), int(e.get("waiters", "1") or 1), e.get("holder"))
            for e in read_events(sync_client, watched.keys, 1_000_000, ("age",))]  # fmt: skip
    await watched.aclose()
    if not keep:
        await client.delete(*watched.keys.keys)
    figures = analyse(scenario, settings, host_results, start_at, samples, sorted(aged), polls)
    figures["governor"], figures["started_at"] = name, start_at
    return figures


#: every lease's holder record in one atomic read: KEYS leases, holders
_LEASE_RECORDS = """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[2], unpack(ids))
"""


async def _poll_tenants(
    client: Any, keys: Any, start_at: float, begin: float, end: float, out: list[tuple[float, dict[str, int]]]
) -> None:
    """From ``begin`` to ``end`` (wall clock), as often as Redis answers: the
    leases in Redis per tenant (seconds from ``start_at``, counts), into ``out``."""
    from governor.protocol import HolderRecord

    await asyncio.sleep(max(0.0, begin - time.time()))
    while time.time() < end:
        raws = await client.eval(_LEASE_RECORDS, 2, keys.leases, keys.holders)
        t = time.time() - start_at
        counts: dict[str, int] = {}
        for raw in raws:
            record = HolderRecord.parse(None if raw is None else raw.decode())
            if record is not None:
                counts[record.tenant] = counts.get(record.tenant, 0) + 1
        out.append((round(t, 5), counts))
        await asyncio.sleep(0)


# -- the figures ----------------------------------------------------------------------------------


def redis_switch(
    polls: Sequence[tuple[float, Mapping[str, int]]], stop: float, gone: str, capacity: int
) -> tuple[float | None, float | None]:
    """From polls of the leases in Redis (time, leases per tenant): the first
    poll at or after ``stop`` with no lease of tenant ``gone``, and the first
    at or after that in which the other tenants hold ``capacity`` (None: not seen)."""
    left = full = None
    for t, counts in polls:
        if t < stop:
            continue
        if left is None and not counts.get(gone):
            left = t
        if left is not None and sum(n for tenant, n in counts.items() if tenant != gone) >= capacity:
            full = t
            break
    return left, full


def hand_over(mean_hold: float | None, capacity: int) -> float | None:
    """The mean time between two slots freeing at saturation: the mean hold over the capacity."""
    return None if not mean_hold else mean_hold / capacity


def occupancy(intervals: Sequence[Interval], start: float, end: float) -> float:
    """The time-integral of how many of ``intervals`` were open, over [start, end]."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)


def first_full(intervals: Sequence[Interval], after: float, capacity: int) -> float | None:
    """The first time at or after ``after`` at which ``capacity`` of the
    intervals are open at once (None: never). An interval ending at t is
    closed before one starting at t opens."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    count = 0
    later = []
    for t, step in events:
        if t <= after:
            count += step
        else:
            later.append((t, step))
    if count >= capacity:
        return after
    for t, step in later:
        count += step
        if count >= capacity:
            return t
    return None


def max_open(intervals: Sequence[Interval]) -> int:
    """The most of ``intervals`` open at once (one ending at t is closed before one starting at t opens)."""
    count = most = 0
    for _, step in sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals]):
        count += step
        most = max(most, count)
    return most


def shares_per_interval(
    by_tenant: Mapping[str, Sequence[Interval]], start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """Each tenant's share of the in-flight time over each whole ``step`` from
    ``start`` to ``end`` (one interval of the whole span when it is shorter than a step)."""
    count = max(1, math.floor((end - start) / step + 1e-9))
    width = step if (end - start) >= step else end - start
    out = []
    for i in range(count):
        a, b = start + i * width, start + (i + 1) * width
        held = {tenant: occupancy(spans, a, b) for tenant, spans in by_tenant.items()}
        total = sum(held.values())
        out.append({"start": a, "end": b, "shares": {t: (h / total if total else None) for t, h in held.items()}})
    return out


def first_after(times: Sequence[float], t: float) -> float | None:
    """The first of the sorted ``times`` strictly after ``t`` (None: none)."""
    i = bisect.bisect_right(times, t)
    return times[i] if i < len(times) else None


def ideal_waits(asked: Sequence[Interval], releases: Sequence[float]) -> tuple[list[float], list[float]]:
    """For each (asked, granted) of ``asked``: the time from asking to the
    first of the sorted ``releases`` after it (what a queue that costs nothing
    would make it wait), and how much longer it waited than that (at least 0).
    Requests after the last release are left out."""
    floors, beyond = [], []
    for wanted, granted in asked:
        nxt = first_after(releases, wanted)
        if nxt is not None:
            floors.append(nxt - wanted)
            beyond.append(max(0.0, granted - nxt))
    return floors, beyond


def _waits(leases: Sequence[Lease], unit: float | None) -> dict[str, Any]:
    waits = [granted - wanted for _, _, wanted, granted, *_ in leases]
    passed = [fence - before - 1 for *_, fence, before, _ in leases if before is not None]

    def units(x: float | None) -> float | None:
        return None if x is None or not unit else x / unit

    return {
        "calls": len(waits),
        "wait_p50": percentile(waits, 50),
        "wait_p99": percentile(waits, 99),
        "wait_max": max(waits) if waits else None,
        "wait_p50_handovers": units(percentile(waits, 50)),
        "wait_p99_handovers": units(percentile(waits, 99)),
        "wait_max_handovers": units(max(waits) if waits else None),
        "passed_p50": percentile(passed, 50),
        "passed_p99": percentile(passed, 99),
        "passed_max": max(passed) if passed else None,
        "passed_none": sum(1 for p in passed if p <= 0) / len(passed) if passed else None,
        "passed_at_most_one": sum(1 for p in passed if p <= 1) / len(passed) if passed else None,
        "cdf_handovers": [x / unit for x in quantiles(waits)] if unit else [],
    }


def analyse(
    scenario: ShareScenario,
    settings: Settings,
    hosts: Sequence[HostResult],
    start_at: float,
    samples: Sequence[tuple[float, int]] = (),
    aged: Sequence[tuple[float, int, str]] = (),
    polls: Sequence[tuple[float, Mapping[str, int]]] = (),
) -> dict[str, Any]:
    """The figures of one scenario from the hosts' leases (absolute times),
    the driver's in-flight samples and the decision log's ``age`` entries
    (seconds from the start; waiters aged; the first one's holder) and the
    polls of the leases in Redis per tenant around a stop."""
    cap = settings.capacity
    leases: list[Lease] = [
        (g, n, w - start_at, a - start_at, r - start_at, f, b, s)
        for h in hosts for g, n, w, a, r, f, b, s in h.leases
    ]  # fmt: skip
    stops = [h.stopped_at - start_at for h in hosts if h.stopped_at is not None]
    # a lease of the stopped group granted after its host stopped it: acquire() returned although cancelled
    ignored = sum(1 for h in hosts if h.stopped_at is not None for x in h.leases
                  if x[0] == scenario.stop and x[3] > h.stopped_at)  # fmt: skip
    stop = min(stops) if stops else None
    measured_end = settings.settle + settings.seconds  # the stop, in the tenants scenario
    window = (settings.settle, measured_end)
    whole = [x for x in leases if not x[7]]
    holds = [x[4] - x[3] for x in whole if window[0] <= x[3] < window[1]] or [x[4] - x[3] for x in whole]
    mean_hold = statistics.fmean(holds) if holds else None
    unit = hand_over(mean_hold, cap)
    intervals = [(a, r) for _, _, _, a, r, *_ in leases]
    span = window[1] - window[0]
    in_window = [n for t, n in samples if window[0] <= t < window[1]]
    granted = sum(1 for x in leases if window[0] <= x[3] < window[1])
    out: dict[str, Any] = {
        "capacity": cap,
        "mean_hold": mean_hold,
        "hand_over": unit,
        "leases": len(leases),
        # a witness: leases in the agents' hands at once, never above the capacity (each is inside its life in Redis)
        "max_in_hand": max_open(intervals),
        "utilisation": occupancy(intervals, *window) / (cap * span) if span > 0 else None,
        "idle_per_grant": (cap * span - occupancy(intervals, *window)) / granted if granted else None,
        "redis_in_flight_mean": statistics.fmean(in_window) / cap if in_window else None,
        "redis_in_flight_min": min(in_window) / cap if in_window else None,
        "unfinished": sum(h.unfinished for h in hosts),
        "errors": sum(h.errors for h in hosts),
        "error_samples": [s for h in hosts for s in h.error_samples][:5],
        "groups": {},
    }
    for group in scenario.groups:
        mine = [x for x in leases if x[0] == group.name and window[0] <= x[2] < window[1]]
        if scenario.name == "aging":
            mine = [x for x in leases if x[0] == group.name]  # the bound holds from the first second
        out["groups"][group.name] = _waits(mine, unit)
    # an occupancy series per group, for the chart (bins of a quarter second, or finer for short runs)
    end = scenario.length(settings)
    width = min(0.25, end / 40)
    bins = max(1, math.ceil(end / width))
    out["series_width"] = width
    out["series"] = {
        g.name: [round(occupancy([(a, r) for n, _, _, a, r, *_ in leases if n == g.name], i * width, (i + 1) * width)
                       / width, 2) for i in range(bins)]
        for g in scenario.groups
    }  # fmt: skip
    if scenario.name == "interactive":
        releases = sorted(x[4] for x in leases)
        asked = [(x[2], x[3]) for x in leases if x[0] == "interactive" and window[0] <= x[2] < window[1]]
        floors, beyond = ideal_waits(asked, releases)

        def units(values: Sequence[float], q: float) -> float | None:
            value = percentile(values, q)
            return None if value is None or not unit else value / unit

        out["first_free_p50_handovers"] = units(floors, 50)
        out["first_free_p99_handovers"] = units(floors, 99)
        out["first_free_cdf_handovers"] = [x / unit for x in quantiles(floors)] if unit else []
        out["beyond_first_free_p50_handovers"] = units(beyond, 50)
        out["beyond_first_free_p99_handovers"] = units(beyond, 99)
    elif scenario.name == "tenants":
        tenant_of = {g.name: g.tenant or "default" for g in scenario.groups}
        by_tenant: dict[str, list[Interval]] = {}
        for g, _, _, a, r, *_ in leases:
            by_tenant.setdefault(tenant_of[g], []).append((a, r))
        weights = dict(scenario.tenant_weights)
        goal_shares = {t: w / sum(weights.values()) for t, w in weights.items()}
        cut = stop if stop is not None else measured_end
        periods = shares_per_interval(by_tenant, settings.settle, min(cut, measured_end), settings.share_interval)
        worst = 0.0
        for p in periods:
            p["off"] = max((abs((p["shares"].get(t) or 0.0) - s) for t, s in goal_shares.items()), default=0.0)
            worst = max(worst, p["off"])
        out["weights"] = weights
        out["intervals"] = periods
        out["worst_share_off"] = worst if periods else None
        out["stop_at"] = stop
        out["cancellations_ignored"] = ignored
        a_spans = by_tenant.get("a", [])
        b_spans = by_tenant.get("b", [])
        if stop is not None:
            gone = max(stop, max((r for _, r in a_spans), default=stop))  # a's last lease out of its agent's hand
            full = first_full(b_spans, gone, cap)
            out["a_gone_at"], out["b_full_at"] = gone, full
            out["in_hand_switch_handovers"] = None if full is None or not unit else (full - gone) / unit
            left, redis_full = redis_switch(polls, stop, "a", cap)
            out["redis_a_gone_at"], out["redis_b_full_at"] = left, redis_full
            after = [t for t, _ in polls if t >= stop]
            out["poll_interval"] = (after[-1] - after[0]) / (len(after) - 1) if len(after) > 1 else None
            out["switch_from_stop_handovers"] = out["switch_from_a_gone_handovers"] = None
            if redis_full is not None and left is not None and unit:
                out["switch_from_stop_handovers"] = (redis_full - stop) / unit
                out["switch_from_a_gone_handovers"] = (redis_full - left) / unit
            out["b_alone_utilisation"] = occupancy(b_spans, gone, end) / (cap * (end - gone)) if end > gone else None
    elif scenario.name == "aging":
        bound = settings.aging + (mean_hold or 0.0)
        batch = out["groups"].get("batch", {})
        out["aging"] = settings.aging
        out["bound"] = bound
        out["aged"] = sum(n for _, n, _ in aged)
        out["age_events"] = [list(e) for e in aged[:2000]]
        # each batch wait split at its own age entry: asking to aged (Redis's clock), aged to the lease in hand
        promoted, after = [], []
        for g, n, w, a, *_ in leases:
            if g != "batch":
                continue
            own = [t for t, _, holder in aged if holder == f"{g}-{n}" and w <= t <= a + 0.002]
            if own:
                promoted.append(own[0] - w)
                after.append(max(0.0, a - own[0]))
        out["aged_seen"] = len(promoted)
        out["aged_late_max"] = max(promoted) - settings.aging if promoted else None
        out["after_aged_max"] = max(after) if after else None
        out["after_aged_p50"] = percentile(after, 50)
        worst = batch.get("wait_max")
        out["batch_excess"] = None if worst is None else worst - settings.aging
        out["batch_waits"] = [[round(w, 3), round(a - w, 4)] for g, _, w, a, *_ in leases if g == "batch"]
    return out


# -- outputs --------------------------------------------------------------------------------------


def _load(r: Mapping[str, Any]) -> str:
    load = r.get("load")
    return "-" if not load else f"{load[0]:.2f} before, {load[1]:.2f} after"


def summary(name: str, r: Mapping[str, Any]) -> str:
    """One line of a scenario's main figures."""
    head = f"hand-over {ms(r['hand_over'], 1)} ms, utilisation {pct(r['utilisation'])}"
    if name == "interactive":
        g = r["groups"]["interactive"]
        return (
            f"{head}; interactive wait p50 / p99 {num(g['wait_p50_handovers'], 2)} / "
            f"{num(g['wait_p99_handovers'], 2)} hand-overs, grants to others p99 {num(g['passed_p99'], 0)}"
        )
    if name == "tenants":
        return (f"{head}; worst share off {pct(r['worst_share_off'])}, b holding every lease in Redis "
                f"{num(r.get('switch_from_a_gone_handovers'), 2)} hand-overs after a's last lease")  # fmt: skip
    if name == "aging":
        g = r["groups"].get("batch", {})
        return f"{head}; batch wait max {ms(g.get('wait_max'), 1)} ms (bound {ms(r['bound'], 1)} ms), {r['aged']} aged"
    return head


def goals(result: Mapping[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Each goal, with the figure that judges it and whether it was met (None: not measured)."""
    results: Mapping[str, Mapping[str, Any]] = result["results"]
    out: list[tuple[str, str, bool | None]] = []

    def verdict(value: float | None, limit: float, below: bool = True) -> bool | None:
        return None if value is None else (value <= limit if below else value >= limit)

    r = results.get("interactive")
    if r is not None:
        g = r["groups"]["interactive"]
        out.append((
            f"interactive: the interactive agent's p99 admission wait <= {INTERACTIVE_P99:g} hand-overs",
            f"{num(g['wait_p99_handovers'], 2)} hand-overs ({ms(g['wait_p99'], 1)} ms; a hand-over "
            f"{ms(r['hand_over'], 1)} ms; the first slot freeing p99 {num(r['first_free_p99_handovers'], 2)})",
            verdict(g["wait_p99_handovers"], INTERACTIVE_P99),
        ))  # fmt: skip
        beyond = r["beyond_first_free_p99_handovers"]
        out.append((
            f"interactive: the same, beyond the first slot freeing after it asked (what the queue and the "
            f"client add to an ideal queue's wait) <= {INTERACTIVE_P99:g} hand-overs",
            f"p99 {num(beyond, 2)} hand-overs; admitted with no grant to anyone else between its request and its "
            f"grant {pct(g['passed_none'])}, at most one {pct(g['passed_at_most_one'])}",
            verdict(beyond, INTERACTIVE_P99),
        ))  # fmt: skip
        out.append((
            f"interactive: the sub-agents keep the fleet at the limit (leases in hand >= {UTILISATION:g} of "
            "capacity x time)",
            f"{pct(r['utilisation'])}: {ms(r['idle_per_grant'], 1)} ms idle per grant (Redis in-flight "
            f"{pct(r['redis_in_flight_mean'])})",
            verdict(r["utilisation"], UTILISATION, below=False),
        ))  # fmt: skip
    r = results.get("tenants")
    if r is not None:
        out.append((
            f"tenants: each tenant's in-flight share within {100 * SHARE_POINTS:g} points of 75 / 25 over every "
            "interval",
            f"worst {pct(r['worst_share_off'])} off, over {len(r['intervals'])} interval(s)",
            verdict(r["worst_share_off"], SHARE_POINTS),
        ))  # fmt: skip
        switch = r.get("switch_from_a_gone_handovers")
        out.append((
            f"tenants: once a stops, b holds the whole limit within {SWITCH_HANDOVERS:g} hand-over of a's last "
            "lease ending (the leases in Redis)",
            f"{num(switch, 2)} hand-overs, polls every {ms(r.get('poll_interval'), 1)} ms "
            f"({num(r.get('switch_from_stop_handovers'), 2)} from the stop itself; "
            f"{r.get('cancellations_ignored', 0)} of a's cancelled agents handed a lease anyway)",
            verdict(switch, SWITCH_HANDOVERS),
        ))  # fmt: skip
    witnessed = {name: r["max_in_hand"] for name, r in results.items() if "max_in_hand" in r}
    if witnessed:
        out.append((
            "every scenario: never more leases in the agents' hands at once than the limit (a witness)",
            ", ".join(f"{name} {most} of {results[name]['capacity']}" for name, most in witnessed.items()),
            all(most <= results[name]["capacity"] for name, most in witnessed.items()),
        ))  # fmt: skip
    r = results.get("aging")
    if r is not None:
        g = r["groups"].get("batch", {})
        out.append((
            "aging: no batch wait longer than the aging time plus one (mean) lease hold",
            f"max {ms(g.get('wait_max'), 1)} ms against {ms(r['bound'], 1)} ms ({g.get('calls', 0)} batch waits, "
            f"{r['aged']} waiters aged)",
            None if not g.get("calls") else verdict(g.get("wait_max"), r["bound"]),
        ))  # fmt: skip
    return out


def table(result: Mapping[str, Any]) -> str:
    """The terminal table: each group's waits, per scenario."""
    lines = [f"{'scenario':<13}{'group':<13}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
             f"{'p99 h-o':>9}{'others p99':>11}"]  # fmt: skip
    for name, r in result["results"].items():
        for group, g in r["groups"].items():
            lines.append(
                f"{name:<13}{group:<13}{g['calls']:>7}{ms(g['wait_p50'], 1):>9}{ms(g['wait_p99'], 1):>9}"
                f"{ms(g['wait_max'], 1):>9}{num(g['wait_p99_handovers'], 2):>9}{num(g['passed_p99'], 0):>11}"
            )
    return "\n".join(lines)


def goals_table(result: Mapping[str, Any]) -> str:
    """MET / MISS per goal, with the figure that judged it."""
    return goal_lines(goals(result))


def markdown(result: Mapping[str, Any], commands: Sequence[str] = ()) -> str:
    """The report: goals, a table per scenario, what the figures mean, and how to run it again."""
    s = result["settings"]
    env = result["environment"]
    lines = [
        "# Shares benchmark",
        "",
        "Priority classes and tenants' weighted fair shares in the fleet's one queue: real governors "
        f'(`policy="fixed"`, `max_capacity={s["capacity"]}`) saturated by {s["agents"]} agents that each '
        f"hold a lease for a lognormal {1000 * s['hold_mean']:g} ms (shape {s['hold_sigma']:g}) and ask again "
        "at once. No provider is called: what is measured is the order of admission. "
        "See `bench/shares_bench.py` for the scenarios and how each figure is measured.",
        "",
        f"Each scenario ran {s['settle']:g} s to settle, then {s['seconds']:g} s measured; agents on "
        f"{env['hosts']}, Redis {env.get('redis_version') or '?'}; {env['cpus']} CPUs, Python {env['python']}, "
        f"fleet-governor {env['fleet_governor']}. Waits are wall-clock times on a machine whose CPUs also run "
        "Redis, every host and the driver: a wait's share that is the wake-up after a grant (a release to the "
        "next holder's lease in hand) is this machine's as much as the governor's, so each scenario gives its "
        "load average.",
        "",
    ]
    if commands:
        lines += ["Reproduce:", "", "```", *commands, "```", ""]
    verdicts = goals(result)
    if verdicts:
        lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
        lines += [f"| {goal} | {measured} | {'-' if met is None else ('yes' if met else 'no')} |"
                  for goal, measured, met in verdicts]  # fmt: skip
        lines.append("")
    for name, r in result["results"].items():
        scenario = ShareScenario.from_json(result["scenarios"][name])
        lines += [f"## {name}", "", scenario.description + ".", ""]
        lines += [
            f"A hand-over (mean hold {ms(r['mean_hold'], 1)} ms / {r['capacity']}): {ms(r['hand_over'], 1)} ms. "
            f"Leases in hand: {pct(r['utilisation'])} of capacity x time ({ms(r['idle_per_grant'], 1)} ms idle per "
            f"grant: from a release to the next holder's wake-up); Redis in-flight, sampled: mean "
            f"{pct(r['redis_in_flight_mean'])}, min {pct(r['redis_in_flight_min'])}. At most "
            f"{r['max_in_hand']} leases in the agents' hands at once. Load average (1 min) {_load(r)}.",
            "",
            "| group | class | tenant | calls | wait p50 / p99 / max (ms) | p50 / p99 (hand-overs) | "
            "grants to others p50 / p99 / max |",
            "|---|---|---|---:|---|---|---|",
        ]
        for group in scenario.groups:
            g = r["groups"][group.name]
            others = (
                "-"
                if g["passed_p50"] is None
                else (f"{num(g['passed_p50'], 0)} / {num(g['passed_p99'], 0)} / {num(g['passed_max'], 0)}")
            )
            lines.append(
                f"| {group.name} | {group.priority} | {group.tenant or 'default'} | {g['calls']} | "
                f"{ms(g['wait_p50'], 1)} / {ms(g['wait_p99'], 1)} / {ms(g['wait_max'], 1)} | "
                f"{num(g['wait_p50_handovers'], 2)} / {num(g['wait_p99_handovers'], 2)} | {others} |"
            )
        lines.append("")
        if name == "interactive":
            lines += [
                f"The first slot freeing after the interactive agent asked (the floor of any queue): p50 "
                f"{num(r['first_free_p50_handovers'], 2)}, p99 {num(r['first_free_p99_handovers'], 2)} hand-overs; "
                f"its wait beyond that: p50 {num(r['beyond_first_free_p50_handovers'], 2)}, p99 "
                f"{num(r['beyond_first_free_p99_handovers'], 2)} hand-overs. With no grant to anyone else between "
                f"its request and its grant: {pct(r['groups']['interactive']['passed_none'])} of its requests; "
                f"at most one: {pct(r['groups']['interactive']['passed_at_most_one'])}.",
                "",
            ]
        elif name == "tenants":
            lines += ["| interval (s) | share a | share b | off 75 / 25 |", "|---|---:|---:|---:|"]
            for p in r["intervals"]:
                lines.append(f"| {p['start']:.1f}-{p['end']:.1f} | {pct(p['shares'].get('a'))} | "
                             f"{pct(p['shares'].get('b'))} | {pct(p['off'])} |")  # fmt: skip
            if r.get("stop_at") is not None:
                lines += [
                    "",
                    f"a stopped at {r['stop_at']:.3f} s. In Redis (polled every {ms(r['poll_interval'], 1)} ms): a's "
                    f"last lease gone at {num(r['redis_a_gone_at'], 3)} s, b holding the whole limit at "
                    f"{num(r['redis_b_full_at'], 3)} s: {num(r['switch_from_a_gone_handovers'], 2)} hand-overs after "
                    f"a's last lease, {num(r['switch_from_stop_handovers'], 2)} after the stop. In the agents' hands: "
                    f"a's last lease released at {r['a_gone_at']:.3f} s, b's leases in hand first at the capacity "
                    f"{num(r['in_hand_switch_handovers'], 2)} hand-overs later (each grant's wake-up leaves a slot "
                    f"idle for a while); b alone then kept {pct(r['b_alone_utilisation'])} of the limit in hand.",
                ]
                if r.get("cancellations_ignored"):
                    lines += [
                        "",
                        f"{r['cancellations_ignored']} of a's agents were handed a lease by `acquire()` although "
                        "their task had just been cancelled (the cancellation was lost), so they held it a whole "
                        "hold more: the time from the stop counts their holds.",
                    ]
            lines.append("")
        elif name == "aging":
            lines += [
                f"Aging {r['aging']:g} s; the bound (aging + mean hold) {ms(r['bound'], 1)} ms; the longest batch "
                f"wait {ms(r['batch_excess'], 1)} ms past the aging time; the decision log aged {r['aged']} "
                f"waiters. Split at each batch waiter's own `age` entry ({r['aged_seen']} found): aged at most "
                f"{ms(r['aged_late_max'], 1)} ms after the aging time (Redis's clock), then in hand within "
                f"{ms(r['after_aged_p50'], 1)} ms (p50), {ms(r['after_aged_max'], 1)} ms at most.",
                "",
            ]
    lines += [
        "Figures: *wait* is from calling `acquire()` to the lease in hand (the pub/sub wake-up included); "
        "a *hand-over* is the mean hold over the capacity, the mean time between two slots freeing. "
        "*Grants to others* (groups that measure it): the leases granted to anyone else between an agent's "
        "request and its grant, from the fence of its lease and the fence counter read just before it asked "
        "(0 in a perfect priority queue; a grant racing with the request counts too). *First slot freeing*: "
        "from the interactive agent's request to the next release by anyone, the wait of an ideal queue "
        "that costs nothing; with holds ending at random phases it is near exponential, so its p99 is "
        "several hand-overs whatever the queue does. *Leases in hand*: their time in the agents' hands over "
        "capacity x time (a slot between its grant in Redis and its holder's wake-up counts as idle). "
        "*Shares*: each tenant's in-flight time over every interval; *off*: the largest distance of a "
        "tenant's share from its weight's, in points.",
        "",
    ]
    return "\n".join(lines)


def write_chart(result: Mapping[str, Any], path: Path) -> None:
    """A PNG: the interactive agent's waits (CDF, hand-overs) against the
    sub-agents' and the floor; each tenant's leases in hand over time; the
    batch waits past the aging time against the bound."""
    names = list(result["results"])
    with kit.chart(path, 1, len(names), (4.6 * len(names), 3.6)) as axes:
        for ax, name in zip(axes[0], names, strict=True):
            r = result["results"][name]
            ax.set_title(name, fontsize=10)
            if name == "interactive":
                for label, cdf in (*((g, v["cdf_handovers"]) for g, v in r["groups"].items()),
                                   ("first slot freeing", r.get("first_free_cdf_handovers", []))):  # fmt: skip
                    if cdf:
                        ax.plot([max(x, 1e-3) for x in cdf], [q / 100 for q in range(len(cdf))], lw=1.2, label=label)
                ax.axvline(INTERACTIVE_P99, color="black", ls="--", lw=0.9, label="goal (p99)")
                ax.set_xscale("log")
                ax.set_xlabel("admission wait (hand-overs)")
                ax.set_ylabel("share of waits")
            elif name == "tenants":
                width = r["series_width"]
                for group, series in r["series"].items():
                    ax.plot([(i + 0.5) * width for i in range(len(series))], series, lw=1.0, label=f"tenant {group}")
                if r.get("stop_at") is not None:
                    ax.axvline(r["stop_at"], color="black", ls=":", lw=0.9, label="a stops")
                ax.axhline(r["capacity"], color="grey", ls="--", lw=0.8)
                ax.set_xlabel("seconds")
                ax.set_ylabel("leases in hand")
                ax.set_ylim(bottom=0)
            elif name == "aging":
                waits = r.get("batch_waits", [])
                past = [1000 * (w[1] - r["aging"]) for w in waits]
                ax.scatter([w[0] for w in waits], past, s=8, label="batch waits")
                ax.axhline(1000 * (r["bound"] - r["aging"]), color="black", ls="--", lw=0.9, label="bound: + mean hold")
                ax.axhline(0, color="grey", ls=":", lw=0.8)
                ax.set_xlabel("seconds (asked at)")
                ax.set_ylabel(f"wait past the aging time, {r['aging']:g} s (ms)")
                ax.set_ylim(min([0.0, *past]) - 5, max([1000 * (r["bound"] - r["aging"]), *past]) * 1.2 + 5)
            ax.legend(fontsize=7)


__all__ = [
    "SCENARIO_NAMES",
    "Group",
    "HostJob",
    "HostResult",
    "Settings",
    "ShareScenario",
    "analyse",
    "first_after",
    "first_full",
    "goals",
    "goals_table",
    "hand_over",
    "ideal_waits",
    "markdown",
    "max_open",
    "occupancy",
    "redis_switch",
    "run_host",
    "run_shares",
    "scenarios",
    "shares_per_interval",
    "summary",
    "table",
    "write_chart",
]
