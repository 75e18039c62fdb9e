"""Formatting for the ``governor`` command: times, durations, tables,
sparklines, a status, a decision. Nothing here decides anything: why a
caller waits is the scripts' answer (``Status.blocked``), shown as given."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from .. import views
from ..budgets import Budget
from ..core import Status
from ..views import SharesSettings

SPARK = "▁▂▃▄▅▆▇█"
#: tenants shown by name in a summary; the others are summed as views.OTHER
TOP_TENANTS = 10


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


def emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def shown(value: Any) -> str:
    """A value in a before -> after line: times as times, text quoted, '-' for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        return repr(value)
    return str(value)


# -- a status -----------------------------------------------------------------------


def status_dict(status: Status) -> dict[str, Any]:
    """A status as JSON-ready data (``blocked`` as the scripts gave it), with
    the state word, the rate-limited share and whether a hold runs."""
    out = dataclasses.asdict(status)
    out["state"] = views.state_of(status)
    out["rate_limited_share"] = round(status.rate_limited_share, 4)
    out["holding"] = status.holding
    return out


def blocked_line(status: Status) -> str:
    """Why a new caller waits, in the scripts' words, or that it does not."""
    if status.blocked:
        return status.blocked
    if status.held_back:
        return f"not the default caller; held back: {status.held_back}"
    return "no: new callers are admitted"


def state_line(status: Status) -> str:
    """What a new caller meets now: the state word and its figures (the why is ``blocked``)."""
    state = views.state_of(status)
    if state == "paused":
        who = "an operator" if status.pause_kind == "operator" else "the policy"
        until = f" until {when(status.paused_until)}" if status.paused_until else ""
        return f"PAUSED by {who}{until} (new callers queue, holders keep running)"
    if state == "holding":
        if status.recovery_hold and (status.hold_until or 0) >= (status.not_before or 0):
            return f"HOLDING: {recovery_hold_line(status)}; new callers queue"
        left = (status.not_before or 0) - status.now
        return f"HOLDING until {when(status.not_before)} ({span(left)} left); new callers queue"
    if state == "full":
        return f"FULL: {status.in_flight} in flight of {status.capacity}, {status.queued} queued; new callers queue"
    if state == "limited":
        return (
            f"LIMITED: {max(0, status.capacity - status.in_flight)} free slot(s), but not for every caller "
            f"(held back: {status.held_back})"
        )
    return f"OPEN: {max(0, status.capacity - status.in_flight)} free slot(s); new callers are admitted"


def recovery_hold_line(status: Status) -> str:
    """The recovery hold: until when, how long left, and why."""
    left = (status.hold_until or 0) - status.now
    return f"recovery hold until {when(status.hold_until)} ({span(left)} left): {status.hold_reason}"


def budget_line(budget: Budget) -> str:
    """One budget: level of capacity, reserved in flight, refill, source."""
    return (
        f"{budget.level:,.0f} of {budget.burst:,} left, {budget.reserved:,} reserved in flight; "
        f"refills {budget.limit:,}/min ({budget.source})"
    )


def classes_line(settings: SharesSettings) -> str:
    """The classes, highest first, the default one marked."""
    if not settings.priorities:
        return "-"
    default = f"; a caller naming none: {settings.default_priority}" if settings.default_priority else ""
    return f"{', '.join(settings.priorities)}  (highest first{default})"


def aging_line(settings: SharesSettings) -> str:
    if settings.aging is None:
        return "off: a lower class waits as long as a higher one is queued"
    return f"{span(settings.aging)}: a waiter of a lower class then goes ahead of every class"


def weights_line(settings: SharesSettings) -> str:
    listed = ", ".join(f"{t}={w}" for t, w in sorted(settings.tenant_weights.items()))
    return f"{listed + '; ' if listed else ''}any other tenant {settings.default_weight}"


def count_dict(count: views.Count) -> dict[str, int]:
    return {"in_flight": count.in_flight, "queued": count.queued, "aged": count.aged}


def breakdown_dict(breakdown: views.Breakdown, top: int = TOP_TENANTS) -> dict[str, Any]:
    """Counts per class and per tenant (the ``top`` most loaded by name, the
    others summed as views.OTHER) as JSON-ready data."""
    return {
        "by_class": {name: count_dict(c) for name, c in breakdown.by_class.items()},
        "by_tenant": {name: count_dict(c) for name, c in breakdown.top_tenants(top).items()},
        "by_class_and_tenant": [
            {"priority": priority, "tenant": tenant, **count_dict(c)}
            for (priority, tenant), c in breakdown.top_pairs(top).items()
        ],
        "tenants": len(breakdown.by_tenant),
        "counts_complete": breakdown.complete,
    }


def _others(breakdown: views.Breakdown, top: int) -> str:
    rest = len(breakdown.by_tenant) - top
    return f" ({rest} tenants)" if rest > 0 else ""


