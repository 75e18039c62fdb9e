"""The protocol between the Python client and the Lua scripts, in one place.

Every key of a governor, every stored field (one vocabulary: the names an
operator reads with ``redis-cli HGETALL`` are the names the scripts, the
client, the CLI and the docs use), the holder record, the outcome codes,
every reply kind and the wake messages. ``governor/scripts.py`` builds the
Lua field table of each script from :data:`FIELDS`, so a field's kind and
range are written once; ``tests/test_protocol.py`` checks that the Lua
names no key, field, reply or wake word this module does not.

Keys (all under one hash tag, so a script touches them atomically on a
cluster; ``v3`` is :data:`SCHEMA_VERSION`, the key prefix of every version
from this one on: one governor name is one set of keys, whatever version of
the client uses it; what a version may do with them is the state's layout,
:data:`LAYOUT`)::

    governor:v3:{N}:state     hash    admission state: capacity, pause, hold, fences
    governor:v3:{N}:config    hash    the stored config (the policy's numbers included)
    governor:v3:{N}:policy    hash    what the policy learnt (its own fields)
    governor:v3:{N}:leases    zset    lease id -> expiry (ms); in-flight = live members
    governor:v3:{N}:holders   hash    lease or waiter id -> holder record
    governor:v3:{N}:queue     zset    waiter id -> band * 2^50 + tag (see QUEUE_BAND)
    governor:v3:{N}:waiters   zset    waiter id -> deadline (ms) to refresh by
    governor:v3:{N}:attempts  zset    "seq:outcome" -> time (ms): the window
    governor:v3:{N}:limited   zset    the rate-limited subset of attempts
    governor:v3:{N}:events    stream  the decision log (capped)
    governor:v3:{N}:aging     zset    waiter id -> time (ms) it goes ahead of every class
    governor:v3:{N}:shares    zset    "rank:tenant" -> rank * 2^50 + its finish tag (fair queueing)
    governor:v3:{N}:held      hash    tenant -> its leases in flight (capped tenants); "@": the lower classes'
    governor:v3:{N}:parked    zset    waiter id -> slot * 2^40 + seq: waiters of a tenant at its cap
    governor:v3:{N}:spend     hash    the spend (usd) budgets: each window's micro-dollars (governor/spend.py)

Grants are announced on the pub/sub channel ``governor:v3:{N}:wake``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .budgets import KIND_TIER, config_field
from .budgets import KINDS as BUDGET_KINDS
from .budgets import SOURCES as BUDGET_SOURCES
from .errors import ConfigError

SCHEMA_VERSION = 3
DEFAULT_PREFIX = "governor"

#: GovernorConfig's default lease TTL (s): also the recovery hold of a state that records none
DEFAULT_LEASE_TTL = 30.0
#: the layout of the state this client writes and reads: the fields, keys and
#: rules it relies on. 3: the last layout before the origin stamp (its states
#: carry none); 4: the origin stamp, the recovery hold of its own, ttl_max;
#: 5: a service tier's budgets apart (fast mode) and the records of its leases.
LAYOUT = 5
#: the oldest client layout that may use a state this client writes: a client
#: of layout 3 reads and admits on it correctly (the recovery hold is in
#: not_before too, which it honours); what it does not know it leaves alone
MIN_LAYOUT = 3
#: the oldest client layout that may use a state once it holds what an older
#: client would misread: a lease's or a waiter's record of a tier (``output,tier``,
#: HolderRecord) or a tier's budget active. The call that writes it stamps the
#: state so (its origin's min_layout, lua/lib/origin.lua), and a client of layout
#: 4 refuses it (LayoutError) instead of granting a fast waiter on the standard
#: budgets or losing a fast lease's record; a stamp never goes back down.
TIERS_LAYOUT = 5

# -- keys ----------------------------------------------------------------------------------

#: every key of a governor: (name, Redis type), in the order the scripts bind them
KEYS: tuple[tuple[str, str], ...] = (
    ("state", "hash"),
    ("config", "hash"),
    ("policy", "hash"),
    ("leases", "zset"),
    ("holders", "hash"),
    ("queue", "zset"),
    ("waiters", "zset"),
    ("attempts", "zset"),
    ("limited", "zset"),
    ("events", "stream"),
    ("aging", "zset"),
    ("shares", "zset"),
    ("held", "hash"),
    ("parked", "zset"),
    ("spend", "hash"),
)
KEY_NAMES: tuple[str, ...] = tuple(name for name, _ in KEYS)

_NAME = re.compile(r"^[A-Za-z0-9_.:\-/@]{1,200}$")
_TENANT = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
_TIER = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_CLASS = re.compile(r"^[a-z0-9_\-]{1,32}$")
#: the tenant of a caller that names none
DEFAULT_TENANT = "default"
_PREFIX = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


def validate_name(name: str) -> str:
    """Return ``name`` if it can name a governor, else raise :class:`ConfigError`.

    Braces are refused because they would break the hash tag; whitespace and
    control characters because operators type these names into redis-cli.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"governor name {name!r} is invalid: use 1-200 characters of "
            "letters, digits and _ . : - / @ (no braces, no spaces)"
        )
    return name


