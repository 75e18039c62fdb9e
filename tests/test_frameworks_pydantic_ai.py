"""PydanticAI under the fleet's limit (governor/frameworks/pydantic_ai.py), with the real package.

PydanticAI agents on the adapter's models call the benchmark's mock
provider (bench/provider.py) over loopback HTTP under a governor on a real
Redis; the mock's record is the witness of what reached the provider
(every attempt, the most requests served at once). Refusals are made
certain by the mock's settings, never by waiting on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from governor.providers import async_openai_client
from tests.support.governing import ServedMock, run_agents
from tests.support.servers import until

pytest.importorskip("pydantic_ai")
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.concurrency import ConcurrencyLimitedModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from governor.frameworks.pydantic_ai import GovernorConcurrencyLimiter, anthropic_model, openai_model

CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)


@pytest.fixture(scope="module")
def mock() -> Iterator[ServedMock]:
    served = ServedMock()
    yield served
    served.stop()


@pytest.fixture
def gov(redis_url: str, name: str, mock: ServedMock) -> Iterator[Governor]:
    """The governor's state, made with CONFIG; Redis's answers read back through it."""
    mock.reset()
    governor = Governor.from_url(redis_url, name, CONFIG)
    governor.status()
    yield governor
    governor.close()


@pytest.fixture
async def agov(redis_url: str, name: str, gov: Governor) -> AsyncIterator[AsyncGovernor]:
    governor = AsyncGovernor.from_url(redis_url, name, CONFIG)
    yield governor
    await governor.aclose()


#: the models a test made, their SDK clients closed after it (their connections, or Python warns)
OPEN: list[Any] = []


def made(model: Any) -> Any:
    OPEN.append(model)
    return model


@pytest.fixture(autouse=True)
async def close_models() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().client.close()


def model(agov: AsyncGovernor, mock: ServedMock, **options: Any) -> Any:
    return made(openai_model(agov, "gpt-4o-mini", base_url=f"{mock.url}/v1", api_key="sk-test", **options))


@pytest.mark.timeout(300)  # worker processes import the framework: slow on a busy machine
async def test_agents_in_two_processes_share_one_limit(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    mock.reset(latency_mean=0.05)
    results = await asyncio.to_thread(
        run_agents, "pydantic_ai", redis_url, name, mock.url, agents=4, calls=3, capacity=CAPACITY
    )
    assert [r["errors"] for r in results] == [[], []]
    assert sum(r["done"] for r in results) == 24
    assert 2 <= mock.record()["peak_served"] <= CAPACITY
    assert mock.attempts() == 24
    status = gov.status()
    assert (status.window_attempts, status.in_flight) == (24, 0)


async def test_a_429_holds_every_agent(
    redis_url: str, name: str, gov: Governor, agov: AsyncGovernor, mock: ServedMock
) -> None:
    mock.reset(limit=0, retry_after=20.0)
    agent = Agent(model(agov, mock, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0)))
    with pytest.raises(ModelHTTPError) as caught:
        await agent.run("hello there")
    assert caught.value.status_code == 429
    assert gov.status().not_before is not None
    other = AsyncGovernor.from_url(redis_url, name, CONFIG)  # another agent's, another process's
    try:
        with pytest.raises(AcquireTimeout):
            await GovernorConcurrencyLimiter(other, timeout=0.2).acquire("model:gpt-4o-mini")
    finally:
        await other.aclose()
    assert mock.attempts() == 1


async def test_pydantic_ai_makes_no_retries_of_its_own(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    mock.reset(limit=0, retry_after=0.01)
    fast = AsyncGovernor.from_url(
        redis_url, name, GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    )
    try:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        with pytest.raises(ModelHTTPError):
            await Agent(model(fast, mock, retry=retry)).run("hello there")
    finally:
        await fast.aclose()
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


async def test_a_streamed_run_holds_its_lease_to_the_end(gov: Governor, agov: AsyncGovernor, mock: ServedMock) -> None:
    mock.reset(per_token_latency=0.05, stream_chunk_tokens=1)
    agent = Agent(model(agov, mock))
    async with agent.run_stream("hello there") as result:
        pieces = result.stream_text(delta=True)
        first = await pieces.__anext__()
        assert first
        assert gov.status().in_flight == 1
        rest = [piece async for piece in pieces]
    assert rest
    await until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert gov.status().window_attempts == 1


async def test_anthropic_model(gov: Governor, agov: AsyncGovernor, mock: ServedMock) -> None:
    agent = Agent(made(anthropic_model(agov, "claude-sonnet-5-5", base_url=mock.url, api_key="sk-test")))
    results = await asyncio.gather(*(agent.run("hello there") for _ in range(4)))
    assert all(r.output for r in results)
    assert gov.status().window_attempts == 4


async def test_the_limiter_caps_a_model_across_the_fleet(redis_url: str, mock: ServedMock) -> None:
    """ConcurrencyLimitedModel over an ungoverned model: the limiter's governor
    (capacity 2) is the only cap; the provider never serves more than 2."""
    mock.reset(latency_mean=0.05)
    runs = AsyncGovernor.from_url(redis_url, "runs-" + mock.url[-5:], GovernorConfig(max_capacity=2, policy="fixed"))
    try:
        limiter = GovernorConcurrencyLimiter(runs)
        plain = made(
            OpenAIChatModel(
                "gpt-4o-mini",
                provider=OpenAIProvider(
                    openai_client=async_openai_client(base_url=f"{mock.url}/v1", api_key="sk-test")
                ),
            )
        )
        agent = Agent(ConcurrencyLimitedModel(plain, limiter))
        await asyncio.gather(*(agent.run("hello there") for _ in range(8)))
        assert limiter.held == 0
        await until(lambda: _in_flight(runs), 5, what="the limiter's leases released")
    finally:
        await runs.aclose()
    record = mock.record()
    assert record["accepted"] == 8
    assert 1 <= record["peak_served"] <= 2


async def test_a_limited_governed_model_takes_one_lease_per_call(
    gov: Governor, agov: AsyncGovernor, mock: ServedMock
) -> None:
    """The limiter and the model on one governor: the model call runs on the
    limiter's lease and reports on it. Were it to take a lease of its own,
    the limiter's CAPACITY leases would leave it none: every run would wait
    for ever."""
    mock.reset(latency_mean=0.05)
    limiter = GovernorConcurrencyLimiter(agov)
    async with limiter:
        agent = Agent(ConcurrencyLimitedModel(model(agov, mock), limiter))
        results = await asyncio.wait_for(asyncio.gather(*(agent.run("hello there") for _ in range(8))), 60)
    assert all(r.output for r in results)
    assert limiter.held == 0
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited, status.in_flight) == (8, 0, 0)  # 8 outcomes
    record = mock.record()
    assert record["accepted"] == 8
    assert 2 <= record["peak_served"] <= CAPACITY


async def test_a_limited_stream_holds_one_lease_to_its_end(
    gov: Governor, agov: AsyncGovernor, mock: ServedMock
) -> None:
    mock.reset(per_token_latency=0.05, stream_chunk_tokens=1)
    limiter = GovernorConcurrencyLimiter(agov)
    async with limiter:
        agent = Agent(ConcurrencyLimitedModel(model(agov, mock), limiter))
        async with agent.run_stream("hello there") as result:
            pieces = result.stream_text(delta=True)
            assert await pieces.__anext__()
            assert gov.status().in_flight == 1  # the limiter's lease is the call's
            rest = [piece async for piece in pieces]
    assert rest
    await until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert gov.status().window_attempts == 1
    assert limiter.held == 0


async def test_a_429_on_the_limiters_lease_holds_the_fleet(
    redis_url: str, name: str, gov: Governor, agov: AsyncGovernor, mock: ServedMock
) -> None:
    mock.reset(limit=0, retry_after=20.0)
    limiter = GovernorConcurrencyLimiter(agov)
    limited = ConcurrencyLimitedModel(
        model(agov, mock, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0)), limiter
    )
    async with limiter:
        with pytest.raises(ModelHTTPError) as caught:
            await Agent(limited).run("hello there")
    assert caught.value.status_code == 429
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited, status.in_flight) == (1, 1, 0)
    assert status.not_before is not None  # held: every agent of the fleet waits
    other = AsyncGovernor.from_url(redis_url, name, CONFIG)
    try:
        with pytest.raises(AcquireTimeout):
            await GovernorConcurrencyLimiter(other, timeout=0.2).acquire("model:gpt-4o-mini")
    finally:
        await other.aclose()
    assert mock.attempts() == 1
    assert limiter.held == 0


async def test_a_release_leaves_a_carried_lease_to_its_call(
    gov: Governor, agov: AsyncGovernor, mock: ServedMock
) -> None:
    """The call took the limiter's lease: the limiter's release gives back
    nothing while the call's stream still runs; the stream's end does."""
    mock.reset(per_token_latency=0.05, stream_chunk_tokens=1)
    limiter = GovernorConcurrencyLimiter(agov)
    client = async_openai_client(agov, base_url=f"{mock.url}/v1", api_key="sk-test")
    try:
        await limiter.acquire("model:gpt-4o-mini")
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert await stream.__anext__() is not None
        limiter.release()
        await limiter.drain()
        assert gov.status().in_flight == 1  # still the call's
        rest = [chunk async for chunk in stream]
    finally:
        await client.close()
    assert rest
    await until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert gov.status().window_attempts == 1


async def _in_flight(gov: AsyncGovernor) -> bool:
    return (await gov.status()).in_flight == 0


def test_release_without_acquire_is_refused(gov: Governor) -> None:
    with pytest.raises(ConfigError, match="AsyncGovernor"):
        GovernorConcurrencyLimiter(gov)  # type: ignore[arg-type]
