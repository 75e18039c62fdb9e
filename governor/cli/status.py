"""``status``, ``list`` and ``watch``: one governor, every governor, and a live view."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from collections import deque
from collections.abc import Sequence

import click
import redis

from .. import views
from ..core import Status
from ..errors import GovernorError, GovernorNotFound, GovernorUnavailable
from .app import App, command, fail, global_options, json_option, pass_app, safe_url
from .render import (
    TOP_TENANTS,
    breakdown_dict,
    emit_json,
    render_breakdown,
    render_status,
    sparkline,
    state_line,
    status_dict,
    table,
    when,
)
from .spend import status_lines

#: how lua/lib/origin.lua ends its claim, on a read-only call, that a state came from another server
CAME_BACK = "the next writing call handles it as a loss and holds"


def replica_note(app: App) -> str | None:
    """What a replica's status is, when the URL is a read-only replica (None: a primary, or INFO refused)."""
    try:
        info = app.client().info("replication")
    except redis.RedisError:
        return None
    if info.get("role") != "slave":
        return None
    primary = f"{info.get('master_host')}:{info.get('master_port')}"
    return (
        f"this Redis is a read-only replica of {primary} (link {info.get('master_link_status')}): it shows the "
        "primary's state as replicated, nothing was restored; the governor's clients write to the primary"
    )


def read_on_replica(status: Status) -> Status:
    """A status read on a replica: its state stamp names the primary, which the
    library takes for a restore; on a replica that claim is dropped."""
    if status.blocked.endswith(CAME_BACK):
        return dataclasses.replace(status, blocked="(the primary says why: this is a replica)")
    return status


@command()
@click.option(
    "--top",
    type=click.IntRange(min=0, max=1000),
    default=TOP_TENANTS,
    show_default=True,
    help="Tenants shown by name (the most loaded); the others are summed as '(other)'.",
)
@json_option
@global_options()
@pass_app
def status(app: App, top: int, as_json: bool) -> None:
    """Capacity, pause, in-flight, queue, window and hold of one governor, and why callers wait;
    in flight and queued per priority class and per tenant."""
    gov, state = app.existing()
    replica = replica_note(app)
    if replica is not None:
        state = read_on_replica(state)
    seen = views.read_overview(app.client(), gov.keys, state)
    spending, spend_text = status_lines(app.client(), gov.keys)
    if as_json:
        shares = {**seen.shares.as_dict(), **breakdown_dict(seen.breakdown, top), "spend": spending}
        emit_json({**status_dict(state), **shares, "warnings": [*([replica] if replica else []), *seen.warnings]})
    else:
        if replica is not None:
            click.echo(f"NOTE: {replica}\n")
        click.echo(render_status(state, seen.stored))
        click.echo("\n" + render_breakdown(seen.breakdown, seen.shares, top))
        if spend_text:
            click.echo("\n" + "\n".join(spend_text))
        for warning in seen.warnings:
            click.echo(f"\nWARNING: {warning}")


@command("list")
@json_option
@global_options()
@pass_app
def list_(app: App, as_json: bool) -> None:
    """Every governor in this Redis (found with SCAN), one line each."""
    client = app.client()
    try:
        names = views.list_governors(client, app.prefix)
    except GovernorUnavailable as error:
        detail = str(error).removeprefix("governor '*': ")
        fail(f"cannot list governors: {detail} (url: {safe_url(app.url)})")
    found: list[Status] = []
    broken: dict[str, str] = {}
    for name in names:
        try:
            found.append(app.governor(name).status(create=False))
        except GovernorNotFound:  # expired or deleted since the SCAN
            continue
        except GovernorUnavailable:
            raise
        except GovernorError as error:
            broken[name] = str(error)
    replica = replica_note(app)
    if replica is not None:
        found = [read_on_replica(s) for s in found]
    if as_json:
        emit_json({"governors": [status_dict(s) for s in found], "errors": broken})
        return
    if replica is not None:
        click.echo(f"NOTE: {replica}")
    if not found and not broken:
        click.echo(f"no governors at {safe_url(app.url)} (prefix {app.prefix!r})")
        return
    rows = [
        [
            s.name,
            views.state_of(s),
            f"{s.capacity}/{s.max_capacity}",
            s.in_flight,
            s.queued,
            f"{s.window_rate_limited}/{s.window_attempts}",
            s.policy,
            s.blocked or "-",
        ]
        for s in found
    ]
    rows += [[name, "error", "-", "-", "-", "-", "-", message] for name, message in broken.items()]
    click.echo(table(["NAME", "STATE", "CAPACITY", "IN FLIGHT", "QUEUED", "429s/WINDOW", "POLICY", "BLOCKED"], rows))


