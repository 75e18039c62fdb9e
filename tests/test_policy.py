"""The adaptive policy on an injected clock: the seed's own unit
scenarios, carried over to the fleet API, then the default policy's rules.

Every test runs on a real Redis and on fakeredis, with decode_responses off
and on (see conftest.py). No test sleeps: time moves with ``clock.advance``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from governor import Governor, GovernorConfig, LeaseLost, Outcome, protocol
from governor.policies import AdaptivePolicy, FixedPolicy, SeedPolicy
from governor.views import read_events_after

from .conftest import RAW_BACKENDS, FakeClock
from .support.servers import wait_until

S, R, E, Q = Outcome.SUCCESS, Outcome.RATE_LIMITED, Outcome.ERROR, Outcome.QUOTA_EXHAUSTED

MakeGov = Callable[..., Governor]


def seed(max_capacity: int = 8, policy: SeedPolicy | None = None, **kw: object) -> GovernorConfig:
    return GovernorConfig(policy=policy or SeedPolicy(), max_capacity=max_capacity, **kw)  # type: ignore[arg-type]


def report(gov: Governor, *outcomes: Outcome) -> None:
    for outcome in outcomes:
        gov.report(outcome)


# -- the window -------------------------------------------------------------------


def test_window_counts_attempts_and_prunes_them_after_window(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=100), clock=clock)
    report(gov, S, S, E)
    clock.advance(30)
    report(gov, R)
    st = gov.status()
    assert (st.window_rate_limited, st.window_attempts) == (1, 4)
    clock.advance(30.5)  # the first three are now 60.5 s old
    st = gov.status()
    assert (st.window_rate_limited, st.window_attempts) == (1, 1)
    clock.advance(30)
    st = gov.status()
    assert (st.window_rate_limited, st.window_attempts) == (0, 0)


def test_quota_exhausted_is_recorded_but_never_moves_the_policy(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    report(gov, Q, Q, Q, Q, Q)
    st = gov.status()
    assert st.capacity == 8 and not st.paused
    assert st.window_attempts == 0
    assert st.quota_exhausted == 5 and st.quota_at == pytest.approx(clock.now)
    assert st.quota_until is None  # no report named when the quota comes back


def test_quota_until_is_when_the_reported_quota_comes_back(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    gov.report(Outcome.QUOTA_EXHAUSTED, 3600.0)
    assert gov.status().quota_until == pytest.approx(clock.now + 3600)
    sync_client.hdel(gov.keys.state, "quota_until")  # a state written before the field existed
    assert gov.status().quota_until is None
    clock.advance(10)
    gov.report(Outcome.QUOTA_EXHAUSTED, 60.0)
    assert gov.status().quota_until == pytest.approx(clock.now + 60)
    gov.report(Outcome.QUOTA_EXHAUSTED)  # a quota that names no reset: unknown again
    st = gov.status()
    assert st.quota_until is None and st.quota_exhausted == 3


# -- seed: decrease -----------------------------------------------------------------


def test_seed_halves_on_the_second_rate_limited_attempt(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    report(gov, R)  # one attempt in the window: the share rule needs at least 2
    assert gov.status().capacity == 8
    report(gov, R)
    assert gov.status().capacity == 4
    report(gov, R)  # still >= 2 in the window: halves again
    assert gov.status().capacity == 2


def test_seed_halves_on_the_share_rule_with_two_attempts(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    report(gov, S, R)  # 1 of 2 = 50 % > 30 %
    assert gov.status().capacity == 4


def test_seed_does_not_halve_below_the_share(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    report(gov, *[S] * 3, R)  # 1 of 4 = 25 %, one rate-limited
    assert gov.status().capacity == 8


def test_seed_floor_is_one(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=3, policy=SeedPolicy(pause_count=100)), clock=clock)
    report(gov, R, R, R, R, R)
    assert gov.status().capacity == 1


# -- seed: increase ---------------------------------------------------------------


def test_seed_adds_one_per_three_successes_and_a_429_resets_the_streak(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(), clock=clock)
    report(gov, R, R)  # 8 -> 4
    clock.advance(61)  # window drained
    report(gov, S, S)
    assert gov.status().capacity == 4
    report(gov, S)
    assert gov.status().capacity == 5
    report(gov, S, S, S, S, S)  # +1 after 3; streak 2
    assert gov.status().capacity == 6
    report(gov, R)  # 1 of 9: no decrease, but the streak is reset
    st = gov.status()
    assert (st.capacity, st.streak) == (6, 0)
    report(gov, S, S)
    assert gov.status().capacity == 6
    report(gov, S)
    assert gov.status().capacity == 7


def test_seed_increase_is_capped_at_max(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=4), clock=clock)
    report(gov, *[S] * 30)
    assert gov.status().capacity == 4


# -- seed: pause and recovery -------------------------------------------------------


def test_seed_pauses_on_four_and_resumes_only_after_the_window_drains(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=20), clock=clock)
    report(gov, R, R, R, R)
    st = gov.status()
    assert st.paused and st.capacity == 0
    assert st.pause_reason == "waiting for provider rate-limit recovery"
    assert st.pause_kind == "policy"
    report(gov, R)  # further 429s while paused change nothing
    assert gov.status().capacity == 0
    clock.advance(30)
    report(gov, S)  # a success while 429s remain in the window: still paused
    assert gov.status().paused
    clock.advance(31)  # the last 429 is now 61 s old
    report(gov, S)
    st = gov.status()
    assert not st.paused and st.capacity == 5  # max(1, 20 // 4)
    assert st.pause_reason == ""


def test_time_driven_probe_lifts_a_drained_pause_without_any_success(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=20), clock=clock)
    report(gov, R, R, R, R)
    clock.advance(59)
    assert gov.probe().paused
    clock.advance(2)
    st = gov.probe()
    assert not st.paused and st.capacity == 5


def test_resume_level_is_at_least_one(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=2), clock=clock)
    report(gov, R, R, R, R)
    clock.advance(61)
    assert gov.probe().capacity == 1


def test_set_max_while_paused_keeps_zero_and_resumes_at_a_quarter_of_the_new_max(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    report(gov, R, R, R, R)
    st = gov.set_max_capacity(40)
    assert st.paused and st.capacity == 0 and st.max_capacity == 40
    clock.advance(61)
    st = gov.probe()
    assert not st.paused and st.capacity == 10


def test_set_max_when_not_paused_applies_at_once_up_and_down(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    assert gov.set_max_capacity(3).capacity == 3
    assert gov.set_max_capacity(12).capacity == 12
    report(gov, R, R)
    assert gov.status().capacity == 6


# -- retry-after -----------------------------------------------------------------------


def test_retry_after_holds_the_fleet_capped_by_config(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8, retry_after_cap=20), clock=clock)
    gov.report(R, retry_after=5)
    st = gov.status()
    assert st.not_before == pytest.approx(clock.now + 5) and st.holding
    assert gov.try_acquire() is None
    gov.report(R, retry_after=3600)  # capped at 20 s
    assert gov.status().not_before == pytest.approx(clock.now + 20)
    gov.report(R, retry_after=1)  # never shortens a hold
    assert gov.status().not_before == pytest.approx(clock.now + 20)
    clock.advance(20.001)
    lease = gov.try_acquire()
    assert lease is not None
    lease.release()


# -- operator actions -----------------------------------------------------------------


def test_operator_pause_is_not_lifted_by_the_window_rule(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    report(gov, R, R)  # 8 -> 4
    st = gov.pause("deploying a new key")
    assert st.paused and st.capacity == 0 and st.pause_kind == "operator"
    assert st.pause_reason == "deploying a new key"
    clock.advance(120)
    report(gov, S)
    assert gov.probe().paused
    st = gov.resume()
    assert not st.paused and st.capacity == 4  # where it was before the pause


def test_operator_pause_with_duration_ends_by_itself(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    st = gov.pause("maintenance", duration=10)
    assert st.paused_until == pytest.approx(clock.now + 10)
    clock.advance(9.9)
    assert gov.probe().paused
    clock.advance(0.2)
    st = gov.probe()
    assert not st.paused and st.capacity == 8


def test_resume_lifts_a_policy_pause_and_the_hold(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    gov.report(R, retry_after=30)
    report(gov, R, R, R)
    st = gov.resume()
    assert not st.paused and st.capacity == 2 and st.not_before is None


def test_reset_forgets_learnt_state_but_keeps_holders_and_config(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    lease = gov.try_acquire()
    assert lease is not None
    gov.set_max_capacity(6)
    report(gov, R, R, R, R)
    st = gov.reset()
    assert (st.paused, st.capacity, st.max_capacity) == (False, 6, 6)
    assert (st.window_attempts, st.in_flight) == (0, 1)
    st = gov.configure()  # the object's own config: max 8 again
    assert (st.capacity, st.max_capacity, st.in_flight) == (8, 8, 1)
    lease.release()


# -- leases and the policy ---------------------------------------------------------------


def test_report_of_a_lost_lease_changes_nothing(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8, lease_ttl=10), clock=clock)
    lease = gov.try_acquire()
    assert lease is not None
    clock.advance(11)  # the holder stalled past its TTL
    assert lease.lost
    with pytest.raises(LeaseLost):
        gov.report(R, lease=lease)
    st = gov.status()
    assert (st.window_attempts, st.capacity, st.in_flight) == (0, 8, 0)
    lease.release()  # late release: harmless


# -- the default (adaptive) policy ----------------------------------------------------------


def adaptive(max_capacity: int = 20, policy: AdaptivePolicy | None = None, **kw: object) -> GovernorConfig:
    """The default policy, probing every 10 s (``policy`` overrides it whole)."""
    return GovernorConfig(
        max_capacity=max_capacity,
        policy=policy or AdaptivePolicy(probe_interval=10),
        **kw,  # type: ignore[arg-type]
    )


#: the adaptive policy of these tests that never pauses
PATIENT = AdaptivePolicy(probe_interval=10, pause_count=100)


def hold(gov: Governor, n: int) -> list:  # type: ignore[type-arg]
    leases = [gov.try_acquire() for _ in range(n)]
    assert all(lease is not None for lease in leases)
    return leases


def warm(gov: Governor, capacity: int) -> None:
    """Successes until capacity has climbed to ``capacity`` (at once when it is there)."""
    for _ in range(capacity):
        if gov.status().capacity >= capacity:
            return
        report(gov, S)
    assert gov.status().capacity >= capacity


def refuse_at(gov: Governor, n: int) -> None:
    """n leases in flight, the last one refused, then all given back."""
    leases = hold(gov, n)
    gov.report(R, lease=leases[-1])
    for lease in leases:
        lease.release()


def test_adaptive_probe_interval_follows_the_window_unless_set() -> None:
    def probe_ms(config: GovernorConfig) -> str:
        fields = config.script_fields()
        return dict(zip(fields[::2], fields[1::2], strict=True))["probe_ms"]

    assert AdaptivePolicy().probe_interval is None
    assert probe_ms(GovernorConfig()) == "15000"  # a quarter of the default 60 s window
    assert probe_ms(GovernorConfig(window=2)) == "500"
    assert probe_ms(GovernorConfig(window=2, policy=AdaptivePolicy(probe_interval=3))) == "3000"
    assert AdaptivePolicy().resolved(8).probe_interval == 2.0
    assert GovernorConfig(window=8).policy == AdaptivePolicy()  # the config keeps "follow the window"


def test_adaptive_probes_follow_a_short_window(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(max_capacity=40, window=2, policy=AdaptivePolicy(pause_count=100)), clock=clock)
    warm(gov, 20)
    refuse_at(gov, 20)  # ceiling 20, capacity 18
    report(gov, S)  # 19: just below the ceiling
    clock.advance(0.4)
    report(gov, S, S, S)
    assert gov.status().capacity == 19  # 0.4 s < 2 s / 4
    clock.advance(0.1)
    report(gov, S, S, S)
    assert gov.status().capacity == 20  # probed after 0.5 s, not the old fixed 15 s


def flood(gov: Governor, held: list) -> int:  # type: ignore[type-arg]
    """Admit callers until the governor refuses one; the leases in the test's
    hands (its own count, not the governor's status)."""
    while (lease := gov.try_acquire()) is not None:
        held.append(lease)
        assert len(held) <= 1000
    return len(held)


def test_adaptive_starts_at_the_resume_level_and_doubles_per_round(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=64), clock=clock)
    held: list = []  # type: ignore[type-arg]
    rounds = [flood(gov, held)]
    assert rounds == [16]  # no blind burst of 64: max(1, floor(64 * 0.25))
    for _ in range(3):  # every lease of a round succeeds: one more each, so the next round is twice as wide
        for lease in held:
            gov.report(S, lease=lease, release=True)
        held.clear()
        rounds.append(flood(gov, held))
    assert rounds == [16, 32, 64, 64]  # the slow start (like TCP's): doubles per round, up to max_capacity
    for lease in held:
        lease.release()
    assert gov.status().ceiling == 0  # nothing refused, nothing learnt