def validate_tenant(tenant: str) -> str:
    """Return ``tenant`` if it can name a tenant, else raise :class:`ConfigError`."""
    if not isinstance(tenant, str) or not _TENANT.match(tenant):
        raise ConfigError(f"tenant {tenant!r} is invalid: use 1-64 characters of letters, digits and _ . : -")
    return tenant


def validate_class(name: str) -> str:
    """Return ``name`` if it can name a priority class, else raise :class:`ConfigError`."""
    if not isinstance(name, str) or not _CLASS.match(name):
        raise ConfigError(f"priority class {name!r} is invalid: use 1-32 characters of a-z, 0-9, _ and -")
    return name


@dataclass(frozen=True)
class GovernorKeys:
    """The Redis keys and pub/sub channel of one governor."""

    name: str
    state: str  #: hash: admission state (see STATE)
    config: str  #: hash: the stored config (see CONFIG)
    policy: str  #: hash: what the policy learnt (see POLICY_STATE and governor.policies)
    leases: str  #: zset: lease id -> expiry in ms
    holders: str  #: hash: lease or waiter id -> holder record (see HolderRecord)
    queue: str  #: zset: waiter id -> band * QUEUE_BAND + tag (the head is admitted first)
    waiters: str  #: zset: waiter id -> deadline in ms
    attempts: str  #: zset: every attempt in the window -> time in ms
    limited: str  #: zset: rate-limited attempts in the window -> time in ms
    events: str  #: stream: the decision log
    aging: str  #: zset: waiter id -> ms when it goes ahead of every class
    shares: str  #: zset: "rank:tenant" -> finish tag, the start of its next waiter's tag in that class
    held: str  #: hash: a capped tenant -> its leases in flight; LOWER_HELD -> the lower classes' (see PARK_SLOT)
    parked: str  #: zset: waiter id -> slot * PARK_SLOT + seq, a waiter of a tenant at its cap
    spend: str  #: hash: the spend budgets' windows, definitions, approvals and reservations (lua/lib/spending.lua)
    channel: str  #: pub/sub channel announcing grants (not a key)

    #: the Redis type of each key of :attr:`keys`, in the same order
    TYPES = tuple(kind for _, kind in KEYS)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key of the governor, in the order of KEYS."""
        return tuple(getattr(self, name) for name in KEY_NAMES)

    @property
    def script_keys(self) -> tuple[str, ...]:
        """The KEYS of every function call: the state key alone. The library
        derives the others from it (each is the state key with ``state``
        replaced by its name: one prefix, one hash tag, one slot); each key
        passed would cost the call about 1,300 server instructions."""
        return (self.state,)


def governor_keys(name: str, prefix: str = DEFAULT_PREFIX) -> GovernorKeys:
    """Every key of governor ``name``, sharing the hash tag ``{name}``."""
    validate_name(name)
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ConfigError(f"key prefix {prefix!r} is invalid: use 1-64 characters of letters, digits and _ . : -")
    base = f"{prefix}:v{SCHEMA_VERSION}:{{{name}}}"
    return GovernorKeys(name=name, **{key: f"{base}:{key}" for key in KEY_NAMES}, channel=f"{base}:wake")


def name_from_state_key(key: str, prefix: str = DEFAULT_PREFIX) -> str | None:
    """The governor name in a ``state`` key found by SCAN, or None."""
    head, tail = f"{prefix}:v{SCHEMA_VERSION}:{{", "}:state"
    if key.startswith(head) and key.endswith(tail):
        return key[len(head) : -len(tail)]
    return None


# -- stored fields -------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What a stored field may hold: an integer or number in [low, high], or
    a string (one of ``values`` when given)."""

    name: str  #: the Lua kind table's name
    type: str  #: 'int', 'num' or 'str'
    low: float = 0
    high: float = 0
    values: tuple[str, ...] = ()
    #: False: each write stores a value never stored before (a fence, the window's
    #: sequence number), so the library checks it without remembering it
    #: (lua/lib/common.lua: its memos would only fill with it)
    recurs: bool = True


