"""Budgets beside concurrency (governor/budgets.py): requests and
tokens per minute, reserved on the lease, settled by the report, calibrated
from the provider's rate-limit headers. On Redis and fakeredis, with an
injected clock; the last test runs many threads on a real Redis in real
time and counts the tokens admitted with its own witness."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from governor import ConfigError, Governor, GovernorConfig, Outcome, events
from governor.budgets import Tokens
from governor.core import Queued, Refreshed, new_id
from governor.errors import CostTooLarge

from .conftest import FakeClock

MakeGov = Callable[..., Governor]
S, R = Outcome.SUCCESS, Outcome.RATE_LIMITED
#: 6,000 tokens per minute: 100 per second, 0.1 per ms
TPM = 6000


def budget(gov: Governor, kind: str = "tokens") -> Any:
    found = gov.status().budget(kind)
    assert found is not None, f"no {kind} budget in {gov.status().budgets}"
    return found


def decision_log(gov: Governor) -> list[dict[str, str]]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    return [{text(k): text(v) for k, v in fields.items()} for _, fields in gov.client.xrange(gov.keys.events)]


def openai_headers(requests: tuple[int, int] | None = None, tokens: tuple[int, int] | None = None) -> dict[str, str]:
    out = {}
    for kind, figures in (("requests", requests), ("tokens", tokens)):
        if figures is not None:
            out[f"x-ratelimit-limit-{kind}"] = str(figures[0])
            out[f"x-ratelimit-remaining-{kind}"] = str(figures[1])
    return out


# -- reserve, refill, settle ---------------------------------------------------------------


def test_a_ceiling_admits_while_its_bucket_holds_the_cost_then_the_wait_names_the_budget(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=TPM, restart_hold=False), clock=clock)
    assert budget(gov).level == TPM and budget(gov).source == "configured"
    first = gov.try_acquire(tokens=Tokens(4000, 1000))
    assert first is not None and first.tokens == Tokens(4000, 1000)
    assert (budget(gov).level, budget(gov).reserved) == (1000, 5000)
    assert gov.try_acquire(tokens=Tokens(1500, 0)) is None  # 1,000 left: concurrency has room, tokens do not
    assert gov.status().blocked == ""  # a caller of no cost would still go in
    lease_id = new_id()
    queued = gov._execute(gov._core.acquire(lease_id, gov._core.ask("big", tokens=Tokens(1500, 0)), wait=True))
    assert isinstance(queued, Queued)
    assert queued.reason == "tokens budget: 1500 wanted, 1000 left of 6000"
    assert queued.hint == pytest.approx(5.0)  # 500 more tokens at 100 a second
    clock.advance(4.9)
    refreshed = gov._execute(gov._core.refresh([lease_id]))
    assert isinstance(refreshed, Refreshed) and lease_id in refreshed.queued
    clock.advance(0.1)
    refreshed = gov._execute(gov._core.refresh([lease_id]))
    assert lease_id in refreshed.granted  # the refill made room: admitted from the queue
    assert budget(gov).level == pytest.approx(0)


def test_a_report_gives_back_what_was_not_used_and_charges_what_was_exceeded(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=TPM, restart_hold=False), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(1000, 2000))
    assert lease is not None and budget(gov).level == 3000
    gov.report(S, lease=lease, release=True, usage=Tokens(900, 100))  # 2,000 reserved but not used
    assert (budget(gov).level, budget(gov).reserved) == (5000, 0)
    lease = gov.try_acquire(tokens=Tokens(1000, 0))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(1000, 5500))  # 5,500 beyond the estimate
    assert budget(gov).level == pytest.approx(-1500)
    assert gov.status().blocked == "tokens budget: 0 wanted, -1500 left of 6000"  # in debt: everyone waits
    assert gov.try_acquire(tokens=1) is None
    clock.advance(15.01)  # back above 0 after 15 s at 100 a second
    assert gov.try_acquire(tokens=1) is not None


def test_a_lease_released_or_expired_without_a_report_keeps_its_reservation_as_spent(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=TPM, lease_ttl=3, restart_hold=False), clock=clock)
    released = gov.try_acquire(tokens=Tokens(2000, 0))
    assert released is not None
    released.release()
    assert (budget(gov).level, budget(gov).reserved) == (4000, 0)
    crashed = gov.try_acquire(tokens=Tokens(1000, 1000))
    assert crashed is not None and budget(gov).reserved == 2000
    clock.advance(4)  # its holder died: nobody renews, the lease expires
    assert gov.status().in_flight == 0
    assert (budget(gov).level, budget(gov).reserved) == (pytest.approx(2400), 0)  # 2,000 kept, 400 refilled


def test_requests_are_spent_whatever_the_outcome(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, requests_per_minute=3, restart_hold=False), clock=clock)
    for _ in range(2):
        lease = gov.try_acquire()
        assert lease is not None
        gov.report(S, lease=lease, release=True, usage=Tokens())
    lease = gov.try_acquire()
    assert lease is not None
    gov.report(R, lease=lease, release=True, usage=Tokens())  # refused requests count, as OpenAI's do
    assert gov.try_acquire() is None
    assert gov.status().blocked.startswith("requests budget: 1 wanted, 0 left of 3")
    clock.advance(20)  # 3 a minute: one more every 20 s
    assert gov.try_acquire() is not None


# -- calibration from headers -----------------------------------------------------------------


def test_headers_govern_budgets_nobody_configured_and_clamp_the_fleet_to_the_providers_remaining(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, restart_hold=False), clock=clock)
    assert gov.status().budgets == ()
    lease = gov.try_acquire(tokens=Tokens(800, 200))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(800, 150), headers=openai_headers((500, 499), (9000, 7000)))
    requests, tokens = gov.status().budgets
    assert (requests.kind, requests.limit, requests.burst, requests.level, requests.source) == (
        "requests",
        500,
        499,
        499,
        "header",
    )
    assert (tokens.limit, tokens.burst, tokens.level, tokens.source) == (9000, 7000, 7000, "header")
    # the provider says less is left than the fleet thinks: the fleet follows
    lease = gov.try_acquire(tokens=Tokens(1000, 0))
    assert lease is not None and budget(gov).level == 6000
    gov.report(S, lease=lease, headers=openai_headers(tokens=(9000, 2500)))
    assert budget(gov).level == 2500
    # more left at the provider than here: the fleet keeps its own, lower level
    gov.report(S, headers=openai_headers(tokens=(9000, 8000)))  # (the lease carried its one outcome)
    assert (budget(gov).level, budget(gov).burst) == (2500, 8000)
    assert budget(gov).reserved == 1000
    logged = [(f["budget"], f["why"]) for f in decision_log(gov) if f["kind"] == "budget"]
    assert logged == [
        ("requests", "limit from header"),
        ("tokens", "limit from header"),
        ("tokens", "clamped to the provider's remaining"),  # 6,000 to 2,500; the burst's rise to 8,000 (+14 %)
        ("tokens", "burst from the provider's remaining"),
    ]


def test_a_ceiling_below_the_providers_limit_wins_and_a_lower_provider_limit_wins_over_it(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, requests_per_minute=100, restart_hold=False), clock=clock)
    gov.report(S, headers=openai_headers(requests=(500, 480)))
    assert (budget(gov, "requests").limit, budget(gov, "requests").source) == (100, "configured")
    gov.report(S, headers=openai_headers(requests=(60, 50)))
    found = budget(gov, "requests")
    assert (found.limit, found.burst, found.level, found.source) == (60, 60, 50, "header")


def test_a_provider_that_announces_only_what_remains_has_its_limit_learned(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, restart_hold=False), clock=clock)
    gov.report(S, headers={"x-ratelimit-remaining-tokens": "3000", "x-ratelimit-remaining-requests": "40"})
    assert (budget(gov).limit, budget(gov).source) == (3000, "learned")
    gov.report(S, headers={"x-ratelimit-remaining-tokens": "4500"})
    assert (budget(gov).limit, budget(gov).level) == (4500, 3000)  # the highest remaining seen; the level stays


def test_anthropic_input_and_output_budgets_are_apart(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, restart_hold=False), clock=clock)
    gov.report(
        S,
        headers={
            "anthropic-ratelimit-input-tokens-limit": "10000",
            "anthropic-ratelimit-input-tokens-remaining": "10000",
            "anthropic-ratelimit-output-tokens-limit": "2000",
            "anthropic-ratelimit-output-tokens-remaining": "2000",
        },
    )
    assert [b.kind for b in gov.status().budgets] == ["input_tokens", "output_tokens"]
    assert gov.try_acquire(tokens=Tokens(9000, 1500)) is not None
    assert gov.try_acquire(tokens=Tokens(500, 1000)) is None  # input has room, output does not
    assert (budget(gov, "input_tokens").level, budget(gov, "output_tokens").level) == (1000, 500)
    queued = gov._execute(gov._core.acquire(new_id(), gov._core.ask("w", tokens=Tokens(500, 1000)), wait=True))
    assert isinstance(queued, Queued) and queued.reason == "output_tokens budget: 1000 wanted, 500 left of 2000"


def test_malformed_headers_change_nothing_and_are_counted(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, restart_hold=False), clock=clock)
    seen: list[events.Event] = []
    events.subscribe(seen.append)
    try:
        gov.report(S, headers={"x-ratelimit-limit-tokens": "lots", "x-ratelimit-remaining-tokens": "-5"})
    finally:
        events.unsubscribe(seen.append)
    assert gov.status().budgets == ()
    (event,) = [e for e in seen if isinstance(e, events.MalformedHeaders)]
    assert set(event.headers) == {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"}


# -- bad input and FIFO ---------------------------------------------------------------------


def test_a_cost_above_a_budgets_whole_limit_is_refused_at_once(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = make_gov(GovernorConfig(max_capacity=10, tokens_per_minute=TPM, restart_hold=False), clock=clock)
    with pytest.raises(CostTooLarge, match="a cost of 6001 is above the tokens budget's whole limit of 6000"):
        gov.acquire(timeout=5, tokens=Tokens(6000, 1))
    with pytest.raises(CostTooLarge):
        gov.try_acquire(tokens=6001)
    assert gov.status().queued == 0 and gov.client.zcard(gov.keys.queue) == 0
    assert isinstance(CostTooLarge("x"), ConfigError)


def test_a_waiter_whose_cost_a_lower_ceiling_makes_impossible_is_refused_on_its_turn(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    """A configured ceiling lowered below a waiter's cost refuses it on its
    turn (a header's lower limit does not: tests/test_budget_faults.py)."""
    gov = make_gov(GovernorConfig(max_capacity=1, tokens_per_minute=9000, restart_hold=False), clock=clock)
    holder = gov.try_acquire(tokens=100)
    assert holder is not None
    waiter = new_id()
    assert isinstance(
        gov._execute(gov._core.acquire(waiter, gov._core.ask("w", tokens=Tokens(5000, 0)), wait=True)), Queued
    )
    lower = make_gov(GovernorConfig(max_capacity=1, tokens_per_minute=4000, restart_hold=False), clock=clock)
    lower.configure()  # an operator stores a lower ceiling
    holder.release()
    assert gov.client.zcard(gov.keys.queue) == 0  # dropped from the queue by the grant that reached it
    with pytest.raises(CostTooLarge):
        gov._execute(gov._core.acquire(waiter, gov._core.ask("w", tokens=Tokens(5000, 0)), wait=True, fresh=False))


def test_a_large_head_is_not_overtaken_by_smaller_followers(make_gov: MakeGov, clock: FakeClock) -> None:
    config = GovernorConfig(
        policy="fixed", max_capacity=10, tokens_per_minute=TPM, queue_ttl=60, idle_expiry=3600, restart_hold=False
    )
    gov = make_gov(config, clock=clock)
    first = gov.try_acquire(tokens=5000)
    assert first is not None
    big, small = new_id(), new_id()
    assert isinstance(gov._execute(gov._core.acquire(big, gov._core.ask("big", tokens=3000), wait=True)), Queued)
    queued = gov._execute(gov._core.acquire(small, gov._core.ask("small", tokens=10), wait=True))
    assert isinstance(queued, Queued) and queued.position == 1  # 1,000 left would fit it, but FIFO
    clock.advance(20)  # 1,000 + 2,000: the head fits
    refreshed = gov._execute(gov._core.refresh([big, small]))
    assert list(refreshed.granted) == [big] and small in refreshed.queued
    clock.advance(0.1)
    assert small in gov._execute(gov._core.refresh([small])).granted


@pytest.mark.parametrize("usage", [-1, 1.5, True, "10"])
def test_usage_and_estimates_must_be_whole_tokens(make_gov: MakeGov, clock: FakeClock, usage: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, tokens_per_minute=TPM, restart_hold=False), clock=clock)
    with pytest.raises(ConfigError, match=r"Tokens\.input must be"):
        Tokens(usage, 0)  # type: ignore[arg-type]
    lease = gov.try_acquire(tokens=10)
    assert lease is not None
    with pytest.raises(ConfigError, match="usage must be a Tokens"):
        gov.report(S, lease=lease, release=True, usage=usage)
    assert not lease.released and budget(gov).reserved == 10  # nothing was sent
    with pytest.raises(ConfigError):
        gov.try_acquire(tokens=usage)


