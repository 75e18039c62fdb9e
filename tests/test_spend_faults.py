"""Spend under faults: a state that may have lost spend never starts over
empty. A spend key that came back from an RDB snapshot (a real restart of
a private redis-server), and a governor whose every key was lost, each
count the open window as spent in full, log why, and take calls again
when the window resets or an operator approves more."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from governor import Governor, GovernorConfig
from governor.spend import SpendBudget, SpendExhausted, read_lines

from .conftest import FakeClock
from .support.servers import RedisServer

MakeGov = Callable[..., Governor]
DOLLAR = 1_000_000
NOON = datetime(2026, 12, 7, 12, tzinfo=timezone.utc).timestamp()
CONFIG = GovernorConfig(restart_hold=False, spend=(SpendBudget("daily", "day", limit=10),))


def decision_log(gov: Governor, kind: str) -> list[dict[str, str]]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    entries = [{text(k): text(v) for k, v in fields.items()} for _, fields in gov.client.xrange(gov.keys.events)]
    return [e for e in entries if e["kind"] == kind]


def fleet_line(gov: Governor, clock: FakeClock) -> Any:
    lines = read_lines(gov.client.hgetall(gov.keys.spend), round(clock() * 1000))
    return next(x for x in lines if x.scope == "*")


def test_spend_restored_from_an_rdb_snapshot_counts_the_window_in_full() -> None:
    server = RedisServer(None, "--dbfilename", "dump.rdb").start()
    clock = FakeClock(NOON)
    try:
        gov = Governor(server.client(), "fleet", CONFIG, clock=clock)
        gov.spend.reserve(DOLLAR)
        server.client().save()
        gov.spend.reserve(5 * DOLLAR)  # not in the snapshot: the restored spend says $1
        gov.close()
        server.kill()
        server.start()
        gov = Governor(server.client(), "fleet", CONFIG, clock=clock)
        with pytest.raises(SpendExhausted) as caught:
            gov.spend.reserve(DOLLAR)
        assert caught.value.spent == 11 * DOLLAR  # the restored $1 and the whole limit, never $1 alone
        lost = decision_log(gov, "spend-lost")
        assert lost and "came back from a snapshot" in lost[0]["why"]
        assert fleet_line(gov, clock).lost_at == round(clock() * 1000)
        gov.spend.approve("daily", add=5)  # an operator who knows what was spent lets the fleet go on
        gov.spend.reserve(DOLLAR)
        clock.now = NOON + 86400  # tomorrow's window was never spent in
        gov.spend.reserve(9 * DOLLAR)
        gov.close()
    finally:
        server.cleanup()


def test_a_governor_whose_every_key_was_lost_starts_its_window_spent(make_gov: MakeGov) -> None:
    clock = FakeClock(NOON)
    gov = make_gov(CONFIG, clock=clock)
    gov.spend.reserve(DOLLAR)
    gov.client.delete(*gov.keys.keys)  # the state and the spend with it: re-created under a recovery hold
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(DOLLAR)
    assert caught.value.spent == 10 * DOLLAR
    assert "recovery hold" in decision_log(gov, "spend-lost")[0]["why"]
