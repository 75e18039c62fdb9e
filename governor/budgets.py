"""Budgets beside concurrency: requests and tokens per minute.

A provider account is limited in requests and tokens per minute (Anthropic:
input and output tokens apart) as well as in what it serves at once. Each
of these is a *budget kind*: a bucket in the ``state`` hash, refilled
continuously at its limit per minute up to its burst, and checked by the
one admission rule (lua/lib/admission.lua ``BUDGETS``; the buckets in lua/lib/budgets.lua) in the same atomic
call as concurrency. A caller is admitted only when every active budget
has room for its cost; the reason it waits names the budget.

The kinds and what one lease costs in each::

    requests            1
    tokens              input + output   (a lease of the standard tier)
    input_tokens        input            (a lease of the standard tier)
    output_tokens       output           (a lease of the standard tier)
    fast_input_tokens   input            (a lease of tier ``fast``)
    fast_output_tokens  output           (a lease of tier ``fast``)

A service tier a provider limits apart from the standard one is a budget of
its own: Anthropic's fast mode (``speed: "fast"``) has "a dedicated rate
limit that is separate from standard Opus rate limits", announced by the
``anthropic-fast-{input,output}-tokens-*`` headers. A lease names its tier
in its tokens (``Tokens(input, output, tier="fast")``; the governed
transports take it from the request): its tokens count in that tier's kinds
and in no other tier's, while ``requests`` counts every lease. A tier no
kind is kept for (``priority``, ``flex``...) counts as the standard one.

A lease reserves its estimate (:class:`Tokens`) when it is granted: the
cost is taken from every active bucket. Its report settles the actual
usage (``report(..., usage=Tokens(...))``): the difference goes back to
the buckets, or is charged (a bucket may go below zero: later callers wait
until it refills). A lease released or expired without a usage keeps its
reservation as spent: a call that crashed or was abandoned has probably
reached the provider, which counted it.

Where a budget's limit comes from (its ``source``)::

    configured  a ceiling in the config (GovernorConfig.requests_per_minute, ...)
    header      the provider's own limit, from a response's rate-limit headers
    learned     a provider that announces only what remains (Azure): the
                highest remaining seen

A report carrying a response's headers (``report(..., headers=...)``, read
by governor/headers.py) calibrates the buckets: the limit is the provider's
(a configured ceiling below it still wins), the burst the highest remaining
seen, and the fleet's level is clamped to the provider's remaining. Both
sides count what is in flight: the fleet took each lease's reservation at
its admission, and the provider counts a request's estimate (prompt plus
``max_tokens``) when it arrives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .errors import ConfigError, UsageTooLarge

#: the budget kinds, in the order the scripts take them
KINDS: tuple[str, ...] = (
    "requests",
    "tokens",
    "input_tokens",
    "output_tokens",
    "fast_input_tokens",
    "fast_output_tokens",
)

#: the kinds of a service tier limited apart from the standard one: kind -> tier
#: (the other token kinds count the standard tier's tokens; requests count every lease)
KIND_TIER: dict[str, str] = {"fast_input_tokens": "fast", "fast_output_tokens": "fast"}
#: the tiers with budgets of their own (governor.prices.TIERS names)
TIERS_APART: tuple[str, ...] = tuple(dict.fromkeys(KIND_TIER.values()))
#: a tier's name as Tokens.tier takes it (and the scripts' "input,output,tier")
_TIER_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")

#: where a budget's limit came from
SOURCES: tuple[str, ...] = ("configured", "header", "learned")

#: a reservation or usage above this is refused (2^53 keeps Lua exact)
MAX_TOKENS = 2**53

#: a reported usage above this (input + output tokens of one call) is refused by
#: the client (UsageTooLarge): a thousand times the largest context window, so
#: only a counting bug reaches it. The scripts bound a bucket's debt anyway (one
#: burst's worth below zero), so even a figure under it cannot stall the fleet.
MAX_USAGE = 10**9


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer number of tokens, got {value!r}")
    if value < 0 or value > MAX_TOKENS:
        raise ConfigError(f"{name} must be in [0, 2^53] tokens, got {value!r}")
    return value


@dataclass(frozen=True)
class Tokens:
    """A number of tokens in and out: a lease's estimate, or a call's actual
    usage, and the service tier they are asked or served in."""

    input: int = 0  #: prompt tokens (cached ones included)
    output: int = 0  #: completion tokens
    #: the service tier (governor.prices.TIERS): a lease's the tier it asks
    #: for, a usage's the tier that served it. None: not said (a lease: the
    #: standard tier; a usage: the tier its lease asked for)
    tier: str | None = None

    def __post_init__(self) -> None:
        _count("Tokens.input", self.input)
        _count("Tokens.output", self.output)
        if self.tier is not None and (not isinstance(self.tier, str) or not _TIER_NAME.fullmatch(self.tier)):
            raise ConfigError(
                f"Tokens.tier must be None or a tier name such as 'fast' or 'standard' "
                f"(1-32 of [a-z0-9_], a letter first), got {self.tier!r}"
            )

    @property
    def total(self) -> int:
        return self.input + self.output

    @classmethod
    def of(cls, value: Tokens | int | None, what: str = "tokens") -> Tokens:
        """``None``: none; an int: that many input tokens; a Tokens: itself."""
        if value is None:
            return NO_TOKENS
        if isinstance(value, Tokens):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{what} must be a Tokens, an integer or None, got {value!r}")
        return cls(input=_count(what, value))

    @property
    def apart(self) -> str:
        """The tier whose budgets these tokens count in: one of TIERS_APART,
        or '' (the standard tier's; any other tier counts as it)."""
        return self.tier if self.tier in TIERS_APART else ""

    def in_tier(self, tier: str | None) -> Tokens:
        """The same tokens in ``tier`` (None: not said)."""
        return self if tier == self.tier else replace(self, tier=tier)

    def counts_in(self, kind: str) -> bool:
        """Whether budget ``kind`` counts a lease of these tokens at all (the
        kinds of another tier's are neither taken from nor waited on)."""
        return Tokens().cost(kind) > 0 or KIND_TIER.get(kind, "") == self.apart

    def cost(self, kind: str) -> int:
        """What a lease of these tokens takes from budget ``kind`` (the Lua's
        costs are generated from it: governor/scripts.py): its tokens count
        in the kinds of its tier alone (:data:`KIND_TIER`)."""
        if kind == "requests":
            return 1
        if kind not in KINDS:
            raise ConfigError(f"unknown budget kind {kind!r}: use one of {', '.join(KINDS)}")
        if KIND_TIER.get(kind, "") != self.apart:
            return 0
        if kind == "tokens":
            return self.total
        return self.input if kind.endswith("input_tokens") else self.output

    def arg(self) -> str:
        """The scripts' form: ``"input,output"``, or ``"input,output,tier"``
        when a tier is said."""
        if self.tier is None:
            return f"{self.input},{self.output}"
        return f"{self.input},{self.output},{self.tier}"

    def as_usage(self) -> Tokens:
        """Itself, checked as a call's reported usage: UsageTooLarge (a
        ConfigError) beyond MAX_USAGE tokens."""
        if self.total > MAX_USAGE:
            raise UsageTooLarge(
                f"usage of {self.total} tokens ({self.input} in, {self.output} out) is beyond any call's "
                f"(at most {MAX_USAGE:,}): check how the usage is counted; nothing was reported"
            )
        return self


#: no tokens: an acquire that reserves nothing (the common case, made once)
NO_TOKENS = Tokens()


def config_field(kind: str) -> str:
    """The config field of a kind's ceiling: ``tokens`` -> ``tokens_per_minute``."""
    return f"{kind}_per_minute"


@dataclass(frozen=True)
class Budget:
    """One active budget as status reports it."""

    kind: str  #: one of KINDS
    limit: int  #: per minute: the refill rate, and the ceiling of the burst
    burst: int  #: what the bucket holds at most
    level: float  #: what it holds now (below zero: charged beyond a reservation)
    reserved: int  #: taken by the leases in flight (their estimates, not yet settled)
    source: str  #: one of SOURCES


def parse_budgets(flat: Any, text: Any) -> tuple[Budget, ...]:
    """Status's budget section: ``kind, limit, burst, level, reserved, source`` per budget."""
    items = list(flat or ())
    if len(items) % 6:
        raise ValueError(f"the budget section has {len(items)} items, not a multiple of 6")
    out = []
    for i in range(0, len(items), 6):
        kind, limit, burst, level, reserved, source = (text(v) for v in items[i : i + 6])
        out.append(Budget(kind, int(limit), int(burst), float(level), int(reserved), source))
    return tuple(out)
