"""``leases``, ``queue`` and ``events``: who holds the slots, who waits (in
which class, for which tenant) and why, and the decision log."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import click

from .. import views
from .app import App, command, global_options, json_option, pass_app
from .render import (
    TOP_TENANTS,
    blocked_line,
    breakdown_dict,
    describe_event,
    emit_json,
    event_dict,
    span,
    summary_line,
    table,
)


@command()
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Show at most this many.")
@json_option
@global_options()
@pass_app
def leases(app: App, limit: int, as_json: bool) -> None:
    """Who holds the slots: lease id, holder, host, class, tenant, age, TTL left, fence."""
    gov, _ = app.existing()
    client = app.client()
    priorities = views.read_priorities(client, gov.keys)
    listing = views.read_leases(client, gov.keys, limit, priorities)
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
        [
            x.id,
            x.holder,
            x.host,
            x.priority,
            x.tenant,
            span(x.age),
            span(x.ttl_left) if x.live else "expired",
            x.fence,
        ]
        for x in listing.items
    ]
    click.echo(table(["LEASE ID", "HOLDER", "HOST", "CLASS", "TENANT", "AGE", "TTL LEFT", "FENCE"], rows))
    live = [x for x in listing.items if x.live]
    hosts = Counter(x.host for x in live)
    summary = ", ".join(f"{host} {n}" for host, n in hosts.most_common())
    click.echo(f"\n{len(live)} live lease(s) on {len(hosts)} host(s): {summary or '-'}")
    counts = views.count_shares(live, (), priorities)
    click.echo(f"  by class:  {summary_line(counts.by_class, 'in_flight')}")
    click.echo(f"  by tenant: {summary_line(counts.top_tenants(TOP_TENANTS), 'in_flight')}")
    if listing.total > len(listing.items):
        click.echo(f"(showing {len(listing.items)} of {listing.total}; raise --limit to see more)")


@command()
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Show at most this many.")
@click.option(
    "--top",
    type=click.IntRange(min=0, max=1000),
    default=TOP_TENANTS,
    show_default=True,
    help="Tenants named in the summary (the most queued); the others are summed as '(other)'.",
)
@json_option
@global_options()
@pass_app
def queue(app: App, limit: int, top: int, as_json: bool) -> None:
    """The waiters in the order they will be admitted (the aged first, then a
    higher class first, then by the tenants' shares), each one's class, tenant
    and time waited; a summary by class and tenant; and why they wait."""
    gov, state = app.existing()
    client = app.client()
    priorities = views.read_priorities(client, gov.keys)
    everyone = views.read_queue(client, gov.keys, max(limit, views.COUNT_LIMIT), priorities)
    shown = everyone.items[:limit]
    summary = views.count_shares((), everyone.items, priorities, everyone.total <= len(everyone.items))
    if as_json:
        emit_json(
            {
                "governor": gov.name,
                "now": everyone.now,
                "total": everyone.total,
                "blocked": state.blocked,
                "waiters": [
                    {**dataclasses.asdict(x), "place": x.place, "host": x.host, "waited": x.waited, "live": x.live}
                    for x in shown
                ],
                "summary": breakdown_dict(summary, top),
            }
        )
        return
    if not shown:
        click.echo(f"governor {gov.name!r}: nobody is queued")
        return
    click.echo(f"blocked: {blocked_line(state)}\n")
    rows = [
        [
            x.place,
            x.id,
            x.holder,
            x.host,
            x.priority,
            x.tenant,
            "yes" if x.aged else "-",
            span(x.waited),
            span(x.deadline - x.now) if x.live else "dead (stopped refreshing)",
        ]
        for x in shown
    ]
    headers = ["POS", "WAITER ID", "HOLDER", "HOST", "CLASS", "TENANT", "AGED", "WAITED", "REFRESH DUE IN"]
    click.echo(table(headers, rows))
    if everyone.total > len(shown):
        click.echo(f"(showing {len(shown)} of {everyone.total}; raise --limit to see more)")
    live = sum(c.queued for c in summary.by_class.values())
    click.echo(f"\n{live} live waiter(s)")
    click.echo(f"  by class:  {summary_line(summary.by_class)}")
    click.echo(f"  by tenant: {summary_line(summary.top_tenants(top))}")
    pairs = [[p, t, c.queued, c.aged] for (p, t), c in summary.top_pairs(top).items()]
    if pairs:
        click.echo("\n" + table(["CLASS", "TENANT", "QUEUED", "AGED"], pairs))
    if not summary.complete:
        click.echo(f"(the summary counts the first {len(everyone.items)} waiters)")


@command()
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

    def keep(event: views.DecisionEvent) -> bool:
        return not wanted or event.kind in wanted

    def show(event: views.DecisionEvent, as_array: bool = False) -> None:
        if as_json and not as_array:
            click.echo(json.dumps(event_dict(event), sort_keys=True))
        elif not as_json:
            click.echo(describe_event(event))

    if not follow:
        recent = views.read_events(client, keys, count, kinds=wanted or None)
        if as_json:
            emit_json([event_dict(e) for e in recent])
        elif not recent:
            click.echo(f"governor {gov.name!r}: the decision log is empty")
        for event in recent:
            show(event, as_array=True)
        return
    if since is None:
        after = views.last_event_id(client, keys)
        for event in reversed(views.read_events(client, keys, count, kinds=wanted or None)):
            show(event)
    else:
        after = since
    printed = 0
    block = min(1.0, app.timeout / 2)
    try:
        while max_events is None or printed < max_events:
            for event in views.wait_events(client, keys, after, block):
                after = event.id
                if keep(event):
                    show(event)
                    printed += 1
                    if max_events is not None and printed >= max_events:
                        return
    except KeyboardInterrupt:
        return


COMMANDS = (leases, queue, events)
