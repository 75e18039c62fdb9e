"""What the core's calls answer: the frozen values built from the scripts'
replies (a status, a grant, a place in the queue, a renewal...), where a
caller waits (:class:`Place`) and what it asks for (:class:`Ask`), and a
script call as the facades run it (:class:`Call`). Values only: the core
(:mod:`governor.core`) builds and parses them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from .budgets import Budget, Tokens
from .errors import ConfigError
from .protocol import SCHEMA_VERSION

R = TypeVar("R", covariant=True)


class _Unset:
    """The type of UNSET: an argument not given (None has a meaning of its own)."""


UNSET = _Unset()


@dataclass(frozen=True)
class Place:
    """Where a caller waits in the queue: its priority class (and the class's
    rank, 0 the highest) and its tenant (and the tenant's weight), as the
    fleet's stored config names them."""

    priority: str
    rank: int
    tenant: str
    weight: int

    def args(self) -> tuple[str, str, str]:
        """acquire.lua's ARGV[9..11]."""
        return (str(self.rank), self.tenant, str(self.weight))


#: (process id, label) of the last default_holder(): a forked child makes its own
_default_holder = (-1, "")


def default_holder() -> str:
    """The holder label when none is given: host name and process id (the
    host name is asked for once per process, not on every acquire)."""
    global _default_holder
    pid = os.getpid()
    if _default_holder[0] != pid:
        _default_holder = (pid, f"{socket.gethostname()}/{pid}")
    return _default_holder[1]


def holder_label(holder: str | None) -> str:
    """``holder`` checked (at most 200 bytes), or this host's and process's label for None."""
    if holder is None:
        return default_holder()
    if not isinstance(holder, str) or len(holder.encode()) > 200:
        raise ConfigError(f"holder must be a string of at most 200 bytes, got {holder!r}")
    return holder


@dataclass(frozen=True)
class Ask:
    """Who asks for a lease and for what, built once where a public call
    takes its arguments (:meth:`governor.core.GovernorCore.ask`, checked
    there) and carried down to the lease: the holder's label, the tokens
    reserved from the budgets, the class and tenant as the caller named them
    (None: the defaults), and the place they give in the queue."""

    holder: str
    tokens: Tokens
    priority: str | None
    tenant: str | None
    #: where it waits, by the fleet's config when it was built (GovernorCore.placed renews it)
    place: Place

    def reserving(self, tokens: Tokens | int | None) -> Ask:
        """The same ask for another estimate (``tokens`` as ``acquire(tokens=)`` takes them)."""
        return replace(self, tokens=Tokens.of(tokens))


@dataclass(frozen=True)
class Status:
    """A governor's state as the scripts see it. Times are Unix seconds."""

    name: str  #: the governor
    capacity: int  #: current adaptive limit (0 only while paused)
    max_capacity: int  #: configured ceiling
    paused: bool  #: new admissions stopped
    pause_reason: str  #: why paused ('' when not)
    pause_kind: str  #: 'policy', 'operator' or ''
    paused_until: float | None  #: an operator pause's end, if it has one
    #: admissions held until then: a provider's Retry-After, or the recovery hold (hold_until)
    not_before: float | None
    in_flight: int  #: live leases
    queued: int  #: live waiters
    window_rate_limited: int  #: rate-limited attempts in the window
    window_attempts: int  #: all attempts in the window
    window: float  #: window length, seconds
    policy: str  #: the policy's name (governor.policies.REGISTRY)
    ceiling: int  #: adaptive: in-flight level of the last pushback (0 unknown)
    streak: int  #: successes in a row since the last change
    fence: int  #: the last fence handed out
    quota_exhausted: int  #: quota-exhausted reports since creation
    quota_at: float | None  #: when the last one came
    epoch: str  #: id of this incarnation of the state (changes when state is lost)
    created: float  #: when this incarnation was created
    now: float  #: the clock the scripts used
    #: why a new caller would wait now, in the admission rule's words ('' if it would not)
    blocked: str = ""
    #: while a new caller of the default class and tenant would be admitted: who would
    #: not be (the classes below the highest at the reserve, tenants at their caps), in
    #: the admission rule's words, '; '-separated ('' nobody)
    held_back: str = ""
    #: slots of capacity only the highest class takes (the stored config's reserve; 0: none)
    reserve: int = 0
    #: the active budgets (requests and tokens per minute), in governor.budgets.KINDS order
    budgets: tuple[Budget, ...] = ()
    schema: int = SCHEMA_VERSION  #: schema version of the state and replies
    #: the recovery hold's end (after a loss; None: none): only resume(lift_recovery_hold=True) ends it
    hold_until: float | None = None
    hold_reason: str = ""  #: why the recovery hold runs ('' none)
    ttl_max: float = 0.0  #: the longest lease TTL clients announced lately: the length of a recovery hold
    #: when the last exhausted quota comes back, as the provider said (None: unknown, or none reported)
    quota_until: float | None = None
    #: adaptive: the estimated share of calls the provider refuses whatever the fleet's load
    #: (its background: a refusal it explains cuts nothing; docs/usage.md)
    background: float = 0.0

    def budget(self, kind: str) -> Budget | None:
        """The active budget of ``kind``, or None when that kind is not governed."""
        return next((b for b in self.budgets if b.kind == kind), None)

    @property
    def rate_limited_share(self) -> float:
        """Rate-limited share of the attempts in the window (0 when empty)."""
        return self.window_rate_limited / self.window_attempts if self.window_attempts else 0.0

    @property
    def holding(self) -> bool:
        """True while a provider's Retry-After or the recovery hold holds new admissions."""
        return self.not_before is not None and self.not_before > self.now

    @property
    def recovery_hold(self) -> bool:
        """True while the recovery hold runs (``hold_until``)."""
        return self.hold_until is not None and self.hold_until > self.now


class Missing:
    """A script found no state: the governor must be (re)created first."""


MISSING = Missing()


@dataclass(frozen=True)
class Granted:
    """acquire/refresh: the caller holds a lease."""

    fence: int
    epoch: str
    #: seconds the lease had left when the script answered (None: not known,
    #: e.g. a grant announced on pub/sub)
    remaining: float | None = None


@dataclass(frozen=True)
class Queued:
    """acquire: the caller waits in the FIFO queue."""

    position: int  #: waiters ahead of it (0 = next)
    reason: str  #: why it is not admitted now
    hint: float  #: seconds until asking again may pay off (0: no idea)
    epoch: str


@dataclass(frozen=True)
class Denied:
    """try_acquire: not admitted now."""

    reason: str
    hint: float
    epoch: str


@dataclass(frozen=True)
class Refreshed:
    """refresh: where each of a process's waiters stands."""

    epoch: str
    reason: str
    hint: float
    granted: dict[str, tuple[int, float]]  #: id -> (fence, seconds the lease had left)
    #: id -> (waiters ahead of it, -1 parked at its tenant's cap; what holds it, for its own cost and place)
    queued: dict[str, tuple[int, str]]
    unknown: tuple[str, ...]  #: no longer queued nor granted: enqueue again


@dataclass(frozen=True)
class Renewed:
    """renew: the fate of each lease of a heartbeat."""

    epoch: str
    ok: tuple[str, ...]
    adopted: dict[str, int]  #: id -> new fence (the state was lost and re-created)
    lost: tuple[str, ...]


@dataclass(frozen=True)
class Call(Generic[R]):
    """One script invocation: which script, its ARGV, and how to read the reply."""

    script: str
    args: tuple[str, ...]
    parse: Callable[[Any], R | Missing]
    #: recreate the state and call again when it is missing; else return `if_missing`
    recreate: bool = True
    if_missing: Any = None
    #: what it answers (a grant, a renewal) is relied on: with ``wait_replicas``
    #: the facade has it confirmed by the replicas (Redis WAIT) first
    confirm: bool = False
