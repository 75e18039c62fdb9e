"""What the framework adapters share: an SDK's HTTP client over the governed transport.

A framework that takes an SDK client or an HTTP client for its model gets
one of these: the SDK's own default HTTP client (``DefaultHttpxClient``:
its timeout, connection limits, redirects) over a
:class:`~governor.transport.GovernedTransport` (an
:class:`~governor.transport.AsyncGovernedTransport` for the asyncio side)
of the HTTP library the SDK is built on (httpx or httpx2). A framework
model has a sync and an asyncio side; a side given no governor gets a
client that refuses every request with a ConfigError naming the missing
governor, never an ungoverned one.
"""

from __future__ import annotations

import importlib
from typing import Any

from .._async.governor import AsyncGovernor
from .._sync.governor import Governor
from ..config import RetryPolicy
from ..errors import ConfigError
from ..transport import LIBRARIES, AsyncGovernedTransport, GovernedTransport


def import_framework(module: str, extra: str) -> Any:
    """``module``, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"the {module!r} package is not installed: pip install 'fleet-governor[{extra}]'") from error


def check_governors(sync: Any, asynchronous: Any, what: str) -> None:
    """A Governor for the sync side and an AsyncGovernor for the asyncio side, at least one."""
    if sync is None and asynchronous is None:
        raise ConfigError(f"{what} needs governor= (a Governor) or async_governor= (an AsyncGovernor), or both")
    if sync is not None and not isinstance(sync, Governor):
        raise ConfigError(f"governor= must be a Governor (the sync side), got {sync!r}")
    if asynchronous is not None and not isinstance(asynchronous, AsyncGovernor):
        raise ConfigError(f"async_governor= must be an AsyncGovernor (the asyncio side), got {asynchronous!r}")


def library_of(client_class: type) -> Any:
    """The httpx or httpx2 module whose Client ``client_class`` is."""
    for cls in client_class.__mro__:
        root = cls.__module__.partition(".")[0]
        if root in LIBRARIES:
            return importlib.import_module(root)
    raise ConfigError(f"{client_class!r} is no httpx or httpx2 client: this SDK version is not supported")


class _Refused:
    """The transport of a side that has no governor: every request is refused."""

    def __init__(self, message: str) -> None:
        self._message = message

    def handle_request(self, request: Any) -> Any:
        raise ConfigError(self._message)

    async def handle_async_request(self, request: Any) -> Any:
        raise ConfigError(self._message)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def sdk_http_client(
    sdk: Any,
    governor: Governor | AsyncGovernor | None,
    asynchronous: bool,
    *,
    retry: RetryPolicy | None = None,
    holder: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    what: str = "this model",
) -> Any:
    """The ``sdk`` module's (openai, anthropic) default HTTP client for one
    side (``asynchronous``) over a transport governed by ``governor``."""
    client_class = sdk.DefaultAsyncHttpxClient if asynchronous else sdk.DefaultHttpxClient
    if governor is None:
        side, option = ("asyncio", "async_governor=") if asynchronous else ("sync", "governor=")
        refused = _Refused(f"{what} was built without a governor for its {side} calls: pass {option} too")
        return client_class(transport=refused)
    library = library_of(client_class)
    limits = getattr(sdk, "DEFAULT_CONNECTION_LIMITS", None)
    options = {} if limits is None else {"limits": limits}
    place: dict[str, Any] = {
        "retry": retry,
        "holder": holder,
        "priority": priority,
        "tenant": tenant,
        "profile": sdk.__name__,
    }
    if sdk.__name__ == "anthropic":  # it wraps every other exception of its transport as APIConnectionError
        place["errors"] = sdk.AnthropicError
    if asynchronous:
        assert isinstance(governor, AsyncGovernor)
        governed: Any = AsyncGovernedTransport(governor, library.AsyncHTTPTransport(**options), **place)
    else:
        assert isinstance(governor, Governor)
        governed = GovernedTransport(governor, library.HTTPTransport(**options), **place)
    return client_class(transport=governed)
