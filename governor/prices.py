"""What a call costs in dollars: a price book over a maintained price table.

A :class:`PriceBook` answers two questions for the spend budgets:

- :meth:`PriceBook.check`: is this model priced at this service tier? Asked
  when a budget is configured, so a model with no known price is refused
  there (:class:`UnknownPrice`, naming the model and how to give its price),
  never found out after the money is spent;
- :meth:`PriceBook.cost`: what a call's :class:`Usage` costs at a tier, in
  integer micro-dollars (1e-6 USD), rounded up;
- :meth:`PriceBook.most`: the most a call of so many tokens in and out can
  cost at a tier, what an admission reserves.

Prices come from pydantic's ``genai-prices`` package (the ``prices`` extra:
``pip install 'fleet-governor[prices]'``), a table kept up to date by its
maintainers; none is copied here. The user's own prices (:class:`Price`,
per provider, model and tier, in USD per million tokens) take precedence
over the table, model by model and tier by tier, and price what the table
does not know (a fine-tuned model, a negotiated rate).

The service tiers (:data:`TIERS`) and the request context the table prices
each under::

    standard   the base price
    flex       service_tier=flex                  (OpenAI, Gemini)
    priority   service_tier=priority              (OpenAI, Gemini)
    fast       speed=fast (Anthropic's fast mode), else service_tier=fast
    ultrafast  service_tier=ultrafast             (OpenAI)
    batch      processing=batch

A tier is priced for a model only where the table has a price for it (or
the user gave one): the table itself falls back to the standard price for a
tier it does not know, which would charge a priority call at the standard
rate; here that tier is refused at configuration instead.

Tokens follow the table's convention: ``input_tokens`` counts every input
token, cache reads and writes included, and each cached token is charged at
its own price (the input price when the model has none).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from types import MappingProxyType
from typing import Any, cast

from .errors import ConfigError

#: the service tiers, and the request contexts the price table prices each under (the first it knows wins)
TIERS: Mapping[str, tuple[Mapping[str, str], ...]] = MappingProxyType(
    {
        "standard": (),
        "flex": ({"service_tier": "flex"},),
        "priority": ({"service_tier": "priority"},),
        "fast": ({"speed": "fast"}, {"service_tier": "fast"}),
        "ultrafast": ({"service_tier": "ultrafast"},),
        "batch": ({"processing": "batch"},),
    }
)

#: the governor's provider profiles -> the price table's provider ids (others are passed as they are)
PROVIDER_IDS: Mapping[str, str] = MappingProxyType({"gemini": "google", "vertex": "google", "bedrock": "aws"})

#: a token count above this is refused (2^53 keeps Lua's doubles exact)
MAX_TOKENS = 2**53

#: micro-dollars in a dollar
MICROS = 1_000_000

#: what to install for the table
EXTRA = "pip install 'fleet-governor[prices]'"

# Enough digits for 2^53 tokens times any price with 28 decimals, exactly.
_EXACT = decimal.Context(prec=80, rounding=decimal.ROUND_CEILING)


class UnknownPrice(ConfigError):
    """A model (or one of its service tiers) has no known price: neither the
    price table nor the user's prices name it."""


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise ConfigError(f"Usage.{name} must be an integer number of tokens in [0, 2^53], got {value!r}")
    return value


@dataclass(frozen=True)
class Usage:
    """The tokens of one call, as its price is computed.

    ``input_tokens`` counts every input token, the cached ones included (as
    OpenAI and Gemini report it; Anthropic reports ``input_tokens`` without
    its cache reads and writes: add them).
    """

    input_tokens: int = 0  #: every input token, cache reads and writes included
    output_tokens: int = 0  #: output tokens, reasoning included
    cache_read_tokens: int = 0  #: input tokens read from the prompt cache
    cache_write_tokens: int = 0  #: input tokens written to the prompt cache

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            _count(name, getattr(self, name))
        if self.cache_read_tokens + self.cache_write_tokens > self.input_tokens:
            raise ConfigError(
                f"Usage: {self.cache_read_tokens} cache reads and {self.cache_write_tokens} cache writes are more "
                f"than the {self.input_tokens} input tokens; input_tokens counts every input token, the cached "
                "ones included (add Anthropic's cache_read_input_tokens and cache_creation_input_tokens to its "
                "input_tokens)"
            )


def _price(name: str, value: object, *, optional: bool = False) -> Decimal | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ConfigError(f"Price.{name} must be USD per million tokens (a number or a decimal string), got {value!r}")
    try:
        # A float is read from its shortest text (0.1 is 0.1, not 0.1000000000000000055...).
        price = Decimal(repr(value) if isinstance(value, float) else value)
    except decimal.InvalidOperation:
        raise ConfigError(f"Price.{name} must be USD per million tokens, got {value!r}") from None
    if not price.is_finite() or price < 0:
        raise ConfigError(f"Price.{name} must be a finite, non-negative USD per million tokens, got {value!r}")
    return price


