"""The ``governor`` command: see and steer the governors of a fleet.

One thin subcommand per operation, each a call into the library: reads go
through :mod:`governor.inspect` and ``Governor.status(create=False)`` (so
looking never creates a governor), writes through the Governor API. Why a
caller waits is the scripts' answer (``Status.blocked``), shown as given.
Every read command takes ``--json``. ``--url`` and ``--name`` also come
from ``GOVERNOR_REDIS_URL`` and ``GOVERNOR_NAME``.

The commands, by family: :mod:`.status` (status, list, watch),
:mod:`.listing` (leases, queue, events), :mod:`.keys` (keys),
:mod:`.control` (set-max, pause, resume, reset, configure, set-shares) and
:mod:`.exporter`; :mod:`.app` holds what they share (the App, the global
options, the error handling), :mod:`.render` the formatting.

The simulation commands (``demo``, ``bench``, ``provider``, ``swarm``,
``worker``, ``budgets``, ``matrix``, ``shares``) live in :mod:`governor.sim.cli`
and are imported only when one of them runs, so the operator commands work
without the ``sim`` extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import click

from .. import __version__
from ..protocol import DEFAULT_PREFIX
from . import control, exporter, keys, listing, status
from .app import DEFAULT_URL, App, Command, fail

SIM_COMMANDS = ("bench", "budgets", "demo", "matrix", "provider", "shares", "swarm", "worker")


def _sim_unavailable(name: str, error: ImportError | None) -> click.Command:
    if error is None or (error.name or "").startswith("governor.sim"):
        detail = f"`governor {name}` is not part of this version of fleet-governor"
        if error is not None:
            detail += f" ({error})"
    else:
        detail = (
            f"`governor {name}` needs the simulation extra, which is not installed ({error}). "
            "Install it with: pip install 'fleet-governor[sim]'"
        )

    def unavailable() -> None:
        fail(detail)

    return click.Command(
        name,
        callback=unavailable,
        help=f"(not available: {detail})",
        short_help="(needs: pip install 'fleet-governor[sim]')",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )


def import_sim() -> ModuleType:
    """The simulation commands' module (needs the ``sim`` extra)."""
    return importlib.import_module("governor.sim.cli")


def sim_commands(module: ModuleType) -> dict[str, click.Command]:
    """The click commands of the simulation module, by command name."""
    found: dict[str, click.Command] = {}
    for command in getattr(module, "COMMANDS", ()):
        if isinstance(command, click.Command) and command.name:
            found[command.name] = command
    for name in SIM_COMMANDS:
        for attribute in (name, f"{name}_command"):
            command = getattr(module, attribute, None)
            if isinstance(command, click.Command):
                found.setdefault(name, command)
    return found


class _Cli(click.Group):
    """The command group; the simulation commands are imported on first use."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SIM_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in SIM_COMMANDS:
            return command
        try:
            module = import_sim()
        except ImportError as error:
            return _sim_unavailable(cmd_name, error)
        return sim_commands(module).get(cmd_name) or _sim_unavailable(cmd_name, None)


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
    Read:   status, list, watch, leases, queue, events, keys
    Change: set-max, pause, resume, reset, configure, set-shares
    Serve:  exporter (Prometheus /metrics)
    Simulate (extra 'sim'): demo, provider, swarm, worker, bench, budgets, matrix, shares

    The options above may also follow the command (governor status -n NAME).
    Exit status: 0 done; 1 a runtime failure (Redis unreachable, no such
    governor); 2 a usage error (a bad option, argument or governor name).
    """
    app = App(url, name, prefix, timeout, as_json)
    ctx.obj = app
    ctx.call_on_close(app.close)


for _module in (status, listing, keys, control, exporter):
    for _command in _module.COMMANDS:
        main.add_command(_command)

__all__ = ["SIM_COMMANDS", "import_sim", "main", "sim_commands"]
