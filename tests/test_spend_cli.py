"""``governor spend`` and ``governor spend approve`` on a real Redis: each
budget and tenant's spent, reserved, limit, window and reset; a scope paused
at its soft threshold takes calls again once an operator approves more.
(The governor runs on the Redis clock, as the command reads it: nothing
waits for it.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner, Result

from governor import Governor, GovernorConfig
from governor.cli import main
from governor.spend import SpendBudget, SpendExhausted

DOLLAR = 1_000_000


def run(url: str, name: str, *args: str) -> Result:
    result = CliRunner().invoke(
        main, ["--url", url, "-n", name, *args], env={"GOVERNOR_REDIS_URL": None, "GOVERNOR_NAME": None}
    )
    return result


@pytest.fixture
def gov(redis_url: str, name: str) -> Iterator[Governor]:
    client = redis.Redis.from_url(redis_url)
    budget = SpendBudget("monthly", "month", limit=100, tenants={"acme": 10}, threshold=0.5, pause=True)
    made = Governor(client, name, GovernorConfig(restart_hold=False, spend=(budget,)))
    yield made
    made.close()
    client.close()


def test_spend_shows_each_scope_and_approval_lifts_a_paused_tenant(gov: Governor, redis_url: str, name: str) -> None:
    gov.spend.reserve(5 * DOLLAR, tenant="acme")  # half of acme's $10: its threshold
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(DOLLAR, tenant="acme")
    assert caught.value.why == "threshold"
    shown = run(redis_url, name, "spend")
    assert shown.exit_code == 0, shown.output
    assert "monthly  acme" in shown.output and "paused at 50%" in shown.output and "month@UTC" in shown.output
    data = json.loads(run(redis_url, name, "spend", "--json").output)
    acme = next(x for x in data["spend"] if x["scope"] == "acme")
    assert (acme["spent"], acme["reserved"], acme["limit"], acme["paused"]) == (
        5 * DOLLAR,
        5 * DOLLAR,
        10 * DOLLAR,
        True,
    )
    status = run(redis_url, name, "status")
    assert "spend monthly (tenant acme, month@UTC): $5.00 of $10.00" in status.output and "PAUSED" in status.output
    spend_status = json.loads(run(redis_url, name, "status", "--json").output)["spend"]
    assert {x["scope"] for x in spend_status} == {"*", "acme"}
    approved = run(redis_url, name, "spend", "approve", "--tenant", "acme", "--add", "20")
    assert approved.exit_code == 0, approved.output
    assert "approved $20 more for tenant acme" in approved.output and "limit now $30.00" in approved.output
    gov.spend.reserve(20 * DOLLAR, tenant="acme")  # no pause, and $30 until the month ends
    with pytest.raises(SpendExhausted) as caught:
        gov.spend.reserve(6 * DOLLAR, tenant="acme")
    assert caught.value.why == "limit" and caught.value.limit == 30 * DOLLAR


def test_approving_names_what_is_wrong(gov: Governor, redis_url: str, name: str) -> None:
    gov.spend.reserve(DOLLAR)
    unknown = run(redis_url, name, "spend", "approve", "--budget", "weekly", "--add", "5")
    assert unknown.exit_code == 1 and "no spend budget 'weekly'" in unknown.output and "monthly" in unknown.output
    bad = run(redis_url, name, "spend", "approve", "--add", "lots")
    assert bad.exit_code == 2 and "not a number of dollars" in bad.output
    missing = run(redis_url, f"{name}-none", "spend")
    assert missing.exit_code == 1 and "governor list" in missing.output
