"""``top``: a live terminal view of every governor in a Redis.

One screen, read again every ``--interval``: each governor's state,
capacity, ceiling, in flight and queue; then per governor its queue and
leases by class and by tenant, what holds it (a pause, a provider's
Retry-After, a recovery hold: the reason and the end) and its budgets (the
level, the reservations and the time until the bucket is full again).
Reads go through :mod:`governor.views` and ``status(create=False)``:
looking never creates nor changes a governor.

The screen is built with `rich <https://rich.readthedocs.io>`_ renderables
and run live by `textual <https://textual.textualize.io>`_ (the ``top``
extra); ``--once`` prints one screen and exits (for scripts, and where no
terminal is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from .. import views
from .._sync.governor import Governor
from ..core import Status
from ..errors import GovernorError, GovernorUnavailable
from .app import App, command, fail, global_options, pass_app
from .render import TOP_TENANTS, span, when

INSTALL = "governor top needs textual: pip install 'fleet-governor[top]'"


@dataclass(frozen=True)
class Seen:
    """One governor at one reading: its status and its leases and waiters counted, or why it could not be read."""

    name: str
    status: Status | None
    breakdown: views.Breakdown | None
    error: str = ""


def read_all(client: Any, prefix: str, names: Sequence[str] | None = None) -> list[Seen]:
    """Every governor of ``prefix`` (or ``names``), read once each."""
    from ..config import GovernorConfig

    config = GovernorConfig(key_prefix=prefix)
    found = list(names) if names else views.list_governors(client, prefix)
    out = []
    for name in found:
        gov = Governor(client, name, config)
        try:
            status = gov.status(create=False)
            out.append(Seen(name, status, views.read_breakdown(client, gov.keys)))
        except GovernorUnavailable:
            raise  # the whole Redis: the caller says so once
        except GovernorError as error:  # this one governor: missing, or its state unreadable
            out.append(Seen(name, None, None, str(error)))
    return out


def _holds(status: Status) -> list[str]:
    """What holds a governor: its pause, a Retry-After, a recovery hold, with reasons and ends."""
    out = []
    if status.paused:
        who = "operator" if status.pause_kind == "operator" else "policy"
        end = (
            f", ends {when(status.paused_until)} (in {span(status.paused_until - status.now)})"
            if status.paused_until
            else ""
        )
        out.append(f"paused by the {who}: {status.pause_reason or '-'}{end}")
    if status.hold_until and status.hold_until > status.now:
        out.append(f"recovery hold: {status.hold_reason}, ends {when(status.hold_until)} "
                   f"(in {span(status.hold_until - status.now)})")  # fmt: skip
    elif status.holding and status.not_before:
        out.append(
            f"provider's retry-after, ends {when(status.not_before)} (in {span(status.not_before - status.now)})"
        )
    if status.held_back:
        out.append(f"held back: {status.held_back}")
    return out


def render(seen: Sequence[Seen], top: int = TOP_TENANTS) -> Any:
    """The screen, as one rich renderable."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    summary = Table(title=f"{len(seen)} governor(s)", expand=True, title_justify="left")
    for column in ("governor", "state", "capacity", "max", "ceiling", "in flight", "queued", "why a new caller waits"):
        summary.add_column(
            column, justify="left" if column in ("governor", "state", "why a new caller waits") else "right"
        )
    panels: list[Any] = [summary]
    for one in seen:
        s = one.status
        if s is None:
            summary.add_row(one.name, "[red]unreadable[/]", "", "", "", "", "", one.error)
            continue
        state = views.state_of(s)
        colour = {"open": "green", "limited": "yellow", "full": "yellow"}.get(state, "red")
        summary.add_row(one.name, f"[{colour}]{state}[/]", str(s.capacity), str(s.max_capacity), str(s.ceiling or "-"),
                        str(s.in_flight), str(s.queued), s.blocked or "-")  # fmt: skip
        detail = Table.grid(padding=(0, 2))
        detail.add_column()
        detail.add_column()
        shares = Table("class", "in flight", "queued", "aged", box=None, title="by class", title_justify="left")
        assert one.breakdown is not None
        for priority, count in one.breakdown.by_class.items():
            shares.add_row(priority, str(count.in_flight), str(count.queued), str(count.aged))
        tenants = Table("tenant", "in flight", "queued", box=None, title="by tenant", title_justify="left")
        for tenant, count in one.breakdown.top_tenants(top).items():
            tenants.add_row(tenant or "(default)", str(count.in_flight), str(count.queued))
        detail.add_row(shares, tenants)
        parts: list[Any] = [detail]
        holds = _holds(s)
        parts.append(Text("holds: " + ("; ".join(holds) if holds else "none")))
        if s.budgets:
            budgets = Table("budget", "level", "of", "reserved", "limit/min", "full in", "source", box=None,
                            title="budgets", title_justify="left")  # fmt: skip
            for b in s.budgets:
                full = (b.burst - b.level) * 60 / b.limit if b.limit else 0.0
                budgets.add_row(b.kind, f"{b.level:,.0f}", f"{b.burst:,}", f"{b.reserved:,}", f"{b.limit:,}",
                                span(max(0.0, full)), b.source)  # fmt: skip
            parts.append(budgets)
        panels.append(Panel(Group(*parts), title=f"[b]{one.name}[/] {s.policy}", title_align="left"))
    return Group(*panels)


