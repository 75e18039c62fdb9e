"""The ``governor`` command: see and steer the governors of a fleet.

One thin subcommand per operation, each a call into the library: reads go
through :mod:`governor.views` and ``Governor.status(create=False)`` (so
looking never creates a governor), writes through the Governor API. Why a
caller waits is the scripts' answer (``Status.blocked``), shown as given.
Every read command takes ``--json``. ``--url`` and ``--name`` also come
from ``GOVERNOR_REDIS_URL`` and ``GOVERNOR_NAME``.

The commands, by family: :mod:`.status` (status, list, watch),
:mod:`.listing` (leases, queue, events), :mod:`.keys` (keys),
:mod:`.control` (set-max, pause, resume, reset, configure, set-shares),
:mod:`.explain` (why a holder, tenant or class waits), :mod:`.spend` (the
spend budgets, and approving more), :mod:`.top` (the
live view) and :mod:`.exporter`; :mod:`.app` holds what they share (the App, the global
options, the error handling), :mod:`.render` the formatting.

The benchmarks and the demo are not operator commands: they run from a
checkout as ``python -m bench <command>``.
"""

from __future__ import annotations

import click

from .. import __version__
from ..protocol import DEFAULT_PREFIX
from . import control, explain, exporter, keys, listing, proxy, spend, status, top
from .app import DEFAULT_URL, App, Command


class _Cli(click.Group):
    """The command group: its commands share :class:`~governor.cli.app.Command`'s error handling."""

    command_class = Command


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option(
    "--url",
    envvar="GOVERNOR_REDIS_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Redis URL (env GOVERNOR_REDIS_URL).",
)
@click.option("--name", "-n", envvar="GOVERNOR_NAME", help="The governor (env GOVERNOR_NAME).")
@click.option(
    "--prefix",
    envvar="GOVERNOR_PREFIX",
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Key prefix (GovernorConfig.key_prefix; env GOVERNOR_PREFIX).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds before an unanswered Redis call fails.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text (every read and change command).")
@click.version_option(__version__, prog_name="governor")
@click.pass_context
def main(ctx: click.Context, url: str, name: str | None, prefix: str, timeout: float, as_json: bool) -> None:
    """See and steer the fleet-wide concurrency governors kept in Redis.

    \b
    Read:   status, list, watch, leases, queue, events, keys, explain, top, spend
    Change: set-max, pause, resume, reset, configure, set-shares, spend approve
    Serve:  exporter (Prometheus /metrics), proxy (the OpenAI and Anthropic APIs, governed)

    The options above may also follow the command (governor status -n NAME).
    Exit status: 0 done; 1 a runtime failure (Redis unreachable, no such
    governor); 2 a usage error (a bad option, argument or governor name).
    """
    app = App(url, name, prefix, timeout, as_json)
    ctx.obj = app
    ctx.call_on_close(app.close)


for _module in (status, listing, keys, control, exporter, explain, top, proxy, spend):
    for _command in _module.COMMANDS:
        main.add_command(_command)

__all__ = ["main"]