def test_ceilings_are_validated() -> None:
    for bad in (0, -5, 1.5, "60", True):
        with pytest.raises(ConfigError, match="tokens_per_minute"):
            GovernorConfig(tokens_per_minute=bad)  # type: ignore[arg-type]
    assert GovernorConfig(tokens_per_minute=None).tokens_per_minute is None


# -- a witness, on a real Redis in real time ----------------------------------------------


def test_many_threads_never_take_more_tokens_than_the_bucket_gives(redis_url: str, name: str) -> None:
    """16 threads take leases of 50-150 tokens against a provider whose
    remaining says the burst is 600, at 60,000 tokens a minute (1,000 a
    second). The witness notes each admission's time and tokens (its own
    clock and list, not the governor's status): over every interval, what
    went in is at most the burst plus what the bucket refilled."""
    gov = Governor.from_url(redis_url, name, GovernorConfig(max_capacity=64, restart_hold=False))  # its own pool
    gov.report(S, headers=openai_headers(tokens=(60_000, 600)))
    admitted: list[tuple[float, int]] = []
    lock = threading.Lock()
    stop = time.monotonic() + 2.0

    def worker(seed: int) -> None:
        size = 50 + (seed * 37) % 101
        while time.monotonic() < stop:
            with gov.acquire(timeout=10, tokens=size) as lease:
                with lock:
                    admitted.append((time.monotonic(), size))
                gov.report(S, lease=lease)  # no usage: the reservation stands

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    gov.close()
    assert admitted, "nobody was admitted"
    admitted.sort()
    worst = 0.0
    for i, (start, _) in enumerate(admitted):
        total = 0
        for at, size in admitted[i:]:
            total += size
            allowed = 600 + 1000 * (at - start) + 150  # the burst, the refill, and one lease of slack for timing
            worst = max(worst, total / allowed)
    assert worst <= 1.0, f"{worst:.2f} of what the bucket gives went in over some interval"
    total = sum(size for _, size in admitted)
    assert total >= 600 + 1000 * 1.0, f"only {total} tokens went in over 2 s: the bucket was not used"


def test_a_lost_state_learns_its_budgets_again_from_the_next_headers(make_gov: MakeGov, clock: FakeClock) -> None:
    """Redis restarted without persistence: the budgets a header taught are
    gone with the state, a configured ceiling comes back with the stored
    config, and the next report's headers teach the rest again."""
    gov = make_gov(GovernorConfig(max_capacity=4, requests_per_minute=100, restart_hold=False), clock=clock)
    gov.report(S, headers=openai_headers(tokens=(9000, 8000)))
    assert [b.kind for b in gov.status().budgets] == ["requests", "tokens"]
    gov.client.delete(*gov.keys.keys)
    assert [(b.kind, b.source) for b in gov.status().budgets] == [("requests", "configured")]
    gov.report(S, headers=openai_headers(tokens=(9000, 7000)))
    assert (budget(gov).limit, budget(gov).level, budget(gov).source) == (9000, 7000, "header")
