"""Governor.call / limit: acquire, call, classify, report, release, retry.

The provider is a real HTTP server (tests/support/scripted_provider.py) and the
callers are the official ``openai`` and ``anthropic`` clients, sync and
asyncio, built with their own retries off. After each call the governor's
state in Redis must tell the story: the attempts and rate-limited attempts
in the window, the fleet-wide hold, capacity, the quota counter, and no
lease or queue place left behind.

Backoff sleeps are kept to milliseconds by the RetryPolicy (small base, cap
and max_retry_after); nothing waits on a wall clock for a result, things
that happen in the background are polled for with a bounded timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from governor import (
    AcquireTimeout,
    AsyncGovernor,
    ConfigError,
    Governor,
    GovernorConfig,
    GovernorUnavailable,
    Outcome,
    QuotaExhausted,
    Status,
)
from governor._async import retry as async_retry
from governor.classify import Classification
from governor.config import RetryPolicy
from governor.providers import (
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    openai_client,
    without_retries,
)

from .support import scripted_provider as sp
from .support.servers import until

MakeGov = Callable[..., Governor]
MakeAGov = Callable[..., AsyncGovernor]

#: retries within milliseconds: a provider's Retry-After is cut to 50 ms
FAST = RetryPolicy(max_attempts=4, deadline=20.0, base=0.005, cap=0.02, max_retry_after=0.05)
#: the seed policy's rules are exact, so capacity can be asserted
SEED = GovernorConfig(max_capacity=8, policy="seed")
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


class Throttled(Exception):
    """A 429 from some HTTP client, classified by duck typing."""

    status_code = 429

    def __init__(self, retry_after: str | None = None) -> None:
        super().__init__("429 Too Many Requests")
        self.headers = {"Retry-After": retry_after} if retry_after is not None else {}


# -- fixtures -----------------------------------------------------------------------


@pytest.fixture(
    params=[pytest.param(("redis", False), id="redis"), pytest.param(("fakeredis", True), id="fakeredis-decoded")]
)
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    """Real Redis and fakeredis, with decode_responses off and on once each:
    call() adds no reply parsing of its own, so the other two pairings add
    time, not coverage (the facade's own tests run all four)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def provider() -> Iterator[sp.ScriptedProvider]:
    server = sp.ScriptedProvider().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sdk_clients(provider: sp.ScriptedProvider) -> Iterator[tuple[openai.OpenAI, anthropic.Anthropic]]:
    with (
        openai_client(base_url=provider.openai_base_url, api_key="test") as oc,
        anthropic_client(base_url=provider.url, api_key="test") as ac,
    ):
        yield oc, ac


@pytest.fixture
def oai(provider: sp.ScriptedProvider, sdk_clients: tuple[openai.OpenAI, anthropic.Anthropic]) -> openai.OpenAI:
    provider.reset()
    return sdk_clients[0]


@pytest.fixture
def claude(
    provider: sp.ScriptedProvider, sdk_clients: tuple[openai.OpenAI, anthropic.Anthropic]
) -> anthropic.Anthropic:
    provider.reset()
    return sdk_clients[1]


@pytest.fixture
async def async_clients(
    provider: sp.ScriptedProvider,
) -> AsyncIterator[tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]]:
    provider.reset()
    async with (
        async_openai_client(base_url=provider.openai_base_url, api_key="test") as oc,
        async_anthropic_client(base_url=provider.url, api_key="test") as ac,
    ):
        yield oc, ac


def chat(client: openai.OpenAI) -> Callable[[], Any]:
    return lambda: client.chat.completions.create(model="gpt-test", messages=MESSAGES)


def message(client: anthropic.Anthropic) -> Callable[[], Any]:
    return lambda: client.messages.create(model="claude-test", max_tokens=8, messages=MESSAGES)