def test_adaptive_slow_start_grows_one_per_success_under_a_flood(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=40), clock=clock)
    held: list = []  # type: ignore[type-arg]
    in_hand = [flood(gov, held)]
    for _ in range(40):  # the oldest call succeeds, the flood takes whatever is free
        gov.report(S, lease=held.pop(0), release=True)
        in_hand.append(flood(gov, held))
    assert in_hand == [min(40, 10 + k) for k in range(41)]  # 10, 11, ... 40, then 40
    for lease in held:
        lease.release()


def test_adaptive_slow_start_meets_a_hidden_limit_with_one_429(make_gov: MakeGov, name: str, clock) -> None:  # type: ignore[no-untyped-def]
    """A flood against a provider that serves ``limit`` at once and refuses
    the rest at once; the same flood without the slow start (resume_fraction
    1.0: a new governor admits max_capacity) for contrast."""
    limit = 37

    def run(config: GovernorConfig, name: str) -> tuple[list[int], list[int]]:
        gov = make_gov(config, clock=clock, governor_name=name)
        held: list = []  # type: ignore[type-arg]
        refused_at, in_hand = [], []
        for _ in range(150):
            sent: list = []  # type: ignore[type-arg]
            flood(gov, sent)  # sent at once, answered after
            refused = sent[max(0, limit - len(held)) :]  # over the hidden limit: 429
            held += sent[: len(sent) - len(refused)]
            for lease in refused:
                refused_at.append(len(held) + 1)
                gov.report(R, lease=lease, release=True)
            in_hand.append(len(held))
            gov.report(S, lease=held.pop(0), release=True)  # the oldest call done
            clock.advance(0.01)  # 1.5 s in all: no probe of the ceiling (every 10 s)
        for lease in held:
            lease.release()
        return refused_at, in_hand

    refused_at, in_hand = run(adaptive(max_capacity=96, policy=PATIENT), f"{name}-slow")
    assert refused_at == [limit + 1]  # climbed 24, 25, ... to the limit: the first refusal one above it
    assert in_hand[:14] == list(range(24, 38))
    assert all(limit - 4 <= n <= limit for n in in_hand[14:])  # held just below the learnt ceiling
    blind, _ = run(adaptive(max_capacity=96, policy=PATIENT, resume_fraction=1.0), f"{name}-blind")
    # without it: the first wave over the limit all refused at once, then each
    # wave admitted after a cut refused again until the cuts reach the limit (252)
    assert len(blind) >= 96 - limit


