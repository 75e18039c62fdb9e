"""CrewAI under the fleet's limit (governor/frameworks/crewai.py), with the real package.

CrewAI does not install beside the ``test`` extra (docs/frameworks.md), so
this module is skipped there and runs in an environment of its own:
``.ci/crewai`` (``pip install -e '.[crewai]'`` and the few test packages
this module needs). Crews run on the LLM the adapter builds, its calls
going through the governed LiteLLM client to the benchmark's mock provider
(bench/provider.py) under a governor on a real Redis; the mock's record is
the witness of what reached the provider. The mock answers in plain words,
which a CrewAI agent takes as its final answer: one model call a kickoff.
Refusals are made certain by the mock's settings, never by waiting on a clock.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("crewai") is None:  # before the environment below is touched: the suite's stays as it is
    pytest.skip("CrewAI runs in an environment of its own (.ci/crewai)", allow_module_level=True)

# before CrewAI and LiteLLM are imported, here and in the worker processes: no telemetry,
# and LiteLLM's bundled price list rather than a download
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from tests.support.governing import ServedMock, run_agents

pytest.importorskip("crewai")
import litellm
from crewai import Agent, Crew, Task

from governor.frameworks.crewai import llm

#: CrewAI reads its own deprecated fields (function_calling_llm...) on every kickoff; LiteLLM's
#: TypedDicts use ReadOnly, which the pydantic CrewAI requires (below 2.13) warns about
pytestmark = [
    pytest.mark.filterwarnings(r"ignore::DeprecationWarning:crewai(\..*)?$"),
    pytest.mark.filterwarnings(r"ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
]

CAPACITY = 3
CONFIG = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=30.0)
ROOT = Path(__file__).resolve().parent.parent


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


def governed(mock: ServedMock, *args: Any, **options: Any) -> Any:
    return llm(*args, base_url=f"{mock.url}/v1", api_key="sk-test", **options)


def crew(model: Any) -> Crew:
    """One agent, one task; the agent's own task retries off (CrewAI re-raises LiteLLM's errors anyway)."""
    helper = Agent(role="helper", goal="answer", backstory="brief", llm=model, max_retry_limit=0)
    return Crew(agents=[helper], tasks=[Task(description="Say ok", expected_output="a word", agent=helper)])


@pytest.mark.timeout(300)  # worker processes import the framework: slow on a busy machine
async def test_agents_in_two_processes_share_one_limit(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    """2 processes x 4 CrewAI crews x 2 kickoffs against a limit of 3: the
    provider never serves more than 3 at once, and sees each call once."""
    mock.reset(latency_mean=0.05)
    results = await asyncio.to_thread(
        run_agents, "crewai", redis_url, name, mock.url, agents=4, calls=2, capacity=CAPACITY
    )
    assert [r["errors"] for r in results] == [[], []]
    assert sum(r["done"] for r in results) == 16
    assert 2 <= mock.record()["peak_served"] <= CAPACITY
    assert mock.attempts() == 16
    status = gov.status()
    assert (status.window_attempts, status.in_flight) == (16, 0)


def test_a_crew_answers_through_the_governor(gov: Governor, mock: ServedMock) -> None:
    model = governed(mock, gov)
    result = crew(model).kickoff()
    assert str(result).startswith("ok")
    assert gov.status().window_attempts == 1
    assert mock.attempts() == 1
    assert model.get_token_usage_summary().completion_tokens == 12  # the mock's answer, counted by CrewAI


def test_a_429_holds_every_agent(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    mock.reset(limit=0, retry_after=20.0)
    model = governed(mock, gov, retry=RetryPolicy(max_attempts=1, max_retry_after=30.0))
    with pytest.raises(litellm.RateLimitError):
        crew(model).kickoff()
    assert gov.status().not_before is not None
    other = Governor.from_url(redis_url, name, CONFIG)  # another crew's, another process's
    try:
        with pytest.raises(AcquireTimeout):
            other.acquire(timeout=0.2)
    finally:
        other.close()
    assert mock.attempts() == 1


def test_crewai_makes_no_retries_of_its_own(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """Every 429 is answered with a short hint: the governor's 3 attempts are
    exactly what reaches the provider (CrewAI puts 3 attempts of its own
    around every LLM call, and its agents retry a failed task twice by default)."""
    mock.reset(limit=0, retry_after=0.01)
    fast = Governor.from_url(
        redis_url, name, GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    )
    try:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        helper = Agent(role="helper", goal="answer", backstory="brief", llm=governed(mock, fast, retry=retry))
        task = Task(description="Say ok", expected_output="a word", agent=helper)
        with pytest.raises(litellm.RateLimitError):
            Crew(agents=[helper], tasks=[task]).kickoff()
    finally:
        fast.close()
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


async def test_acall_makes_no_retries_of_its_own(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """The asyncio side too: the governor's 3 attempts, none of CrewAI's around acall."""
    mock.reset(limit=0, retry_after=0.01)
    config = GovernorConfig(max_capacity=CAPACITY, policy="fixed", retry_after_cap=0.05)
    async with AsyncGovernor.from_url(redis_url, name, config) as fast:
        retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
        with pytest.raises(litellm.RateLimitError):
            await governed(mock, async_governor=fast, retry=retry).acall("hello there")
    assert mock.attempts() == 3
    assert gov.status().window_rate_limited == 3


async def test_asyncio_crews_are_governed(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """A crew's akickoff runs its steps in threads through the LLM's sync call;
    acall (CrewAI's converters and summaries) goes through the AsyncGovernor."""
    async with AsyncGovernor.from_url(redis_url, name, CONFIG) as agov:
        model = governed(mock, gov, async_governor=agov)
        results = await asyncio.gather(*(crew(model).akickoff() for _ in range(4)))
        assert (await model.acall("hello there")).startswith("ok")
    assert all(str(r).startswith("ok") for r in results)
    assert gov.status().window_attempts == 5
    assert mock.attempts() == 5


async def test_what_the_llm_refuses(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    with pytest.raises(ConfigError, match="the governor does the retrying"):
        llm(gov, num_retries=2)
    with pytest.raises(ConfigError, match="needs governor="):
        llm()
    # a side without a governor never runs ungoverned
    with pytest.raises(ConfigError, match="pass async_governor="):
        await governed(mock, gov).acall("hello there")
    async with AsyncGovernor.from_url(redis_url, name, CONFIG) as agov:
        with pytest.raises(ConfigError, match="pass governor="):
            governed(mock, async_governor=agov).call("hello there")
    assert mock.attempts() == 0


def crewai_example() -> str:
    """The python block of docs/frameworks.md's CrewAI section (marked no-run there: this environment runs it)."""
    text = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    section = text[text.index("\n## CrewAI\n") :].split("\n## ", 2)[1]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert len(blocks) == 1, "the CrewAI section shows one example"
    return blocks[0]


@pytest.mark.timeout(300)  # a process of its own that imports CrewAI: slow on a busy machine
def test_the_docs_example_runs_as_printed(redis_url: str, name: str, mock: ServedMock, tmp_path: Path) -> None:
    """The example, in an interpreter of its own, its LLM pointed at the mock by OPENAI_BASE_URL."""
    mock.reset()
    code = crewai_example()
    assert 'from_url("redis://localhost:6379/0", "openai")' in code
    script = tmp_path / "example.py"
    script.write_text(code.replace('"redis://localhost:6379/0", "openai"', f'"{redis_url}", "{name}"'), "utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": f"{mock.url}/v1", "OPENAI_API_KEY": "sk-test"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout, done.stdout
    assert mock.attempts() == 1
    example = Governor.from_url(redis_url, name)
    try:
        assert example.status().window_attempts == 1  # the example's governor counted the call
    finally:
        example.close()
