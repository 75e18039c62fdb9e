"""A reference model of SPEC §3-§4 in plain Python: no Redis, no Lua.

:class:`Model` answers the same calls as the scripts in ``lua/`` (same
ARGV, same replies, same stored state), so a property test can drive the
real scripts and the model with one random sequence of operations and
compare them after every step (tests/test_model.py).

The model keeps the keys of one governor as plain containers and follows
the rules of lua/common.lua one by one: the sliding window, the two
policies (``seed``: halve, pause, resume at a quarter, +1 per streak;
``adaptive``: one cut per congestion episode, the pushback ceiling,
probing above it), the Retry-After hold, operator pause/resume/set_max/
reset, TTL leases with lazy reclaim (at most ``BATCH`` per call, in the
order Redis sorts a sorted set), the FIFO queue with waiter deadlines,
grants on release/expiry/capacity change, and fences.

Besides answering, the model checks the rules SPEC §3 states as
invariants, independently of how the scripts are written: every admission
happens while not paused, not held, with ``in_flight < capacity`` and with
no earlier live waiter left behind; no lease id is granted twice; fences
only grow. A broken rule raises :class:`ModelViolation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1
BATCH = 64
RECLAIM_MS = 1000
STRING_FIELDS = frozenset({"epoch", "policy", "reason", "pause_kind"})
CONFIG_INT = frozenset(
    {"max", "window_ms", "dec_count", "ratio_min", "pause_count", "inc_succ", "probe_ms", "ra_cap_ms", "idle_ms"}
    | {"log_len"}
)
CONFIG_NUM = frozenset({"dec_ratio", "dec_factor", "pause_ratio", "resume_frac", "cut_factor"})
#: the config fields in the order init.lua answers them (CONFIG of lua/lib/common.lua)
CONFIG = (
    "policy", "max", "window_ms", "dec_count", "dec_ratio", "ratio_min", "dec_factor", "pause_count",
    "pause_ratio", "resume_frac", "inc_succ", "cut_factor", "probe_ms", "ra_cap_ms", "idle_ms", "log_len",
)  # fmt: skip
#: the state fields the model keeps exactly as the scripts store them
STATE_FIELDS = (
    "schema",
    "epoch",
    "created",
    "policy",
    "fence",
    "ticket",
    "evseq",
    "cap",
    "max",
    "paused",
    "pause_kind",
    "reason",
    "paused_until",
    "saved_cap",
    "not_before",
    "streak",
    "ceiling",
    "cut_fence",
    "probe_at",
    "probe_step",
    "probe_wait",
    "climb",
    "quota_count",
    "quota_at",
    "touch_due",
    "reclaim_due",
    *sorted(CONFIG_INT | CONFIG_NUM),
)
PAUSE_REASON = "waiting for provider rate-limit recovery"


class ModelViolation(AssertionError):
    """A rule of SPEC §3 was broken (by the model's own bookkeeping)."""


def _zsorted(zset: dict[str, int]) -> list[tuple[str, int]]:
    """Members in Redis order: by score, then by member bytes."""
    return sorted(zset.items(), key=lambda kv: (kv[1], kv[0].encode()))


@dataclass
class Model:
    """The keys of one governor and the scripts that change them."""

    state: dict[str, Any] | None = None
    leases: dict[str, int] = field(default_factory=dict)  #: id -> expiry ms
    holders: dict[str, str] = field(default_factory=dict)  #: id -> "fence|ttl|since|holder"
    queue: dict[str, int] = field(default_factory=dict)  #: id -> ticket
    waiters: dict[str, int] = field(default_factory=dict)  #: id -> deadline ms
    attempts: list[tuple[int, str]] = field(default_factory=list)  #: (time, "seq:o")
    published: list[str] = field(default_factory=list)  #: grant announcements, in order
    #: every grant made (id, fence), in order; adoptions are not grants
    grants: list[tuple[str, int]] = field(default_factory=list)
    now: int = 0
    #: ticket of the last waiter admitted from the queue (FIFO: only grows)
    last_ticket: int = 0
    #: clients subscribed to the wake channel (init holds when others listen)
    listeners: int = 0
    #: the stored config as the exact strings the scripts keep
    raw_config: dict[str, str] = field(default_factory=dict)

    # -- entry point ----------------------------------------------------------

    def call(self, script: str, args: tuple[str, ...] | list[str]) -> list[Any]:
        """Run ``script`` with ``args`` (ARGV: now, channel, own arguments)."""
        args = list(args)
        if args[0] == "":
            raise ValueError("the model needs an injected clock (ARGV[1])")
        self.now = int(args[0])
        if self.state is not None and script not in ("status", "init"):
            self._touch()
        handler = getattr(self, f"_op_{script}")
        reply: list[Any] = handler(args[2:])
        return reply

    # -- helpers (lua/common.lua) ---------------------------------------------

    @property
    def S(self) -> dict[str, Any]:
        assert self.state is not None
        return self.state

    def _in_flight(self) -> int:
        return sum(1 for e in self.leases.values() if e > self.now)

    def _queued(self) -> int:
        return sum(1 for d in self.waiters.values() if d > self.now)

    def _reclaim(self, force: bool = False) -> None:
        """Expired leases and dead waiters go, at most BATCH of each, at most
        once per RECLAIM_MS unless forced; old window events are pruned."""
        S = self.S
        if not force and self.now < S.get("reclaim_due", 0):
            return
        S["reclaim_due"] = self.now + RECLAIM_MS
        expired = [m for m, s in _zsorted(self.leases) if s <= self.now][:BATCH]
        for m in expired:
            del self.leases[m]
            self.holders.pop(m, None)
        dead = [m for m, s in _zsorted(self.waiters) if s <= self.now][:BATCH]
        for m in dead:
            del self.waiters[m]
            self.queue.pop(m, None)
            self.holders.pop(m, None)
        horizon = self.now - S["window_ms"]
        self.attempts = [(t, m) for t, m in self.attempts if t >= horizon]

    def _window(self) -> tuple[int, int]:
        """(rate-limited, all) attempts of the last window: newer than NOW - window."""
        horizon = self.now - self.S["window_ms"]
        live = [m for t, m in self.attempts if t > horizon]
        return sum(1 for m in live if m.endswith(":r")), len(live)

    def _touch(self) -> None:
        """A writing script pushes every key's expiry back at most every
        idle_ms / 8 (the next time is touch_due), as it loads the state."""
        S = self.S
        if self.now >= S.get("touch_due", 0):
            S["touch_due"] = self.now + S["idle_ms"] // 8

    def _finish(self, reply: list[Any]) -> list[Any]:
        """Every writing script ends here (the scripts save the state)."""
        return reply

    def _resume_level(self) -> int:
        return max(1, math.floor(float(self.S["max"]) * float(self.S["resume_frac"])))

    def _pause(self, kind: str, reason: str, until: int) -> None:
        S = self.S
        if S["paused"] == 0:
            S["saved_cap"] = S["cap"]
        elif S["pause_kind"] == "policy":
            S["saved_cap"] = self._resume_level()  # a pause over a policy pause resumes at the resume level
        S.update(paused=1, pause_kind=kind, reason=reason, paused_until=until, cap=0, streak=0)

    def _resume(self, cap: int) -> None:
        S = self.S
        S.update(paused=0, pause_kind="", reason="", paused_until=0, saved_cap=0, streak=0)
        S["cap"] = max(1, min(cap, S["max"]))

    def _recover(self, rl: int | None = None) -> None:
        S = self.S
        if S["paused"] == 0:
            return
        if S["pause_kind"] == "policy":
            if rl is None:
                rl, _ = self._window()
            if rl == 0:
                self._resume(self._resume_level())
        elif S["paused_until"] > 0 and self.now >= S["paused_until"]:
            self._resume(S["saved_cap"] if S["saved_cap"] > 0 else self._resume_level())

    def _blocked(self) -> tuple[str | None, int]:
        S = self.S
        if S["paused"] == 1:
            hint = S["paused_until"] - self.now if S["paused_until"] > 0 else 0
            return "paused: " + S["reason"], hint
        if self.now < S["not_before"]:
            return "holding until the provider's retry-after", S["not_before"] - self.now
        return None, 0

    def _meta(self, lease_id: str) -> tuple[int, int, int, str] | None:
        raw = self.holders.get(lease_id)
        if raw is None:
            return None
        fence, ttl, since, holder = raw.split("|", 3)
        return int(fence), int(ttl), int(since), holder

    def _admit(self, lease_id: str, ttl: int, holder: str) -> int:
        """One admission: check the rules of SPEC §3, take the next fence."""
        S = self.S
        if S["paused"] == 1 or self.now < S["not_before"]:
            raise ModelViolation(f"{lease_id} admitted while paused or held")
        live = self._in_flight()
        if live >= S["cap"]:
            raise ModelViolation(f"{lease_id} admitted with {live} in flight of capacity {S['cap']}")
        if self.leases.get(lease_id, 0) > self.now:
            raise ModelViolation(f"lease {lease_id} granted while it is live")
        S["fence"] += 1
        if self.grants and S["fence"] <= max(f for _, f in self.grants):
            raise ModelViolation("fence did not grow")
        self.leases[lease_id] = self.now + ttl
        self.holders[lease_id] = f"{S['fence']}|{ttl}|{self.now}|{holder}"
        self.grants.append((lease_id, S["fence"]))
        return int(S["fence"])

    def _grant(self, caller: str | None = None) -> dict[str, int]:
        S = self.S
        granted: dict[str, int] = {}
        if S["paused"] == 1 or self.now < S["not_before"]:
            _, hint = self._blocked()
            if hint > 0 and self.queue:  # ask again when the time is up
                self.published.append(f"{S['epoch']} @{hint}")
            return granted
        live = self._in_flight()
        words: list[str] = []
        skipped = admitted = 0
        while live < S["cap"] and skipped <= BATCH and admitted < BATCH:  # at most BATCH grants per call
            if not self.queue:
                break
            head, ticket = _zsorted(self.queue)[0]
            deadline = self.waiters.pop(head, None)
            del self.queue[head]
            meta = self._meta(head)
            if deadline is not None and deadline > self.now and meta is not None:
                if ticket <= self.last_ticket:
                    raise ModelViolation(f"FIFO broken: ticket {ticket} granted after {self.last_ticket}")
                self.last_ticket = ticket
                granted[head] = self._admit(head, meta[1], meta[3])
                if head != caller:
                    words.append(f"{head}:{granted[head]}")
                live += 1
                admitted += 1
            else:
                self.holders.pop(head, None)
                skipped += 1
        if words:
            self.published.append(S["epoch"] + " " + " ".join(words))
        return granted

    def _set_cap(self, cap: int) -> None:
        self.S["cap"] = max(0, min(cap, self.S["max"]))

    def _on_limited_seed(self, rl: int, total: int) -> None:
        S = self.S
        if rl >= S["pause_count"]:
            self._pause("policy", PAUSE_REASON, 0)
        elif rl >= S["dec_count"] or (total >= S["ratio_min"] and rl / total > S["dec_ratio"]):
            self._set_cap(max(1, math.floor(S["cap"] * S["dec_factor"])))

    def _on_limited_adaptive(self, rl: int, total: int, fence: int | None) -> None:
        S = self.S
        if fence is not None and fence <= S["cut_fence"]:
            if S["ceiling"] > 1:  # an older lease's 429: the level was one lower
                S["ceiling"] -= 1
                self._set_cap(min(S["cap"], S["ceiling"]))
            return
        live = self._in_flight()
        level = max(1, min(live, S["cap"])) if live > 0 else S["cap"]
        if level <= 1 and rl >= S["pause_count"] and rl >= S["pause_ratio"] * total:
            self._pause("policy", PAUSE_REASON, 0)
            S["cut_fence"] = S["fence"]
            return
        cap = max(1, math.floor(level * S["cut_factor"]))
        if S["climb"] == 1:  # refused again before the next probe
            ceiling, wait = cap, S["probe_ms"]
        else:
            ceiling = level
            if S["ceiling"] > 0 and level >= S["ceiling"]:
                wait = min(S["probe_wait"] * 2, max(S["probe_ms"], S["window_ms"] / 2))
            else:
                wait = S["probe_ms"]
        S.update(ceiling=ceiling, cut_fence=S["fence"], probe_step=1, probe_at=self.now, probe_wait=wait, climb=1)
        self._set_cap(cap)

    def _on_success_seed(self) -> None:
        S = self.S
        S["streak"] += 1
        if S["streak"] >= S["inc_succ"]:
            S["streak"] = 0
            self._set_cap(S["cap"] + 1)

    def _on_success_adaptive(self) -> None:
        S = self.S
        S["streak"] += 1
        if S["cap"] >= S["max"]:
            S["streak"] = 0
            return
        if S["ceiling"] == 0 or S["cap"] + 1 < S["ceiling"]:
            S["streak"] = 0
            self._set_cap(S["cap"] + 1)
        elif S["streak"] >= S["inc_succ"] and self.now - S["probe_at"] >= (
            S["probe_wait"] if S["cap"] < S["ceiling"] else S["probe_ms"]
        ):
            S["streak"] = 0
            S["climb"] = 0
            if S["cap"] >= S["ceiling"]:
                S["probe_wait"] = S["probe_ms"]
            S["probe_at"] = self.now
            step = S["probe_step"]
            S["probe_step"] = min(S["probe_step"] * 2, S["max"])
            self._set_cap(S["cap"] + step)

    def _record(self, outcome: str, fence: int | None) -> None:
        S = self.S
        S["evseq"] += 1
        self.attempts.append((self.now, f"{S['evseq']}:{outcome}"))
        rl, total = self._window()  # the scripts count first and add one: the same
        if outcome == "r":
            S["streak"] = 0
            if S["paused"] == 1:
                return
            if S["policy"] == "seed":
                self._on_limited_seed(rl, total)
            else:
                self._on_limited_adaptive(rl, total, fence)
        elif outcome == "s":
            if S["paused"] == 1:
                self._recover(rl)
            elif S["policy"] == "seed":
                self._on_success_seed()
            else:
                self._on_success_adaptive()
        else:
            self._recover(rl)

    def _status_reply(self) -> list[Any]:
        S = self.S
        rl, total = self._window()
        pairs = {
            "now": self.now,
            "epoch": S["epoch"],
            "policy": S["policy"],
            "capacity": S["cap"],
            "max_capacity": S["max"],
            "paused": S["paused"],
            "pause_kind": S["pause_kind"],
            "reason": S["reason"],
            "paused_until": S["paused_until"],
            "not_before": S["not_before"],
            "in_flight": self._in_flight(),
            "queued": self._queued(),
            "window_limited": rl,
            "window_attempts": total,
            "window_ms": S["window_ms"],
            "streak": S["streak"],
            "fence": S["fence"],
            "ceiling": S["ceiling"],
            "quota_exhausted": S["quota_count"],
            "quota_at": S["quota_at"],
            "created": S["created"],
        }
        reply: list[Any] = [SCHEMA, "status"]
        for k, v in pairs.items():
            reply += [k, v if isinstance(v, str) else f"{v:.0f}"]
        return reply

    def _parse_config(self, pairs: list[str]) -> dict[str, Any]:
        cfg: dict[str, Any] = {}
        for name, raw in zip(pairs[::2], pairs[1::2], strict=True):
            if name == "policy":
                cfg[name] = raw
            elif name in CONFIG_INT:
                cfg[name] = int(raw)
            else:
                cfg[name] = float(raw)
        return cfg

    def _apply_config(self, cfg: dict[str, Any]) -> None:
        S = self.S
        S.update(cfg)
        S.update(paused=0, pause_kind="", reason="", paused_until=0, saved_cap=0, not_before=0)
        S.update(
            cap=cfg["max"],
            streak=0,
            ceiling=0,
            cut_fence=S["fence"],
            probe_at=self.now,
            probe_step=1,
            probe_wait=cfg["probe_ms"],
            climb=0,
        )

    # -- the scripts ----------------------------------------------------------

    def _op_init(self, a: list[str]) -> list[Any]:
        epoch, recovered, fence_floor, ttl = a[0], a[1] == "1", int(a[2]), int(a[3])
        listening, notice = a[4] == "1", int(a[5])
        # a[6]: restart_hold, which an injected clock never applies (no server age)
        cfg = self._parse_config(a[7:])
        if self.state is not None:
            return [SCHEMA, "exists", self.S["epoch"], *self._config_pairs()]
        self.state = {"fence": max(fence_floor, self.now * 1000)}
        self.S.update(schema=SCHEMA, epoch=epoch, created=self.now, ticket=0, evseq=0, quota_count=0, quota_at=0)
        self.S.update(touch_due=0, reclaim_due=0)
        self._apply_config(cfg)
        self.raw_config = dict(zip(a[7::2], a[8::2], strict=True))
        self.published.append(epoch)  # the new state is announced: holders renew at once
        others = self.listeners - (1 if listening else 0)
        hold = ttl if recovered else 0
        if others > 0 and notice > hold:
            hold = notice
        if recovered:
            self.S["cap"] = self._resume_level()
        if hold > 0:
            self.S["not_before"] = self.now + hold
        self._touch()
        return self._finish([SCHEMA, "created", epoch, *self._config_pairs()])

    def _config_pairs(self) -> list[str]:
        """The stored config as init.lua answers it: CONFIG order, stored strings."""
        out: list[str] = []
        for name in CONFIG:
            out += [name, self.raw_config[name]]
        return out

    def _op_acquire(self, a: list[str]) -> list[Any]:
        lease_id, holder, ttl, wait, queue_ttl = a[0], a[1], int(a[2]), a[3] == "1", int(a[4])
        fresh = len(a) > 5 and a[5] == "1"
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._reclaim()
        self._recover()
        in_queue = False
        if not fresh:
            expiry = self.leases.get(lease_id)
            if expiry is not None and expiry > self.now:
                meta = self._meta(lease_id)
                return self._finish([SCHEMA, "granted", meta[0] if meta else 0, expiry - self.now, S["epoch"]])
            in_queue = lease_id in self.queue
        if in_queue:
            self.waiters[lease_id] = self.now + queue_ttl
        else:
            reason, hint = self._blocked()
            if self._queued() == 0:
                live = self._in_flight()
                if reason is None and live < S["cap"]:
                    fence = self._admit(lease_id, ttl, holder)
                    return self._finish([SCHEMA, "granted", fence, ttl, S["epoch"]])
                reason = reason or f"at capacity: {live} in flight of {S['cap']}"
            else:
                reason = reason or "earlier callers are queued"
            if not wait:
                return self._finish([SCHEMA, "denied", reason, str(hint), S["epoch"]])
            S["ticket"] += 1
            self.queue[lease_id] = S["ticket"]
            self.waiters[lease_id] = self.now + queue_ttl
            self.holders[lease_id] = f"0|{ttl}|{self.now}|{holder}"
        granted = self._grant(lease_id)
        if lease_id in granted:
            return self._finish([SCHEMA, "granted", granted[lease_id], ttl, S["epoch"]])
        reason, hint = self._blocked()
        if reason is None:
            live = self._in_flight()
            reason = f"at capacity: {live} in flight of {S['cap']}" if live >= S["cap"] else "behind earlier waiters"
        return self._finish([SCHEMA, "queued", self._rank(lease_id), reason, str(hint), S["epoch"]])

    def _rank(self, lease_id: str) -> int:
        return [m for m, _ in _zsorted(self.queue)].index(lease_id)

    def _op_refresh(self, a: list[str]) -> list[Any]:
        queue_ttl = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        self._reclaim()
        self._recover()
        granted = self._grant()
        reason, hint = self._blocked()
        reply: list[Any] = [SCHEMA, "refreshed", self.S["epoch"], reason or "", str(hint)]
        deadline = self.now + queue_ttl
        for lease_id in a[1:]:
            expiry = self.leases.get(lease_id)
            changed = lease_id in self.waiters and self.waiters[lease_id] != deadline
            if lease_id in self.waiters:
                self.waiters[lease_id] = deadline  # ZADD XX CH
            if lease_id in granted:
                reply += ["granted", granted[lease_id], self.leases[lease_id] - self.now]
            elif changed or lease_id in self.queue:
                reply += ["queued", 0, 0]
            elif expiry is not None and expiry > self.now:
                meta = self._meta(lease_id)
                reply += ["granted", meta[0] if meta else 0, expiry - self.now]
            else:
                reply += ["unknown", 0, 0]
        return self._finish(reply)

    def _op_cancel(self, a: list[str]) -> list[Any]:
        lease_id = a[0]
        if self.state is None:
            return [SCHEMA, "missing"]
        was = "none"
        if self.queue.pop(lease_id, None) is not None:
            was = "queued"
            self.waiters.pop(lease_id, None)
            self.holders.pop(lease_id, None)
        elif self.leases.pop(lease_id, None) is not None:
            was = "granted"
            self.holders.pop(lease_id, None)
        self._reclaim()
        self._grant()
        return self._finish([SCHEMA, "cancelled", was])

    def _op_renew(self, a: list[str]) -> list[Any]:
        ttl = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        self._reclaim()
        reply: list[Any] = [SCHEMA, "renewed", S["epoch"]]
        triples = a[1:]
        for i in range(0, len(triples), 3):
            lease_id, epoch, holder = triples[i : i + 3]
            expiry = self.leases.get(lease_id)
            if expiry is not None and expiry > self.now:
                self.leases[lease_id] = max(expiry, self.now + ttl)  # ZADD XX GT: never shorter
                reply += ["ok", "0"]
            elif epoch != S["epoch"] and len(holder.encode()) <= 200:
                S["fence"] += 1
                self.leases[lease_id] = self.now + ttl
                self.holders[lease_id] = f"{S['fence']}|{ttl}|{self.now}|{holder}"
                reply += ["adopted", str(S["fence"])]
            else:
                if expiry is not None:
                    del self.leases[lease_id]
                    self.holders.pop(lease_id, None)
                reply += ["lost", "0"]
        return self._finish(reply)

    def _op_release(self, a: list[str]) -> list[Any]:
        lease_id = a[0]
        if self.state is None:
            return [SCHEMA, "missing"]
        removed = 0
        if self.leases.pop(lease_id, None) is not None:
            removed = 1
            self.holders.pop(lease_id, None)
        self._reclaim()
        self._grant()
        return self._finish([SCHEMA, "released", removed])

    def _op_report(self, a: list[str]) -> list[Any]:
        outcome, ra, lease_id = a[0], a[1], a[2]
        retry_after = int(ra) if ra != "" else None
        fence = int(a[3]) if a[3] != "" else None
        release = lease_id != "" and a[4] == "1"
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S

        def hold() -> None:  # the provider asked the whole fleet to hold
            if outcome == "r" and retry_after is not None:
                until = self.now + min(retry_after, S["ra_cap_ms"])
                if until > S["not_before"]:
                    S["not_before"] = until

        def give_back() -> None:  # report(release=True): the lease goes in the same call
            if release and self.leases.pop(lease_id, None) is not None:
                self.holders.pop(lease_id, None)

        if lease_id != "":
            expiry = self.leases.get(lease_id)
            if expiry is None or expiry <= self.now:
                give_back()
                return self._finish([SCHEMA, "lost"])  # fenced off: changes nothing of others'

        self._reclaim()
        if outcome == "q":
            S["quota_count"] += 1
            S["quota_at"] = self.now
        else:
            self._record(outcome, fence)
            hold()
        give_back()
        self._grant()
        return self._finish([SCHEMA, "reported"])

    def _op_probe(self, a: list[str]) -> list[Any]:
        if self.state is None:
            return [SCHEMA, "missing"]
        self._reclaim(force=True)
        self._recover()
        self._grant()
        return self._finish(self._status_reply())

    def _op_status(self, a: list[str]) -> list[Any]:
        if self.state is None:
            return [SCHEMA, "missing"]
        return self._status_reply()

    def _op_pause(self, a: list[str]) -> list[Any]:
        reason, duration = a[0], int(a[1])
        if self.state is None:
            return [SCHEMA, "missing"]
        self._pause("operator", reason, self.now + duration if duration > 0 else 0)
        return self._finish(self._status_reply())

    def _op_resume(self, a: list[str]) -> list[Any]:
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        if S["paused"] == 1:
            if S["pause_kind"] == "operator" and S["saved_cap"] > 0:
                self._resume(S["saved_cap"])
            else:
                self._resume(self._resume_level())
        S["not_before"] = 0
        self._reclaim(force=True)
        self._grant()
        return self._finish(self._status_reply())

    def _op_set_max(self, a: list[str]) -> list[Any]:
        n = int(a[0])
        if self.state is None:
            return [SCHEMA, "missing"]
        S = self.S
        S["max"] = n
        self.raw_config["max"] = str(n)
        if S["paused"] == 1:
            if S["saved_cap"] > n:
                S["saved_cap"] = n
        else:
            S.update(cap=n, ceiling=0, climb=0, cut_fence=S["fence"])
        self.published.append(f"{S['epoch']} !config")  # clients learn the stored config anew
        self._reclaim(force=True)
        self._grant()
        return self._finish(self._status_reply())

    def _op_reset(self, a: list[str]) -> list[Any]:
        cfg = self._parse_config(a) if a else None
        if self.state is None:
            return [SCHEMA, "missing"]
        self.attempts = []
        if cfg is None:
            cfg = {k: self.S[k] for k in (*CONFIG_INT, *CONFIG_NUM, "policy")}
        else:
            self.raw_config = dict(zip(a[::2], a[1::2], strict=True))
        self._apply_config(cfg)
        if a:
            self.published.append(f"{self.S['epoch']} !config")  # clients learn the stored config anew
        self._reclaim(force=True)
        self._grant()
        return self._finish(self._status_reply())

    # -- what the keys would hold ---------------------------------------------

    def lose_state(self) -> None:
        """Every key gone (Redis restarted without persistence, FLUSHDB)."""
        self.state = None
        self.last_ticket = 0
        self.leases, self.holders, self.queue, self.waiters, self.attempts = {}, {}, {}, {}, []

    def stored_state(self) -> dict[str, Any]:
        """The state hash (strings as strings, numbers as floats: see :func:`parse_state`)."""
        return {k: (v if k in STRING_FIELDS else float(v)) for k, v in self.S.items() if k in STATE_FIELDS}

    def queue_order(self) -> list[str]:
        return [m for m, _ in _zsorted(self.queue)]


def init_call(core: Any, holds_leases: bool) -> Any:
    """``core.init`` for a client whose worker does not listen on the channel."""
    import inspect

    if "listening" in inspect.signature(core.init).parameters:
        return core.init(holds_leases=holds_leases, listening=False)
    return core.init(holds_leases=holds_leases)


def parse_state(raw: dict[str, str]) -> dict[str, Any]:
    """A state hash read from Redis, comparable with :meth:`Model.stored_state`."""
    return {k: (v if k in STRING_FIELDS else float(v)) for k, v in raw.items()}
