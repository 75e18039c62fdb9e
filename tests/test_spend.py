"""Spend budgets (governor/spend.py, lua/spend.lua): dollars per window for
the fleet and per tenant, reserved before a call and settled after it. On
Redis and fakeredis with an injected clock: each window kind and its reset,
exhaustion, the soft threshold and an operator's approval."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from governor import ConfigError, Governor, GovernorConfig
from governor.spend import SpendBudget, SpendExhausted, Window, read_lines

from .conftest import FakeClock

MakeGov = Callable[..., Governor]
DOLLAR = 1_000_000


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()  # type: ignore[misc]


def spend_config(*budgets: SpendBudget) -> GovernorConfig:
    return GovernorConfig(max_capacity=10, restart_hold=False, spend=budgets)


def lines(gov: Governor, clock: FakeClock) -> dict[tuple[str, str], Any]:
    return {
        (line.budget, line.scope): line
        for line in read_lines(gov.client.hgetall(gov.keys.spend), round(clock() * 1000))
    }


def decision_log(gov: Governor, kind: str) -> list[dict[str, str]]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    entries = [{text(k): text(v) for k, v in fields.items()} for _, fields in gov.client.xrange(gov.keys.events)]
    return [e for e in entries if e["kind"] == kind]


# -- windows: the boundaries computed in Python -------------------------------------------


def test_calendar_boundaries_follow_the_zone_and_iso_weeks() -> None:
    # 2026-03-08 is the US change to summer time: Pacific's day that starts then lasts 23 hours
    now = round(utc(2026, 3, 8, 20, 0) * 1000)
    _, start, end, _ = Window.parse("day@America/Los_Angeles").boundaries(now)
    assert datetime.fromtimestamp(start / 1000, ZoneInfo("America/Los_Angeles")).hour == 0
    assert (end - start) == 23 * 3600 * 1000
    week_start, _ = Window.parse("week").bounds(round(utc(2026, 12, 3, 12) * 1000))  # a Thursday
    assert datetime.fromtimestamp(week_start / 1000, timezone.utc) == datetime(2026, 11, 30, tzinfo=timezone.utc)
    start, end = Window.parse("month").bounds(round(utc(2026, 12, 31, 23) * 1000))
    assert datetime.fromtimestamp(end / 1000, timezone.utc) == datetime(2027, 1, 1, tzinfo=timezone.utc)


def test_a_day_whose_midnight_repeats_starts_once_whatever_the_hour() -> None:
    # Havana turns its clocks back from 01:00 to 00:00 on 2026-11-01: its midnight comes twice.
    # Every instant of that day names the same window (else its spend would start over mid-day).
    day = Window.parse("day@America/Havana")
    starts = {day.bounds(round(utc(2026, 11, 1, hour, 30) * 1000))[0] for hour in (4, 5, 12, 23)}
    assert starts == {round(utc(2026, 11, 1, 4) * 1000)}  # the first midnight, 00:00 CDT


def test_a_window_or_budget_that_cannot_work_is_refused_at_configuration() -> None:
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        Window.parse("day@Mars/Olympus")
    with pytest.raises(ConfigError, match="give a limit"):
        SpendBudget("b", "day")
    with pytest.raises(ConfigError, match="names of their own"):
        spend_config(SpendBudget("b", limit=1), SpendBudget("b", limit=2))


# -- reserve, settle, exhaust -------------------------------------------------------------


def test_a_daily_budget_reserves_settles_and_refuses_at_once_until_midnight(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 22, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=1)), clock=clock)
    first = gov.spend.reserve(600_000)
    assert lines(gov, clock)["daily", "*"].spent == 600_000
    assert lines(gov, clock)["daily", "*"].reserved == 600_000
    gov.spend.settle(first, 150_000)  # the usage cost less than the estimate: the rest goes back
    line = lines(gov, clock)["daily", "*"]
    assert (line.spent, line.reserved) == (150_000, 0)
    gov.spend.reserve(800_000)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(100_000)
    error = caught.value
    assert (error.budget, error.scope, error.spent, error.limit, error.why) == ("daily", "*", 950_000, DOLLAR, "limit")
    assert error.resets_at == utc(2026, 12, 8)
    assert "resets at 2026-12-08 00:00:00 UTC" in str(error) and "approve" in str(error)
    clock.now = utc(2026, 12, 8, 0, 0, 1)  # a new day: the window starts empty
    gov.spend.reserve(900_000)
    assert lines(gov, clock)["daily", "*"].spent == 900_000


@pytest.mark.parametrize(
    ("window", "resets"),
    [
        ("day@America/Los_Angeles", utc(2026, 12, 8, 8)),  # midnight Pacific (UTC-8 in December)
        ("week", utc(2026, 12, 14)),  # the next Monday
        ("month@Europe/Paris", utc(2026, 12, 31, 23)),  # midnight in Paris (UTC+1)
    ],
    ids=["day-pacific", "iso-week", "month-paris"],
)
def test_each_calendar_window_resets_at_its_boundary_in_its_zone(make_gov: MakeGov, window: str, resets: float) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))  # a Monday
    gov = make_gov(spend_config(SpendBudget("cap", window, limit=1, threshold=0)), clock=clock)
    gov.spend.reserve(DOLLAR)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(1)
    assert caught.value.resets_at == resets
    clock.now = resets - 0.001
    with pytest.raises(SpendExhausted):
        gov.spend.reserve(1)
    clock.now = resets
    gov.spend.reserve(DOLLAR)


def test_a_rolling_window_frees_each_charge_a_window_after_it(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("gemini", "10m", limit=10)), clock=clock)
    gov.spend.reserve(6 * DOLLAR)
    clock.advance(300)
    gov.spend.reserve(4 * DOLLAR)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(DOLLAR)
    # the first charge leaves the window 10 minutes after its slot ended
    assert caught.value.resets_at == utc(2026, 12, 7, 12, 11)
    clock.now = utc(2026, 12, 7, 12, 11) - 0.001
    with pytest.raises(SpendExhausted):
        gov.spend.reserve(DOLLAR)
    clock.now = utc(2026, 12, 7, 12, 11)
    gov.spend.reserve(DOLLAR)
    assert lines(gov, clock)["gemini", "*"].spent == 5 * DOLLAR


def test_a_rolling_window_counts_a_charge_for_the_whole_window_after_it(make_gov: MakeGov) -> None:
    # A charge at the end of its slot still counts a window later, less a
    # moment: a provider's own rolling limit would still count it too.
    clock = FakeClock(utc(2026, 12, 7, 12, 0, 59))
    gov = make_gov(spend_config(SpendBudget("gemini", "10m", limit=10)), clock=clock)
    gov.spend.reserve(10 * DOLLAR)
    clock.advance(600 - 0.001)
    with pytest.raises(SpendExhausted):
        gov.spend.reserve(DOLLAR)
    assert lines(gov, clock)["gemini", "*"].spent == 10 * DOLLAR
    clock.now = utc(2026, 12, 7, 12, 11)  # and at most one slot (a minute) more
    gov.spend.reserve(DOLLAR)


def test_a_tenant_cap_refuses_the_tenant_and_not_the_others(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=10, tenants={"acme": 1})), clock=clock)
    gov.spend.reserve(DOLLAR, tenant="acme")
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(1, tenant="acme")
    assert (caught.value.scope, caught.value.limit) == ("acme", DOLLAR)
    gov.spend.reserve(5 * DOLLAR, tenant="other")
    assert lines(gov, clock)["daily", "*"].spent == 6 * DOLLAR


def test_a_cost_above_the_whole_limit_never_resets(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=1)), clock=clock)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(2 * DOLLAR, wait=True)
    assert caught.value.why == "never" and caught.value.resets_at is None


def test_waiting_for_a_reset_is_asked_for_and_bounded_by_the_timeout(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("minute", "60s", limit=1, threshold=0)), clock=clock)
    gov.spend.reserve(DOLLAR)
    with pytest.raises(SpendExhausted):  # the window resets in 60 s: beyond a 5 s timeout
        gov.spend.reserve(DOLLAR, wait=True, timeout=5)


def test_calendar_windows_count_requests_and_tokens_per_day_too(make_gov: MakeGov) -> None:
    # Gemini's requests per day reset at midnight Pacific; Bedrock's tokens per day
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    rpd = SpendBudget("rpd", "day@America/Los_Angeles", limit=2, unit="requests", threshold=0)
    tpd = SpendBudget("tpd", "day", tenants={"acme": 1000}, unit="tokens", threshold=0)
    gov = make_gov(spend_config(rpd, tpd), clock=clock)
    first = gov.spend.reserve(5, tenant="acme", tokens=800)
    gov.spend.settle(first, 5, tokens=300)  # 500 tokens go back to acme's day
    gov.spend.reserve(5, tenant="acme", tokens=700)
    with pytest.raises(SpendExhausted) as caught:  # the third request of the Pacific day
        gov.spend.reserve(5, tenant="other")
    assert (caught.value.budget, caught.value.spent, caught.value.limit) == ("rpd", 2, 2)
    assert caught.value.resets_at == utc(2026, 12, 8, 8)
    seen = lines(gov, clock)
    assert (seen["tpd", "acme"].spent, seen["tpd", "acme"].unit) == (1000, "tokens")
    assert seen["rpd", "*"].shown(2) == "2 requests"
    clock.now = utc(2026, 12, 8, 0, 30)  # a new UTC day, the same Pacific one
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(5, tenant="acme", tokens=1000)
    assert caught.value.budget == "rpd"
    gov.spend.approve("rpd", add=1)  # one more request today
    gov.spend.reserve(5, tenant="acme", tokens=1000)
    with pytest.raises(ConfigError, match="whole number"):
        SpendBudget("rpd", "day", limit=2.5, unit="requests")


def test_a_caller_that_asked_to_wait_is_reserved_when_the_window_resets(
    make_gov: MakeGov, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("minute", "60s", limit=1, threshold=0)), clock=clock)
    waited: list[float] = []

    def sleep(seconds: float) -> None:  # the injected clock moves instead of the wall clock
        waited.append(seconds)
        clock.advance(seconds)

    monkeypatch.setattr("governor._sync.spend.sleep", sleep)
    gov.spend.reserve(DOLLAR)
    clock.advance(10)
    gov.spend.reserve(DOLLAR, wait=True, timeout=120)
    assert waited == [pytest.approx(56.0)]  # the first charge's slot (6 s) leaves the window 60 s after it ended
    assert lines(gov, clock)["minute", "*"].spent == DOLLAR


# -- the soft threshold and approval ---------------------------------------------------------


def test_the_threshold_is_logged_once_and_a_pausing_one_holds_until_approved(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    budget = SpendBudget("daily", "day", limit=10, threshold=0.8, pause=True)
    gov = make_gov(spend_config(budget), clock=clock)
    gov.spend.reserve(7 * DOLLAR)
    gov.spend.reserve(DOLLAR)  # 8 of 10: the threshold reached, logged
    crossed = decision_log(gov, "spend-threshold")
    assert len(crossed) == 1 and crossed[0]["budget"] == "daily" and crossed[0]["spent"] == str(8 * DOLLAR)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(DOLLAR // 2)
    assert caught.value.why == "threshold" and "governor spend approve" in str(caught.value)
    assert lines(gov, clock)["daily", "*"].paused
    gov.spend.approve("daily", add=5)  # $15 until midnight, and no pause
    gov.spend.reserve(6 * DOLLAR)
    line = lines(gov, clock)["daily", "*"]
    assert (line.spent, line.limit, line.paused) == (14 * DOLLAR, 15 * DOLLAR, False)
    assert len(decision_log(gov, "spend-threshold")) == 1 and len(decision_log(gov, "spend-approved")) == 1
    clock.now = utc(2026, 12, 8, 1)  # the approval ends with its window
    gov.spend.reserve(DOLLAR)
    assert lines(gov, clock)["daily", "*"].limit == 10 * DOLLAR


def test_a_client_clock_a_window_away_is_refused_before_anything_is_written(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=10)), clock=clock)
    gov.spend.reserve(DOLLAR)
    clock.advance(2)  # the lost calls' upkeep is due: it would write first
    before = (gov.client.hgetall(gov.keys.spend), gov.client.xlen(gov.keys.events))
    far = ("daily", "10000000", "", "c:1000:2000:3000:4000", "800000", "0", "day@UTC", "usd")
    call = gov._core._call("spend", ("reserve", "x1", "default", "5", "60000", "1", *far), gov._core._parse_spend)
    with pytest.raises(ConfigError, match="does not hold the clock"):
        gov._execute(call)
    assert (gov.client.hgetall(gov.keys.spend), gov.client.xlen(gov.keys.events)) == before


# -- faults: conservative -----------------------------------------------------------------------


def test_a_lost_spend_key_counts_the_open_window_as_spent_and_says_so(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=10)), clock=clock)
    gov.spend.reserve(DOLLAR)
    gov.client.delete(gov.keys.spend)
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(DOLLAR)
    assert caught.value.spent == 10 * DOLLAR
    assert "lost" in decision_log(gov, "spend-lost")[0]["why"]
    assert lines(gov, clock)["daily", "*"].lost_at == round(clock() * 1000)
    clock.now = utc(2026, 12, 8, 0, 1)  # the next window is known to be empty
    gov.spend.reserve(DOLLAR)


def test_a_reservation_never_settled_stays_spent(make_gov: MakeGov) -> None:
    clock = FakeClock(utc(2026, 12, 7, 12, 0))
    gov = make_gov(spend_config(SpendBudget("daily", "day", limit=10)), clock=clock)
    gov.spend.reserve(3 * DOLLAR)  # its call is lost: never settled
    clock.advance(gov.config.lease_ttl + gov.config.queue_ttl + 120)
    gov.spend.reserve(DOLLAR)
    line = lines(gov, clock)["daily", "*"]
    assert (line.spent, line.reserved) == (4 * DOLLAR, DOLLAR)
    assert decision_log(gov, "spend-lost-calls")[0]["count"] == "1"