def _watch_row(status: Status) -> list[object]:
    clock = when(status.now)[11:23]
    return [
        clock,
        views.state_of(status),
        f"{status.capacity}/{status.max_capacity}",
        status.in_flight,
        status.queued,
        f"{status.window_rate_limited}/{status.window_attempts}",
    ]


WATCH_HEADERS = ["TIME (UTC)", "STATE", "CAPACITY", "IN FLIGHT", "QUEUED", "429s/WINDOW"]


def watch_frame(samples: Sequence[Status], height: int = 24) -> str:
    """The full-screen view of ``governor watch``: the state, sparklines, the latest samples."""
    last = samples[-1]
    top = max(last.max_capacity, *(s.in_flight for s in samples))
    lines = [
        f"governor {last.name}  policy {last.policy}  max {last.max_capacity}   (Ctrl-C to stop)",
        state_line(last),
        f"blocked: {last.blocked or '-'}",
        "",
        f"capacity   {sparkline([s.capacity for s in samples], top)}  {last.capacity}",
        f"in flight  {sparkline([s.in_flight for s in samples], top)}  {last.in_flight}",
        f"queued     {sparkline([s.queued for s in samples])}  {last.queued}",
        f"429s       {sparkline([s.window_rate_limited for s in samples])}  {last.window_rate_limited} "
        f"of {last.window_attempts} in the window",
        "",
    ]
    rows = [_watch_row(s) for s in samples][-max(1, height - len(lines) - 2) :]
    return "\n".join(lines) + "\n" + table(WATCH_HEADERS, rows)


@command()
@click.option(
    "--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds between samples."
)
@click.option("--count", type=click.IntRange(min=0), default=0, help="Stop after this many samples (0: never).")
@click.option(
    "--screen/--lines",
    default=None,
    help="Redraw one screen in place, or print a line per sample (default: screen on a terminal).",
)
@json_option
@global_options()
@pass_app
def watch(app: App, interval: float, count: int, screen: bool | None, as_json: bool) -> None:
    """A live view: capacity, in-flight, queue and 429s over time."""
    gov, first = app.existing()
    screen = sys.stdout.isatty() if screen is None else screen
    history: deque[Status] = deque(maxlen=120)
    taken = 0
    sample: Status | None = first
    try:
        while True:
            if sample is not None:
                history.append(sample)
                if as_json:
                    click.echo(json.dumps(status_dict(sample), sort_keys=True, default=str))
                elif screen:
                    height = shutil.get_terminal_size().lines
                    click.echo("\x1b[H\x1b[J" + watch_frame(list(history), height), color=True)  # keep the escapes
                else:
                    rendered = table(WATCH_HEADERS, [_watch_row(sample)]).splitlines()
                    click.echo("\n".join(rendered if taken == 0 else rendered[1:]))
            taken += 1
            if count and taken >= count:
                return
            time.sleep(interval)
            try:
                sample = gov.status(create=False)
            except GovernorNotFound:
                sample = None
                click.echo(f"{when(time.time())[11:23]}  governor {gov.name!r} no longer exists", err=True)
            except GovernorUnavailable as error:
                sample = None
                click.echo(f"{when(time.time())[11:23]}  {error}", err=True)
    except KeyboardInterrupt:
        return


COMMANDS = (status, list_, watch)