MAX_INT = 2**53  # above it a Lua number is no longer an exact integer
#: the highest max_capacity (and so capacity, a cap, a reserve) a governor takes
MAX_CAPACITY = 1_000_000
COUNT = Kind("COUNT", "int", 0, MAX_INT)  #: a counter, a fence or a time in ms (0: none)
LEVEL = Kind("LEVEL", "int", 0, MAX_CAPACITY)  #: a capacity
CEILING = Kind("CEILING", "int", 1, MAX_CAPACITY)  #: max_capacity
POSITIVE = Kind("POSITIVE", "int", 1, MAX_CAPACITY)  #: a count that must be >= 1
FLAG = Kind("FLAG", "int", 0, 1)
SHARE = Kind("SHARE", "num", 0, 1)
TEXT = Kind("TEXT", "str")
DAY_MS = 86_400_000
DURATION = Kind("DURATION", "int", 0, DAY_MS)  #: ms, at most a day
#: a lease's TTL in ms (GovernorConfig.lease_ttl, renewed every third): what
#: a client announces (init, acquire, renew) and the state keeps (ttl_max)
LEASE_TTL = Kind("LEASE_TTL", "int", 3, DAY_MS)
#: how long a waiter's place is kept unrefreshed, in ms (GovernorConfig.queue_ttl)
QUEUE_TTL = Kind("QUEUE_TTL", "int", 1, 2_592_000_000)
WINDOW = Kind("WINDOW", "int", 1, DAY_MS)  #: the outcome window, in ms
IDLE = Kind("IDLE", "int", 1000, 2_592_000_000)  #: ms idle before every key expires: 1 s to 30 days
LOG_LENGTH = Kind("LOG_LENGTH", "int", 1, 10_000_000)  #: the decision log's entries
STEP = Kind("STEP", "int", 1, MAX_INT)  #: a probe step
SEQUENCE = Kind("SEQUENCE", "int", 0, MAX_INT, recurs=False)  #: moves on at every write (HINCRBY)
KINDS: tuple[Kind, ...] = (
    COUNT, LEVEL, CEILING, POSITIVE, FLAG, SHARE, TEXT, DURATION, LEASE_TTL, QUEUE_TTL, WINDOW, IDLE, LOG_LENGTH, STEP,
    SEQUENCE,
)  # fmt: skip


#: the queue's order (lua/lib/queue.lua): a waiter's score is ``band *
#: QUEUE_BAND + tag``; band 0 holds the aged waiters (they waited
#: GovernorConfig.aging), band r + 1 the class of rank r (0: the highest), so
#: ``ZRANGE queue 0 0`` is the head: a higher class first, then the smaller
#: tag. A tag is a start-time fair queueing virtual time, within each class:
#: a waiter of tenant t of weight w in class r starts at max(vtime_r, F), F
#: the finish tag of "r:t" in ``shares`` (its score there is r * QUEUE_BAND +
#: F, so each class's stale entries are one range), and moves F on by
#: ceil(QUANTUM / w); a grant moves its class's vtime_r up to its tag. Tags
#: grow by at most QUANTUM per grant, so 2^50 lasts 35 years at 1,000 grants a
#: second. MAX_CLASSES keeps every score below 2^53.
QUEUE_BAND = 2**50
QUANTUM = 1000
MAX_CLASSES = 7
MAX_WEIGHT = 1000

