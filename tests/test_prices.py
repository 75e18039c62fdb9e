"""governor.prices: what a call costs, from the genai-prices table or the user's own prices.

The charge for a call must be the price table's own calculation for the
same usage and tier: the conformance test below walks every model of the
supported providers and every tier the table prices it at, and compares
the book's micro-dollars with ``genai_prices.calc_price`` under the
request context the provider documents for that tier. No price is written
here but the user-price examples' own (invented) figures.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from decimal import ROUND_CEILING, Decimal
from typing import Any

import pytest

from governor.errors import ConfigError
from governor.prices import TIERS, Price, PriceBook, UnknownPrice, Usage, provider_id, tiers_of


@pytest.fixture
def genai_prices() -> Any:
    """The price table's package (the tests that need it are skipped without it)."""
    return pytest.importorskip("genai_prices")


#: the moment whose prices apply (the table dates its prices; a fixed one keeps the tests still)
WHEN = datetime(2026, 12, 1, tzinfo=timezone.utc)

#: the price table's providers for the governor's supported ones
PROVIDERS = ("openai", "anthropic", "google", "aws")

#: per provider and tier, the request context the provider documents (what the table prices it under)
CONTEXTS = {
    ("openai", "flex"): {"service_tier": "flex"},
    ("openai", "priority"): {"service_tier": "priority"},
    ("openai", "fast"): {"service_tier": "fast"},
    ("openai", "ultrafast"): {"service_tier": "ultrafast"},
    ("google", "flex"): {"service_tier": "flex"},
    ("google", "priority"): {"service_tier": "priority"},
    ("anthropic", "fast"): {"speed": "fast"},
    **{(provider, "batch"): {"processing": "batch"} for provider in PROVIDERS},
}

#: usages that exercise every price: cache reads and writes, and a long prompt (tiered prices above 200k)
USAGES = (
    Usage(input_tokens=1, output_tokens=1),
    Usage(input_tokens=1234, output_tokens=567, cache_read_tokens=400, cache_write_tokens=100),
    Usage(input_tokens=250_000, output_tokens=3_000, cache_read_tokens=120_000),
)


def book(*prices: Price, table: bool = True) -> PriceBook:
    return PriceBook(prices, table=table, now=lambda: WHEN)


def table_micros(usage: Usage, model: str, provider: str, context: dict[str, str] | None, when: datetime = WHEN) -> int:
    """The table's own price of ``usage``, in micro-dollars rounded up."""
    import genai_prices

    price = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model,
        provider_id=provider,
        genai_request_timestamp=when,
        price_context=context,
    ).total_price
    return int((price * 1_000_000).to_integral_value(rounding=ROUND_CEILING))


def table_models(provider: str) -> list[str]:
    from genai_prices import data_snapshot

    found = next(p for p in data_snapshot.get_snapshot().providers if p.id == provider)
    return [model.id for model in found.models]


# -- the conformance: the book charges what the table calculates ------------------------


