"""Spend through the governed transport: the real openai SDK (and the
anthropic and google-genai ones) calls a real HTTP provider
(tests/test_transport.py's Provider); each request reserves the most its
estimate can cost at the tier it asks for, and settles the usage at the tier
that served it, its cached tokens at their own prices, streamed or not; a
refusal is charged what the provider bills it (nothing); a request no budget
can afford never reaches the provider."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from decimal import ROUND_CEILING
from typing import Any

import genai_prices
import httpx
import openai
import pytest

from governor import AsyncGovernor, ConfigError, Governor, GovernorConfig
from governor.estimate import estimate_request
from governor.prices import MICROS, Price, PriceBook, Usage
from governor.providers import anthropic_client, async_anthropic_client, openai_client
from governor.spend import SpendBudget, SpendExhausted, read_lines
from governor.transport import GovernedTransport

from .conftest import FakeClock
from .test_transport import (
    ANTHROPIC_LIMITS,
    FAST,
    MESSAGES,
    OPENAI_LIMITS,
    Answer,
    Provider,
    chat_ok,
    chat_stream,
    openai_429,
    sse,
)

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


#: the moment the table's prices are read at (the tests' clocks' too)
NOON = datetime(2026, 12, 7, 12, tzinfo=timezone.utc)
#: the genai-prices table alone
TABLE = PriceBook(table=True, now=lambda: NOON)


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


def make(make_gov: MakeGov, limit: float = 10, prices: PriceBook | None = None) -> tuple[Governor, FakeClock]:
    clock = FakeClock(NOON.timestamp())
    budgets = (SpendBudget("daily", "day", limit=limit),)
    config = GovernorConfig(max_capacity=4, restart_hold=False, spend=budgets, prices=prices)
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


def test_a_call_served_at_a_tier_without_a_price_is_charged_its_reservation(
    make_gov: MakeGov, provider: Provider
) -> None:
    """The call was billed at a price the book does not know: it is charged
    the most it could cost at the tier asked for, never nothing (the Node
    client's answer too: tests/conformance/charges.json)."""
    gov, clock = make(make_gov)
    answer = chat_ok(prompt=1000, completion=500)
    answer.body["service_tier"] = "batch"  # no batch price in BOOK
    provider.script(answer)
    with governed(gov, provider) as client:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES, max_tokens=600)
    estimate = estimate_request(provider.requests[0].body, "/v1/chat/completions")
    most = BOOK.most("openai", "gpt-test", estimate.input, estimate.output)
    assert most > 0 and spent(gov, clock) == (most, 0)


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


# -- cached tokens: a stream is charged as the same response read whole -----------------------


def table_cost(provider: str, model: str, usage: Usage) -> int:
    """genai-prices' own price of ``usage``, in micro-dollars rounded up."""
    found = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model,
        provider_id=provider,
        genai_request_timestamp=NOON,
    )
    return int((found.total_price * MICROS).to_integral_value(rounding=ROUND_CEILING))


