"""``governor spend``: what each spend budget and tenant spent, and an
operator's approval of more (``governor spend approve``)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from .. import views
from ..spend import SpendLine, dollars, read_lines, seconds_until, stored_budgets
from .app import App, Command, clear_errors, fail, global_options, json_option, pass_app
from .render import emit_json, span, table, when


def read(app: App) -> tuple[Any, int, tuple[SpendLine, ...], dict[str, Any]]:
    """The governor, the server's clock (ms), every budget and scope, and the stored definitions."""
    gov, _ = app.existing()
    client = app.client()
    raw = client.hgetall(gov.keys.spend)
    now_ms = views.server_time_ms(client)
    return gov, now_ms, read_lines(raw, now_ms), stored_budgets(raw)


def status_lines(client: Any, keys: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``governor status``'s spend: each budget and scope as JSON and as one line of text."""
    now_ms = views.server_time_ms(client)
    lines = read_lines(client.hgetall(keys.spend), now_ms)
    text = []
    for x in lines:
        whose = "fleet" if x.scope == "*" else f"tenant {x.scope}"
        resets = "" if x.resets_at is None else f", resets in {span(seconds_until(x.resets_at, now_ms))}"
        paused = ", PAUSED at its threshold: governor spend approve" if x.paused else ""
        text.append(f"spend {x.budget} ({whose}, {x.window}): {x.shown(x.spent)} of {x.shown(x.limit)}{resets}{paused}")
    return [line_dict(x, now_ms) for x in lines], text


def line_dict(line: SpendLine, now_ms: int) -> dict[str, Any]:
    return {
        **dataclasses.asdict(line),
        "remaining": line.remaining,
        "resets_in": None if line.resets_at is None else seconds_until(line.resets_at, now_ms),
    }


class _Group(click.Group):
    """``spend`` shows when no subcommand is given; errors are made clear, as every command's."""

    def invoke(self, ctx: click.Context) -> Any:
        with clear_errors(ctx.find_object(App)):
            return super().invoke(ctx)


@click.group("spend", cls=_Group, invoke_without_command=True)
@json_option
@global_options()
@click.pass_context
def spend(ctx: click.Context, as_json: bool) -> None:
    """What each spend budget and tenant spent in its window: spent,
    reserved (not yet settled), limit, window, resets at; a paused threshold
    and a loss counted as spent are said."""
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(App)
    assert app is not None
    gov, now_ms, lines, _ = read(app)
    if as_json:
        emit_json({"governor": gov.name, "now": now_ms / 1000, "spend": [line_dict(x, now_ms) for x in lines]})
        return
    if not lines:
        click.echo(f"governor {gov.name!r}: no spend recorded (no spend budget, or none spent yet)")
        return
    rows = []
    for x in lines:
        note = []
        if x.paused:
            note.append(f"paused at {x.threshold:.0%}: approve more")
        if x.approved:
            note.append(f"+{x.shown(x.approved)} approved")
        if x.lost_at:
            note.append(f"spend lost at {when(x.lost_at / 1000)}: counted as spent")
        resets = (
            "-"
            if x.resets_at is None
            else f"{when(x.resets_at / 1000)} (in {span(seconds_until(x.resets_at, now_ms))})"
        )
        share = f"{x.spent / x.limit:.0%}" if x.limit else "-"
        rows.append(
            [x.budget, "fleet" if x.scope == "*" else x.scope, x.shown(x.spent), share, x.shown(x.reserved),
             x.shown(x.limit), x.window, resets, "; ".join(note)]
        )  # fmt: skip
    click.echo(table(["BUDGET", "SCOPE", "SPENT", "SHARE", "RESERVED", "LIMIT", "WINDOW", "RESETS AT", ""], rows))


@spend.command("approve", cls=Command)
@click.option("--budget", "-b", metavar="NAME", help="The spend budget (needed when there are several).")
@click.option("--tenant", "-t", metavar="TENANT", help="The tenant whose limit to raise (default: the fleet's).")
@click.option(
    "--add",
    "add",
    required=True,
    metavar="DOLLARS",
    help="Dollars (or requests, tokens) added until the window resets.",
)
@json_option
@global_options()
@pass_app
def approve(app: App, budget: str | None, tenant: str | None, add: str, as_json: bool) -> None:
    """Approve more spend: raise a budget's limit (the fleet's, or a
    tenant's) by DOLLARS until its window resets; a scope paused at its soft
    threshold takes calls again."""
    try:
        amount = Decimal(add)
    except InvalidOperation:
        raise click.BadParameter(f"{add!r} is not a number of dollars", param_hint="--add") from None
    gov, _, _, budgets = read(app)
    if budget is not None and budget in budgets and budgets[budget].unit != "usd":
        if amount != amount.to_integral_value():
            raise click.BadParameter(f"{add!r} is not a whole number of {budgets[budget].unit}", param_hint="--add")
        amount = Decimal(int(amount))
    if budget is None:
        if len(budgets) != 1:
            names = ", ".join(sorted(budgets)) or "none yet"
            raise click.UsageError(f"which budget? Pass --budget NAME (the governor's spend budgets: {names})")
        budget = next(iter(budgets))
    if budget not in budgets:
        names = ", ".join(sorted(budgets)) or "none"
        fail(
            f"governor {gov.name!r} has no spend budget {budget!r} (its budgets: {names}); "
            "a budget is known once a client with it in its config has reserved spend"
        )
    found = budgets[budget]
    until = gov.spend.approve(found, tenant=tenant, add=amount if found.unit == "usd" else int(amount))
    _, now_ms, lines, _ = read(app)
    scope = tenant or "*"
    after = next((x for x in lines if x.budget == budget and x.scope == scope), None)
    if as_json:
        emit_json({"governor": gov.name, "budget": budget, "scope": scope, "added": str(amount), "until": until,
                   "line": None if after is None else line_dict(after, now_ms)})  # fmt: skip
        return
    whose = "the fleet" if tenant is None else f"tenant {tenant}"
    limit = "" if after is None else f": limit now {dollars(after.limit)}, {dollars(after.spent)} spent"
    click.echo(
        f"governor {gov.name!r}: approved ${amount} more for {whose} in budget {budget} until {when(until)}{limit}"
    )


COMMANDS = [spend]
