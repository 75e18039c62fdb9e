"""The governed clients of every provider, through the real SDKs, against the mock provider.

Each test runs the provider's official SDK (google-genai, boto3, openai for
Azure, anthropic, litellm) over real HTTP on loopback against the mock
provider (bench/provider.py, served on a thread of its own), with
the governed client built as a user builds it, and reads what the governor
recorded back from Redis (``status()``: attempts, rate-limited, in flight,
holds, budgets). Nothing waits on a wall clock: the mock's refusals are
made certain by its settings (a requests window of 1 per 60 s, a quota of
0 per day), and the retry policy's waits are cut to milliseconds.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.provider import MockProvider, ProviderConfig
from governor import AsyncGovernor, Governor, GovernorConfig, Outcome
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError, GovernorError, GovernorUnavailable, QuotaExhausted
from governor.profiles.google import next_midnight

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM reads its bundled price list, offline
genai = pytest.importorskip("google.genai")
boto3 = pytest.importorskip("boto3")
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types as genai_types  # noqa: E402

from governor.providers import anthropic_client, azure_openai_client, gemini_client  # noqa: E402
from governor.providers.bedrock import bedrock_client  # noqa: E402

MakeGov = Callable[..., Governor]
MakeAGov = Callable[..., AsyncGovernor]
#: retries in milliseconds; a provider's hint is honoured up to 50 ms here
FAST = RetryPolicy(max_attempts=3, deadline=20.0, base=0.005, cap=0.02, max_retry_after=0.05)
MESSAGES = [{"role": "user", "content": [{"text": "hello there"}]}]


class Served:
    """A MockProvider on an event loop of its own thread, for sync SDKs and async ones alike."""

    def __init__(self, config: ProviderConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.provider = MockProvider(config)
        self.url = self.loop.run_until_complete(self.provider.start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def reset(self, config: ProviderConfig) -> None:
        self.loop.call_soon_threadsafe(self.provider.reset, config)
        deadline = time.monotonic() + 5
        while self.provider.config is not config and time.monotonic() < deadline:
            time.sleep(0.001)

    def record(self) -> dict[str, Any]:
        return asyncio.run_coroutine_threadsafe(_snapshot(self.provider), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.provider.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _snapshot(provider: MockProvider) -> dict[str, Any]:
    return provider.snapshot()["record"]  # type: ignore[no-any-return]


QUICK = {"latency_mean": 0.01, "latency_sigma": 0.0, "completion_tokens": 12, "reject_latency": 0.0}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = Served(ProviderConfig(**QUICK))
    yield server
    server.stop()


def mock(served: Served, **settings: Any) -> Served:
    served.reset(ProviderConfig(**{**QUICK, **settings}))
    return served


def counts(gov: Governor) -> tuple[int, int, int, int]:
    """(attempts, rate-limited, in flight, quota-exhausted) as Redis has them."""
    s = gov.status()
    return s.window_attempts, s.window_rate_limited, s.in_flight, s.quota_exhausted


async def acounts(gov: AsyncGovernor) -> tuple[int, int, int, int]:
    s = await gov.status()
    return s.window_attempts, s.window_rate_limited, s.in_flight, s.quota_exhausted


#: the SDK clients a test made, closed after it (their connections, or Python warns)
OPEN: list[Any] = []


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    yield
    while OPEN:
        client = OPEN.pop()
        if hasattr(client, "aio"):  # google-genai: both halves
            await client.aio.aclose()
            client.close()
        elif hasattr(client, "close"):
            client.close()
    if "litellm" in sys.modules:  # LiteLLM caches the clients it makes: close them with the test's loop
        await _close_litellm_clients()
        gc.collect()  # what LiteLLM left unclosed goes now, under the test's own warning filters


async def _close_litellm_clients() -> None:
    import inspect

    import litellm
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

    await close_litellm_async_clients()
    cache = getattr(litellm.in_memory_llm_clients_cache, "cache_dict", {})
    for handler in list(cache.values()):
        for name in ("aclose", "close"):
            method = getattr(handler, name, None)
            if callable(method):
                try:
                    done = method()
                    if inspect.isawaitable(done):
                        await done
                except Exception:  # noqa: BLE001 - closed already
                    pass
                break
    cache.clear()


def made(client: Any) -> Any:
    OPEN.append(client)
    return client


def gemini(gov: Governor | AsyncGovernor, served: Served, **options: Any) -> Any:
    return made(
        gemini_client(
            governor=gov,
            retry=options.pop("retry", FAST),
            api_key="test-key",
            http_options={"base_url": served.url},
            **options,
        )
    )


def tokens_config(**extra: Any) -> GovernorConfig:
    return GovernorConfig(max_capacity=8, tokens_per_minute=600_000, **extra)


# -- Gemini (google-genai), sync -----------------------------------------------------------------


def test_gemini_generate_content_is_reported_with_its_usage(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(tokens_config())
    client = gemini(gov, mock(served))
    reply = client.models.generate_content(
        model="gemini-2.5-flash",
        contents="hello there",
        config=genai_types.GenerateContentConfig(max_output_tokens=40),
    )
    assert reply.usage_metadata is not None and reply.usage_metadata.candidates_token_count == 12
    assert counts(gov) == (1, 0, 0, 0)
    budget = gov.status().budget("tokens")
    assert budget is not None and budget.reserved == 0  # the estimate (input + 40) settled to the usage


def test_gemini_retry_delay_in_the_body_holds_the_fleet(make_gov: MakeGov, served: Served) -> None:
    """A 429 RESOURCE_EXHAUSTED with RetryInfo.retryDelay and no headers: the
    body's hint becomes a fleet-wide hold, bounded by retry_after_cap."""
    gov = make_gov(GovernorConfig(max_capacity=8, retry_after_cap=30.0))
    once = RetryPolicy(max_attempts=1, max_retry_after=120.0)
    client = gemini(gov, mock(served, limit=0, retry_after=90.0), retry=once)
    before = time.time()
    with pytest.raises(genai_errors.ClientError) as caught:
        client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"
    status = gov.status()
    assert status.window_rate_limited == 1
    # the body named 90 s: the hold is cut to retry_after_cap
    assert status.not_before is not None and before + 29 < status.not_before <= time.time() + 30.5


