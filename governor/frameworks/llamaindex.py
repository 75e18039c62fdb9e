"""LlamaIndex under the fleet's limit: its rate-limiter interface backed by the governor.

``pip install 'fleet-governor[llamaindex]'`` (llama-index-core alone).

:class:`GovernorRateLimiter` is ``llama_index.core.rate_limiter.BaseRateLimiter``
backed by the governor, for ``rate_limiter=`` of every LlamaIndex LLM and
embedding model (one limiter may be shared by several). LlamaIndex asks a
rate limiter before each call (``acquire`` for the sync calls,
``async_acquire`` for the asyncio ones) and tells it nothing after, so the
limiter is a gate, as LangChain's is (governor/frameworks/langchain.py): it
waits for a lease of the fleet's limit and gives it back at once. The gate
keeps the fleet's holds (a provider's Retry-After reported by any governed
client), pauses, queue order and requests budgets
(``GovernorConfig.requests_per_minute``); the fleet's concurrency and the
outcomes are the governed clients' (governor/providers), which a custom
LLM can call itself::

    from governor import Governor, GovernorConfig
    from governor.frameworks.llamaindex import GovernorRateLimiter

    gov = Governor.from_url("redis://redis:6379/0", "any-provider", GovernorConfig(requests_per_minute=600))
    llm = SomeLLM(rate_limiter=GovernorRateLimiter(gov, timeout=30))

LlamaIndex's ``num_tokens`` estimate is not used: the gate counts requests.
"""

from __future__ import annotations

from .._async.governor import AsyncGovernor
from .._sync.governor import Governor
from ..errors import ConfigError
from ._clients import check_governors, import_framework

import_framework("llama_index.core", "llamaindex")
from llama_index.core.rate_limiter import BaseRateLimiter  # noqa: E402

__all__ = ["GovernorRateLimiter"]


class GovernorRateLimiter(BaseRateLimiter):  # type: ignore[misc]
    """LlamaIndex's ``BaseRateLimiter`` backed by the governor: a fleet-wide gate.

    ``acquire`` (sync calls) waits for a lease of ``governor`` and
    ``async_acquire`` (asyncio calls) one of ``async_governor``, each given
    back at once; ``timeout``: seconds to wait before the call fails with
    AcquireTimeout (None: as long as it takes). ``priority``/``tenant``:
    where the calls wait."""

    def __init__(
        self,
        governor: Governor | None = None,
        async_governor: AsyncGovernor | None = None,
        *,
        timeout: float | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        holder: str | None = None,
    ) -> None:
        check_governors(governor, async_governor, "GovernorRateLimiter")
        for gov in (governor, async_governor):
            if gov is not None:
                gov.ask(holder, priority=priority, tenant=tenant)  # ConfigError now: an unknown class, a bad tenant
        self.governor, self.async_governor = governor, async_governor
        self.timeout, self.priority, self.tenant, self.holder = timeout, priority, tenant, holder

    def acquire(self, num_tokens: int = 0) -> None:
        if self.governor is None:
            raise ConfigError("this GovernorRateLimiter has no governor for sync calls: pass governor= too")
        lease = self.governor.acquire(self.timeout, self.holder, priority=self.priority, tenant=self.tenant)
        lease.release()

    async def async_acquire(self, num_tokens: int = 0) -> None:
        gov = self.async_governor
        if gov is None:
            raise ConfigError("this GovernorRateLimiter has no async_governor for asyncio calls: pass it too")
        lease = await gov.acquire(self.timeout, self.holder, priority=self.priority, tenant=self.tenant)
        await lease.release()
