"""Which refusals are load signals: the provider profiles' verdicts, through
the real SDKs against a real HTTP provider (tests/support/scripted_provider.py),
and what the adaptive policy makes of them on a real Redis and fakeredis.

A refusal the provider says is not about this fleet's load (an overload, a
529, a 503, a 429 whose headers show requests and tokens remaining) is
retried as any throttle, but cuts nothing and holds nobody but its caller;
a throttle of the account's limits still cuts and holds the fleet; the seed
policy reads both as it always has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from governor import Governor, GovernorConfig
from governor.classify import classify_http
from governor.config import RetryPolicy
from governor.core import Outcome
from governor.policies import AdaptivePolicy, SeedPolicy
from governor.profiles import profile
from governor.providers import anthropic_client, openai_client
from governor.views import read_events_after

from .support import scripted_provider as sp

MakeGov = Callable[..., Governor]

#: retries within milliseconds (a provider's retry delay cut to 50 ms)
FAST = RetryPolicy(max_attempts=4, deadline=20.0, base=0.005, cap=0.02, max_retry_after=0.05)
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
#: an OpenAI 429 whose headers show requests and tokens left: not the account's limits
HEADROOM = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-tokens": "29000",
    "retry-after": "5",
}
#: the same 429 with the requests used up: the fleet's own load
SPENT = {**HEADROOM, "x-ratelimit-remaining-requests": "0"}


@pytest.fixture(params=[pytest.param(("redis", False), id="redis"), pytest.param(("fakeredis", False), id="fakeredis")])
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def provider() -> Iterator[sp.ScriptedProvider]:
    server = sp.ScriptedProvider().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sdk(provider: sp.ScriptedProvider) -> Iterator[tuple[openai.OpenAI, anthropic.Anthropic]]:
    with (
        openai_client(base_url=provider.openai_base_url, api_key="test") as oc,
        anthropic_client(base_url=provider.url, api_key="test") as ac,
    ):
        yield oc, ac


def call(sdk: tuple[openai.OpenAI, anthropic.Anthropic], which: str) -> Callable[[], Any]:
    oc, ac = sdk
    if which == "openai":
        return lambda: oc.chat.completions.create(model="gpt-test", messages=MESSAGES)
    if which == "anthropic":
        return lambda: ac.messages.create(model="claude-test", max_tokens=8, messages=MESSAGES)

    def streamed() -> list[Any]:  # an overloaded_error event inside a streamed 200
        with ac.messages.create(model="claude-test", max_tokens=8, messages=MESSAGES, stream=True) as stream:
            return list(stream)

    return streamed


def adaptive() -> GovernorConfig:
    return GovernorConfig(max_capacity=32, window=2.0, policy=AdaptivePolicy())


BACKGROUND = [
    pytest.param("anthropic", sp.anthropic_overloaded(**{"retry-after": "5"}), id="anthropic-529"),
    pytest.param("stream", sp.anthropic_stream_overloaded(), id="anthropic-stream-overloaded"),
    pytest.param("openai", sp.openai_overloaded(), id="openai-503"),
    pytest.param("openai", sp.openai_rate_limited(**HEADROOM), id="openai-429-headroom"),
]
LOAD = [
    pytest.param("anthropic", sp.anthropic_rate_limited(**{"retry-after": "5"}), id="anthropic-429"),
    pytest.param("openai", sp.openai_rate_limited(**SPENT), id="openai-429-requests-spent"),
]


@pytest.mark.parametrize(("which", "refusal"), BACKGROUND)
def test_a_refusal_that_is_no_load_signal_cuts_nothing_and_holds_only_its_caller(
    make_gov: MakeGov, clock, provider: sp.ScriptedProvider, sdk: Any, which: str, refusal: sp.Reply
) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(), clock=clock)
    before = gov.status().capacity
    provider.reset()
    provider.script(refusal, sp.OK)
    gov.call(call(sdk, which), retry=FAST)
    st = gov.status()
    assert len(provider.requests) == 2  # retried, as any throttle
    assert st.capacity >= before  # no cut (the success after it may add one)
    assert st.not_before is None or st.not_before <= clock.now  # nobody else waits
    assert (st.window_attempts, st.window_rate_limited) == (2, 0)  # an attempt, not one of the fleet's refusals
    whys = [e.get("why") or "" for e in read_events_after(gov.client, gov.keys, "0") if e.kind == "refused"]
    assert any("not for this fleet's load" in why for why in whys), whys


@pytest.mark.parametrize(("which", "refusal"), LOAD)
def test_a_throttle_of_the_accounts_limits_still_cuts_and_holds_the_fleet(
    make_gov: MakeGov, clock, provider: sp.ScriptedProvider, sdk: Any, which: str, refusal: sp.Reply
) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(adaptive(), clock=clock)
    before = gov.status().capacity
    provider.reset()
    provider.script(refusal)
    with pytest.raises((openai.RateLimitError, anthropic.RateLimitError)):  # one try: the hold is on the fake clock
        gov.call(call(sdk, which), retry=RetryPolicy(max_attempts=1))
    st = gov.status()
    assert st.capacity < before
    assert st.not_before is not None and st.not_before > clock.now
    assert st.window_rate_limited == 1


@pytest.mark.parametrize(("which", "refusal"), BACKGROUND[:1] + LOAD[:1])
def test_the_seed_policy_reads_every_refusal_as_it_always_has(
    make_gov: MakeGov, clock, provider: sp.ScriptedProvider, sdk: Any, which: str, refusal: sp.Reply
) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(max_capacity=8, policy=SeedPolicy(decrease_count=1)), clock=clock)
    provider.reset()
    provider.script(refusal)
    with pytest.raises((anthropic.RateLimitError, anthropic.InternalServerError)):  # 529: OverloadedError
        gov.call(call(sdk, which), retry=RetryPolicy(max_attempts=1))
    st = gov.status()
    assert (st.window_attempts, st.window_rate_limited) == (1, 1)
    assert st.not_before is not None and st.not_before > clock.now  # its retry delay holds the fleet
    assert st.capacity == 4  # the seed's decrease: 8 * its decrease_factor 0.5


# -- the profiles' verdicts on their own providers' shapes ---------------------------------


@pytest.mark.parametrize(
    ("name", "status", "body", "load"),
    [
        pytest.param(
            "gemini",
            429,
            {"error": {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED"}},
            True,
            id="gemini-429-resource-exhausted",
        ),
        pytest.param(
            "gemini",
            503,
            {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
            False,
            id="gemini-503-overloaded",
        ),
        pytest.param("bedrock", 429, {"__type": "ThrottlingException", "message": "Too many"}, True, id="bedrock-429"),
        pytest.param(
            "bedrock", 503, {"__type": "ServiceUnavailableException", "message": "busy"}, False, id="bedrock-503"
        ),
        pytest.param(
            "bedrock", 429, {"__type": "ModelNotReadyException", "message": "loading"}, False, id="bedrock-not-ready"
        ),
        pytest.param("anthropic", 429, sp.anthropic_rate_limited().body, True, id="anthropic-429"),
        pytest.param("anthropic", 529, sp.anthropic_overloaded().body, False, id="anthropic-529"),
    ],
)
def test_each_profile_says_which_refusals_are_load_signals(name: str, status: int, body: Any, load: bool) -> None:
    verdict = classify_http(status, {}, body, profile=name)
    assert verdict.kind is Outcome.RATE_LIMITED
    assert verdict.load is load


def test_headroom_needs_both_requests_and_tokens_remaining() -> None:
    openai_profile = profile("openai")
    body = sp.openai_rate_limited().body
    assert classify_http(429, HEADROOM, body, profile=openai_profile).load is False
    assert classify_http(429, SPENT, body, profile=openai_profile).load is True
    only_requests = {k: v for k, v in HEADROOM.items() if "tokens" not in k}
    assert classify_http(429, only_requests, body, profile=openai_profile).load is True


# -- what the adaptive policy keeps through a refusal that is no load signal ---------------


def test_a_refusal_that_is_no_load_signal_keeps_the_streak_toward_the_next_probe(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    """A probe above the ceiling is due after a streak of successes; an
    overload between them says nothing about this fleet's load, so the
    streak goes on (a load signal starts it again)."""
    gov = make_gov(
        GovernorConfig(max_capacity=30, policy=AdaptivePolicy(probe_interval=10, pause_count=100)), clock=clock
    )
    while gov.status().capacity < 20:  # the slow start, nothing refused
        gov.report(Outcome.SUCCESS)
    leases = [gov.try_acquire() for _ in range(20)]
    assert all(lease is not None for lease in leases)
    gov.report(Outcome.RATE_LIMITED, lease=leases[-1])  # refused at 20 in flight: ceiling 20
    for lease in leases:
        if lease is not None:
            lease.release()
    gov.report(Outcome.SUCCESS)  # back to just below the ceiling
    st = gov.status()
    assert (st.capacity, st.ceiling, st.streak) == (19, 20, 0)
    clock.advance(10)  # a probe is due after a streak of three successes
    gov.report(Outcome.SUCCESS)
    gov.report(Outcome.SUCCESS)
    gov.report(Outcome.RATE_LIMITED, load=False)  # an overload: not the fleet's
    st = gov.status()
    assert (st.capacity, st.streak) == (19, 2)  # no cut, and the streak kept
    gov.report(Outcome.SUCCESS)  # the third success: the probe
    assert gov.status().capacity == 20
    clock.advance(10)  # (the same with a load signal: the streak starts again)
    gov.report(Outcome.SUCCESS)
    gov.report(Outcome.SUCCESS)
    before = gov.status().capacity
    gov.report(Outcome.RATE_LIMITED)
    assert gov.status().streak == 0
    assert gov.status().capacity <= before
