"""A governing proxy: any tool in any language joins the fleet by its base-URL setting.

``governor proxy`` (governor/cli/proxy.py) serves the OpenAI- and
Anthropic-shaped HTTP APIs on a local port and forwards each request to the
provider through the governed transport (governor/_async/transport.py), so a
coding agent, a CLI or a program in any language, pointed at the proxy by
``OPENAI_BASE_URL`` or ``ANTHROPIC_BASE_URL``, waits for the fleet's lease
with no change to its code::

    OPENAI_BASE_URL=http://127.0.0.1:8788/openai/v1
    ANTHROPIC_BASE_URL=http://127.0.0.1:8788/anthropic

Each route has its own governor (one provider account's limit): a request to
``/openai/<path>`` goes to ``<openai upstream>/<path>`` under the OpenAI
route's governor, ``/anthropic/<path>`` to the Anthropic upstream under its
own. What the transport does to a model request (a POST to a model endpoint)
is what it does for the SDK clients of :mod:`governor.providers`: a lease
acquired with the body's token estimate, the response reported with its usage
and rate-limit headers, a throttle (429, 529, an overload) held fleet-wide for
the provider's Retry-After and retried, the last answer passed on when the
attempts run out. A stream passes through chunk by chunk, its lease held until
its last byte is written to the client (or the client goes away). Other
requests (``GET /models``...) pass through ungoverned.

The proxy's credentials are the caller's: the ``Authorization`` or
``x-api-key`` header a tool sends goes upstream untouched. Where a request
waits: its ``x-governor-priority`` and ``x-governor-tenant`` headers (taken off
before it goes upstream), else the proxy's ``priority`` and ``tenant``.

The governor's own refusals come back in the provider's error shape, with a
``Retry-After``, so the caller's SDK treats them as it treats the provider's:
no lease within ``queue_timeout`` (a full fleet, a paused governor) is a 429
``rate_limit_error``; a used-up quota a 429 ``insufficient_quota`` (OpenAI)
or a 400 ``billing_error`` (Anthropic); Redis unreachable a 503; an unknown
priority class or a bad tenant a 400; the upstream unreachable a 502.

Served on loopback by default. Bound to any other address, the proxy needs a
shared ``token``: every request then carries it in ``x-governor-token`` (taken
off before it goes upstream), or is refused with a 401.

The HTTP server is aiohttp's; upstream, each request goes straight to the
governed transport as an httpx request (no client layer: no cookies, no
redirects), sent by aiohttp's client behind httpx's transport interface
(httpx-aiohttp). All from the ``proxy`` extra (``pip install
'fleet-governor[proxy]'``), with uvloop as the event loop where it installs
(``governor proxy`` runs on it when it is there).
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ._async.governor import AsyncGovernor
from .config import GovernorConfig, RetryPolicy
from .errors import AcquireTimeout, ConfigError, GovernorError, GovernorUnavailable, QuotaExhausted
from .protocol import governor_keys
from .transport import PRIORITY_HEADER, TENANT_HEADER, AsyncGovernedTransport

__all__ = [
    "DEFAULT_PORT",
    "PRIORITY_HEADER",
    "SHAPES",
    "TENANT_HEADER",
    "TOKEN_HEADER",
    "GoverningProxy",
    "ProxyConfig",
    "Route",
    "error_body",
]

#: the port ``governor proxy`` listens on by default
DEFAULT_PORT = 8788
#: the header carrying the shared token (required when the proxy is bound beyond loopback)
TOKEN_HEADER = "x-governor-token"
#: the API shapes a route may speak, and each one's default upstream
SHAPES: Mapping[str, str] = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com"}
#: the Retry-After (seconds) of the proxy's own refusals that have no figure of their own
BUSY_RETRY_AFTER = 1

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass(frozen=True)
class Route:
    """One provider account behind the proxy: requests to ``/<shape>/...`` go to
    ``upstream`` under the governor ``governor`` (its name in Redis)."""

    shape: str
    governor: str
    upstream: str = ""

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ConfigError(f"a route's shape is one of {', '.join(SHAPES)}, got {self.shape!r}")
        if not isinstance(self.governor, str) or not self.governor:
            raise ConfigError(f"the {self.shape} route needs a governor name, got {self.governor!r}")
        upstream = self.upstream or SHAPES[self.shape]
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ConfigError(
                f"the {self.shape} upstream must be an http(s) URL such as {SHAPES[self.shape]}, got {upstream!r}"
            )
        object.__setattr__(self, "upstream", upstream.rstrip("/"))


@dataclass(frozen=True)
class ProxyConfig:
    """What a governing proxy serves, and how.

    ``routes``: one :class:`Route` per provider shape (at most one each).
    ``host``/``port``: where it listens (port 0: a free one). ``token``: the
    shared token, required when ``host`` is not a loopback address.
    ``priority``/``tenant``: where a request without the headers waits.
    ``queue_timeout``: seconds a request may wait for its lease before the
    proxy answers 429 (None: as long as it takes). ``retry``: the governor's
    retries of a throttled request. ``upstream_timeout``: seconds without a
    byte from the provider before the request fails (a stream's gaps
    included). ``governor``: the routes' governors' config (key prefix, Redis
    timeout; what a new governor state starts with)."""

    routes: tuple[Route, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    priority: str | None = None
    tenant: str | None = None
    queue_timeout: float | None = 300.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    upstream_timeout: float = 600.0
    governor: GovernorConfig = field(default_factory=GovernorConfig)

    def __post_init__(self) -> None:
        routes = tuple(self.routes)
        if not routes or not all(isinstance(r, Route) for r in routes):
            raise ConfigError(f"a proxy needs at least one Route (openai, anthropic), got {self.routes!r}")
        shapes = [r.shape for r in routes]
        if len(set(shapes)) != len(shapes):
            raise ConfigError(f"one route per shape, got {', '.join(shapes)}")
        object.__setattr__(self, "routes", routes)
        if not isinstance(self.governor, GovernorConfig):
            raise ConfigError(f"governor must be a GovernorConfig, got {self.governor!r}")
        for route in routes:
            governor_keys(route.governor, self.governor.key_prefix)  # ConfigError: a bad name or prefix
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port!r}")
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < 16):
            raise ConfigError(
                "the proxy's token must be a string of at least 16 characters (say, `openssl rand -hex 16`)"
            )
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(
                f"the proxy is bound to {self.host!r}, beyond this machine: give it a shared token "
                "(GOVERNOR_PROXY_TOKEN) that every caller sends in x-governor-token, or bind it to 127.0.0.1"
            )
        for name in ("priority", "tenant"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{name} must be a non-empty string or None, got {value!r}")
        for name, value, optional in (
            ("queue_timeout", self.queue_timeout, True),
            ("upstream_timeout", self.upstream_timeout, False),
        ):
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be seconds > 0, got {value!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"retry must be a RetryPolicy, got {self.retry!r}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- the provider's error shapes ----------------------------------------------------------------

#: (shape, kind) -> (status, error type, code)
_KINDS: Mapping[tuple[str, str], tuple[int, str, str | None]] = {
    ("openai", "busy"): (429, "rate_limit_error", "rate_limit_exceeded"),
    ("anthropic", "busy"): (429, "rate_limit_error", None),
    ("openai", "quota"): (429, "insufficient_quota", "insufficient_quota"),
    ("anthropic", "quota"): (400, "billing_error", None),
    ("openai", "unavailable"): (503, "server_error", "governor_unavailable"),
    ("anthropic", "unavailable"): (503, "api_error", None),
    ("openai", "invalid"): (400, "invalid_request_error", "invalid_governor_header"),
    ("anthropic", "invalid"): (400, "invalid_request_error", None),
    ("openai", "unauthorized"): (401, "invalid_request_error", "invalid_governor_token"),
    ("anthropic", "unauthorized"): (401, "authentication_error", None),
    ("openai", "upstream"): (502, "server_error", "upstream_unreachable"),
    ("anthropic", "upstream"): (502, "api_error", None),
    ("openai", "not_found"): (404, "invalid_request_error", "unknown_route"),
    ("anthropic", "not_found"): (404, "not_found_error", None),
}


def error_body(shape: str, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of an error in the provider's own shape: OpenAI's
    ``{"error": {message, type, code}}``, Anthropic's ``{"type": "error", "error": {type, message}}``."""
    status, kind_name, code = _KINDS[(shape, kind)]
    if shape == "anthropic":
        return status, {"type": "error", "error": {"type": kind_name, "message": message}}
    return status, {"error": {"message": message, "type": kind_name, "param": None, "code": code}}


