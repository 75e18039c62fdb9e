"""The ``governor`` command: see and steer the governors of a fleet.

One thin subcommand per operation, each a call into the library: reads go
through :mod:`governor.inspect` and ``Governor.status(create=False)`` (so
looking never creates a governor), writes through the Governor API. Every
read command takes ``--json``. ``--url`` and ``--name`` also come from
``GOVERNOR_REDIS_URL`` and ``GOVERNOR_NAME``.

The simulation commands (``demo``, ``bench``, ``provider``, ``swarm``,
``worker``) live in :mod:`governor.sim.cli` and are imported only when one
of them runs, so the operator commands work without the ``sim`` extra.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import json
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qs, unquote, urlparse

import click
import redis

from . import __version__
from . import inspect as gi
from ._sync.governor import Governor
from .config import GovernorConfig
from .core import Status
from .errors import ConfigError, GovernorError, GovernorNotFound, GovernorUnavailable
from .keys import DEFAULT_PREFIX, GovernorKeys, governor_keys

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_EXPORTER_PORT = 9733
SIM_COMMANDS = ("bench", "demo", "provider", "swarm", "worker")
SPARK = "▁▂▃▄▅▆▇█"
F = TypeVar("F", bound=Callable[..., Any])


# -- formatting ---------------------------------------------------------------------


def when(seconds: float | None) -> str:
    """A Unix time as UTC ISO 8601 with ms, or 'none'."""
    if not seconds:
        return "none"
    stamp = dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def span(seconds: float) -> str:
    """A duration for people: 0.4s, 12.3s, 4m05s, 2h03m, 3d04h."""
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 60:
        return f"{sign}{s:.1f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{sign}{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def sparkline(values: Sequence[float], top: float | None = None) -> str:
    """Values as block characters, scaled to ``top`` (default: their maximum)."""
    top = max([*values, top or 0, 1e-9])
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in values)


def status_dict(status: Status) -> dict[str, Any]:
    """A status as JSON-ready data, with the derived state and block reason."""
    out = dataclasses.asdict(status)
    out["state"] = gi.state_of(status)
    out["blocked"] = gi.admission_block(status)
    out["rate_limited_share"] = round(status.rate_limited_share, 4)
    out["holding"] = status.holding
    return out


def emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def state_line(status: Status) -> str:
    """What a new caller meets now, and why."""
    if status.paused:
        who = "by an operator" if status.pause_kind == "operator" else "by the policy"
        until = f" until {when(status.paused_until)}" if status.paused_until else ""
        why = gi.pause_reason(status)
        return f"PAUSED {who}{until}{': ' + why if why else ''} (new callers queue, holders keep running)"
    if status.holding:
        left = (status.not_before or 0) - status.now
        return f"HOLDING until {when(status.not_before)} ({span(left)} left): the provider's retry-after"
    if status.in_flight >= status.capacity:
        return f"FULL: {status.in_flight} in flight of {status.capacity}; new callers queue"
    return f"OPEN: {status.capacity - status.in_flight} free slot(s); new callers are admitted"


def render_status(status: Status) -> str:
    share = f"{status.rate_limited_share:.1%}" if status.window_attempts else "-"
    learnt = []
    if status.ceiling:
        learnt.append(f"last pushback at {status.ceiling} in flight")
    if status.streak:
        learnt.append(f"{status.streak} success(es) in a row")
    quota = "none reported"
    if status.quota_exhausted:
        quota = f"{status.quota_exhausted} report(s), last at {when(status.quota_at)}"
    lines = [
        ("governor", f"{status.name}  (policy {status.policy}, schema v{status.schema})"),
        ("state", state_line(status)),
        ("capacity", f"{status.capacity} / {status.max_capacity}" + (f"  ({', '.join(learnt)})" if learnt else "")),
        ("in flight", str(status.in_flight)),
        ("queued", str(status.queued)),
        (
            "window",
            f"{status.window_rate_limited} rate-limited of {status.window_attempts} attempts ({share}) "
            f"in the last {span(status.window)}",
        ),
        ("not_before", when(status.not_before) + (" (holding)" if status.holding else "")),
        ("quota", quota),
        ("fence", str(status.fence)),
        ("epoch", f"{status.epoch} (created {when(status.created)})"),
        ("now", when(status.now)),
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


# -- the decision log ---------------------------------------------------------------


def event_dict(event: gi.DecisionEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "kind": event.kind,
        "at": event.at,
        "capacity": event.capacity,
        "paused": event.paused,
        "fields": dict(event.fields),
    }


def _window_note(event: gi.DecisionEvent) -> str:
    if "window_limited" in event.fields:
        return f" [window: {event.get('window_limited')} rate-limited of {event.get('window_attempts')} attempts]"
    return ""


def describe_event(event: gi.DecisionEvent) -> str:
    """One line per decision: when, what changed, and why."""
    why = event.get("why")
    kind = event.kind
    if kind == "capacity":
        text = f"capacity {event.get('from')} -> {event.capacity}: {why}{_window_note(event)}"
    elif kind == "pause":
        until = event.get("until", "0")
        end = f" until {when(int(until) / 1000)}" if until.isdigit() and int(until) else ""
        text = f"paused{end}, capacity -> 0: {why}{_window_note(event)}"
    elif kind == "resume":
        was = " (was not paused; a retry-after hold cleared)" if event.get("was_paused") == "0" else ""
        text = f"resumed, capacity -> {event.capacity}: {why}{was}"
    elif kind == "hold":
        text = f"admissions held until {when(int(event.get('until', '0') or 0) / 1000)}: {why}"
    elif kind == "set_max":
        text = f"max_capacity {event.get('from')} -> {event.get('to')}, capacity {event.capacity}: {why}"
    elif kind == "adopt":
        text = f"lease {event.get('lease')} adopted with fence {event.get('fence')}: {why}"
    else:
        known = ("why",)
        extra = " ".join(f"{k}={v}" for k, v in sorted(event.fields.items()) if k not in known)
        text = f"capacity {event.capacity}{' paused' if event.paused else ''}: {why}" + (f" {extra}" if extra else "")
    return f"{when(event.at)}  {kind:<9}  {text}"


# -- the application object ---------------------------------------------------------


def safe_url(url: str) -> str:
    """The URL with any password replaced by ***."""
    return re.sub(r"(//[^:@/]*:)[^@/]*@", r"\1***@", url)


@dataclasses.dataclass
class App:
    """What every subcommand needs: where Redis is, which governor, one client."""

    url: str
    name: str | None
    prefix: str
    timeout: float
    json: bool = False
    _client: Any = None

    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = redis.Redis.from_url(
                    self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
                )
            except ValueError as error:
                raise click.UsageError(f"invalid Redis URL {safe_url(self.url)!r}: {error}") from error
        return self._client

    def config(self) -> GovernorConfig:
        return GovernorConfig(key_prefix=self.prefix, redis_timeout=self.timeout)

    def require_name(self) -> str:
        if not self.name:
            raise click.UsageError("which governor? Pass --name NAME or set GOVERNOR_NAME")
        try:
            governor_keys(self.name, self.prefix)
        except ConfigError as error:
            raise click.BadParameter(str(error), param_hint="'--name' / '--prefix'") from error
        return self.name

    def governor(self, name: str | None = None) -> Governor:
        return Governor(self.client(), name or self.require_name(), self.config())

    def keys(self) -> GovernorKeys:
        return governor_keys(self.require_name(), self.prefix)

    def existing(self) -> tuple[Governor, Status]:
        """The named governor and its status; GovernorNotFound if it does not exist."""
        gov = self.governor()
        return gov, gov.status(create=False)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def fail(message: str) -> NoReturn:
    raise click.ClickException(message)


#: exit status of a runtime failure (Redis unreachable or refusing, no such governor);
#: click gives usage errors (a bad option, argument or governor name) status 2
EXIT_FAILURE = 1


@contextmanager
def clear_errors(app: App | None) -> Iterator[None]:
    """Library errors as one clear line on stderr, never a traceback: an
    invalid value (ConfigError) is a usage error (exit status 2), anything
    else a runtime failure (exit status 1)."""
    try:
        yield
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    except GovernorNotFound as error:
        fail(f"{error}. `governor list` shows the governors at {safe_url(app.url) if app else 'this URL'}.")
    except GovernorUnavailable as error:
        fail(f"{error} (url: {safe_url(app.url) if app else '?'})")
    except GovernorError as error:
        fail(str(error))


class _Command(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        app = ctx.find_object(App)
        if app is not None and app.name is not None:
            app.require_name()  # an invalid name is a usage error of every command, before anything runs
        with clear_errors(app):
            return super().invoke(ctx)


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

    command_class = _Command

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


pass_app = click.make_pass_decorator(App)


def _with_global_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    app = ctx.find_object(App)
    return bool(value or (app is not None and app.json))


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_with_global_json, help="Print JSON instead of text."
)


def _global_setter(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """An option callback that puts a global option given after the command into the App."""

    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        app = ctx.find_object(App)
        if app is not None and value is not None:
            setattr(app, field, value)

    return store


def global_options(*, name: bool = True) -> Callable[[F], F]:
    """The group's options, accepted after the command too (``governor status -n x``);
    given there, they win over the ones before the command and the environment."""

    def decorate(f: F) -> F:
        options = [
            click.option("--url", metavar="URL", expose_value=False, callback=_global_setter("url"),
                         help="Redis URL (also before the command; env GOVERNOR_REDIS_URL)."),
            click.option("--prefix", metavar="PREFIX", expose_value=False, callback=_global_setter("prefix"),
                         help="Key prefix (also before the command; env GOVERNOR_PREFIX)."),
            click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                         expose_value=False, callback=_global_setter("timeout"),
                         help="Seconds before an unanswered Redis call fails (also before the command)."),
        ]  # fmt: skip
        if name:
            options.insert(
                1,
                click.option("--name", "-n", metavar="NAME", expose_value=False, callback=_global_setter("name"),
                             help="The governor (also before the command; env GOVERNOR_NAME)."),
            )  # fmt: skip
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


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
    Change: set-max, pause, resume, reset
    Serve:  exporter (Prometheus /metrics)
    Simulate (extra 'sim'): demo, provider, swarm, worker, bench

    The options above may also follow the command (governor status -n NAME).
    Exit status: 0 done; 1 a runtime failure (Redis unreachable, no such
    governor); 2 a usage error (a bad option, argument or governor name).
    """
    app = App(url, name, prefix, timeout, as_json)
    ctx.obj = app
    ctx.call_on_close(app.close)