def render_breakdown(breakdown: views.Breakdown, settings: SharesSettings, top: int = TOP_TENANTS) -> str:
    """In flight and queued per class, then per tenant (the ``top`` most loaded,
    the others summed), each tenant with its weight."""
    classes = [[name, c.in_flight, c.queued, c.aged] for name, c in breakdown.by_class.items()]
    parts = [table(["CLASS", "IN FLIGHT", "QUEUED", "AGED"], classes)]
    tenants = breakdown.top_tenants(top)
    if tenants:
        rows = [
            [name, settings.weight(name) or "-", c.in_flight, c.queued, c.aged]
            + ([_others(breakdown, top).strip()] if name == views.OTHER else [])
            for name, c in tenants.items()
        ]
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        headers = ["TENANT", "WEIGHT", "IN FLIGHT", "QUEUED", "AGED"] + [""] * (width - 5)
        parts.append(table(headers, rows))
    else:
        parts.append("tenants: none in flight or queued")
    if not breakdown.complete:
        parts.append(f"(counted from the first {views.COUNT_LIMIT} leases and waiters)")
    return "\n\n".join(parts)


def summary_line(counts: Mapping[str, views.Count], what: str = "queued") -> str:
    """``name n, name n (k aged), ...`` of one kind of count."""
    parts = []
    for name, c in counts.items():
        n = c.queued if what == "queued" else c.in_flight
        parts.append(f"{name} {n}" + (f" ({c.aged} aged)" if what == "queued" and c.aged else ""))
    return ", ".join(parts) or "-"


def render_status(status: Status, stored: Mapping[str, str] | None = None) -> str:
    share = f"{status.rate_limited_share:.1%}" if status.window_attempts else "-"
    learnt = []
    if status.ceiling:
        learnt.append(f"last pushback at {status.ceiling} in flight")
    if status.background:
        learnt.append(f"background refusal share {100 * status.background:.1f} %")
    if status.streak:
        learnt.append(f"{status.streak} success(es) in a row")
    quota = "none reported"
    if status.quota_exhausted:
        quota = f"{status.quota_exhausted} report(s), last at {when(status.quota_at)}"
        if status.quota_until is not None:
            quota += f", back at {when(status.quota_until)}"
    lines = [
        ("governor", f"{status.name}  (policy {status.policy}, schema v{status.schema})"),
        ("state", state_line(status)),
        ("blocked", blocked_line(status)),
        ("capacity", f"{status.capacity} / {status.max_capacity}" + (f"  ({', '.join(learnt)})" if learnt else "")),
        ("in flight", str(status.in_flight)),
        ("queued", str(status.queued)),
        (
            "window",
            f"{status.window_rate_limited} rate-limited of {status.window_attempts} attempts ({share}) "
            f"in the last {span(status.window)}",
        ),
        ("not_before", when(status.not_before) + (" (holding)" if status.holding else "")),
        *((f"budget {b.kind}", budget_line(b)) for b in status.budgets),
        ("quota", quota),
        *(_shares_lines(SharesSettings.from_stored(stored)) if stored is not None else []),
        (
            "lease TTLs",
            f"longest announced lately {span(status.ttl_max)}: a recovery hold after a loss lasts this long "
            "(forgotten when no client announces it for that long; `governor reset` counts it from the live leases)",
        ),
        ("fence", str(status.fence)),
        ("epoch", f"{status.epoch} (created {when(status.created)})"),
        ("now", when(status.now)),
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


def _shares_lines(settings: SharesSettings) -> list[tuple[str, str]]:
    return [("classes", classes_line(settings)), ("aging", aging_line(settings)), ("weights", weights_line(settings))]


# -- the decision log ---------------------------------------------------------------


def event_dict(event: views.DecisionEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "kind": event.kind,
        "at": event.at,
        "capacity": event.capacity,
        "paused": event.paused,
        "fields": dict(event.fields),
    }


def _window_note(event: views.DecisionEvent) -> str:
    if "window_rate_limited" in event.fields:
        return f" [window: {event.get('window_rate_limited')} rate-limited of {event.get('window_attempts')} attempts]"
    return ""


def _aging_ms(value: str) -> str:
    if not value.isdigit():
        return "-"
    return span(int(value) / 1000) if int(value) else "off"


def describe_event(event: views.DecisionEvent) -> str:
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
    elif kind == "age":
        after = event.get("after_ms")
        wait = f" after {span(int(after) / 1000)}" if after.isdigit() else ""
        text = f"{event.get('waiters')} waiter(s) aged{wait}, first {event.get('holder') or '-'}: {why}"
    elif kind == "set_shares":
        text = (
            f"tenant weights {event.get('from_weights') or '-'} -> {event.get('tenant_weights') or '-'}, "
            f"default weight {event.get('default_weight')}, "
            f"aging {_aging_ms(event.get('from_aging_ms'))} -> {_aging_ms(event.get('aging_ms'))}: {why}"
        )
    elif kind == "adopt":
        text = f"lease {event.get('lease')} adopted with fence {event.get('fence')}: {why}"
    else:
        known = ("why",)
        extra = " ".join(f"{k}={v}" for k, v in sorted(event.fields.items()) if k not in known)
        text = f"capacity {event.capacity}{' paused' if event.paused else ''}: {why}" + (f" {extra}" if extra else "")
    return f"{when(event.at)}  {kind:<9}  {text}"
