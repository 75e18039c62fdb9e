"""``explain``: the part of the admission rule that keeps a holder, a tenant or a class waiting, and what lets it in.

The rule is ``blocked()`` of lua/lib/admission.lua, asked in its order:
paused, a hold, concurrency (capacity, then the reserve of the highest
class), each budget, the tenant's cap, then the queue (nobody ahead).
What the status script already answers is used as given: ``blocked``
(why a new caller of the default class and tenant waits: a pause, a hold,
capacity, a budget) and ``held_back`` (the classes below the highest at
the reserve, the tenants at their caps). Only what depends on the
waiter's own cost and place is worked out here, from the status's budgets,
the stored caps and the leases counted per tenant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import click

from .. import views
from ..budgets import Tokens
from ..config import parse_weights
from ..core import Status
from .app import App, command, global_options, json_option, pass_app
from .render import emit_json, span, when

#: the rules, in the order blocked() asks them, then the queue
RULES = ("paused", "hold", "capacity", "reserve", "budget", "tenant cap", "queued ahead", "none")


@dataclass(frozen=True)
class Explanation:
    """Why one holder, tenant or class waits, and what lets it in."""

    target: str  #: what was explained, e.g. "tenant acme (2 waiting)"
    rule: str  #: one of RULES; "unusable" for a state no caller may use; "holding" for a holder with a lease
    why: str  #: the rule's own words (the scripts' where they give them)
    admits: str  #: what would let it in
    waiting: int  #: its waiters now (queued and parked)


@dataclass(frozen=True)
class _Caller:
    """The place and cost the rule is asked for."""

    priority: str
    rank: int
    tenant: str
    tokens: Tokens
    position: int  #: waiters ahead (-1 parked; 0 for a caller not queued yet)
    parked: bool


def _in(seconds: float) -> str:
    return f"in {span(max(0.0, seconds))}"


def explain_caller(
    status: Status, stored: dict[str, str], tenants: dict[str, int], caller: _Caller
) -> tuple[str, str, str]:
    """(rule, why, admits) for ``caller``, ``tenants`` the leases in flight per tenant."""
    blocked, now = status.blocked, status.now
    if blocked.startswith("paused"):
        if status.pause_kind == "policy":
            admits = "the policy's recovery (a probe or a report after the pause drains), or `governor resume`"
        elif status.paused_until:
            admits = f"its end at {when(status.paused_until)} ({_in(status.paused_until - now)}), or `governor resume`"
        else:
            admits = "`governor resume` (an operator pause without an end)"
        return "paused", blocked, admits
    if blocked.startswith("recovery hold"):
        end = status.hold_until or status.not_before or now
        return "hold", blocked, f"its end at {when(end)} ({_in(end - now)}), or `governor resume --lift-recovery-hold`"
    if blocked.startswith("holding"):
        end = status.not_before or now
        return "hold", blocked, f"its end at {when(end)} ({_in(end - now)}): the provider's retry-after"
    if blocked.startswith("at capacity"):
        ahead = "" if caller.position <= 0 else f"; {caller.position} waiter(s) ahead of it go first"
        return "capacity", blocked, f"the next release of any lease admits the head of the queue{ahead}"
    if status.blocked and not blocked.startswith(("earlier callers", *(b.kind for b in status.budgets))):
        return "unusable", blocked, "an operator: see `governor status`"
    for reason in filter(None, status.held_back.split("; ")):
        if caller.rank > 0 and reason.startswith("at capacity below the highest class"):
            highest = (stored.get("priorities", "") or "the highest").split(",")[0]
            return (
                "reserve",
                reason,
                f"the next release of a lease of a class below {highest} (class {caller.priority})",
            )
    for budget in status.budgets:
        if not caller.tokens.counts_in(budget.kind):
            continue  # (a bucket of another tier's: its debt holds no other caller)
        cost = caller.tokens.cost(budget.kind)
        full = budget.burst or budget.limit
        if budget.level < min(cost, full):
            need = min(cost, full) - budget.level
            why = f"{budget.kind} budget: {cost} wanted, {int(budget.level)} left of {full}"
            refill = need * 60 / budget.limit if budget.limit else 0.0
            return "budget", why, f"the {budget.kind} bucket refilling at {budget.limit} a minute ({_in(refill)})"
    caps = dict(parse_weights(stored.get("tenant_caps", ""))) if stored.get("tenant_caps") else {}
    cap, held = caps.get(caller.tenant), tenants.get(caller.tenant, 0)
    if cap is not None and (held + 1 > cap or caller.parked):
        why = f"tenant {caller.tenant} at its cap: {held} in flight of {cap}"
        return "tenant cap", why, f"the next release of a {caller.tenant} lease admits its first parked waiter"
    if caller.position > 0 or blocked.startswith("earlier callers"):
        count = caller.position if caller.position > 0 else status.queued
        why = f"behind {count} earlier waiter(s) of its class or above"
        return "queued ahead", why, "those ahead are admitted first (a higher class first, FIFO within one)"
    return "none", "nothing holds it: it is admitted at its next grant or refresh", "nothing to wait for"


def explain(client: Any, keys: Any, status: Status, kind: str, value: str) -> Explanation:
    """Why ``kind`` (holder, tenant or class) ``value`` waits on the governor of ``keys``."""
    priorities = views.read_priorities(client, keys)
    queue = views.read_queue(client, keys, views.COUNT_LIMIT, priorities)
    parked = views.read_parked(client, keys, views.COUNT_LIMIT, priorities)
    leases = views.read_leases(client, keys, views.COUNT_LIMIT, priorities)
    stored = views.read_config(client, keys)
    tenants: dict[str, int] = {}
    for info in leases.items:
        if info.live:
            tenants[info.tenant] = tenants.get(info.tenant, 0) + 1
    waiters = [w for w in (*parked.items, *queue.items) if w.live]
    field = {"holder": "holder", "tenant": "tenant", "class": "priority"}[kind]
    mine = [w for w in waiters if getattr(w, field) == value or (kind == "holder" and w.id == value)]
    if kind == "class" and value not in priorities:
        raise click.BadParameter(f"no class {value!r}; the classes are {', '.join(priorities)}", param_hint="CLASS")
    if not mine and kind == "holder":
        held = [lease for lease in leases.items if value in (lease.holder, lease.id)]
        if held:
            lease = held[0]
            return Explanation(
                f"holder {lease.holder}", "holding", f"it holds lease {lease.id} (fence {lease.fence})",
                "nothing: it is not waiting", 0,
            )  # fmt: skip
        raise click.BadParameter(f"no holder or waiter {value!r} is waiting or holding a lease", param_hint="HOLDER")
    if mine:
        first = mine[0]  # the parked first (its tenant's cap), then the queue's order
        caller = _Caller(first.priority, priorities.index(first.priority) if first.priority in priorities else 0,
                         first.tenant, Tokens(first.tokens[0], first.tokens[1], first.tier or None), first.position,
                         first.parked)  # fmt: skip
        target = f"{kind} {value}" + ("" if kind == "holder" else f" (first waiter: {first.holder})")
    else:  # a new caller of that tenant (default class) or of that class (default tenant)
        default = stored.get("default_priority", priorities[0] if priorities else "")
        priority = value if kind == "class" else default
        rank = priorities.index(priority) if priority in priorities else 0
        caller = _Caller(priority, rank, value if kind == "tenant" else "", Tokens(), 0, False)
        target = f"{kind} {value} (none waiting: a new caller)"
    rule, why, admits = explain_caller(status, stored, tenants, caller)
    return Explanation(target, rule, why, admits, len(mine))


@command()
@click.option("--holder", "holder", metavar="HOLDER", help="A holder's label or a waiter's id.")
@click.option("--tenant", "tenant", metavar="TENANT", help="A tenant (its first waiter, or a new caller of it).")
@click.option("--class", "priority", metavar="CLASS", help="A priority class (its first waiter, or a new caller).")
@json_option
@global_options()
@pass_app
def explain_command(app: App, holder: str | None, tenant: str | None, priority: str | None, as_json: bool) -> None:
    """The rule that keeps a holder, a tenant or a class waiting now, and what would let it in."""
    given = [(k, v) for k, v in (("holder", holder), ("tenant", tenant), ("class", priority)) if v is not None]
    if len(given) != 1:
        raise click.UsageError("say what to explain: one of --holder HOLDER, --tenant TENANT or --class CLASS")
    gov, status = app.existing()
    found = explain(app.client(), gov.keys, status, *given[0])
    if as_json:
        emit_json(asdict(found))
        return
    click.echo(f"{found.target}: {found.rule}")
    click.echo(f"  why:    {found.why}")
    click.echo(f"  admits: {found.admits}")


explain_command.name = "explain"
COMMANDS = [explain_command]
