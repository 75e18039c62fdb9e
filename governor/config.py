"""The governor's configuration: one frozen dataclass, validated on construction.

The policy is a unit of its own (governor/policies.py): ``policy`` is an
:class:`AdaptivePolicy` (the default), a :class:`SeedPolicy` (the seed
governor's rules exactly: halve on 2 rate-limited attempts or a share over
30 %, pause on 4, +1 per 3 successes) or a :class:`FixedPolicy`, each with
its own validated numbers; a policy's name (``"seed"``) means its defaults.
The window (60 s) and the resume level (a quarter) are the seed's.

The config is stored in Redis by the first client that creates the governor;
later clients use the stored policy (one fleet, one policy). ``reset()``
replaces the stored config with the caller's, ``set_max_capacity()`` changes
only the ceiling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .budgets import KINDS as BUDGET_KINDS
from .budgets import MAX_TOKENS, config_field
from .errors import ConfigError, StateError
from .policies import REGISTRY, Policy, policy_from
from .prices import PriceBook
from .protocol import (
    CONFIG_RANGES,
    DEFAULT_LEASE_TTL,
    DEFAULT_PREFIX,
    MAX_CAP,
    MAX_CAPACITY,
    MAX_CAPPED,
    MAX_CLASSES,
    MAX_WEIGHT,
    governor_keys,
    ms,
    stored_field,
    validate_class,
    validate_tenant,
)
from .spend import SpendBudget

__all__ = ["ON_UNAVAILABLE", "GovernorConfig", "RetryPolicy", "ms"]

Unavailable = Literal["fail", "local"]
ON_UNAVAILABLE: tuple[str, ...] = ("fail", "local")


def _spend_budgets(value: Any) -> tuple[SpendBudget, ...]:
    if isinstance(value, SpendBudget):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(isinstance(b, SpendBudget) for b in value):
        raise ConfigError(f"spend must be a tuple of SpendBudget, got {value!r}")
    names = [b.name for b in value]
    if len(set(names)) != len(names):
        raise ConfigError(f"spend budgets need names of their own, got {', '.join(names)}")
    return tuple(value)


@dataclass(frozen=True)
class GovernorConfig:
    """How one governor behaves. Times are in seconds."""

    #: the configured ceiling of concurrent leases across the fleet
    max_capacity: int = 128
    #: the policy and its numbers: an AdaptivePolicy (default), SeedPolicy or
    #: FixedPolicy, or a policy's name for its defaults (see governor/policies.py)
    policy: Policy | str = "adaptive"
    #: length of the sliding window of reported attempts
    window: float = 60.0
    #: a pause lifts at max(1, floor(max_capacity * resume_fraction))
    resume_fraction: float = 0.25
    #: a provider's Retry-After holds the whole fleet, but never longer than this
    retry_after_cap: float = 60.0
    #: a lease expires unless renewed within this (renewed every lease_ttl / 3)
    lease_ttl: float = DEFAULT_LEASE_TTL
    #: a queued caller re-checks (and probes for recovery) at least this often
    poll: float = 1.0
    #: a queued caller that stops refreshing is dropped after this
    queue_ttl: float = 5.0
    #: every key of the governor expires after this long without a write
    idle_expiry: float = 86400.0
    #: approximate number of entries kept in the decision log
    log_length: int = 10_000
    #: socket timeout of the governor's Redis connections (and of a ``WAIT`` for
    #: replicas): a hung Redis fails in bounded time
    redis_timeout: float = 5.0
    #: Redis connections one governor object uses at most for its callers' scripts
    #: (besides one for pub/sub and one for its background worker); more callers
    #: at once wait their turn, however many there are
    redis_connections: int = 16
    #: the strict mode: a governor created on a Redis server younger than ``lease_ttl``
    #: holds new admissions until the server is that old, whoever creates it, so
    #: holders cut off across a restart without persistence never see a newcomer
    #: admitted beside them; its cost: every new deployment on a fresh Redis waits up to
    #: ``lease_ttl``. False (the default): a governor is held only on evidence that a
    #: fleet held it (a client that knew it, other listeners, a state that came back)
    restart_hold: bool = False
    #: the operator's declaration that this Redis loses nothing it acknowledged
    #: across a restart (``appendonly yes`` and ``appendfsync always``) and that the
    #: governor's keys are never restored from an older copy: a state the server
    #: reloads from its append-only file at a restart is then no loss (no recovery
    #: hold); stored in the state by any client that declares it. A declaring client
    #: checks appendonly and appendfsync once (CONFIG GET, where allowed: ConfigError
    #: otherwise); the rest is trusted. A promoted replica is a loss all the same
    durable_redis: bool = False
    #: replicas that must confirm every grant and renewal (Redis ``WAIT``) before a
    #: caller or the heartbeat relies on it; 0: none (see docs/guarantees.md)
    wait_replicas: int = 0
    #: how long a grant or renewal waits for ``wait_replicas`` replicas (Redis ``WAIT``);
    #: None: 0.8 x ``redis_timeout``. Below ``redis_timeout`` (the socket would time out
    #: first) and below ``lease_ttl / 3`` (a renewal must be confirmed before the next);
    #: it must exceed the replication round trip, or nothing is ever confirmed
    replica_timeout: float | None = None
    #: when Redis cannot be reached: ``"fail"`` closed (raise GovernorUnavailable, the
    #: default), or ``"local"``: admit at most ``local_capacity`` callers per governor object
    #: until Redis answers again, then register those holders in the shared limit
    on_unavailable: Unavailable = "fail"
    #: the per-process limit while Redis is unreachable and ``on_unavailable="local"``
    local_capacity: int = 1
    #: first part of every key name
    key_prefix: str = DEFAULT_PREFIX
    #: budget ceilings, per minute (governor/budgets.py): None, the default, leaves a
    #: budget to the provider's rate-limit headers; a number caps it (a header's lower
    #: limit still wins) and governs it from the start
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None
    #: Anthropic's fast mode (a lease of tier ``fast``) is limited apart: its own ceilings
    fast_input_tokens_per_minute: int | None = None
    fast_output_tokens_per_minute: int | None = None
    #: the priority classes, highest first: a waiter of a higher class is admitted first
    priorities: tuple[str, ...] = ("interactive", "default", "batch")
    #: the class of a caller that names none
    default_priority: str = "default"
    #: seconds after which a waiter of any class but the highest goes ahead of every
    #: class (in arrival order among those aged), so nothing starves; None: never
    aging: float | None = 30.0
    #: each tenant's weight (1-1000): at capacity, grants go to the waiting tenants in
    #: proportion to their weights (stored as (tenant, weight) pairs, sorted)
    tenant_weights: Mapping[str, int] | tuple[tuple[str, int], ...] = ()
    #: the weight of a tenant not in ``tenant_weights``
    default_weight: int = 1
    #: at most this many leases of a tenant in flight (1-1,000,000), for up to 1,000
    #: tenants; its waiters beyond wait without holding up the other tenants' (stored
    #: as (tenant, cap) pairs, sorted)
    tenant_caps: Mapping[str, int] | tuple[tuple[str, int], ...] = ()
    #: slots of capacity only the highest class takes: the other classes' leases hold
    #: at most capacity - reserve (a waiter that aged may take them), so a caller of the
    #: highest class finds a slot free without waiting for one to end; 0: none
    reserve: int = 0
    #: dollar budgets (governor/spend.py): each a limit per window for the fleet and
    #: per tenant; a call that none can afford fails at once with SpendExhausted
    spend: tuple[SpendBudget, ...] = ()
    #: what prices each call for the spend budgets (governor.prices.PriceBook): every governed
    #: transport and SDK client of this governor uses it (a transport's own prices= wins)
    prices: PriceBook | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", policy_from(self.policy))
        object.__setattr__(self, "spend", _spend_budgets(self.spend))
        if self.prices is not None and not isinstance(self.prices, PriceBook):
            raise ConfigError(f"prices must be a governor.prices.PriceBook or None, got {self.prices!r}")
        self._check_shares()
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("policy", "aging"):
                continue
            if f.type in ("int", int):
                _check_int(f.name, value)
            elif f.type in ("float", float):
                _check_float(f.name, value)
            elif f.type in ("bool", bool) and not isinstance(value, bool):
                raise ConfigError(f"{f.name} must be True or False, got {value!r}")
        if self.on_unavailable not in ON_UNAVAILABLE:
            raise ConfigError(f"on_unavailable must be one of {', '.join(ON_UNAVAILABLE)}, got {self.on_unavailable!r}")
        _at_least("local_capacity", self.local_capacity, 1)
        _at_least("redis_connections", self.redis_connections, 1)
        _at_least("wait_replicas", self.wait_replicas, 0)
        if self.redis_connections > 1000 or self.wait_replicas > 100:
            raise ConfigError("redis_connections must be <= 1000 and wait_replicas <= 100")
        _at_least("max_capacity", self.max_capacity, 1)
        if self.max_capacity > MAX_CAPACITY:
            raise ConfigError(f"max_capacity must be <= {MAX_CAPACITY}, got {self.max_capacity}")
        if not 0 <= self.reserve < self.max_capacity:
            raise ConfigError(
                f"reserve must be an integer in [0, max_capacity - 1 = {self.max_capacity - 1}], got {self.reserve!r}"
            )
        _at_least("log_length", self.log_length, 1)
        _within("resume_fraction", self.resume_fraction, 0.0, 1.0)
        for name in ("window", "lease_ttl", "poll", "queue_ttl", "redis_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.retry_after_cap < 0:
            raise ConfigError(f"retry_after_cap must be >= 0 seconds, got {self.retry_after_cap!r}")
        if self.window > 86400 or self.retry_after_cap > 86400:
            raise ConfigError("window and retry_after_cap must be at most a day")
        if self.lease_ttl < 0.003:
            raise ConfigError(f"lease_ttl must be >= 0.003 s (it is renewed every third), got {self.lease_ttl!r}")
        for name, (allowed, scale) in CONFIG_RANGES.items():  # the ranges the scripts and the state's reader take
            if not allowed.low <= round(getattr(self, name) * scale) <= allowed.high:
                unit = " seconds" if scale == 1000 else ""
                raise ConfigError(
                    f"{name} must be between {allowed.low / scale:g} and {allowed.high / scale:g}{unit}, "
                    f"got {getattr(self, name)!r}"
                )
        if self.queue_ttl < 2 * self.poll:
            raise ConfigError(
                f"queue_ttl ({self.queue_ttl}) must be at least twice poll ({self.poll}): "
                "a waiter refreshes its place every poll and must not be dropped between two"
            )
        self._check_replicas()
        if not 1.0 <= self.idle_expiry <= 30 * 86400:
            raise ConfigError(f"idle_expiry must be between 1 s and 30 days, got {self.idle_expiry!r}")
        if self.idle_expiry < max(self.window, self.lease_ttl, self.queue_ttl):
            raise ConfigError("idle_expiry must be at least window, lease_ttl and queue_ttl")
        governor_keys("x", self.key_prefix)  # validates the prefix
        for kind in BUDGET_KINDS:
            ceiling = getattr(self, config_field(kind))
            if ceiling is not None:
                _check_int(config_field(kind), ceiling)
                if not 1 <= ceiling <= MAX_TOKENS:
                    raise ConfigError(f"{config_field(kind)} must be None or in [1, 2^53], got {ceiling!r}")

    def _check_replicas(self) -> None:
        """replica_timeout (when wait_replicas is set) fits the timeouts it runs within."""
        if self.replica_timeout is not None:
            _check_float("replica_timeout", self.replica_timeout)
            if self.replica_timeout <= 0:
                raise ConfigError(f"replica_timeout must be > 0 seconds, got {self.replica_timeout!r}")
        if not self.wait_replicas:
            return
        wait = self.replica_wait
        if wait >= self.redis_timeout:
            raise ConfigError(
                f"replica_timeout ({wait} s) must be below redis_timeout ({self.redis_timeout} s): the socket "
                "would time out before Redis answers the WAIT; raise redis_timeout or lower replica_timeout"
            )
        if wait >= self.lease_ttl / 3:
            raise ConfigError(
                f"replica_timeout ({wait} s) must be below lease_ttl / 3 ({self.lease_ttl / 3:.3f} s): a renewal "
                "must be confirmed before the next one is due; raise lease_ttl or lower replica_timeout"
            )

    @property
    def replica_wait(self) -> float:
        """Seconds a grant or renewal waits for ``wait_replicas`` replicas (Redis ``WAIT``)."""
        return self.replica_timeout if self.replica_timeout is not None else 0.8 * self.redis_timeout

    def _check_shares(self) -> None:
        """Validate the classes, the aging and the weights; normalise the weights."""
        if isinstance(self.priorities, str) or not isinstance(self.priorities, (tuple, list)):
            raise ConfigError(f"priorities must be a tuple of class names, got {self.priorities!r}")
        object.__setattr__(self, "priorities", tuple(self.priorities))
        for name in self.priorities:
            validate_class(name)
        if not 1 <= len(self.priorities) <= MAX_CLASSES or len(set(self.priorities)) != len(self.priorities):
            raise ConfigError(f"priorities must be 1 to {MAX_CLASSES} distinct names, got {self.priorities!r}")
        if self.default_priority not in self.priorities:
            raise ConfigError(
                f"default_priority {self.default_priority!r} is not one of the priorities {self.priorities!r}"
            )
        if self.aging is not None:
            _check_float("aging", self.aging)
            if not 0 < self.aging <= 86400:
                raise ConfigError(f"aging must be None or between 0 and 86400 seconds, got {self.aging!r}")
        object.__setattr__(self, "tenant_weights", tenant_pairs("tenant_weights", self.tenant_weights, MAX_WEIGHT))
        _check_weight("default_weight", self.default_weight)
        object.__setattr__(self, "tenant_caps", tenant_pairs("tenant_caps", self.tenant_caps, MAX_CAP))
        if len(self.tenant_caps) > MAX_CAPPED:
            raise ConfigError(f"tenant_caps names {len(self.tenant_caps)} tenants; at most {MAX_CAPPED} may have a cap")

    def rank_of(self, priority: str | None) -> int:
        """The rank of class ``priority`` (0: the highest; None: the default
        class). ConfigError for a class the config does not name."""
        name = self.default_priority if priority is None else priority
        try:
            return self.priorities.index(name)
        except ValueError:
            raise ConfigError(f"unknown priority {name!r}: the classes are {', '.join(self.priorities)}") from None

    def weight_of(self, tenant: str) -> int:
        """The weight of ``tenant`` (``default_weight`` when it is not listed)."""
        return dict(self.tenant_weights).get(tenant, self.default_weight)  # type: ignore[arg-type]

    def script_fields(self) -> list[str]:
        """The stored config as ``name, value`` pairs (governor.protocol.CONFIG,
        then the policy's own fields), in the units the scripts expect."""
        assert isinstance(self.policy, Policy)
        pairs = {
            "policy": self.policy.name,
            "max_capacity": str(self.max_capacity),
            "window_ms": str(ms(self.window)),
            "resume_fraction": repr(float(self.resume_fraction)),
            "retry_after_cap_ms": str(ms(self.retry_after_cap)),
            "idle_ms": str(max(1000, ms(self.idle_expiry))),
            "log_length": str(self.log_length),
            "priorities": ",".join(self.priorities),
            "default_priority": self.default_priority,
            "aging_ms": str(0 if self.aging is None else max(1, ms(self.aging))),
            "tenant_weights": format_weights(self.tenant_weights),  # type: ignore[arg-type]
            "default_weight": str(self.default_weight),
            "tenant_caps": format_weights(self.tenant_caps),  # type: ignore[arg-type]
            "reserve": str(self.reserve),
            **{config_field(k): str(getattr(self, config_field(k)) or 0) for k in BUDGET_KINDS},
            **self.policy.script_fields(window=self.window),  # unset durations follow the window
        }
        return [part for pair in pairs.items() for part in pair]

    @classmethod
    def from_stored(
        cls, stored: Mapping[str, str], base: GovernorConfig | None = None, name: str | None = None
    ) -> GovernorConfig:
        """The config a stored config hash describes (the inverse of
        :meth:`script_fields`), on ``base``'s client-side settings (prefix,
        timeouts). StateError when it is incomplete or unreadable."""
        try:
            policy = REGISTRY[stored["policy"]].from_stored(dict(stored))
            values: dict[str, Any] = {
                "max_capacity": int(stored["max_capacity"]),
                "window": int(stored["window_ms"]) / 1000,
                "resume_fraction": float(stored["resume_fraction"]),
                "retry_after_cap": int(stored["retry_after_cap_ms"]) / 1000,
                "idle_expiry": int(stored["idle_ms"]) / 1000,
                "log_length": int(stored["log_length"]),
                "priorities": tuple(stored["priorities"].split(",")),
                "default_priority": stored["default_priority"],
                "aging": int(stored["aging_ms"]) / 1000 or None,
                "tenant_weights": parse_weights(stored["tenant_weights"]),
                "default_weight": int(stored["default_weight"]),
                "tenant_caps": parse_weights(stored["tenant_caps"]),
                "reserve": int(stored["reserve"]),
                **{config_field(k): int(stored_field(stored, config_field(k))) or None for k in BUDGET_KINDS},
            }
            return dataclasses.replace(base or cls(), policy=policy, **values)
        except (KeyError, ValueError, ConfigError) as error:
            raise StateError(
                f"governor {name!r}: the stored config is incomplete or unreadable ({error!r})", name=name
            ) from error

    @property
    def renew_interval(self) -> float:
        """How often held leases are renewed."""
        return self.lease_ttl / 3


def tenant_pairs(name: str, value: object, high: int) -> tuple[tuple[str, int], ...]:
    """Tenant weights or caps (``name``) as (tenant, n) pairs, sorted, each n
    an integer in [1, high]; ConfigError when not (0 or below gets nothing)."""
    pairs = list(value.items()) if isinstance(value, Mapping) else list(value)  # type: ignore[call-overload]
    normal: dict[str, int] = {}
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ConfigError(f"{name} must map tenant names to integers, got {value!r}")
        tenant, n = pair
        validate_tenant(tenant)
        _check_int(f"{name}[{tenant!r}]", n)
        if not 1 <= n <= high:
            raise ConfigError(
                f"{name}[{tenant!r}] must be an integer in [1, {high}] (0 or below gets nothing), got {n!r}"
            )
        normal[tenant] = n
    return tuple(sorted(normal.items()))


def format_weights(weights: tuple[tuple[str, int], ...]) -> str:
    """Tenant weights (or caps) as stored: ``tenant=weight,...`` ('' for none)."""
    return ",".join(f"{tenant}={weight}" for tenant, weight in weights)


def parse_weights(stored: str) -> tuple[tuple[str, int], ...]:
    """The inverse of :func:`format_weights`; ValueError when malformed."""
    if not stored:
        return ()
    pairs = []
    for item in stored.split(","):
        tenant, sep, weight = item.partition("=")
        if not sep or not weight.isdigit():
            raise ValueError(f"tenant weights {stored!r} are not tenant=weight pairs")
        pairs.append((tenant, int(weight)))
    return tuple(pairs)


def _check_weight(name: str, value: object) -> None:
    _check_int(name, value)
    if not 1 <= value <= MAX_WEIGHT:  # type: ignore[operator]
        raise ConfigError(f"{name} must be an integer in [1, {MAX_WEIGHT}] (0 or below gets nothing), got {value!r}")


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")


def _check_float(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value!r}")


def _within(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    """How ``Governor.call`` retries throttled calls. Times in seconds."""

    #: calls in all, the first included; quota exhaustion is never retried
    max_attempts: int = 8
    #: give up (re-raise the last error) once this much time has passed; None: no deadline
    deadline: float | None = 600.0
    #: full-jitter backoff without a Retry-After: uniform(0, min(cap, base * 2**(n-1)))
    base: float = 0.25
    cap: float = 120.0
    #: a provider's Retry-After longer than this is cut to it
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        _check_int("max_attempts", self.max_attempts)
        _at_least("max_attempts", self.max_attempts, 1)
        for name in ("base", "cap", "max_retry_after"):
            _check_float(name, getattr(self, name))
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if self.deadline is not None:
            _check_float("deadline", self.deadline)
            if self.deadline <= 0:
                raise ConfigError(f"deadline must be > 0 seconds or None, got {self.deadline!r}")
