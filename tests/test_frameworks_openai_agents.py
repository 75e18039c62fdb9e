"""The OpenAI Agents SDK under the fleet's limit (governor/frameworks/openai_agents.py).

The real ``openai-agents`` package runs agents whose model provider (or
default client) is the governed one, against the benchmark's mock provider
(bench/provider.py, Chat Completions) under a governor on a real Redis;
the mock's record is the witness of what reached the provider. Tracing is
off (nothing leaves the machine). Refusals are made certain by the mock's
settings, never by waiting on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout
from tests.support.governing import ServedMock, run_agents
from tests.support.servers import until

pytest.importorskip("agents")
import openai
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.models import _openai_shared

from governor.frameworks.openai_agents import model_provider, use_governed_client

CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)
AGENT = Agent(name="helper", instructions="Be brief.", model="gpt-4o-mini")
set_tracing_disabled(True)


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


@pytest.fixture
async def agov(redis_url: str, name: str, gov: Governor) -> AsyncIterator[AsyncGovernor]:
    governor = AsyncGovernor.from_url(redis_url, name, CONFIG)
    yield governor
    await governor.aclose()


#: the providers a test made, their clients closed after it (their connections, or Python warns)
OPEN: list[Any] = []


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().close()


def run_config(agov: AsyncGovernor, mock: ServedMock, **options: Any) -> RunConfig:
    provider = model_provider(agov, use_responses=False, base_url=f"{mock.url}/v1", api_key="k", **options)
    OPEN.append(provider._client)
    return RunConfig(model_provider=provider)


@pytest.mark.timeout(300)  # worker processes import the framework: slow on a busy machine
async def test_agents_in_two_processes_share_one_limit(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    mock.reset(latency_mean=0.05)
    results = await asyncio.to_thread(
        run_agents, "openai_agents", redis_url, name, mock.url, agents=4, calls=3, capacity=CAPACITY
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
    config = run_config(agov, mock, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0))
    with pytest.raises(openai.RateLimitError):
        await Runner.run(AGENT, "hello there", run_config=config)
    assert gov.status().not_before is not None
    other = AsyncGovernor.from_url(redis_url, name, CONFIG)  # another agent's, another process's
    try:
        with pytest.raises(AcquireTimeout):
            await other.acquire(timeout=0.2)
    finally:
        await other.aclose()
    assert mock.attempts() == 1


async def test_the_sdk_makes_no_retries_of_its_own(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    mock.reset(limit=0, retry_after=0.01)
    fast = AsyncGovernor.from_url(
        redis_url, name, GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    )
    try:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        with pytest.raises(openai.RateLimitError):
            await Runner.run(AGENT, "hello there", run_config=run_config(fast, mock, retry=retry))
    finally:
        await fast.aclose()
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


async def test_a_streamed_run_holds_its_lease_to_the_end(gov: Governor, agov: AsyncGovernor, mock: ServedMock) -> None:
    mock.reset(per_token_latency=0.05, stream_chunk_tokens=1)
    result = Runner.run_streamed(AGENT, "hello there", run_config=run_config(agov, mock))
    seen_in_flight = []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and getattr(event.data, "type", "") == "response.output_text.delta":
            seen_in_flight.append(gov.status().in_flight)
    assert seen_in_flight and seen_in_flight[0] == 1
    assert result.final_output
    await until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert gov.status().window_attempts == 1


async def test_the_governed_default_client(gov: Governor, agov: AsyncGovernor, mock: ServedMock) -> None:
    before = (_openai_shared.get_default_openai_client(), _openai_shared.get_use_responses_by_default())
    try:
        client = use_governed_client(agov, api="chat_completions", base_url=f"{mock.url}/v1", api_key="k")
        OPEN.append(client)
        results = await asyncio.gather(*(Runner.run(AGENT, "hello there") for _ in range(4)))
    finally:
        _openai_shared._default_openai_client = before[0]  # type: ignore[attr-defined]
        _openai_shared.set_use_responses_by_default(before[1])
    assert all(r.final_output for r in results)
    assert gov.status().window_attempts == 4