@dataclass(frozen=True)
class Price:
    """A model's price at one service tier, in USD per million tokens; the
    user's own, which takes precedence over the price table."""

    provider: str  #: a provider profile's name (openai, anthropic, gemini, bedrock, ...)
    model: str  #: the model as requests name it (compared case-insensitively)
    input: Decimal | int | float | str  #: USD per million input tokens (not read from or written to the cache)
    output: Decimal | int | float | str  #: USD per million output tokens
    cache_read: Decimal | int | float | str | None = None  #: USD per million cache reads (None: the input price)
    cache_write: Decimal | int | float | str | None = None  #: USD per million cache writes (None: the input price)
    tier: str = "standard"  #: one of TIERS

    def __post_init__(self) -> None:
        for name in ("provider", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"Price.{name} must be a non-empty string, got {value!r}")
        _tier(self.tier)
        object.__setattr__(self, "input", _price("input", self.input))
        object.__setattr__(self, "output", _price("output", self.output))
        object.__setattr__(self, "cache_read", _price("cache_read", self.cache_read, optional=True))
        object.__setattr__(self, "cache_write", _price("cache_write", self.cache_write, optional=True))

    @property
    def key(self) -> tuple[str, str, str]:
        """(provider id, model, tier), as the book looks it up."""
        return _key(self.provider, self.model, self.tier)

    def micros(self, usage: Usage) -> int:
        """What ``usage`` costs at this price, in micro-dollars rounded up.

        USD per million tokens times tokens is micro-dollars, so the sum is
        exact in decimal and rounded up once."""
        price_in = cast(Decimal, self.input)
        read = price_in if self.cache_read is None else cast(Decimal, self.cache_read)
        write = price_in if self.cache_write is None else cast(Decimal, self.cache_write)
        uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
        with decimal.localcontext(_EXACT):
            total = (
                uncached * price_in
                + usage.output_tokens * cast(Decimal, self.output)
                + usage.cache_read_tokens * read
                + usage.cache_write_tokens * write
            )
        return int(total.to_integral_value(rounding=decimal.ROUND_CEILING))


def _tier(tier: object) -> str:
    if tier not in TIERS:
        raise ConfigError(f"unknown service tier {tier!r}: use one of {', '.join(TIERS)}")
    return tier  # type: ignore[return-value]


def provider_id(provider: str) -> str:
    """The price table's id of a provider profile's name (``gemini`` -> ``google``, ``bedrock`` -> ``aws``)."""
    name = provider.strip().lower()
    return PROVIDER_IDS.get(name, name)


def _key(provider: str, model: str, tier: str) -> tuple[str, str, str]:
    return provider_id(provider), model.strip().lower(), tier


def _how(provider: str, model: str, tier: str) -> str:
    return (
        f"give its price: PriceBook([Price(provider={provider!r}, model={model!r}, tier={tier!r}, "
        "input=<USD per million tokens>, output=<USD per million tokens>)])"
    )


def _utcnow() -> datetime:
    return datetime.now(tz=timezone.utc)


