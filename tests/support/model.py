"""A reference model of admission and the policies in plain Python: no Redis, no Lua.

:class:`Model` answers the same calls as the scripts in ``lua/`` (same
ARGV, same replies, same stored hashes and sets), so a property test can
drive the real scripts and the model with one random sequence of
operations and compare them after every step (tests/test_model.py).

The model keeps the keys of one governor as plain containers: the three
hashes apart (``state``, ``config`` as the exact stored strings,
``policy``), the leases and holders with their sentinel entries, the
queue and waiters, the window. It follows the rules of ``lua/lib/`` one by
one: the sliding window; the policies as units (:data:`POLICIES`, one
entry per policy, in tests/support/model_policies.py); the one admission rule over
budgets (:meth:`Model.blocked`: pause, hold, concurrency, then each active
token bucket); reservations, settlement and header calibration; operator
pause/resume/set_max/reset; TTL leases with lazy reclaim (at most
``BATCH`` per call, in the order Redis sorts a sorted set); the queue of
priority classes (band), aging and start-time fair queueing between
weighted tenants (tag, each class's vtime, the shares of idle tenants pruned), with
waiter deadlines; grants on release/expiry/capacity change; fences.

Besides answering, the model checks the admission rules as
invariants, independently of how the scripts are written: every admission
happens while not paused, not held, with room in every budget and with no
live waiter of a smaller score left behind; FIFO within a class and
tenant (a tenant's tags only grow); no lease id is granted twice; fences
only grow. A broken rule raises :class:`ModelViolation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from governor.budgets import KIND_TIER, Tokens
from governor.budgets import KINDS as BUDGET_KINDS
from governor.policies import all_fields
from governor.protocol import (
    CONFIG,
    DEFAULT_TENANT,
    LEASE_TTL,
    LOWER_HELD,
    MAX_CLASSES,
    PARK_SLOT,
    QUANTUM,
    QUEUE_BAND,
    SCHEMA_VERSION,
    SENTINEL,
    WAKE_TTL,
    HolderRecord,
)

from .model_policies import POLICIES, Policy

SCHEMA = SCHEMA_VERSION
BATCH = 64
RECLAIM_MS = 1000
#: every stored field's kind (governor.protocol): which are strings, which integers
KINDS = all_fields()
STRING_FIELDS = frozenset(name for name, kind in KINDS.items() if kind.type == "str")
#: the lease's cost in the concurrency budget (every lease costs 1)
COST = 1
NO_TOKENS = Tokens()


def parse_tokens(arg: str | None) -> Tokens:
    """ARGV tokens: "input,output" or "input,output,tier", '' (or absent) for none."""
    if not arg:
        return NO_TOKENS
    a, b, *tier = arg.split(",")
    return Tokens(int(a), int(b), tier=tier[0] if tier else None)


def recorded(record: HolderRecord) -> Tokens:
    """The tokens a holder record keeps, in its tier."""
    return Tokens(record.input, record.output, tier=record.tier or None)


@dataclass(frozen=True)
class Place:
    """Where a caller waits, as the admission rule sees it (lib/admission.lua's place)."""

    rank: int
    tenant: str | None = None
    aged: bool = False


class ModelViolation(AssertionError):
    """An admission rule was broken (by the model's own bookkeeping)."""


def _zsorted(zset: dict[str, int]) -> list[tuple[str, int]]:
    """Members in Redis order: by score, then by member bytes."""
    return sorted(zset.items(), key=lambda kv: (kv[1], kv[0].encode()))


def _value(name: str, raw: str) -> Any:
    """A stored config string as the scripts read it (its field's kind)."""
    kind = KINDS[name]
    if kind.type == "str":
        return raw
    return int(raw) if kind.type == "int" else float(raw)


BASE_CONFIG = tuple(CONFIG)


# -- the model -------------------------------------------------------------------------


@dataclass
class Model:
    """The keys of one governor and the scripts that change them."""

    state: dict[str, Any] | None = None  #: the state hash (None: the governor does not exist)
    #: the config hash, as the exact strings the scripts store
    raw_config: dict[str, str] = field(default_factory=dict)
    #: the policy hash: streak and the policy's own learnt fields
    policy_state: dict[str, Any] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)  #: id -> expiry ms (and the sentinel, 0)
    holders: dict[str, str] = field(default_factory=dict)  #: id -> holder record (and the sentinel, '')
    queue: dict[str, int] = field(default_factory=dict)  #: id -> band * QUEUE_BAND + tag
    aging: dict[str, int] = field(default_factory=dict)  #: id -> ms it goes ahead of every class
    shares: dict[str, int] = field(default_factory=dict)  #: "rank:tenant" -> rank * QUEUE_BAND + finish tag
    waiters: dict[str, int] = field(default_factory=dict)  #: id -> deadline ms
    held: dict[str, int] = field(default_factory=dict)  #: capped tenant (or LOWER_HELD) -> leases counted
    parked: dict[str, int] = field(default_factory=dict)  #: id -> slot * PARK_SLOT + seq
    attempts: list[tuple[int, str]] = field(default_factory=list)  #: (time, "seq:o")
    published: list[str] = field(default_factory=list)  #: messages on the wake channel, in order
    #: every grant made (id, fence), in order; adoptions are not grants
    grants: list[tuple[str, int]] = field(default_factory=list)
    now: int = 0
    #: (rank, tenant) -> the tag of its last waiter admitted from the queue (FIFO: only grows)
    last_tag: dict[tuple[int, str], int] = field(default_factory=dict)
    #: clients subscribed to the wake channel (init holds when others listen)
    listeners: int = 0

    # -- entry point ----------------------------------------------------------

    def call(self, script: str, args: tuple[str, ...] | list[str]) -> list[Any]:
        """Run ``script`` with ``args`` (ARGV: now, channel, own arguments)."""
        args = list(args)
        if args[0] == "":
            raise ValueError("the model needs an injected clock (ARGV[1])")
        self.now = int(args[0])
        self._ttl_noted = 0  # the longest lease TTL this call counted already
        self._ttl_rose = False  # the call raised ttl_max
        handler = getattr(self, f"_op_{script}")
        reply: list[Any] = handler(args[2:])
        if self._ttl_rose:
            self.published.append(f"{self.S['epoch']} {WAKE_TTL}{self.S['ttl_max']}")
        return reply

    # -- the hashes -----------------------------------------------------------

    @property
    def S(self) -> dict[str, Any]:
        assert self.state is not None
        return self.state

    @property
    def C(self) -> dict[str, Any]:
        """The stored config as the scripts read it (numbers as numbers)."""
        return {name: _value(name, raw) for name, raw in self.raw_config.items()}

    @property
    def P(self) -> dict[str, Any]:
        return self.policy_state

    @property
    def policy(self) -> Policy:
        return POLICIES[self.raw_config["policy"]]

    # -- helpers (lua/lib/common.lua) ------------------

    def in_flight(self) -> int:
        return sum(1 for e in self.leases.values() if e > self.now)

    def _queued(self) -> int:
        """Live waiters: a waiter past its deadline never counts, even before it is removed."""
        return sum(1 for d in self.waiters.values() if d > self.now)

    def _keep_alive(self) -> None:
        """A writing script pushes every key's expiry back at most every
        idle_ms / 8 (the next time is touch_due), as it loads the state;
        leases and holders get their sentinels back then."""
        if self.now >= self.S["touch_due"]:
            self._touch_all()

    def _touch_all(self) -> None:
        self.leases.setdefault(SENTINEL, 0)
        self.holders.setdefault(SENTINEL, "")
        self.S["touch_due"] = self.now + self.C["idle_ms"] // 8

    def _reclaim(self, force: bool = False) -> None:
        """Expired leases and dead waiters go, at most BATCH of each, at most
        once per RECLAIM_MS unless forced; old window events are pruned.
        The sentinel (score 0) is never a lease, so never expires."""
        S = self.S
        if not force and self.now < S["reclaim_due"]:
            return
        S["reclaim_due"] = self.now + RECLAIM_MS
        expired = [m for m, s in _zsorted(self.leases) if 0 < s <= self.now][:BATCH]
        records = [self._record(m) for m in expired]
        for m in expired:
            del self.leases[m]
            self.holders.pop(m, None)
        for record in records:
            self._unhold(record, waiting=True)
        dead = [m for m, s in _zsorted(self.waiters) if s <= self.now][:BATCH]
        for m in dead:
            del self.waiters[m]
            self.queue.pop(m, None)
            self.parked.pop(m, None)
            self.aging.pop(m, None)
            self.holders.pop(m, None)
        # finish tags behind their class's vtime say nothing: idle tenants leave no trace
        for rank in range(MAX_CLASSES):
            vtime, base = S[f"vtime_{rank}"], rank * QUEUE_BAND
            if vtime > 0:
                self.shares = {t: f for t, f in self.shares.items() if not base <= f <= base + vtime}
        horizon = self.now - self.C["window_ms"]
        self.attempts = [(t, m) for t, m in self.attempts if t >= horizon]

    def _window(self) -> tuple[int, int]:
        """(rate-limited, all) attempts of the last window: newer than NOW - window."""
        horizon = self.now - self.C["window_ms"]
        live = [m for t, m in self.attempts if t > horizon]
        return sum(1 for m in live if m.endswith(":r")), len(live)

    def _resume_level(self) -> int:
        C = self.C
        return max(1, math.floor(C["max_capacity"] * C["resume_fraction"]))  # type: ignore[no-any-return]

    def set_capacity(self, capacity: int) -> None:
        self.S["capacity"] = max(0, min(capacity, self.C["max_capacity"]))

    def pause(self, kind: str, reason: str, until: int) -> None:
        S = self.S
        if S["capacity"] > 0:
            S["saved_capacity"] = S["capacity"]
        elif S["pause_kind"] == "policy":
            S["saved_capacity"] = self._resume_level()  # a pause over a policy pause resumes at the resume level
        S.update(paused=1, pause_kind=kind, pause_reason=reason, paused_until=until, capacity=0)
        self.P["streak"] = 0

    def _resume(self, capacity: int) -> None:
        S = self.S
        S.update(paused=0, pause_kind="", pause_reason="", paused_until=0, saved_capacity=0)
        S["capacity"] = max(1, min(capacity, self.C["max_capacity"]))
        self.P["streak"] = 0

    def _recover(self, rl: int | None = None) -> None:
        S = self.S
        if S["capacity"] > 0 or S["paused"] == 0:
            return
        if S["pause_kind"] == "policy":
            if rl is None:
                rl, _ = self._window()
            if rl == 0:
                self._resume(self._resume_level())
        elif S["paused_until"] > 0 and self.now >= S["paused_until"]:
            self._resume(S["saved_capacity"] if S["saved_capacity"] > 0 else self._resume_level())

    def _no_news(self) -> Callable[[], None] | None:
        """No news is not bad news (no_news of lua/lib/policy.lua): a live
        waiter at the head of the queue while every slot is taken, no hold, no
        rate-limited attempt in the window: the policy's growth by time, if due
        (the head's wait is how long the demand has waited)."""
        S, C = self.S, self.C
        if S["capacity"] == 0 or self.now < S["not_before"]:
            return None
        if S["capacity"] >= C["max_capacity"] or self.in_flight() < S["capacity"]:
            return None
        order = _zsorted(self.queue)
        if not order or self.waiters.get(order[0][0], 0) <= self.now:
            return None
        record = self._record(order[0][0])
        if record is None:
            return None
        grow = self.policy.no_news(self, self.now - record.since_ms)
        if grow is None or self._window()[0] > 0:
            return None
        return grow

    def blocked(self, tokens: Tokens = NO_TOKENS, place: Place | None = None) -> tuple[str | None, int]:
        """The admission rule (queue aside): why a lease of ``tokens`` for
        ``place`` must wait now, and in how many ms asking again may pay off (0: no idea)."""
        why, hint, _ = self._rule(tokens, place)
        return why, hint

    def _held(self) -> str:
        """Why admissions are held (lib/origin.lua ORIGIN.held): the recovery hold, or a Retry-After."""
        S = self.S
        if S.get("hold_until", 0) >= S["not_before"]:
            return f"recovery hold: {S['hold_reason']} (ends in {(S['hold_until'] - self.now) / 1000:.1f} s)"
        return f"holding until the provider's retry-after (ends in {(S['not_before'] - self.now) / 1000:.1f} s)"

    def _hold_for(self, length: int, why: str) -> None:
        """ORIGIN.hold: hold admissions ``length`` ms from now (never shortened)."""
        S, until = self.S, self.now + length
        if until > S.get("hold_until", 0):
            S["hold_until"], S["hold_reason"] = until, why
        if until > S.get("not_before", 0):
            S["not_before"] = until

    def _rule(self, tokens: Tokens, place: Place | None) -> tuple[str | None, int, bool]:
        """blocked(), and whether it is the tenant's cap (the waiter is parked)."""
        S = self.S
        if S["paused"] == 1:
            hint = S["paused_until"] - self.now if S["paused_until"] > 0 else 0
            return "paused: " + S["pause_reason"], hint, False
        if self.now < S["not_before"]:
            return self._held(), S["not_before"] - self.now, False
        why = self._concurrency(place)
        if why is not None:
            return why, 0, False
        for kind in self.active():
            why, hint = self._bucket_room(kind, tokens)
            if why is not None:
                return why, hint, False
        cap = self._cap_of(place.tenant) if place is not None and place.tenant else None
        if cap is not None and self.held.get(place.tenant, 0) + 1 > cap[0]:  # type: ignore[union-attr]
            tenant = place.tenant  # type: ignore[union-attr]
            return f"tenant {tenant} at its cap: {self.held[tenant]} in flight of {cap[0]}", 0, True
        return None, 0, False

    def _concurrency(self, place: Place | None = None) -> str | None:
        live = self.in_flight()
        if live + COST > self.S["capacity"]:
            return f"at capacity: {live} in flight of {self.S['capacity']}"
        reserve = self.C["reserve"]
        if place is not None and place.rank > 0 and not place.aged and reserve > 0:
            others = self.held.get(LOWER_HELD, 0)
            if others + 1 > self.S["capacity"] - reserve:
                capacity = self.S["capacity"]
                return f"at capacity below the highest class: {others} in flight of {capacity} - {reserve} reserved"
        return None

    # -- caps and the reserve (lua/lib/shares.lua) ---------------------------

    def _cap_of(self, tenant: str) -> tuple[int, int] | None:
        """(cap, slot) of ``tenant`` in the stored tenant_caps, or None."""
        for slot, item in enumerate(self.raw_config.get("tenant_caps", "").split(","), start=1):
            name, _, cap = item.partition("=")
            if item and name == tenant:
                return int(cap), slot
        return None

    def _count(self, name: str, delta: int) -> None:
        n = self.held.get(name, 0) + delta
        if n > 0:
            self.held[name] = n
        else:
            self.held.pop(name, None)

    def _hold(self, rank: int, tenant: str) -> None:
        if self._cap_of(tenant) is not None:
            self._count(tenant, 1)
        if rank > 0 and self.C["reserve"] > 0:
            self._count(LOWER_HELD, 1)

    def _unhold(self, record: HolderRecord | None, waiting: bool) -> None:
        """A lease ended, counted once: its tenant's and the lower classes' counts go down."""
        if record is None:
            return
        if self.held.get(record.tenant, 0) > 0:
            self._count(record.tenant, -1)
            if waiting:
                self._unpark(record.tenant)
        if record.rank > 0 and self.held.get(LOWER_HELD, 0) > 0:
            self._count(LOWER_HELD, -1)

    def _requeue(self, lease_id: str) -> None:
        """A parked waiter back at the front of its class (band 0 if it aged meanwhile)."""
        record = self._record(lease_id)
        rank = record.rank if record is not None else 0
        band = rank + 1
        if rank > 0 and self.C["aging_ms"] > 0 and lease_id not in self.aging:
            band = 0
        self.queue[lease_id] = band * QUEUE_BAND + self.S[f"vtime_{rank}"]

    def _unpark(self, tenant: str) -> None:
        cap = self._cap_of(tenant)
        if cap is None or self.held.get(tenant, 0) >= cap[0]:
            return
        low, high = cap[1] * PARK_SLOT, (cap[1] + 1) * PARK_SLOT - 1
        for _ in range(BATCH):
            mine = [m for m, s in _zsorted(self.parked) if low <= s <= high]
            if not mine:
                return
            lease_id = mine[0]
            del self.parked[lease_id]
            if self.waiters.get(lease_id, 0) > self.now:
                self._requeue(lease_id)
                return
            self.waiters.pop(lease_id, None)
            self.aging.pop(lease_id, None)
            self.holders.pop(lease_id, None)

    def _recount(self, fresh: bool) -> None:
        """The caps or the reserve changed: held counted again, parked waiters re-slotted or queued."""
        self.held = {}
        shaped = self.raw_config.get("tenant_caps", "") != "" or self.C["reserve"] > 0
        self.S["capped"] = 1 if shaped else 0
        if shaped:  # every lease still in leases, expired or not: each counts until it leaves
            for lease_id in self.leases:
                record = self._record(lease_id)
                if record is not None:
                    self._hold(record.rank, record.tenant)
        tenants: dict[str, int] = {}
        for lease_id, score in _zsorted(self.parked):
            record = self._record(lease_id)
            cap = None if record is None or fresh else self._cap_of(record.tenant)
            if cap is not None and record is not None:
                self.parked[lease_id] = cap[1] * PARK_SLOT + score % PARK_SLOT
                tenants[record.tenant] = cap[0]
            else:
                del self.parked[lease_id]
                self._requeue(lease_id)
        for tenant, n in tenants.items():
            for _ in range(n - self.held.get(tenant, 0)):
                self._unpark(tenant)

    # -- budgets (governor/budgets.py; the token buckets of lua/lib/budgets.lua) --

    def active(self) -> list[str]:
        return [k for k in self.S["budgets"].split(",") if k]

    def _capacity_of(self, kind: str) -> float:
        burst = self.S[f"{kind}_burst"]
        return burst if burst > 0 else self.S[f"{kind}_limit"]  # type: ignore[no-any-return]

    def budget_level(self, kind: str) -> float:
        """Refilled at the limit per minute since <kind>_at, never above capacity."""
        S = self.S
        level = S[f"{kind}_level"] + max(0, self.now - S[f"{kind}_at"]) * S[f"{kind}_limit"] / 60000
        return min(level, self._capacity_of(kind))

    def _set_level(self, kind: str, level: float) -> None:
        """The one place a level is written: its debt bounded to one capacity below 0."""
        self.S[f"{kind}_level"] = max(level, -self._capacity_of(kind))
        self.S[f"{kind}_at"] = self.now

    def _bucket_room(self, kind: str, tokens: Tokens) -> tuple[str | None, int]:
        if not tokens.counts_in(kind):  # a bucket of another tier's holds no other lease
            return None, 0
        cost = tokens.cost(kind)
        level, capacity = self.budget_level(kind), self._capacity_of(kind)
        need = min(cost, capacity)
        if level >= need:
            return None, 0
        hint = max(1, math.ceil((need - level) * 60000 / self.S[f"{kind}_limit"]))
        return f"{kind} budget: {cost} wanted, {_lua_int(level)} left of {_lua_num(capacity)}", hint

    def never(self, tokens: Tokens) -> str | None:
        """Why a lease of ``tokens`` can never be admitted: a cost above a budget's limit."""
        for kind in self.active():
            cost, limit = tokens.cost(kind), self.S[f"{kind}_limit"]
            if cost > limit and self.S[f"{kind}_source"] == "configured":  # a header's limit may rise again
                return f"a cost of {cost} is above the {kind} budget's whole limit of {limit} per minute (configured)"
        return None

    def _take(self, tokens: Tokens) -> None:
        for kind in self.active():
            if tokens.counts_in(kind):
                self._set_level(kind, self.budget_level(kind) - tokens.cost(kind))

    def _settle(self, reserved: Tokens, used: Tokens, spent: bool = False) -> None:
        """What was not used goes back, what was used beyond is charged;
        ``spent``: a refused call the provider counted gives nothing back.
        A usage that names no tier was served in the one its lease asked for."""
        if used.tier is None:
            used = used.in_tier(reserved.tier)
        for kind in self.active():
            delta = reserved.cost(kind) - used.cost(kind)
            if spent:
                delta = min(delta, 0)
            if delta != 0:
                self._set_level(kind, min(self.budget_level(kind) + delta, self._capacity_of(kind)))

    def _refused(self, announced: set[str], tier: str) -> None:
        """A rate-limited outcome: each active bucket of the refused call's
        tier ('' the standard one) its headers did not announce is clamped to
        0 (a refusal never raises a level)."""
        for kind in self.active():
            if kind not in announced and KIND_TIER.get(kind, "") == tier and self.budget_level(kind) > 0:
                self._set_level(kind, 0)

    def _reborn(self) -> None:
        """A state created after a loss: each active bucket starts empty."""
        for kind in self.active():
            self._set_level(kind, 0)

    def _calibrate(self, kind: str, limit_h: int | None, remaining: int | None) -> None:
        """A response's figures for one kind: the provider's limit (a lower
        ceiling wins), the burst the highest remaining seen, the level
        clamped to the provider's remaining."""
        S = self.S
        was_limit, was_burst, was_source = S[f"{kind}_limit"], S[f"{kind}_burst"], S[f"{kind}_source"]
        ceiling = self.C[f"{kind}_per_minute"]
        limit, source = was_limit, was_source
        if limit_h is not None and limit_h > 0:
            limit, source = limit_h, "header"
        elif remaining is not None and source in ("", "learned"):
            limit, source = max(was_limit, remaining), "learned"
        if ceiling > 0 and (limit == 0 or ceiling < limit):
            limit, source = ceiling, "configured"
        if limit == 0:
            return
        burst = was_burst
        if remaining is not None:
            burst = max(burst, remaining)
        burst = min(burst, limit)
        if was_limit == 0:
            level: float = remaining if remaining is not None else limit
            on = [k for k in BUDGET_KINDS if k == kind or S[f"{k}_limit"] > 0]
            S["budgets"] = ",".join(on)
        else:
            level = self.budget_level(kind)
            if remaining is not None and remaining < level:
                level = remaining
        S[f"{kind}_limit"], S[f"{kind}_burst"], S[f"{kind}_source"] = limit, burst, source
        self._set_level(kind, min(level, self._capacity_of(kind)))

    def _record(self, lease_id: str) -> HolderRecord | None:
        return HolderRecord.parse(self.holders.get(lease_id))

    def _admit(
        self,
        lease_id: str,
        ttl: int,
        holder: str,
        tokens: Tokens = NO_TOKENS,
        place: tuple[int, str] = (0, ""),
        aged: bool = False,
    ) -> int:
        """One admission: check the admission rules and the budgets, the tenant's cap
        and the reserve (by the live leases' records, not the counts), take
        the next fence."""
        S = self.S
        if S["paused"] == 1 or self.now < S["not_before"]:
            raise ModelViolation(f"{lease_id} admitted while paused or held")
        live = self.in_flight()
        if live + COST > S["capacity"]:
            raise ModelViolation(f"{lease_id} admitted with {live} in flight of capacity {S['capacity']}")
        records = [self._record(m) for m, e in self.leases.items() if e > self.now]
        tenant, cap = place[1] or DEFAULT_TENANT, self._cap_of(place[1] or DEFAULT_TENANT)
        if cap is not None and sum(r is not None and r.tenant == tenant for r in records) + 1 > cap[0]:
            raise ModelViolation(f"{lease_id} admitted beyond tenant {tenant}'s cap of {cap[0]}")
        lower = sum(r is not None and r.rank > 0 for r in records)
        if place[0] > 0 and not aged and lower + 1 > S["capacity"] - self.C["reserve"]:
            raise ModelViolation(f"{lease_id} admitted into the reserve: {lower} below the highest class")
        for kind in self.active():
            cost, level = tokens.cost(kind), self.budget_level(kind)
            configured = S[f"{kind}_source"] == "configured"
            if (cost > S[f"{kind}_limit"] and configured) or level < min(cost, self._capacity_of(kind)):
                raise ModelViolation(f"{lease_id} admitted with {cost} {kind} wanted and {level} left")
        if self.leases.get(lease_id, 0) > self.now:
            raise ModelViolation(f"lease {lease_id} granted while it is live")
        fence = self._add_lease(lease_id, ttl, holder, tokens, place)
        if self.grants and fence <= max(f for _, f in self.grants):
            raise ModelViolation("fence did not grow")
        self.grants.append((lease_id, fence))
        return fence

    def _note_ttl(self, ttl: int) -> None:
        """A client alive now announced its lease TTL: ttl_max is the longest of
        the current period (ttl_cur, from ttl_since) and the one before; a
        period lasts twice ttl_max. A rise is announced on the wake channel when the call ends."""
        if self._ttl_noted >= ttl:
            return
        self._ttl_noted = ttl
        S = self.S
        before = S.get("ttl_max", 0)
        if self.now >= S.get("ttl_since", 0) + 2 * before:
            S.update(ttl_max=max(S.get("ttl_cur", 0), ttl), ttl_cur=ttl, ttl_since=self.now)
        else:
            if ttl > S.get("ttl_cur", 0):
                S["ttl_cur"] = ttl
            if ttl > before:
                S["ttl_max"] = ttl
        if S["ttl_max"] > before:
            self._ttl_rose = True  # announced when the call finishes

    def _add_lease(
        self, lease_id: str, ttl: int, holder: str, tokens: Tokens = NO_TOKENS, place: tuple[int, str] = (0, "")
    ) -> int:
        S = self.S
        S["fence"] += 1
        level = self.in_flight() + 1  # itself included
        self.leases[lease_id] = self.now + ttl
        rank, tenant = place[0], place[1] or DEFAULT_TENANT
        record = HolderRecord(
            S["fence"], ttl, self.now, tokens.input, tokens.output, level, rank, tenant, holder, tokens.apart
        )
        self.holders[lease_id] = record.format()
        self._hold(rank, tenant)
        self._take(tokens)
        return int(S["fence"])

    def _enqueue(self, lease_id: str, rank: int, tenant: str, weight: int) -> None:
        """A new waiter's place: its tag starts at max(vtime, the finish tag
        of its tenant in its class), which moves on by ceil(QUANTUM / weight)."""
        S, C = self.S, self.C
        share, base = f"{rank}:{tenant}", rank * QUEUE_BAND  # fair within a class
        start = max(S[f"vtime_{rank}"], self.shares.get(share, base) - base)
        self.shares[share] = base + start + -(-QUANTUM // weight)
        self.queue[lease_id] = (rank + 1) * QUEUE_BAND + start
        if rank > 0 and C["aging_ms"] > 0:
            due = self.now + C["aging_ms"]
            self.aging[lease_id] = due
            if S["aging_due"] == 0 or due < S["aging_due"]:
                S["aging_due"] = due

    def _age(self) -> None:
        """Waiters that waited aging_ms go to band 0 with their tags, at most BATCH."""
        S = self.S
        if S["aging_due"] == 0 or self.now < S["aging_due"]:
            return
        due = [m for m, t in _zsorted(self.aging) if t <= self.now][:BATCH]
        moved = 0
        for m in due:
            score = self.queue.get(m)
            if score is not None and score >= QUEUE_BAND:
                self.queue[m] = score % QUEUE_BAND
                moved += 1
            del self.aging[m]
        S["aging_due"] = _zsorted(self.aging)[0][1] if self.aging else 0

    def _grant(self, caller: str | None = None) -> dict[str, int]:
        """Admit from the head of the queue while the rule lets it in."""
        S = self.S
        self._age()
        granted: dict[str, int] = {}
        words: list[str] = []
        skipped = admitted = 0
        while skipped <= BATCH and admitted < BATCH:  # at most BATCH grants per call
            if not self.queue:
                break
            head, score = _zsorted(self.queue)[0]
            record = self._record(head)
            tokens = recorded(record) if record is not None else NO_TOKENS
            band = score // QUEUE_BAND
            # pause, hold, concurrency with the class from the band (and budgets at no cost)
            why, hint, park = self._rule(NO_TOKENS, Place(max(band - 1, 0), None, band == 0))
            impossible = None
            capped = self.raw_config.get("tenant_caps", "") != ""
            # (a bucket of the standard tier's holds no lease of a tier apart: with such
            # a tier's budgets on, the head is asked for its own tokens)
            apart = any(KIND_TIER.get(kind) for kind in self.active())
            bucket = why is not None and apart and why.startswith(tuple(f"{k} budget:" for k in self.active()))
            if (why is None or bucket) and record is not None and (capped or self.active()):
                impossible = self.never(tokens)
                if impossible is None:
                    why, hint, park = self._rule(tokens, Place(record.rank, record.tenant, band == 0))
            if why is not None and park and record is not None:  # its tenant is at its cap: parked
                cap = self._cap_of(record.tenant)
                assert cap is not None
                S["park_seq"] += 1
                del self.queue[head]
                self.parked[head] = cap[1] * PARK_SLOT + S["park_seq"]
                skipped += 1
                continue
            if why is not None:
                if hint > 0 and admitted == 0:  # ask again when the time is up
                    self.published.append(f"{S['epoch']} @{hint}")
                break
            deadline = self.waiters.pop(head, None)
            del self.queue[head]
            if score >= QUEUE_BAND and record is not None and record.rank > 0 and S["aging_due"] > 0:
                self.aging.pop(head, None)
            if impossible:  # a budget's limit fell below its cost: its refresh is refused
                self.holders.pop(head, None)
                self.published.append(f"{S['epoch']} @1")
                skipped += 1
            elif deadline is not None and deadline > self.now and record is not None:
                if self.now - record.since_ms > record.ttl_ms / 2:  # waited long: its TTL announced again
                    self._note_ttl(record.ttl_ms)
                if any(s < score for m, s in self.queue.items() if self.waiters.get(m, 0) > self.now):
                    raise ModelViolation(f"{head} granted ahead of a live waiter of a smaller score")
                tag, place = score % QUEUE_BAND, (record.rank, record.tenant)
                # (a waiter back from parked takes its class's vtime: it may tie with the last grant)
                if tag < self.last_tag.get(place, -1):
                    raise ModelViolation(f"FIFO broken in class {record.rank} of tenant {record.tenant}")
                self.last_tag[place] = max(tag, self.last_tag.get(place, -1))
                granted[head] = self._admit(head, record.ttl_ms, record.holder, tokens, place, aged=band == 0)
                if record.rank < MAX_CLASSES and score >= QUEUE_BAND:  # an aged one's older tag leaves it
                    if tag < S[f"vtime_{record.rank}"]:
                        raise ModelViolation(f"class {record.rank} granted tag {tag} after a later one")
                    S[f"vtime_{record.rank}"] = tag
                if head != caller:
                    words.append(f"{head}:{granted[head]}")
                admitted += 1
            else:
                self.holders.pop(head, None)
                skipped += 1
        if words:
            self.published.append(S["epoch"] + " " + " ".join(words))
        return granted

    def _record_attempt(self, outcome: str, fence: int | None) -> bool:
        """One reported attempt into the window, handed to the policy; for a
        refusal, whether it holds the whole fleet (its Retry-After)."""
        S = self.S
        S["event_seq"] += 1
        self.attempts.append((self.now, f"{S['event_seq']}:{outcome}"))
        rl, total = self._window()  # the scripts count first and add one: the same
        if outcome == "r":
            self.P["streak"] = 0
            if S["capacity"] > 0:  # 429s while paused change nothing
                return self.policy.limited(self, rl, total, fence) is not False
        elif outcome == "b":  # no load signal: an attempt, not one of the window's refusals
            if S["capacity"] > 0:
                self.policy.background(self, rl, total)  # type: ignore[attr-defined]
            return False
        elif S["capacity"] == 0:
            self._recover(rl)
        elif outcome == "s":
            self.policy.success(self, rl, total)
        return True

    def _status_reply(self) -> list[Any]:
        S, C, P = self.S, self.C, self.P
        rl, total = self._window()
        why, _ = self.blocked()
        if why is None and len(self.queue) > 0:  # a waiter parked at its cap holds up nobody
            why = "earlier callers are queued"
        held_back: list[str] = []
        if self.blocked()[0] is None:
            lower, _ = self.blocked(NO_TOKENS, Place(1, ""))
            held_back += [lower] if lower else []
            for item in filter(None, self.raw_config.get("tenant_caps", "").split(",")):
                tenant = item.partition("=")[0]
                capped, _ = self.blocked(NO_TOKENS, Place(0, tenant))
                held_back += [capped] if capped else []
        pairs = {
            "now": self.now,
            "epoch": S["epoch"],
            "policy": C["policy"],
            "capacity": S["capacity"],
            "max_capacity": C["max_capacity"],
            "reserve": C["reserve"],
            "paused": S["paused"],
            "pause_kind": S["pause_kind"],
            "pause_reason": S["pause_reason"],
            "paused_until": S["paused_until"],
            "not_before": S["not_before"],
            "in_flight": self.in_flight(),
            "queued": self._queued(),
            "window_rate_limited": rl,
            "window_attempts": total,
            "window_ms": C["window_ms"],
            "streak": P.get("streak", 0),
            "fence": S["fence"],
            "ceiling": P.get("ceiling", 0),
            "background_ppm": P.get("background_ppm", 0),
            "quota_exhausted": S["quota_exhausted"],
            "quota_at": S["quota_at"],
            "quota_until": S.get("quota_until", 0),
            "created": S["created"],
            "blocked": why or "",
            "hold_until": S.get("hold_until", 0),
            "hold_reason": S.get("hold_reason", ""),
            "ttl_max": S.get("ttl_max", 0),
            "held_back": "; ".join(held_back),
        }
        reply: list[Any] = [SCHEMA, "status"]
        for k, v in pairs.items():
            reply += [k, v if isinstance(v, str) else f"{v:.0f}"]
        reply += ["budgets", self._budget_section()]
        return reply

    def _budget_section(self) -> list[str]:
        kinds = self.active()
        reserved = dict.fromkeys(kinds, 0)
        for lease_id, expiry in self.leases.items():
            record = self._record(lease_id)
            if expiry > self.now and record is not None:
                for kind in kinds:
                    reserved[kind] += recorded(record).cost(kind)
        out: list[str] = []
        for kind in kinds:
            level = self.budget_level(kind)
            out += [kind, f"{self.S[f'{kind}_limit']:.0f}", f"{self._capacity_of(kind):.0f}", f"{level:.3f}"]
            out += [str(reserved[kind]), self.S[f"{kind}_source"]]
        return out

    def _parse_config(self, pairs: list[str]) -> dict[str, str]:
        """Config pairs as sent (lib/config.lua checks them; the core sends valid ones)."""
        raw = dict(zip(pairs[::2], pairs[1::2], strict=True))
        wanted = {*BASE_CONFIG, *POLICIES[raw["policy"]].config}
        if set(raw) != wanted:
            raise ModelViolation(f"config fields {sorted(raw)} are not those of policy {raw['policy']}")
        return raw

    def _apply_config(self, raw: dict[str, str]) -> None:
        """Store a config (another policy's fields go) and a fresh learnt state."""
        S = self.S
        self.raw_config = dict(raw)
        self.policy_state = {"streak": 0}
        hold_until = S.get("hold_until", 0)  # a recovery hold stays
        S.update(paused=0, pause_kind="", pause_reason="", paused_until=0, saved_capacity=0)
        S["not_before"] = hold_until if hold_until > self.now else 0
        S["capacity"] = self.C["max_capacity"]
        C = self.C
        for kind in BUDGET_KINDS:
            ceiling = C[f"{kind}_per_minute"]
            S.update({f"{kind}_limit": ceiling, f"{kind}_burst": 0, f"{kind}_level": ceiling, f"{kind}_at": self.now})
            S[f"{kind}_source"] = "configured" if ceiling > 0 else ""
        S["budgets"] = ",".join(k for k in BUDGET_KINDS if C[f"{k}_per_minute"] > 0)
        self.policy.reset(self)
        self._recount(fresh=True)

    # -- the scripts ----------------------------------------------------------

    def _op_init(self, a: list[str]) -> list[Any]:
        epoch, recovered, fence_floor, ttl = a[0], a[1] == "1", int(a[2]), int(a[3])
        listening, notice = a[4] == "1", int(a[5])
        # a[6]: restart_hold, which an injected clock never applies (no server age)
        raw = self._parse_config(a[7:])
        if self.state is not None:
            self._note_ttl(ttl)
            return [SCHEMA, "exists", self.S["epoch"], self.S.get("ttl_max", 0), *self._config_pairs()]
        # init deletes the state, config and policy hashes before it writes a new state
        self.state = {"schema": SCHEMA, "epoch": epoch, "created": self.now}
        self.S.update(fence=max(fence_floor, self.now * 1000), aging_due=0, event_seq=0, park_seq=0)
        self.S.update({f"vtime_{rank}": 0 for rank in range(MAX_CLASSES)})
        self.S.update(quota_exhausted=0, quota_at=0, quota_until=0, spend_until=0)
        self.aging, self.shares = {}, {}  # tags start again at vtime 0
        self.S.update(
            touch_due=0,
            reclaim_due=0,
            ttl_max=ttl,
            ttl_cur=ttl,
            ttl_since=self.now,
            hold_until=0,
            hold_reason="",
            durable=0,
            origin_node="",
        )
        self._apply_config(raw)
        self.published.append(epoch)  # the new state is announced: holders renew at once
        others = self.listeners - (1 if listening else 0)
        if recovered:
            self._hold_for(
                ttl,
                "the state was lost (a Redis restart without it, a flush or an expiry) while a client held leases "
                f"or used it: holding {ttl} ms (the longest lease TTL known) for holders to re-register",
            )
            self.S["capacity"] = self._resume_level()
        if others > 0:
            self._hold_for(
                notice, f"created while {others} other clients listen: holding {notice} ms for them to re-register"
            )
        if self.S.get("hold_until", 0) > 0:
            self._reborn()  # what the fleet spent before the loss is not known
        self._touch_all()
        return [SCHEMA, "created", epoch, ttl, *self._config_pairs()]

    def _config_pairs(self) -> list[str]:
        """The stored config as init.lua answers it: name, stored string (HGETALL order)."""
        return [part for pair in self.raw_config.items() for part in pair]

    def _op_acquire(self, a: list[str]) -> list[Any]:
        lease_id, holder, ttl, queue_ttl, mode = a[0], a[1], int(a[2]), int(a[3]), a[4]
        tokens = parse_tokens(a[5])
        rank, tenant, weight = int(a[6]), a[7], int(a[8])
        if mode not in ("wait", "again", "try"):
            raise ValueError(f"mode {mode!r}")
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._keep_alive()
        # the caller is alive: an announcing one has its TTL counted and learns the longest; one
        # that announced less than a third of its TTL ago has it counted still
        ttl_max: int | str = ""
        if len(a) < 10 or a[9] != "0":
            self._note_ttl(ttl)
            ttl_max = S["ttl_max"]
        else:
            self._ttl_noted = ttl
        if S["capacity"] == 0:
            self._recover()  # paused: a pause whose time is up lifts here too
        in_queue = False
        if mode == "again":
            expiry = self.leases.get(lease_id)
            if expiry is not None and expiry > self.now:
                record = self._record(lease_id)
                return [SCHEMA, "granted", record.fence if record else 0, expiry - self.now, S["epoch"], ttl_max]
            in_queue = lease_id in self.queue or lease_id in self.parked
        impossible = self.never(tokens)
        if impossible is not None:  # refused at once, whatever the mode; a queued id's place goes
            if in_queue:
                self.queue.pop(lease_id, None)
                self.parked.pop(lease_id, None)
                self.waiters.pop(lease_id, None)
                self.aging.pop(lease_id, None)
                self.holders.pop(lease_id, None)
            return [SCHEMA, "refused", impossible, S["epoch"], ttl_max]
        if in_queue:
            self.waiters[lease_id] = self.now + queue_ttl
        else:
            reason, hint = self.blocked(tokens, Place(rank, tenant))
            if self._queued() == 0 and reason is None:  # nobody waits and the rule admits: at once
                return [
                    SCHEMA,
                    "granted",
                    self._admit(lease_id, ttl, holder, tokens, (rank, tenant)),
                    ttl,
                    S["epoch"],
                    ttl_max,
                ]
            if mode == "try":
                return [SCHEMA, "denied", reason or "earlier callers are queued", str(hint), S["epoch"], ttl_max]
            self._enqueue(lease_id, rank, tenant, weight)
            self.waiters[lease_id] = self.now + queue_ttl
            record = HolderRecord(0, ttl, self.now, tokens.input, tokens.output, 0, rank, tenant, holder, tokens.apart)
            self.holders[lease_id] = record.format()
        granted = self._grant(lease_id)
        if lease_id in granted:
            return [SCHEMA, "granted", granted[lease_id], ttl, S["epoch"], ttl_max]
        reason, hint = self.blocked(tokens, Place(rank, tenant))
        return [
            SCHEMA,
            "queued",
            self._rank(lease_id),
            reason or "behind earlier waiters",
            str(hint),
            S["epoch"],
            ttl_max,
        ]

    def _rank(self, lease_id: str) -> int:
        """Its position in the queue (parked at its tenant's cap: -1)."""
        order = [m for m, _ in _zsorted(self.queue)]
        return order.index(lease_id) if lease_id in self.queue else -1

    def _waiting_on(self, lease_id: str) -> tuple[str, int]:
        """What holds a waiter: the rule's reason for its own cost and place, else its rank."""
        record = self._record(lease_id)
        tokens, place = NO_TOKENS, None
        if record is not None:
            score = self.queue.get(lease_id)
            aged = score is not None and score < QUEUE_BAND
            tokens, place = recorded(record), Place(record.rank, record.tenant, aged)
        why, hint = self.blocked(tokens, place)
        if why is not None:
            return why, hint
        ahead = self._rank(lease_id) if lease_id in self.queue else 0
        return f"behind {ahead} earlier waiter(s) of its class or above", 0

    def _op_refresh(self, a: list[str]) -> list[Any]:
        queue_ttl = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        grow = self._no_news()
        self._keep_alive()
        self._reclaim()
        self._recover()
        if grow is not None:
            grow()
        granted = self._grant()
        reason, hint = self.blocked()
        reply: list[Any] = [SCHEMA, "refreshed", self.S["epoch"], reason or "", str(hint)]
        deadline = self.now + queue_ttl
        for lease_id in a[1:]:
            expiry = self.leases.get(lease_id)
            if lease_id in granted:
                reply += ["granted", granted[lease_id], self.leases[lease_id] - self.now, ""]
            elif lease_id in self.queue or lease_id in self.parked:  # queued only with a place
                self.waiters[lease_id] = deadline
                why, wait = self._waiting_on(lease_id)
                reply += ["queued", self._rank(lease_id), wait, why]
            elif expiry is not None and expiry > self.now:
                record = self._record(lease_id)
                reply += ["granted", record.fence if record else 0, expiry - self.now, ""]
            else:
                reply += ["unknown", 0, 0, ""]
        return reply

    def _op_cancel(self, a: list[str]) -> list[Any]:
        lease_id = a[0]
        if self.state is None:
            return [SCHEMA, "missing"]
        self._keep_alive()
        was = "none"
        queued = self.queue.pop(lease_id, None) is not None
        if self.parked.pop(lease_id, None) is not None or queued:
            was = "queued"
            self.waiters.pop(lease_id, None)
            self.aging.pop(lease_id, None)
            self.holders.pop(lease_id, None)
        elif self.leases.pop(lease_id, None) is not None:
            was = "granted"
            record = self._record(lease_id)
            self.holders.pop(lease_id, None)
            self._unhold(record, waiting=True)
        self._reclaim()
        self._grant()
        return [SCHEMA, "cancelled", was]

    def _op_renew(self, a: list[str]) -> list[Any]:
        ttl = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._keep_alive()
        self._reclaim()
        self._note_ttl(ttl)
        reply: list[Any] = [SCHEMA, "renewed", S["epoch"]]
        items = a[1:]
        for i in range(0, len(items), 7):
            lease_id, epoch, holder, rank, tenant, _weight, tokens = items[i : i + 7]
            expiry = self.leases.get(lease_id)
            if expiry is not None and expiry > self.now:
                self.leases[lease_id] = max(expiry, self.now + ttl)  # ZADD XX GT: never shorter
                reply += ["ok", "0"]
            elif epoch != S["epoch"]:
                # its place and reservation carried by the renewal: counted in its cap, the reserve, the budgets
                place = (int(rank), tenant)
                reply += ["adopted", str(self._add_lease(lease_id, ttl, holder, parse_tokens(tokens), place))]
            else:
                if expiry is not None:
                    record = self._record(lease_id)
                    del self.leases[lease_id]
                    self.holders.pop(lease_id, None)
                    self._unhold(record, waiting=True)
                reply += ["lost", "0"]
        return reply

    def _give_back(self, lease_id: str, waiting: bool = True) -> int:
        """The lease and its holder record go (a waiter's record is not a
        lease's), and its counts in held (its tenant's first parked waiter
        back in the queue when ``waiting``)."""
        if self.leases.pop(lease_id, None) is None:
            return 0
        record = self._record(lease_id)
        self.holders.pop(lease_id, None)
        self._unhold(record, waiting)
        return 1

    def _op_release(self, a: list[str]) -> list[Any]:
        lease_id = a[0]
        waiting = len(self.queue) > 0 or len(self.parked) > 0
        if waiting:  # the slot goes to the head: the state is read (and missing is told)
            if self.state is None:
                return [SCHEMA, "missing"]
            self._keep_alive()
        removed = self._give_back(lease_id, waiting)
        if not waiting:  # no state, no clock read: a lost state answers 'released'
            return [SCHEMA, "released", removed]
        self._reclaim()
        self._grant()
        return [SCHEMA, "released", removed]

    def _op_report(self, a: list[str]) -> list[Any]:
        outcome, ra, lease_id = a[0], a[1], a[2]
        retry_after = int(ra) if ra != "" else None
        fence = int(a[3]) if a[3] != "" else None
        release = lease_id != "" and a[4] == "1"
        usage = parse_tokens(a[5]) if len(a) > 5 and a[5] else None
        spent = not (len(a) > 6 and a[6] == "0")  # refusals counted by the provider (the default)
        if outcome == "b" and not hasattr(self.policy, "background"):
            outcome = "r"  # no load signal, to a policy with no rule for it: a refusal as any
        limits = []
        for kind, figures in zip(a[7::2], a[8::2], strict=True):  # kind, "limit,remaining" pairs
            limit, remaining = figures.split(",")
            limits.append((kind, int(limit) if limit else None, int(remaining) if remaining else None))
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._keep_alive()
        waiting = len(self.queue) > 0 or len(self.parked) > 0
        # the lease's record: what a usage settles, and a refusal without one the tier it clamps
        held = self._record(lease_id) if lease_id and (usage is not None or outcome == "r") and self.active() else None
        if lease_id != "":
            expiry = self.leases.get(lease_id)
            if expiry is None or expiry <= self.now:
                if release:
                    self._give_back(lease_id, waiting)
                if waiting:
                    self._grant()  # its tenant's first parked waiter may be back in the queue
                return [SCHEMA, "lost"]  # fenced off: changes nothing of others'
        self._reclaim()
        if outcome == "q":
            S["quota_exhausted"] += 1
            S["quota_at"] = self.now
            S["quota_until"] = self.now + retry_after if retry_after is not None else 0
        else:
            holds = self._record_attempt(outcome, fence)
            if outcome == "r" and retry_after is not None and holds:  # the provider asked the whole fleet to hold
                until = self.now + min(retry_after, self.C["retry_after_cap_ms"])
                if until > S["not_before"]:
                    S["not_before"] = until
        if held is not None and usage is not None:
            self._settle(recorded(held), usage, spent=outcome in ("r", "b") and spent)
        for kind, limit, remaining in limits:
            self._calibrate(kind, limit, remaining)
        if outcome == "r":
            tier = usage.apart if usage is not None and usage.tier is not None else (held.tier if held else "")
            self._refused({kind for kind, _, remaining in limits if remaining is not None}, tier)
        if release:
            self._give_back(lease_id, waiting)
        if waiting:
            self._grant()
        return [SCHEMA, "reported"]

    def _op_probe(self, a: list[str]) -> list[Any]:
        if self.state is None:
            return [SCHEMA, "missing"]
        grow = self._no_news()
        self._keep_alive()
        self._reclaim(force=True)
        self._recover()
        if grow is not None:
            grow()
        self._grant()
        return self._status_reply()

    def _op_status(self, a: list[str]) -> list[Any]:
        if self.state is None:
            return [SCHEMA, "missing"]
        return self._status_reply()

    def _op_pause(self, a: list[str]) -> list[Any]:
        reason, duration = a[0], int(a[1])
        if self.state is None:
            return [SCHEMA, "missing"]
        self._keep_alive()
        self.pause("operator", reason, self.now + duration if duration > 0 else 0)
        return self._status_reply()

    def _op_resume(self, a: list[str]) -> list[Any]:
        lift = (a[0] if a else "") == "lift-hold"
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._keep_alive()
        if S["paused"] == 1:
            if S["pause_kind"] == "operator" and S["saved_capacity"] > 0:
                self._resume(S["saved_capacity"])
            else:
                self._resume(self._resume_level())
        recovery = S.get("hold_until", 0)
        if recovery > self.now and lift:
            S["hold_until"], S["hold_reason"], recovery = 0, "", 0
        S["not_before"] = recovery if recovery > self.now else 0
        self._reclaim(force=True)
        self._grant()
        return self._status_reply()

    def _op_set_max(self, a: list[str]) -> list[Any]:
        n = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._keep_alive()
        self.raw_config["max_capacity"] = str(n)
        reserve = self.C["reserve"]
        if reserve >= n:  # a reserve stays below the ceiling
            self.raw_config["reserve"] = str(n - 1)
        if S["paused"] == 1:
            if S["saved_capacity"] > n:
                S["saved_capacity"] = n
        else:  # the policy's rule: the adaptive one keeps what it learnt
            self.policy.new_max(self)
        self.published.append(f"{S['epoch']} !config")  # clients learn the stored config anew
        self._reclaim(force=True)
        if self.C["reserve"] != reserve:
            self._recount(fresh=False)
        self._grant()
        return self._status_reply()

    def _op_set_shares(self, a: list[str]) -> list[Any]:
        weights, default_weight, aging, caps, reserve = a[0], a[1], a[2], a[3], a[4]
        if self.state is None:
            return [SCHEMA, "missing"]
        self._keep_alive()
        recounts = caps != self.raw_config["tenant_caps"] or reserve != self.raw_config["reserve"]
        self._reclaim(force=True)  # by the caps before the change (the script reclaims after storing them)
        self.raw_config.update(tenant_weights=weights, default_weight=default_weight, aging_ms=aging)
        self.raw_config.update(tenant_caps=caps, reserve=reserve)
        self.published.append(f"{self.S['epoch']} !config")  # clients learn the stored config anew
        if recounts:
            self._recount(fresh=False)
        self._grant()
        return self._status_reply()

    def _op_reset(self, a: list[str]) -> list[Any]:
        raw = self._parse_config(a) if a else None
        if self.state is None:
            return [SCHEMA, "missing"]
        self._keep_alive()
        self.attempts = []
        # the longest lease TTL counted again from the live leases (none: the lowest TTL)
        live = [self._record(i) for i, expiry in self.leases.items() if expiry > self.now]
        longest = int(max([LEASE_TTL.low, *(r.ttl_ms for r in live if r is not None)]))
        self.S.update(ttl_max=longest, ttl_cur=longest, ttl_since=self.now)
        # without a config: the stored config applied afresh; with one: the caller's
        self._apply_config(raw if raw is not None else self.raw_config)
        if raw is not None:
            self.published.append(f"{self.S['epoch']} !config")  # clients learn the stored config anew
        self._reclaim(force=True)
        self._grant()
        return self._status_reply()

    # -- what the keys would hold ---------------------------------------------

    def lose_state(self) -> None:
        """Every key gone (Redis restarted without persistence, FLUSHDB)."""
        self.state = None
        self.raw_config, self.policy_state = {}, {}
        self.last_tag = {}
        self.leases, self.holders, self.queue, self.waiters, self.attempts = {}, {}, {}, {}, []
        self.aging, self.shares, self.held, self.parked = {}, {}, {}, {}

    def stored(self) -> dict[str, dict[str, Any]]:
        """The three hashes (strings as strings, numbers as floats: see :func:`parse_hash`);
        the config as its exact strings."""
        if self.state is None:
            return {"state": {}, "config": {}, "policy": {}}
        return {
            "state": parse_hash({k: str(v) for k, v in self.S.items()}),
            "config": dict(self.raw_config),
            "policy": parse_hash({k: str(v) for k, v in self.P.items()}),
        }

    def queue_order(self) -> list[str]:
        return [m for m, _ in _zsorted(self.queue)]


def _lua_int(x: float) -> str:
    """math.floor(x) as Lua writes it in a string."""
    return str(math.floor(x))


def _lua_num(x: float) -> str:
    """A number as Lua 5.1's tostring writes it (%.14g)."""
    return f"{x:.14g}"


def init_call(core: Any, holds_leases: bool) -> Any:
    """``core.init`` for a client whose worker does not listen on the channel."""
    return core.init(holds_leases=holds_leases, listening=False)


def parse_hash(raw: dict[str, str]) -> dict[str, Any]:
    """A state or policy hash read from Redis, comparable with :meth:`Model.stored`."""
    return {k: (v if k in STRING_FIELDS else float(v)) for k, v in raw.items()}