def test_gemini_retry_delay_is_waited_before_the_retry(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(GovernorConfig(max_capacity=8, retry_after_cap=0.2))
    client = gemini(
        gov,
        mock(served, limit=0, retry_after=0.2),
        retry=RetryPolicy(max_attempts=2, base=0.001, cap=0.001, max_retry_after=1.0),
    )
    start = time.monotonic()
    with pytest.raises(genai_errors.ClientError):
        client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert time.monotonic() - start >= 0.2  # the second attempt came after the body's 0.2 s, not the 1 ms backoff
    assert counts(gov)[:2] == (2, 2)


def test_gemini_stream_holds_its_lease_until_the_last_chunk(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(tokens_config())
    client = gemini(gov, mock(served, completion_tokens=24))
    chunks = client.models.generate_content_stream(model="gemini-2.5-flash", contents="stream please")
    first = next(iter(chunks))
    assert first.text
    assert gov.status().in_flight == 1  # the lease lives while the stream does
    rest = list(chunks)
    assert rest[-1].usage_metadata is not None and rest[-1].usage_metadata.candidates_token_count == 24
    assert counts(gov) == (1, 0, 0, 0)


def test_gemini_per_day_quota_is_quota_exhaustion_until_midnight_pacific(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4))
    client = made(genai.Client(api_key="k", http_options={"base_url": mock(served, daily_quota=0).url}))
    with pytest.raises(QuotaExhausted) as caught:
        gov.call(client.models.generate_content, model="gemini-2.5-flash", contents="hello", retry=FAST)
    until = caught.value.until
    assert until is not None and time.time() < until <= time.time() + 86400 + 3600
    assert time.strftime("%Y-%m-%d", time.gmtime(until)) in str(caught.value)
    assert counts(gov)[3] == 1  # recorded for operators, never retried


def test_gemini_per_day_quota_reset_time_is_in_status(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4))
    assert gov.status().quota_until is None  # none reported yet
    client = gemini(gov, mock(served, daily_quota=0))
    before = time.time()
    with pytest.raises(genai_errors.ClientError, match="PerDay"):  # the SDK's own error, as ungoverned
        client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    status = gov.status()
    assert status.quota_exhausted == 1  # reported once: quota exhaustion is never retried
    assert status.window_attempts == 0  # nor a throttle: the policy never sees it
    assert status.quota_until == pytest.approx(next_midnight(before), abs=1.0)  # when the quota comes back


