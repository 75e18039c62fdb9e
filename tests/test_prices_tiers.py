"""The service tier of a call: asked for in the request, served as the
response says, limited apart where the provider's headers say so.

The responses are the providers' own shapes, read through their SDKs'
response types where the SDK is installed (as the governed clients see
them) and as decoded JSON (as the transport and the proxy see them).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from governor import ConfigError
from governor.headers import TIER_FIGURES, BudgetHeader, RateLimits, parse
from governor.prices import TIERS, Price, PriceBook, Usage
from governor.profiles import REGISTRY, profile, tier_name

#: 2025-01-01T00:00:00Z
NEW_YEAR = 1_735_689_600.0

ANTHROPIC = {
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "79000",
    "anthropic-ratelimit-input-tokens-reset": "2025-01-01T00:00:06Z",
    "anthropic-ratelimit-output-tokens-limit": "20000",
    "anthropic-ratelimit-output-tokens-remaining": "19000",
    "anthropic-ratelimit-output-tokens-reset": "2025-01-01T00:00:03Z",
}

#: what a fast-mode answer adds: its own limits, apart from the standard speed's
FAST = {
    "anthropic-fast-input-tokens-limit": "30000",
    "anthropic-fast-input-tokens-remaining": "29000",
    "anthropic-fast-input-tokens-reset": "2025-01-01T00:00:02Z",
    "anthropic-fast-output-tokens-limit": "6000",
    "anthropic-fast-output-tokens-remaining": "5800",
    "anthropic-fast-output-tokens-reset": "2025-01-01T00:00:01.5Z",
}


def openai_completion(service_tier: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_735_689_600,
        "model": "gpt-5-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop", "logprobs": None}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }
    if service_tier is not None:
        body["service_tier"] = service_tier
    return body


def anthropic_message(**usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-6",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 3, **usage},
    }


# -- the names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "tier"),
    [
        ("default", "standard"),
        ("auto", "standard"),
        ("standard_only", "standard"),
        ("STANDARD", "standard"),
        ("flex", "flex"),
        ("SERVICE_TIER_PRIORITY", "priority"),
        (b"priority", "priority"),
        ("fast", "fast"),
        ("ultrafast", "ultrafast"),
        ("batch", "batch"),
        ("scale", None),
        ("", None),
        (None, None),
        (3, None),
    ],
)
def test_provider_tier_names(value: Any, tier: str | None) -> None:
    assert tier_name(value) == tier
    assert tier is None or tier in TIERS


# -- the tier asked for, from the request body ---------------------------------------------


@pytest.mark.parametrize(
    ("name", "body", "tier"),
    [
        ("openai", {"model": "gpt-5", "service_tier": "flex"}, "flex"),
        ("openai", {"model": "gpt-5", "service_tier": "auto"}, "standard"),
        ("openai", {"model": "gpt-5"}, "standard"),
        ("openai", json.dumps({"model": "gpt-5", "service_tier": "priority"}).encode(), "priority"),
        ("openai", "not json", "standard"),
        ("azure", {"service_tier": "flex"}, "flex"),
        ("litellm", {"service_tier": "priority"}, "priority"),
        ("anthropic", {"model": "claude-opus-4-6", "speed": "fast"}, "fast"),
        ("anthropic", {"model": "claude-opus-4-6", "service_tier": "standard_only"}, "standard"),
        ("anthropic", {"model": "claude-opus-4-6", "speed": "standard"}, "standard"),
        ("anthropic", None, "standard"),
        ("gemini", {"contents": [], "service_tier": "SERVICE_TIER_FLEX"}, "flex"),
        ("gemini", {"contents": [], "generationConfig": {"serviceTier": "priority"}}, "priority"),
        ("vertex", {"contents": []}, "standard"),
        ("bedrock", {"messages": [], "serviceTier": {"type": "priority"}}, "priority"),
        ("bedrock", {"messages": [], "serviceTier": {"type": "default"}}, "standard"),
        ("bedrock", {"messages": []}, "standard"),
    ],
)
def test_the_tier_a_request_asks_for(name: str, body: Any, tier: str) -> None:
    assert profile(name).requested_tier(body) == tier


# -- the tier served, from the response ----------------------------------------------------


@pytest.mark.parametrize(
    ("service_tier", "tier"), [("default", "standard"), ("flex", "flex"), ("priority", "priority"), (None, None)]
)
def test_openai_serves_the_tier_its_response_names(service_tier: str | None, tier: str | None) -> None:
    body = openai_completion(service_tier)
    assert profile("openai").served_tier(body) == tier
    openai = pytest.importorskip("openai")
    completion = openai.types.chat.ChatCompletion.model_validate(body)
    assert profile("openai").served_tier(completion) == tier


def test_openai_responses_api_names_the_tier_too() -> None:
    openai = pytest.importorskip("openai")
    response = openai.types.responses.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_735_689_600,
            "model": "gpt-5",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "service_tier": "flex",
        }
    )
    assert profile("openai").served_tier(response) == "flex"


@pytest.mark.parametrize(
    ("usage", "tier"),
    [
        ({"speed": "fast", "service_tier": "standard"}, "fast"),
        ({"speed": "standard", "service_tier": "standard"}, "standard"),
        ({"service_tier": "priority"}, "priority"),
        ({"service_tier": "batch"}, "batch"),
        ({}, None),
    ],
)
def test_anthropic_serves_the_tier_its_usage_names(usage: dict[str, Any], tier: str | None) -> None:
    body = anthropic_message(**usage)
    assert profile("anthropic").served_tier(body) == tier
    anthropic = pytest.importorskip("anthropic")
    message = anthropic.types.Message.model_validate(body)
    assert profile("anthropic").served_tier(message) == tier


def test_a_fast_request_served_at_standard_speed_is_charged_at_the_standard_price() -> None:
    """Fast mode falls back to the standard speed when its limit is spent: the usage says so, the book charges it."""
    anthropic = profile("anthropic")
    request = {"model": "my-opus", "speed": "fast", "max_tokens": 100, "messages": []}
    answer = anthropic_message(speed="standard")
    book = PriceBook(
        [
            Price("anthropic", "my-opus", input=5, output=25),
            Price("anthropic", "my-opus", input=30, output=150, tier="fast"),
        ],
        table=False,
    )
    asked = anthropic.requested_tier(request)
    served = anthropic.served_tier(answer) or asked
    assert (asked, served) == ("fast", "standard")
    usage = Usage(input_tokens=12, output_tokens=3)
    assert book.cost("anthropic", "my-opus", usage, served) == 12 * 5 + 3 * 25
    assert book.cost("anthropic", "my-opus", usage, asked) == 12 * 30 + 3 * 150


def test_gemini_serves_the_tier_its_header_names() -> None:
    gemini = profile("gemini")
    assert gemini.served_tier({"candidates": []}, httpx.Headers({"X-Gemini-Service-Tier": "standard"})) == "standard"
    assert gemini.served_tier({"candidates": []}, {"x-gemini-service-tier": "priority"}) == "priority"
    assert gemini.served_tier({"candidates": []}, {}) is None
    assert gemini.served_tier({"candidates": []}) is None


def test_bedrock_serves_the_tier_its_response_names() -> None:
    bedrock = profile("bedrock")
    answer = {"output": {}, "usage": {"inputTokens": 1, "outputTokens": 1}, "serviceTier": {"type": "flex"}}
    assert bedrock.served_tier(answer) == "flex"
    assert bedrock.served_tier({"output": {}}) is None


def test_every_profile_says_how_a_refused_call_is_billed() -> None:
    for found in REGISTRY.values():
        assert found.refusals_billed, found
    for name in ("openai", "azure", "anthropic", "gemini", "vertex", "bedrock"):
        assert REGISTRY[name].refusals_billed.startswith("nothing"), name


# -- fast mode's own limits, from the headers ----------------------------------------------


def test_fast_mode_headers_are_a_tier_of_their_own() -> None:
    read = parse({**ANTHROPIC, **FAST}, now=NEW_YEAR)
    assert dict(read.tiers) == {
        "fast": {
            "input_tokens": BudgetHeader(limit=30000, remaining=29000, reset_ms=2000),
            "output_tokens": BudgetHeader(limit=6000, remaining=5800, reset_ms=1500),
        }
    }
    assert read.budgets == parse(ANTHROPIC, now=NEW_YEAR).budgets  # the standard limits are untouched
    assert read.malformed == ()


def test_fast_mode_headers_alone_are_no_standard_budget() -> None:
    read = parse(FAST, now=NEW_YEAR)
    assert dict(read.budgets) == {}
    assert set(read.tiers["fast"]) == {"input_tokens", "output_tokens"}
    assert read


def test_a_fast_mode_header_that_cannot_be_read_is_named() -> None:
    read = parse({**FAST, "anthropic-fast-output-tokens-remaining": "lots"}, now=NEW_YEAR)
    assert read.malformed == ("anthropic-fast-output-tokens-remaining",)
    assert read.tiers["fast"]["output_tokens"] == BudgetHeader(limit=6000, reset_ms=1500)


def test_the_fast_mode_header_names() -> None:
    assert set(TIER_FIGURES) == {
        f"anthropic-fast-{kind}-tokens-{what}"
        for kind in ("input", "output")
        for what in ("limit", "remaining", "reset")
    }
    assert {tier for tier, *_ in TIER_FIGURES.values()} <= set(TIERS)


def test_tier_figures_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"RateLimits\.tiers\['fast'\]\['tokenz'\]"):
        RateLimits(tiers={"fast": {"tokenz": BudgetHeader(limit=1)}})
    with pytest.raises(ConfigError, match="must be a non-empty mapping"):
        RateLimits(tiers={"fast": {}})
    with pytest.raises(ConfigError, match=r"RateLimits\.tiers must be a mapping"):
        RateLimits(tiers=[("fast", {})])  # type: ignore[arg-type]


# -- the usage a price is computed from -----------------------------------------------------

#: responses in each provider's shape, with cached tokens, as (the table's provider id, its api flavor)
PRICED_SHAPES = [
    (
        "openai",
        ("openai", "chat"),
        {
            "model": "gpt-4o",
            "usage": {
                "prompt_tokens": 1000,
                "completion_tokens": 50,
                "total_tokens": 1050,
                "prompt_tokens_details": {"cached_tokens": 400},
            },
        },
    ),
    (
        "openai",
        ("openai", "responses"),
        {
            "model": "gpt-5",
            "usage": {
                "input_tokens": 1000,
                "output_tokens": 50,
                "total_tokens": 1050,
                "input_tokens_details": {"cached_tokens": 400},
                "output_tokens_details": {"reasoning_tokens": 10},
            },
        },
    ),
    (
        "anthropic",
        ("anthropic", "default"),
        {
            "model": "claude-opus-4-6",
            "usage": {
                "input_tokens": 100,
                "output_tokens": 50,
                "cache_read_input_tokens": 400,
                "cache_creation_input_tokens": 30,
            },
        },
    ),
    (
        "anthropic",
        ("anthropic", "default"),
        {"model": "claude-opus-4-6", "usage": {"input_tokens": 100, "output_tokens": 50}},
    ),
    (
        "gemini",
        ("google", "default"),
        {
            "modelVersion": "gemini-2.5-pro",
            "usageMetadata": {
                "promptTokenCount": 1000,
                "candidatesTokenCount": 40,
                "thoughtsTokenCount": 60,
                "cachedContentTokenCount": 300,
                "totalTokenCount": 1100,
            },
        },
    ),
    (
        "bedrock",
        ("aws", "default"),
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
            "usage": {"inputTokens": 100, "outputTokens": 50, "cacheReadInputTokens": 400, "cacheWriteInputTokens": 30},
        },
    ),
]


@pytest.mark.parametrize(("name", "table", "body"), PRICED_SHAPES, ids=[f"{s[0]}-{s[1][1]}" for s in PRICED_SHAPES])
def test_the_priced_usage_is_what_the_price_table_reads_from_the_same_response(
    name: str, table: tuple[str, str], body: dict[str, Any]
) -> None:
    genai_prices = pytest.importorskip("genai_prices")
    ours = profile(name).priced_usage(body)
    assert ours is not None
    theirs = genai_prices.extract_usage(body, provider_id=table[0], api_flavor=table[1]).usage
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert getattr(ours, field) == theirs.reported_value(field), field


def test_the_priced_usage_of_sdk_responses() -> None:
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    completion = openai.types.chat.ChatCompletion.model_validate(
        {**openai_completion("flex"), "usage": PRICED_SHAPES[0][2]["usage"]}
    )
    assert profile("openai").priced_usage(completion) == Usage(1000, 50, cache_read_tokens=400)
    message = anthropic.types.Message.model_validate({**anthropic_message(), "usage": PRICED_SHAPES[2][2]["usage"]})
    assert profile("anthropic").priced_usage(message) == Usage(530, 50, cache_read_tokens=400, cache_write_tokens=30)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("openai", {"id": "x"}),
        ("openai", {"usage": {"prompt_tokens": -1, "completion_tokens": 1}}),
        (
            "openai",
            {"usage": {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 11}}},
        ),
        ("anthropic", {"usage": {"input_tokens": "10", "output_tokens": 1, "cache_read_input_tokens": 1}}),
        ("gemini", {"candidates": []}),
        ("gemini", {"usageMetadata": {"promptTokenCount": 1.5}}),
        ("bedrock", {"usage": {"inputTokens": 1, "outputTokens": 1, "cacheReadInputTokens": True}}),
        ("openai", None),
    ],
)
def test_a_usage_that_says_nothing_readable_is_none(name: str, body: Any) -> None:
    assert profile(name).priced_usage(body) is None


# -- over HTTP: a fast-mode request refused when its own limit is spent -------------------------


def test_a_fast_request_past_its_limit_through_the_sdk() -> None:
    """The real Anthropic SDK asks a real HTTP server for fast mode and is
    refused with a 429 carrying fast mode's own limits: the request's body
    says the tier asked for, the response's headers the tier's figures, and
    the profile says the refusal is throttling, billed nothing."""
    anthropic = pytest.importorskip("anthropic")
    from governor.core import Outcome

    from .support import scripted_provider as sp

    server = sp.ScriptedProvider().start()
    try:
        exhausted = {**FAST, "anthropic-fast-output-tokens-remaining": "0", "retry-after": "2"}
        server.script(sp.anthropic_rate_limited(**exhausted))
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as refused:
            client.messages.create(
                model="claude-opus-4-6",
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"speed": "fast"},
            )
        client.close()
    finally:
        server.stop()
    found = profile("anthropic")
    assert found.requested_tier(server.requests[-1].body) == "fast"
    read = found.rate_limits(refused.value.response.headers, now=NEW_YEAR)
    assert read.tiers["fast"]["output_tokens"].remaining == 0
    assert read.tiers["fast"]["input_tokens"] == BudgetHeader(limit=30000, remaining=29000, reset_ms=2000)
    assert read.retry_after == 2
    assert dict(read.budgets) == {}  # the standard speed's limits were not announced, so none is learnt
    verdict = found.classify(429, refused.value.response.headers, refused.value.body)
    assert verdict.kind == Outcome.RATE_LIMITED
    assert found.refusals_billed.startswith("nothing")
