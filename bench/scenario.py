"""Every knob of a swarm run, and the governor each strategy runs under.

The strategies, run one after another against the same provider settings:

``none``
    No coordination: each agent calls the provider and retries a 429 after
    the provider's Retry-After, else the project's full-jitter backoff
    (what SDK retries do).
``fixed``
    A fleet-wide FIFO semaphore at ``max_capacity``: the governor's own
    admission machinery (same queue, leases and wake-ups) under
    :class:`~governor.policies.FixedPolicy`, whose capacity never moves.
    Its agents acquire, call and release, and never report (a semaphore
    knows nothing of outcomes); they retry as in ``none``.
``per-host``
    One governor per host process, each under its own name and unaware of
    the others: the seed's single-process design (policy ``seed`` unless
    ``per_host_policy`` says otherwise), each allowed
    ``ceil(max_capacity / hosts)`` unless ``per_host_max`` is set.
``fleet-seed``
    The fleet governor with ``policy="seed"``.
``fleet``
    The fleet governor with the default (adaptive) policy.
``fleet-lease``
    The same governor, its agents written as the README's first example:
    ``async with acquire() as lease``, the call, ``report(outcome,
    retry_after, lease=lease)``, and a 429 retried after the provider's
    Retry-After (else the backoff) with a new lease.
``fleet-mixed``
    ``fleet-lease`` on a fleet of two languages: the odd-numbered hosts run
    their agents with the Node client (the same loop), the others with
    Python's. It needs Node 20+ and the built Node package
    (``npm ci && npm run build`` in ``clients/typescript``), and a Redis
    URL the Node processes can reach.
``fleet-proxy``
    The fleet governor in ``governor proxy`` processes (:data:`PROXIES` of
    them, host ``h`` calling proxy ``h % PROXIES``, as one proxy per
    machine serves its agents): the agents call the proxy's ``/openai``
    as if it were the provider, ungoverned and with SDK-style retries, and
    the proxies govern each request. It needs a Redis URL the proxies can
    reach.

The agents of ``per-host``, ``fleet-seed`` and ``fleet`` make each call
with ``AsyncGovernor.call`` (acquire, call, classify, report with the
provider's Retry-After, release, retry), the path users run; ``fixed``
uses the README's acquire / release pattern around SDK-style retries.

Time scales are parameters: the window, the probe interval (the policy's
own default unless set: a quarter of the window), the poll, the
lease TTL and the backoff base, so one scenario runs in seconds in the test
suite and in real time for a demo.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from governor.config import GovernorConfig
from governor.errors import ConfigError
from governor.policies import AdaptivePolicy, FixedPolicy, Policy, SeedPolicy

#: the strategies run by default
STRATEGIES: tuple[str, ...] = ("none", "fixed", "per-host", "fleet-seed", "fleet")
#: every strategy (on request: ``fleet-lease``, the governor of ``fleet`` with the README's pattern,
#: and ``fleet-mixed``, the same with half of the hosts on Node)
ALL_STRATEGIES: tuple[str, ...] = (*STRATEGIES, "fleet-lease", "fleet-mixed", "fleet-proxy")
#: the governing proxies of ``fleet-proxy``, shared by the hosts
PROXIES = 2
#: how agents may call the provider (Scenario.client)
CLIENTS = ("aiohttp", "openai", "gemini", "bedrock")


@dataclass(frozen=True)
class Scenario:
    """A swarm run: H hosts x A agents, a fixed workload, the strategies."""

    #: host processes (threads when the Redis is an in-process fakeredis)
    hosts: int = 8
    #: agents per host (asyncio tasks)
    agents: int = 16
    #: successful calls each agent must make
    calls: int = 40
    #: strategies to run, in order
    strategies: tuple[str, ...] = STRATEGIES
    #: rounds of all strategies (every other one in reverse order); the median round is reported
    repeat: int = 1
    #: the operator's configured ceiling: fixed, fleet-seed and fleet use it
    max_capacity: int = 96
    #: per-host ceiling (None: ceil(max_capacity / hosts))
    per_host_max: int | None = None
    #: the policy of each per-host governor
    per_host_policy: str = "seed"
    #: the governors' sliding window, seconds
    window: float = 3.0
    #: probes of the adaptive policy's ceiling (None: the policy's default, a quarter of the window)
    probe_interval: float | None = None
    #: lease time to live and waiter poll, seconds
    lease_ttl: float = 30.0
    poll: float = 1.0
    #: the backoff of SDK-style retries without a Retry-After: full jitter from this base
    backoff_base: float = 0.25
    backoff_cap: float = 30.0
    #: a strategy that has not finished its workload by then is stopped, seconds
    max_time: float = 120.0
    #: windows after the start and after each limit change left out of "steady state"
    settle_windows: float = 3.0
    #: how often the driver samples the governors' capacity, seconds
    sample_interval: float = 0.1
    #: how agents call the provider: "aiohttp" (light), or a real SDK: "openai",
    #: "gemini" (google-genai) or "bedrock" (boto3's Converse), which the provider
    #: answers in its own shape (Gemini and Bedrock send no rate-limit headers)
    client: str = "aiohttp"
    #: other settings of the fleet governor: GovernorConfig fields (e.g. poll=0.5)
    #: or AdaptivePolicy fields (e.g. cut_factor=0.85)
    fleet_options: tuple[tuple[str, Any], ...] = ()
    #: governed agents pass the provider's Retry-After to report()
    report_retry_after: bool = True
    #: the model name sent to the provider
    model: str = "sim-1"
    #: seconds between dispatching a strategy and its start (workers get ready)
    lead: float = 1.0
    #: leave the governors' keys in Redis after each strategy (to inspect them with the CLI)
    keep_governors: bool = False
    #: a shared account: ((seconds after the start, ungoverned callers), ...) — callers
    #: outside the fleet that call the same provider one call after another (SDK-style
    #: retries), started by the driver; the figures count the fleet alone against what
    #: they leave of the limit
    ungoverned: tuple[tuple[float, int], ...] = ()
    #: extra notes carried into the results (e.g. how hosts were run)
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("hosts", "agents", "calls", "max_capacity", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.strategies:
            raise ConfigError("choose at least one strategy")
        for strategy in self.strategies:
            if strategy not in ALL_STRATEGIES:
                raise ConfigError(f"unknown strategy {strategy!r}; choose from {', '.join(ALL_STRATEGIES)}")
        if len(set(self.strategies)) != len(self.strategies):
            raise ConfigError("each strategy may run once per swarm")
        if self.per_host_max is not None and (isinstance(self.per_host_max, bool) or self.per_host_max < 1):
            raise ConfigError(f"per_host_max must be >= 1, got {self.per_host_max!r}")
        for name in ("window", "lease_ttl", "poll", "max_time", "sample_interval", "backoff_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {value!r}")
        for name in ("backoff_base", "settle_windows", "lead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value!r}")
        if self.probe_interval is not None and self.probe_interval < 0:
            raise ConfigError(f"probe_interval must be >= 0 seconds, got {self.probe_interval!r}")
        if self.client not in CLIENTS:
            raise ConfigError(f"client must be one of {', '.join(CLIENTS)}, got {self.client!r}")
        last = -1.0
        for entry in self.ungoverned:
            at, count = entry
            if not at > last or isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"ungoverned must be (seconds, callers >= 0) pairs in time order, got {entry!r}")
            last = at
        known = {f.name for f in fields(GovernorConfig)} | {f.name for f in fields(AdaptivePolicy)}
        for key, _ in self.fleet_options:
            if key not in known:
                raise ConfigError(f"unknown governor setting {key!r}")
            if key in ("max_capacity", "policy"):
                raise ConfigError(f"set {key} with its own option, not as a fleet option")
        # Build every governor config now, so a bad combination fails before anything runs.
        for strategy in self.strategies:
            governor_config(self, strategy)

    @property
    def total_agents(self) -> int:
        return self.hosts * self.agents

    @property
    def workload(self) -> int:
        """Successful calls the whole fleet must make, per strategy."""
        return self.total_agents * self.calls

    @property
    def per_host_ceiling(self) -> int:
        return self.per_host_max if self.per_host_max is not None else math.ceil(self.max_capacity / self.hosts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["strategies"] = list(self.strategies)
        data["fleet_options"] = dict(self.fleet_options)
        data["notes"] = list(self.notes)
        data["ungoverned"] = [list(entry) for entry in self.ungoverned]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scenario:
        values = dict(data)
        values["strategies"] = tuple(values["strategies"])
        values["fleet_options"] = tuple(dict(values.get("fleet_options", {})).items())
        values["notes"] = tuple(values.get("notes", ()))
        values["ungoverned"] = tuple((float(at), int(n)) for at, n in values.get("ungoverned", ()))
        return cls(**values)


def ungoverned_at(scenario: Scenario, t: float) -> int:
    """Ungoverned callers ``t`` seconds after the start."""
    count = 0
    for at, n in scenario.ungoverned:
        if at <= t:
            count = n
    return count


def parse_ungoverned(text: str) -> tuple[tuple[float, int], ...]:
    """``"0:8,10:16,20:4"`` -> ((0.0, 8), (10.0, 16), (20.0, 4)): callers from each time on."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        at, sep, count = part.partition(":")
        try:
            out.append((float(at), int(count)))
        except ValueError:
            raise ConfigError(f"ungoverned entry {part!r} is not SECONDS:CALLERS (e.g. 0:8,10:16)") from None
        if not sep:
            raise ConfigError(f"ungoverned entry {part!r} is not SECONDS:CALLERS (e.g. 0:8,10:16)")
    return tuple(out)


