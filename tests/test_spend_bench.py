"""The spend benchmark's pieces: the billing provider and the figures.

The provider is a real HTTP server called by the real ``openai`` SDK; it
bills what the governor's price book charges for the same usage, refuses
past its rolling cap, and forgets a bill once the cap's window has passed
(read at a given time, no waiting). A guarded swarm of a second on the
session's Redis bills no tenant past its cap. Speeds are never asserted:
they are the benchmark's business.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from click.testing import CliRunner

from bench.cli import spend_command
from bench.spend_bench import (
    CAPS_MODEL,
    FLEET,
    TENANT_HEADER,
    RollingCap,
    Settings,
    SpendingProvider,
    _governor,
    _most_in_window,
    _reached,
    goals,
    price_book,
    run_swarm,
)
from governor.prices import Usage

#: quick answers of a fixed size
QUICK = Settings(latency=0.01, completion_sigma=0.0, prompt_chars=(400, 400), max_tokens=50, completion_mean=30)


@pytest.fixture
async def provider() -> Any:
    server = SpendingProvider(QUICK.provider())
    await server.start()
    yield server
    await server.stop()


def _client(provider: SpendingProvider, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=provider.url + "/v1", api_key="sk-sim", max_retries=0, default_headers={TENANT_HEADER: tenant}
    )


async def _call(client: openai.AsyncOpenAI, model: str = CAPS_MODEL) -> Any:
    messages: Any = [{"role": "user", "content": "x" * 400}]
    return await client.chat.completions.create(model=model, messages=messages, max_tokens=50)


async def test_an_answer_is_billed_to_its_tenant_what_the_price_book_charges(provider: SpendingProvider) -> None:
    async with _client(provider, "a") as client:
        answer = await _call(client)
    assert answer.usage is not None
    usage = Usage(answer.usage.prompt_tokens, answer.usage.completion_tokens)
    assert [(tenant, micros) for _, tenant, micros in provider.bills] == [
        ("a", price_book().cost("openai", CAPS_MODEL, usage))
    ]
    assert provider.bills[0][2] == usage.input_tokens * 2 + usage.output_tokens * 8  # USD per million: micro-dollars


async def test_the_rolling_cap_refuses_once_its_window_holds_the_limit(provider: SpendingProvider) -> None:
    provider.cap = RollingCap(limit_micros=10**9, window=60.0)
    async with _client(provider, "fleet") as client:
        await _call(client)
        provider.cap = RollingCap(limit_micros=provider.bills[0][2], window=60.0)  # what the window holds now
        with pytest.raises(openai.RateLimitError, match="Spend limit"):
            await _call(client)
    assert len(provider.bills) == 1 and len(provider.refusals) == 1
    billed_at = provider.bills[0][0]
    assert provider.in_window(billed_at + 59.9) == provider.bills[0][2]
    assert provider.in_window(billed_at + 60.0) == 0  # the bill has left the window


def test_the_figures_of_a_sequence_of_bills() -> None:
    bills = [(0.0, "a", 5), (1.0, "b", 7), (9.5, "a", 4), (10.5, "b", 6)]
    assert _reached(bills, "a", 9) == 9.5
    assert _reached(bills, FLEET, 12) == 1.0
    assert _reached(bills, "b", 14) is None
    assert _most_in_window(bills, 10.0) == 17  # (1.0, 9.5, 10.5): the first bill has left
    assert _most_in_window(bills, 11.0) == 22


def test_a_bill_past_the_cap_and_its_reservations_misses_the_goal() -> None:
    scope = {
        "cap": 100, "billed": 110, "over": 10, "in_flight_then": 5, "own_cap_reached": True, "goodput_ratio": 1.0,
    }  # fmt: skip
    result = {"cells": {"caps": {"scopes": {"a": scope}}}}
    assert [met for _, _, met in goals(result)] == [False, True]
    scope["in_flight_then"] = 10
    assert [met for _, _, met in goals(result)] == [True, True]


async def test_a_guarded_swarm_bills_no_tenant_past_its_cap(provider: SpendingProvider, redis_url: str) -> None:
    import redis.asyncio as aioredis

    from governor.spend import SpendBudget

    caps = {"a": "0.002", "b": "0.004"}  # a few calls each of about 0.0004 dollars
    budget = SpendBudget("daily", "day", tenants=caps, threshold=0)
    client = aioredis.Redis.from_url(redis_url)
    gov = _governor(client, (budget,), 8)
    try:
        swarm = await run_swarm(provider, QUICK, CAPS_MODEL, ["a", "b"], 1.5, gov)
    finally:
        await gov.aclose()
        await client.aclose()
    assert swarm.errors == []
    assert set(swarm.first_refusal) == {"a", "b"}  # each tenant reached its own cap
    for tenant, cap in caps.items():
        billed = sum(m for _, t, m in provider.bills if t == tenant)
        assert 0 < billed <= QUICK.micros(cap)


def test_the_command_refuses_an_unknown_scenario_before_running_anything() -> None:
    outcome = CliRunner().invoke(spend_command, ["--scenarios", "caps,daily"])
    assert outcome.exit_code == 2 and "unknown scenario(s) daily; choose from caps, rolling" in outcome.output
