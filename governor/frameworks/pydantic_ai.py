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
across every process and host. PydanticAI tells a limiter no outcome, so a
model operation's lease is carried into the model call (a context
variable, governor/_exchange.py ``Carried``): a governed model of the same
governor reports the call on it, one lease per call. An agent run's lease
(``Agent(max_concurrency=)``) spans several model calls and reports
nothing: give that limiter a governor of its own (agent runs per fleet).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._async.governor import AsyncGovernor
from .._async.lease import AsyncLease
from .._exchange import CARRIED, Carried
from ..config import RetryPolicy
from ..errors import ConfigError
from ..providers import async_anthropic_client, async_openai_client
from ._clients import check_governors, import_framework

import_framework("pydantic_ai", "pydantic-ai")
from pydantic_ai.concurrency import AbstractConcurrencyLimiter  # noqa: E402

__all__ = ["GovernorConcurrencyLimiter", "anthropic_model", "openai_model"]

#: the source PydanticAI names a model operation's acquire with (``model:<model name>``)
MODEL_SOURCE = "model:"


@dataclass(frozen=True)
class _Held:
    """A lease the limiter holds: the loop it was acquired on, and its carrier
    into the model call (None: an agent run's, never carried)."""

    lease: AsyncLease
    loop: asyncio.AbstractEventLoop
    carrier: Carried | None


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
    where the operations wait.

    A model operation's lease (``ConcurrencyLimitedModel``, whose source is
    ``model:<name>``) is carried into the model call: a governed model of
    the same governor (:func:`openai_model`, :func:`anthropic_model`) makes
    its first attempt on it, reports the call's outcome, usage and headers
    on it and releases it (a stream's when the stream ends), so a limited
    governed model takes one lease of the limit per call, as the model
    alone does. A retried attempt waits for a lease of its own, as every
    governed call's does. An operation that makes no governed call (another
    governor's model, an ungoverned one, a token count) and an agent run
    (``Agent(max_concurrency=)``, source ``agent:<name>``, several model
    calls) keep the lease to the end and give it back with no outcome.

    ``release()`` may run on another task than its ``acquire()`` (a stream
    is closed where it is consumed): it gives back the operation's own
    lease when it runs in the operation's task, else one whose call is over,
    else one no call took; from a task of the event loop it was acquired on."""

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
        self._held: list[_Held] = []
        self._lock = threading.Lock()
        self._releasing: set[asyncio.Task[None]] = set()

    async def acquire(self, source: str) -> None:
        lease = await self.governor.acquire(self.timeout, source or None, priority=self.priority, tenant=self.tenant)
        carrier = None
        if source.startswith(MODEL_SOURCE):  # one model call: its lease goes into the call (this task's context)
            carrier = Carried(self.governor, lease)
            CARRIED.set(carrier)
        with self._lock:
            self._held.append(_Held(lease, asyncio.get_running_loop(), carrier))

    def release(self) -> None:
        with self._lock:
            if not self._held:
                raise ConfigError("GovernorConcurrencyLimiter.release() without a lease held (one release per acquire)")
            held = self._held.pop(self._pick())
        if held.carrier is not None and not held.carrier.close():
            return  # the model call took the lease: it reports and releases it
        lease, loop = held.lease, held.loop

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

    def _pick(self) -> int:
        """Which held lease a release gives back: this task's operation's,
        else one whose call is over, else one no call took, else the oldest."""
        held, current = self._held, CARRIED.get()
        tests: tuple[Callable[[_Held], bool], ...] = (
            lambda h: current is not None and h.carrier is current,
            lambda h: h.carrier is not None and h.carrier.taken and h.lease.released,
            lambda h: h.carrier is None or not h.carrier.taken,
        )
        for test in tests:
            for index, entry in enumerate(held):
                if test(entry):
                    return index
        return 0

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
