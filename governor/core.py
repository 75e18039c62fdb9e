"""The sans-IO core shared by the sync and asyncio facades.

It validates input, builds the ARGV of every script and parses every reply into
the frozen result types below. It performs no I/O and never waits: ``governor/_async``
runs these calls with ``await``, ``governor/_sync`` (generated from it) without.
Time comes from the injected clock when one is given, else from Redis ``TIME``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .budgets import KINDS as BUDGET_KINDS
from .budgets import Tokens, parse_budgets
from .config import GovernorConfig
from .errors import ConfigError, CostTooLarge, StateError
from .protocol import (
    BACKGROUND_REFUSAL,
    DEFAULT_TENANT,
    MAX_CAPACITY,
    SCHEMA_VERSION,
    GovernorKeys,
    Outcome,
    Wake,
    governor_keys,
    ms,
    validate_tenant,
)
from .replies import (
    MISSING,
    UNSET,
    Ask,
    Call,
    Denied,
    Granted,
    Missing,
    Place,
    Queued,
    Refreshed,
    Renewed,
    Status,
    _Unset,
    holder_label,
)
from .spend import spend_answer, spend_args

#: defined in governor.protocol and governor.replies, used through here too
__all__ = [
    "MISSING",
    "UNSET",
    "Ask",
    "Call",
    "Denied",
    "Granted",
    "Missing",
    "Outcome",
    "Place",
    "Queued",
    "Refreshed",
    "Renewed",
    "Status",
    "Wake",
    "_Unset",
]

Clock = Callable[[], float]
T = TypeVar("T")
R = TypeVar("R", covariant=True)


#: the stored config fields a Place and set_shares are resolved from
_SHARE_FIELDS = (
    "max_capacity",  # the reserve is checked against it
    "priorities",
    "default_priority",
    "tenant_weights",
    "default_weight",
    "aging_ms",
    "tenant_caps",
    "reserve",
)
#: set_shares.lua's ARGV[3..], in order
_SET_SHARES_ARGS = ("tenant_weights", "default_weight", "aging_ms", "tenant_caps", "reserve")


def text(value: Any) -> str:
    """A reply element as str, whatever decode_responses is."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def new_id() -> str:
    """An unguessable lease id (128 random bits)."""
    return secrets.token_hex(16)


def number(value: Any) -> int:
    """A reply element that is an integer, as int (Lua's numbers arrive as
    int; a string of digits is read)."""
    return value if type(value) is int else int(text(value))


def _seconds(ms_value: Any) -> float | None:
    value = number(ms_value)
    return value / 1000 if value > 0 else None


def _check_reply(reply: Any, name: str) -> tuple[str, list[Any]]:
    if not isinstance(reply, list) or len(reply) < 2:
        raise StateError(f"governor {name!r}: unreadable script reply {reply!r}", name=name)
    schema = number(reply[0])
    if schema != SCHEMA_VERSION:
        raise StateError(
            f"governor {name!r}: script reply has schema {schema}, this client speaks {SCHEMA_VERSION}",
            name=name,
        )
    return text(reply[1]), reply[2:]


def _check_count(script: str, name: str, ids: Sequence[str], values: int, per: int = 2) -> None:
    if values != per * len(ids):
        raise StateError(
            f"governor {name!r}: {script} answered for {values // per} ids, asked for {len(ids)}", name=name
        )


#: seconds a new state holds admissions when other clients listen: they
#: renew on its announcement, one round trip each
NOTICE_HOLD = 0.5


log = logging.getLogger("governor")

#: the command that changes a stored config field ('': the rest)
_CHANGED_BY = {
    "max_capacity": "`governor -n {name} set-max {value}`",
    **dict.fromkeys(
        ("tenant_weights", "default_weight", "tenant_caps", "reserve", "aging"),
        "`governor -n {name} set-shares` (--weight, --default-weight, --cap, --reserve, --aging)",
    ),
    "policy": "`governor -n {name} configure --policy ...` (the policy and its numbers)",
    "": "`configure()` of a client with the config to store (it stores it whole and resets what the policy learnt)",
}