def test_adaptive_reset_and_configure_start_slow_a_raised_max_is_approached(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=64), clock=clock)
    report(gov, *[S] * 48)
    assert gov.status().capacity == 64
    assert gov.reset().capacity == 16  # a reset starts slow again
    held: list = []  # type: ignore[type-arg]
    assert flood(gov, held) == 16
    st = gov.set_max_capacity(80)  # a raised max_capacity is approached, not jumped to
    assert (st.capacity, st.max_capacity, st.ceiling) == (16, 80, 0)
    assert flood(gov, held) == 16
    for lease in held:  # the slow start goes on: a round of successes doubles it
        gov.report(S, lease=lease, release=True)
    held.clear()
    assert flood(gov, held) == 32
    for lease in held:
        lease.release()
    assert gov.configure().capacity == 16  # the object's own config stored afresh: 64, from its resume level
    assert make_gov(adaptive(max_capacity=64, resume_fraction=1.0), clock=clock).configure().capacity == 64


@pytest.mark.parametrize("policy", ["seed", "fixed"])
def test_seed_and_fixed_start_at_max_capacity(make_gov: MakeGov, clock, policy: str) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(policy=policy, max_capacity=12), clock=clock)  # type: ignore[arg-type]
    held: list = []  # type: ignore[type-arg]
    assert flood(gov, held) == 12  # the seed's rules exactly; fixed is fixed
    for lease in held:
        lease.release()
    held.clear()
    assert gov.reset().capacity == 12
    assert flood(gov, held) == 12
    for lease in held:
        lease.release()


