"""Read-only views of governors for operators: the CLI and the exporter.

Everything here only reads Redis: the list of governors (found with SCAN,
never KEYS), the holders of the leases, the waiters of the queue, the
decision log and the keys themselves. Times are the Redis server's
(``TIME``), the clock the scripts use, so ages and TTLs agree with what the
scripts will decide. Writes go through :class:`governor.Governor`.

The ``holders`` hash keeps a :class:`governor.protocol.HolderRecord`
(``"fence|ttl_ms|since_ms|input|output|level|rank|tenant|holder"``) for
every lease and waiter id; ``since`` is when the lease was granted or the
waiter joined the queue, and a waiter's fence is 0 until it is granted. A
record's ``rank`` is named with the stored config's ``priorities``; the
queue's score is ``band * QUEUE_BAND + tag`` (band 0: aged). Counts per
class and tenant (:func:`count_shares`) are made here, from the listings:
the scripts keep no such counts. ``leases`` and ``holders`` each
keep the entry :data:`governor.protocol.SENTINEL`, which is never a lease:
every listing and count here leaves it out.

:func:`read_overview` reads at once what ``governor status`` shows of one
governor (:class:`Overview`).

Why a caller waits is the scripts' answer (``Status.blocked``, worded once
by the admission rule in lua/lib/admission.lua); nothing here re-derives it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import parse_weights
from .core import Status, text
from .errors import GovernorError, map_errors
from .protocol import (
    KEYS,
    QUEUE_BAND,
    SCHEMA_VERSION,
    SENTINEL,
    GovernorKeys,
    HolderRecord,
    name_from_state_key,
)

#: SCAN batch size: big enough to walk a large keyspace in few round trips,
#: small enough that no single call blocks Redis
SCAN_COUNT = 1000

#: the fields every decision-log entry carries (see ``log()`` in lua/lib/common.lua)
COMMON_EVENT_FIELDS = ("kind", "at", "capacity", "paused")
#: the tenants beyond the top ones, in bounded views (never a tenant's name: a
#: tenant name has no parentheses)
OTHER = "(other)"
#: at most this many leases and waiters are read to count them per class and tenant
COUNT_LIMIT = 10_000
#: up to this many waiters, their deadlines are read one by one (ZSCORE)
_FEW = 64


# -- result types -------------------------------------------------------------


@dataclass(frozen=True)
class LeaseInfo:
    """One admitted holder. Times are Unix seconds on the Redis clock."""

    id: str  #: the lease id (member of the ``leases`` zset)
    holder: str  #: the label the holder gave, e.g. "host-3/agent-17"
    priority: str  #: the class it waited in (see :func:`class_name`)
    tenant: str  #: the tenant whose share it counts in
    fence: int  #: fencing token handed out with the grant
    since: float  #: when the lease was granted (or adopted)
    expires: float  #: when it expires unless renewed
    ttl: float  #: the TTL each renewal extends it by, seconds
    now: float  #: the server time of this reading

    @property
    def host(self) -> str:
        return host_of(self.holder)

    @property
    def age(self) -> float:
        """Seconds since the grant."""
        return max(0.0, self.now - self.since)

    @property
    def ttl_left(self) -> float:
        """Seconds until expiry (negative: expired, not yet reclaimed)."""
        return self.expires - self.now

    @property
    def live(self) -> bool:
        return self.expires > self.now


@dataclass(frozen=True)
class WaiterInfo:
    """One caller waiting in the queue. Times are Unix seconds on the Redis clock."""

    id: str  #: the waiter id (it becomes the lease id when granted)
    position: int  #: waiters ahead of it, 0 = next (what the waiter is told)
    holder: str  #: the label the caller gave
    priority: str  #: the class it waits in (see :func:`class_name`)
    tenant: str  #: the tenant whose share it counts in
    aged: bool  #: it waited ``aging`` and went ahead of every class (band 0)
    tag: int  #: its fair-queueing tag: the order within its band
    since: float  #: when it joined the queue
    deadline: float  #: it is dropped unless it refreshes its place by then
    now: float  #: the server time of this reading
    tokens: tuple[int, int] = (0, 0)  #: the (input, output) tokens it reserves once admitted
    parked: bool = False  #: parked at its tenant's cap (``position`` -1), out of the queue until unparked
    tier: str = ""  #: the service tier its tokens count in ('' the standard one; governor.budgets.KIND_TIER)

    @property
    def host(self) -> str:
        return host_of(self.holder)

    @property
    def place(self) -> int:
        """Its place in the queue as people count: 1 = next."""
        return self.position + 1

    @property
    def waited(self) -> float:
        """Seconds since it joined the queue."""
        return max(0.0, self.now - self.since)

    @property
    def live(self) -> bool:
        """False once it stopped refreshing (its process died); reclaimed by the next script."""
        return self.deadline > self.now


@dataclass(frozen=True)
class Listing:
    """Some of the entries of a zset, read at one instant."""

    now: float  #: server time, Unix seconds
    total: int  #: entries in the zset (live or not)
    items: tuple[Any, ...]  #: LeaseInfo or WaiterInfo, at most the requested limit


@dataclass(frozen=True)
class Count:
    """Live leases and live waiters of one class, one tenant, or one of each."""

    in_flight: int = 0
    queued: int = 0
    aged: int = 0  #: of the queued, those that went ahead of every class

    @property
    def load(self) -> int:
        """In flight and queued: what a tenant asks of the governor now."""
        return self.in_flight + self.queued

    def __add__(self, other: Count) -> Count:
        return Count(self.in_flight + other.in_flight, self.queued + other.queued, self.aged + other.aged)


@dataclass(frozen=True)
class Breakdown:
    """Live leases and waiters counted per class and per tenant (:func:`count_shares`)."""

    priorities: tuple[str, ...]  #: the stored classes, highest first
    #: every class of ``priorities`` (zero counts too), highest first, then any other name met
    by_class: Mapping[str, Count]
    #: every tenant met, the most loaded (in flight + queued) first, then by name
    by_tenant: Mapping[str, Count]
    #: (class, tenant) -> its count, in the order of by_class then by_tenant
    by_pair: Mapping[tuple[str, str], Count]
    #: False when a listing was cut at its limit: the counts miss what was not read
    complete: bool = True
    #: each class's longest wait so far among its live waiters, seconds (a class with none: absent)
    oldest: Mapping[str, float] = field(default_factory=dict)

    def top_tenants(self, n: int) -> dict[str, Count]:
        """The ``n`` most loaded tenants, and the others summed under :data:`OTHER`
        (present only when there are others): a bounded set of names."""
        tenants = list(self.by_tenant.items())
        top = dict(tenants[: max(0, n)])
        rest = tenants[max(0, n) :]
        if rest:
            top[OTHER] = sum((c for _, c in rest), Count())
        return top

    def top_pairs(self, n: int) -> dict[tuple[str, str], Count]:
        """``by_pair`` with the tenants beyond the ``n`` most loaded summed under
        :data:`OTHER` in each class."""
        top = set(list(self.by_tenant)[: max(0, n)])
        out: dict[tuple[str, str], Count] = {}
        for (priority, tenant), count in self.by_pair.items():
            pair = (priority, tenant if tenant in top else OTHER)
            out[pair] = out.get(pair, Count()) + count
        return out


@dataclass(frozen=True)
class DecisionEvent:
    """One entry of the decision log (the ``events`` stream)."""

    id: str  #: the stream entry id ("<ms>-<seq>", Redis time of the write)
    kind: str  #: create, recreate, capacity, pause, resume, hold, set_max, reset, quota, adopt
    at: float  #: the scripts' clock at the decision, Unix seconds
    capacity: int  #: capacity after the decision
    paused: bool  #: paused after the decision
    fields: Mapping[str, str] = field(default_factory=dict)  #: the kind-specific fields

    def get(self, name: str, default: str = "") -> str:
        return self.fields.get(name, default)


@dataclass(frozen=True)
class KeyInfo:
    """One Redis key of a governor, as redis-cli would see it."""

    role: str  #: its name in governor.protocol.KEY_NAMES (state, config, policy, leases, ...)
    key: str  #: the full key name
    type: str  #: Redis type, 'none' when the key does not exist
    size: int  #: fields / members / entries, the sentinel of leases and holders left out
    ttl: float | None  #: seconds until it expires when idle; None: no expiry or missing
    expected: str = ""  #: the type governor.protocol.KEYS gives it

    @property
    def wrong_type(self) -> bool:
        """The key exists and holds another type than the scripts expect."""
        return self.type not in ("none", self.expected)


# -- helpers ------------------------------------------------------------------


def host_of(holder: str) -> str:
    """The host of a holder label: its part before the first '/' (all of it if none)."""
    return holder.split("/", 1)[0]


def server_time_ms(client: Any) -> int:
    """The Redis server's clock in ms, the one the scripts use."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def eviction_risk(client: Any) -> str:
    """Why this Redis may evict a governor's keys, or "" when it will not (or
    cannot tell: INFO refused by the ACL). An evicted lease set hides running
    holders and the fleet is over-admitted, so a Redis with a ``maxmemory``
    must use ``maxmemory-policy noeviction`` (docs/operating.md: Redis requirements)."""
    try:
        with map_errors(None):
            info = client.info("memory")
    except GovernorError:
        return ""
    # a cluster client answers with one section per node
    nodes = list(info.values()) if info and all(isinstance(v, Mapping) for v in info.values()) else [info]
    for node in nodes:
        policy = str(node.get("maxmemory_policy", "noeviction"))
        if int(node.get("maxmemory", 0) or 0) > 0 and policy != "noeviction":
            return (
                f"this Redis may evict the governor's keys (maxmemory-policy {policy}): evicted leases hide "
                "running holders and the fleet is over-admitted; set maxmemory-policy noeviction"
            )
    return ""