#: caps and the reserve (lua/lib/shares.lua): ``held`` counts the leases
#: of each tenant with a cap (GovernorConfig.tenant_caps) and, under
#: LOWER_HELD (no tenant's name), of the classes below the highest while a
#: reserve is set (GovernorConfig.reserve), from the grant until the lease
#: is released or reclaimed; a field goes when it reaches 0. A waiter at the
#: head of the queue whose tenant is at its cap leaves the queue for
#: ``parked``, scored ``slot * PARK_SLOT + seq`` (slot: the tenant's place in
#: tenant_caps, from 1; seq: state ``park_seq``), so a tenant's parked
#: waiters are one range in the order they were parked; each lease of the
#: tenant that ends puts its first parked waiter back at the front of its class.
PARK_SLOT = 2**40
MAX_CAPPED = 1000
MAX_CAP = MAX_CAPACITY
LOWER_HELD = "@"


def ms(seconds: float) -> int:
    """Seconds to whole milliseconds, as the scripts count time."""
    return round(seconds * 1000)


BUDGET_LEVEL = Kind("BUDGET_LEVEL", "num", -MAX_INT, MAX_INT)  #: a bucket's level (below 0: charged beyond)
BUDGET_SOURCE = Kind("BUDGET_SOURCE", "str", values=("", *BUDGET_SOURCES))
#: the active kinds: any of them, in KINDS order ('' none)
BUDGET_LIST = Kind(
    "BUDGET_LIST",
    "str",
    values=tuple(
        ",".join(kind for i, kind in enumerate(BUDGET_KINDS) if mask >> i & 1) for mask in range(2 ** len(BUDGET_KINDS))
    ),
)


def budget_fields(kind: str) -> dict[str, Kind]:
    """A budget kind's fields in ``state`` (governor/budgets.py): its limit per
    minute (0: not governed), burst, level at ``<kind>_at`` ms, and source."""
    return {
        f"{kind}_limit": COUNT,
        f"{kind}_burst": COUNT,
        f"{kind}_level": BUDGET_LEVEL,
        f"{kind}_at": COUNT,
        f"{kind}_source": BUDGET_SOURCE,
    }


#: the ``state`` hash: what admission reads and writes
STATE: dict[str, Kind] = {
    "schema": Kind("VERSION", "int", 1, 1_000_000),
    "epoch": TEXT,  #: id of this incarnation of the state
    "created": COUNT,  #: ms
    "capacity": LEVEL,  #: the current limit (0 only while paused)
    "paused": FLAG,
    "pause_kind": Kind("PAUSE_KIND", "str", values=("", "policy", "operator")),
    "pause_reason": TEXT,
    "paused_until": COUNT,  #: ms; 0: until resumed (or, for the policy, until the window drains)
    "saved_capacity": LEVEL,  #: capacity to return to after an operator pause
    #: ms: admissions held until then: a provider's Retry-After, and the recovery hold (hold_until)
    "not_before": COUNT,
    "fence": SEQUENCE,  #: the last fence handed out (HINCRBY)
    #: each class's fair-queueing virtual time: the largest tag granted in it (see QUEUE_BAND)
    **{f"vtime_{rank}": COUNT for rank in range(MAX_CLASSES)},
    "aging_due": COUNT,  #: ms: the earliest time a waiter goes ahead of every class (0: none waits to)
    "park_seq": COUNT,  #: the last waiter parked at its tenant's cap (see PARK_SLOT)
    "capped": FLAG,  #: 1 while config tenant_caps or reserve is set: an admission without a queue reads them
    "event_seq": SEQUENCE,  #: the last window event's sequence number
    "quota_exhausted": COUNT,  #: quota-exhausted reports since creation
    "quota_at": COUNT,  #: ms of the last one
    "touch_due": COUNT,  #: ms: when every key's expiry is pushed back next
    "reclaim_due": COUNT,  #: ms: when expired leases and dead waiters are removed next
    "budgets": BUDGET_LIST,  #: the active budget kinds, comma-separated in governor.budgets.KINDS order
    **{name: kind for k in BUDGET_KINDS for name, kind in budget_fields(k).items()},
}

