"""Budgets, caps and the reserve under faults and bad input: a refusal is
information, not a refund; a bucket reborn after a loss starts empty;
adopted leases keep their tenant, class and reservation; the counts of a
recount are exact; debt is bounded; a lowered limit is not a life
sentence; every reason names the waiter's own cost and the rule that holds
it. Real Redis and fakeredis, an injected clock. The fleet tests keep a
provider bucket of their own (tokens accepted, 429s per second) and the
caps tests their own witness of who holds a lease."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from governor import ConfigError, Governor, GovernorConfig, Outcome
from governor.budgets import MAX_USAGE, Tokens, UsageTooLarge
from governor.core import Granted, Queued, new_id
from governor.errors import AcquireTimeout, CostTooLarge

from .conftest import FakeClock

MakeGov = Callable[..., Governor]
S, R = Outcome.SUCCESS, Outcome.RATE_LIMITED
FIXED = {"policy": "fixed", "restart_hold": False}


def budget(gov: Governor, kind: str = "tokens") -> Any:
    found = gov.status().budget(kind)
    assert found is not None, f"no {kind} budget in {gov.status().budgets}"
    return found


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decision_log(gov: Governor) -> list[dict[str, str]]:
    return [{text(k): text(v) for k, v in fields.items()} for _, fields in gov.client.xrange(gov.keys.events)]


def wipe(gov: Governor) -> None:
    """What FLUSHALL or a restart without persistence does to the governor."""
    gov.client.delete(*gov.keys.keys)


# -- the provider's own bucket, and a fleet calling it ------------------------------------------


@dataclass
class ProviderBucket:
    """The provider's token bucket (the witness): refilled at ``per_minute``,
    counting a request's tokens when it arrives; a request it cannot hold is
    refused (429) and costs nothing."""

    per_minute: int
    level: float
    at: float
    accepted: dict[int, int] = field(default_factory=dict)  #: second -> tokens accepted
    refused: dict[int, int] = field(default_factory=dict)  #: second -> 429s

    def call(self, cost: int, now: float) -> bool:
        self.level = min(self.per_minute, self.level + (now - self.at) * self.per_minute / 60)
        self.at = now
        second = int(now)
        if self.level >= cost:
            self.level -= cost
            self.accepted[second] = self.accepted.get(second, 0) + cost
            return True
        self.refused[second] = self.refused.get(second, 0) + 1
        return False

    def totals(self, start: float, end: float) -> tuple[int, int]:
        """Tokens accepted and 429s in [start, end) (whole seconds)."""
        seconds = range(int(start), int(end))
        return sum(self.accepted.get(s, 0) for s in seconds), sum(self.refused.get(s, 0) for s in seconds)


def run_fleet(
    gov: Governor, clock: FakeClock, provider: ProviderBucket, seconds: float, callers: int, cost: int
) -> None:
    """``callers`` callers, each in a loop: try to acquire ``cost`` tokens,
    call the provider, report (a 429 with no usage, as the governed transport
    does for a refusal; a success with its usage, 100 ms later), every 10 ms
    of the injected clock."""
    busy: dict[int, tuple[float, Any]] = {}
    end = clock.now + seconds
    while clock.now < end:
        for caller in range(callers):
            if caller in busy:
                done, lease = busy[caller]
                if clock.now >= done:
                    gov.report(S, lease=lease, release=True, usage=Tokens(cost, 0))
                    del busy[caller]
                continue
            lease = gov.try_acquire(tokens=Tokens(cost, 0))
            if lease is None:
                continue
            if provider.call(cost, clock.now):
                busy[caller] = (clock.now + 0.1, lease)
            else:
                gov.report(R, lease=lease, release=True, usage=Tokens())
        clock.advance(0.01)
    for _, lease in busy.values():
        gov.report(S, lease=lease, release=True, usage=Tokens(cost, 0))


# -- 1. a refusal is information, not a refund ----------------------------------------------------


def test_a_refusal_clamps_the_bucket_and_a_drained_bucket_admits_only_its_refill(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    """On a drained 6,000/min bucket, acquire(tokens=100) + a 429 with no
    usage, as fast as the fleet can: only what refills goes in (3 s at 100
    a second: 3 calls, not thousands)."""
    gov = make_gov(GovernorConfig(max_capacity=50, tokens_per_minute=6000, **FIXED), clock=clock)
    drained = gov.try_acquire(tokens=Tokens(6000, 0))
    assert drained is not None
    gov.report(S, lease=drained, release=True, usage=Tokens(6000, 0))
    admitted = 0
    for _ in range(300):  # 3 s, every 10 ms
        for _ in range(5):
            lease = gov.try_acquire(tokens=Tokens(100, 0))
            if lease is None:
                break
            admitted += 1
            gov.report(R, lease=lease, release=True, usage=Tokens())
        clock.advance(0.01)
    print(f"drained bucket: {admitted} admitted in 3 s")
    assert admitted <= 4, f"{admitted} calls admitted in 3 s where the refill allows 3"
    assert budget(gov).level <= 100


def test_a_refusal_spends_its_reservation_unless_the_provider_does_not_count_refusals(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    """The settlement of a refused call: the reservation is spent (the
    provider counted the request), or given back when the provider says it
    does not count refusals; either way the fleet's level is then clamped to
    0, as a remaining of 0 would, so no refusal admits the next caller."""
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=6000, **FIXED), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(1000, 0))
    assert lease is not None and budget(gov).level == 5000
    gov.report(R, lease=lease, release=True, usage=Tokens())
    assert budget(gov).level == 0  # clamped: the provider's bucket is empty
    assert [e for e in decision_log(gov) if e.get("kind") == "budget"][-1]["why"] == "rate-limited: clamped to 0"
    # In debt before the refusal: spent, the debt stays (a refund would raise it).
    clock.advance(10)  # 1,000 back
    lease = gov.try_acquire(tokens=Tokens(1000, 0))
    assert lease is not None and budget(gov).level == 0
    gov.report(S, lease=lease, usage=Tokens(3000, 0))  # 2,000 beyond: -2,000
    assert budget(gov).level == -2000
    lease.release()  # its one outcome reported: the refusal after it is reported without it
    gov.report(R)
    assert budget(gov).level == -2000  # nothing given back: the refused call was counted
    clock.advance(20)  # back to 0
    lease = gov.try_acquire(tokens=Tokens(500, 0))
    assert lease is None
    clock.advance(5)
    lease = gov.try_acquire(tokens=Tokens(500, 0))
    assert lease is not None and budget(gov).level == 0
    gov.report(R, lease=lease, release=True, usage=Tokens(), refusals_count=False)
    assert budget(gov).level == 0  # given back (500), then clamped to 0


def test_a_refusal_with_headers_takes_the_providers_remaining(make_gov: MakeGov, clock: FakeClock) -> None:
    """A 429 whose headers say what is left (a concurrency refusal: tokens
    remain) is calibrated by them, not clamped to 0."""
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=6000, **FIXED), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(1000, 0))
    assert lease is not None
    headers = {"x-ratelimit-limit-tokens": "6000", "x-ratelimit-remaining-tokens": "4000"}
    gov.report(R, lease=lease, release=True, usage=Tokens(), headers=headers)
    assert budget(gov).level == 4000


def test_a_fleet_at_the_providers_limit_does_not_storm_after_a_refusal(make_gov: MakeGov, clock: FakeClock) -> None:
    """A configured ceiling equal to the provider's limit, the provider's
    bucket 3,000 tokens lower than the fleet's (another user spent them):
    the refusals that tell the fleet so stop, they do not feed a storm."""
    gov = make_gov(GovernorConfig(max_capacity=20, tokens_per_minute=6000, **FIXED), clock=clock)
    provider = ProviderBucket(6000, 3000, clock.now)
    start = clock.now
    run_fleet(gov, clock, provider, seconds=6, callers=20, cost=100)
    accepted, refused = provider.totals(start, start + 6)
    print(f"at the provider's limit: {accepted} tokens accepted, {refused} 429s in 6 s")
    assert refused <= 3, f"{refused} 429s in 6 s"
    assert accepted >= 3000 + 4 * 6000 // 60, f"only {accepted} tokens accepted: the fleet stalled"


# -- 2. a bucket reborn after a loss starts empty ---------------------------------------------------


def test_a_bucket_reborn_after_a_loss_starts_empty_and_the_provider_sees_no_burst(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    config = GovernorConfig(max_capacity=20, tokens_per_minute=6000, lease_ttl=2, poll=0.5, policy="fixed")
    gov = make_gov(config, clock=clock)
    provider = ProviderBucket(6000, 6000, clock.now)
    run_fleet(gov, clock, provider, seconds=4, callers=20, cost=100)
    assert budget(gov).level < 200  # the fleet used what the provider gives
    wipe(gov)  # as FLUSHALL or a restart without persistence would
    assert budget(gov).level == 0
    reborn = [e for e in decision_log(gov) if e.get("kind") == "budget"]
    assert reborn and reborn[-1]["why"] == "state lost: the bucket starts empty (the fleet's spending is not known)"
    lost_at = clock.now
    run_fleet(gov, clock, provider, seconds=6, callers=20, cost=100)
    accepted, refused = provider.totals(lost_at, lost_at + 6)
    print(f"after a loss: {accepted} tokens accepted, {refused} 429s in 6 s")
    assert refused <= 2, f"{refused} 429s in the 6 s after the loss"
    assert accepted >= 300, f"only {accepted} tokens accepted after the loss"


def test_a_first_use_starts_full(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, tokens_per_minute=6000, restart_hold=False), clock=clock)
    assert budget(gov).level == 6000


# -- 3. adopted leases keep their tenant, class and reservation ------------------------------------


def test_adopted_leases_keep_their_tenant_class_and_reservation(make_gov: MakeGov, clock: FakeClock) -> None:
    """A tenant capped at 2 holds 2 leases of the lowest class, a reserve of
    1 out of 4, when the state is lost: the renewals carry each lease's
    place and reservation, so after the hold tenant a still has no room,
    the lower classes none either, and the tokens are still reserved."""
    config = GovernorConfig(
        max_capacity=4, lease_ttl=2, poll=0.5, policy="fixed", tenant_caps={"a": 2}, reserve=1, tokens_per_minute=6000
    )
    gov = make_gov(config, clock=clock)
    held = {}  # the witness: lease -> (tenant, class)
    for tenant in ("a", "a", "b"):
        lease = gov.try_acquire(tokens=Tokens(1000, 0), priority="batch", tenant=tenant)
        assert lease is not None
        held[lease] = (tenant, "batch")
    wipe(gov)
    gov.status()  # re-created: held for the holders to re-register
    for _ in range(3):  # past the hold, the holders renewing
        gov.renew()
        clock.advance(config.lease_ttl / 2 + 0.05)
        gov.renew()
    # (Redis's view: the background worker renews too, on its own schedule)
    live = [gov.client.zscore(gov.keys.leases, lease.id) for lease in held]
    assert all(expiry is not None and expiry > clock.now * 1000 for expiry in live) and gov.status().in_flight == 3
    assert budget(gov).reserved == 3000
    gov.set_max_capacity(4)  # a new state starts at the resume level: back to 4 slots, 1 reserved
    assert budget(gov).level < -2000  # reborn empty, then the reservations in flight taken
    for _ in range(31):  # the tokens refill at 100 a second, the holders renewing
        clock.advance(1)
        gov.renew()
    assert gov.try_acquire(tenant="a", priority="interactive") is None  # a at its cap of 2
    assert gov.try_acquire(tenant="c", priority="batch") is None  # 3 below the top: the reserve holds
    top = gov.try_acquire(tenant="c", priority="interactive")
    assert top is not None  # the reserved slot
    holders_of_a = [lease for lease, (tenant, _) in held.items() if tenant == "a" and not lease.released]
    assert len(holders_of_a) == 2
    for lease in [*held, top]:
        lease.release()
    st = gov.status()
    assert st.in_flight == 0 and budget(gov).reserved == 0


# -- 4. recount is exact -----------------------------------------------------------------------------


def test_a_reset_with_a_dead_lease_not_yet_reclaimed_keeps_the_cap(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    gov = make_gov(
        GovernorConfig(max_capacity=8, lease_ttl=10, queue_ttl=60, tenant_caps={"a": 2}, **FIXED), clock=clock
    )
    core = gov._core
    crashed = gov._execute(core.acquire(new_id(), core.ask("crashed", tenant="a"), wait=False))  # nobody will renew it
    assert isinstance(crashed, Granted)
    clock.advance(5)
    live = gov.try_acquire(tenant="a")
    assert live is not None
    clock.advance(5.5)  # the crashed holder's lease ran out; nobody reclaimed it yet
    gov.reset()
    witness = [live]
    for _ in range(3):
        lease = gov.try_acquire(tenant="a")
        if lease is not None:
            witness.append(lease)
    assert len(witness) == 2, f"tenant a holds {len(witness)} live leases with a cap of 2"


def test_caps_set_over_more_than_a_batch_of_expired_leases_are_exact(
    make_gov: MakeGov, clock: FakeClock, sync_client: Any
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=200, lease_ttl=10, queue_ttl=60, **FIXED), clock=clock)
    core = gov._core
    for _ in range(70):  # holders that will crash: nobody renews them
        assert isinstance(gov._execute(core.acquire(new_id(), core.ask("dead", tenant="a"), wait=False)), Granted)
    clock.advance(9)
    live = []
    for _ in range(80):
        lease_id = new_id()
        assert isinstance(gov._execute(core.acquire(lease_id, core.ask("live", tenant="a"), wait=False)), Granted)
        live.append(lease_id)
    clock.advance(1.5)  # the 70 ran out
    gov.set_shares(tenant_caps={"a": 80})
    clock.advance(1.1)  # the next reclaim is due
    gov.probe()  # it reclaims the expired leases the change left
    more = [gov._execute(core.acquire(new_id(), core.ask("more", tenant="a"), wait=False)) for _ in range(10)]
    granted = sum(isinstance(reply, Granted) for reply in more)
    assert granted == 0, f"tenant a holds {80 + granted} live leases with a cap of 80"


# -- 5. debt is bounded; an absurd usage is refused --------------------------------------------------


def test_an_absurd_usage_is_refused_by_the_client(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, tokens_per_minute=60000, **FIXED), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(100, 0))
    assert lease is not None
    with pytest.raises(UsageTooLarge) as raised:
        gov.report(S, lease=lease, release=True, usage=Tokens(2**53, 0))
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, ValueError)
    assert str(2**53) in str(raised.value) and f"{MAX_USAGE:,}" in str(raised.value)
    gov.report(S, lease=lease, release=True, usage=Tokens(100, 0))
    assert budget(gov).level == 59900  # the report went through once the usage was right


def test_debt_is_bounded_to_one_limits_worth(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, tokens_per_minute=60000, **FIXED), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(100, 0))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(MAX_USAGE, 0))
    assert budget(gov).level == -60000  # one limit's worth of debt at most
    clock.advance(60)
    assert gov.try_acquire(tokens=Tokens(0, 0)) is not None  # back within two minutes at most, never "for good"


# -- 6. a lowered limit is not a life sentence --------------------------------------------------------


def test_a_cost_above_a_header_announced_limit_goes_in_when_the_bucket_is_full(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    """One response announced a limit of 100 tokens: a call of 250 waits for
    a full bucket, goes in (its cost clamped to the bucket: the decision log
    says so), and its own response's headers raise the limit again."""
    gov = make_gov(GovernorConfig(max_capacity=4, **FIXED), clock=clock)
    gov.report(S, headers={"x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "100"})
    lease = gov.try_acquire(tokens=Tokens(250, 0))  # the bucket is full: in, not CostTooLarge
    assert lease is not None
    clamped = [e for e in decision_log(gov) if e.get("kind") == "oversize"]
    assert clamped and clamped[-1]["cost"] == "250" and clamped[-1]["limit"] == "100"
    assert budget(gov).level == -100  # charged, down to the debt bound
    gov.report(S, lease=lease, release=True, usage=Tokens(250, 0), headers={"x-ratelimit-limit-tokens": "100"})
    assert gov.try_acquire(tokens=Tokens(250, 0)) is None  # waits for a full bucket again
    clock.advance(120)
    lease = gov.try_acquire(tokens=Tokens(250, 0))
    assert lease is not None
    headers = {"x-ratelimit-limit-tokens": "10000", "x-ratelimit-remaining-tokens": "9750"}
    gov.report(S, lease=lease, release=True, usage=Tokens(250, 0), headers=headers)
    assert budget(gov).limit == 10000  # its response raised the limit
    clock.advance(2.1)  # out of debt at 10,000 a minute
    assert gov.try_acquire(tokens=Tokens(250, 0)) is not None


def test_a_cost_above_a_configured_ceiling_is_still_refused(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, tokens_per_minute=100, **FIXED), clock=clock)
    with pytest.raises(CostTooLarge):
        gov.try_acquire(tokens=Tokens(250, 0))


# -- 7. reasons name the waiter's cost and the rule --------------------------------------------------


def test_a_waiter_parked_at_its_cap_is_told_so_and_status_is_not_open(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, poll=0.2, queue_ttl=5, tenant_caps={"a": 1}, **FIXED), clock=clock)
    held = gov.try_acquire(tenant="a")
    assert held is not None
    with pytest.raises(AcquireTimeout) as raised:
        gov.acquire(timeout=0.5, tenant="a")
    assert "tenant a at its cap: 1 in flight of 1" in str(raised.value)
    assert "0 ahead" not in str(raised.value)
    lease_id = new_id()
    queued = gov._execute(gov._core.acquire(lease_id, gov._core.ask("a", tenant="a"), wait=True))
    assert isinstance(queued, Queued) and "tenant a at its cap" in queued.reason
    st = gov.status()
    assert st.blocked == "" and st.held_back == "tenant a at its cap: 1 in flight of 1"
    from governor.cli.render import blocked_line, state_line

    assert state_line(st).startswith("LIMITED") and "tenant a at its cap" in blocked_line(st)
    held.release()


def test_a_waiter_held_by_a_budget_is_told_its_own_cost(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4, poll=0.2, tokens_per_minute=6000, **FIXED), clock=clock)
    drained = gov.try_acquire(tokens=Tokens(6000, 0))
    assert drained is not None
    lease_id = new_id()
    queued = gov._execute(gov._core.acquire(lease_id, gov._core.ask("x", tokens=Tokens(300, 0)), wait=True))
    assert isinstance(queued, Queued) and queued.reason.startswith("tokens budget: 300 wanted, 0 left of 6000")
    refreshed = gov._execute(gov._core.refresh([lease_id]))
    assert refreshed.reason == ""  # a caller of no cost would go in
    assert refreshed.queued[lease_id] == (0, "tokens budget: 300 wanted, 0 left of 6000")
