"""The OpenAI Agents SDK under the fleet's limit: a governed default client and model provider.

``pip install 'fleet-governor[openai-agents]'``.

:func:`use_governed_client` makes ``async_openai_client(governor=)``
(governor/providers) the SDK's default client (``set_default_openai_client``):
every model request of every agent run in the process (``Runner.run``,
``run_sync``, ``run_streamed``, handoffs and tool rounds) then waits for a
lease of the fleet's limit, is reported with its usage and rate-limit
headers, and a 429 holds the whole fleet for the provider's Retry-After
and is retried by the governor alone (the client has ``max_retries=0``;
the SDK's own runner retries, ``ModelSettings.retry``, are off unless a
run asks for them: leave them off). A streamed run holds its lease until
its stream ends::

    from agents import Agent, Runner
    from governor import AsyncGovernor
    from governor.frameworks.openai_agents import use_governed_client

    gov = AsyncGovernor.from_url("redis://redis:6379/0", "openai")
    use_governed_client(gov)
    result = await Runner.run(Agent(name="helper", model="gpt-4o-mini"), "hello")

:func:`model_provider` is the same client as an ``OpenAIProvider``, for one
run (``RunConfig(model_provider=...)``) rather than the whole process.
``api``/``use_responses``: the Responses API (the SDK's default) or Chat
Completions.
"""

from __future__ import annotations

from typing import Any, Literal

from .._async.governor import AsyncGovernor
from ..config import RetryPolicy
from ..providers import async_openai_client
from ._clients import check_governors, import_framework

__all__ = ["model_provider", "use_governed_client"]


def use_governed_client(
    governor: AsyncGovernor,
    *,
    api: Literal["chat_completions", "responses"] | None = None,
    use_for_tracing: bool = False,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **client_options: Any,
) -> Any:
    """``async_openai_client(governor=governor, **client_options)`` set as the
    SDK's default client (and, with ``api``, its default API); returns it.
    ``use_for_tracing``: also its key for uploading traces (default off: the
    governed client is for model calls)."""
    check_governors(None, governor, "use_governed_client()")
    agents = import_framework("agents", "openai-agents")
    client = async_openai_client(
        governor, retry=retry, holder=holder, priority=priority, tenant=tenant, **client_options
    )
    agents.set_default_openai_client(client, use_for_tracing=use_for_tracing)
    if api is not None:
        agents.set_default_openai_api(api)
    return client


def model_provider(
    governor: AsyncGovernor,
    *,
    use_responses: bool | None = None,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **client_options: Any,
) -> Any:
    """An ``agents.OpenAIProvider`` over ``async_openai_client(governor=governor,
    **client_options)``, for ``RunConfig(model_provider=...)``."""
    check_governors(None, governor, "model_provider()")
    agents = import_framework("agents", "openai-agents")
    client = async_openai_client(
        governor, retry=retry, holder=holder, priority=priority, tenant=tenant, **client_options
    )
    return agents.OpenAIProvider(openai_client=client, use_responses=use_responses)
