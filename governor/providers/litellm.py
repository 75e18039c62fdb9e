"""LiteLLM under the governor: ``completion``/``acompletion`` through a governed client, and the proxy's hook.

Two seams, one for each way a fleet runs LiteLLM:

- In code, :class:`GovernedLiteLLM` (``litellm_client(governor=gov)``):
  its ``completion(**kwargs)`` and ``acompletion(**kwargs)`` take exactly
  ``litellm.completion``'s arguments and call it through ``Governor.call``
  (or ``AsyncGovernor.call``): a lease with the request's estimate, the
  outcome classified by the profile of the provider behind LiteLLM (its
  exceptions keep the provider's status, headers and message, so OpenAI's
  "try again in" and Google's ``retryDelay`` are read), the usage reported.
  LiteLLM's own retries are turned off (``num_retries=0``,
  ``max_retries=0``) so that the governor's are the only ones. A streamed
  call (``stream=True``) holds its lease until the stream ends and reports
  the usage of its last chunk (``stream_options={"include_usage": True}``
  is set unless given). With ``router=`` (a ``litellm.Router``) it calls
  the router's ``completion``/``acompletion`` instead, with the same
  arguments (``model`` names the router's model group): the router picks
  the deployment, the governor leases, retries and reports each call.
- On the LiteLLM proxy, :class:`GovernorHook`, a ``CustomLogger`` whose
  proxy call hooks acquire a lease before each call
  (``async_pre_call_hook``) and report it after
  (``async_post_call_success_hook``, ``async_post_call_failure_hook``,
  ``async_post_call_streaming_iterator_hook`` for streams). The proxy does
  its own retrying and fallbacks: set its ``num_retries`` to 0 for the
  governed models, or each of its retries happens under one lease.

A callback cannot acquire before a plain ``litellm.completion`` (LiteLLM's
SDK-side hooks run inside its call, where nothing may wait), so the
in-code seam is the client, as for the other SDKs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from ..budgets import Tokens
from ..classify import Verdict, default_classifier
from ..core import Outcome
from ..errors import ConfigError, GovernorError
from ..estimate import estimate_request
from ..profiles import usage_of

if TYPE_CHECKING:
    from .._async.governor import AsyncGovernor
    from .._async.lease import AsyncLease
    from .._sync.governor import Governor
    from .._sync.lease import Lease
    from ..config import RetryPolicy

log = logging.getLogger("governor")

#: the request fields of litellm.completion the estimate reads
ESTIMATED = (
    "messages",
    "prompt",
    "input",
    "system",
    "tools",
    "functions",
    "response_format",
    "max_tokens",
    "max_completion_tokens",
    "n",
)


def _litellm() -> Any:
    try:
        import litellm
    except ImportError as error:
        raise ImportError("the 'litellm' package is not installed: pip install 'fleet-governor[litellm]'") from error
    return litellm


def estimate(kwargs: dict[str, Any]) -> Tokens:
    """The tokens a ``litellm.completion`` call will take, from its arguments
    (:func:`governor.estimate.estimate_request`'s rule)."""
    return estimate_request({name: kwargs[name] for name in ESTIMATED if name in kwargs})


def litellm_client(
    governor: Governor | AsyncGovernor,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    router: Any = None,
) -> GovernedLiteLLM:
    """A :class:`GovernedLiteLLM` over ``governor`` (a Governor for
    ``completion``, an AsyncGovernor for ``acompletion``); with ``router``
    (a ``litellm.Router``), its calls go through that router."""
    return GovernedLiteLLM(governor, retry=retry, holder=holder, priority=priority, tenant=tenant, router=router)


class GovernedLiteLLM:
    """``litellm.completion`` and ``litellm.acompletion``, governed (see the module docstring)."""

    def __init__(
        self,
        governor: Governor | AsyncGovernor,
        *,
        retry: RetryPolicy | None = None,
        holder: str | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        router: Any = None,
    ) -> None:
        from .._async.governor import AsyncGovernor
        from .._sync.governor import Governor

        if not isinstance(governor, (Governor, AsyncGovernor)):
            raise ConfigError(f"governor must be a Governor or an AsyncGovernor, got {governor!r}")
        self.governor = governor
        self._retry = retry
        #: what its calls ask for (each with its own estimate)
        self._ask = governor.ask(holder, priority=priority, tenant=tenant)
        litellm = _litellm()
        if router is not None and not isinstance(router, litellm.Router):
            raise ConfigError(f"router must be a litellm.Router or None, got {router!r}")
        #: what completion() and acompletion() call: the litellm module, or the router
        self._litellm = litellm if router is None else router

    def _arguments(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        for name in ("num_retries", "max_retries"):
            if kwargs.get(name) not in (None, 0):
                raise ConfigError(
                    f"{name}={kwargs[name]!r}: the governor does the retrying; LiteLLM retries on top would be "
                    "attempts the governor never sees"
                )
        arguments = {**kwargs, "num_retries": 0, "max_retries": 0}
        if arguments.get("stream"):
            arguments.setdefault("stream_options", {"include_usage": True})
        return arguments

    def completion(self, **kwargs: Any) -> Any:
        """``litellm.completion(**kwargs)`` under a :class:`~governor.Governor`."""
        from .._sync.governor import Governor
        from .._sync.retry import retry_call

        if not isinstance(self.governor, Governor):
            raise ConfigError("completion() needs a Governor; with an AsyncGovernor, call acompletion()")
        arguments = self._arguments(kwargs)
        streamed = bool(arguments.get("stream"))

        def call() -> Any:
            result = self._litellm.completion(**arguments)
            return _SyncStream(result, self.governor) if streamed else result

        ask = self._ask.reserving(estimate(arguments))
        return retry_call(
            self.governor, call, (), {}, ask, classify=default_classifier, retry=self._retry, judge=_judge
        )

    async def acompletion(self, **kwargs: Any) -> Any:
        """``litellm.acompletion(**kwargs)`` under an :class:`~governor.AsyncGovernor`."""
        from .._async.governor import AsyncGovernor
        from .._async.retry import retry_call

        if not isinstance(self.governor, AsyncGovernor):
            raise ConfigError("acompletion() needs an AsyncGovernor; with a Governor, call completion()")
        arguments = self._arguments(kwargs)
        streamed = bool(arguments.get("stream"))

        async def call() -> Any:
            result = await self._litellm.acompletion(**arguments)
            return _AsyncStream(result, self.governor) if streamed else result

        ask = self._ask.reserving(estimate(arguments))
        return await retry_call(
            self.governor, call, (), {}, ask, classify=default_classifier, retry=self._retry, judge=_judge
        )


def _judge(result: Any, lease: Any) -> Verdict | None:
    if isinstance(result, (_SyncStream, _AsyncStream)):
        result.lease = lease  # it reports and releases when the stream ends
        return None
    return Verdict(Outcome.SUCCESS, usage=usage_of(result))


class _SyncStream:
    """LiteLLM's stream, passed through; reports once when it ends (the last
    chunk's usage), breaks off, or is closed."""

    def __init__(self, inner: Any, governor: Any) -> None:
        self._inner, self._governor = inner, governor
        self.lease: Lease | None = None
        self._usage: Tokens | None = None

    def __iter__(self) -> Iterator[Any]:
        try:
            for chunk in self._inner:
                found = usage_of(chunk)
                if found is not None:
                    self._usage = found
                yield chunk
        except GeneratorExit:
            self.close()
            raise
        except Exception as error:
            self._finish(default_classifier(error).kind)
            raise
        self._finish(Outcome.SUCCESS)

    def close(self) -> None:
        self._finish(Outcome.SUCCESS if self._usage is not None else Outcome.ERROR)

    def _finish(self, outcome: Outcome) -> None:
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            self._governor.report(outcome, None, lease, release=True, usage=self._usage)
        except GovernorError as error:  # never fails the caller's stream; the TTL frees the slot
            log.warning("governor %r: could not report a stream: %s", self._governor.name, error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _AsyncStream:
    """The asyncio twin of :class:`_SyncStream`."""

    def __init__(self, inner: Any, governor: Any) -> None:
        self._inner, self._governor = inner, governor
        self.lease: AsyncLease | None = None
        self._usage: Tokens | None = None

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for chunk in self._inner:
                found = usage_of(chunk)
                if found is not None:
                    self._usage = found
                yield chunk
        except GeneratorExit:
            raise
        except Exception as error:
            await self._finish(default_classifier(error).kind)
            raise
        await self._finish(Outcome.SUCCESS)

    async def aclose(self) -> None:
        await self._finish(Outcome.SUCCESS if self._usage is not None else Outcome.ERROR)

    async def _finish(self, outcome: Outcome) -> None:
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            await self._governor.report(outcome, None, lease, release=True, usage=self._usage)
        except GovernorError as error:
            log.warning("governor %r: could not report a stream: %s", self._governor.name, error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# -- the proxy's hook -------------------------------------------------------------------------------

#: where the hook keeps a call's lease in the proxy's request data
LEASE_KEY = "governor_lease"


def governor_hook(governor: AsyncGovernor, *, timeout: float | None = None, holder: str | None = None) -> Any:
    """A :class:`GovernorHook` (a ``litellm.integrations.custom_logger.CustomLogger``)
    for the LiteLLM proxy's ``callbacks``."""
    base = _litellm().integrations.custom_logger.CustomLogger
    cls = type("GovernorHook", (GovernorHook, base), {})
    return cls(governor, timeout=timeout, holder=holder)


class GovernorHook:
    """The proxy's call hooks: a lease per proxied call, reported with its
    outcome and usage. Built by :func:`governor_hook`, which makes it a
    ``CustomLogger`` as the proxy expects."""

    def __init__(self, governor: AsyncGovernor, *, timeout: float | None = None, holder: str | None = None) -> None:
        from .._async.governor import AsyncGovernor

        if not isinstance(governor, AsyncGovernor):
            raise ConfigError(f"the LiteLLM proxy runs on asyncio: its hook needs an AsyncGovernor, got {governor!r}")
        super().__init__()
        self.governor, self._timeout, self._holder = governor, timeout, holder

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> Any:
        if call_type not in ("completion", "acompletion", "text_completion", "embeddings", "aembedding", "responses"):
            return data
        lease = await self.governor.acquire(timeout=self._timeout, holder=self._holder, tokens=estimate(data))
        data.setdefault("metadata", {})[LEASE_KEY] = lease
        return data

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        lease = _take(data)
        if lease is not None:
            await self._report(lease, Outcome.SUCCESS, None, usage_of(response))
        return response

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> Any:
        lease = _take(request_data)
        if lease is not None:
            verdict = default_classifier(original_exception)
            await self._report(
                lease, verdict.kind, verdict.retry_after, Tokens() if verdict.kind is not Outcome.ERROR else None
            )
        return None

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncIterator[Any]:
        lease = _take(request_data)
        usage: Tokens | None = None
        outcome = Outcome.ERROR
        try:
            async for chunk in response:
                found = usage_of(chunk)
                if found is not None:
                    usage = found
                yield chunk
            outcome = Outcome.SUCCESS
        finally:
            if lease is not None:
                await self._report(lease, outcome, None, usage)

    async def _report(self, lease: Any, outcome: Outcome, retry_after: float | None, usage: Tokens | None) -> None:
        try:
            await self.governor.report(outcome, retry_after, lease, release=True, usage=usage)
        except GovernorError as error:  # the proxy's answer matters more; the TTL frees the slot
            log.warning("governor %r: could not report a proxied call: %s", self.governor.name, error)


def _take(data: dict[str, Any]) -> Any:
    metadata = data.get("metadata")
    return metadata.pop(LEASE_KEY, None) if isinstance(metadata, dict) else None


__all__ = ["LEASE_KEY", "GovernedLiteLLM", "GovernorHook", "estimate", "governor_hook", "litellm_client"]
