"""LangChain under the fleet's limit: governed chat models and a rate limiter.

``pip install 'fleet-governor[langchain]'`` (langchain-core,
langchain-openai, langchain-anthropic).

:func:`chat_openai` and :func:`chat_anthropic` build LangChain's own
``ChatOpenAI`` and ``ChatAnthropic`` whose SDK clients send through the
governed transport (governor/transport.py): each model call (``invoke``,
``ainvoke``, ``stream``, ``astream``, ``batch``, tool calls, structured
output) waits for a lease of the fleet's limit, its response is reported
with its usage and rate-limit headers, a 429 holds the whole fleet for the
provider's Retry-After and is retried by the governor alone: the models are
built with ``max_retries=0`` (LangChain's retries are the SDK's). The sync
side is governed by ``governor=`` (a :class:`~governor.Governor`), the
asyncio side by ``async_governor=`` (an :class:`~governor.AsyncGovernor`);
a side given none refuses its calls with a ConfigError. The other options
are the model's own::

    from governor import AsyncGovernor
    from governor.frameworks.langchain import chat_openai

    gov = AsyncGovernor.from_url("redis://redis:6379/0", "openai")
    llm = chat_openai(async_governor=gov, model="gpt-4o-mini")
    reply = await llm.ainvoke("hello")

:class:`GovernorRateLimiter` is LangChain's ``BaseRateLimiter`` backed by the
governor, for a chat model of any other provider (``rate_limiter=`` of every
``BaseChatModel``). LangChain asks a rate limiter before each call and tells
it nothing after, so the limiter is a gate: it waits for a lease and gives
it back at once. The gate keeps the fleet's holds (a provider's Retry-After
reported by any governed client), pauses, queue order and requests
budgets (``GovernorConfig.requests_per_minute``); the fleet's concurrency
and the outcomes are the governed models' (:func:`chat_openai`).
"""

from __future__ import annotations

from typing import Any

from .._async.governor import AsyncGovernor
from .._sync.governor import Governor
from ..config import RetryPolicy
from ..errors import ConfigError
from ._clients import check_governors, import_framework, sdk_http_client

import_framework("langchain_core", "langchain")
from langchain_core.rate_limiters import BaseRateLimiter  # noqa: E402

__all__ = ["GovernorRateLimiter", "chat_anthropic", "chat_openai"]


def _no_retries(options: dict[str, Any], what: str) -> None:
    retries = options.pop("max_retries", 0)
    if retries not in (0, None):
        raise ConfigError(
            f"{what}(max_retries={retries!r}): the governor does the retrying; LangChain's retries on top "
            "would be attempts the governor never sees"
        )


def chat_openai(
    governor: Governor | None = None,
    async_governor: AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> Any:
    """``langchain_openai.ChatOpenAI(**options)`` with ``max_retries=0``, its
    sync calls governed by ``governor`` and its asyncio calls by
    ``async_governor`` (``http_client`` and ``http_async_client`` are the
    governed ones; giving either is refused)."""
    check_governors(governor, async_governor, "chat_openai()")
    _no_retries(options, "chat_openai")
    if options.get("http_client") is not None or options.get("http_async_client") is not None:
        raise ConfigError("chat_openai() builds http_client and http_async_client over the governed transport")
    openai = import_framework("openai", "langchain")
    lc = import_framework("langchain_openai", "langchain")
    place: dict[str, Any] = {"retry": retry, "holder": holder, "priority": priority, "tenant": tenant}
    place["what"] = "this ChatOpenAI"
    return lc.ChatOpenAI(
        max_retries=0,
        http_client=sdk_http_client(openai, governor, False, **place),
        http_async_client=sdk_http_client(openai, async_governor, True, **place),
        **options,
    )


def chat_anthropic(
    governor: Governor | None = None,
    async_governor: AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> Any:
    """``langchain_anthropic.ChatAnthropic(**options)`` with ``max_retries=0``,
    its sync calls governed by ``governor`` and its asyncio calls by
    ``async_governor``. ChatAnthropic takes no HTTP client; its SDK clients
    (its ``_client`` and ``_async_client``, made once per model) are built
    here with the model's own settings (key, base URL, headers, timeout) over
    the governed transport."""
    check_governors(governor, async_governor, "chat_anthropic()")
    _no_retries(options, "chat_anthropic")
    anthropic = import_framework("anthropic", "langchain")
    lc = import_framework("langchain_anthropic", "langchain")
    model = lc.ChatAnthropic(max_retries=0, **options)
    params = {k: v for k, v in model._client_params.items() if k != "max_retries"}
    place: dict[str, Any] = {"retry": retry, "holder": holder, "priority": priority, "tenant": tenant}
    place["what"] = "this ChatAnthropic"
    sync = sdk_http_client(anthropic, governor, False, **place)
    asynchronous = sdk_http_client(anthropic, async_governor, True, **place)
    # the model's cached SDK clients, made now instead of on first use
    model.__dict__["_client"] = anthropic.Anthropic(max_retries=0, http_client=sync, **params)
    model.__dict__["_async_client"] = anthropic.AsyncAnthropic(max_retries=0, http_client=asynchronous, **params)
    return model


class GovernorRateLimiter(BaseRateLimiter):  # type: ignore[misc]
    """LangChain's ``BaseRateLimiter`` backed by the governor: a fleet-wide gate.

    ``acquire`` (sync calls) waits for a lease of ``governor`` and
    ``aacquire`` (asyncio calls) one of ``async_governor``, each given back
    at once; ``timeout``: seconds to wait before the call fails with
    AcquireTimeout (None: as long as it takes). ``blocking=False`` asks
    without waiting. ``priority``/``tenant``: where the calls wait."""

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

    def acquire(self, *, blocking: bool = True) -> bool:
        if self.governor is None:
            raise ConfigError("this GovernorRateLimiter has no governor for sync calls: pass governor= too")
        if not blocking:
            lease = self.governor.try_acquire(self.holder, priority=self.priority, tenant=self.tenant)
            if lease is None:
                return False
        else:
            lease = self.governor.acquire(self.timeout, self.holder, priority=self.priority, tenant=self.tenant)
        lease.release()
        return True

    async def aacquire(self, *, blocking: bool = True) -> bool:
        gov = self.async_governor
        if gov is None:
            raise ConfigError("this GovernorRateLimiter has no async_governor for asyncio calls: pass it too")
        if not blocking:
            lease = await gov.try_acquire(self.holder, priority=self.priority, tenant=self.tenant)
            if lease is None:
                return False
        else:
            lease = await gov.acquire(self.timeout, self.holder, priority=self.priority, tenant=self.tenant)
        await lease.release()
        return True