# -- reading --------------------------------------------------------------------------


@main.command()
@json_option
@global_options()
@pass_app
def status(app: App, as_json: bool) -> None:
    """Capacity, pause, in-flight, queue, window and hold of one governor."""
    _, state = app.existing()
    risk = gi.eviction_risk(app.client())
    if as_json:
        emit_json({**status_dict(state), "warnings": [risk] if risk else []})
    else:
        click.echo(render_status(state))
        if risk:
            click.echo(f"\nWARNING: {risk}")


@main.command(name="list")
@json_option
@global_options()
@pass_app
def list_(app: App, as_json: bool) -> None:
    """Every governor in this Redis (found with SCAN), one line each."""
    client = app.client()
    try:
        names = gi.list_governors(client, app.prefix)
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
    if as_json:
        emit_json({"governors": [status_dict(s) for s in found], "errors": broken})
        return
    if not found and not broken:
        click.echo(f"no governors at {safe_url(app.url)} (prefix {app.prefix!r})")
        return
    rows = [
        [
            s.name,
            gi.state_of(s),
            f"{s.capacity}/{s.max_capacity}",
            s.in_flight,
            s.queued,
            f"{s.window_rate_limited}/{s.window_attempts}",
            s.policy,
            s.reason or "-",
        ]
        for s in found
    ]
    rows += [[name, "error", "-", "-", "-", "-", "-", message] for name, message in broken.items()]
    click.echo(table(["NAME", "STATE", "CAPACITY", "IN FLIGHT", "QUEUED", "429s/WINDOW", "POLICY", "REASON"], rows))


