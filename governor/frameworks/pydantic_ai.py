"""PydanticAI under the fleet's limit: governed models and a fleet-wide concurrency limiter.

``pip install 'fleet-governor[pydantic-ai]'`` (pydantic-ai-slim with its
openai and anthropic extras).

:func:`openai_model` and :func:`anthropic_model` build PydanticAI's
``OpenAIChatModel`` and ``AnthropicModel`` over the governed asyncio clients
of :mod:`governor.providers` (``async_openai_client(governor=)``,
``async_anthropic_client(governor=)``): each model request of an agent run
(``run``, ``run_sync``, ``run_stream``, tool-call rounds) waits for a lease
of the fleet's limit, is reported with its usage and rate-limit headers, and
a 429 holds the whole fleet for the provider's Retry-After and is retried by
the governor alone (the SDK clients have ``max_retries=0``; PydanticAI
retries no HTTP call of its own). A stream's lease is held until the stream
ends::

    from pydantic_ai import Agent
    from governor import AsyncGovernor
    from governor.frameworks.pydantic_ai import openai_model

    gov = AsyncGovernor.from_url("redis://redis:6379/0", "openai")
    agent = Agent(openai_model(gov, "gpt-4o-mini"))
    result = await agent.run("hello")

:class:`GovernorConcurrencyLimiter` is PydanticAI's
``AbstractConcurrencyLimiter`` backed by the governor, for
``ConcurrencyLimitedModel(model, limiter)`` and ``Agent(max_concurrency=)``:
``acquire`` waits in the fleet's queue for a lease and ``release`` gives one
back, so at most the governor's capacity of these operations run at once
across every process and host. The limiter is told no outcome (PydanticAI
reports none to it): the governed models are what report. Give it a
governor of its own (say, agent runs per fleet) rather than the one its
governed model uses, or each call would take two leases of one limit.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

from .._async.governor import AsyncGovernor
from .._async.lease import AsyncLease
from ..config import RetryPolicy
from ..errors import ConfigError
from ..providers import async_anthropic_client, async_openai_client
from ._clients import check_governors, import_framework

import_framework("pydantic_ai", "pydantic-ai")
from pydantic_ai.concurrency import AbstractConcurrencyLimiter  # noqa: E402

__all__ = ["GovernorConcurrencyLimiter", "anthropic_model", "openai_model"]


def openai_model(
    governor: AsyncGovernor,
    model_name: str,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    settings: Any = None,
    **client_options: Any,
) -> Any:
    """``OpenAIChatModel(model_name)`` whose provider's client is
    ``async_openai_client(governor=governor, **client_options)`` (``base_url``,
    ``api_key``...); ``settings``: the model's settings."""
    check_governors(None, governor, "openai_model()")
    models = import_framework("pydantic_ai.models.openai", "pydantic-ai")
    providers = import_framework("pydantic_ai.providers.openai", "pydantic-ai")
    client = async_openai_client(
        governor, retry=retry, holder=holder, priority=priority, tenant=tenant, **client_options
    )
    return models.OpenAIChatModel(
        model_name, provider=providers.OpenAIProvider(openai_client=client), settings=settings
    )


def anthropic_model(
    governor: AsyncGovernor,
    model_name: str,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    settings: Any = None,
    **client_options: Any,
) -> Any:
    """``AnthropicModel(model_name)`` whose provider's client is
    ``async_anthropic_client(governor=governor, **client_options)``."""
    check_governors(None, governor, "anthropic_model()")
    models = import_framework("pydantic_ai.models.anthropic", "pydantic-ai")
    providers = import_framework("pydantic_ai.providers.anthropic", "pydantic-ai")
    client = async_anthropic_client(
        governor, retry=retry, holder=holder, priority=priority, tenant=tenant, **client_options
    )
    provider = providers.AnthropicProvider(anthropic_client=client)
    return models.AnthropicModel(model_name, provider=provider, settings=settings)


class GovernorConcurrencyLimiter(AbstractConcurrencyLimiter):  # type: ignore[misc]
    """PydanticAI's concurrency limiter over a governor: one lease per running operation.

    ``timeout``: seconds an operation may wait for its lease before
    AcquireTimeout (None: as long as it takes). ``priority``/``tenant``:
    where the operations wait. ``release()`` may run on another task than
    its ``acquire()`` (a stream is closed where it is consumed): the leases
    are interchangeable, so it gives back the oldest one held, from a task
    of the event loop it was acquired on."""

    def __init__(
        self,
        governor: AsyncGovernor,
        *,
        timeout: float | None = None,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> None:
        check_governors(None, governor, "GovernorConcurrencyLimiter")
        governor.ask(priority=priority, tenant=tenant)  # ConfigError now: an unknown class, a bad tenant
        self.governor = governor
        self.timeout, self.priority, self.tenant = timeout, priority, tenant
        self._held: collections.deque[tuple[AsyncLease, asyncio.AbstractEventLoop]] = collections.deque()
        self._lock = threading.Lock()
        self._releasing: set[asyncio.Task[None]] = set()

    async def acquire(self, source: str) -> None:
        lease = await self.governor.acquire(self.timeout, source or None, priority=self.priority, tenant=self.tenant)
        with self._lock:
            self._held.append((lease, asyncio.get_running_loop()))

    def release(self) -> None:
        with self._lock:
            if not self._held:
                raise ConfigError("GovernorConcurrencyLimiter.release() without a lease held (one release per acquire)")
            lease, loop = self._held.popleft()

        def spawn() -> None:
            task = loop.create_task(lease.release())
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            spawn()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(spawn)
        # else: the loop is gone; the lease's TTL frees the slot

    async def drain(self) -> None:
        """Wait until every lease given back by :meth:`release` has reached Redis."""
        while self._releasing:
            await asyncio.gather(*list(self._releasing), return_exceptions=True)

    async def __aenter__(self) -> GovernorConcurrencyLimiter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drain()

    @property
    def held(self) -> int:
        """Leases held by this limiter now."""
        return len(self._held)