#: fields of ``state`` a state of an older layout may lack (not in :func:`required`):
#: where the state came from, the recovery hold, and when the last per-day quota comes back
STATE_ORIGIN: dict[str, Kind] = {
    #: "layout:min_layout:run_id:replid": the layout that wrote the state, the oldest
    #: client layout that may use it, and the Redis server (INFO server run_id) and
    #: replication id it was written under; a state stamped by another server came
    #: back (a restart that loaded it, a promoted replica, a restore, a migration)
    "origin": TEXT,
    #: the cluster node id the state was stamped on ('' standalone): a state stamped by
    #: another node that is a live primary now was moved intact by a slot migration
    "origin_node": TEXT,
    "hold_until": COUNT,  #: ms: the recovery hold's end (0: none); not_before covers it too
    "hold_reason": TEXT,  #: why the recovery hold runs ('' none)
    #: ms: the longest lease TTL its clients announced lately: in the current period and
    #: the one before (a period lasts twice ttl_max: a TTL counts for at least twice its
    #: own length after its last announcement, then decays)
    "ttl_max": LEASE_TTL,
    "ttl_cur": LEASE_TTL,  #: ms: the longest lease TTL announced in the current period
    "ttl_since": COUNT,  #: ms: when the current period started
    #: 1: a client declared the server durable (GovernorConfig.durable_redis): a state it
    #: reloads from its append-only file at a restart is no loss
    "durable": FLAG,
    #: ms: when the last exhausted quota comes back, as the provider said (0: unknown, or none reported)
    "quota_until": COUNT,
    #: ms: until when the spend key must exist (its longest window's end): a spend key gone before was lost
    "spend_until": COUNT,
}

#: the fields a later version added to the ``state`` and ``config`` hashes every
#: governor holds, each with the stored value it reads as when absent: a state or a
#: config an older version created lacks them (fast mode's budgets: not governed).
#: Not in :func:`required`; a value present is checked as any other's.
ADDED: dict[str, str] = {
    **{name: "" if kind.type == "str" else "0" for k in KIND_TIER for name, kind in budget_fields(k).items()},
    **{config_field(k): "0" for k in KIND_TIER},
}


def stored_field(stored: Mapping[str, str], field: str) -> str:
    """``field`` of a stored hash; one a later version added reads as its
    default when absent (:data:`ADDED`), any other absent is a KeyError."""
    return stored[field] if field in stored or field not in ADDED else ADDED[field]


#: the ``config`` hash: the config a client stored (GovernorConfig.script_fields):
#: these fields, then the fields of its policy (each policy names its own in
#: governor/policies.py, and its learnt state, in the ``policy`` hash)
CONFIG: dict[str, Kind] = {
    "policy": Kind("POLICY", "str"),  #: a name of governor.policies.REGISTRY
    "max_capacity": CEILING,
    "window_ms": WINDOW,
    "resume_fraction": SHARE,  #: a pause lifts at max(1, floor(max_capacity * resume_fraction))
    "retry_after_cap_ms": DURATION,
    "idle_ms": IDLE,
    "log_length": LOG_LENGTH,
    "priorities": TEXT,  #: the priority classes, highest first, comma-separated
    "default_priority": TEXT,  #: the class of a caller that names none
    "aging_ms": DURATION,  #: a waiter of a lower class goes ahead of every class after this (0: never)
    "tenant_weights": TEXT,  #: "tenant=weight,..." ('' none): each tenant's share of the queue
    "default_weight": Kind("WEIGHT", "int", 1, MAX_WEIGHT),  #: the weight of a tenant not listed
    "tenant_caps": TEXT,  #: "tenant=cap,..." ('' none): at most cap leases of the tenant in flight
    "reserve": LEVEL,  #: slots of capacity that only the highest class takes (see PARK_SLOT)
    #: each budget kind's configured ceiling per minute (0: none; governor/budgets.py)
    **{config_field(k): COUNT for k in BUDGET_KINDS},
}


