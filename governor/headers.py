"""Provider rate-limit headers, read into one shape.

Every answer of a provider says where its account stands: how large each
limit is, how much of it is left and when it is whole again. A report may
carry the response's headers; :func:`parse` turns them into a
:class:`RateLimits`, one :class:`BudgetHeader` per budget kind, which the
governor uses to learn the provider's limits and to clamp the fleet's
buckets to the provider's own view.

The families read (names are case-insensitive):

======================================================  ==================  =========================================
header                                                  budget kind         value
======================================================  ==================  =========================================
``x-ratelimit-limit-requests`` (OpenAI)                 ``requests``        integer
``x-ratelimit-remaining-requests`` (OpenAI, Azure)      ``requests``        integer
``x-ratelimit-reset-requests`` (OpenAI)                 ``requests``        duration: ``1s``, ``6m0s``, ``12ms``,
                                                                            ``1h2m3.5s``; a bare number is seconds
``x-ratelimit-{limit,remaining,reset}-tokens``          ``tokens``          as above
``anthropic-ratelimit-requests-{limit,remaining}``      ``requests``        integer
``anthropic-ratelimit-requests-reset``                  ``requests``        RFC 3339 time (``2025-01-01T00:00:00Z``)
``anthropic-ratelimit-tokens-*``                        ``tokens``          as above, unless input or output
                                                                            tokens are announced too (see below)
``anthropic-ratelimit-input-tokens-*``                  ``input_tokens``    as above
``anthropic-ratelimit-output-tokens-*``                 ``output_tokens``   as above
``anthropic-fast-{input,output}-tokens-*``              tier ``fast``:      as above (Anthropic's fast mode: limits
                                                        ``input_tokens``,   of its own, read into
                                                        ``output_tokens``   :attr:`RateLimits.tiers`; the budgets
                                                                            ``fast_input_tokens`` and
                                                                            ``fast_output_tokens``, budget_limits)
``retry-after-ms``, ``x-ms-retry-after-ms`` (Azure)     retry_after         milliseconds
``retry-after``                                         retry_after         seconds, or an HTTP date (both read by
                                                                            governor.backoff.read_retry_after)
======================================================  ==================  =========================================

A reset is read as milliseconds from now: a duration as it is, an RFC 3339
time against ``now`` (Unix seconds, injectable; default this host's
clock), a time in the past as 0. The "remaining" of Anthropic's token
limits is rounded to the nearest thousand by the provider; it is taken as
sent. Anthropic's ``tokens-*`` figures are the most restrictive of its
input and output limits at the moment, not a limit on input plus output:
when input or output figures come with them they are left out (the
``input_tokens`` and ``output_tokens`` budgets govern), and only alone are
they read as a ``tokens`` budget. When both families name the same figure
(a gateway in front of both), Anthropic's is used.

Never raises: a value that cannot be read is left out and its header's name
is listed in :attr:`RateLimits.malformed` (the governor counts them), so a
gateway that mangles one header costs nothing but that figure. Other headers
of the same prefixes that this module does not use (OpenAI's
``*-tokens_usage_based``, Anthropic's ``unified`` and ``priority`` limits)
are ignored, not malformed. A negative figure (some Azure deployments send
``-1`` for "no limit known") is malformed: it is no limit the fleet can use.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

from . import events
from .backoff import RETRY_AFTER_HEADERS, _http_date, _number, read_retry_after
from .errors import ConfigError

#: the budget kinds a header can speak of, in the governor's order
KINDS = ("requests", "tokens", "input_tokens", "output_tokens")
#: the largest figure taken: exact in a Lua number (a double), as the scripts need
MAX_FIGURE = 2**53 - 1
#: values longer than this are not parsed (no provider sends one)
MAX_VALUE_LENGTH = 100

_OPENAI = {"requests": "requests", "tokens": "tokens"}
_ANTHROPIC = {
    "requests": "requests",
    "tokens": "tokens",
    "input-tokens": "input_tokens",
    "output-tokens": "output_tokens",
}
#: header name -> (budget kind, field, reset format) for every figure read
FIGURES: Mapping[str, tuple[str, str, str]] = MappingProxyType(
    {
        **{
            f"anthropic-ratelimit-{suffix}-{what}": (kind, what, "rfc3339")
            for suffix, kind in _ANTHROPIC.items()
            for what in ("limit", "remaining", "reset")
        },
        **{
            f"x-ratelimit-{what}-{suffix}": (kind, what, "duration")
            for suffix, kind in _OPENAI.items()
            for what in ("limit", "remaining", "reset")
        },
    }
)
#: a service tier's own limits, header name -> (tier, budget kind, field, reset format): Anthropic's
#: fast mode is limited apart from the standard speed, in input and output tokens per minute
TIER_FIGURES: Mapping[str, tuple[str, str, str, str]] = MappingProxyType(
    {
        f"anthropic-fast-{suffix}-{what}": ("fast", kind, what, "rfc3339")
        for suffix, kind in (("input-tokens", "input_tokens"), ("output-tokens", "output_tokens"))
        for what in ("limit", "remaining", "reset")
    }
)
#: the Retry-After family, in order of preference: (name, unit in seconds); None: seconds or HTTP date

_INTEGER = re.compile(r"\d+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# A Go duration (what OpenAI's resets are): one or more <decimal><unit>, e.g. "1h2m3.5s"
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def _figure(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FIGURE:
        raise ConfigError(f"BudgetHeader.{what} must be None or an int in [0, {MAX_FIGURE}], got {value!r}")
    return value


@dataclass(frozen=True)
class BudgetHeader:
    """What a provider's headers say about one budget."""

    limit: int | None = None  #: the budget's size (requests or tokens per the provider's period)
    remaining: int | None = None  #: what is left of it now
    reset_ms: int | None = None  #: milliseconds until it is whole again

    def __post_init__(self) -> None:
        _figure(self.limit, "limit")
        _figure(self.remaining, "remaining")
        _figure(self.reset_ms, "reset_ms")