def test_adaptive_slow_start_after_a_state_loss(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    config = adaptive(max_capacity=40, policy=PATIENT)
    gov = make_gov(config, clock=clock)
    warm(gov, 40)
    held: list = []  # type: ignore[type-arg]
    assert flood(gov, held) == 40
    for lease in held:
        lease.release()
    held.clear()
    sync_client.delete(*gov.keys.keys)  # the state is lost (a flush, a failover)
    st = gov.status()  # re-created from the client's config
    assert st.capacity == 10 and st.ceiling == 0
    clock.advance(config.lease_ttl + 0.1)  # past the hold for holders to re-register
    assert flood(gov, held) == 10
    for lease in held:
        lease.release()
    held.clear()
    sync_client.delete(*gov.keys.keys)  # lost again, and found first by a client that never knew it
    gov.close()
    fresh = make_gov(config, clock=clock)
    assert fresh.status().capacity == 10  # not a recovery, still no blind burst
    clock.advance(config.lease_ttl + 0.1)
    assert flood(fresh, held) == 10
    for lease in held:
        lease.release()


def test_adaptive_older_429s_change_nothing_and_a_refused_probe_goes_back_below_it(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=30, policy=PATIENT), clock=clock)
    warm(gov, 20)
    leases = hold(gov, 20)
    gov.report(R, lease=leases[0])  # refused at 20 in flight: cut to 18, remember 20
    st = gov.status()
    assert (st.capacity, st.ceiling) == (18, 20)
    gov.report(R, lease=leases[1])  # admitted before the cut: counted in it (18 of 20 accepted), nothing more
    st = gov.status()
    assert (st.capacity, st.ceiling) == (18, 20)
    for lease in leases:
        lease.release()
    report(gov, S)  # straight back to just below the ceiling
    assert gov.status().capacity == 19
    clock.advance(10)
    report(gov, S, S, S)  # probe the ceiling
    assert gov.status().capacity == 20
    refuse_at(gov, 20)  # the probe refused: back to 19 at once, no cut to 18
    st = gov.status()
    assert (st.capacity, st.ceiling) == (19, 20)
    clock.advance(10)
    report(gov, S, S, S)
    assert gov.status().capacity == 19  # refused at the same level: the next probe waits 20 s
    clock.advance(10)
    report(gov, S, S, S)
    assert gov.status().capacity == 20
    clock.advance(61)  # the window empties: what it holds next is refused, no background explains it
    refuse_at(gov, 20)  # refused again: back to 19
    refuse_at(gov, 19)  # then at 19: the first 429 below the ceiling, a cut (not the cut again of a climb)
    st = gov.status()
    assert (st.capacity, st.ceiling) == (17, 19)


def test_adaptive_probes_refused_at_one_level_back_off_to_one_percent_of_the_attempts(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=30, window=60, policy=PATIENT), clock=clock)
    warm(gov, 20)
    refuse_at(gov, 20)  # ceiling 20
    waits = []
    for _ in range(6):
        report(gov, S)  # 19
        waited = 0
        while gov.status().capacity < 20:
            clock.advance(10)
            waited += 10
            report(gov, S, S, S)
            assert waited <= 300
        waits.append(waited)
        refuse_at(gov, 20)  # the probe refused at the same level again
    # doubling past half a window: few attempts in the window, so a refused
    # probe may cost at most 1 % of them; never more than two windows
    assert waits == [10, 20, 40, 80, 120, 120]


