"""Spend budgets: dollars per window, for the fleet and per tenant.

A :class:`SpendBudget` caps what calls cost in a :class:`Window`: rolling
(the last ten minutes, as Gemini's spend cap counts) or calendar (a day,
an ISO week, a month) in a named time zone (UTC by default). Money is
counted in integer micro-dollars (1e-6 USD, governor.prices.MICROS) in the
governor's ``spend`` hash, by ``lua/spend.lua`` in one atomic call:

- an admission *reserves* the most a call can cost (its estimate at the
  price of the tier asked for, :meth:`governor.prices.PriceBook.most`) in
  every budget it counts in: the fleet's limit and its tenant's own;
- its report *settles* the charge (the usage at the tier that served it, or
  what the provider bills a refused call): what was not used goes back to
  the window it was taken from, more is charged to the current one;
- a call no budget can afford fails at once with :class:`SpendExhausted`
  (the budget, the scope, spent, limit and ``resets_at``): exhaustion is
  not a queue;
- at a soft threshold (80 % by default) a ``spend-threshold`` entry is
  logged; with ``pause=True`` the scope takes no call past it until an
  operator approves more (``governor spend approve``) or the window resets.

A rolling window is counted in slots (``slots`` of them, 10 by default): a
charge counts for the slot it fell in and the ``slots`` after it, so a
charge is counted for at least the window's length after it (and at most one
slot more): a window's figure is never below what the last window's length
spent. A calendar window's boundaries are computed here
(zoneinfo) and passed to the script around the clock it runs by.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import ROUND_FLOOR, Decimal
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ConfigError, GovernorError, StateError
from .prices import MICROS

#: the calendar windows
CALENDAR: tuple[str, ...] = ("day", "week", "month")
#: the soft threshold's default share of a limit
DEFAULT_THRESHOLD = 0.8
#: what a budget counts: dollars (in micro-dollars), requests or tokens (input + output)
UNITS: tuple[str, ...] = ("usd", "requests", "tokens")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_TENANT = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class SpendExhausted(GovernorError):
    """A spend budget cannot afford the call: it fails at once rather than
    queue. ``budget`` names the budget, ``scope`` whose limit (``*`` the
    fleet, else a tenant), ``spent`` and ``limit`` are micro-dollars in its
    window, ``resets_at`` Unix seconds when it resets (None: the cost is
    above the whole limit), ``why`` ``limit``, ``threshold`` (paused at
    the soft threshold until approved) or ``never``."""

    def __init__(
        self,
        message: str,
        *,
        budget: str,
        scope: str,
        spent: int,
        limit: int,
        resets_at: float | None,
        why: str,
        name: str | None = None,
    ) -> None:
        super().__init__(message, name=name)
        self.budget = budget
        self.scope = scope
        self.spent = spent
        self.limit = limit
        self.resets_at = resets_at
        self.why = why


def dollars(micros: int) -> str:
    """Micro-dollars as dollars, to the cent above a cent: ``$12.35``, ``$0.000120``."""
    if abs(micros) >= 10_000:
        return f"${micros / MICROS:,.2f}"
    return f"${micros / MICROS:.6f}"


def to_micros(what: str, value: object) -> int:
    """Dollars (an int, float, Decimal or decimal string) as whole
    micro-dollars, rounded down (a limit never grows by rounding)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        raise ConfigError(f"{what} must be dollars (a number), got {value!r}")
    try:
        amount = Decimal(str(value))
    except ArithmeticError:
        raise ConfigError(f"{what} must be dollars (a number), got {value!r}") from None
    if not amount.is_finite() or amount < 0 or amount > 9_000_000_000:
        raise ConfigError(f"{what} must be dollars in [0, 9e9], got {value!r}")
    return int((amount * MICROS).to_integral_value(rounding=ROUND_FLOOR))


