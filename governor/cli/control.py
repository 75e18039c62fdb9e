"""``set-max``, ``pause``, ``resume``, ``reset``, ``configure`` and
``set-shares``: the operator's levers. Each is one call of the Governor API on an existing governor (never
creating one), then a before -> after account of what it changed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import click

from .. import views
from ..config import GovernorConfig, parse_weights
from ..core import Status
from ..errors import ConfigError
from ..policies import POLICY_NAMES, REGISTRY, Policy
from ..protocol import MAX_CAP, MAX_CAPACITY, MAX_WEIGHT, STATUS_FIELDS, ms, validate_tenant
from ..views import SharesSettings
from .app import App, F, command, fail, global_options, json_option, pass_app
from .render import (
    aging_line,
    emit_json,
    recovery_hold_line,
    shown,
    span,
    state_line,
    status_dict,
    weights_line,
    when,
)

#: status reply fields that traffic moves between any two reads: not compared
MOVING = ("now", "epoch", "created", "fence", "in_flight", "queued", "quota_exhausted", "quota_at", "quota_until")
#: what an operator command may change: the other fields of the status reply
COMPARED = tuple(f for f in STATUS_FIELDS if f not in MOVING)
#: the Status attribute of a status reply field where the two differ, and the reply's unit
ATTRIBUTE: dict[str, tuple[str, Callable[[float], Any]]] = {
    "window_ms": ("window", ms),
    "background_ppm": ("background", lambda share: round(share * 1_000_000)),
}
#: the status fields that are times (Status: Unix seconds or None)
TIMES = ("paused_until", "not_before", "hold_until")


def compared(status: Status, field: str) -> Any:
    """A status field as the status reply names it."""
    if field == "not_before" and not status.holding:
        return None  # a hold that is over holds nobody: clearing it changes nothing
    if field in ("hold_until", "hold_reason") and not status.recovery_hold:
        return None
    if field == "budgets":  # a bucket's level refills and leases reserve all the time: not a change
        return tuple(f"{b.kind} {b.limit}/min (burst {b.burst}, {b.source})" for b in status.budgets)
    attribute, convert = ATTRIBUTE.get(field, (field, lambda v: v))
    return convert(getattr(status, attribute))


def _shown(field: str, value: Any) -> str:
    return when(value) if field in TIMES else shown(value)


def confirm_change(
    action: str,
    before: Status,
    after: Status,
    as_json: bool,
    config: tuple[dict[str, str], dict[str, str]] | None = None,
) -> None:
    """Say what an operator command changed, field by field (before -> after);
    ``config``: the stored config before and after, for a command that stores one."""
    if after.epoch != before.epoch:
        fail(
            f"governor {before.name!r} was re-created while {action} ran (its state expired or was flushed); "
            "check it with `governor status` and repeat the command"
        )
    changed = {
        f: (compared(before, f), compared(after, f)) for f in COMPARED if compared(before, f) != compared(after, f)
    }
    stored: dict[str, tuple[str | None, str | None]] = {}
    if config is not None:
        old, new = config
        stored = {f: (old.get(f), new.get(f)) for f in sorted({*old, *new}) if old.get(f) != new.get(f)}
    if as_json:
        out: dict[str, Any] = {
            "governor": after.name,
            "action": action,
            "changed": {f: list(v) for f, v in changed.items()},
            "before": status_dict(before),
            "after": status_dict(after),
        }
        if config is not None:
            out["config_changed"] = {f: list(v) for f, v in stored.items()}
            out["config"] = config[1]
        emit_json(out)
        return
    click.echo(f"governor {after.name!r}: {action}")
    if not changed and not stored:
        click.echo("  nothing changed")
    width = max([len(f) for f in changed] or [0])
    for f, (old_value, new_value) in changed.items():
        click.echo(f"  {f.ljust(width)}  {_shown(f, old_value)} -> {_shown(f, new_value)}")
    if stored:
        click.echo("  stored config:")
        width = max(len(f) for f in stored)
        for f, (old_raw, new_raw) in stored.items():
            click.echo(f"    {f.ljust(width)}  {old_raw or '-'} -> {new_raw or '-'}")
    click.echo(f"  now: {state_line(after)}")
    if after.blocked:
        click.echo(f"  blocked: {after.blocked}")
    if after.recovery_hold:
        click.echo(f"  kept: {recovery_hold_line(after)}; `governor resume --lift-recovery-hold` ends it")


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


@command("set-max")
@click.argument("n", type=click.IntRange(min=1, max=MAX_CAPACITY))
@json_option
@global_options()
@pass_app
def set_max(app: App, n: int, as_json: bool) -> None:
    """Set max_capacity to N; what the policy learnt is kept.

    A lower N applies at once (capacity never above it). A higher N is a new
    ceiling the adaptive policy approaches as it approaches any (its slow
    start, its probes, while the provider accepts): no burst. The seed and
    fixed policies set capacity to N at once. While paused, the resume uses N.
    """
    gov, before = app.existing()
    confirm_change(f"max_capacity set to {n}", before, gov.set_max_capacity(n, create=False), as_json)


DEFAULT_PAUSE_REASON = "no reason given"


@command()
@click.option(
    "--reason", default=DEFAULT_PAUSE_REASON, show_default=True, help="Shown to queued callers and operators."
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


@command()
@json_option
@global_options()
@pass_app
@click.option(
    "--lift-recovery-hold",
    is_flag=True,
    help="Also end the recovery hold after a loss: holders from before the loss may still run unseen until it ends.",
)
def resume(app: App, as_json: bool, lift_recovery_hold: bool) -> None:
    """Lift any pause and any Retry-After hold; a recovery hold only with --lift-recovery-hold."""
    gov, before = app.existing()
    after = gov.resume(lift_recovery_hold=lift_recovery_hold, create=False)
    action = "resumed" + (", recovery hold lifted" if lift_recovery_hold and before.recovery_hold else "")
    confirm_change(action, before, after, as_json)


@command()
@json_option
@global_options()
@pass_app
def reset(app: App, as_json: bool) -> None:
    """Forget what the policy learnt (window, pause, hold); capacity back to max.

    The longest lease TTL (how long a recovery hold lasts) is counted again
    from the live leases: a one-off client's long TTL is forgotten.

    The stored config is applied afresh (the adaptive policy starts slow again,
    from the resume level); the holders and the queue are kept.
    `governor configure` stores another policy or other numbers.
    """
    gov, before = app.existing()
    confirm_change("reset", before, gov.reset(create=False), as_json)


# -- configure: the policy's options come from governor.policies ---------------------


def policy_settings() -> dict[str, tuple[type[int] | type[float], tuple[str, ...]]]:
    """Every policy's setting: its type and the policies that have it (governor.policies.REGISTRY)."""
    out: dict[str, tuple[type[int] | type[float], tuple[str, ...]]] = {}
    for policy in REGISTRY.values():
        for field in dataclasses.fields(policy):
            kind: type[int] | type[float] = int if field.type in ("int", int) else float
            had = out.get(field.name, (kind, ()))
            out[field.name] = (kind, (*had[1], policy.name))
    return out