def _refusal(error: GovernorError, queue_timeout: float | None) -> tuple[str, str, float | None]:
    """(kind, message, Retry-After seconds or None) of a governor error."""
    if isinstance(error, AcquireTimeout):
        waited = "" if queue_timeout is None else f" within {queue_timeout:g} s"
        return "busy", f"fleet-governor: no slot of the fleet's limit came free{waited}; retry later", BUSY_RETRY_AFTER
    if isinstance(error, QuotaExhausted):
        after = None if error.until is None else max(1.0, error.until - time.time())
        return "quota", f"fleet-governor: the account's quota is used up: {error}", after
    if isinstance(error, ConfigError):
        return "invalid", f"fleet-governor: {error}", None
    if isinstance(error, GovernorUnavailable):
        return "unavailable", f"fleet-governor: the fleet's Redis is unreachable: {error}", BUSY_RETRY_AFTER
    return "unavailable", f"fleet-governor: {error}", BUSY_RETRY_AFTER


def _upstream_transport() -> Any:
    """The transport that sends upstream: aiohttp's client (its C HTTP parser,
    one pool of kept-alive connections, no cap on how many: the governor is
    the limit) behind httpx's transport interface (httpx-aiohttp), the bytes
    passed on as they come (no decompression)."""
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    def session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False, skip_auto_headers=("Accept-Encoding",)
        )

    return AiohttpTransport(client=session)


