"""Spend through the governed transport: the real openai SDK calls a real
HTTP provider (tests/test_transport.py's Provider); each request reserves
the most its estimate can cost at the tier it asks for, and settles the
usage at the tier that served it; a refusal is charged what the provider
bills it (nothing); a request no budget can afford never reaches the
provider."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import httpx
import openai
import pytest

from governor import ConfigError, Governor, GovernorConfig
from governor.prices import Price, PriceBook, Usage
from governor.providers import openai_client
from governor.spend import SpendBudget, SpendExhausted, read_lines
from governor.transport import GovernedTransport

from .conftest import FakeClock
from .test_transport import FAST, MESSAGES, OPENAI_LIMITS, Provider, chat_ok, chat_stream, openai_429

MakeGov = Callable[..., Governor]
#: the test model's prices, USD per million tokens: standard, and flex at half
BOOK = PriceBook(
    [
        Price("openai", "gpt-test", input=2, output=8),
        Price("openai", "gpt-test", input=1, output=4, tier="flex"),
        Price("openai", "gpt-test", input=4, output=16, tier="priority"),
    ],
    table=False,
)


@pytest.fixture(params=[pytest.param(("redis", False), id="redis"), pytest.param(("fakeredis", True), id="fakeredis")])
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server() -> Iterator[Provider]:
    provider = Provider().start()
    yield provider
    provider.stop()


@pytest.fixture
def provider(server: Provider) -> Provider:
    server.reset()
    return server


def governed(gov: Governor, provider: Provider, **options: Any) -> openai.OpenAI:
    transport = GovernedTransport(gov, retry=FAST, profile="openai", prices=BOOK, **options)
    return openai.OpenAI(
        base_url=f"{provider.url}/v1", api_key="test", max_retries=0, http_client=httpx.Client(transport=transport)
    )


def spent(gov: Governor, clock: FakeClock) -> tuple[int, int]:
    line = {(x.budget, x.scope): x for x in read_lines(gov.client.hgetall(gov.keys.spend), round(clock() * 1000))}
    return line["daily", "*"].spent, line["daily", "*"].reserved


def make(make_gov: MakeGov, limit: float = 10) -> tuple[Governor, FakeClock]:
    clock = FakeClock(datetime(2026, 12, 7, 12, tzinfo=timezone.utc).timestamp())
    config = GovernorConfig(max_capacity=4, restart_hold=False, spend=(SpendBudget("daily", "day", limit=limit),))
    return make_gov(config, clock=clock), clock


def test_a_call_is_charged_its_usage_at_the_tier_that_served_it(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov)
    answer = chat_ok(prompt=1000, completion=500)
    answer.body["service_tier"] = "flex"  # asked for priority, served at flex
    provider.script(answer)
    with governed(gov, provider) as client:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES, service_tier="priority")
    charged = BOOK.cost("openai", "gpt-test", Usage(input_tokens=1000, output_tokens=500), "flex")
    assert charged == 1000 * 1 + 500 * 4  # micro-dollars: tokens x USD per million
    assert spent(gov, clock) == (charged, 0)


def test_a_refusal_is_charged_nothing_and_the_retry_its_usage(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov)
    provider.script(openai_429(OPENAI_LIMITS), chat_ok(prompt=100, completion=10))
    with governed(gov, provider) as client:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert len(provider.requests) == 2
    assert spent(gov, clock) == (100 * 2 + 10 * 8, 0)


def test_a_stream_settles_when_it_ends(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov)
    provider.script(chat_stream(usage=(13, 7)))
    with governed(gov, provider) as client:
        stream = client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        assert spent(gov, clock)[1] > 0  # reserved while it runs
        for _ in stream:
            pass
    assert spent(gov, clock) == (13 * 2 + 7 * 8, 0)


def test_a_call_no_budget_can_afford_never_reaches_the_provider(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov, limit=0.001)  # a thousand micro-dollars: below the estimate's price
    provider.script(chat_ok())
    with governed(gov, provider) as client, pytest.raises(SpendExhausted) as caught:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES, max_tokens=1000)
    assert caught.value.why == "never" and provider.requests == []
    assert spent(gov, clock) == (0, 0)


def test_spend_budgets_need_prices(make_gov: MakeGov) -> None:
    gov, _ = make(make_gov)
    with pytest.raises(ConfigError, match="prices="):
        GovernedTransport(gov, profile="openai")


def test_the_sdk_clients_take_the_prices_from_the_config(make_gov: MakeGov, provider: Provider) -> None:
    clock = FakeClock(datetime(2026, 12, 7, 12, tzinfo=timezone.utc).timestamp())
    budgets = (SpendBudget("daily", "day", limit=10),)
    gov = make_gov(GovernorConfig(restart_hold=False, spend=budgets, prices=BOOK), clock=clock)
    provider.script(chat_ok(prompt=100, completion=10))
    with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert spent(gov, clock) == (100 * 2 + 10 * 8, 0)


def test_an_unknown_model_is_refused_before_anything_is_reserved(make_gov: MakeGov, provider: Provider) -> None:
    gov, _clock = make(make_gov)
    with governed(gov, provider) as client, pytest.raises(ConfigError, match="gpt-unknown"):
        client.chat.completions.create(model="gpt-unknown", messages=MESSAGES)
    assert provider.requests == []
