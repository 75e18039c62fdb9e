"""Official provider SDK clients with their own retries off, governed or not.

The ``openai`` and ``anthropic`` SDKs retry 429s and 5xx by themselves
(twice by default, on their own backoff). Under the governor that stacks
two retry loops: each SDK retry is an attempt the governor never sees (no
report, no lease), so the fleet's capacity is not cut, the provider's
Retry-After does not hold the other hosts, and every worker retries on the
same schedule as its neighbours. Every client built here has
``max_retries=0``; the governor does the retrying, once, with the fleet's
knowledge. Two ways to use them:

With ``governor=``, every model request of the client is governed with no
change at the call site (governor/transport.py): the client's HTTP client
is the SDK's own default one (its timeout, connection limits and
redirects) over a :class:`~governor.transport.GovernedTransport` (an
:class:`~governor.transport.AsyncGovernedTransport` for the async
clients), which acquires a lease with the request's token estimate,
reports the response with its usage and rate-limit headers, and retries
throttled requests::

    from governor import Governor
    from governor.providers import openai_client

    gov = Governor.from_url("redis://localhost:6379/0", "openai")
    client = openai_client(governor=gov)
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=[...])

``retry=`` (a :class:`~governor.config.RetryPolicy`) and ``holder=`` (the
leases' label) go to the transport. Such a client builds its own HTTP
client, so ``http_client=`` is refused with it (a ConfigError): to govern a
client of your own make, wrap its transport yourself,
``http_client=httpx2.Client(transport=GovernedTransport(gov, httpx2.HTTPTransport(...)))``
(httpx for an SDK that still uses httpx; the transport works with both).

Without ``governor=``, exactly the SDK's client with ``max_retries=0``, for
use under ``Governor.call``::

    client = openai_client()  # OpenAI(max_retries=0), other options as usual
    reply = gov.call(client.chat.completions.create, model="gpt-4o-mini", messages=[...])

The same by hand: ``OpenAI(max_retries=0)``, ``Anthropic(max_retries=0)``
(and their Async twins), or ``client.with_options(max_retries=0)`` for a
client made elsewhere, which is what :func:`without_retries` does.

The other providers, each under its profile (governor/profiles/):

- :func:`azure_openai_client` / :func:`async_azure_openai_client`: Azure
  OpenAI (``x-ms-retry-after-ms``; its ``-1``/``0`` headers are no figure).
- :func:`gemini_client`: ``google.genai.Client`` for the Gemini API or
  Vertex AI (``vertexai=True``): the SDK's own HTTP clients over the
  governed transport; a Governor governs ``client.models``, an
  AsyncGovernor ``client.aio.models``. The SDK's retries are off by default
  and ``http_options.retry_options`` is refused.
- :func:`governor.providers.bedrock.bedrock_client`: boto3's
  ``bedrock-runtime`` client, governed through botocore's ``before-send``
  event, boto3's retries cut to one attempt.
- :func:`governor.providers.litellm.litellm_client`: ``completion`` and
  ``acompletion`` of LiteLLM through the governor;
  :func:`governor.providers.litellm.governor_hook` for the LiteLLM proxy.

A governor error raised inside an SDK's transport (an acquire timeout,
Redis unreachable, an unknown priority class) reaches the caller as that
error through every client; the anthropic SDK, which wraps every other
exception of its transport as ``APIConnectionError``, gets an instance of a
subclass of both the governor error and ``anthropic.AnthropicError``
(:func:`governor.transport.sdk_twin`).

The SDKs are imported when one of these functions is called, never on
``import governor``; they come with the extras ``providers`` (openai,
anthropic), ``gemini``, ``bedrock`` and ``litellm``.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigError

if TYPE_CHECKING:
    from anthropic import Anthropic, AsyncAnthropic
    from google.genai import Client as GenaiClient
    from openai import AsyncAzureOpenAI, AsyncOpenAI, AzureOpenAI, OpenAI

    from .._async.governor import AsyncGovernor
    from .._sync.governor import Governor
    from ..config import RetryPolicy
    from ..replies import Ask

C = TypeVar("C")

#: the HTTP libraries an SDK may be built on
HTTP_LIBRARIES = ("httpx", "httpx2")


def without_retries(client: C) -> C:
    """A copy of an SDK client (openai or anthropic, sync or async) that
    never retries by itself; the original is left as it was."""
    with_options = getattr(client, "with_options", None)
    if not callable(with_options) or not hasattr(client, "max_retries"):
        raise ConfigError(
            f"without_retries() needs an openai or anthropic client (with max_retries and with_options), got {client!r}"
        )
    copy: C = with_options(max_retries=0)
    return copy


def openai_client(
    governor: Governor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> OpenAI:
    """``openai.OpenAI(**options)`` with ``max_retries=0``; with ``governor=``,
    every model request governed (see the module docstring)."""
    return _build("openai", "OpenAI", options, False, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def async_openai_client(
    governor: AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> AsyncOpenAI:
    """``openai.AsyncOpenAI(**options)`` with ``max_retries=0``; with an
    AsyncGovernor as ``governor=``, every model request governed."""
    return _build("openai", "AsyncOpenAI", options, True, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def anthropic_client(
    governor: Governor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> Anthropic:
    """``anthropic.Anthropic(**options)`` with ``max_retries=0``; with
    ``governor=``, every model request governed."""
    return _build("anthropic", "Anthropic", options, False, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def azure_openai_client(
    governor: Governor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> AzureOpenAI:
    """``openai.AzureOpenAI(**options)`` with ``max_retries=0``; with
    ``governor=``, every model request governed under Azure's profile
    (``x-ms-retry-after-ms``, its ``-1``/``0`` headers read as no figure)."""
    return _build("openai", "AzureOpenAI", options, False, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def async_azure_openai_client(
    governor: AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> AsyncAzureOpenAI:
    """``openai.AsyncAzureOpenAI(**options)`` with ``max_retries=0``; with an
    AsyncGovernor as ``governor=``, every model request governed."""
    return _build("openai", "AsyncAzureOpenAI", options, True, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def gemini_client(
    governor: Governor | AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    http_options: Any = None,
    **options: Any,
) -> GenaiClient:
    """``google.genai.Client(**options)`` (the Gemini API, or Vertex AI with
    ``vertexai=True``) with the SDK's own retries off (its default); with
    ``governor=``, every model request governed under the Gemini (or Vertex)
    profile: a :class:`~governor.Governor` governs the client's sync calls
    (``client.models...``), an :class:`~governor.AsyncGovernor` its asyncio
    ones (``client.aio.models...``). ``http_options`` (a ``types.HttpOptions``
    or its dict) keeps its other settings (``base_url``, ``api_version``,
    ``headers``, ``timeout``); its ``retry_options`` are refused, as
    ``max_retries`` is for the other SDKs."""
    genai = _import("google.genai", "gemini")
    types = importlib.import_module("google.genai.types")
    governing = _governing(governor, retry, holder, priority, tenant)
    settings = (
        dict(http_options or {})
        if not isinstance(http_options, types.HttpOptions)
        else (http_options.model_dump(exclude_none=True))
    )
    if settings.get("retry_options") is not None:
        raise ConfigError(
            "http_options.retry_options: the governor does the retrying; SDK retries on top would be "
            "attempts the governor never sees. Build the client yourself if you really want them."
        )
    if governing is not None:
        for name in ("httpx_client", "httpx_async_client", "aiohttp_client", "client_args", "async_client_args"):
            if settings.get(name) is not None:
                raise ConfigError(
                    f"gemini_client(governor=...) builds its own HTTP clients over the governed transport; "
                    f"http_options.{name} cannot be given with it"
                )
        vertex = bool(options.get("vertexai") or options.get("enterprise"))
        # The SDK builds (and closes) its clients over the governed transport; the transport
        # makes its inner one of the library the SDK picked.
        asynchronous = _is_async(governing.governor)
        transport = governing.transport(asynchronous, profile="vertex" if vertex else "gemini")
        settings["async_client_args" if asynchronous else "client_args"] = {"transport": transport}
    return genai.Client(http_options=types.HttpOptions(**settings), **options)  # type: ignore[no-any-return]


def _is_async(governor: Any) -> bool:
    from .._async.governor import AsyncGovernor
    from .._sync.governor import Governor

    if isinstance(governor, AsyncGovernor):
        return True
    if isinstance(governor, Governor):
        return False
    raise ConfigError(f"governor must be a Governor or an AsyncGovernor, got {governor!r}")


def _import(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"the {module!r} package is not installed: pip install 'fleet-governor[{extra}]'") from error


def async_anthropic_client(
    governor: AsyncGovernor | None = None,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    **options: Any,
) -> AsyncAnthropic:
    """``anthropic.AsyncAnthropic(**options)`` with ``max_retries=0``; with
    an AsyncGovernor as ``governor=``, every model request governed."""
    return _build("anthropic", "AsyncAnthropic", options, True, _governing(governor, retry, holder, priority, tenant))  # type: ignore[no-any-return]


def _governing(
    governor: Any, retry: RetryPolicy | None, holder: str | None, priority: str | None, tenant: str | None
) -> _Governing | None:
    """A client's governing (None without ``governor=``): its ask built and checked once, here."""
    if governor is None:
        if any(v is not None for v in (retry, holder, priority, tenant)):
            raise ConfigError(
                "retry=, holder=, priority= and tenant= are options of the governed transport: pass governor= too"
            )
        return None
    _is_async(governor)  # a ConfigError for anything else
    return _Governing(governor, retry, governor.ask(holder, priority=priority, tenant=tenant))


