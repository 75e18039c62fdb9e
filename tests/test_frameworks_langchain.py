"""LangChain under the fleet's limit (governor/frameworks/langchain.py), with the real packages.

LangChain's ChatOpenAI and ChatAnthropic, built by the adapter, call the
benchmark's mock provider (bench/provider.py) over loopback HTTP under a
governor on a real Redis. The mock is the witness of what reached the
provider: its record counts every attempt and the most requests it served
at once. Refusals are made certain by the mock's settings (a limit of 0),
never by waiting on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from tests.support.governing import ServedMock, run_agents
from tests.support.servers import wait_until

pytest.importorskip("langchain_openai")
pytest.importorskip("langchain_anthropic")
import openai
from langchain_openai import ChatOpenAI

from governor.frameworks.langchain import GovernorRateLimiter, chat_anthropic, chat_openai

#: a fixed limit of 3, a provider's hint held up to 30 s
CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)


@pytest.fixture(scope="module")
def mock() -> Iterator[ServedMock]:
    served = ServedMock()
    yield served
    served.stop()


@pytest.fixture
def gov(redis_url: str, name: str, mock: ServedMock) -> Iterator[Governor]:
    mock.reset()
    governor = Governor.from_url(redis_url, name, CONFIG)
    governor.status()
    yield governor
    governor.close()


M = TypeVar("M")
#: the models a test made, their SDK clients closed after it (their connections, or Python warns)
OPEN: list[Any] = []


def made(model: M) -> M:
    OPEN.append(model)
    return model


@pytest.fixture(autouse=True)
async def close_models() -> AsyncIterator[None]:
    yield
    while OPEN:
        model = OPEN.pop()
        for sync, asynchronous in (("root_client", "root_async_client"), ("_client", "_async_client")):
            if getattr(model, sync, None) is not None:
                getattr(model, sync).close()
            if getattr(model, asynchronous, None) is not None:
                await getattr(model, asynchronous).close()


def openai_options(mock: ServedMock) -> dict[str, str]:
    return {"model": "gpt-4o-mini", "base_url": f"{mock.url}/v1", "api_key": "sk-test"}


@pytest.mark.timeout(300)  # worker processes import the framework: slow on a busy machine
def test_agents_in_two_processes_share_one_limit(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """2 processes x 4 LangChain agents x 3 calls against a limit of 3: the
    provider never serves more than 3 at once, and sees each call once."""
    mock.reset(latency_mean=0.05)
    results = run_agents("langchain", redis_url, name, mock.url, agents=4, calls=3, capacity=CAPACITY)
    assert [r["errors"] for r in results] == [[], []]
    assert sum(r["done"] for r in results) == 24
    record = mock.record()
    assert 2 <= record["peak_served"] <= CAPACITY
    assert mock.attempts() == 24
    status = gov.status()
    assert (status.window_attempts, status.in_flight) == (24, 0)


def test_a_429_holds_every_agent(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    mock.reset(limit=0, retry_after=20.0)
    llm = made(chat_openai(gov, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0), **openai_options(mock)))
    with pytest.raises(openai.RateLimitError):
        llm.invoke("hello there")
    held = gov.status().not_before
    assert held is not None
    other = Governor.from_url(redis_url, name, CONFIG)  # another agent, another process's governor
    try:
        with pytest.raises(AcquireTimeout):
            GovernorRateLimiter(other, timeout=0.2).acquire()
    finally:
        other.close()
    assert mock.attempts() == 1


async def test_langchain_makes_no_retries_of_its_own(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    """Every 429 is answered with a short hint: the governor's 3 attempts
    are exactly what reaches the provider (LangChain's default is 2 retries
    of each)."""
    mock.reset(limit=0, retry_after=0.01)
    fast = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    agov = AsyncGovernor.from_url(redis_url, name, fast)
    try:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        llm = made(chat_openai(async_governor=agov, retry=retry, **openai_options(mock)))
        with pytest.raises(openai.RateLimitError):
            await llm.ainvoke("hello there")
    finally:
        await agov.aclose()
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


def test_chat_anthropic_streams_under_its_lease(gov: Governor, mock: ServedMock) -> None:
    mock.reset(per_token_latency=0.05, stream_chunk_tokens=1)
    llm = made(chat_anthropic(gov, model="claude-sonnet-4-5", base_url=mock.url, api_key="sk-test", max_tokens=64))
    chunks = llm.stream("hello there")
    first = next(chunks)
    assert first is not None
    assert gov.status().in_flight == 1
    rest = list(chunks)
    assert rest
    wait_until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited) == (1, 0)
    assert mock.attempts() == 1


async def test_chat_anthropic_async(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    agov = AsyncGovernor.from_url(redis_url, name, CONFIG)
    try:
        llm = made(chat_anthropic(async_governor=agov, model="claude-sonnet-4-5", base_url=mock.url, api_key="sk-test"))
        replies = await asyncio.gather(*(llm.ainvoke("hello there") for _ in range(5)))
    finally:
        await agov.aclose()
    assert all(r.usage_metadata["output_tokens"] == 12 for r in replies)
    assert gov.status().window_attempts == 5


def test_the_rate_limiter_gates_any_chat_model(gov: Governor, mock: ServedMock) -> None:
    """A ChatOpenAI of the user's own, gated by the limiter: a paused fleet
    stops it before anything reaches the provider."""
    llm = made(ChatOpenAI(max_retries=0, rate_limiter=GovernorRateLimiter(gov, timeout=0.2), **openai_options(mock)))
    llm.invoke("hello there")
    assert mock.attempts() == 1
    gov.pause("maintenance")
    try:
        with pytest.raises(AcquireTimeout):
            llm.invoke("hello there")
        assert GovernorRateLimiter(gov).acquire(blocking=False) is False
    finally:
        gov.resume()
    assert mock.attempts() == 1
    assert gov.status().in_flight == 0


def test_the_adapters_refuse_what_would_bypass_the_governor(gov: Governor) -> None:
    with pytest.raises(ConfigError, match="governor"):
        chat_openai(model="gpt-4o-mini", api_key="k")
    with pytest.raises(ConfigError, match="max_retries"):
        chat_openai(gov, model="gpt-4o-mini", api_key="k", max_retries=2)
    with pytest.raises(ConfigError, match="AsyncGovernor"):
        chat_anthropic(async_governor=gov, model="claude-sonnet-4-5", api_key="k")
    with pytest.raises(ConfigError, match="no-such-class"):
        GovernorRateLimiter(gov, priority="no-such-class")