@dataclass(frozen=True)
class RateLimits:
    """Everything a response's headers say about the account's limits."""

    #: budget kind (one of :data:`KINDS`) -> its figures; only kinds with at least one figure
    budgets: Mapping[str, BudgetHeader] = field(default_factory=dict)
    #: seconds the provider asked to wait (retry-after-ms, x-ms-retry-after-ms, Retry-After), or None
    retry_after: float | None = None
    #: names (lower case) of the headers present whose value could not be read
    malformed: tuple[str, ...] = ()
    #: service tier -> budget kind -> its figures, for the tiers limited apart from the
    #: standard one (Anthropic's fast mode: ``{"fast": {"input_tokens": ..., "output_tokens": ...}}``)
    tiers: Mapping[str, Mapping[str, BudgetHeader]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"RateLimits.budgets must be a mapping, got {self.budgets!r}")
        budgets = dict(self.budgets)
        for kind, figures in budgets.items():
            if kind not in KINDS:
                raise ConfigError(f"RateLimits.budgets: unknown budget kind {kind!r} (kinds: {', '.join(KINDS)})")
            if not isinstance(figures, BudgetHeader):
                raise ConfigError(f"RateLimits.budgets[{kind!r}] must be a BudgetHeader, got {figures!r}")
        ordered = {kind: budgets[kind] for kind in KINDS if kind in budgets}
        object.__setattr__(self, "budgets", MappingProxyType(ordered))
        ra = self.retry_after
        if ra is not None and (
            isinstance(ra, bool) or not isinstance(ra, (int, float)) or not math.isfinite(ra) or ra < 0
        ):
            raise ConfigError(f"RateLimits.retry_after must be None or finite seconds >= 0, got {ra!r}")
        if not isinstance(self.malformed, tuple) or not all(isinstance(name, str) for name in self.malformed):
            raise ConfigError(f"RateLimits.malformed must be a tuple of header names, got {self.malformed!r}")
        if not isinstance(self.tiers, Mapping):
            raise ConfigError(
                f"RateLimits.tiers must be a mapping of tier -> budget kind -> figures, got {self.tiers!r}"
            )
        tiers = {}
        for tier, kinds in self.tiers.items():
            if not isinstance(tier, str) or not isinstance(kinds, Mapping) or not kinds:
                raise ConfigError(f"RateLimits.tiers[{tier!r}] must be a non-empty mapping of budget kind -> figures")
            for kind, figures in kinds.items():
                if kind not in KINDS or not isinstance(figures, BudgetHeader):
                    raise ConfigError(f"RateLimits.tiers[{tier!r}][{kind!r}] must be a BudgetHeader of one of {KINDS}")
            tiers[tier] = MappingProxyType({kind: kinds[kind] for kind in KINDS if kind in kinds})
        object.__setattr__(self, "tiers", MappingProxyType(tiers))

    def __bool__(self) -> bool:
        """True when the headers said anything at all (figures, a wait, or something unreadable)."""
        return bool(self.budgets) or self.retry_after is not None or bool(self.malformed) or bool(self.tiers)


