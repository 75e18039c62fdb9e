"""``proxy``: the governing proxy (governor/proxy.py) for any tool in any language."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Coroutine
from typing import Any

import click

from ..config import RetryPolicy
from ..proxy import DEFAULT_PORT, SHAPES, TOKEN_HEADER, GoverningProxy, ProxyConfig, Route
from .app import App, command, fail, global_options, pass_app, safe_url

TOKEN_ENV = "GOVERNOR_PROXY_TOKEN"


@command()
@click.option("--openai", "openai_name", metavar="NAME", help="Serve /openai/ under the governor NAME.")
@click.option("--anthropic", "anthropic_name", metavar="NAME", help="Serve /anthropic/ under the governor NAME.")
@click.option(
    "--openai-upstream",
    metavar="URL",
    default=SHAPES["openai"],
    show_default=True,
    help="Where /openai/<path> goes (an OpenAI-compatible API).",
)
@click.option(
    "--anthropic-upstream",
    metavar="URL",
    default=SHAPES["anthropic"],
    show_default=True,
    help="Where /anthropic/<path> goes.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help=f"Address to listen on; beyond loopback a token is required (env {TOKEN_ENV}).",
)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=DEFAULT_PORT, show_default=True)
@click.option("--priority", metavar="CLASS", help="The class a request waits in without x-governor-priority.")
@click.option("--tenant", metavar="TENANT", help="The tenant of a request without x-governor-tenant.")
@click.option(
    "--queue-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds a request may wait for its lease before a 429.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=RetryPolicy().max_attempts,
    show_default=True,
    help="Attempts of a throttled request, the first included.",
)
@global_options()
@pass_app
def proxy(
    app: App,
    openai_name: str | None,
    anthropic_name: str | None,
    openai_upstream: str,
    anthropic_upstream: str,
    host: str,
    port: int,
    priority: str | None,
    tenant: str | None,
    queue_timeout: float,
    max_attempts: int,
) -> None:
    """Serve the OpenAI and Anthropic APIs on a local port, each request under the fleet's limit.

    \b
    Point any tool at it:
      OPENAI_BASE_URL=http://127.0.0.1:8788/openai/v1
      ANTHROPIC_BASE_URL=http://127.0.0.1:8788/anthropic
    A request's x-governor-priority and x-governor-tenant headers choose
    where it waits. The callers' own API keys go upstream untouched."""
    if app.json:
        raise click.UsageError("the proxy serves HTTP; it has no --json")
    routes = []
    if openai_name:
        routes.append(Route("openai", openai_name, openai_upstream))
    if anthropic_name:
        routes.append(Route("anthropic", anthropic_name, anthropic_upstream))
    if not routes:
        raise click.UsageError("which governors? Pass --openai NAME and/or --anthropic NAME")
    config = ProxyConfig(
        tuple(routes),
        host=host,
        port=port,
        token=os.environ.get(TOKEN_ENV) or None,
        priority=priority,
        tenant=tenant,
        queue_timeout=queue_timeout,
        retry=RetryPolicy(max_attempts=max_attempts),
        governor=app.config(),
    )
    try:
        import aiohttp  # noqa: F401
        import httpx  # noqa: F401
        import httpx_aiohttp  # noqa: F401
    except ImportError as error:
        fail(f"the proxy needs aiohttp, httpx and httpx-aiohttp ({error}): pip install 'fleet-governor[proxy]'")
    try:
        _run(_serve(config, app.url))
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error}")


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run the proxy on uvloop where it is installed (the proxy extra brings it
    on Linux and macOS: a faster loop for the HTTP server), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


async def _serve(config: ProxyConfig, url: str) -> None:
    server = GoverningProxy(config, url)
    base = await server.start()
    try:
        for route in config.routes:
            path = "/openai/v1" if route.shape == "openai" else "/anthropic"
            click.echo(f"{route.shape}: {base}{path} -> {route.upstream} under governor {route.governor!r}", err=True)
        guard = f", token required in {TOKEN_HEADER}" if config.token else ""
        click.echo(f"serving on {base} (Redis {safe_url(url)}{guard}); Ctrl-C stops", err=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await server.stop()


COMMANDS = (proxy,)