def governor_config(scenario: Scenario, strategy: str) -> GovernorConfig | None:
    """The GovernorConfig a strategy runs under (None for ``none``)."""
    if strategy == "none":
        return None
    window = scenario.window
    common: dict[str, Any] = {
        "window": window,
        "lease_ttl": scenario.lease_ttl,
        "poll": scenario.poll,
        "queue_ttl": max(5.0, 2 * scenario.poll),
        "idle_expiry": max(600.0, window, scenario.lease_ttl, 2 * scenario.poll),
        "restart_hold": False,  # every run's governors are new names: nobody held their leases before
    }
    probe = scenario.probe_interval  # None: the policy's own default, a quarter of the window
    if strategy == "fixed":
        return GovernorConfig(max_capacity=scenario.max_capacity, policy=FixedPolicy(), **common)
    if strategy == "per-host":
        policy: Policy
        if scenario.per_host_policy == "seed":
            policy = SeedPolicy()
        elif scenario.per_host_policy == "adaptive":
            policy = AdaptivePolicy(probe_interval=probe)
        else:
            raise ConfigError(f"per_host_policy must be seed or adaptive, got {scenario.per_host_policy!r}")
        return GovernorConfig(max_capacity=scenario.per_host_ceiling, policy=policy, **common)
    if strategy == "fleet-seed":
        return GovernorConfig(max_capacity=scenario.max_capacity, policy=SeedPolicy(), **common)
    policy_fields = {f.name for f in fields(AdaptivePolicy)}
    options = dict(scenario.fleet_options)
    own = {key: value for key, value in options.items() if key in policy_fields}
    rest = {key: value for key, value in options.items() if key not in policy_fields}
    adaptive = AdaptivePolicy(**{"probe_interval": probe, **own})
    return GovernorConfig(max_capacity=scenario.max_capacity, policy=adaptive, **{**common, **rest})