def class_name(priorities: Sequence[str], rank: int) -> str:
    """The name of the class of ``rank`` (0: the highest) among the stored
    ``priorities``; ``rank-N`` for a rank they do not name (a config changed
    or missing)."""
    return priorities[rank] if 0 <= rank < len(priorities) else f"rank-{rank}"


def read_priorities(client: Any, keys: GovernorKeys) -> tuple[str, ...]:
    """The stored config's classes, highest first (() when missing)."""
    with map_errors(keys.name):
        raw = client.hget(keys.config, "priorities")
    return tuple(text(raw).split(",")) if raw else ()


def _record(raw: Any) -> HolderRecord | None:
    """A ``holders`` entry, or None if missing or unreadable."""
    return HolderRecord.parse(None if raw is None else text(raw))


def state_of(status: Status) -> str:
    """One word for what a new caller meets: open (admitted), limited
    (admitted, but some class or tenant is not: ``status.held_back``), paused,
    holding (a provider's Retry-After), or full (a budget is used up, or
    earlier callers are queued ahead of it). Whether it waits is the
    scripts' answer, ``status.blocked``; the word only says which kind."""
    if not status.blocked:
        return "limited" if status.held_back else "open"
    if status.paused:
        return "paused"
    if status.holding:
        return "holding"
    return "full"