#: Every range a value is checked against, in one place. The scripts' ranged
#: arguments (lua/lib/args.lua arg_in: the blueprint's ARGS) and
#: GovernorConfig's fields (governor/config.py: ``name -> (kind, scale)``, the
#: field times scale is what a script receives and a hash may store) take the
#: kinds of the fields they end up in, so a value a client may send is one
#: the state's reader accepts: nothing stored is ever out of range
#: (a field found out of range all the same is repaired, lua/lib/fields.lua).
ARGUMENTS: dict[str, Kind] = {
    "ttl_ms": LEASE_TTL,  #: init, acquire, renew: becomes the state's ttl_max
    "queue_ttl_ms": QUEUE_TTL,  #: acquire, refresh
    "notice_ms": DURATION,  #: init
}
CONFIG_RANGES: dict[str, tuple[Kind, int]] = {
    "lease_ttl": (LEASE_TTL, 1000),
    "queue_ttl": (QUEUE_TTL, 1000),
    "window": (WINDOW, 1000),
    "retry_after_cap": (DURATION, 1000),
    "idle_expiry": (IDLE, 1000),
    "log_length": (LOG_LENGTH, 1),
    "max_capacity": (CEILING, 1),
}


#: the ``policy`` hash: ``streak`` (successes in a row since the last change)
#: is every policy's; each policy names its own other fields (governor/policies.py)
POLICY_STATE: dict[str, Kind] = {"streak": COUNT}


#: the fields the hot paths (acquire, report, release, a hand-over) read of
#: the config and the policy: a new hash stores them first, so that a lookup
#: (a small hash is a listpack, scanned from its start for each field) finds
#: them early. (Not the state's: on a real Redis it is a hash table, its
#: origin stamp, about 86 bytes, being above the 64 of
#: hash-max-listpack-value, where the order changes nothing.)
HOT: dict[str, tuple[str, ...]] = {
    "config": ("policy", "max_capacity", "window_ms", "idle_ms", "log_length", "aging_ms", "tenant_caps", "reserve"),
    "policy": ("streak",),
}


def required() -> dict[str, tuple[str, ...]]:
    """The fields every governor's hashes hold, whatever its policy (the
    fields a later version added, :data:`ADDED`, aside)."""
    return {
        "state": tuple(f for f in STATE if f not in ADDED),
        "config": tuple(f for f in CONFIG if f not in ADDED),
        "policy": tuple(POLICY_STATE),
    }


#: the entry ``leases`` (score 0: never live) and ``holders`` (value '') each
#: keep, so neither key is deleted when the last lease goes and both keep
#: the expiry the scripts gave them, and ``held`` (value '') while caps or a
#: reserve are set: a key without it was lost (lua/lib/origin.lua); never a valid id
SENTINEL = "~"

# -- the holder record ---------------------------------------------------------------------


@dataclass(frozen=True)
class HolderRecord:
    """``holders`` entry of a lease or waiter:
    ``fence|ttl_ms|since_ms|input|output|level|rank|tenant|holder``.

    ``fence`` is 0 for a waiter; ``input`` and ``output`` are the tokens the
    lease reserved (governor.budgets.Tokens): what it takes from the budgets;
    ``level`` the leases in flight when it was granted, itself included (0
    for a waiter): the load the provider saw the call at; ``rank`` its
    priority class's rank (0: the highest), ``tenant`` whose share it
    counts in (see QUEUE_BAND). A lease of a service tier with budgets of
    its own (governor.budgets.TIERS_APART) has ``output,tier`` for its output
    (``tier``); any other's is the output alone (``tier`` '')."""

    fence: int
    ttl_ms: int
    since_ms: int
    input: int
    output: int
    level: int
    rank: int
    tenant: str
    holder: str
    tier: str = ""  #: the tier its tokens count in ('' the standard one)

    @classmethod
    def parse(cls, raw: str | None) -> HolderRecord | None:
        if raw is None:
            return None
        parts = raw.split("|", 8)
        if len(parts) != 9:
            return None
        output, _, tier = parts[4].partition(",")
        parts[4] = output
        if not all(p.isdigit() for p in parts[:7]) or not _TENANT.match(parts[7]) or (_ and not _TIER.match(tier)):
            return None
        fence, ttl_ms, since_ms, input_, output_, level, rank = (int(p) for p in parts[:7])
        return cls(fence, ttl_ms, since_ms, input_, output_, level, rank, parts[7], parts[8], tier)

    def format(self) -> str:
        output = f"{self.output},{self.tier}" if self.tier else str(self.output)
        return (
            f"{self.fence}|{self.ttl_ms}|{self.since_ms}|{self.input}|{output}|{self.level}|{self.rank}|"
            f"{self.tenant}|{self.holder}"
        )


