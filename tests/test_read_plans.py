"""Each operation's read plan is declared (PLANS of lua/lib/plans.lua)
and its code is held to it: every stored field a step reads and every
check that may fail it is the plan's, and nothing is read or checked after
the first write (Redis keeps what a function wrote when it then fails).
The write-order witness (tests/support/write_order.py) runs the same
guarantee call by call; this test reads it from the source, path by
path, where a reader sees it."""

from __future__ import annotations

import re

import pytest

from governor.scripts import OPERATIONS

from .support import read_plans
from .support.read_plans import Plan, Step

PLANS = read_plans.plans()
#: checks a check covers: check_types() checks every key; prepare() reads what these read
COVERED = {
    "check_types": {"guard", "guard_grant", "check_type"},
    "prepare": {"caps_config", "active_budgets", "oversize"},
}


def violations(plan: list[Plan], steps: list[Step]) -> list[str]:
    """How ``steps`` (an operation's code) departs from ``plan``; [] when it keeps it."""
    found = []
    names = [s.name for s in steps]
    if names != [p.name for p in plan]:
        return [f"the steps are {names}, the plan's {[p.name for p in plan]}"]
    allowed: set[str] | None = None  # after a writing step: what later steps may still check or read
    witnessed = False  # a step whose order the write-order witness checks came before
    for declared, step in zip(plan, steps, strict=True):
        if step.reads != declared.reads:
            found.append(f"{step.name!r} reads {sorted(step.reads)}, the plan {sorted(declared.reads)}")
        if step.checks != declared.checks:
            found.append(f"{step.name!r} checks {sorted(step.checks)}, the plan {sorted(declared.checks)}")
        if step.writes != bool(declared.writes):
            found.append(f"{step.name!r} {'writes' if step.writes else 'writes nothing'}, the plan says otherwise")
        checked = [what for kind, what in step.events if kind in ("check", "read")]
        if allowed is not None and not witnessed and not set(checked) <= allowed:
            found.append(f"{step.name!r} checks or reads {sorted(set(checked) - allowed)} after an earlier step wrote")
        if witnessed and checked and declared.writes != "witnessed":
            found.append(f"{step.name!r} checks after a witnessed step: its order is the witness's, say so")
        witnessed = witnessed or declared.writes == "witnessed"
        if declared.writes in ("true", "ends") and step.writes:
            first = next(j for j, (kind, _) in enumerate(step.events) if kind == "write")
            before = {what for kind, what in step.events[:first] if kind in ("check", "read")}
            after = [what for kind, what in step.events[first:] if kind in ("check", "read")]
            if declared.writes == "ends":
                if after:
                    found.append(f"{step.name!r} checks or reads {after} after its first write")
                if ("return", "") not in step.events[first:]:
                    found.append(f"{step.name!r} writes and does not return: the plan says it ends there")
            else:
                covered = before | {c for made in before for c in COVERED.get(made, set())}
                fields = {r for r in declared.again if "." in r or ":" in r}  # (read by a check before the write)
                if not declared.again - fields <= covered:
                    found.append(
                        f"{step.name!r}: again {sorted(declared.again - covered)} made nowhere before its write"
                    )
                allowed = declared.again & covered | {r for r in declared.again if "." in r or ":" in r}
                if not set(after) <= allowed:
                    found.append(f"{step.name!r} checks or reads {sorted(set(after) - allowed)} after its first write")
    return found


@pytest.mark.parametrize("operation", sorted(PLANS))
def test_each_step_reads_and_checks_what_its_plan_declares_and_nothing_after_a_write(operation: str) -> None:
    assert violations(PLANS[operation], read_plans.steps(operation)) == []


@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_call_that_may_fail_an_operation_is_one_the_plans_know(operation: str) -> None:
    """A function of lua/lib that may fail a call (it calls fail(), or one
    that does) is, where an operation calls it, a check, a read or a write
    of tests/support/read_plans.py: a new one is not missed by the plans."""
    known = read_plans.CHECKS | read_plans.WRITES | set(read_plans.READERS) | read_plans.NOTHING_NEW
    code = read_plans._code((read_plans.LUA / f"{operation}.lua").read_text(encoding="utf-8"))
    called = set(re.findall(r"(?<![.\w])(\w+)\s*\(", code))
    assert sorted(called & read_plans.may_fail() - known) == []


def test_every_operation_has_a_plan() -> None:
    assert set(PLANS) == set(OPERATIONS)
