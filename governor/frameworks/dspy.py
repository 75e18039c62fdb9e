"""DSPy under the fleet's limit: a ``dspy.LM`` whose engines are governed clients.

``pip install 'fleet-governor[dspy]'``.

DSPy's ``dspy.LM`` sends each attempt through an engine (an object with
``complete(Request) -> Response``, ``dspy.clients.engines.base``) and keeps
its cache, history, callbacks and retries above it. :func:`lm` builds a
``dspy.LM`` whose engines send over the governed openai clients
(``openai_client(governor=)`` for the sync side, ``async_openai_client``
for the asyncio side, governor/providers): each model call of a program
(``dspy.Predict``, ``ChainOfThought``, ``ReAct``, ``acall``, ``batch``)
waits for a lease of the fleet's limit, is reported with its usage and
rate-limit headers, and a 429 holds the whole fleet for the provider's
Retry-After and is retried by the governor alone: the LM is built with
``num_retries=0`` (DSPy's retries) and the clients with ``max_retries=0``.
The request and the reply are translated by DSPy's own Chat Completions
dialect (``dspy.lm15.OpenAIChatLM``), and a provider's error that the
governor did not get past is DSPy's own (``dspy.utils.exceptions``:
``LMRateLimitError`` for a 429)::

    import dspy
    from governor import Governor
    from governor.frameworks.dspy import lm

    gov = Governor.from_url("redis://redis:6379/0", "openai")
    dspy.configure(lm=lm(gov, "gpt-4o-mini"))
    print(dspy.Predict("question -> answer")(question="2+2?").answer)

A side given no governor refuses its calls with a ConfigError. A
streamed program (``dspy.streamify``) gets the whole reply as one piece:
the engine completes the call, under its lease, before it is streamed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from .._async.governor import AsyncGovernor
from .._sync.governor import Governor
from ..config import RetryPolicy
from ..errors import ConfigError
from ..providers import async_openai_client, openai_client
from ._clients import check_governors, import_framework

import_framework("dspy", "dspy")
import dspy  # noqa: E402
from dspy import lm15  # noqa: E402

__all__ = ["AsyncGovernedEngine", "GovernedEngine", "lm"]

#: the LM's options that configure a connection: the governed client's here
CLIENT_OPTIONS = ("api_key", "api_base", "base_url", "timeout", "organization", "project", "default_headers")


class _Dialect:
    """DSPy's own Chat Completions dialect: the request's body, the reply's reading, the errors' mapping."""

    def __init__(self) -> None:
        # never sends: its transport is unused, its key a placeholder (the client's key is sent)
        self._wire = lm15.OpenAIChatLM(api_key="governed", transport=None)

    def body(self, request: Any) -> dict[str, Any]:
        model = request.model.removeprefix("openai/")
        built = self._wire.build_request(replace(request, model=model), stream=False)
        return json.loads(built.body)  # type: ignore[no-any-return]

    def reply(self, raw: Any, request: Any) -> Any:
        return lm15.response_from_openai_chat(json.loads(raw.text), model=request.model)

    def error(self, error: Exception) -> Exception:
        """The openai SDK's error as DSPy's engines raise it (a dspy.lm15 error), else itself."""
        openai = import_framework("openai", "dspy")
        if isinstance(error, openai.APIStatusError):
            mapped = self._wire.normalize_error(error.status_code, error.response.text)
            retry_after = error.response.headers.get("retry-after")
            if mapped.retry_after is None and retry_after is not None:
                try:
                    mapped.retry_after = float(retry_after)
                except ValueError:
                    pass
            mapped.status = error.status_code
            return mapped  # type: ignore[no-any-return]
        translated: Exception = error
        if isinstance(error, openai.APITimeoutError):
            translated = lm15.TimeoutError(str(error), provider="openai-chat")
        elif isinstance(error, openai.APIConnectionError):
            translated = lm15.TransportError(str(error))
        return translated


def _create(body: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments: the model and messages by name, the rest of DSPy's body as is."""
    rest = {k: v for k, v in body.items() if k not in ("model", "messages")}
    return {"model": body["model"], "messages": body["messages"], "extra_body": rest or None}


class GovernedEngine:
    """A DSPy engine (``dspy.LM(engine=...)``) whose attempts go through a governed ``openai.OpenAI``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._dialect = _Dialect()

    def complete(self, request: Any) -> Any:
        body = self._dialect.body(request)
        try:
            raw = self.client.chat.completions.with_raw_response.create(**_create(body))
        except Exception as error:
            mapped = self._dialect.error(error)
            if mapped is error:
                raise
            raise mapped from error
        return self._dialect.reply(raw, request)

    def stream(self, request: Any) -> Any:
        return lm15.response_to_events(self.complete(request))

    def close(self) -> None:
        self.client.close()


class AsyncGovernedEngine:
    """The asyncio side (``dspy.LM(async_engine=...)``), over a governed ``openai.AsyncOpenAI``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._dialect = _Dialect()

    async def complete(self, request: Any) -> Any:
        body = self._dialect.body(request)
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**_create(body))
        except Exception as error:
            mapped = self._dialect.error(error)
            if mapped is error:
                raise
            raise mapped from error
        return self._dialect.reply(raw, request)

    async def stream(self, request: Any) -> Any:
        for event in lm15.response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        await self.client.close()


def lm(
    governor: Governor | None = None,
    model: str = "gpt-4o-mini",
    *,
    async_governor: AsyncGovernor | None = None,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    client_options: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """``dspy.LM("openai/" + model, num_retries=0, **options)`` with governed
    engines: its sync calls under ``governor``, its asyncio calls
    (``acall``, ``aforward``) under ``async_governor``. ``client_options``
    are the openai clients' (``base_url``, ``api_key``, ``timeout``...;
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` as usual); ``options`` the
    LM's own (``temperature``, ``max_tokens``, ``cache``...)."""
    check_governors(governor, async_governor, "lm()")
    retries = options.pop("num_retries", 0)
    if retries not in (0, None):
        raise ConfigError(
            f"lm(num_retries={retries!r}): the governor does the retrying; DSPy's retries on top "
            "would be attempts the governor never sees"
        )
    misplaced = sorted(k for k in CLIENT_OPTIONS if k in options)
    if misplaced:
        raise ConfigError(f"lm(): {misplaced} belong to the governed client: pass them in client_options={{...}}")
    place: dict[str, Any] = {"retry": retry, "holder": holder, "priority": priority, "tenant": tenant}
    client = dict(client_options or {})
    if governor is not None:
        engine: Any = GovernedEngine(openai_client(governor, **place, **client))
    else:
        engine = _Refused("sync", "governor=")
    if async_governor is not None:
        async_engine: Any = AsyncGovernedEngine(async_openai_client(async_governor, **place, **client))
    else:
        async_engine = _AsyncRefused("asyncio", "async_governor=")
    name = model if model.startswith("openai/") else f"openai/{model}"
    return dspy.LM(name, num_retries=0, engine=engine, async_engine=async_engine, **options)


class _Refused:
    """The sync engine of an LM built without a governor for that side."""

    def __init__(self, side: str, option: str) -> None:
        self.message = f"this DSPy LM was built without a governor for its {side} calls: pass {option} to lm() too"

    def complete(self, request: Any) -> Any:
        raise ConfigError(self.message)

    def close(self) -> None:
        pass


class _AsyncRefused(_Refused):
    async def complete(self, request: Any) -> Any:  # type: ignore[override]
        raise ConfigError(self.message)

    async def aclose(self) -> None:
        pass