@dataclass(frozen=True)
class _Governing:
    """What governs a client's transport: the governor, its retry policy and what every request asks for."""

    governor: Any
    retry: RetryPolicy | None
    ask: Ask

    def transport(self, asynchronous: bool, inner: Any = None, **options: Any) -> Any:
        """A governed transport over ``inner`` (for an asyncio client or a sync one)."""
        from ..transport import AsyncGovernedTransport, GovernedTransport

        kind = AsyncGovernedTransport if asynchronous else GovernedTransport
        return kind(self.governor, inner, retry=self.retry, ask=self.ask, **options)


def _build(
    module_name: str, class_name: str, options: dict[str, Any], asynchronous: bool, governing: _Governing | None
) -> Any:
    retries = options.pop("max_retries", 0)
    if retries != 0:
        raise ConfigError(
            f"max_retries={retries!r}: the governor does the retrying; SDK retries on top would be "
            "attempts the governor never sees. Build the client yourself if you really want them."
        )
    if governing is not None and options.get("http_client") is not None:
        raise ConfigError(
            f"{class_name.lower()}_client(governor=...) builds its own http_client over the governed transport; "
            "to govern an http_client of your own, give it transport=GovernedTransport(governor, <its transport>)"
        )
    module = _import(module_name, "providers")
    if governing is not None:
        extra: dict[str, Any] = {"profile": "azure" if "Azure" in class_name else module_name}
        if module_name == "anthropic":  # it wraps every other exception of its transport as APIConnectionError
            extra["errors"] = module.AnthropicError
        options["http_client"] = _governed_http_client(module, asynchronous, governing, extra)
    return getattr(module, class_name)(max_retries=0, **options)


def _governed_http_client(sdk: Any, asynchronous: bool, governing: _Governing, extra: dict[str, Any]) -> Any:
    """The SDK's own default HTTP client (its timeout, limits, redirects) over
    a governed transport of the HTTP library the SDK is built on."""
    client_class = sdk.DefaultAsyncHttpxClient if asynchronous else sdk.DefaultHttpxClient
    library = importlib.import_module(_library_of(client_class))
    limits = getattr(sdk, "DEFAULT_CONNECTION_LIMITS", None)
    transport_options = {} if limits is None else {"limits": limits}
    inner = (library.AsyncHTTPTransport if asynchronous else library.HTTPTransport)(**transport_options)
    return client_class(transport=governing.transport(asynchronous, inner, **extra))


def _library_of(client_class: type) -> str:
    """httpx or httpx2: the library whose Client the SDK's default client is."""
    for cls in client_class.__mro__:
        root = cls.__module__.partition(".")[0]
        if root in HTTP_LIBRARIES:
            return root
    raise ConfigError(f"{client_class!r} is no httpx or httpx2 client: this SDK version is not supported")