def _watch_row(status: Status) -> list[object]:
    clock = when(status.now)[11:23]
    return [
        clock,
        gi.state_of(status),
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


@main.command()
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


@main.command()
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Show at most this many.")
@json_option
@global_options()
@pass_app
def leases(app: App, limit: int, as_json: bool) -> None:
    """Who holds the slots: lease id, holder, host, age, TTL left, fence."""
    gov, _ = app.existing()
    listing = gi.read_leases(app.client(), gov.keys, limit)
    if as_json:
        emit_json(
            {
                "governor": gov.name,
                "now": listing.now,
                "total": listing.total,
                "leases": [
                    {**dataclasses.asdict(x), "host": x.host, "age": x.age, "ttl_left": x.ttl_left, "live": x.live}
                    for x in listing.items
                ],
            }
        )
        return
    if not listing.items:
        click.echo(f"governor {gov.name!r}: no leases held")
        return
    rows = [
        [x.id, x.holder, x.host, span(x.age), span(x.ttl_left) if x.live else "expired", x.fence] for x in listing.items
    ]
    click.echo(table(["LEASE ID", "HOLDER", "HOST", "AGE", "TTL LEFT", "FENCE"], rows))
    live = [x for x in listing.items if x.live]
    hosts = Counter(x.host for x in live)
    summary = ", ".join(f"{host} {n}" for host, n in hosts.most_common())
    click.echo(f"\n{len(live)} live lease(s) on {len(hosts)} host(s): {summary or '-'}")
    if listing.total > len(listing.items):
        click.echo(f"(showing {len(listing.items)} of {listing.total}; raise --limit to see more)")


@main.command()
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Show at most this many.")
@json_option
@global_options()
@pass_app
def queue(app: App, limit: int, as_json: bool) -> None:
    """The waiters in FIFO order, how long each has waited, and why they wait."""
    gov, state = app.existing()
    listing = gi.read_queue(app.client(), gov.keys, limit)
    reason = gi.admission_block(state)
    if as_json:
        emit_json(
            {
                "governor": gov.name,
                "now": listing.now,
                "total": listing.total,
                "blocked": reason,
                "waiters": [
                    {**dataclasses.asdict(x), "place": x.place, "host": x.host, "waited": x.waited, "live": x.live}
                    for x in listing.items
                ],
            }
        )
        return
    if not listing.items:
        click.echo(f"governor {gov.name!r}: nobody is queued")
        return
    click.echo(f"queued because: {reason or 'being admitted now'}\n")
    rows = [
        [
            x.place,
            x.id,
            x.holder,
            x.host,
            span(x.waited),
            span(x.deadline - x.now) if x.live else "dead (stopped refreshing)",
        ]
        for x in listing.items
    ]
    click.echo(table(["POS", "WAITER ID", "HOLDER", "HOST", "WAITED", "REFRESH DUE IN"], rows))
    if listing.total > len(listing.items):
        click.echo(f"(showing {len(listing.items)} of {listing.total}; raise --limit to see more)")


@main.command()
@click.option("--count", type=click.IntRange(min=0), default=20, show_default=True, help="How many past decisions.")
@click.option("--kind", "kinds", multiple=True, help="Only decisions of this kind (repeatable).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new decisions as they are logged.")
@click.option("--since", metavar="ID", help="With --follow: start after this entry id instead of the backlog.")
@click.option(
    "--max-events", type=click.IntRange(min=1), help="With --follow: stop after printing this many new decisions."
)
@json_option
@global_options()
@pass_app
def events(
    app: App,
    count: int,
    kinds: tuple[str, ...],
    follow: bool,
    since: str | None,
    max_events: int | None,
    as_json: bool,
) -> None:
    """The decision log: why capacity, pause and holds changed, newest first.

    With --follow the last COUNT decisions are printed oldest first, then
    each new one as it is logged (like tail -f).
    """
    if not follow and (since is not None or max_events is not None):
        raise click.UsageError("--since and --max-events go with --follow")
    if since is not None and not re.fullmatch(r"\d+(-\d+)?|\$", since):
        raise click.BadParameter(f"{since!r} is not a stream entry id (like 1700000000000-0)", param_hint="--since")
    gov, _ = app.existing()
    client, keys = app.client(), gov.keys
    wanted = set(kinds)

    def keep(event: gi.DecisionEvent) -> bool:
        return not wanted or event.kind in wanted

    def show(event: gi.DecisionEvent, as_array: bool = False) -> None:
        if as_json and not as_array:
            click.echo(json.dumps(event_dict(event), sort_keys=True))
        elif not as_json:
            click.echo(describe_event(event))

    if not follow:
        recent = gi.read_events(client, keys, count, kinds=wanted or None)
        if as_json:
            emit_json([event_dict(e) for e in recent])
        elif not recent:
            click.echo(f"governor {gov.name!r}: the decision log is empty")
        for event in recent:
            show(event, as_array=True)
        return
    if since is None:
        after = gi.last_event_id(client, keys)
        for event in reversed(gi.read_events(client, keys, count, kinds=wanted or None)):
            show(event)
    else:
        after = since
    printed = 0
    block = min(1.0, app.timeout / 2)
    try:
        while max_events is None or printed < max_events:
            for event in gi.wait_events(client, keys, after, block):
                after = event.id
                if keep(event):
                    show(event)
                    printed += 1
                    if max_events is not None and printed >= max_events:
                        return
    except KeyboardInterrupt:
        return


REDIS_CLI_READ = {
    "state": ["HGETALL"],
    "leases": ["ZRANGE", "{key}", "0", "-1", "WITHSCORES"],
    "holders": ["HGETALL"],
    "queue": ["ZRANGE", "{key}", "0", "-1", "WITHSCORES"],
    "waiters": ["ZRANGE", "{key}", "0", "-1", "WITHSCORES"],
    "attempts": ["ZRANGE", "{key}", "-20", "-1", "WITHSCORES"],
    "limited": ["ZRANGE", "{key}", "-20", "-1", "WITHSCORES"],
    "events": ["XREVRANGE", "{key}", "+", "-", "COUNT", "20"],
    "channel": ["SUBSCRIBE"],
}
KEY_MEANING = {
    "state": "config, capacity, pause, hold, counters",
    "leases": "lease id -> expiry (ms); in-flight = live entries",
    "holders": "lease/waiter id -> fence|ttl_ms|since_ms|holder",
    "queue": "waiter id -> ticket (FIFO order)",
    "waiters": "waiter id -> deadline (ms) to refresh by",
    "attempts": "seq:outcome -> time (ms): the window",
    "limited": "the rate-limited subset of attempts",
    "events": "the decision log (capped stream)",
    "channel": "pub/sub channel announcing grants (not a key)",
}


def redis_cli_base(url: str) -> tuple[list[str], str | None]:
    """``redis-cli`` and the connection flags for ``url``; a note when a password is needed."""
    parsed = urlparse(url)
    args = ["redis-cli"]
    if parsed.scheme == "unix":
        args += ["-s", parsed.path]
        db = parse_qs(parsed.query).get("db", ["0"])[0]
    else:
        if parsed.scheme == "rediss":
            args.append("--tls")
        args += ["-h", parsed.hostname or "localhost", "-p", str(parsed.port or 6379)]
        db = parsed.path.lstrip("/") or parse_qs(parsed.query).get("db", ["0"])[0]
    if db and db != "0":
        args += ["-n", db]
    if parsed.username and parsed.username != "default":
        args += ["--user", unquote(parsed.username)]
    note = "export REDISCLI_AUTH=<password> first (the URL has one)" if parsed.password else None
    return args, note


@main.command()
@json_option
@global_options()
@pass_app
def keys(app: App, as_json: bool) -> None:
    """The Redis keys of a governor, with a ready redis-cli command for each."""
    gov_keys = app.keys()
    infos = gi.read_keys(app.client(), gov_keys)
    base, note = redis_cli_base(app.url)

    def command(role: str, key: str) -> str:
        words = REDIS_CLI_READ[role]
        words = [words[0], key] if len(words) == 1 else [w.replace("{key}", key) for w in words]
        return shlex.join([*base, *words])

    entries: list[dict[str, Any]] = [
        {
            "role": i.role,
            "key": i.key,
            "type": i.type,
            "size": i.size,
            "ttl": i.ttl,
            "meaning": KEY_MEANING[i.role],
            "redis_cli": command(i.role, i.key),
        }
        for i in infos
    ]
    channel: dict[str, Any] = {
        "role": "channel",
        "key": gov_keys.channel,
        "type": "pubsub",
        "size": None,
        "ttl": None,
        "meaning": KEY_MEANING["channel"],
        "redis_cli": command("channel", gov_keys.channel),
    }
    exists = any(i.type != "none" for i in infos)
    if as_json:
        emit_json({"governor": gov_keys.name, "exists": exists, "keys": [*entries, channel], "auth_note": note})
        return
    for entry in [*entries, channel]:
        size = "" if entry["type"] in ("none", "pubsub") else f", {entry['size']} entries"
        ttl = f", expires in {span(entry['ttl'])} if idle" if entry["ttl"] is not None else ""
        click.echo(f"{entry['role']:<9} {entry['key']}  ({entry['type']}{size}{ttl})")
        click.echo(f"          {entry['meaning']}")
        click.echo(f"          $ {entry['redis_cli']}")
    if note:
        click.echo(f"\n{note}")
    if not exists:
        click.echo(f"\nnote: none of these keys exists: there is no governor {gov_keys.name!r} here", err=True)


# -- changing -------------------------------------------------------------------------

COMPARED = (
    "max_capacity",
    "capacity",
    "paused",
    "pause_kind",
    "reason",
    "paused_until",
    "not_before",
    "window_rate_limited",
    "window_attempts",
    "ceiling",
    "streak",
)


def _shown(field: str, value: Any) -> str:
    if field in ("paused_until", "not_before"):
        return when(value)
    if field == "reason":
        return repr(value) if value else "-"
    if field == "pause_kind":
        return value or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def confirm_change(action: str, before: Status, after: Status, as_json: bool) -> None:
    """Say what an operator command changed, field by field (before -> after)."""
    if after.epoch != before.epoch:
        fail(
            f"governor {before.name!r} was re-created while {action} ran (its state expired or was flushed); "
            "check it with `governor status` and repeat the command"
        )

    def seen(status: Status, field: str) -> Any:
        if field == "not_before" and not status.holding:
            return None  # a hold that is over holds nobody: clearing it changes nothing
        return getattr(status, field)

    changed = {f: (seen(before, f), seen(after, f)) for f in COMPARED if seen(before, f) != seen(after, f)}
    if as_json:
        emit_json(
            {
                "governor": after.name,
                "action": action,
                "changed": {f: list(v) for f, v in changed.items()},
                "before": status_dict(before),
                "after": status_dict(after),
            }
        )
        return
    click.echo(f"governor {after.name!r}: {action}")
    if not changed:
        click.echo("  nothing changed")
    width = max([len(f) for f in changed] or [0])
    for f, (old, new) in changed.items():
        click.echo(f"  {f.ljust(width)}  {_shown(f, old)} -> {_shown(f, new)}")
    click.echo(f"  now: {state_line(after)}")


DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Seconds, or a number with a unit: 90, 90s, 1.5m, 2h, 1d."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    if match is None:
        raise click.BadParameter(f"{value!r} is not a duration (use e.g. 90, 90s, 5m, 2h, 1d)", ctx, param)
    seconds = float(match.group(1)) * DURATION_UNITS[match.group(2)]
    if seconds <= 0:
        raise click.BadParameter(f"{value!r} must be longer than 0 seconds", ctx, param)
    return seconds


@main.command("set-max")
@click.argument("n", type=click.IntRange(min=1, max=1_000_000))
@json_option
@global_options()
@pass_app
def set_max(app: App, n: int, as_json: bool) -> None:
    """Set max_capacity to N (applied at once unless paused; then on resume)."""
    gov, before = app.existing()
    confirm_change(f"max_capacity set to {n}", before, gov.set_max_capacity(n, create=False), as_json)


@main.command()
@click.option(
    "--reason", default="paused by an operator", show_default=True, help="Shown to queued callers and operators."
)
@click.option(
    "--duration", callback=parse_duration, help="Lift the pause after this long (90, 90s, 5m, 2h); default: never."
)
@json_option
@global_options()
@pass_app
def pause(app: App, reason: str, duration: float | None, as_json: bool) -> None:
    """Stop new admissions fleet-wide; held leases keep running."""
    gov, before = app.existing()
    try:
        after = gov.pause(reason, duration, create=False)
    except ConfigError as error:
        raise click.BadParameter(str(error).split("invalid argument: ")[-1], param_hint="--reason") from error
    confirm_change("paused" + (f" for {span(duration)}" if duration else " until resumed"), before, after, as_json)


@main.command()
@json_option
@global_options()
@pass_app
def resume(app: App, as_json: bool) -> None:
    """Lift any pause and any Retry-After hold."""
    gov, before = app.existing()
    confirm_change("resumed", before, gov.resume(create=False), as_json)


@main.command()
@json_option
@global_options()
@pass_app
def reset(app: App, as_json: bool) -> None:
    """Forget what the policy learnt (window, pause, hold); capacity back to max.

    The stored config, the holders and the queue are kept.
    """
    gov, before = app.existing()
    confirm_change("reset", before, gov.reset(create=False), as_json)


# -- serving --------------------------------------------------------------------------


@main.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=DEFAULT_EXPORTER_PORT, show_default=True)
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--name", "-n", "names", multiple=True, help="A governor to export (repeatable; default: the global --name)."
)
@click.option("--all", "all_", is_flag=True, help="Export every governor in the Redis (found on each scrape).")
@global_options(name=False)
@pass_app
def exporter(app: App, port: int, addr: str, names: tuple[str, ...], all_: bool) -> None:
    """Serve Prometheus metrics of one, several or all governors on /metrics."""
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

        from .metrics import start_exporter
    except ImportError as error:
        fail(f"the exporter needs prometheus_client ({error}): pip install 'fleet-governor[metrics]'")
    # Redis is not checked here: an exporter may start before Redis, and
    # each scrape reports an unreadable governor as governor_up 0.
    try:
        server, _thread = start_exporter(app.client(), chosen, port=port, addr=addr, prefix=app.prefix)
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


if __name__ == "__main__":  # pragma: no cover
    main()