def governor_names(prefix: str, strategy: str, hosts: int) -> list[str]:
    """The governor name each host uses, by host index."""
    if strategy == "none":
        return []
    if strategy == "per-host":
        return [f"{prefix}-per-host-{h}" for h in range(hosts)]
    return [f"{prefix}-{strategy}"] * hosts


def strategy_pattern(strategy: str) -> str:
    """How a strategy's agents use the governor: "call" (``AsyncGovernor.call``),
    "lease" (acquire, call, report with the lease, release: the README's
    pattern), "semaphore" (acquire and release, no report) or "none"."""
    patterns = {
        "none": "none",
        "fixed": "semaphore",
        "fleet-lease": "lease",
        "fleet-mixed": "lease",
        "fleet-proxy": "none",
    }
    return patterns.get(strategy, "call")


def strategy_runtime(strategy: str, host: int) -> str:
    """What runs a host's agents: "node" for the odd-numbered hosts of ``fleet-mixed``, else "python"."""
    return "node" if strategy == "fleet-mixed" and host % 2 == 1 else "python"


def strategy_reports(strategy: str) -> bool:
    """Whether agents report outcomes: the fixed semaphore knows nothing of
    them; behind the proxy, the proxy reports."""
    return strategy not in ("none", "fixed", "fleet-proxy")


def parse_option(text: str) -> tuple[str, Any]:
    """``"cut_factor=0.85"`` -> ("cut_factor", 0.85), typed as GovernorConfig
    or AdaptivePolicy declares it."""
    key, sep, raw = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise ConfigError(f"governor setting {text!r} is not NAME=VALUE")
    types = {f.name: f.type for f in fields(GovernorConfig)}
    types.update({f.name: f.type for f in fields(AdaptivePolicy)})
    if key not in types:
        raise ConfigError(f"unknown governor setting {key!r}; see GovernorConfig and AdaptivePolicy")
    kind = str(types[key])
    try:
        if kind == "int":
            return key, int(raw)
        if kind in ("float", "float | None"):
            return key, float(raw)
    except ValueError:
        raise ConfigError(f"governor setting {key} needs a {kind}, got {raw!r}") from None
    return key, raw
