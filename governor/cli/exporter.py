"""``exporter``: Prometheus metrics of one, several or all governors (governor.metrics)."""

from __future__ import annotations

import signal
import threading

import click

from ..protocol import governor_keys
from .app import App, command, fail, global_options, pass_app, safe_url
from .render import TOP_TENANTS

DEFAULT_EXPORTER_PORT = 9733


@command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=DEFAULT_EXPORTER_PORT, show_default=True)
@click.option(
    "--addr",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on: 127.0.0.1 serves this machine only; 0.0.0.0 every interface (a container, a LAN).",
)
@click.option(
    "--name", "-n", "names", multiple=True, help="A governor to export (repeatable; default: the global --name)."
)
@click.option("--all", "all_", is_flag=True, help="Export every governor in the Redis (found on each scrape).")
@click.option(
    "--top-tenants",
    type=click.IntRange(min=0, max=1000),
    default=TOP_TENANTS,
    show_default=True,
    help='Tenants exported by name per governor (the most in flight + queued); the rest as tenant="(other)".',
)
@global_options(name=False)
@pass_app
def exporter(app: App, port: int, addr: str, names: tuple[str, ...], all_: bool, top_tenants: int) -> None:
    """Serve Prometheus metrics of one, several or all governors on /metrics.

    In flight and queued per priority class and per tenant are counted on
    each scrape from the leases and the queue; the tenant label is bounded
    by --top-tenants."""
    if app.json:
        raise click.UsageError("the exporter serves Prometheus text; it has no --json")
    if all_ and names:
        raise click.UsageError("give --name or --all, not both")
    chosen: list[str] | None = None
    if not all_:
        chosen = list(names) or ([app.name] if app.name else [])
        if not chosen:
            raise click.UsageError("which governors? Pass --name NAME (repeatable) or --all")
        for name in chosen:
            governor_keys(name, app.prefix)  # a bad name fails now, not on every scrape
    try:
        import prometheus_client  # noqa: F401

        from ..metrics import start_exporter
    except ImportError as error:
        fail(
            f"the exporter needs prometheus_client ({error}): pip install prometheus-client "
            "(the metrics extra; docs/install.md)"
        )
    # Redis is not checked here: an exporter may start before Redis, and
    # each scrape reports an unreadable governor as governor_up 0.
    try:
        server, _thread = start_exporter(
            app.client(), chosen, port=port, addr=addr, prefix=app.prefix, top_tenants=top_tenants
        )
    except OSError as error:
        fail(f"cannot listen on {addr}:{port}: {error}")
    what = "every governor" if chosen is None else ", ".join(chosen)
    click.echo(
        f"serving /metrics for {what} on http://{addr}:{server.server_port} (Redis {safe_url(app.url)})", err=True
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()


COMMANDS = (exporter,)