#: what parse() answers for no headers
EMPTY = RateLimits()


def parse(headers: Mapping[str, str] | Iterable[tuple[Any, Any]] | None, *, now: float | None = None) -> RateLimits:
    """The rate limits a response's headers announce; never raises.

    ``headers`` is any mapping of names to values (httpx's ``Headers``, a
    plain dict in any case), or a sequence of ``(name, value)`` pairs; names
    and values may be str or bytes. ``now`` (Unix seconds, default
    ``time.time()``) is the moment RFC 3339 resets are measured from.
    """
    if headers is None:
        return EMPTY
    try:
        pairs = _pairs(headers)
    except Exception:  # noqa: BLE001 - a container that cannot be read says nothing
        return EMPTY
    if not pairs:
        return EMPTY
    clock = time.time() if now is None else now
    malformed: list[str] = []
    found: dict[str, dict[str, int]] = {}
    named: dict[str, set[str]] = {}  # kind -> the headers it was read from
    tiers: dict[str, dict[str, dict[str, int]]] = {}
    for name in sorted(pairs, key=_anthropic_first):
        tier_spec = TIER_FIGURES.get(name)
        if tier_spec is not None:
            tier, kind, what, reset_format = tier_spec
            value = _read_figure(pairs[name], what, reset_format, clock)
            if value is None:
                malformed.append(name)
            else:
                tiers.setdefault(tier, {}).setdefault(kind, {})["reset_ms" if what == "reset" else what] = value
            continue
        spec = FIGURES.get(name)
        if spec is None:
            continue
        kind, what, reset_format = spec
        value = _read_figure(pairs[name], what, reset_format, clock)
        if value is None:
            malformed.append(name)
            continue
        key = "reset_ms" if what == "reset" else what
        found.setdefault(kind, {}).setdefault(key, value)
        named.setdefault(kind, set()).add(name)
    if ("input_tokens" in found or "output_tokens" in found) and all(
        name.startswith("anthropic-") for name in named.get("tokens", ())
    ):
        found.pop("tokens", None)  # Anthropic's tokens-* is the tighter of input and output, no budget of its own
    retry_after = None
    for name, unit in RETRY_AFTER_HEADERS:
        if name not in pairs:
            continue
        seconds = read_retry_after(pairs[name], unit, pairs.get("date"), clock)
        if seconds is None:
            malformed.append(name)
        elif retry_after is None:
            retry_after = seconds
    budgets = {kind: BudgetHeader(**figures) for kind, figures in found.items()}
    tier_budgets = {
        tier: {kind: BudgetHeader(**figures) for kind, figures in kinds.items()} for tier, kinds in tiers.items()
    }
    return RateLimits(budgets, retry_after, tuple(malformed), tier_budgets)


def budget_limits(headers: Mapping[str, str], name: str) -> dict[str, tuple[int | None, int | None]]:
    """A response's rate-limit headers as budget kind -> (limit, remaining), as
    governor ``name``'s report sends them: a tier's own figures
    (:attr:`RateLimits.tiers`) as the kinds ``<tier>_<kind>``
    (``fast_input_tokens``: governor.budgets.KIND_TIER); unreadable ones are
    counted (events.MalformedHeaders), never raised."""
    read = parse(headers)
    if read.malformed:
        events.emit(events.MalformedHeaders(name, read.malformed))
    limits = {kind: (figures.limit, figures.remaining) for kind, figures in read.budgets.items()}
    for tier, kinds in read.tiers.items():  # a tier limited apart: budgets of its own, "fast_input_tokens"...
        for kind, figures in kinds.items():
            limits[f"{tier}_{kind}"] = (figures.limit, figures.remaining)
    return limits


