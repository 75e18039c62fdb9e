"""Framework agents in a worker process of their own, for the framework tests.

``python -m tests.support.framework_workers FRAMEWORK REDIS_URL NAME MOCK_URL AGENTS CALLS CAPACITY``
runs AGENTS agents of FRAMEWORK at once on one event loop, each making
CALLS model calls through the framework's governed model against the mock
provider, under the governor NAME (a fixed limit of CAPACITY); it prints one JSON line: the calls that
answered and the errors (by type name).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from governor import AsyncGovernor, GovernorConfig


def langchain_agent(gov: AsyncGovernor, mock: str) -> Callable[[], Awaitable[Any]]:
    from governor.frameworks.langchain import chat_openai

    llm = chat_openai(async_governor=gov, model="gpt-4o-mini", base_url=f"{mock}/v1", api_key="sk-test")
    return lambda: llm.ainvoke("hello there")


def pydantic_ai_agent(gov: AsyncGovernor, mock: str) -> Callable[[], Awaitable[Any]]:
    from pydantic_ai import Agent

    from governor.frameworks.pydantic_ai import openai_model

    agent = Agent(openai_model(gov, "gpt-4o-mini", base_url=f"{mock}/v1", api_key="sk-test"))
    return lambda: agent.run("hello there")


def openai_agents_agent(gov: AsyncGovernor, mock: str) -> Callable[[], Awaitable[Any]]:
    from agents import Agent, RunConfig, Runner, set_tracing_disabled

    from governor.frameworks.openai_agents import model_provider

    set_tracing_disabled(True)
    config = RunConfig(model_provider=model_provider(gov, use_responses=False, base_url=f"{mock}/v1", api_key="k"))
    agent = Agent(name="helper", instructions="Be brief.", model="gpt-4o-mini")
    return lambda: Runner.run(agent, "hello there", run_config=config)


def dspy_agent(gov: AsyncGovernor, mock: str) -> Callable[[], Awaitable[Any]]:
    import dspy

    from governor.frameworks.dspy import lm

    model = lm(async_governor=gov, client_options={"base_url": f"{mock}/v1", "api_key": "sk-test"}, cache=False)
    program = dspy.Predict("question -> answer")

    async def call() -> Any:
        with dspy.context(lm=model, adapter=plain_adapter()):
            return await program.acall(question="hello there")

    return call


def crewai_agent(gov: AsyncGovernor, mock: str) -> Callable[[], Awaitable[Any]]:
    from crewai import Agent, Crew, Task

    from governor import Governor
    from governor.frameworks.crewai import llm

    # a crew's akickoff runs its agents' steps in threads, through the LLM's sync call
    sync = Governor.from_url(sys.argv[2], gov.name, gov.config)
    CLOSE.append(sync)
    model = llm(sync, async_governor=gov, base_url=f"{mock}/v1", api_key="sk-test")
    helper = Agent(role="helper", goal="answer", backstory="brief", llm=model, max_retry_limit=0)
    crew = Crew(agents=[helper], tasks=[Task(description="Say ok", expected_output="a word", agent=helper)])
    return crew.akickoff


#: the sync governors the agents made, closed at the end
CLOSE: list[Any] = []


def plain_adapter() -> Any:
    """DSPy's ChatAdapter reading the whole reply as the answer (the mock answers in plain words)."""
    import dspy

    class Plain(dspy.ChatAdapter):  # type: ignore[misc]
        def parse(self, signature: Any, completion: str) -> dict[str, Any]:
            return {name: completion for name in signature.output_fields}

    return Plain()


AGENTS = {
    "langchain": langchain_agent,
    "pydantic_ai": pydantic_ai_agent,
    "openai_agents": openai_agents_agent,
    "dspy": dspy_agent,
    "crewai": crewai_agent,
}


async def main(
    framework: str, url: str, name: str, mock: str, agents: int, calls: int, capacity: int
) -> dict[str, Any]:
    gov = AsyncGovernor.from_url(url, name, GovernorConfig(max_capacity=capacity, policy="fixed"))
    done = 0
    errors: list[str] = []

    async def agent() -> None:
        nonlocal done
        call = AGENTS[framework](gov, mock)
        for _ in range(calls):
            try:
                await call()
                done += 1
            except Exception as error:  # noqa: BLE001 - counted and reported to the test
                errors.append(type(error).__name__)

    try:
        await asyncio.gather(*(agent() for _ in range(agents)))
    finally:
        await gov.aclose()
        for sync in CLOSE:
            sync.close()
    return {"done": done, "errors": errors}


if __name__ == "__main__":
    framework, url, name, mock, agents, calls, capacity = sys.argv[1:8]
    print(json.dumps(asyncio.run(main(framework, url, name, mock, int(agents), int(calls), int(capacity)))))