def test_adaptive_refused_again_while_climbing_back_cuts_again(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=40, policy=PATIENT), clock=clock)
    warm(gov, 40)
    clock.advance(61)  # the warm-up leaves the window: every attempt in it is refused from here
    refuse_at(gov, 40)  # the first 429: ceiling 40, capacity 36
    assert (gov.status().capacity, gov.status().ceiling) == (36, 40)
    refuse_at(gov, 36)  # refused again before any probe, a share no background explains: the limit fell further
    st = gov.status()
    assert (st.capacity, st.ceiling) == (32, 33)  # cut again; the cut is the new ceiling
    refuse_at(gov, 32)
    st = gov.status()
    assert (st.capacity, st.ceiling) == (28, 29)  # geometric: a halved limit is found in a few cuts


def test_adaptive_above_the_ceiling_probes_double_every_half_interval(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=100, policy=PATIENT), clock=clock)
    warm(gov, 20)
    refuse_at(gov, 20)  # ceiling 20, capacity 18
    report(gov, S)  # 19
    steps = []
    for wait in (10, 5, 5, 5):  # the ceiling after probe_interval, then above it every half
        clock.advance(wait)
        before = gov.status().capacity
        report(gov, S, S, S)
        steps.append(gov.status().capacity - before)
    assert steps == [1, 2, 4, 6]  # doubling, never beyond a quarter of capacity (26 // 4)


@RAW_BACKENDS
def test_adaptive_converges_on_a_stable_limit(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    """Waves of calls against a provider that serves ``limit`` at once: capacity
    ends within one of the limit, probes above it are rare."""
    limit = 23
    gov = make_gov(adaptive(max_capacity=96, window=8, policy=AdaptivePolicy(pause_count=100)), clock=clock)
    trace, refused = [], 0
    for _ in range(400):
        leases = []
        while (lease := gov.try_acquire()) is not None:
            leases.append(lease)
        for lease in leases[limit:]:  # beyond the limit: refused, and quick to say so
            gov.report(R, lease=lease, release=True)
            refused += 1
        for lease in leases[:limit]:
            gov.report(S, lease=lease, release=True)
        clock.advance(0.1)
        trace.append(gov.status().capacity)
    late = trace[200:]
    assert all(limit - 1 <= c <= limit + 1 for c in late), sorted(set(late))
    assert sum(1 for c in late if c > limit) <= len(late) // 10  # probes above it are rare


def test_adaptive_pauses_only_on_a_storm(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=20), clock=clock)
    report(gov, *[S] * 20)
    report(gov, R, R, R, R, R)  # 5 of 25: a mild overshoot, not a storm
    assert not gov.status().paused
    report(gov, *[R] * 16)  # 21 of 41 > 50 %, reported without leases: all news
    st = gov.status()
    assert st.paused and st.capacity == 0
    clock.advance(61)
    st = gov.probe()
    assert not st.paused and st.capacity == 5


def test_adaptive_a_burst_of_429s_from_one_admission_wave_does_not_pause(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=20), clock=clock)
    warm(gov, 20)
    clock.advance(61)  # the warm-up's successes leave the window
    leases = hold(gov, 20)  # a wave: everyone starts at once
    for lease in leases[:8]:
        gov.report(R, lease=lease)  # 8 of 8 so far: the seed would pause here
    st = gov.status()
    assert not st.paused and (st.capacity, st.ceiling) == (12, 13)  # one cut: to the 12 of 20 the round accepted
    for lease in leases:
        lease.release()


def test_adaptive_pauses_only_when_refused_at_one_in_flight(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=4), clock=clock)
    refused = 0
    while (lease := gov.try_acquire()) is not None:  # each admitted alone, each refused
        gov.report(R, lease=lease)
        lease.release()
        refused += 1
        assert refused <= 10
    st = gov.status()
    assert refused == 4  # pause_count refusals, every one at a single call in flight
    assert st.paused and st.pause_reason == "waiting for provider rate-limit recovery"
    clock.advance(61)
    assert gov.probe().capacity == 1  # max(1, 4 // 4)


def test_adaptive_never_drops_below_one(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(max_capacity=2, policy=PATIENT), clock=clock)
    for _ in range(5):
        lease = gov.try_acquire()
        if lease is None:
            break
        gov.report(R, lease=lease)
        lease.release()
    assert gov.status().capacity == 1


def test_operator_pause_over_a_policy_pause_resumes_at_the_resume_level(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=20), clock=clock)
    report(gov, R, R, R, R)  # policy pause (capacity was 5 after two halvings)
    gov.pause("investigating")
    assert gov.resume().capacity == 5  # max(1, 20 // 4): the storm was not over