class GovernorCore:
    """Arguments and replies of every operation, for one governor."""

    def __init__(self, name: str, config: GovernorConfig | None = None, clock: Clock | None = None) -> None:
        if config is None:
            config = GovernorConfig()
        if not isinstance(config, GovernorConfig):
            raise ConfigError(f"config must be a GovernorConfig, got {type(config).__name__}")
        if clock is not None and not callable(clock):
            raise ConfigError("clock must be a callable returning seconds")
        self.keys: GovernorKeys = governor_keys(name, config.key_prefix)
        self.name = name
        self.config = config
        self.clock = clock
        self._channel = self.keys.channel
        self._ttl_ms = str(ms(config.lease_ttl))
        self._queue_ttl_ms = str(ms(config.queue_ttl))
        #: highest fence seen, so a re-created state never hands out a lower one
        self.fence_floor = 0
        #: the longest lease TTL the state recorded lately (ms): a state this client re-creates holds that long
        self.ttl_max_ms = ms(config.lease_ttl)
        #: local time of the last acquire that announced the lease TTL (None: none yet), and the
        #: epoch of the state it was announced to (a new state has not heard it)
        self.announced_at: float | None = None
        self.announced_to = ""
        #: local time of the last reply that showed the state existed
        self.last_seen: float | None = None
        #: the stored config as init.lua last answered it (name, value pairs):
        #: a lost state is re-created from it, not from this client's config,
        #: so the fleet keeps the config it had (an operator's set-max included)
        self.stored_config: dict[str, str] | None = None
        self._shares: tuple[tuple[str | None, ...], GovernorConfig] | None = None
        #: the default class's and tenant's place, and the config it was made by
        self._default_place: tuple[GovernorConfig | None, Place] = (None, Place("", 0, "", 0))

    # -- time -------------------------------------------------------------

    def now_arg(self) -> str:
        """ARGV[1]: the injected clock in ms, or '' for Redis TIME."""
        if self.clock is None:
            return ""
        now = self.clock()
        if not isinstance(now, (int, float)) or not math.isfinite(now) or now < 0:
            raise ConfigError(f"clock returned {now!r}; it must return non-negative seconds")
        return str(ms(now))

    def local_now(self) -> float:
        """The clock of local deadlines: the injected clock, else monotonic."""
        return self.clock() if self.clock is not None else time.monotonic()

    def _call(self, script: str, args: Sequence[str], parse: Callable[[Any], T | Missing], **kw: Any) -> Call[T]:
        """A Call of ``script``; ARGV[1] and ARGV[2] (clock, channel) come first."""
        return Call(script, (self.now_arg(), self._channel, *args), parse, **kw)

    def _seen(self) -> None:
        self.last_seen = self.local_now()

    def _saw_ttl(self, ttl_ms: Any) -> None:
        """The longest lease TTL the state recorded lately, as a reply told it (the state forgets
        a TTL no client announced for a while), never below this client's own."""
        value = text(ttl_ms)
        if value.isdigit():
            self.ttl_max_ms = max(int(value), ms(self.config.lease_ttl))

    def _saw_fence(self, fence: int) -> None:
        if fence > self.fence_floor:
            self.fence_floor = fence

    # -- operations ---------------------------------------------------------

    def init(self, holds_leases: bool, listening: bool = False) -> Call[str]:
        """Create the state if it is missing, from the stored config this
        client last saw (else its own); either way learn the stored config.

        A *recovery* (hold for the longest lease TTL known, start at the resume
        level) when this client holds leases or saw the state within ``idle_expiry``;
        else init.lua holds only when others listen or in the strict mode
        (``restart_hold``). ``listening``: this client's worker is subscribed."""
        recovered = holds_leases or (
            self.last_seen is not None and self.local_now() - self.last_seen < self.config.idle_expiry
        )
        args = (
            secrets.token_hex(8),
            "1" if recovered else "0",
            str(self.fence_floor),
            str(self.ttl_max_ms),
            "1" if listening else "0",
            str(ms(min(self.config.poll, NOTICE_HOLD))),
            ("1" if self.config.restart_hold else "0") + ("d" if self.config.durable_redis else ""),
        )
        if self.stored_config is not None:
            config = [part for pair in self.stored_config.items() for part in pair]
        else:
            config = self.config.script_fields()
        return self._call("init", (*args, *config), self._parse_init)

    def _parse_init(self, reply: Any) -> str:
        kind, rest = _check_reply(reply, self.name)
        if kind not in ("created", "exists"):
            raise self._unexpected("init", kind)
        self._seen()
        self._saw_ttl(rest[1])
        pairs = [text(value) for value in rest[2:]]
        self.stored_config = dict(zip(pairs[::2], pairs[1::2], strict=True))
        if kind == "exists" and (told := self.differing_from_stored()):
            log.warning("%s", told)  # once: an object learns the stored config from its first call's init
        return kind

    def differing_from_stored(self) -> str:
        """What this client's config sets that the stored one (which the
        fleet uses) does not, with the commands that change the stored one;
        '' when nothing differs. A field this client leaves at its default
        is not named (it asked for nothing), nor is a client's own setting."""
        if self.stored_config is None:
            return ""
        try:
            stored = GovernorConfig.from_stored(self.stored_config, base=self.config, name=self.name)
        except StateError:
            return ""  # learn_stored_config and the reader say what is wrong with it
        default, mine = GovernorConfig(), self.config
        names = [
            field.name
            for field in dataclasses.fields(GovernorConfig)
            if getattr(mine, field.name) != getattr(default, field.name)
            and getattr(mine, field.name) != getattr(stored, field.name)
        ]
        if not names:
            return ""
        shown = "; ".join(f"{n} {getattr(mine, n)!r} here, {getattr(stored, n)!r} stored" for n in names)
        commands = sorted(
            {_CHANGED_BY.get(n, _CHANGED_BY[""]).format(name=self.name, value=getattr(mine, n)) for n in names}
        )
        return (
            f"governor {self.name!r}: this client's config differs from the one stored in Redis, which the "
            f"fleet uses (the first client to create a governor stores its config): {shown}. "
            f"To change the stored config: {'; '.join(commands)}"
        )

    def learn_stored_config(self, stored: Any) -> None:
        """Take the config hash as read (HGETALL), after an operator changed
        it (the "!config" wake): the config a lost state is re-created from.
        Empty (the state is gone meanwhile): nothing changes; unusable:
        StateError, and nothing changes either."""
        pairs = {text(k): text(v) for k, v in stored.items()}
        if pairs:
            GovernorConfig.from_stored(pairs, name=self.name)  # StateError when it cannot be used
            self.stored_config = pairs

    def ask(
        self,
        holder: str | None = None,
        tokens: Tokens | int | None = None,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> Ask:
        """A caller's ask, checked once where a public call takes its
        arguments: ``holder`` (None: this host and process), ``tokens`` (a
        Tokens, or an int of input tokens), the class ``priority`` (None: the
        default class) and ``tenant`` (None: the default tenant), placed by
        the fleet's stored config once this client learnt it (its own until
        then). ConfigError for a bad holder or cost, an unknown class or an
        invalid tenant name."""
        label = holder_label(holder)
        return Ask(label, Tokens.of(tokens), priority, tenant, self._place(priority, tenant))

    def placed(self, ask: Ask) -> Ask:
        """``ask`` at its place under the classes and weights in force now
        (an operator may change them at run time): itself when unchanged."""
        place = self._place(ask.priority, ask.tenant)
        return ask if place == ask.place else dataclasses.replace(ask, place=place)

    def _place(self, priority: str | None, tenant: str | None) -> Place:
        config = self._fleet_shares()
        default = priority is None and tenant is None
        if default and self._default_place[0] is config:
            return self._default_place[1]
        if priority is not None and not isinstance(priority, str):
            raise ConfigError(f"priority must be a class name or None, got {priority!r}")
        rank = config.rank_of(priority)
        name = DEFAULT_TENANT if tenant is None else validate_tenant(tenant)
        place = Place(config.priorities[rank], rank, name, config.weight_of(name))
        if default:
            self._default_place = (config, place)
        return place

    def _fleet_shares(self) -> GovernorConfig:
        """The config whose classes and weights are in force: the stored one
        when known (an operator may change the weights at run time)."""
        stored = self.stored_config
        if stored is None:
            return self.config
        key = tuple(map(stored.get, _SHARE_FIELDS))
        if self._shares is None or self._shares[0] != key:
            try:
                self._shares = (key, GovernorConfig.from_stored(stored, base=self.config, name=self.name))
            except StateError:
                return self.config  # init and learn_stored_config refuse an unusable stored config
        return self._shares[1]

    def acquire(self, lease_id: str, ask: Ask, wait: bool, fresh: bool = True) -> Call[Granted | Queued | Denied]:
        """Ask for a lease (``ask``: its holder, the tokens it reserves and
        its place); ``fresh`` when the id was never sent before. A try
        (``wait=False``) takes a new id: the script skips the lookups. A cost
        no budget can ever hold raises CostTooLarge (the parse)."""
        if not wait and not fresh:
            raise ConfigError("a try_acquire takes a new lease id (fresh=True)")
        mode = ("wait" if fresh else "again") if wait else "try"
        reserve_arg = "" if ask.tokens.total == 0 else ask.tokens.arg()
        # the lease TTL is announced at most once a third of it (the state counts an announcement
        # for twice the TTL): an acquire between announcements reads nothing of it
        now = self.local_now()
        announce = self.announced_at is None or now - self.announced_at >= self.config.lease_ttl / 3
        args = (lease_id, ask.holder, self._ttl_ms, self._queue_ttl_ms, mode, reserve_arg, *ask.place.args())
        parse = functools.partial(self._parse_acquire, now if announce else None)
        return self._call("acquire", (*args, "1" if announce else "0"), parse, confirm=True)

    def _parse_acquire(self, announced: float | None, reply: Any) -> Granted | Queued | Denied | Missing:
        kind, rest = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        self._seen()
        epoch = text(rest[-2])  # (the epoch, then ttl_max, last in each)
        if announced is not None:
            self.announced_at, self.announced_to = announced, epoch
        elif epoch != self.announced_to:
            self.announced_at = None  # a new state: the next acquire announces
        if kind in ("granted", "queued", "denied", "refused"):
            self._saw_ttl(rest[-1])  # the longest lease TTL, last in each
        if kind == "granted":
            fence = number(rest[0])
            self._saw_fence(fence)
            return Granted(fence, text(rest[2]), number(rest[1]) / 1000)
        if kind == "queued":
            return Queued(number(rest[0]), text(rest[1]), number(rest[2]) / 1000, text(rest[3]))
        if kind == "denied":
            return Denied(text(rest[0]), number(rest[1]) / 1000, text(rest[2]))
        if kind == "refused":
            raise CostTooLarge(f"governor {self.name!r}: {text(rest[0])}; it can never be admitted", name=self.name)
        raise self._unexpected("acquire", kind)

    def release(self, lease_id: str) -> Call[bool]:
        return self._call("release", (lease_id,), self._parse_released, recreate=False, if_missing=False)

    def _parse_released(self, reply: Any) -> bool | Missing:
        kind, rest = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        if kind != "released":
            raise self._unexpected("release", kind)
        return text(rest[0]) == "1"

    def cancel(self, lease_id: str) -> Call[str]:
        return self._call("cancel", (lease_id,), self._parse_cancelled, recreate=False, if_missing="none")

    def _parse_cancelled(self, reply: Any) -> str | Missing:
        kind, rest = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        if kind != "cancelled":
            raise self._unexpected("cancel", kind)
        return text(rest[0])

    def renew(self, leases: Sequence[tuple[str, str, Ask]]) -> Call[Renewed]:
        """Renew leases in one call: (id, epoch, ask) each, the ask it was
        granted for, so a lease adopted by a new state (after a loss) keeps
        its holder, tenant, class and reservation."""
        flat: list[str] = []
        for lease_id, epoch, ask in leases:
            tokens = "" if ask.tokens == Tokens() else ask.tokens.arg()
            flat += [lease_id, epoch, ask.holder, *ask.place.args(), tokens]
        ids = [lease[0] for lease in leases]
        return self._call("renew", (self._ttl_ms, *flat), self._renew_parser(ids), confirm=True)

    def _renew_parser(self, ids: Sequence[str]) -> Callable[[Any], Renewed | Missing]:
        def parse(reply: Any) -> Renewed | Missing:
            kind, rest = _check_reply(reply, self.name)
            if kind == "missing":
                return MISSING
            if kind != "renewed":
                raise self._unexpected("renew", kind)
            self._seen()
            ok: list[str] = []
            adopted: dict[str, int] = {}
            lost: list[str] = []
            _check_count("renew", self.name, ids, len(rest) - 1)
            for lease_id, i in zip(ids, range(1, len(rest), 2), strict=True):
                status, fence = text(rest[i]), number(rest[i + 1])
                if status == "ok":
                    ok.append(lease_id)
                elif status == "adopted":
                    adopted[lease_id] = fence
                    self._saw_fence(fence)
                elif status == "lost":
                    lost.append(lease_id)
                else:
                    raise self._unexpected("renew", status)
            return Renewed(text(rest[0]), tuple(ok), adopted, tuple(lost))

        return parse

    def report(
        self,
        outcome: Outcome,
        retry_after: float | None,
        lease_id: str | None,
        fence: int | None = None,
        release: bool = False,
        usage: Tokens | None = None,
        limits: Mapping[str, tuple[int | None, int | None]] | None = None,
        refusals_count: bool = True,
        load: bool = True,
    ) -> Call[bool]:
        """True if recorded, False if the lease was no longer live (fenced off).
        ``lease_id`` is checked for liveness; ``fence`` alone (a lease already
        released) only tells the policy which admission wave the call was in.
        ``release``: the same call also releases the lease. ``usage``: the
        tokens the call used, settling the lease's reservation (UsageTooLarge
        beyond MAX_USAGE). ``limits``: budget kind -> (limit, remaining) from
        the response's headers. ``refusals_count``: whether the provider counts
        a refused call against its limits: its reservation is then spent, else
        given back (the level clamped to 0 either way, unless the headers say
        what remains). ``load=False``: no load signal (BACKGROUND_REFUSAL)."""
        if not isinstance(outcome, Outcome):
            raise ConfigError(f"outcome must be an Outcome, got {outcome!r}")
        ra = ""
        if retry_after is not None:
            if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)):
                raise ConfigError(f"retry_after must be seconds, got {retry_after!r}")
            if not math.isfinite(retry_after) or retry_after < 0:
                raise ConfigError(f"retry_after must be finite and >= 0 seconds, got {retry_after!r}")
            ra = str(ms(min(retry_after, 86400.0)))
        lease_args = (lease_id or "", "" if fence is None else str(fence), "1" if release and lease_id else "0")
        if usage is not None and not isinstance(usage, Tokens):
            raise ConfigError(f"usage must be a Tokens or None, got {usage!r}")
        if usage is not None:
            usage = usage.as_usage()
        if not isinstance(refusals_count, bool):
            raise ConfigError(f"refusals_count must be a bool, got {refusals_count!r}")
        figures: list[str] = []  # kind, "limit,remaining" pairs: only the kinds announced
        for kind in BUDGET_KINDS:
            limit, remaining = (limits or {}).get(kind, (None, None))
            for value in (limit, remaining):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                    raise ConfigError(f"{kind} limits must be integers >= 0 or None, got {value!r}")
            if limit is not None or remaining is not None:
                figures += [kind, f"{'' if limit is None else limit},{'' if remaining is None else remaining}"]
        refused = "0" if outcome is Outcome.RATE_LIMITED and not refusals_count else ""
        if not isinstance(load, bool):
            raise ConfigError(f"load must be a bool, got {load!r}")
        code = BACKGROUND_REFUSAL if outcome is Outcome.RATE_LIMITED and not load else outcome.value
        budget_args = ("" if usage is None else usage.arg(), refused, *figures)
        if budget_args == ("", ""):
            budget_args = ()  # the common report: the script reads '' for what is not sent
        return self._call("report", (code, ra, *lease_args, *budget_args), self._parse_reported)

    def wall_ms(self) -> int:
        """The clock spend's calendar windows are computed around (lua/spend.lua picks among four boundaries)."""
        return ms(self.clock()) if self.clock is not None else ms(time.time())

    def spend(self, op: str, first: str, second: str, amounts: Any, extra: str, budgets: Sequence[Any]) -> Call[Any]:
        """lua/spend.lua's reserve, settle or approve; governor/spend.py builds its arguments and reads its answer."""
        args = spend_args(op, first, second, tuple(amounts), extra, tuple(budgets), self.wall_ms())
        return self._call("spend", args, self._parse_spend)

    def _parse_spend(self, reply: Any) -> Any:
        kind, rest = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        self._seen()
        return spend_answer(self.name, kind, [text(v) for v in rest])

    def _parse_reported(self, reply: Any) -> bool | Missing:
        kind, _ = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        self._seen()
        if kind == "reported":
            return True
        if kind == "lost":
            return False
        raise self._unexpected("report", kind)

    def refresh(self, ids: Sequence[str]) -> Call[Refreshed]:
        return self._call("refresh", (self._queue_ttl_ms, *ids), self._refresh_parser(ids), confirm=True)

    def _refresh_parser(self, ids: Sequence[str]) -> Callable[[Any], Refreshed | Missing]:
        def parse(reply: Any) -> Refreshed | Missing:
            kind, rest = _check_reply(reply, self.name)
            if kind == "missing":
                return MISSING
            if kind != "refreshed":
                raise self._unexpected("refresh", kind)
            self._seen()
            granted: dict[str, tuple[int, float]] = {}
            queued: dict[str, tuple[int, str]] = {}
            unknown: list[str] = []
            _check_count("refresh", self.name, ids, len(rest) - 3, per=4)
            for lease_id, i in zip(ids, range(3, len(rest), 4), strict=True):
                status, value, remaining = text(rest[i]), number(rest[i + 1]), number(rest[i + 2])
                if status == "granted":
                    granted[lease_id] = (value, remaining / 1000)
                    self._saw_fence(value)
                elif status == "queued":
                    queued[lease_id] = (value, text(rest[i + 3]))
                elif status == "unknown":
                    unknown.append(lease_id)
                else:
                    raise self._unexpected("refresh", status)
            return Refreshed(text(rest[0]), text(rest[1]), number(rest[2]) / 1000, granted, queued, tuple(unknown))

        return parse

    def probe(self) -> Call[Status]:
        return self._call("probe", (), self._parse_status)

    def status(self, create: bool = True) -> Call[Status]:
        return self._call("status", (), self._parse_status, recreate=create)

    def set_max_capacity(self, n: int, create: bool = True) -> Call[Status]:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"max_capacity must be an integer >= 1, got {n!r}")
        if n > MAX_CAPACITY:
            raise ConfigError(f"max_capacity must be <= {MAX_CAPACITY}, got {n!r}")
        return self._call("set_max", (str(n),), self._parse_status, recreate=create)

    def set_shares(
        self,
        tenant_weights: Mapping[str, int] | None = None,
        default_weight: int | None = None,
        aging: float | _Unset | None = UNSET,
        tenant_caps: Mapping[str, int] | None = None,
        reserve: int | None = None,
        create: bool = True,
    ) -> Call[Status]:
        """Store new tenant weights, default weight, aging (None: never),
        tenant caps or reserve, each unchanged when not given; validated as
        GovernorConfig does."""
        base = self._fleet_shares()
        changes: dict[str, Any] = {}
        for name, value in (
            ("tenant_weights", tenant_weights),
            ("default_weight", default_weight),
            ("tenant_caps", tenant_caps),
            ("reserve", reserve),
        ):
            if value is not None:
                changes[name] = value
        if not isinstance(aging, _Unset):
            changes["aging"] = aging
        config = dataclasses.replace(base, **changes)
        pairs = dict(zip(*[iter(config.script_fields())] * 2, strict=True))
        args = tuple(pairs[name] for name in _SET_SHARES_ARGS)
        return self._call("set_shares", args, self._parse_status, recreate=create)

    def pause(self, reason: str, duration: float | None, create: bool = True) -> Call[Status]:
        if not isinstance(reason, str) or not reason.strip() or len(reason.encode()) > 500:
            raise ConfigError("pause reason must be a non-empty string of at most 500 bytes")
        if duration is not None:
            if isinstance(duration, bool) or not isinstance(duration, (int, float)):
                raise ConfigError(f"pause duration must be seconds, got {duration!r}")
            if not math.isfinite(duration) or duration <= 0:
                raise ConfigError(f"pause duration must be > 0 seconds, got {duration!r}")
        return self._call("pause", (reason, str(ms(duration) if duration else 0)), self._parse_status, recreate=create)

    def resume(self, create: bool = True, lift_recovery_hold: bool = False) -> Call[Status]:
        """Lift a pause and a Retry-After hold; the recovery hold only with ``lift_recovery_hold``."""
        return self._call("resume", ("lift-hold" if lift_recovery_hold else "",), self._parse_status, recreate=create)

    def reset(self, with_config: bool, create: bool = True) -> Call[Status]:
        """Clear what the policy learnt; with_config also stores this client's config."""
        fields = tuple(self.config.script_fields()) if with_config else ()
        return self._call("reset", fields, self._parse_status, recreate=create)

    def _parse_status(self, reply: Any) -> Status | Missing:
        kind, rest = _check_reply(reply, self.name)
        if kind == "missing":
            return MISSING
        if kind != "status":
            raise self._unexpected("status", kind)
        self._seen()
        raw = {text(rest[i]): rest[i + 1] for i in range(0, len(rest) - 1, 2)}
        budget_section = raw.pop("budgets", ())
        f = {key: text(value) for key, value in raw.items()}
        try:
            self._saw_fence(int(f["fence"]))
            self._saw_ttl(f["ttl_max"])
            if self.stored_config is not None:  # what an operator may have changed (set_max, set_shares)
                self.stored_config["max_capacity"] = f["max_capacity"]
                self.stored_config["reserve"] = f["reserve"]
            return Status(
                name=self.name,
                capacity=int(f["capacity"]),
                max_capacity=int(f["max_capacity"]),
                paused=f["paused"] == "1",
                pause_reason=f["pause_reason"],
                pause_kind=f["pause_kind"],
                paused_until=_seconds(f["paused_until"]),
                not_before=_seconds(f["not_before"]),
                in_flight=int(f["in_flight"]),
                queued=int(f["queued"]),
                window_rate_limited=int(f["window_rate_limited"]),
                window_attempts=int(f["window_attempts"]),
                window=int(f["window_ms"]) / 1000,
                policy=f["policy"],
                ceiling=int(f["ceiling"]),
                background=int(f.get("background_ppm", "0")) / 1e6,
                streak=int(f["streak"]),
                fence=int(f["fence"]),
                quota_exhausted=int(f["quota_exhausted"]),
                quota_at=_seconds(f["quota_at"]),
                quota_until=_seconds(f["quota_until"]),
                epoch=f["epoch"],
                created=int(f["created"]) / 1000,
                now=int(f["now"]) / 1000,
                blocked=f["blocked"],
                held_back=f["held_back"],
                reserve=int(f["reserve"]),
                budgets=parse_budgets(budget_section, text),
                hold_until=_seconds(f["hold_until"]),
                hold_reason=f["hold_reason"],
                ttl_max=int(f["ttl_max"]) / 1000,
            )
        except (KeyError, ValueError, ConfigError) as exc:
            raise StateError(f"governor {self.name!r}: unreadable status reply ({exc})", name=self.name) from exc

    def _unexpected(self, script: str, kind: str) -> StateError:
        return StateError(f"governor {self.name!r}: {script} gave an unexpected reply {kind!r}", name=self.name)

    # -- pub/sub ----------------------------------------------------------

    def parse_wake(self, data: Any) -> Wake:
        """A message on the wake channel (governor.protocol.Wake)."""
        wake = Wake.parse(text(data))
        for fence in wake.grants.values():
            self._saw_fence(fence)
        if wake.ttl_max is not None:
            self._saw_ttl(wake.ttl_max)
        return wake