def streamed_message(client: anthropic.Anthropic) -> Callable[[], Any]:
    """Consume the whole stream inside the call: an error event mid-stream is
    then raised under the lease and classified like any other failure."""

    def run() -> list[Any]:
        stream = client.messages.create(model="claude-test", max_tokens=8, messages=MESSAGES, stream=True)
        with stream:
            return list(stream)

    return run


def counts(status: Status) -> tuple[int, int, int, int, int]:
    """(attempts, rate-limited, in flight, queued, quota-exhausted)"""
    return (
        status.window_attempts,
        status.window_rate_limited,
        status.in_flight,
        status.queued,
        status.quota_exhausted,
    )


# -- the real SDKs, sync ---------------------------------------------------------------


def test_success_is_reported_and_released(make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider) -> None:
    gov = make_gov(SEED)
    provider.script(sp.OK)
    reply = gov.call(chat(oai), retry=FAST)
    assert reply.choices[0].message.content == "ok"
    status = gov.status()
    assert counts(status) == (1, 0, 0, 0, 0)
    assert (status.capacity, status.not_before, status.streak) == (8, None, 1)


@pytest.mark.parametrize(
    ("headers", "holds"),
    [
        pytest.param({"retry-after-ms": "30"}, 0.03, id="retry-after-ms"),
        pytest.param({"Retry-After": "2"}, 0.05, id="retry-after-seconds"),  # cut to max_retry_after
        pytest.param({"Retry-After": "date:+3"}, 0.05, id="retry-after-http-date"),
        pytest.param({"Retry-After": "soon"}, None, id="retry-after-garbage"),
        pytest.param({}, None, id="no-retry-after"),
    ],
)
def test_openai_throttle_is_retried(
    make_gov: MakeGov,
    oai: openai.OpenAI,
    provider: sp.ScriptedProvider,
    headers: dict[str, str],
    holds: float | None,
) -> None:
    gov = make_gov(SEED)
    before = gov.status()
    if headers.get("Retry-After") == "date:+3":
        headers = {"Retry-After": sp.http_date(3)}
    provider.script(sp.openai_rate_limited(**headers), sp.OK)
    reply = gov.call(chat(oai), retry=FAST)
    after = gov.status()
    assert reply.choices[0].message.content == "ok"
    assert len(provider.requests) == 2
    assert all(seen.headers.get("x-stainless-retry-count") == "0" for seen in provider.requests)  # no SDK retries
    assert counts(after) == (2, 1, 0, 0, 0)
    assert after.capacity == 8  # seed: one rate-limited attempt of one does not cut
    if holds is None:
        assert after.not_before is None
    else:
        # The report set the fleet-wide hold: report time + the (capped) Retry-After.
        assert after.not_before is not None
        assert before.now + holds - 0.002 <= after.not_before <= after.now + holds + 0.002


def test_two_throttles_halve_capacity_under_the_seed_policy(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider
) -> None:
    gov = make_gov(SEED)
    provider.script(sp.openai_rate_limited(), sp.openai_rate_limited(), sp.OK)
    gov.call(chat(oai), retry=FAST)
    status = gov.status()
    assert counts(status) == (3, 2, 0, 0, 0)
    assert status.capacity == 4  # seed: 2 rate-limited attempts in the window halve capacity


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(sp.anthropic_overloaded(**{"retry-after": "1"}), id="529-overloaded"),
        pytest.param(sp.anthropic_unavailable(), id="503"),
        pytest.param(sp.anthropic_rate_limited(**{"retry-after-ms": "20"}), id="429"),
    ],
)
def test_anthropic_overload_and_throttle_are_retried(
    make_gov: MakeGov, claude: anthropic.Anthropic, provider: sp.ScriptedProvider, failure: sp.Reply
) -> None:
    gov = make_gov(SEED)
    provider.script(failure, sp.OK)
    reply = gov.call(message(claude), retry=FAST)
    assert reply.content[0].text == "ok"
    assert counts(gov.status()) == (2, 1, 0, 0, 0)
    assert len(provider.requests) == 2