def test_a_lost_lease_brings_no_hold_either(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    # Its holder stalled past the TTL: its news may be an hour old.
    gov = make_gov(seed(max_capacity=8, lease_ttl=10), clock=clock)
    lease = gov.try_acquire()
    assert lease is not None
    clock.advance(11)
    with pytest.raises(LeaseLost):
        gov.report(R, retry_after=5, lease=lease)
    st = gov.status()
    assert st.window_attempts == 0 and st.not_before is None


def test_set_max_keeps_what_the_adaptive_policy_learnt(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    """A raised max_capacity is approached as any ceiling is (no burst over a
    limit the policy learnt); a lowered one applies at once."""
    gov = make_gov(adaptive(policy=PATIENT), clock=clock)
    warm(gov, 20)
    leases = hold(gov, 20)
    gov.report(R, lease=leases[0])  # ceiling 20, capacity 18
    for lease in leases:
        lease.release()
    report(gov, S)
    st = gov.status()
    assert (st.capacity, st.ceiling) == (19, 20)
    st = gov.set_max_capacity(30)  # learnt: capacity, ceiling and streak kept
    assert (st.capacity, st.max_capacity, st.ceiling) == (19, 30, 20)
    held: list = []  # type: ignore[type-arg]
    assert flood(gov, held) == 19  # the test's own count: no burst to 30
    for lease in held:
        gov.report(S, lease=lease, release=True)
    held.clear()
    assert gov.status().capacity == 19  # just below the ceiling: a probe waits for its interval
    clock.advance(10)
    report(gov, S, S, S)
    assert gov.status().capacity == 20  # the probe, one step, as before the new max
    st = gov.set_max_capacity(10)  # lowered: at once
    assert (st.capacity, st.max_capacity, st.ceiling) == (10, 10, 20)
    assert flood(gov, held) == 10
    for lease in held:
        lease.release()
    clock.advance(61)  # the window empties: a refusal there is no background's
    report(gov, R)  # reported without a lease, nothing in flight: cut from capacity 10
    st = gov.status()
    assert (st.capacity, st.ceiling) == (9, 10)


def test_pause_and_resume_clear_the_streak(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(seed(max_capacity=8), clock=clock)
    report(gov, S, S)
    assert gov.status().streak == 2
    assert gov.pause("deploy").streak == 0
    report(gov, S, S)  # successes while paused do not count
    assert gov.status().streak == 0
    assert gov.resume().streak == 0
    report(gov, S, S)
    assert gov.status().streak == 2


# -- no news is not bad news: growth without reports ------------------------------------


class Fleet:
    """``callers`` threads, each in ``with gov.acquire(timeout=...)`` until the
    test ends, none reporting: plain semaphore use. The test's own witness
    counts who is inside (never the governor's status). Time is the injected
    clock: ``step`` moves it, then waits until the process's waiters were
    refreshed at the new time (their deadlines in Redis say so) and every
    grant made meanwhile reached its caller."""

    def __init__(self, gov: Governor, client: Any, clock: FakeClock, callers: int) -> None:
        self.gov, self.client, self.clock, self.callers = gov, client, clock, callers
        self.lock = threading.Lock()
        self.inside: dict[int, float] = {}  #: caller -> clock time it got in
        self.most = 0  #: most callers inside at once
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._caller, args=(i,), daemon=True) for i in range(callers)]

    def _caller(self, i: int) -> None:
        try:
            with self.gov.acquire(timeout=3600):
                with self.lock:
                    self.inside[i] = self.clock.now
                    self.most = max(self.most, len(self.inside))
                self.done.wait(60)
                with self.lock:
                    del self.inside[i]
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.errors.append(error)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        self.settle()

    def queued(self) -> int:
        return int(self.client.zcard(self.gov.keys.queue))

    def settle(self) -> None:
        """Wait until every caller is inside or queued (a grant reached its caller)."""
        wait_until(lambda: len(self.inside) + self.queued() == self.callers or self.errors, 30, what="the callers")
        assert not self.errors, self.errors

    def step(self, seconds: float) -> None:
        self.clock.advance(seconds)
        deadline = round(self.clock.now * 1000) + round(self.gov.config.queue_ttl * 1000)

        def refreshed() -> bool:
            last = self.client.zrange(self.gov.keys.waiters, -1, -1, withscores=True)
            return not last or int(last[0][1]) >= deadline

        wait_until(refreshed, 30, what="a refresh of the waiters at the new time")
        self.settle()

    def stop(self) -> None:
        """Every caller out: those still queued are let in by an operator's
        configure() of the fixed policy at one slot each, and leave at once."""
        self.done.set()
        if self.queued():
            room = dataclasses.replace(self.gov.config, policy=FixedPolicy(), max_capacity=self.callers)
            operator = Governor(self.client, self.gov.name, room, clock=self.clock)
            try:
                operator.configure()
            finally:
                operator.close()
        for thread in self.threads:
            thread.join(30)
        assert not self.errors, self.errors
        assert not any(thread.is_alive() for thread in self.threads)


def no_news_config(max_capacity: int, window: float = 60.0) -> GovernorConfig:
    """The default policy and nothing else, but for leases that outlive the
    test's simulated minutes (renewals run on the real clock) and quick polls."""
    return GovernorConfig(max_capacity=max_capacity, window=window, lease_ttl=3600, poll=0.05, queue_ttl=30)


@RAW_BACKENDS
def test_plain_semaphore_use_reaches_max_capacity_without_a_report(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    """Eight callers in ``with gov.acquire()`` and no report: all eight inside
    at once within 10 s of the first acquire (window 8 s: a probe every 2 s),
    each step in the decision log."""
    gov = make_gov(no_news_config(8, window=8), clock=clock)
    start = clock.now
    fleet = Fleet(gov, sync_client, clock, 8)
    fleet.start()
    try:
        assert len(fleet.inside) == 2  # the slow start: max(1, floor(8 * 0.25)), the rest queued
        while fleet.most < 8 and clock.now - start < 20:
            fleet.step(0.25)
        assert fleet.most == 8, f"{fleet.most} inside at most after {clock.now - start:.2f} s"
        print(f"\n8 callers, no report, window 8 s: all 8 inside {clock.now - start:.2f} s after the first acquire")
        assert clock.now - start <= 10
        assert clock.now - start >= 4  # two doublings, one per probe interval of waiting: no burst
    finally:
        fleet.stop()
    steps = [e for e in read_events_after(sync_client, gov.keys, "0") if e.kind == "capacity"]
    assert [(int(e.fields["from"]), e.capacity) for e in steps] == [(2, 4), (4, 8)]
    assert all("callers waiting at capacity: double" in e.fields["why"] for e in steps)


@RAW_BACKENDS
def test_a_launch_gate_of_128_reaches_max_within_three_probe_intervals(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    """128 callers holding their leases for minutes (sub-agents behind a
    launch gate), no report, the default 60 s window (a probe every 15 s)."""
    gov = make_gov(no_news_config(128), clock=clock)
    start = clock.now
    fleet = Fleet(gov, sync_client, clock, 128)
    fleet.start()
    try:
        assert len(fleet.inside) == 32
        while fleet.most < 128 and clock.now - start < 120:
            fleet.step(1.0)
        assert fleet.most == 128, f"{fleet.most} inside at most after {clock.now - start:.0f} s"
        print(f"\n128 callers, no report, probe interval 15 s: all inside {clock.now - start:.0f} s after the first")
        assert clock.now - start <= 3 * 15
        for _ in range(3):
            fleet.step(60.0)  # minutes later: all still inside, nothing above max_capacity
        assert len(fleet.inside) == 128 and fleet.most == 128
    finally:
        fleet.stop()


@RAW_BACKENDS
def test_a_429_or_a_retry_after_stops_the_growth_seed_never_grows(make_gov: MakeGov, sync_client, clock, name) -> None:  # type: ignore[no-untyped-def]
    def waiting_fleet(config: GovernorConfig, suffix: str, *before: Outcome) -> tuple[Governor, Fleet]:
        gov = make_gov(config, clock=clock, governor_name=f"{name}-{suffix}")
        report(gov, *before)
        fleet = Fleet(gov, sync_client, clock, 6)
        fleet.start()
        return gov, fleet

    base = no_news_config(8, window=8)
    gov, fleet = waiting_fleet(base, "429")
    try:
        gov.report(R)  # one 429 (no lease): cut from 2 to 1, learnt; the window holds it 8 s
        for _ in range(30):
            fleet.step(0.25)
        assert fleet.most == 2 and gov.status().capacity == 1  # refused 7.5 s ago: no growth
    finally:
        fleet.stop()
    gov, fleet = waiting_fleet(base, "hold")
    try:
        fleet.step(1.0)
        gov.report(R, retry_after=30)  # the provider asks the fleet to hold 30 s
        for _ in range(20):
            fleet.step(0.5)
        assert fleet.most == 2  # held: no growth, no admission
    finally:
        fleet.stop()
    seed_config = dataclasses.replace(base, policy=SeedPolicy(), max_capacity=4)
    gov, fleet = waiting_fleet(seed_config, "seed", R, R)  # the seed halves on the second: 4 -> 2
    try:
        for _ in range(20):
            fleet.step(1.0)  # the window drains after 8 s; 12 s more of callers waiting
        assert fleet.most == 2 and gov.status().capacity == 2  # the seed's rules exactly: +1 per 3 successes only
    finally:
        fleet.stop()


# -- the fixed policy ----------------------------------------------------------------


def fixed(max_capacity: int = 5, **kw: object) -> GovernorConfig:
    return GovernorConfig(policy=FixedPolicy(), max_capacity=max_capacity, **kw)  # type: ignore[arg-type]


def test_fixed_capacity_never_moves_on_429s_or_successes(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(fixed(), clock=clock)
    leases = hold(gov, 5)
    for lease in leases:
        gov.report(R, lease=lease)  # every call of a full wave refused: the adaptive would cut, the seed pause
    report(gov, *[R] * 20)
    st = gov.status()
    assert (st.policy, st.capacity, st.paused, st.ceiling) == ("fixed", 5, False, 0)
    assert (st.window_rate_limited, st.window_attempts) == (25, 25)  # the window still counts
    assert gov.try_acquire() is None  # 5 in flight of 5
    for lease in leases:
        lease.release()
    report(gov, *[S] * 10)
    st = gov.status()
    assert (st.capacity, st.streak) == (5, 10)  # successes counted, nothing learnt
    assert (st.window_rate_limited, st.window_attempts) == (25, 35)
    report(gov, R)
    assert gov.status().streak == 0  # a 429 ends the streak
    clock.advance(61)
    st = gov.status()
    assert (st.capacity, st.window_rate_limited, st.window_attempts) == (5, 0, 0)  # the window drains
    assert len(hold(gov, 5)) == 5


def test_fixed_retry_after_still_holds_the_fleet(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(fixed(retry_after_cap=20), clock=clock)
    gov.report(R, retry_after=5)
    st = gov.status()
    assert st.holding and st.not_before == pytest.approx(clock.now + 5)
    assert st.capacity == 5 and st.blocked == "holding until the provider's retry-after (ends in 5.0 s)"
    assert gov.try_acquire() is None
    gov.report(R, retry_after=3600)  # capped at 20 s
    assert gov.status().not_before == pytest.approx(clock.now + 20)
    clock.advance(20.001)
    lease = gov.try_acquire()
    assert lease is not None
    assert gov.status().capacity == 5
    lease.release()


def test_fixed_follows_set_max_and_operator_pauses(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(fixed(), clock=clock)
    assert gov.set_max_capacity(3).capacity == 3
    st = gov.pause("deploy")
    assert st.paused and st.capacity == 0
    report(gov, R, R, R, R, R)
    assert gov.resume().capacity == 3
    st = gov.reset()
    assert (st.capacity, st.window_attempts, st.policy) == (3, 0, "fixed")


# -- policy configs ---------------------------------------------------------------------


def stored_config(client: object, gov: Governor) -> dict[str, str]:
    raw = client.hgetall(gov.keys.config)  # type: ignore[attr-defined]
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()
    }


BASE_CONFIG = set(protocol.CONFIG)


def test_a_policy_is_given_by_name_or_by_its_class() -> None:
    assert GovernorConfig().policy == AdaptivePolicy()  # probe_interval None: a quarter of the window
    assert GovernorConfig(policy="seed").policy == SeedPolicy()
    assert GovernorConfig(policy="fixed").policy == FixedPolicy()
    assert GovernorConfig(policy=SeedPolicy(decrease_count=3)).policy == SeedPolicy(decrease_count=3)


def test_seed_decrease_count_from_its_config(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(
        GovernorConfig(policy=SeedPolicy(decrease_count=3, ratio_min_attempts=100), max_capacity=8), clock=clock
    )
    report(gov, R, R)  # two: the default would halve here
    assert gov.status().capacity == 8
    report(gov, R)
    assert gov.status().capacity == 4
    stored = stored_config(sync_client, gov)
    assert (stored["policy"], stored["decrease_count"], stored["ratio_min_attempts"]) == ("seed", "3", "100")
    assert set(stored) == BASE_CONFIG | {f for f, _ in SeedPolicy.stored.values()}


def test_seed_factor_and_increase_successes_from_its_config(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    policy = SeedPolicy(decrease_factor=0.25, increase_successes=5, pause_count=100)
    gov = make_gov(seed(max_capacity=16, policy=policy), clock=clock)
    report(gov, R, R)
    assert gov.status().capacity == 4  # 16 * 0.25
    clock.advance(61)
    report(gov, S, S, S, S)
    assert gov.status().capacity == 4
    report(gov, S)
    assert gov.status().capacity == 5


def test_adaptive_cut_factor_and_pause_from_its_config(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    policy = AdaptivePolicy(cut_factor=0.5, pause_count=2, pause_ratio=1.0, probe_interval=7)
    gov = make_gov(adaptive(max_capacity=20, policy=policy), clock=clock)
    warm(gov, 10)
    clock.advance(61)  # the warm-up's successes leave the window
    leases = hold(gov, 10)
    gov.report(R, lease=leases[0])  # cut to half of 10 in flight
    st = gov.status()
    assert (st.capacity, st.ceiling) == (5, 10)
    for lease in leases:
        lease.release()
    stored = stored_config(sync_client, gov)
    assert (stored["cut_factor"], stored["pause_count"], stored["probe_ms"]) == ("0.5", "2", "7000")
    assert set(stored) == BASE_CONFIG | {f for f, _ in AdaptivePolicy.stored.values()}
    lone = gov.try_acquire()
    assert lone is not None
    gov.report(R, lease=lone)  # refused at one in flight, 2 of 2 refused: pause_count 2 (the default 4 cuts)
    lone.release()
    st = gov.status()
    assert st.paused and st.pause_kind == "policy"


def test_configure_replaces_the_stored_policy_and_its_fields(make_gov: MakeGov, sync_client, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(policy=PATIENT), clock=clock)
    warm(gov, 20)
    leases = hold(gov, 20)
    gov.report(R, lease=leases[0])
    for lease in leases:
        lease.release()
    assert gov.status().ceiling == 20
    other = make_gov(fixed(max_capacity=7), clock=clock)
    st = other.configure()
    assert (st.policy, st.capacity, st.max_capacity, st.ceiling) == ("fixed", 7, 7, 0)
    assert set(stored_config(sync_client, gov)) == BASE_CONFIG  # the adaptive fields are gone
    assert {k.decode() if isinstance(k, bytes) else k for k in sync_client.hgetall(gov.keys.policy)} == {"streak"}
    report(gov, *[R] * 10)
    assert gov.status().capacity == 7