def openai_chunk(usage: Any = None, delta: dict[str, Any] | None = None, **fields: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": choices}
    return f"data: {json.dumps({**body, 'usage': usage, **fields})}\n\n"


def openai_answers(usage: dict[str, Any], **fields: Any) -> tuple[Answer, Answer]:
    """The same usage in a chat completion read whole and in a stream (include_usage's last chunk)."""
    whole = chat_ok()
    whole.body.update(model="gpt-4o", usage=usage, **fields)
    events = (
        openai_chunk(delta={"role": "assistant", "content": "hel"}, **fields),
        openai_chunk(delta={"content": "lo"}, **fields),
        openai_chunk(usage, **fields),
        "data: [DONE]\n\n",
    )
    return whole, Answer(events=events, headers=OPENAI_LIMITS)


def responses_answers(usage: dict[str, Any]) -> tuple[Answer, Answer]:
    """The same usage in a Responses API answer read whole and streamed (response.completed)."""
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-4o",
        "status": "completed",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    started = {**response, "status": "in_progress", "usage": None}
    events = (
        sse("response.created", {"type": "response.created", "sequence_number": 0, "response": started}),
        sse("response.completed", {"type": "response.completed", "sequence_number": 1, "response": response}),
    )
    return Answer(body=response, headers=OPENAI_LIMITS), Answer(events=events, headers=OPENAI_LIMITS)


def anthropic_answers(usage: dict[str, Any], delta: dict[str, Any]) -> tuple[Answer, Answer]:
    """The same usage in a message read whole and streamed: message_start with
    the input figures, message_delta with ``delta`` (the output, and the
    cumulative input figures when the API sends them)."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = (
        sse("message_start", {"type": "message_start", "message": start}),
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}},
        ),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": delta},
        ),
        sse("message_stop", {"type": "message_stop"}),
    )
    return Answer(body=message, headers=ANTHROPIC_LIMITS), Answer(events=events, headers=ANTHROPIC_LIMITS)


def charged_whole_then_streamed(gov: Governor, clock: FakeClock, call: Callable[[bool], None]) -> tuple[int, int]:
    """What the call read whole was charged, then the same call streamed."""
    call(False)
    whole, reserved = spent(gov, clock)
    assert reserved == 0
    call(True)
    total, reserved = spent(gov, clock)
    assert reserved == 0
    return whole, total - whole


OPENAI_CACHED = {
    "prompt_tokens": 3000,
    "completion_tokens": 200,
    "total_tokens": 3200,
    "prompt_tokens_details": {"cached_tokens": 2048},
}


def test_a_streamed_chat_is_charged_its_cached_tokens_as_one_read_whole(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov, prices=TABLE)
    provider.script(*openai_answers(OPENAI_CACHED))

    def call(stream: bool) -> None:
        with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
            if not stream:
                client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
                return
            options = {"stream": True, "stream_options": {"include_usage": True}}
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=MESSAGES, **options))
            assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens_details.cached_tokens == 2048

    whole, streamed = charged_whole_then_streamed(gov, clock, call)
    expected = table_cost("openai", "gpt-4o", Usage(3000, 200, cache_read_tokens=2048))
    assert streamed == whole == expected
    assert expected < table_cost("openai", "gpt-4o", Usage(3000, 200))  # the cache discount is in it


def test_a_streamed_response_is_charged_its_cached_tokens_as_one_read_whole(
    make_gov: MakeGov, provider: Provider
) -> None:
    gov, clock = make(make_gov, prices=TABLE)
    usage = {
        "input_tokens": 3000,
        "input_tokens_details": {"cached_tokens": 1024},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 3300,
    }
    provider.script(*responses_answers(usage))

    def call(stream: bool) -> None:
        with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
            if not stream:
                client.responses.create(model="gpt-4o", input="hello")
                return
            kinds = [event.type for event in client.responses.create(model="gpt-4o", input="hello", stream=True)]
            assert kinds == ["response.created", "response.completed"]

    whole, streamed = charged_whole_then_streamed(gov, clock, call)
    expected = table_cost("openai", "gpt-4o", Usage(3000, 300, cache_read_tokens=1024))
    assert streamed == whole == expected
    assert expected < table_cost("openai", "gpt-4o", Usage(3000, 300))


ANTHROPIC_CACHED = {"input_tokens": 120, "cache_creation_input_tokens": 1500, "cache_read_input_tokens": 4000}


@pytest.mark.parametrize(
    "delta",
    [
        pytest.param({"output_tokens": 250}, id="output-only"),
        pytest.param({**ANTHROPIC_CACHED, "output_tokens": 250}, id="cumulative"),
    ],
)
def test_a_streamed_message_is_charged_its_cache_reads_and_writes_as_one_read_whole(
    make_gov: MakeGov, provider: Provider, delta: dict[str, Any]
) -> None:
    gov, clock = make(make_gov, prices=TABLE)
    provider.script(*anthropic_answers({**ANTHROPIC_CACHED, "output_tokens": 250}, delta))

    def call(stream: bool) -> None:
        with anthropic_client(governor=gov, retry=FAST, base_url=provider.url, api_key="test") as client:
            if not stream:
                client.messages.create(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES)
                return
            with client.messages.stream(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES) as events:
                final = events.get_final_message()
            assert final.usage.cache_read_input_tokens == 4000 and final.usage.output_tokens == 250

    whole, streamed = charged_whole_then_streamed(gov, clock, call)
    # Anthropic counts the cache reads and writes apart from input_tokens: the priced input adds them
    usage = Usage(120 + 1500 + 4000, 250, cache_read_tokens=4000, cache_write_tokens=1500)
    expected = table_cost("anthropic", "claude-haiku-4-5", usage)
    assert streamed == whole == expected
    assert expected != table_cost("anthropic", "claude-haiku-4-5", Usage(120 + 1500 + 4000, 250))


def test_a_stream_is_charged_at_the_tier_that_served_it(make_gov: MakeGov, provider: Provider) -> None:
    gov, clock = make(make_gov, prices=BOOK)
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    provider.script(*openai_answers(usage, service_tier="flex"))  # asked for priority, served at flex

    def call(stream: bool) -> None:
        with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
            options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            answer = client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, service_tier="priority", **options
            )
            if stream:
                list(answer)  # type: ignore[call-overload]

    whole, streamed = charged_whole_then_streamed(gov, clock, call)
    assert streamed == whole == 1000 * 1 + 500 * 4  # flex's prices


def gemini_answers(usage: dict[str, Any]) -> tuple[Answer, Answer]:
    """The same usage in a generateContent answer read whole and in a stream (alt=sse: the last chunk's)."""

    def chunk(text: str, figures: dict[str, Any]) -> dict[str, Any]:
        content = {"parts": [{"text": text}], "role": "model"}
        return {"candidates": [{"content": content, "index": 0}], "usageMetadata": figures, "modelVersion": "m"}

    so_far = {"promptTokenCount": usage["promptTokenCount"], "totalTokenCount": usage["promptTokenCount"]}
    events = tuple(f"data: {json.dumps(part)}\r\n\r\n" for part in (chunk("hel", so_far), chunk("lo", usage)))
    return Answer(body=chunk("hello", usage)), Answer(events=events)


def test_a_streamed_gemini_answer_is_charged_its_cached_content_as_one_read_whole(
    make_gov: MakeGov, provider: Provider
) -> None:
    pytest.importorskip("google.genai")
    from governor.providers import gemini_client

    gov, clock = make(make_gov, prices=TABLE)
    usage = {
        "promptTokenCount": 3000,
        "cachedContentTokenCount": 2000,
        "candidatesTokenCount": 200,
        "thoughtsTokenCount": 50,
        "totalTokenCount": 3250,
    }
    provider.script(*gemini_answers(usage))

    def call(stream: bool) -> None:
        client = gemini_client(
            governor=gov, retry=FAST, api_key="test", http_options={"base_url": provider.url, "api_version": "v1"}
        )
        try:
            if not stream:
                client.models.generate_content(model="gemini-2.5-flash", contents="hello")
                return
            chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hello"))
            assert chunks[-1].usage_metadata is not None
            assert chunks[-1].usage_metadata.cached_content_token_count == 2000
        finally:
            client.close()

    whole, streamed = charged_whole_then_streamed(gov, clock, call)
    expected = table_cost("google", "gemini-2.5-flash", Usage(3000, 250, cache_read_tokens=2000))
    assert streamed == whole == expected
    assert expected < table_cost("google", "gemini-2.5-flash", Usage(3000, 250))


async def test_an_asyncio_stream_is_charged_its_cache_reads_and_writes(
    make_agov: Callable[..., AsyncGovernor], provider: Provider
) -> None:
    """The asyncio transport (the source of the sync one) settles a stream the same way."""
    clock = FakeClock(NOON.timestamp())
    config = GovernorConfig(restart_hold=False, spend=(SpendBudget("daily", "day", limit=10),), prices=TABLE)
    gov = make_agov(config, clock=clock)
    provider.script(anthropic_answers({**ANTHROPIC_CACHED, "output_tokens": 250}, {"output_tokens": 250})[1])
    async with async_anthropic_client(governor=gov, retry=FAST, base_url=provider.url, api_key="test") as client:
        async with client.messages.stream(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES) as events:
            await events.get_final_message()
    lines = read_lines(await gov.client.hgetall(gov.keys.spend), round(clock() * 1000))
    usage = Usage(120 + 1500 + 4000, 250, cache_read_tokens=4000, cache_write_tokens=1500)
    assert [(line.spent, line.reserved) for line in lines] == [(table_cost("anthropic", "claude-haiku-4-5", usage), 0)]