# -- reads ----------------------------------------------------------------------


def list_governors(client: Any, prefix: str = "governor") -> list[str]:
    """Every governor of this schema in the Redis, sorted; found with SCAN (never KEYS)."""
    pattern = f"{prefix}:v{SCHEMA_VERSION}:{{*}}:state"
    names: set[str] = set()
    with map_errors("*"):
        for key in client.scan_iter(match=pattern, count=SCAN_COUNT, _type="hash"):
            name = name_from_state_key(text(key), prefix)
            if name:
                names.add(name)
    return sorted(names)


def _head(client: Any, key: str, limit: int) -> tuple[int, list[tuple[Any, float]]]:
    """Entries of a zset, the sentinel left out, and its first ``limit``
    (member, score) pairs in score order."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(key)
    pipe.zscore(key, SENTINEL)
    if limit > 0:
        pipe.zrange(key, 0, limit, withscores=True)  # one more: the sentinel may be among them
    replies = pipe.execute()
    entries = [e for e in (replies[2] if limit > 0 else []) if text(e[0]) != SENTINEL][:limit]
    return int(replies[0]) - (replies[1] is not None), entries


def read_leases(client: Any, keys: GovernorKeys, limit: int = 1000, priorities: Sequence[str] | None = None) -> Listing:
    """The holders of the leases, lowest fence (oldest grant) first, at most ``limit``.

    Expired leases that no script has reclaimed yet are included with
    ``live`` False; the status's ``in_flight`` counts only live ones.
    Classes are named with ``priorities`` (default: the stored config's).
    """
    names = read_priorities(client, keys) if priorities is None else tuple(priorities)
    with map_errors(keys.name):
        now_ms = server_time_ms(client)
        total, entries = _head(client, keys.leases, limit)
        raws = client.hmget(keys.holders, [e[0] for e in entries]) if entries else []
    items: list[LeaseInfo] = []
    for (member, expiry), raw in zip(entries, raws, strict=True):
        record = _record(raw)
        if record is None:  # released between the two reads, or written by someone else
            continue
        items.append(
            LeaseInfo(
                text(member),
                record.holder,
                class_name(names, record.rank),
                record.tenant,
                record.fence,
                record.since_ms / 1000,
                float(expiry) / 1000,
                record.ttl_ms / 1000,
                now_ms / 1000,
            )
        )
    items.sort(key=lambda lease: lease.fence)
    return Listing(now_ms / 1000, total, tuple(items))


def read_queue(client: Any, keys: GovernorKeys, limit: int = 1000, priorities: Sequence[str] | None = None) -> Listing:
    """The waiters in the order they will be admitted, at most ``limit``: the
    aged first, then a higher class first, then by tag (FIFO within a class
    and tenant; the tenants' shares interleave by their weights).

    Waiters that stopped refreshing (their process died) and that no script
    has dropped yet are included with ``live`` False. Classes are named
    with ``priorities`` (default: the stored config's).
    """
    names = read_priorities(client, keys) if priorities is None else tuple(priorities)
    with map_errors(keys.name):
        now_ms = server_time_ms(client)
        total, entries = _head(client, keys.queue, limit)
        ids = [e[0] for e in entries]
        deadlines: list[Any] = []
        raws: list[Any] = []
        # most of the queue: one read of the whole waiters zset costs less than a ZSCORE each
        whole = len(ids) > _FEW and total <= 2 * len(ids)
        if ids:
            pipe = client.pipeline(transaction=False)
            if whole:
                pipe.zrange(keys.waiters, 0, -1, withscores=True)
            else:
                for member in ids:
                    pipe.zscore(keys.waiters, member)
            pipe.hmget(keys.holders, ids)
            *deadlines, raws = pipe.execute()
            if whole:
                found = {text(m): d for m, d in deadlines[0]}
                deadlines = [found.get(text(member)) for member in ids]
    items: list[WaiterInfo] = []
    for position, ((member, score), deadline, raw) in enumerate(zip(entries, deadlines, raws, strict=True)):
        record = _record(raw)
        if record is None or deadline is None:  # granted or cancelled between the reads
            continue
        band, tag = divmod(int(score), QUEUE_BAND)
        items.append(
            WaiterInfo(
                text(member),
                position,
                record.holder,
                class_name(names, record.rank),
                record.tenant,
                band == 0,
                tag,
                record.since_ms / 1000,
                float(deadline) / 1000,
                now_ms / 1000,
                (record.input, record.output),
                tier=record.tier,
            )
        )
    return Listing(now_ms / 1000, total, tuple(items))


def read_parked(client: Any, keys: GovernorKeys, limit: int = 1000, priorities: Sequence[str] | None = None) -> Listing:
    """The waiters parked at their tenant's cap (``parked`` zset), each tenant's
    in the order they go back to the queue, at most ``limit``; ``position`` -1."""
    names = read_priorities(client, keys) if priorities is None else tuple(priorities)
    with map_errors(keys.name):
        now_ms = server_time_ms(client)
        total, entries = _head(client, keys.parked, limit)
        ids = [e[0] for e in entries]
        deadlines: list[Any] = []
        raws: list[Any] = []
        if ids:
            pipe = client.pipeline(transaction=False)
            for member in ids:
                pipe.zscore(keys.waiters, member)
            pipe.hmget(keys.holders, ids)
            *deadlines, raws = pipe.execute()
    items = []
    for (member, _), deadline, raw in zip(entries, deadlines, raws, strict=True):
        record = _record(raw)
        if record is not None and deadline is not None:
            since, until, rank = record.since_ms / 1000, float(deadline) / 1000, class_name(names, record.rank)
            items.append(
                WaiterInfo(text(member), -1, record.holder, rank, record.tenant, False, 0, since, until, now_ms / 1000,
                           (record.input, record.output), parked=True, tier=record.tier)
            )  # fmt: skip
    return Listing(now_ms / 1000, total, tuple(items))


def count_shares(
    leases: Iterable[LeaseInfo], waiters: Iterable[WaiterInfo], priorities: Sequence[str] = (), complete: bool = True
) -> Breakdown:
    """The live leases and live waiters of two listings counted per class, per
    tenant and per (class, tenant), as the status counts them (an expired
    lease or a dead waiter not yet reclaimed is not counted)."""
    counts: dict[tuple[str, str], list[int]] = {}
    oldest: dict[str, float] = {}
    for lease in leases:
        if lease.live:
            counts.setdefault((lease.priority, lease.tenant), [0, 0, 0])[0] += 1
    for waiter in waiters:
        if waiter.live:
            entry = counts.setdefault((waiter.priority, waiter.tenant), [0, 0, 0])
            entry[1] += 1
            entry[2] += waiter.aged
            oldest[waiter.priority] = max(oldest.get(waiter.priority, 0.0), waiter.waited)
    by_class: dict[str, Count] = {name: Count() for name in priorities}
    by_tenant: dict[str, Count] = {}
    for (priority, tenant), (in_flight, queued, aged) in counts.items():
        count = Count(in_flight, queued, aged)
        by_class[priority] = by_class.get(priority, Count()) + count
        by_tenant[tenant] = by_tenant.get(tenant, Count()) + count
    known = {name: i for i, name in enumerate(priorities)}
    by_class = dict(sorted(by_class.items(), key=lambda kv: (known.get(kv[0], len(known)), kv[0])))
    by_tenant = dict(sorted(by_tenant.items(), key=lambda kv: (-kv[1].load, kv[0])))
    class_order = {name: i for i, name in enumerate(by_class)}
    tenant_order = {name: i for i, name in enumerate(by_tenant)}
    pairs = sorted(counts.items(), key=lambda kv: (class_order[kv[0][0]], tenant_order[kv[0][1]]))
    by_pair = {pair: Count(*values) for pair, values in pairs}
    return Breakdown(tuple(priorities), by_class, by_tenant, by_pair, complete, oldest)


def read_breakdown(client: Any, keys: GovernorKeys, limit: int | None = None) -> Breakdown:
    """The live leases and waiters of a governor counted per class and tenant,
    from at most ``limit`` (default :data:`COUNT_LIMIT`) of each; ``complete``
    says whether that was all of them."""
    limit = COUNT_LIMIT if limit is None else limit
    priorities = read_priorities(client, keys)
    leases = read_leases(client, keys, limit, priorities)
    queue = read_queue(client, keys, limit, priorities)
    complete = leases.total <= limit and queue.total <= limit
    return count_shares(leases.items, queue.items, priorities, complete)


@dataclass(frozen=True)
class SharesSettings:
    """The stored config's classes, aging and tenant weights (read leniently:
    a field missing from the stored config shows as none)."""

    priorities: tuple[str, ...] = ()
    default_priority: str = ""
    aging: float | None = None  #: seconds; None: never
    tenant_weights: Mapping[str, int] = field(default_factory=dict)
    default_weight: int = 1

    @classmethod
    def from_stored(cls, stored: Mapping[str, str]) -> SharesSettings:
        aging_ms = stored.get("aging_ms", "")
        default_weight = stored.get("default_weight", "")
        try:
            weights = dict(parse_weights(stored.get("tenant_weights", "")))
        except ValueError:
            weights = {}
        return cls(
            tuple(p for p in stored.get("priorities", "").split(",") if p),
            stored.get("default_priority", ""),
            int(aging_ms) / 1000 if aging_ms.isdigit() and int(aging_ms) else None,
            weights,
            int(default_weight) if default_weight.isdigit() else 1,
        )

    def weight(self, tenant: str) -> int | None:
        """The weight of ``tenant`` (None for the sum of the others)."""
        return None if tenant == OTHER else self.tenant_weights.get(tenant, self.default_weight)

    def as_dict(self) -> dict[str, Any]:
        return {
            "priorities": list(self.priorities),
            "default_priority": self.default_priority,
            "aging": self.aging,
            "tenant_weights": dict(self.tenant_weights),
            "default_weight": self.default_weight,
        }


@dataclass(frozen=True)
class Overview:
    """Everything ``governor status`` shows of one governor, read at once:
    its status (the status script's answer), its stored config and the
    settings of its classes and tenants, its leases and waiters counted per
    class and tenant, and the warnings about the Redis that holds it."""

    status: Status
    stored: Mapping[str, str]
    shares: SharesSettings
    breakdown: Breakdown
    warnings: tuple[str, ...]


def read_overview(client: Any, keys: GovernorKeys, status: Status) -> Overview:
    """The overview of the governor of ``keys`` whose ``status`` was just read
    (``Governor.status(create=False)``: looking never creates a governor)."""
    stored = read_config(client, keys)
    risk = eviction_risk(client)
    return Overview(
        status, stored, SharesSettings.from_stored(stored), read_breakdown(client, keys), (risk,) if risk else ()
    )


def _event(entry_id: Any, values: Mapping[Any, Any]) -> DecisionEvent:
    decoded = {text(k): text(v) for k, v in values.items()}

    def number(name: str) -> int:
        try:
            return int(decoded.get(name, "0"))
        except ValueError:
            return 0

    return DecisionEvent(
        id=text(entry_id),
        kind=decoded.get("kind", "?"),
        at=number("at") / 1000,
        capacity=number("capacity"),
        paused=decoded.get("paused") == "1",
        fields={k: v for k, v in decoded.items() if k not in COMMON_EVENT_FIELDS},
    )


def read_events(
    client: Any, keys: GovernorKeys, count: int = 20, kinds: Collection[str] | None = None
) -> list[DecisionEvent]:
    """The ``count`` newest decisions (of ``kinds``, if given), newest first.

    With ``kinds`` the log is read back page by page until ``count`` match
    or the log is exhausted; the log is capped, so this is bounded.
    """
    found: list[DecisionEvent] = []
    end = "+"
    page = count if not kinds else max(count, 500)
    while count > 0 and len(found) < count:
        with map_errors(keys.name):
            entries = client.xrevrange(keys.events, end, "-", count=page)
        for entry_id, values in entries:
            event = _event(entry_id, values)
            if not kinds or event.kind in kinds:
                found.append(event)
        if len(entries) < page:
            break
        end = f"({text(entries[-1][0])}"
    return found[:count]


def read_events_after(client: Any, keys: GovernorKeys, after: str, count: int = 1000) -> list[DecisionEvent]:
    """Up to ``count`` decisions logged after entry id ``after`` ('0': from the start), oldest first."""
    start = "-" if after in ("", "0", "0-0") else f"({after}"
    with map_errors(keys.name):
        entries = client.xrange(keys.events, start, "+", count=count)
    return [_event(entry_id, values) for entry_id, values in entries]


def wait_events(client: Any, keys: GovernorKeys, after: str, block: float, count: int = 100) -> list[DecisionEvent]:
    """Decisions logged after ``after``, oldest first, waiting up to ``block`` seconds for one.

    ``after`` may be '$' (only decisions logged from now on). The client's
    socket timeout must be longer than ``block``.
    """
    with map_errors(keys.name):
        reply = client.xread({keys.events: after}, count=count, block=max(1, round(block * 1000)))
    events: list[DecisionEvent] = []
    for _stream, entries in reply or []:
        events.extend(_event(entry_id, values) for entry_id, values in entries)
    return events


def last_event_id(client: Any, keys: GovernorKeys) -> str:
    """The id of the newest decision ('0' when the log is empty or missing)."""
    with map_errors(keys.name):
        newest = client.xrevrange(keys.events, "+", "-", count=1)
    return text(newest[0][0]) if newest else "0"


def log_length(client: Any, keys: GovernorKeys) -> int:
    """Entries in the decision log."""
    with map_errors(keys.name):
        return int(client.xlen(keys.events))


_SIZE_COMMAND = {"hash": "hlen", "zset": "zcard", "stream": "xlen"}
#: the keys that keep a sentinel entry (governor.protocol.SENTINEL), and how to look for it
_SENTINEL_COMMAND = {"leases": "zscore", "holders": "hexists"}


def read_keys(client: Any, keys: GovernorKeys) -> list[KeyInfo]:
    """Type, size and idle expiry of each key of the governor (governor.protocol.KEYS order)."""
    roles = [role for role, _ in KEYS]
    names = [getattr(keys, role) for role in roles]
    with map_errors(keys.name):
        pipe = client.pipeline(transaction=False)
        for key in names:
            pipe.type(key)
            pipe.pttl(key)
        replies = pipe.execute()
        types = [text(t) for t in replies[0::2]]
        pipe = client.pipeline(transaction=False)
        for role, key, kind in zip(roles, names, types, strict=True):
            if kind in _SIZE_COMMAND:
                getattr(pipe, _SIZE_COMMAND[kind])(key)
                if role in _SENTINEL_COMMAND and kind == dict(KEYS)[role]:
                    getattr(pipe, _SENTINEL_COMMAND[role])(key, SENTINEL)
        sizes = iter(pipe.execute())
    out: list[KeyInfo] = []
    for (role, expected), key, kind, pttl in zip(KEYS, names, types, replies[1::2], strict=True):
        size = 0
        if kind in _SIZE_COMMAND:
            size = int(next(sizes))
            if role in _SENTINEL_COMMAND and kind == expected:
                kept = next(sizes)  # ZSCORE: the score (0) or None; HEXISTS: a bool
                size -= kept is not None and kept is not False
        ttl = int(pttl) / 1000 if int(pttl) >= 0 else None
        out.append(KeyInfo(role, key, kind, size, ttl, expected))
    return out


def read_config(client: Any, keys: GovernorKeys) -> dict[str, str]:
    """The stored config (the ``config`` hash): field -> value as stored ({} when missing)."""
    with map_errors(keys.name):
        stored = client.hgetall(keys.config)
    return {text(k): text(v) for k, v in stored.items()}
