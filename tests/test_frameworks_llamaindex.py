"""LlamaIndex under the fleet's limit (governor/frameworks/llamaindex.py), with the real package.

llama-index-core's own LLM machinery (a ``CustomLLM``, whose calls go
through LlamaIndex's callbacks, where the rate limiter is asked) calls the
benchmark's mock provider (bench/provider.py) with the openai SDK over
loopback HTTP, gated by the limiter under a governor on a real Redis; the
mock's record is the witness of what reached the provider. Refusals are
made certain by the mock's settings and a paused governor, never by
waiting on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from governor.providers import openai_client
from tests.support.governing import ServedMock

pytest.importorskip("llama_index.core")
import openai
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from governor.frameworks.llamaindex import GovernorRateLimiter

CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)


class MockLLM(CustomLLM):
    """A LlamaIndex LLM of the user's own: Chat Completions through the openai SDK, no retries."""

    base_url: str

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="gpt-4o-mini")

    def _client(self) -> Any:
        return openai.OpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        with self._client() as client:
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}])
        return CompletionResponse(text=reply.choices[0].message.content or "")

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        async with openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
            )
        return CompletionResponse(text=reply.choices[0].message.content or "")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


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


def test_the_limiter_gates_a_llamaindex_llm(gov: Governor, mock: ServedMock) -> None:
    """A paused fleet stops the LLM before anything reaches the provider."""
    llm = MockLLM(base_url=f"{mock.url}/v1", rate_limiter=GovernorRateLimiter(gov, timeout=0.2))
    assert llm.complete("hello there").text.startswith("ok")
    assert mock.attempts() == 1
    gov.pause("maintenance")
    try:
        with pytest.raises(AcquireTimeout):
            llm.complete("hello there")
    finally:
        gov.resume()
    assert mock.attempts() == 1
    assert gov.status().in_flight == 0


def test_a_429_reported_by_a_governed_client_holds_the_gated_llm(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    mock.reset(limit=0, retry_after=20.0)
    with openai_client(
        gov, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0), base_url=f"{mock.url}/v1", api_key="sk-test"
    ) as client:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert gov.status().not_before is not None
    other = Governor.from_url(redis_url, name, CONFIG)  # another process's, gating its own LLM
    try:
        llm = MockLLM(base_url=f"{mock.url}/v1", rate_limiter=GovernorRateLimiter(other, timeout=0.2))
        with pytest.raises(AcquireTimeout):
            llm.complete("hello there")
    finally:
        other.close()
    assert mock.attempts() == 1


async def test_asyncio_calls_wait_at_the_gate(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    async with AsyncGovernor.from_url(redis_url, name, CONFIG) as agov:
        # the fourth of four waits for one of the three slots (a generous bound, not a wall-clock bet)
        llm = MockLLM(base_url=f"{mock.url}/v1", rate_limiter=GovernorRateLimiter(async_governor=agov, timeout=30.0))
        replies = await asyncio.gather(*(llm.acomplete(f"hello {i}") for i in range(4)))
        assert all(r.text.startswith("ok") for r in replies)
        await agov.pause("maintenance")
        try:
            gate = GovernorRateLimiter(async_governor=agov, timeout=0.2)  # a paused fleet: it times out
            held = MockLLM(base_url=f"{mock.url}/v1", rate_limiter=gate)
            with pytest.raises(AcquireTimeout):
                await held.acomplete("hello there")
        finally:
            await agov.resume()
    assert mock.attempts() == 4
    assert gov.status().in_flight == 0


def test_what_the_limiter_refuses(gov: Governor) -> None:
    with pytest.raises(ConfigError, match="needs governor="):
        GovernorRateLimiter()
    with pytest.raises(ConfigError, match="no-such-class"):
        GovernorRateLimiter(gov, priority="no-such-class")
    with pytest.raises(ConfigError, match="no async_governor"):
        asyncio.run(GovernorRateLimiter(gov).async_acquire())