def undated_retry_at(headers: Any) -> float | None:
    """Unix seconds of a ``Retry-After`` given as an HTTP date in a response
    with no usable ``Date`` header to measure it against (and no earlier
    header of :data:`~governor.backoff.RETRY_AFTER_HEADERS` giving a figure):
    only the fleet's clock (Redis ``TIME``) may turn it into a wait, never a
    host's. None otherwise (a figure, a dated response, no such header)."""
    if headers is None:
        return None
    try:
        pairs = _pairs(headers)
    except Exception:  # noqa: BLE001 - a container that cannot be read says nothing
        return None
    if _http_date(pairs.get("date")) is not None:
        return None
    for name, unit in RETRY_AFTER_HEADERS:
        text = pairs.get(name)
        if text is None or read_retry_after(text, unit, None, 0.0) is None:
            continue  # absent or unreadable: the next one decides
        return _http_date(text) if unit is None and _number(text) is None else None
    return None


def _anthropic_first(name: str) -> tuple[int, str]:
    return (0 if name.startswith("anthropic-") else 1, name)


def _pairs(headers: Any) -> dict[str, str]:
    """Lower-case name -> value (str) of the headers that matter here."""
    items: Iterable[Any] = headers.items() if hasattr(headers, "items") else headers
    pairs: dict[str, str] = {}
    for key, value in items:
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(key, str):
            continue
        name = key.strip().lower()
        if (
            name in FIGURES
            or name in TIER_FIGURES
            or name == "date"
            or any(name == known for known, _ in RETRY_AFTER_HEADERS)
        ):
            # A value that is no str (a number put into a dict by hand) is read from its text.
            text = value if isinstance(value, str) else str(value)
            if name in pairs:  # the same header twice: both must agree, as one comma-joined value would not
                text = pairs[name] + ", " + text
            pairs[name] = text
    return pairs


def _read_figure(text: str, what: str, reset_format: str, now: float) -> int | None:
    text = text.strip()
    if len(text) > MAX_VALUE_LENGTH:
        return None
    if what != "reset":
        if not _INTEGER.fullmatch(text):
            return None
        value = int(text)
        return value if value <= MAX_FIGURE else None
    if reset_format == "duration":
        seconds = parse_duration(text)
    else:
        when = parse_rfc3339(text)
        seconds = None if when is None else max(0.0, when - now)
    if seconds is None:
        return None
    millis = math.ceil(seconds * 1000.0 - 1e-9)  # 0.5 ms waits 1 ms: a reset is never read as sooner
    return max(0, millis) if millis <= MAX_FIGURE else None


def parse_duration(text: str) -> float | None:
    """Seconds in a Go-style duration (``1s``, ``6m0s``, ``12ms``, ``1h2m3.5s``,
    ``0.5s``, ``0``), as OpenAI sends its resets; a bare number is seconds
    (as Azure sends them). None if it is neither."""
    text = text.strip()
    if text == "0":
        return 0.0
    if _NUMBER.fullmatch(text):
        seconds = float(text)
    elif _DURATION.fullmatch(text):
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))
    else:
        return None
    return seconds if math.isfinite(seconds) else None


def parse_rfc3339(text: str) -> float | None:
    """Unix seconds of an RFC 3339 time (``2025-01-01T00:00:00Z``, with a
    fraction or an offset), as Anthropic sends its resets; None if it is not one."""
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        offset = timedelta(0) if zulu else timedelta(hours=int(off_h), minutes=int(off_m))
        if sign == "-":
            offset = -offset
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            min(int(second), 59),  # a leap second reads as the second before it
            tzinfo=timezone(offset),
        )
    except ValueError:  # month 13, hour 25, an offset of a day or more
        return None
    return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)