def policy_options(f: F) -> F:
    """An option per policy setting (``--cut-factor`` ...), each None unless given."""
    for name, (kind, policies) in reversed(policy_settings().items()):
        defaults = ", ".join(f"{p} {getattr(REGISTRY[p](), name)}" for p in policies)
        f = click.option(
            "--" + name.replace("_", "-"),
            name,
            type=click.INT if kind is int else click.FLOAT,
            default=None,
            help=f"{' and '.join(policies)} policy (default: {defaults}).",
        )(f)
    return f


def chosen_policy(current: Policy, name: str | None, given: dict[str, Any]) -> Policy:
    """The policy to store: ``name``'s (the current one if not given), from the
    current numbers when it is the current policy, else from its defaults,
    with the ``given`` settings. ConfigError for a setting it does not have."""
    cls = REGISTRY[name] if name else type(current)
    start = current if isinstance(current, cls) else cls()
    own = {field.name for field in dataclasses.fields(cls)}
    alien = [k for k in given if k not in own]
    if alien:
        options = ", ".join("--" + k.replace("_", "-") for k in alien)
        raise ConfigError(f"the {cls.name} policy has no {options}")
    return dataclasses.replace(start, **given)


@command()
@click.option("--policy", type=click.Choice(POLICY_NAMES), help="The policy to store (default: the stored one).")
@policy_options
@json_option
@global_options()
@pass_app
def configure(app: App, /, policy: str | None, as_json: bool, **settings: Any) -> None:
    """Store a policy (adaptive, seed or fixed) and its numbers, then reset.

    The stored config's other fields (max_capacity, window, ...) are kept;
    settings not given keep their stored value when the policy stays, and
    take the new policy's defaults when it changes. Every client learns the
    new config at once.
    """
    gov, before = app.existing()
    client = app.client()
    old = views.read_config(client, gov.keys)
    current = GovernorConfig.from_stored(old, app.config(), gov.name)
    assert isinstance(current.policy, Policy)
    given = {k: v for k, v in settings.items() if v is not None}
    new = dataclasses.replace(current, policy=chosen_policy(current.policy, policy, given))
    after = app.governor(gov.name, new).configure(create=False)
    assert isinstance(new.policy, Policy)
    confirm_change(
        f"configured: policy {new.policy.name}", before, after, as_json, (old, views.read_config(client, gov.keys))
    )


# -- set-shares: the tenants' weights and the aging, at run time -------------------------

#: what ``--aging`` takes to turn aging off
AGING_OFF = ("off", "never", "none")