def test_overloaded_event_inside_a_stream_is_retried(
    make_gov: MakeGov, claude: anthropic.Anthropic, provider: sp.ScriptedProvider
) -> None:
    gov = make_gov(SEED)
    provider.script(sp.anthropic_stream_overloaded(), sp.OK)
    events = gov.call(streamed_message(claude), retry=FAST)
    assert [event.type for event in events][-1] == "message_stop"
    assert counts(gov.status()) == (2, 1, 0, 0, 0)


@pytest.mark.parametrize(
    ("use_openai", "failure"),
    [
        pytest.param(True, sp.openai_insufficient_quota(), id="openai-insufficient-quota"),
        pytest.param(False, sp.anthropic_credit_too_low(), id="anthropic-credit-balance"),
        pytest.param(False, sp.anthropic_spend_limit(), id="anthropic-spend-limit"),
        pytest.param(False, sp.anthropic_enforced_spend_limit(), id="anthropic-enforced-spend-limit"),
    ],
)
def test_quota_exhaustion_is_never_retried(
    make_gov: MakeGov,
    oai: openai.OpenAI,
    claude: anthropic.Anthropic,
    provider: sp.ScriptedProvider,
    use_openai: bool,
    failure: sp.Reply,
) -> None:
    gov = make_gov(SEED)
    provider.script(failure, sp.OK)
    fn = chat(oai) if use_openai else message(claude)
    with pytest.raises(QuotaExhausted) as caught:
        gov.call(fn, retry=FAST)
    assert isinstance(caught.value.__cause__, (openai.APIStatusError, anthropic.APIStatusError))
    assert caught.value.name == gov.name
    assert len(provider.requests) == 1 and provider.pending == 1  # not retried
    status = gov.status()
    # Recorded for operators; not an attempt of the window, not a policy input.
    assert counts(status) == (0, 0, 0, 0, 1)
    assert status.quota_at is not None
    assert (status.capacity, status.paused, status.not_before) == (8, False, None)


@pytest.mark.parametrize(
    ("failure", "error_type"),
    [
        pytest.param(sp.openai_server_error(), openai.InternalServerError, id="500"),
        pytest.param(sp.openai_bad_request(), openai.BadRequestError, id="400"),
    ],
)
def test_other_errors_propagate_unchanged(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider, failure: sp.Reply, error_type: type
) -> None:
    gov = make_gov(SEED)
    provider.script(failure, sp.OK)
    with pytest.raises(error_type) as caught:
        gov.call(chat(oai), retry=FAST)
    assert type(caught.value) is error_type  # the SDK's own exception, not wrapped
    assert len(provider.requests) == 1
    assert counts(gov.status()) == (1, 0, 0, 0, 0)


def test_gives_up_after_max_attempts_with_the_last_provider_error(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider
) -> None:
    gov = make_gov(SEED)
    policy = RetryPolicy(max_attempts=3, base=0.001, cap=0.005)
    provider.script(*[sp.openai_rate_limited(**{"x-attempt": str(n)}) for n in (1, 2, 3)], sp.OK)
    with pytest.raises(openai.RateLimitError) as caught:
        gov.call(chat(oai), retry=policy)
    assert caught.value.response.headers["x-attempt"] == "3"
    assert len(provider.requests) == 3 and provider.pending == 1
    status = gov.status()
    assert counts(status) == (3, 3, 0, 0, 0)
    assert status.capacity == 2  # seed: halved at the second and again at the third (the window holds >= 2)


def test_max_attempts_one_reports_and_raises_at_once(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider
) -> None:
    gov = make_gov(SEED)
    provider.script(sp.openai_rate_limited(**{"retry-after-ms": "40"}))
    with pytest.raises(openai.RateLimitError):
        gov.call(chat(oai), retry=RetryPolicy(max_attempts=1))
    status = gov.status()
    assert counts(status) == (1, 1, 0, 0, 0)
    assert status.not_before is not None  # the fleet holds even though this caller gave up


