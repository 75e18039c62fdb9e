"""CrewAI under the fleet's limit: a CrewAI LLM whose calls go through the governed LiteLLM client.

``pip install 'fleet-governor[crewai]'``, in an environment of its own:
CrewAI requires openai below 3, pydantic below 2.13 and httpx 0.28, which
the other frameworks' extras do not install beside (docs/frameworks.md).

A CrewAI agent asks its LLM (``Agent(llm=...)``, a ``crewai.llms.base_llm.BaseLLM``)
for each step through ``call`` (``kickoff``) or ``acall`` (``kickoff_async``,
``akickoff``). :func:`llm` builds a :class:`GovernedLLM` whose ``call`` runs
``completion`` of ``litellm_client(governor=)`` and whose ``acall`` runs
``acompletion`` of ``litellm_client(async_governor=)``
(:mod:`governor.providers.litellm`): each model call of every agent of a
crew waits for a lease of the fleet's limit, is reported with its usage and
the provider's rate-limit hints, and a 429 holds the whole fleet for its
Retry-After and is retried by the governor alone. The retries below and
above it are off: LiteLLM's (``num_retries=0``, ``max_retries=0``; another
value is refused) and the rate-limit retry CrewAI puts around every LLM's
``call`` and ``acall`` (three attempts, ``crewai.llms.retry``), which this
class's methods opt out of. A provider's error the governor did not get
past reaches the agent as LiteLLM's own (``litellm.RateLimitError`` for a
429), which CrewAI's agents re-raise at once rather than retry the task::

    from crewai import Agent, Crew, Task
    from governor import Governor
    from governor.frameworks.crewai import llm

    gov = Governor.from_url("redis://redis:6379/0", "openai")
    writer = Agent(role="writer", goal="answer", backstory="brief", llm=llm(gov, "openai/gpt-4o-mini"))
    task = Task(description="Say ok", expected_output="a word", agent=writer)
    print(Crew(agents=[writer], tasks=[task]).kickoff())

A side given no governor refuses its calls with a ConfigError. A streamed
crew (``Crew(stream=True)``) gets each reply as one piece.
"""

from __future__ import annotations

from typing import Any

from .._async.governor import AsyncGovernor
from .._sync.governor import Governor
from ..config import RetryPolicy
from ..errors import ConfigError
from ..providers.litellm import GovernedLiteLLM, litellm_client
from ._clients import check_governors, import_framework

import_framework("crewai", "crewai")
from crewai.llms.base_llm import BaseLLM, llm_call_context  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

__all__ = ["GovernedLLM", "llm"]

#: the LLM's fields that are litellm.completion's arguments of the same name
SENT: tuple[str, ...] = ("temperature", "top_p", "max_tokens", "seed", "frequency_penalty", "presence_penalty", "n")
SENT += ("api_key", "base_url")


def _opted_out(method: Any) -> Any:
    """``method``, marked as wrapped already: BaseLLM then leaves it without its rate-limit retry."""
    method._crewai_rate_limit_wrapped = True
    return method


class GovernedLLM(BaseLLM):  # type: ignore[misc]
    """A CrewAI LLM over governed LiteLLM clients (see the module docstring); built by :func:`llm`."""

    llm_type: str = "governed-litellm"
    _sync: GovernedLiteLLM | None = PrivateAttr(default=None)
    _async: GovernedLiteLLM | None = PrivateAttr(default=None)

    def _arguments(self, messages: Any, tools: Any, response_model: Any) -> dict[str, Any]:
        arguments: dict[str, Any] = {"model": self.model, "messages": self._format_messages(messages)}
        arguments.update({k: getattr(self, k) for k in SENT if getattr(self, k) is not None})
        if self.stop_sequences:
            arguments["stop"] = self.stop_sequences
        if tools:
            arguments["tools"] = tools
        if response_model is not None:
            arguments["response_format"] = response_model
        return {**arguments, **self.additional_params}

    def _answer(self, reply: Any, arguments: dict[str, Any], task: Any, agent: Any) -> Any:
        """The reply as CrewAI's LLMs give it: its text (or its tool calls), the usage counted, the event sent."""
        usage: Any = getattr(reply, "usage", None)
        usage_dict = usage.model_dump() if hasattr(usage, "model_dump") else None
        if usage_dict:
            self._track_token_usage_internal(usage_dict)
        message = reply.choices[0].message
        from crewai.events.types.llm_events import LLMCallType

        if message.tool_calls and not message.content:
            answer: Any = message.tool_calls
            kind = LLMCallType.TOOL_CALL
        else:
            answer = self._apply_stop_words(message.content or "")
            kind = LLMCallType.LLM_CALL
        self._emit_call_completed_event(
            answer, kind, task, agent, arguments["messages"], usage_dict, reply.choices[0].finish_reason, reply.id
        )
        return answer

    @_opted_out
    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        with llm_call_context():
            self._emit_call_started_event(messages, tools, callbacks, available_functions, from_task, from_agent)
            arguments = self._arguments(messages, tools, response_model)
            try:
                if self._sync is None:
                    raise ConfigError(_refusal("sync", "governor="))
                reply = self._sync.completion(**arguments)
            except Exception as error:
                self._emit_call_failed_event(str(error), from_task, from_agent)
                raise
            return self._answer(reply, arguments, from_task, from_agent)

    @_opted_out
    async def acall(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        with llm_call_context():
            self._emit_call_started_event(messages, tools, callbacks, available_functions, from_task, from_agent)
            arguments = self._arguments(messages, tools, response_model)
            try:
                if self._async is None:
                    raise ConfigError(_refusal("asyncio", "async_governor="))
                reply = await self._async.acompletion(**arguments)
            except Exception as error:
                self._emit_call_failed_event(str(error), from_task, from_agent)
                raise
            return self._answer(reply, arguments, from_task, from_agent)


def _refusal(side: str, option: str) -> str:
    return f"this CrewAI LLM was built without a governor for its {side} calls: pass {option} to llm() too"


def llm(
    governor: Governor | None = None,
    model: str = "openai/gpt-4o-mini",
    *,
    async_governor: AsyncGovernor | None = None,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> GovernedLLM:
    """A :class:`GovernedLLM` for ``model`` (LiteLLM's name: ``openai/gpt-4o-mini``,
    ``anthropic/claude-sonnet-4-5``...): its ``call`` under ``governor``, its
    ``acall`` under ``async_governor``. ``options`` are the LLM's fields
    (``temperature``, ``max_tokens``, ``stop``, ``base_url``, ``api_key``)
    and any other ``litellm.completion`` argument (``api_base``...)."""
    check_governors(governor, async_governor, "llm()")
    for name in ("num_retries", "max_retries"):
        if options.get(name) not in (None, 0):
            raise ConfigError(
                f"llm({name}={options[name]!r}): the governor does the retrying; LiteLLM's retries on top "
                "would be attempts the governor never sees"
            )
        options.pop(name, None)
    place: dict[str, Any] = {"retry": retry, "holder": holder, "priority": priority, "tenant": tenant}
    built = GovernedLLM(model=model, **options)
    if governor is not None:
        built._sync = litellm_client(governor, **place)
    if async_governor is not None:
        built._async = litellm_client(async_governor, **place)
    return built