def test_gemini_client_refuses_sdk_retries(make_gov: MakeGov) -> None:
    with pytest.raises(ConfigError, match="retry_options"):
        gemini_client(api_key="k", http_options={"retry_options": {"attempts": 3}})


# -- Gemini, asyncio -----------------------------------------------------------------------------


async def test_gemini_async_generate_and_stream(make_agov: MakeAGov, served: Served) -> None:
    gov = make_agov(tokens_config())
    client = gemini(gov, mock(served))
    reply = await client.aio.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert reply.text
    stream = await client.aio.models.generate_content_stream(model="gemini-2.5-flash", contents="hello")
    seen = [chunk async for chunk in stream]
    assert seen[-1].usage_metadata is not None and seen[-1].usage_metadata.candidates_token_count == 12
    assert await acounts(gov) == (2, 0, 0, 0)


async def test_gemini_async_retries_a_throttle(make_agov: MakeAGov, served: Served) -> None:
    gov = make_agov(GovernorConfig(max_capacity=4, retry_after_cap=0.05))
    client = gemini(gov, mock(served, rpm=1, rate_period=600.0))
    await client.aio.models.generate_content(model="gemini-2.5-flash", contents="first")
    with pytest.raises(genai_errors.ClientError):
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents="second")
    attempts, limited, in_flight, _ = await acounts(gov)
    assert (attempts, limited, in_flight) == (4, 3, 0)  # one success, three refused attempts (max_attempts=3)


# -- Vertex AI (google-genai with vertexai=True) ---------------------------------------------------


def vertex(gov: Governor | AsyncGovernor, served: Served, **options: Any) -> Any:
    """The governed client on Vertex AI's paths (/v1beta1/projects/.../publishers/google/models/...),
    with an access token that needs no refresh: the SDK sends it as is, the mock takes any."""
    from google.oauth2.credentials import Credentials

    return made(
        gemini_client(
            governor=gov,
            retry=options.pop("retry", FAST),
            vertexai=True,
            credentials=Credentials(token="test-token"),
            project="test-project",
            location="us-central1",
            http_options={"base_url": served.url},
            **options,
        )
    )


def test_vertex_generate_and_stream_are_reported_with_their_usage(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(tokens_config())
    client = vertex(gov, mock(served, completion_tokens=24))
    reply = client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert reply.usage_metadata is not None and reply.usage_metadata.candidates_token_count == 24
    chunks = client.models.generate_content_stream(model="gemini-2.5-flash", contents="stream please")
    assert next(iter(chunks)).text
    assert gov.status().in_flight == 1  # the lease lives while the stream does
    rest = list(chunks)
    assert rest[-1].usage_metadata is not None and rest[-1].usage_metadata.candidates_token_count == 24
    assert counts(gov) == (2, 0, 0, 0)
    budget = gov.status().budget("tokens")
    assert budget is not None and budget.reserved == 0  # both reservations settled by the usage


def test_vertex_resource_exhausted_is_retried_by_the_governor(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, retry_after_cap=0.05))
    client = vertex(gov, mock(served, rpm=1, rate_period=600.0))
    client.models.generate_content(model="gemini-2.5-flash", contents="first")
    with pytest.raises(genai_errors.ClientError) as caught:
        client.models.generate_content(model="gemini-2.5-flash", contents="second")
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"
    assert counts(gov) == (4, 3, 0, 0)  # one success, three refused attempts (max_attempts=3)