def test_a_retry_after_beyond_the_deadline_gives_up_without_waiting(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider
) -> None:
    gov = make_gov(SEED)
    provider.script(sp.openai_rate_limited(**{"Retry-After": "30"}), sp.OK)
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError):
        gov.call(chat(oai), retry=RetryPolicy(deadline=5.0))
    assert time.monotonic() - started < 5.0  # did not sleep the 30 s first
    status = gov.status()
    assert counts(status) == (1, 1, 0, 0, 0)
    # The whole fleet holds for the provider's 30 s.
    assert status.holding and status.not_before is not None
    assert status.not_before == pytest.approx(status.now + 30, abs=1.0)


def test_the_fleet_holds_after_a_retry_after(
    make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider
) -> None:
    """Another host (another Governor on the same name) is not admitted while
    the provider's Retry-After runs."""
    gov, other_host = make_gov(SEED), make_gov(SEED)
    provider.script(sp.openai_rate_limited(**{"retry-after": "20"}))
    with pytest.raises(openai.RateLimitError):
        gov.call(chat(oai), retry=RetryPolicy(max_attempts=1))
    assert other_host.try_acquire() is None
    assert other_host.status().holding


def test_deadline_reached_in_the_queue_re_raises_the_provider_error(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)
    calls = 0

    def fn() -> str:
        nonlocal calls
        calls += 1
        gov.pause("maintenance")  # the retry will wait in the queue
        raise Throttled()

    started = time.monotonic()
    with pytest.raises(Throttled):
        gov.call(fn, retry=RetryPolicy(deadline=0.4, base=0.001, cap=0.001))
    assert calls == 1 and time.monotonic() - started >= 0.35
    status = gov.status()
    assert counts(status) == (1, 1, 0, 0, 0)  # the queue place was given up


def test_acquire_timeout_shorter_than_the_deadline_raises_acquire_timeout(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)
    gov.pause("maintenance")
    with pytest.raises(AcquireTimeout):
        gov.call(lambda: "never", timeout=0.1, retry=RetryPolicy(deadline=30))
    assert counts(gov.status()) == (0, 0, 0, 0, 0)


def test_deadline_bounds_the_first_wait_in_the_queue_too(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)
    gov.pause("maintenance")
    with pytest.raises(AcquireTimeout):
        gov.call(lambda: "never", retry=RetryPolicy(deadline=0.1))
    assert gov.status().queued == 0


# -- lease lost, Redis trouble, misuse ---------------------------------------------------