@dataclass(frozen=True)
class Window:
    """A spend window: ``rolling`` (``seconds`` long, counted in ``slots``)
    or calendar (``day``, ``week``: ISO, from Monday, ``month``) in time zone
    ``zone`` (an IANA name). :meth:`parse` reads ``"10m"``, ``"day"``,
    ``"week@Europe/Paris"``, ``"month@America/Los_Angeles"``."""

    kind: str = "day"
    seconds: float = 0.0
    zone: str = "UTC"
    slots: int = 10

    def __post_init__(self) -> None:
        if self.kind not in ("rolling", *CALENDAR):
            raise ConfigError(f"window kind must be rolling, day, week or month, got {self.kind!r}")
        if self.kind == "rolling":
            if (
                isinstance(self.seconds, bool)
                or not isinstance(self.seconds, (int, float))
                or not (1 <= self.seconds <= 31 * 86400)
            ):
                raise ConfigError(f"a rolling window lasts 1 s to 31 days, got {self.seconds!r} s")
            if isinstance(self.slots, bool) or not isinstance(self.slots, int) or not 1 <= self.slots <= 1000:
                raise ConfigError(f"a rolling window has 1-1000 slots, got {self.slots!r}")
            if round(self.seconds * 1000) % self.slots:
                raise ConfigError(
                    f"a rolling window of {self.seconds} s does not split into {self.slots} whole-ms slots"
                )
        try:
            ZoneInfo(self.zone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(
                f"time zone {self.zone!r} is unknown: use an IANA name such as UTC or America/Los_Angeles"
            ) from None

    @classmethod
    def rolling(cls, seconds: float, slots: int = 10) -> Window:
        return cls("rolling", seconds=seconds, slots=slots)

    @classmethod
    def parse(cls, text: str | Window) -> Window:
        if isinstance(text, Window):
            return text
        if not isinstance(text, str):
            raise ConfigError(f"a window is a Window or text such as '10m' or 'day@UTC', got {text!r}")
        kind, _, zone = text.strip().partition("@")
        if kind in CALENDAR:
            return cls(kind, zone=zone or "UTC")
        match = _DURATION.match(kind)
        if match and not zone:
            return cls.rolling(float(match.group(1)) * _UNITS[match.group(2)])
        raise ConfigError(f"window {text!r}: use a duration ('10m', '1h', '30s') or day, week, month[@zone]")

    @property
    def label(self) -> str:
        """How the window is named in the spend hash and by ``governor spend``."""
        if self.kind == "rolling":
            return f"rolling:{round(self.seconds * 1000)}:{self.slots}"
        return f"{self.kind}@{self.zone}"

    @classmethod
    def from_label(cls, label: str) -> Window:
        if label.startswith("rolling:"):
            _, length, slots = label.split(":")
            return cls.rolling(int(length) / 1000, int(slots))
        kind, _, zone = label.partition("@")
        return cls(kind, zone=zone or "UTC")

    def _start(self, when: datetime) -> datetime:
        local = when.astimezone(ZoneInfo(self.zone))
        start = local.replace(hour=0, minute=0, second=0, microsecond=0, fold=0)  # a repeated midnight: its first
        if self.kind == "week":
            start -= timedelta(days=start.weekday())
        elif self.kind == "month":
            start = start.replace(day=1)
        return start

    def _next(self, start: datetime) -> datetime:
        naive = start.replace(tzinfo=None)
        if self.kind == "day":
            naive += timedelta(days=1)
        elif self.kind == "week":
            naive += timedelta(days=7)
        else:
            naive = naive.replace(year=naive.year + naive.month // 12, month=naive.month % 12 + 1)
        return naive.replace(tzinfo=ZoneInfo(self.zone))

    def boundaries(self, now_ms: int) -> tuple[int, int, int, int]:
        """A calendar window's starts around ``now_ms``: the previous
        window's, the current one's, the next one's and the one after (ms),
        so a script whose clock is up to a window away finds its own."""
        start = self._start(datetime.fromtimestamp(now_ms / 1000, timezone.utc))
        before = self._start(start - timedelta(days=1))
        after = self._next(start)
        return tuple(round(d.timestamp() * 1000) for d in (before, start, after, self._next(after)))  # type: ignore[return-value]

    def bounds(self, now_ms: int) -> tuple[int, int]:
        """The window holding ``now_ms``: (start, end) in ms; a rolling
        window's end is ``now_ms`` itself (it never resets at once)."""
        if self.kind == "rolling":
            return now_ms - round(self.seconds * 1000), now_ms
        _, start, end, _ = self.boundaries(now_ms)
        return start, end

    def spec(self, now_ms: int) -> str:
        """The script's form: ``r:<slot_ms>:<slots>`` or ``c:<b0>:<b1>:<b2>:<b3>``."""
        if self.kind == "rolling":
            return f"r:{round(self.seconds * 1000) // self.slots}:{self.slots}"
        return "c:" + ":".join(str(b) for b in self.boundaries(now_ms))


def to_count(what: str, value: object) -> int:
    """A whole number of requests or tokens."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53:
        raise ConfigError(f"{what} must be a whole number of requests or tokens, got {value!r}")
    return value


def _tenants(value: Any, unit: str = "usd") -> tuple[tuple[str, int], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    convert = to_micros if unit == "usd" else to_count
    try:
        pairs = [(t, convert(f"the limit of tenant {t!r}", v)) for t, v in items]
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"tenant spend limits must map tenant -> dollars, got {value!r}") from None
    for tenant, _ in pairs:
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise ConfigError(f"tenant {tenant!r} is invalid: use 1-64 characters of letters, digits and _ . : -")
    return tuple(sorted(pairs))


@dataclass(frozen=True)
class SpendBudget:
    """A dollar budget: at most ``limit`` dollars per ``window`` for the
    whole fleet (None: no fleet limit), and for each tenant of ``tenants``
    (tenant -> dollars) its own limit. At ``threshold`` of a limit (a share,
    0 for none) a ``spend-threshold`` entry is logged; ``pause``: no call
    past it until an operator approves more or the window resets.
    ``unit``: ``usd`` (the default), or ``requests`` or ``tokens`` (input +
    output) for a calendar window of the other kinds (Gemini's requests per
    day, Bedrock's tokens per day): the limits are then whole counts."""

    name: str
    window: Window | str = "day"
    limit: float | Decimal | str | None = None
    tenants: Mapping[str, Any] | tuple[tuple[str, Any], ...] = field(default=())
    threshold: float = DEFAULT_THRESHOLD
    pause: bool = False
    unit: str = "usd"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"spend budget name {self.name!r} is invalid: use 1-64 of letters, digits and _ . -")
        if self.unit not in UNITS:
            raise ConfigError(f"spend budget {self.name}: unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        object.__setattr__(self, "window", Window.parse(self.window))
        object.__setattr__(self, "tenants", _tenants(self.tenants, self.unit))
        if self.limit is None and not self.tenants:
            raise ConfigError(f"spend budget {self.name}: give a limit, tenants' limits, or both")
        if self.limit is not None:
            self.amount(f"spend budget {self.name}'s limit", self.limit)
        if (
            isinstance(self.threshold, bool)
            or not isinstance(self.threshold, (int, float))
            or not (0 <= self.threshold <= 1)
        ):
            raise ConfigError(f"spend budget {self.name}: threshold must be a share in [0, 1], got {self.threshold!r}")
        if not isinstance(self.pause, bool):
            raise ConfigError(f"spend budget {self.name}: pause must be True or False, got {self.pause!r}")
        if self.pause and self.threshold == 0:
            raise ConfigError(f"spend budget {self.name}: pause=True needs a threshold above 0")

    def amount(self, what: str, value: object) -> int:
        """``value`` in the budget's unit as the script counts it (dollars: micro-dollars)."""
        return to_micros(what, value) if self.unit == "usd" else to_count(what, value)

    @property
    def limit_units(self) -> int:
        return 0 if self.limit is None else self.amount("limit", self.limit)

    @property
    def tenant_limits(self) -> tuple[tuple[str, int], ...]:
        """(tenant, micro-dollars) pairs, sorted."""
        return cast(tuple[tuple[str, int], ...], self.tenants)

    def args(self, now_ms: int) -> tuple[str, ...]:
        """The script's 8 arguments for this budget."""
        window = self.window
        assert isinstance(window, Window)
        tenants = ",".join(f"{t}={m}" for t, m in self.tenant_limits)
        return (
            self.name,
            str(self.limit_units),
            tenants,
            window.spec(now_ms),
            str(round(self.threshold * MICROS)),
            "1" if self.pause else "0",
            window.label,
            self.unit,
        )


def budgets_args(budgets: tuple[SpendBudget, ...], now_ms: int) -> tuple[str, ...]:
    out: list[str] = [str(len(budgets))]
    for budget in budgets:
        out.extend(budget.args(now_ms))
    return tuple(out)


def spend_args(
    op: str,
    first: str,
    second: str,
    amounts: tuple[int, ...],
    extra: str,
    budgets: tuple[SpendBudget, ...],
    now_ms: int,
) -> tuple[str, ...]:
    """lua/spend.lua's ARGV after the clock and channel; ``amounts``:
    (micro-dollars, requests, tokens), or one amount in an approved budget's unit."""
    for amount in amounts:
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= 2**53:
            raise ConfigError(f"a spend amount must be an integer in [0, 2^53], got {amount!r}")
    return (op, first, second, ",".join(map(str, amounts)), extra, *budgets_args(budgets, now_ms))


def spend_answer(governor: str, kind: str, rest: list[str]) -> SpendExhausted | float | None:
    """What a spend reply says: None (reserved, settled), when an approval
    ends (Unix seconds), or the SpendExhausted to raise."""
    if kind == "approved":
        return int(rest[0]) / 1000
    if kind == "spend_exhausted":
        return exhausted(governor, rest)
    if kind not in ("reserved", "settled"):
        raise StateError(f"governor {governor!r}: spend gave an unexpected reply {kind!r}", name=governor)
    return None


def exhausted(governor: str, reply: list[str]) -> SpendExhausted:
    """The SpendExhausted of a ``spend_exhausted`` reply (after SCHEMA and the kind)."""
    budget, scope, spent, limit, resets, why = reply[:6]
    resets_at = int(resets) / 1000 if int(resets) > 0 else None
    whose = "the fleet's" if scope == "*" else f"tenant {scope}'s"
    if why == "never":
        hint = "the call costs more than the whole limit: raise it or call a cheaper model"
    elif why == "threshold":
        hint = (
            f"paused at the soft threshold: approve more (governor spend approve --budget {budget}"
            f"{'' if scope == '*' else ' --tenant ' + scope} --add DOLLARS) or wait for the window to reset"
        )
    else:
        hint = "wait for the window to reset, or raise the limit (governor spend approve --add DOLLARS)"
    when = (
        ""
        if resets_at is None
        else f", resets at {datetime.fromtimestamp(resets_at, timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
    )
    message = (
        f"governor {governor!r}: spend budget {budget!r} ({whose} limit) cannot afford the call: "
        f"{dollars(int(spent))} spent of {dollars(int(limit))}{when}; {hint}"
    )
    return SpendExhausted(
        message,
        budget=budget,
        scope=scope,
        spent=int(spent),
        limit=int(limit),
        resets_at=resets_at,
        why=why,
        name=governor,
    )


# -- what operators read: the spend hash ---------------------------------------------------


@dataclass(frozen=True)
class SpendLine:
    """One budget and scope as ``governor spend`` shows it (micro-dollars, ms)."""

    budget: str
    scope: str  #: '*' the fleet, else a tenant
    window: str  #: the window's label
    unit: str  #: usd (micro-dollars), requests or tokens
    spent: int  #: in the window, reservations included
    reserved: int  #: reservations not yet settled
    limit: int  #: the window's limit, approvals included
    approved: int  #: what an operator added until the window resets
    resets_at: int | None  #: ms when the window resets (rolling: when its oldest charge leaves it; None: nothing spent)
    threshold: float
    paused: bool  #: at the soft threshold with pause set and no approval
    lost_at: int  #: ms of a loss counted into the window (0: none)

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.spent)

    def shown(self, amount: int) -> str:
        """An amount of this budget's unit, for people."""
        return dollars(amount) if self.unit == "usd" else f"{amount:,} {self.unit}"


def stored_budgets(raw: Mapping[Any, Any]) -> dict[str, SpendBudget]:
    """The budgets a spend hash (HGETALL) defines, as their clients last sent them."""
    out = {}
    for key, value in raw.items():
        key, value = _decode(key), _decode(value)
        if key.startswith("d:"):
            limit, label, soft, pause, tenants, unit = _definition(value)

            def amount(figure: str, unit: str = unit) -> Any:
                return Decimal(int(figure)) / MICROS if unit == "usd" else int(figure)

            pairs = [(t, amount(m)) for t, _, m in (p.partition("=") for p in tenants.split(",") if p)]
            out[key[2:]] = SpendBudget(
                key[2:],
                Window.from_label(label),
                limit=amount(limit) if int(limit) else None,
                tenants=tuple(pairs),
                threshold=int(soft) / MICROS,
                pause=pause == "1",
                unit=unit,
            )
    return out


def _definition(value: str) -> list[str]:
    """A stored definition's fields: limit, window, soft_ppm, pause, tenants, unit (usd when not stored)."""
    parts = value.split("|", 5)
    return parts if len(parts) == 6 else [*parts, "usd"]


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_lines(raw: Mapping[Any, Any], now_ms: int) -> tuple[SpendLine, ...]:
    """Every budget and scope of a spend hash (HGETALL) at ``now_ms``."""
    fields = {_decode(k): _decode(v) for k, v in raw.items()}
    lines = []
    for key, value in sorted(fields.items()):
        if not key.startswith("b:"):
            continue
        _, name, scope = key.split(":", 2)
        definition = fields.get(f"d:{name}")
        if definition is None:
            continue
        limit_s, label, soft, pause, tenants, unit = _definition(definition)
        window = Window.from_label(label)
        limit = int(limit_s)
        if scope != "*":
            limit = dict((t, int(m)) for t, _, m in (p.partition("=") for p in tenants.split(",") if p)).get(scope, 0)
        reserved_s, _noted, _seen, lost_s, slots_s = value.split("|", 4)
        slots = [(int(k), int(a)) for k, _, a in (s.partition(":") for s in slots_s.split(",") if s)]
        if window.kind == "rolling":
            slot_ms = round(window.seconds * 1000) // window.slots
            cur = now_ms // slot_ms
            slots = [(k, a) for k, a in slots if k >= cur - window.slots]
            resets = (min(k for k, _ in slots) + window.slots + 1) * slot_ms if slots else None
        else:
            start, end = window.bounds(now_ms)
            slots = [(k, a) for k, a in slots if k == start]
            resets = end
        until, _, add = fields.get(f"a:{name}:{scope}", "0|0").partition("|")
        approved = int(add) if int(until) > now_ms else 0
        spent = sum(a for _, a in slots)
        share = int(soft) / MICROS
        total = limit + approved
        lines.append(
            SpendLine(
                budget=name,
                scope=scope,
                window=label,
                unit=unit,
                spent=spent,
                reserved=int(reserved_s),
                limit=total,
                approved=approved,
                resets_at=resets,
                threshold=share,
                paused=pause == "1" and not approved and share > 0 and spent >= share * total,
                lost_at=int(lost_s) if slots else 0,
            )
        )
    return tuple(lines)


def seconds_until(resets_at_ms: int | None, now_ms: int) -> float:
    return math.inf if resets_at_ms is None else max(0.0, (resets_at_ms - now_ms) / 1000)