def parse_weight(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, int]:
    """``TENANT=WEIGHT`` pairs (the tenant's name and the weight's range are
    checked by GovernorConfig: a bad one is a usage error too)."""
    out: dict[str, int] = {}
    for value in values:
        tenant, sep, weight = value.partition("=")
        if not sep or not tenant or not weight.strip().isdigit():
            raise click.BadParameter(f"{value!r} is not TENANT=WEIGHT (e.g. team-a=3)", ctx, param)
        out[tenant.strip()] = int(weight)
    return out


def parse_aging(ctx: click.Context, param: click.Parameter, value: str | None) -> float | str | None:
    """A duration (90, 30s, 2m), or 'off': never; None when not given."""
    if value is None:
        return None
    if value.strip().lower() in AGING_OFF:
        return "off"
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    if match is None:
        raise click.BadParameter(f"{value!r} is not a duration nor 'off' (use e.g. 30, 30s, 2m or off)", ctx, param)
    return parse_duration(ctx, param, value)


@command("set-shares")
@click.option(
    "--weight",
    "weights",
    multiple=True,
    metavar="TENANT=W",
    callback=parse_weight,
    help=f"A tenant's weight, 1-{MAX_WEIGHT} (repeatable); the other stored weights are kept.",
)
@click.option(
    "--unset", "unset", multiple=True, metavar="TENANT", help="A tenant back to the default weight (repeatable)."
)
@click.option("--clear", is_flag=True, help="Drop every stored weight first (--weight then adds to none).")
@click.option(
    "--default-weight",
    type=click.IntRange(min=1, max=MAX_WEIGHT),
    help="The weight of a tenant that has none of its own.",
)
@click.option(
    "--aging",
    callback=parse_aging,
    metavar="SECONDS|off",
    help="After this long (90, 30s, 2m) a waiter of a lower class goes ahead of every class; 'off': never.",
)
@click.option(
    "--cap",
    "caps",
    multiple=True,
    metavar="TENANT=N",
    callback=parse_weight,
    help=f"At most N leases of the tenant in flight, 1-{MAX_CAP} (repeatable); the other stored caps are kept.",
)
@click.option("--uncap", multiple=True, metavar="TENANT", help="A tenant's cap removed (repeatable).")
@click.option(
    "--reserve",
    type=click.IntRange(min=0),
    help="Slots only the highest class takes (below max_capacity); 0: none.",
)
@json_option
@global_options()
@pass_app
def set_shares(
    app: App,
    weights: dict[str, int],
    unset: tuple[str, ...],
    clear: bool,
    default_weight: int | None,
    aging: float | str | None,
    caps: dict[str, int],
    uncap: tuple[str, ...],
    reserve: int | None,
    as_json: bool,
) -> None:
    """Change the tenants' weights and caps, the default weight, the reserve
    or the aging, fleet-wide, at once.

    At capacity, grants go to the waiting tenants in proportion to their
    weights. Every client uses the new weights for the callers it queues
    from then on; waiters already queued keep their places. A cap (at most
    N of a tenant's leases in flight) and the reserve (slots only the
    highest class takes) apply at once. What the policy learnt is kept.
    What is not given stays as stored.
    """
    if not (weights or unset or clear or default_weight is not None or aging is not None or caps or uncap) and (
        reserve is None
    ):
        raise click.UsageError(
            "nothing to change: give --weight, --unset, --clear, --default-weight, --aging, --cap, --uncap or --reserve"
        )
    for tenant in (*unset, *uncap):
        validate_tenant(tenant)
    gov, before = app.existing()
    client = app.client()
    old = views.read_config(client, gov.keys)
    changes: dict[str, Any] = {}
    if weights or unset or clear:
        try:
            stored = {} if clear else dict(parse_weights(old.get("tenant_weights", "")))
        except ValueError as error:
            fail(f"governor {gov.name!r}: the stored tenant weights are unreadable ({error}); use --clear")
        for tenant in unset:
            stored.pop(tenant, None)
        changes["tenant_weights"] = {**stored, **weights}
    if default_weight is not None:
        changes["default_weight"] = default_weight
    if aging is not None:
        changes["aging"] = None if aging == "off" else aging
    if caps or uncap:
        try:
            stored_caps = dict(parse_weights(old.get("tenant_caps", "")))
        except ValueError as error:
            fail(f"governor {gov.name!r}: the stored tenant caps are unreadable ({error})")
        for tenant in uncap:
            stored_caps.pop(tenant, None)
        changes["tenant_caps"] = {**stored_caps, **caps}
    if reserve is not None:
        changes["reserve"] = reserve
    after = gov.set_shares(**changes, create=False)
    new = views.read_config(client, gov.keys)
    settings = SharesSettings.from_stored(new)
    caps_now = new.get("tenant_caps", "") or "none"
    action = (
        f"shares set: weights {weights_line(settings)}; caps {caps_now}; reserve {new.get('reserve', '0')}; "
        f"aging {aging_line(settings).split(':')[0]}"
    )
    confirm_change(action, before, after, as_json, (old, new))


COMMANDS = (set_max, pause, resume, reset, configure, set_shares)
