"""``governor explain``: each rule of the admission rule, set up for real on the session's Redis.

Each test builds the state a rule answers (a pause, a hold, capacity, a
class's reserve, a budget, a tenant's cap, waiters ahead) with the
library, callers waiting in threads, and asks the command as an operator
would (``--json``), checking the rule named, its words and what lets it in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from governor import Governor, GovernorConfig, Lease, Outcome, Tokens, views
from governor.cli import main
from governor.policies import FixedPolicy

from .support.servers import wait_until


class Fleet:
    """One governor, its held leases, and callers waiting in threads (admitted ones release at once)."""

    def __init__(self, client: redis.Redis, name: str, url: str) -> None:
        self.client, self.name, self.url = client, name, url
        self.gov: Governor | None = None
        self.held: list[Lease] = []
        self.threads: list[threading.Thread] = []

    def make(self, **config: Any) -> Governor:
        self.gov = Governor(self.client, self.name, GovernorConfig(policy=FixedPolicy(), **config))
        self.gov.status()
        return self.gov

    def hold(self, n: int = 1, **ask: Any) -> None:
        assert self.gov is not None
        self.held.extend(self.gov.acquire(timeout=5, **ask) for _ in range(n))

    def wait(self, holder: str, **ask: Any) -> None:
        """A caller that waits (and gives its lease back once admitted)."""
        gov = self.gov
        assert gov is not None
        before = self.waiting()
        thread = threading.Thread(target=lambda: gov.acquire(timeout=30, holder=holder, **ask).release())
        thread.start()
        self.threads.append(thread)
        wait_until(lambda: self.waiting() == before + 1, 10, what=f"{holder} waiting")

    def waiting(self) -> int:
        assert self.gov is not None
        keys = self.gov.keys
        return len(views.read_queue(self.client, keys).items) + len(views.read_parked(self.client, keys).items)

    def explain(self, *option: str) -> dict[str, Any]:
        result = CliRunner().invoke(main, ["--url", self.url, "--name", self.name, "explain", *option, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.gov is not None
        self.gov.resume(lift_recovery_hold=True)
        for lease in self.held:
            lease.release()
        for thread in self.threads:
            thread.join(30)
        self.gov.close()


@pytest.fixture
def fleet(redis_url: str, name: str) -> Iterator[Fleet]:
    client = redis.Redis.from_url(redis_url)
    made = Fleet(client, name, redis_url)
    yield made
    if made.gov is not None:
        made.close()
    client.close()


def test_paused(fleet: Fleet) -> None:
    fleet.make(max_capacity=4).pause("provider incident")
    fleet.wait("host-1/a")
    found = fleet.explain("--holder", "host-1/a")
    assert (found["rule"], found["why"]) == ("paused", "paused: provider incident")
    assert "`governor resume`" in found["admits"] and found["waiting"] == 1


def test_hold(fleet: Fleet) -> None:
    fleet.make(max_capacity=4).report(Outcome.RATE_LIMITED, retry_after=50)
    found = fleet.explain("--tenant", "acme")
    assert found["rule"] == "hold"
    assert found["why"].startswith("holding until the provider's retry-after (ends in")
    assert "the provider's retry-after" in found["admits"] and found["waiting"] == 0


def test_capacity(fleet: Fleet) -> None:
    fleet.make(max_capacity=1)
    fleet.hold()
    fleet.wait("host-1/a")
    fleet.wait("host-1/b")
    found = fleet.explain("--holder", "host-1/b")
    assert (found["rule"], found["why"]) == ("capacity", "at capacity: 1 in flight of 1")
    assert (
        found["admits"]
        == "the next release of any lease admits the head of the queue; 1 waiter(s) ahead of it go first"
    )


def test_tenant_cap(fleet: Fleet) -> None:
    fleet.make(max_capacity=6, tenant_caps={"t": 2, "v": 2})
    fleet.hold(2, tenant="t")
    fleet.hold(2, tenant="v")
    fleet.wait("host-1/t3", tenant="t")
    found = fleet.explain("--tenant", "t")
    assert (found["rule"], found["why"]) == ("tenant cap", "tenant t at its cap: 2 in flight of 2")
    assert found["admits"] == "the next release of a t lease admits its first parked waiter"
    assert found["target"] == "tenant t (first waiter: host-1/t3)"
    assert fleet.explain("--tenant", "u")["rule"] == "none"  # another tenant is let in
    new = fleet.explain("--tenant", "v")  # nobody of v waits: a new caller of v would
    assert (new["rule"], new["why"], new["waiting"]) == ("tenant cap", "tenant v at its cap: 2 in flight of 2", 0)


def test_class_reserve(fleet: Fleet) -> None:
    fleet.make(max_capacity=2, priorities=("high", "low"), default_priority="low", reserve=1)
    fleet.hold(priority="low")
    found = fleet.explain("--class", "low")
    assert (found["rule"], found["why"]) == (
        "reserve",
        "at capacity below the highest class: 1 in flight of 2 - 1 reserved",
    )
    assert found["admits"].startswith("the next release of a lease of a class below high")
    assert fleet.explain("--class", "high")["rule"] == "none"


def test_budget(fleet: Fleet) -> None:
    fleet.make(max_capacity=10, tokens_per_minute=1000)
    fleet.hold(tokens=Tokens(900))
    fleet.wait("host-1/big", tokens=Tokens(500))
    found = fleet.explain("--holder", "host-1/big")
    assert (found["rule"], found["why"]) == ("budget", "tokens budget: 500 wanted, 100 left of 1000")
    assert found["admits"].startswith("the tokens bucket refilling at 1000 a minute (in ")


def test_a_fast_waiter_is_held_by_its_own_tiers_budget(fleet: Fleet) -> None:
    fleet.make(max_capacity=10, fast_input_tokens_per_minute=1000, input_tokens_per_minute=1000)
    fleet.hold(tokens=Tokens(900, tier="fast"))
    fleet.wait("host-1/fast", tokens=Tokens(500, tier="fast"))
    found = fleet.explain("--holder", "host-1/fast")
    assert found["rule"] == "budget"
    assert found["why"].startswith("fast_input_tokens budget: 500 wanted, ") and found["why"].endswith(" of 1000")


def test_queued_ahead(fleet: Fleet) -> None:
    fleet.make(max_capacity=10, tokens_per_minute=1000)
    fleet.hold(tokens=Tokens(900))
    fleet.wait("host-1/big", tokens=Tokens(500))
    fleet.wait("host-1/small", tokens=Tokens(10))  # fits the bucket, but FIFO: behind the big one
    found = fleet.explain("--holder", "host-1/small")
    assert (found["rule"], found["why"]) == ("queued ahead", "behind 1 earlier waiter(s) of its class or above")


def test_a_holder_with_a_lease_and_bad_questions(fleet: Fleet) -> None:
    fleet.make(max_capacity=2)
    fleet.hold(holder="host-9/x")
    assert fleet.explain("--holder", "host-9/x")["rule"] == "holding"
    runner = CliRunner()
    base = ["--url", fleet.url, "--name", fleet.name, "explain"]
    nobody = runner.invoke(main, [*base, "--holder", "nobody"])
    assert nobody.exit_code == 2 and "no holder or waiter 'nobody'" in nobody.output
    both = runner.invoke(main, [*base, "--tenant", "a", "--class", "b"])
    assert both.exit_code == 2 and "one of --holder HOLDER, --tenant TENANT or --class CLASS" in both.output
    bad = runner.invoke(main, [*base, "--class", "vip"])
    assert bad.exit_code == 2 and "no class 'vip'" in bad.output
