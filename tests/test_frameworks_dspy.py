"""DSPy under the fleet's limit (governor/frameworks/dspy.py), with the real package.

A ``dspy.Predict`` program runs on the LM the adapter builds, its engines
sending over the governed openai clients to the benchmark's mock provider
(bench/provider.py) under a governor on a real Redis; the mock's record
is the witness of what reached the provider. The mock answers in plain
words, so the programs read the whole reply as their answer
(tests/support/framework_workers.py: plain_adapter). DSPy's cache is off.
Refusals are made certain by the mock's settings, never by waiting on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from tests.support.framework_workers import plain_adapter
from tests.support.governing import ServedMock, run_agents

pytest.importorskip("dspy")
import dspy
from dspy.utils.exceptions import LMRateLimitError, LMUnexpectedError

from governor.frameworks.dspy import lm

CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)
PROGRAM = dspy.Predict("question -> answer")


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


#: the LMs a test made, their clients closed after it (their connections, or Python warns)
OPEN: list[Any] = []


@pytest.fixture(autouse=True)
async def close_lms() -> AsyncIterator[None]:
    yield
    while OPEN:
        model = OPEN.pop()
        model.engine.close()
        await model._async_engine_spec.aclose()


def governed(mock: ServedMock, *args: Any, **options: Any) -> Any:
    model = lm(*args, client_options={"base_url": f"{mock.url}/v1", "api_key": "sk-test"}, cache=False, **options)
    OPEN.append(model)
    return model


def ask(model: Any) -> Any:
    with dspy.context(lm=model, adapter=plain_adapter()):
        return PROGRAM(question="hello there")


@pytest.mark.timeout(300)  # worker processes import the framework: slow on a busy machine
async def test_programs_in_two_processes_share_one_limit(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    """2 processes x 4 DSPy programs x 3 calls against a limit of 3: the
    provider never serves more than 3 at once, and sees each call once."""
    mock.reset(latency_mean=0.05)
    results = await asyncio.to_thread(
        run_agents, "dspy", redis_url, name, mock.url, agents=4, calls=3, capacity=CAPACITY
    )
    assert [r["errors"] for r in results] == [[], []]
    assert sum(r["done"] for r in results) == 24
    assert 2 <= mock.record()["peak_served"] <= CAPACITY
    assert mock.attempts() == 24
    status = gov.status()
    assert (status.window_attempts, status.in_flight) == (24, 0)


def test_a_program_answers_through_the_governor(gov: Governor, mock: ServedMock) -> None:
    prediction = ask(governed(mock, gov))
    assert prediction.answer.startswith("ok")
    assert gov.status().window_attempts == 1
    assert mock.attempts() == 1


def test_a_429_holds_every_agent(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    mock.reset(limit=0, retry_after=20.0)
    model = governed(mock, gov, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0))
    with pytest.raises(LMRateLimitError):
        ask(model)
    assert gov.status().not_before is not None
    other = Governor.from_url(redis_url, name, CONFIG)  # another program's, another process's
    try:
        with pytest.raises(AcquireTimeout):
            other.acquire(timeout=0.2)
    finally:
        other.close()
    assert mock.attempts() == 1


def test_dspy_makes_no_retries_of_its_own(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """Every 429 is answered with a short hint: the governor's 3 attempts are
    exactly what reaches the provider (DSPy's default is 3 retries of each)."""
    mock.reset(limit=0, retry_after=0.01)
    fast = Governor.from_url(
        redis_url, name, GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    )
    try:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        with pytest.raises(LMRateLimitError):
            ask(governed(mock, fast, retry=retry))
    finally:
        fast.close()
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


async def test_asyncio_calls_are_governed(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    async with AsyncGovernor.from_url(redis_url, name, CONFIG) as agov:
        model = governed(mock, async_governor=agov)
        with dspy.context(lm=model, adapter=plain_adapter()):
            results = await asyncio.gather(*(PROGRAM.acall(question=f"hello {i}") for i in range(4)))
    assert all(r.answer.startswith("ok") for r in results)
    assert gov.status().window_attempts == 4
    assert mock.attempts() == 4


def test_what_the_lm_refuses(gov: Governor, mock: ServedMock) -> None:
    with pytest.raises(ConfigError, match="the governor does the retrying"):
        lm(gov, num_retries=2)
    with pytest.raises(ConfigError, match="client_options"):
        lm(gov, api_key="sk-test")
    with pytest.raises(ConfigError, match="needs governor="):
        lm()
    # a side without a governor never runs ungoverned (DSPy wraps the engine's error)
    with pytest.raises(LMUnexpectedError, match="async_governor=") as refused:
        asyncio.run(governed(mock, gov).acall("hello there"))
    assert isinstance(refused.value.__cause__, ConfigError)
    assert mock.attempts() == 0