def test_success_with_a_lost_lease_keeps_the_result(
    make_gov: MakeGov, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The call stalled past its lease TTL (here: the injected clock jumps),
    so the slot may have gone to someone else and the report raises LeaseLost.
    The work is done and paid for: the result is returned, the outcome is not
    counted, and a warning says so."""
    gov = make_gov(GovernorConfig(max_capacity=2, policy="seed", lease_ttl=5.0), clock=clock)

    def slow() -> str:
        clock.advance(6.0)
        return "done"

    with caplog.at_level(logging.WARNING, logger="governor"):
        assert gov.call(slow, retry=FAST) == "done"
    assert "not counted" in caplog.text
    assert counts(gov.status()) == (0, 0, 0, 0, 0)


def test_throttle_with_a_lost_lease_is_still_retried(make_gov: MakeGov, clock: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, policy="seed", lease_ttl=5.0), clock=clock)
    calls = 0

    def fn() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            clock.advance(6.0)
            raise Throttled()
        return "done"

    assert gov.call(fn, retry=FAST) == "done"
    assert calls == 2
    assert counts(gov.status()) == (1, 0, 0, 0, 0)  # the stale 429 was fenced off


def test_a_report_that_cannot_reach_redis_does_not_hide_the_result(
    make_gov: MakeGov, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gov = make_gov(SEED)

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise GovernorUnavailable("Redis is unreachable", name=gov.name)

    monkeypatch.setattr(gov, "report", unreachable)
    with caplog.at_level(logging.WARNING, logger="governor"):
        assert gov.call(lambda: 42) == 42
        with pytest.raises(KeyError):
            gov.call(lambda: {}["missing"])
    assert caplog.text.count("could not report") == 2
    assert gov.status().in_flight == 0  # released all the same


def test_a_release_that_fails_leaves_the_slot_to_its_ttl(make_gov: MakeGov, monkeypatch: pytest.MonkeyPatch) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, policy="seed", lease_ttl=0.3))
    real_release = Governor._release

    def failing(self: Governor, lease: Any) -> None:
        raise GovernorUnavailable("Redis is unreachable", name=self.name)

    monkeypatch.setattr(Governor, "_release", failing)
    assert gov.call(lambda: "done") == "done"
    monkeypatch.setattr(Governor, "_release", real_release)
    gov.close()  # stop the heartbeat, so the lease's TTL runs out
    deadline = time.monotonic() + 10
    while gov.status().in_flight:
        assert time.monotonic() < deadline, "the lease's TTL did not free the slot"
        time.sleep(0.05)


def test_keyboard_interrupt_releases_without_reporting(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gov.call(interrupted)
    assert counts(gov.status()) == (0, 0, 0, 0, 0)


def test_a_custom_classifier_decides(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)

    def classify(error: BaseException) -> Classification:
        if isinstance(error, TimeoutError):
            return Classification(Outcome.RATE_LIMITED, 0.0, "treat timeouts as overload")
        if isinstance(error, PermissionError):
            return Classification(Outcome.QUOTA_EXHAUSTED, None, "account suspended")
        return Classification(Outcome.ERROR)

    outcomes = iter([TimeoutError("slow"), TimeoutError("slow"), "ok"])

    def fn() -> str:
        item = next(outcomes)
        if isinstance(item, Exception):
            raise item
        return item

    assert gov.call(fn, classify=classify, retry=FAST) == "ok"
    assert counts(gov.status()) == (3, 2, 0, 0, 0)

    def suspended() -> None:
        raise PermissionError("suspended")

    with pytest.raises(QuotaExhausted, match="account suspended"):
        gov.call(suspended, classify=classify)


def test_a_classifier_that_returns_nonsense_is_a_usage_error(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)

    def boom() -> None:
        raise ValueError("provider said no")

    with pytest.raises(ConfigError, match="must return a Classification") as caught:
        gov.call(boom, classify=lambda error: "rate_limited")  # type: ignore[arg-type,return-value]
    assert isinstance(caught.value.__cause__, ValueError)
    assert counts(gov.status()) == (0, 0, 0, 0, 0)


def test_a_classifier_cannot_call_a_failure_a_success(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)

    def boom() -> None:
        raise ValueError("provider said no")

    with pytest.raises(ConfigError, match="describes a failure") as caught:
        gov.call(boom, classify=lambda error: Classification(Outcome.SUCCESS))
    assert isinstance(caught.value.__context__, ValueError)
    assert counts(gov.status()) == (0, 0, 0, 0, 0)  # nothing reported, the lease released


def test_bad_arguments(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)
    with pytest.raises(ConfigError, match="callable"):
        gov.call(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="RetryPolicy"):
        gov.call(lambda: 1, retry={"max_attempts": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="classify"):
        gov.call(lambda: 1, classify="default")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout"):
        gov.call(lambda: 1, timeout=-1)
    with pytest.raises(ConfigError, match="RetryPolicy"):
        gov.limit(retry=3)  # type: ignore[arg-type]
    assert counts(gov.status()) == (0, 0, 0, 0, 0)


def test_the_sync_governor_refuses_coroutine_functions(make_gov: MakeGov) -> None:
    gov = make_gov(SEED)

    async def coro() -> int:
        return 1

    with pytest.raises(ConfigError, match="plain function"):
        gov.call(coro)  # the coroutine made is closed: no "never awaited" warning
    with pytest.raises(ConfigError, match="plain function"):
        gov.limit()(coro)
    assert counts(gov.status()) == (0, 0, 0, 0, 0)  # a usage error is not a provider outcome


def test_the_decorator_form(make_gov: MakeGov, oai: openai.OpenAI, provider: sp.ScriptedProvider) -> None:
    gov = make_gov(SEED)

    @gov.limit(retry=FAST, holder="agent-7")
    def ask(question: str, *, model: str) -> str:
        """Ask the model."""
        reply = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": question}])
        return str(reply.choices[0].message.content)

    assert (ask.__name__, ask.__doc__) == ("ask", "Ask the model.")
    provider.script(sp.openai_rate_limited(**{"retry-after-ms": "5"}), sp.OK)
    assert ask("hi", model="gpt-test") == "ok"
    assert provider.requests[0].body["messages"][0]["content"] == "hi"
    assert counts(gov.status()) == (2, 1, 0, 0, 0)


def test_without_retries_and_the_client_builders(provider: sp.ScriptedProvider) -> None:
    made_elsewhere = openai.OpenAI(base_url=provider.openai_base_url, api_key="test")
    quiet = without_retries(made_elsewhere)
    assert (made_elsewhere.max_retries, quiet.max_retries) == (2, 0)
    with pytest.raises(ConfigError, match="max_retries"):
        openai_client(api_key="test", max_retries=2)
    with pytest.raises(ConfigError, match="openai or anthropic client"):
        without_retries(object())
    claude = anthropic_client(api_key="test", base_url=provider.url)
    assert claude.max_retries == 0
    for client in (made_elsewhere, quiet, claude):
        client.close()


# -- the real SDKs, asyncio --------------------------------------------------------------


async def test_async_openai_throttle_then_success(
    make_agov: MakeAGov,
    async_clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic],
    provider: sp.ScriptedProvider,
) -> None:
    gov = make_agov(SEED)
    oc, _ = async_clients
    provider.script(sp.openai_rate_limited(**{"retry-after-ms": "10"}), sp.openai_overloaded(), sp.OK)
    reply = await gov.call(oc.chat.completions.create, model="gpt-test", messages=MESSAGES, retry=FAST)
    assert reply.choices[0].message.content == "ok"
    status = await gov.status()
    assert counts(status) == (3, 2, 0, 0, 0)
    assert status.capacity == 4


async def test_async_anthropic_stream_overload_then_success(
    make_agov: MakeAGov,
    async_clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic],
    provider: sp.ScriptedProvider,
) -> None:
    gov = make_agov(SEED)
    _, ac = async_clients

    @gov.limit(retry=FAST)
    async def stream() -> list[str]:
        async with await ac.messages.create(
            model="claude-test",
            max_tokens=8,
            messages=MESSAGES,
            stream=True,
        ) as events:
            return [event.type async for event in events]

    provider.script(sp.anthropic_stream_overloaded(), sp.anthropic_overloaded(), sp.OK)
    assert (await stream())[-1] == "message_stop"
    assert counts(await gov.status()) == (3, 2, 0, 0, 0)


async def test_async_quota_exhaustion(
    make_agov: MakeAGov,
    async_clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic],
    provider: sp.ScriptedProvider,
) -> None:
    gov = make_agov(SEED)
    _, ac = async_clients
    provider.script(sp.anthropic_credit_too_low(), sp.OK)
    with pytest.raises(QuotaExhausted) as caught:
        await gov.call(ac.messages.create, model="claude-test", max_tokens=8, messages=MESSAGES, retry=FAST)
    assert isinstance(caught.value.__cause__, anthropic.BadRequestError)
    assert counts(await gov.status()) == (0, 0, 0, 0, 1)
    assert provider.pending == 1


async def test_the_asyncio_governor_refuses_plain_functions(make_agov: MakeAGov) -> None:
    gov = make_agov(SEED)
    with pytest.raises(ConfigError, match="awaitable"):
        await gov.call(lambda: 1)
    assert counts(await gov.status()) == (0, 0, 0, 0, 0)

    def generator() -> Iterator[int]:
        yield 1

    with pytest.raises(ConfigError, match="awaitable"):
        gov.limit()(generator)


# -- cancellation: no slot leaked at any point -----------------------------------------


async def test_cancelled_while_queued(make_agov: MakeAGov) -> None:
    gov = make_agov(GovernorConfig(max_capacity=1, policy="seed"))
    holder = await gov.acquire(timeout=5)
    called = False

    async def fn() -> None:
        nonlocal called
        called = True

    task = asyncio.create_task(gov.call(fn, retry=FAST))
    await until(lambda: _queued(gov, 1), what="the call queued")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: _queued(gov, 0), what="the queue place given up")
    await holder.release()
    assert not called
    assert counts(await gov.status()) == (0, 0, 0, 0, 0)


async def test_cancelled_while_holding_a_lease(
    make_agov: MakeAGov,
    async_clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic],
    provider: sp.ScriptedProvider,
) -> None:
    """Cancelled while the SDK's request is in flight: the lease is released,
    nothing is reported (there was no outcome)."""
    gov = make_agov(SEED)
    oc, _ = async_clients
    provider.script(sp.Reply(delay=5.0))
    task = asyncio.create_task(gov.call(oc.chat.completions.create, model="gpt-test", messages=MESSAGES, retry=FAST))
    await until(lambda: len(provider.requests) == 1, what="the request in flight")
    assert (await gov.status()).in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: _in_flight(gov, 0), what="the lease released")
    assert counts(await gov.status()) == (0, 0, 0, 0, 0)


async def test_cancelled_while_backing_off(
    make_agov: MakeAGov,
    async_clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic],
    provider: sp.ScriptedProvider,
) -> None:
    """Between retries the caller holds no lease; cancelling it then leaves
    nothing behind, and the provider's Retry-After still holds the fleet."""
    gov = make_agov(SEED)
    oc, _ = async_clients
    provider.script(sp.openai_rate_limited(**{"retry-after": "30"}), sp.OK)
    policy = RetryPolicy(max_retry_after=60.0, deadline=120.0)
    task = asyncio.create_task(gov.call(oc.chat.completions.create, model="gpt-test", messages=MESSAGES, retry=policy))

    async def backing_off() -> bool:
        status = await gov.status()
        return status.window_rate_limited == 1 and status.in_flight == 0

    await until(backing_off, what="the call backing off")
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    status = await gov.status()
    assert counts(status) == (1, 1, 0, 0, 0)
    assert status.holding and status.not_before is not None
    assert status.not_before == pytest.approx(status.now + 30, abs=1.0)
    assert len(provider.requests) == 1 and provider.pending == 1


async def test_waits_between_retries_hold_no_lease(make_agov: MakeAGov, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one caller backs off, its slot serves others: with capacity 1 a
    second caller gets through during the first one's wait."""
    monkeypatch.setattr(async_retry, "retry_wait", lambda *args, **kwargs: 30.0)  # a long backoff, no Retry-After
    gov = make_agov(GovernorConfig(max_capacity=1, policy="seed"))

    async def throttled() -> str:
        raise Throttled()

    async def other() -> str:
        return "through"

    first = asyncio.create_task(gov.call(throttled, retry=RetryPolicy(deadline=120)))

    async def backing_off() -> bool:
        status = await gov.status()
        return status.window_rate_limited == 1 and status.in_flight == 0

    await until(backing_off, what="the first call backing off")
    assert await gov.call(other, timeout=5) == "through"
    assert not first.done()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert counts(await gov.status()) == (2, 1, 0, 0, 0)


async def _queued(gov: AsyncGovernor, n: int) -> bool:
    return (await gov.status()).queued == n


async def _in_flight(gov: AsyncGovernor, n: int) -> bool:
    return (await gov.status()).in_flight == n
