"""Spend through the governed Bedrock client: the real boto3 calls the mock
provider (bench/provider.py) over loopback, on the governor's Redis; each
``converse`` reserves the most it can cost before it is sent and settles
what genai-prices charges for the usage Bedrock reports, a
``converse_stream`` at its ``metadata`` event, and a call no budget can
afford never reaches the provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from governor import ConfigError, Governor, GovernorConfig
from governor.prices import PriceBook, Usage
from governor.spend import SpendBudget, SpendExhausted

from .conftest import FakeClock
from .test_provider_clients import MESSAGES, Served, bedrock, mock, served  # noqa: F401 - the module's fixture
from .test_spend_transport import NOON, TABLE, spent, table_cost

MakeGov = Callable[..., Governor]
#: a Claude model as Bedrock names it; genai-prices prices it under ``aws``
CLAUDE = "anthropic.claude-sonnet-4-20250514-v1:0"


def make(make_gov: MakeGov, limit: float = 10, prices: PriceBook | None = TABLE) -> tuple[Governor, FakeClock]:
    clock = FakeClock(NOON.timestamp())
    config = GovernorConfig(restart_hold=False, spend=(SpendBudget("daily", "day", limit=limit),), prices=prices)
    return make_gov(config, clock=clock), clock


def charged(usage: dict[str, Any]) -> int:
    """What genai-prices charges for a Converse usage, in micro-dollars rounded up."""
    return table_cost("aws", CLAUDE, Usage(input_tokens=usage["inputTokens"], output_tokens=usage["outputTokens"]))


def test_a_converse_is_charged_what_the_price_table_charges(make_gov: MakeGov, served: Served) -> None:  # noqa: F811
    gov, clock = make(make_gov)
    client = bedrock(gov, mock(served, completion_tokens=40))
    reply = client.converse(modelId=CLAUDE, messages=MESSAGES, inferenceConfig={"maxTokens": 64})
    assert reply["usage"]["outputTokens"] == 40
    assert spent(gov, clock) == (charged(reply["usage"]), 0)


def test_a_converse_stream_is_charged_at_its_end(make_gov: MakeGov, served: Served) -> None:  # noqa: F811
    gov, clock = make(make_gov)
    client = bedrock(gov, mock(served, completion_tokens=20))
    events = iter(client.converse_stream(modelId=CLAUDE, messages=MESSAGES)["stream"])
    assert "messageStart" in next(events)
    running = spent(gov, clock)
    usage = [event for event in events if "metadata" in event][-1]["metadata"]["usage"]
    assert running[1] > charged(usage)  # reserved while it runs: the most it can cost
    assert spent(gov, clock) == (charged(usage), 0)


def test_a_stream_broken_off_is_charged_its_reservation(make_gov: MakeGov, served: Served) -> None:  # noqa: F811
    gov, clock = make(make_gov)
    client = bedrock(gov, mock(served, completion_tokens=20))
    reply = client.converse_stream(modelId=CLAUDE, messages=MESSAGES)
    events = iter(reply["stream"])
    next(events)
    reserved = spent(gov, clock)[1]
    reply["stream"].close()  # let go of before its metadata event: it may have been billed
    assert reserved > 0 and spent(gov, clock) == (reserved, 0)


def test_a_call_no_budget_can_afford_is_never_sent(make_gov: MakeGov, served: Served) -> None:  # noqa: F811
    gov, clock = make(make_gov, limit=0.001)  # a thousand micro-dollars: below the estimate's price
    server = mock(served)
    client = bedrock(gov, server)
    with pytest.raises(SpendExhausted) as caught:
        client.converse(modelId=CLAUDE, messages=MESSAGES, inferenceConfig={"maxTokens": 1000})
    assert caught.value.why == "never"
    assert server.record()["responses"] == []
    assert spent(gov, clock) == (0, 0)


def test_spend_budgets_need_prices(make_gov: MakeGov, served: Served) -> None:  # noqa: F811
    gov, _ = make(make_gov, prices=None)
    with pytest.raises(ConfigError, match=r"has spend budgets: give GovernorConfig\(prices=\.\.\.\)"):
        bedrock(gov, served)