# -- outcomes, replies and wake messages ----------------------------------------------------


class Outcome(enum.Enum):
    """What became of one provider call: reported to the governor, and what a
    classifier says of a failure."""

    SUCCESS = "s"  #: the provider answered
    RATE_LIMITED = "r"  #: throttled: 429, or overloaded (529, 503)
    ERROR = "e"  #: failed otherwise; counts as an attempt, moves nothing
    QUOTA_EXHAUSTED = "q"  #: billing limit: recorded for operators, never a policy input


#: report.lua's outcome code of a RATE_LIMITED report that is no load signal
#: (``report(..., load=False)``: an overload, a 529, headers showing requests and
#: tokens remaining): the adaptive policy weighs it as the provider's background;
#: a policy without a rule for it reads it as ``r``
BACKGROUND_REFUSAL = "b"


#: every script's reply kinds (the second element of each reply)
REPLIES: dict[str, tuple[str, ...]] = {
    "init": ("created", "exists"),
    "acquire": ("granted", "queued", "denied", "refused", "missing"),
    "release": ("released", "missing"),
    "cancel": ("cancelled", "missing"),
    "renew": ("renewed", "missing"),
    "report": ("reported", "lost", "missing"),
    "refresh": ("refreshed", "missing"),
    "probe": ("status", "missing"),
    "status": ("status", "missing"),
    "set_max": ("status", "missing"),
    "set_shares": ("status", "missing"),
    "pause": ("status", "missing"),
    "resume": ("status", "missing"),
    "reset": ("status", "missing"),
    "spend": ("reserved", "settled", "approved", "spend_exhausted", "missing"),
}

#: the fields of a status reply, in order
STATUS_FIELDS: tuple[str, ...] = (
    "now",
    "epoch",
    "policy",
    "capacity",
    "max_capacity",
    "reserve",
    "paused",
    "pause_kind",
    "pause_reason",
    "paused_until",
    "not_before",
    "in_flight",
    "queued",
    "window_rate_limited",
    "window_attempts",
    "window_ms",
    "streak",
    "fence",
    "ceiling",
    "background_ppm",
    "quota_exhausted",
    "quota_at",
    "quota_until",
    "created",
    "blocked",
    "hold_until",
    "hold_reason",
    "ttl_max",
    "held_back",
    "budgets",
)

#: wake message words after the epoch: "id:fence" grants, "@ms" ask again
#: in ms (a hold or timed pause keeps queued callers out), "!config" the
#: stored config changed, "~ms" the longest lease TTL announced rose to ms;
#: the epoch alone announces a new state
WAKE_RETRY = "@"
WAKE_CONFIG = "!config"
WAKE_TTL = "~"


@dataclass(frozen=True)
class Wake:
    """A message on the wake channel."""

    epoch: str
    grants: dict[str, int]  #: id -> fence
    #: seconds until a hold or a timed pause that kept queued callers out ends
    retry_in: float | None = None
    #: an operator changed the stored config (set-max, reset): learn it anew
    config_changed: bool = False
    #: ms: the longest lease TTL announced rose to this (None: not told)
    ttl_max: int | None = None

    @classmethod
    def parse(cls, data: str) -> Wake:
        words = data.split()
        grants: dict[str, int] = {}
        retry_in = ttl_max = None
        config_changed = False
        for word in words[1:]:
            if word.startswith(WAKE_RETRY) and word[1:].isdigit():
                retry_in = int(word[1:]) / 1000
            elif word == WAKE_CONFIG:
                config_changed = True
            elif word.startswith(WAKE_TTL) and word[1:].isdigit():
                ttl_max = int(word[1:])
            else:
                lease_id, _, fence = word.rpartition(":")
                if lease_id and fence.isdigit():
                    grants[lease_id] = int(fence)
        return cls(words[0] if words else "", grants, retry_in, config_changed, ttl_max)