#: an earlier moment, before some of the table's tier prices start (the table dates them)
EARLY = datetime(2025, 6, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("when", [WHEN, EARLY], ids=["now", "early"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_tier_the_table_prices_is_charged_as_the_table_calculates(
    provider: str, when: datetime, genai_prices: Any
) -> None:
    prices = PriceBook(now=lambda: when)
    charged: dict[str, int] = {}  # tier -> how many (model, usage) pairs were compared
    apart: set[str] = set()  # the tiers whose price differs from the standard one somewhere
    for model in table_models(provider):
        try:
            prices.check(provider, model)
        except UnknownPrice:  # a model the table lists but cannot find by its own id: the table cannot price it either
            with pytest.raises(LookupError):
                genai_prices.calc_price(genai_prices.Usage(), model, provider_id=provider, genai_request_timestamp=WHEN)
            continue
        calculation = genai_prices.calc_price(
            genai_prices.Usage(), model, provider_id=provider, genai_request_timestamp=when
        )
        for tier in tiers_of(calculation, when):
            context = None if tier == "standard" else CONTEXTS[(provider, tier)]
            for usage in USAGES:
                cost = prices.cost(provider, model, usage, tier)
                assert cost == table_micros(usage, model, provider, context, when), (model, tier, usage)
                if tier != "standard" and cost != prices.cost(provider, model, usage):
                    apart.add(tier)
            charged[tier] = charged.get(tier, 0) + 1
    assert charged.get("standard", 0) > 10, charged
    if when == WHEN and provider != "aws":  # the table prices no Bedrock tier
        assert len(charged) > 1, charged  # the tiers are priced now
    assert apart == set(charged) - {"standard"}, (charged, apart)  # each tier's own price is the one applied


def test_the_tiers_the_table_prices_for_the_supported_providers(genai_prices: Any) -> None:
    """Every request context the table prices by, for the supported providers,
    is one of the book's tiers: a tier the table learns is a failing test here,
    never a call charged at the standard rate."""
    from genai_prices import data_snapshot

    known = {tuple(sorted(context.items())) for contexts in TIERS.values() for context in contexts}
    known.add((("service_tier", "default"),))  # OpenAI's name of the standard tier
    seen = set()
    for found in data_snapshot.get_snapshot().providers:
        if found.id not in PROVIDERS:
            continue
        for model in found.models:
            for variant in model.price_variants or ():
                seen.add(tuple(sorted(variant.when.items())))
    assert seen - known == set(), "the price table prices tiers the book does not name"
    # And the tiers providers sell are priced for someone.
    assert {("speed", "fast"), ("service_tier", "flex"), ("service_tier", "priority"), ("processing", "batch")} <= {
        item for context in seen for item in context
    }


def test_profile_names_map_to_the_tables_providers(genai_prices: Any) -> None:
    assert provider_id("gemini") == "google"
    assert provider_id("vertex") == "google"
    assert provider_id("bedrock") == "aws"
    assert provider_id("OpenAI") == "openai"
    prices = book()
    model = next(m for m in table_models("google") if m.startswith("gemini-2.5-pro"))
    assert prices.cost("gemini", model, USAGES[1]) == table_micros(USAGES[1], model, "google", None)


# -- tiers the table does not price are refused at configuration ------------------------


def test_a_tier_the_table_does_not_price_is_refused_naming_it(genai_prices: Any) -> None:
    prices = book()
    opus = next(m for m in table_models("anthropic") if "opus" in m)
    with pytest.raises(UnknownPrice) as caught:
        prices.check("anthropic", opus, "priority")
    message = str(caught.value)
    assert f"no priority price for model {opus!r} of 'anthropic'" in message
    assert "prices it at standard" in message
    assert f"Price(provider='anthropic', model={opus!r}, tier='priority', input=" in message
    with pytest.raises(UnknownPrice):
        prices.cost("anthropic", opus, USAGES[0], "priority")


def test_an_unknown_model_is_refused_naming_it_and_how_to_price_it(genai_prices: Any) -> None:
    with pytest.raises(UnknownPrice) as caught:
        book().check("openai", "ft:gpt-4o:acme:support:abc123")
    message = str(caught.value)
    assert "no price for model 'ft:gpt-4o:acme:support:abc123' of 'openai'" in message
    assert "genai-prices" in message and "does not know it" in message
    assert "give its price: PriceBook([Price(provider='openai', model='ft:gpt-4o:acme:support:abc123'" in message
    assert isinstance(caught.value, ConfigError)


def test_without_the_table_only_own_prices_are_known() -> None:
    with pytest.raises(
        UnknownPrice, match="no price for model 'gpt-4o' of 'openai' at tier 'standard': give its price"
    ):
        book(table=False).check("openai", "gpt-4o")


def test_without_the_table_installed_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # import genai_prices raises ImportError
    with pytest.raises(UnknownPrice) as caught:
        book().check("openai", "gpt-4o")
    assert "pip install 'fleet-governor[prices]'" in str(caught.value)
    assert "give its price" in str(caught.value)


def test_an_unknown_tier_name_is_a_config_error_listing_the_tiers() -> None:
    with pytest.raises(ConfigError, match="unknown service tier 'turbo': use one of standard, flex, priority, fast"):
        book().check("openai", "gpt-4o", "turbo")


# -- the user's own prices ----------------------------------------------------------------


def test_own_prices_are_exact_and_rounded_up_to_a_micro_dollar() -> None:
    price = Price("openai", "my-model", input=1, output="2.5", cache_read=0.1)
    prices = book(price, table=False)
    # 500 uncached x $1 + 7 x $2.5 + 400 x $0.1 + 100 cache writes at the input price: 657.5 micro-dollars
    assert prices.cost("openai", "my-model", Usage(1000, 7, 400, 100)) == 658
    assert prices.cost("openai", "My-Model", Usage(1000, 8, 400, 100)) == 660  # a whole figure stays whole
    assert prices.cost("openai", "my-model", Usage()) == 0
    tiny = book(Price("openai", "m", input="0.000001", output=0), table=False)
    assert tiny.cost("openai", "m", Usage(input_tokens=1)) == 1  # a millionth of a micro-dollar is charged as one
    assert tiny.cost("openai", "m", Usage(input_tokens=1_000_000)) == 1
    assert tiny.cost("openai", "m", Usage(input_tokens=1_000_001)) == 2


def test_own_cache_prices_apply_to_cached_tokens_only() -> None:
    prices = book(Price("anthropic", "m", input=3, output=15, cache_read="0.3", cache_write="3.75"), table=False)
    assert prices.cost("anthropic", "m", Usage(1000, 0, 400, 100)) == 500 * 3 + 120 + 375
    assert prices.cost("anthropic", "m", Usage(0, 10)) == 150


def test_own_prices_take_precedence_over_the_table_tier_by_tier(genai_prices: Any) -> None:
    mine = Price("openai", "gpt-4o", input=1, output=1)
    prices = book(mine)
    usage = USAGES[1]
    assert prices.cost("openai", "gpt-4o", usage) == mine.micros(usage) == 1234 + 567
    assert prices.cost("openai", "gpt-4o", usage) != table_micros(usage, "gpt-4o", "openai", None)
    # the tiers the user did not price still come from the table
    assert prices.cost("openai", "gpt-4o", usage, "batch") == table_micros(
        usage, "gpt-4o", "openai", {"processing": "batch"}
    )


def test_own_prices_price_a_tier_the_table_does_not(genai_prices: Any) -> None:
    opus = next(m for m in table_models("anthropic") if "opus" in m)
    prices = book(Price("anthropic", opus, input=10, output=50, tier="priority"))
    prices.check("anthropic", opus, "priority")
    assert prices.cost("anthropic", opus, Usage(100, 10), "priority") == 1500


def test_own_prices_of_a_profile_name_match_the_tables_provider() -> None:
    prices = book(Price("gemini", "my-tuned-gemini", input=1, output=2), table=False)
    assert prices.cost("google", "my-tuned-gemini", Usage(1, 1)) == 3
    assert prices.cost("vertex", "MY-TUNED-GEMINI", Usage(1, 1)) == 3


def test_prices_from_plain_data() -> None:
    prices = PriceBook.from_mapping(
        {"openai": {"my-model": {"standard": {"input": "1", "output": 2}, "flex": {"input": "0.5", "output": 1}}}},
        table=False,
    )
    assert prices.cost("openai", "my-model", Usage(10, 10)) == 30
    assert prices.cost("openai", "my-model", Usage(10, 10), "flex") == 15
    with pytest.raises(ConfigError, match="give input, output and optionally cache_read, cache_write"):
        PriceBook.from_mapping({"openai": {"m": {"standard": {"input": 1, "outptu": 2}}}})
    with pytest.raises(ConfigError, match="unknown service tier 'fastest'"):
        PriceBook.from_mapping({"openai": {"m": {"fastest": {"input": 1, "output": 2}}}})


def test_a_model_priced_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="priced twice"):
        book(Price("openai", "m", 1, 1), Price("OpenAI", "M", 2, 2))


@pytest.mark.parametrize(
    "figures",
    [
        {"input": -1, "output": 1},
        {"input": 1, "output": True},
        {"input": "one", "output": 1},
        {"input": float("nan"), "output": 1},
        {"input": "Infinity", "output": 1},
        {"input": 1, "output": 1, "cache_read": -0.5},
        {"input": 1, "output": None},
    ],
)
def test_invalid_prices_are_refused(figures: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"Price\.\w+ must be"):
        Price("openai", "m", **figures)  # type: ignore[arg-type]


def test_a_float_price_is_read_from_its_shortest_text() -> None:
    assert Price("openai", "m", input=0.1, output=0.3).input == Decimal("0.1")


def test_prices_are_frozen() -> None:
    price = Price("openai", "m", 1, 2)
    with pytest.raises(AttributeError):
        price.input = Decimal(3)  # type: ignore[misc]


def test_the_most_a_call_can_cost_is_at_least_any_split_of_its_input(genai_prices: Any) -> None:
    mine = book(Price("anthropic", "m", input=3, output=15, cache_read="0.3", cache_write="3.75"), table=False)
    assert mine.most("anthropic", "m", 1000, 100) == 1000 * 3.75 + 100 * 15  # all written to the cache costs most
    cheap_writes = book(Price("openai", "m", input=2, output=8, cache_write=1), table=False)
    assert cheap_writes.most("openai", "m", 1000, 100) == 1000 * 2 + 100 * 8
    table = book()
    opus = next(m for m in table_models("anthropic") if "opus" in m)
    for split in ((0, 0), (700, 0), (0, 700), (300, 700), (1000, 0), (0, 1000)):
        usage = Usage(1000, 100, cache_read_tokens=split[0], cache_write_tokens=split[1])
        assert table.most("anthropic", opus, 1000, 100) >= table.cost("anthropic", opus, usage)
        assert table.most("openai", "gpt-4o", 1000, 100) >= table.cost("openai", "gpt-4o", usage)


# -- the usage ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{"input_tokens": -1}, {"output_tokens": 1.5}, {"cache_read_tokens": True}, {"input_tokens": 2**53 + 1}],
)
def test_usage_counts_are_non_negative_integers(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"Usage\.\w+ must be an integer number of tokens"):
        Usage(**fields)  # type: ignore[arg-type]


def test_usage_input_counts_the_cached_tokens() -> None:
    Usage(input_tokens=10, cache_read_tokens=6, cache_write_tokens=4)
    with pytest.raises(ConfigError, match="input_tokens counts every input token, the cached ones included"):
        Usage(input_tokens=10, cache_read_tokens=6, cache_write_tokens=5)


def test_cost_wants_a_usage() -> None:
    with pytest.raises(ConfigError, match=r"cost needs a prices\.Usage"):
        book(Price("openai", "m", 1, 1)).cost("openai", "m", 5)  # type: ignore[arg-type]


def test_the_price_vectors_are_what_the_book_charges() -> None:
    """tests/conformance/prices.json, which the TypeScript client's tests
    charge against, is in step with governor.prices."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parent / "conformance" / "generate_prices.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