def make_app(read: Callable[[], list[Seen]], interval: float, top: int = TOP_TENANTS) -> Any:
    """The textual App that shows :func:`render` of ``read()`` every ``interval`` seconds."""
    from textual.app import App as TextualApp
    from textual.app import ComposeResult
    from textual.containers import VerticalScroll
    from textual.widgets import Footer, Header, Static

    class Top(TextualApp[None]):
        TITLE = "governor top"
        BINDINGS = [("q", "quit", "quit"), ("r", "refresh_now", "read again"), ("space", "freeze", "pause")]  # noqa: RUF012

        def __init__(self) -> None:
            super().__init__()
            self.frozen = False
            self.readings = 0

        def compose(self) -> ComposeResult:
            yield Header(show_clock=True)
            with VerticalScroll():
                yield Static(id="screen")
            yield Footer()

        def on_mount(self) -> None:
            self.action_refresh_now()
            self.set_interval(interval, self._tick)

        def _tick(self) -> None:
            if not self.frozen:
                self.action_refresh_now()

        def action_refresh_now(self) -> None:
            try:
                shown = render(read(), top)
            except GovernorError as error:
                from rich.text import Text

                shown = Text(f"cannot read: {error}", style="red")
            self.query_one("#screen", Static).update(shown)
            self.readings += 1
            self.sub_title = f"every {interval:g}s" + (" (paused: space resumes)" if self.frozen else "")

        def action_freeze(self) -> None:
            self.frozen = not self.frozen
            self.sub_title = f"every {interval:g}s" + (" (paused: space resumes)" if self.frozen else "")

    return Top()


@command()
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds between readings.")  # fmt: skip
@click.option("--once", is_flag=True, help="Print one screen and exit (no terminal UI).")
@click.option("--top", "top", type=click.IntRange(min=0, max=1000), default=TOP_TENANTS, show_default=True,
              help="Tenants shown by name per governor (the most loaded); the others summed as '(other)'.")  # fmt: skip
@global_options()
@pass_app
def top(app: App, interval: float, once: bool, top: int) -> None:
    """A live view of every governor in the Redis: state, capacity, in flight, the queue by
    class and tenant, holds with their reasons and ends, budgets. Keys: q quit, r read again,
    space pause. With --name, that governor alone."""
    client = app.client()
    names = [app.name] if app.name else None
    first = read_all(client, app.prefix, names)  # a Redis that does not answer fails here, with a clear line
    try:
        import rich  # noqa: F401  (textual's own)
        import textual  # noqa: F401
    except ImportError:
        fail(INSTALL)
    if once:
        from rich.console import Console

        Console(width=120).print(render(first, top))
        return
    make_app(lambda: read_all(client, app.prefix, names), interval, top).run()


COMMANDS = [top]