# -- the server -----------------------------------------------------------------------------------


class GoverningProxy:
    """The proxy's server: :meth:`start` serves on ``config.host:config.port``
    on the running event loop; :meth:`stop` closes the server, the upstream
    clients and the governors. One per process (its governors are asyncio's)."""

    def __init__(self, config: ProxyConfig, redis_url: str) -> None:
        if not isinstance(config, ProxyConfig):
            raise ConfigError(f"GoverningProxy needs a ProxyConfig, got {config!r}")
        self.config = config
        self._redis_url = redis_url
        self._holder = f"proxy@{socket.gethostname()}:{os.getpid()}"
        self._routes: dict[str, tuple[Route, AsyncGovernor, Any]] = {}
        self._runner: Any = None
        self._token = config.token.encode() if config.token is not None else None
        wait, connect = config.upstream_timeout, min(30.0, config.upstream_timeout)
        #: the upstream's timeouts, where an httpx transport reads them (a request's extensions)
        self._timeouts = {"timeout": {"connect": connect, "read": wait, "write": wait, "pool": wait}}
        self.url: str | None = None

    async def start(self) -> str:
        """Serve; returns the base URL (``http://host:port``)."""
        from aiohttp import web

        config = self.config
        try:
            for route in config.routes:
                gov = AsyncGovernor.from_url(self._redis_url, route.governor, config.governor)
                transport = AsyncGovernedTransport(
                    gov,
                    _upstream_transport(),
                    retry=config.retry,
                    holder=self._holder,
                    timeout=config.queue_timeout,
                    priority=config.priority,
                    tenant=config.tenant,
                )
                self._routes[route.shape] = (route, gov, transport)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_get("/healthz", self._health)
            app.router.add_route("*", "/{shape}/{tail:.*}", self._forward)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
            await self._runner.setup()
            site = web.TCPSite(self._runner, config.host, config.port, backlog=1024)
            await site.start()
        except BaseException:
            await self.stop()
            raise
        host, port = self._runner.addresses[0][:2]
        host = f"[{host}]" if ":" in host else host
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        routes, self._routes = self._routes, {}
        for _route, gov, transport in routes.values():
            await transport.aclose()
            await gov.aclose()

    async def __aenter__(self) -> GoverningProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"ok": True, "routes": sorted(self._routes)})

    def _error(self, shape: str, kind: str, message: str, retry_after: float | None = None) -> Any:
        from aiohttp import web

        status, body = error_body(shape if shape in SHAPES else "openai", kind, message)
        headers = {} if retry_after is None else {"retry-after": str(max(1, math.ceil(retry_after)))}
        return web.json_response(body, status=status, headers=headers)

    async def _forward(self, request: Any) -> Any:
        import httpx
        from aiohttp import web

        shape = request.match_info["shape"]
        if self._token is not None:
            given = request.headers.get(TOKEN_HEADER, "").encode()
            if not hmac.compare_digest(given, self._token):
                return self._error(
                    shape, "unauthorized", f"fleet-governor: this proxy needs its token in {TOKEN_HEADER}"
                )
        entry = self._routes.get(shape)
        if entry is None:
            served = ", ".join(f"/{s}/" for s in sorted(self._routes))
            return self._error(shape, "not_found", f"fleet-governor: this proxy serves {served}, not /{shape}/")
        route, _gov, transport = entry
        url = f"{route.upstream}/{request.match_info['tail']}"
        if request.query_string:
            url += "?" + request.query_string
        headers = [
            (k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() != TOKEN_HEADER
        ]
        body = await request.read()
        upstream = httpx.Request(request.method, url, headers=headers, content=body, extensions=self._timeouts)
        try:
            response = await transport.handle_async_request(upstream)
        except GovernorError as error:
            kind, message, retry_after = _refusal(error, self.config.queue_timeout)
            return self._error(shape, kind, message, retry_after)
        except httpx.HTTPError as error:
            return self._error(shape, "upstream", f"fleet-governor: the upstream {route.upstream} failed: {error!r}")
        try:
            out = web.StreamResponse(status=response.status_code, reason=response.reason_phrase or None)
            for name, value in response.headers.multi_items():
                if name.lower() not in _HOP_BY_HOP:
                    out.headers.add(name, value)
            length = response.headers.get("content-length")
            if length is not None and length.isdigit():
                out.content_length = int(length)
            await out.prepare(request)
            async for chunk in response.aiter_raw():
                await out.write(chunk)
            await out.write_eof()
            return out
        finally:  # the last byte written, or the caller gone: the stream reports and its lease goes
            await response.aclose()