class PriceBook:
    """Prices by provider, model and service tier: the user's own first, then
    the ``genai-prices`` table (unless ``table=False``).

    ``now`` (a callable returning an aware datetime, default the host's UTC
    clock) is the moment whose prices apply: the table dates its prices.
    """

    def __init__(
        self,
        prices: Iterable[Price] = (),
        *,
        table: bool = True,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        own: dict[tuple[str, str, str], Price] = {}
        for price in prices:
            if not isinstance(price, Price):
                raise ConfigError(f"PriceBook prices must be Price objects, got {price!r}")
            if price.key in own:
                raise ConfigError(
                    f"PriceBook: {price.model!r} of {price.provider!r} at tier {price.tier!r} is priced twice"
                )
            own[price.key] = price
        self.prices: Mapping[tuple[str, str, str], Price] = MappingProxyType(own)
        self.table = table
        self._now = now

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], **options: Any) -> PriceBook:
        """A book from plain data (a config file's):
        ``{provider: {model: {tier: {"input": ..., "output": ..., "cache_read": ..., "cache_write": ...}}}}``."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"prices must be a mapping of provider -> model -> tier -> prices, got {mapping!r}")
        found = []
        for provider, models in mapping.items():
            if not isinstance(models, Mapping):
                raise ConfigError(f"prices[{provider!r}] must be a mapping of model -> tier -> prices")
            for model, tiers in models.items():
                if not isinstance(tiers, Mapping):
                    raise ConfigError(f"prices[{provider!r}][{model!r}] must be a mapping of tier -> prices")
                for tier, figures in tiers.items():
                    if not isinstance(figures, Mapping):
                        raise ConfigError(f"prices[{provider!r}][{model!r}][{tier!r}] must be a mapping of prices")
                    try:
                        found.append(Price(provider, model, tier=tier, **figures))
                    except TypeError as exc:
                        raise ConfigError(
                            f"prices[{provider!r}][{model!r}][{tier!r}]: {exc}; "
                            "give input, output and optionally cache_read, cache_write"
                        ) from None
        return cls(found, **options)

    def check(self, provider: str, model: str, tier: str = "standard") -> None:
        """Nothing when ``model`` of ``provider`` is priced at ``tier``;
        :class:`UnknownPrice` naming it and how to give its price otherwise."""
        self._source(provider, model, _tier(tier))

    def cost(self, provider: str, model: str, usage: Usage, tier: str = "standard") -> int:
        """What ``usage`` costs at ``tier``, in micro-dollars (1e-6 USD), rounded up."""
        if not isinstance(usage, Usage):
            raise ConfigError(f"cost needs a prices.Usage, got {usage!r}")
        source = self._source(provider, model, _tier(tier))
        if isinstance(source, Price):
            return source.micros(usage)
        genai_prices, context = source
        calculation = genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
            model,
            provider_id=provider_id(provider),
            genai_request_timestamp=self._now(),
            price_context=context,
        )
        with decimal.localcontext(_EXACT):
            micros = calculation.total_price * MICROS
        return int(micros.to_integral_value(rounding=decimal.ROUND_CEILING))

    def most(self, provider: str, model: str, input_tokens: int, output_tokens: int, tier: str = "standard") -> int:
        """The most a call of ``input_tokens`` in and ``output_tokens`` out can
        cost at ``tier``, in micro-dollars: what a reservation takes. Its input
        is priced uncached, all read from the cache or all written to it,
        whichever costs most (a cache write costs more than an input token at
        some providers; a price is linear in the split, so an extreme is the most)."""
        splits: tuple[dict[str, int], ...] = (
            {},
            {"cache_read_tokens": input_tokens},
            {"cache_write_tokens": input_tokens},
        )
        return max(
            self.cost(provider, model, Usage(input_tokens=input_tokens, output_tokens=output_tokens, **split), tier)
            for split in splits
        )

    def _source(self, provider: str, model: str, tier: str) -> Price | tuple[Any, dict[str, str] | None]:
        """The user's Price, or (the table's module, the price context of ``tier``)."""
        if not isinstance(provider, str) or not isinstance(model, str) or not model.strip():
            raise ConfigError(f"a price is looked up by provider and model names, got {provider!r}, {model!r}")
        own = self.prices.get(_key(provider, model, tier))
        if own is not None:
            return own
        if not self.table:
            raise UnknownPrice(
                f"no price for model {model!r} of {provider!r} at tier {tier!r}: {_how(provider, model, tier)}"
            )
        try:
            import genai_prices
        except ImportError:
            raise UnknownPrice(
                f"no price for model {model!r} of {provider!r} at tier {tier!r}: the price table is not installed "
                f"({EXTRA}); or {_how(provider, model, tier)}"
            ) from None
        when = self._now()
        try:
            found = genai_prices.calc_price(
                genai_prices.Usage(), model, provider_id=provider_id(provider), genai_request_timestamp=when
            )
        except LookupError as exc:
            raise UnknownPrice(
                f"no price for model {model!r} of {provider!r}: genai-prices {genai_prices.__version__} "
                f"does not know it ({exc}); {_how(provider, model, tier)}"
            ) from None
        if tier == "standard":
            return genai_prices, None
        context = _context(found, TIERS[tier], when)
        if context is None:
            raise UnknownPrice(
                f"no {tier} price for model {model!r} of {provider!r}: genai-prices {genai_prices.__version__} prices "
                f"it at {', '.join(tiers_of(found, when))} only; {_how(provider, model, tier)}"
            )
        return genai_prices, context

    def __repr__(self) -> str:
        return f"<PriceBook {len(self.prices)} own prices, table {'on' if self.table else 'off'}>"


def _context(calculation: Any, contexts: Iterable[Mapping[str, str]], when: datetime) -> dict[str, str] | None:
    """The first of ``contexts`` the table has an active price for, on the model of ``calculation``."""
    model = calculation.model
    if not any(model is known for known in calculation.provider.models):
        return None  # a model borrowed from another provider: the table prices it at its standard rate only
    for context in contexts:
        for variant in model.price_variants or ():
            if variant.constraint is not None and not variant.constraint.active(when):
                continue
            if variant.when.items() <= context.items() and any(
                value is not None for value in variant.prices.__dict__.values()
            ):
                return dict(context)
    return None


def tiers_of(calculation: Any, when: datetime) -> list[str]:
    """The tiers the table prices the model of a ``genai_prices.calc_price`` result at, at ``when``."""
    return ["standard"] + [
        tier for tier, contexts in TIERS.items() if contexts and _context(calculation, contexts, when)
    ]


__all__ = ["MICROS", "TIERS", "Price", "PriceBook", "UnknownPrice", "Usage", "provider_id", "tiers_of"]