async def test_vertex_async_generate_is_reported(make_agov: MakeAGov, served: Served) -> None:
    gov = make_agov(tokens_config())
    client = vertex(gov, mock(served))
    reply = await client.aio.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert reply.usage_metadata is not None and reply.usage_metadata.candidates_token_count == 12
    assert await acounts(gov) == (1, 0, 0, 0)


# -- Bedrock (boto3), sync ---------------------------------------------------------------------------


def bedrock(gov: Governor | None, served: Served, **options: Any) -> Any:
    return made(
        bedrock_client(
            governor=gov,
            endpoint_url=served.url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            **({"retry": FAST} if gov is not None else {}),
            **options,
        )
    )


def test_bedrock_converse_is_reported_with_burndown_usage(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(tokens_config())
    client = bedrock(gov, mock(served))
    reply = client.converse(
        modelId="anthropic.claude-sonnet-4-20250514-v1:0", messages=MESSAGES, inferenceConfig={"maxTokens": 64}
    )
    assert reply["usage"]["outputTokens"] == 12
    assert counts(gov) == (1, 0, 0, 0)
    budget = gov.status().budget("tokens")
    assert budget is not None and budget.reserved == 0


def test_bedrock_throttling_is_retried_by_the_governor_alone(make_gov: MakeGov, served: Served) -> None:
    """boto3 makes one attempt per governor attempt: the provider sees exactly
    max_attempts requests for a throttled call, each reported."""
    gov = make_gov(GovernorConfig(max_capacity=4))
    server = mock(served, rpm=1, rate_period=600.0)
    client = bedrock(gov, server)
    client.converse(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)
    with pytest.raises(client.exceptions.ThrottlingException) as caught:
        client.converse(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] == 0
    assert counts(gov) == (4, 3, 0, 0)
    assert len(server.record()["responses"]) == 4


def test_bedrock_converse_stream_reports_at_the_metadata_event(make_gov: MakeGov, served: Served) -> None:
    gov = make_gov(tokens_config())
    client = bedrock(gov, mock(served, completion_tokens=20))
    reply = client.converse_stream(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)
    events = iter(reply["stream"])
    assert "messageStart" in next(events)
    assert gov.status().in_flight == 1
    rest = list(events)
    assert rest[-1]["metadata"]["usage"]["outputTokens"] == 20
    assert counts(gov) == (1, 0, 0, 0)


def test_an_overload_inside_a_bedrock_stream_is_no_load_signal(make_gov: MakeGov, served: Served) -> None:
    """A ``serviceUnavailableException`` frame cutting a ``converse_stream``:
    the provider's capacity, not this fleet's load (the Bedrock profile's
    ``load_signal``). Under the adaptive policy it is an attempt of the
    window, not one of its refusals, and cuts nothing."""
    gov = make_gov(GovernorConfig(max_capacity=32, window=2.0))
    before = gov.status().capacity
    client = bedrock(gov, mock(served, stream_error_rate=1.0))
    reply = client.converse_stream(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)
    with pytest.raises(Exception, match=r"(?i)unavailable"):
        list(reply["stream"])
    reply["stream"].close()  # botocore raises at the frame; the stream reports when it is let go of
    assert counts(gov) == (1, 0, 0, 0)
    assert gov.status().capacity == before


def test_an_overload_inside_an_anthropic_stream_is_no_load_signal(make_gov: MakeGov, served: Served) -> None:
    """The governed Anthropic client's stream cut by an ``overloaded_error``
    event (the governed transport reports it when the stream ends): no load
    signal, an attempt of the window, no cut."""
    import anthropic

    gov = make_gov(GovernorConfig(max_capacity=32, window=2.0))
    before = gov.status().capacity
    client = made(anthropic_client(governor=gov, api_key="k", base_url=mock(served, stream_error_rate=1.0).url))
    stream = client.messages.create(
        model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(anthropic.APIStatusError, match=r"(?i)overloaded"), stream:
        list(stream)
    assert counts(gov) == (1, 0, 0, 0)
    assert gov.status().capacity == before


def test_bedrock_refuses_boto3_retries() -> None:
    from botocore.config import Config

    with pytest.raises(ConfigError, match="retries"):
        bedrock_client(region_name="us-east-1", config=Config(retries={"max_attempts": 5}))


# -- Azure OpenAI (openai) ---------------------------------------------------------------------------


def test_azure_odd_headers_are_no_limit(make_gov: MakeGov, served: Served) -> None:
    """Azure's "x-ratelimit-limit-requests: 0" and "remaining: -1" are no figures: no budget of zero is learnt."""
    gov = make_gov(GovernorConfig(max_capacity=4))
    server = mock(served)
    client = made(azure_openai_client(governor=gov, api_key="k", api_version="2024-10-21", azure_endpoint=server.url))
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    status = gov.status()
    assert status.budget("requests") is None
    assert counts(gov) == (3, 0, 0, 0)


def test_azure_x_ms_retry_after_ms_holds_the_fleet(make_gov: MakeGov, served: Served) -> None:
    import openai

    gov = make_gov(GovernorConfig(max_capacity=4, retry_after_cap=30.0))
    server = mock(served, limit=0, retry_after=20.0)
    client = made(
        azure_openai_client(
            governor=gov,
            retry=RetryPolicy(max_attempts=1, max_retry_after=30.0),
            api_key="k",
            api_version="2024-10-21",
            azure_endpoint=server.url,
        )
    )
    start = time.time()
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.response.headers["x-ms-retry-after-ms"] == "20000"
    held = gov.status().not_before
    assert held is not None and start + 19 < held <= time.time() + 20.5


# -- governor errors keep their type through every client -----------------------------------------

#: a Redis that is not there: every acquire fails with GovernorUnavailable in bounded time
NOWHERE = "redis://127.0.0.1:9/0"


@pytest.fixture
def down() -> Iterator[Governor]:
    gov = Governor.from_url(NOWHERE, "down", GovernorConfig(redis_timeout=0.5))
    yield gov
    gov.close()


@pytest.fixture
async def adown() -> Any:
    gov = AsyncGovernor.from_url(NOWHERE, "down", GovernorConfig(redis_timeout=0.5))
    yield gov
    await gov.aclose()


def test_anthropic_client_raises_the_governor_error_not_a_connection_error(down: Governor, served: Served) -> None:
    import anthropic

    client = made(anthropic_client(governor=down, api_key="k", base_url=served.url))
    with pytest.raises(GovernorUnavailable) as caught:
        client.messages.create(model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert isinstance(caught.value, anthropic.AnthropicError)  # a twin of both classes
    assert not isinstance(caught.value, anthropic.APIConnectionError)
    with (
        pytest.raises(GovernorUnavailable),
        client.messages.stream(model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        stream.until_done()


async def test_async_anthropic_client_raises_the_governor_error(adown: AsyncGovernor, served: Served) -> None:
    from governor.providers import async_anthropic_client

    async with async_anthropic_client(governor=adown, api_key="k", base_url=served.url) as client:
        with pytest.raises(GovernorUnavailable):
            await client.messages.create(model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def test_gemini_client_raises_the_governor_error(down: Governor, served: Served) -> None:
    client = gemini(down, served)
    with pytest.raises(GovernorUnavailable):
        client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    with pytest.raises(GovernorUnavailable):
        list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))


async def test_async_gemini_client_raises_the_governor_error(adown: AsyncGovernor, served: Served) -> None:
    client = gemini(adown, served)
    with pytest.raises(GovernorUnavailable):
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    with pytest.raises(GovernorUnavailable):
        stream = await client.aio.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
        async for _ in stream:
            pass


def test_bedrock_client_raises_the_governor_error(down: Governor, served: Served) -> None:
    client = bedrock(down, served)
    with pytest.raises(GovernorUnavailable):
        client.converse(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)
    with pytest.raises(GovernorUnavailable):
        client.converse_stream(modelId="amazon.nova-lite-v1:0", messages=MESSAGES)


def test_azure_client_raises_the_governor_error(down: Governor, served: Served) -> None:
    client = made(azure_openai_client(governor=down, api_key="k", api_version="2024-10-21", azure_endpoint=served.url))
    with pytest.raises(GovernorUnavailable):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


# -- LiteLLM ---------------------------------------------------------------------------------------------

#: LiteLLM's stream wrapper warns from inside (pydantic deprecations, TypedDict qualifiers) and
#: maps what the suite's "error" filter makes of them into stream errors; it keeps HTTP clients
#: per event loop that outlive the loop (all inside LiteLLM, not here)
LITELLM_WARNINGS = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def LITELLM(test: Any) -> Any:
    for mark in LITELLM_WARNINGS:
        test = mark(test)
    return test


HI = [{"role": "user", "content": "hi"}]


def openai_shape(served: Served) -> dict[str, Any]:
    return {"model": "openai/gpt-4o", "api_base": served.url + "/v1", "api_key": "k", "messages": HI}


def anthropic_shape(served: Served) -> dict[str, Any]:
    return {
        "model": "anthropic/claude-sonnet-4",
        "api_base": served.url,
        "api_key": "k",
        "messages": HI,
        "max_tokens": 32,
    }


@LITELLM
def test_litellm_completion_is_reported_with_its_usage(make_gov: MakeGov, served: Served) -> None:
    from governor.providers.litellm import litellm_client

    gov = make_gov(tokens_config())
    llm = litellm_client(gov, retry=FAST)
    reply = llm.completion(**openai_shape(mock(served)))
    assert reply.usage.completion_tokens == 12
    reply = llm.completion(**anthropic_shape(served))
    assert reply.usage.completion_tokens == 12
    assert counts(gov) == (2, 0, 0, 0)
    budget = gov.status().budget("tokens")
    assert budget is not None and budget.reserved == 0


@LITELLM
def test_litellm_throttle_is_retried_by_the_governor_after_the_body_hint(make_gov: MakeGov, served: Served) -> None:
    """The mock sends no Retry-After here, only OpenAI's "Please try again in ..." in the message:
    LiteLLM's RateLimitError keeps it, and the report holds the fleet for it."""
    import litellm

    from governor.providers.litellm import litellm_client

    gov = make_gov(GovernorConfig(max_capacity=4, retry_after_cap=30.0))
    llm = litellm_client(gov, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0))
    server = mock(served, rpm=1, rate_period=600.0, retry_after="none")
    llm.completion(**openai_shape(server))  # uses up the minute's (here: ten minutes') one request
    start = time.time()
    with pytest.raises(litellm.RateLimitError) as caught:
        llm.completion(**openai_shape(server))
    assert "Please try again in 9m59" in str(caught.value)
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited) == (2, 1)
    # the message's ~600 s, cut to retry_after_cap
    assert status.not_before is not None and start + 29 < status.not_before <= time.time() + 30.5


@LITELLM
async def test_litellm_acompletion_stream_holds_its_lease_until_the_end(make_agov: MakeAGov, served: Served) -> None:
    from governor.providers.litellm import litellm_client

    gov = make_agov(tokens_config())
    llm = litellm_client(gov, retry=FAST)
    for shape in (openai_shape(mock(served, completion_tokens=24)), anthropic_shape(served)):
        stream = await llm.acompletion(**shape, stream=True)
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 1:
                assert (await gov.status()).in_flight == 1
        assert (await gov.status()).in_flight == 0
    assert await acounts(gov) == (2, 0, 0, 0)


@LITELLM
async def test_litellm_router_calls_are_governed_with_no_retries_of_its_own(
    make_agov: MakeAGov, served: Served
) -> None:
    """A litellm.Router (its own retries at their default) through the same wrapper: each call
    a lease, each attempt the provider sees is one the governor counted, the usage reported."""
    import litellm

    from governor.providers.litellm import litellm_client

    server = mock(served, rpm=1, rate_period=600.0)
    deployment = {"model": "openai/gpt-4o", "api_base": server.url + "/v1", "api_key": "k"}
    router = litellm.Router(model_list=[{"model_name": "fleet", "litellm_params": deployment}])
    gov = make_agov(tokens_config(retry_after_cap=0.05))
    llm = litellm_client(gov, retry=FAST, router=router)
    reply = await llm.acompletion(model="fleet", messages=HI)
    assert reply.usage.completion_tokens == 12
    assert await acounts(gov) == (1, 0, 0, 0)
    with pytest.raises(litellm.RateLimitError):
        await llm.acompletion(model="fleet", messages=HI)
    assert await acounts(gov) == (4, 3, 0, 0)  # one success, three refused attempts (max_attempts=3)
    answers = [kind for _, _, kind in served.record()["responses"]]
    assert (len(answers), answers.count("rpm")) == (4, 3)  # the router retried nothing behind the governor
    budget = (await gov.status()).budget("tokens")
    assert budget is not None and budget.reserved == 0
    with pytest.raises(ConfigError, match=r"litellm\.Router"):
        litellm_client(gov, router=object())


@LITELLM
def test_litellm_refuses_its_own_retries(make_gov: MakeGov) -> None:
    from governor.providers.litellm import litellm_client

    with pytest.raises(ConfigError, match="num_retries"):
        litellm_client(make_gov()).completion(model="openai/gpt-4o", messages=HI, num_retries=3)


@LITELLM
async def test_litellm_proxy_hook_leases_each_proxied_call(make_agov: MakeAGov, served: Served) -> None:
    """The hook as the proxy calls it: pre-call (a lease), the call, success or failure (the report)."""
    import litellm

    from governor.providers.litellm import LEASE_KEY, governor_hook

    gov = make_agov(tokens_config())
    hook = governor_hook(gov)
    assert isinstance(hook, litellm.integrations.custom_logger.CustomLogger)
    data = await hook.async_pre_call_hook(None, None, {**openai_shape(mock(served)), "metadata": {}}, "completion")
    assert LEASE_KEY in data["metadata"] and (await gov.status()).in_flight == 1
    arguments = {k: v for k, v in data.items() if k != "metadata"}
    response = await litellm.acompletion(**arguments, max_retries=0)
    await hook.async_post_call_success_hook(data, None, response)
    assert await acounts(gov) == (1, 0, 0, 0)
    data = await hook.async_pre_call_hook(
        None, None, {**openai_shape(mock(served, limit=0)), "metadata": {}}, "completion"
    )
    with pytest.raises(litellm.RateLimitError) as caught:
        await litellm.acompletion(**{k: v for k, v in data.items() if k != "metadata"}, max_retries=0)
    await hook.async_post_call_failure_hook(data, caught.value, None)
    assert await acounts(gov) == (2, 1, 0, 0)


def test_the_outcome_enum_is_the_governor_s() -> None:
    assert Outcome.QUOTA_EXHAUSTED.value == "q"
    assert issubclass(AcquireTimeout, GovernorError)
