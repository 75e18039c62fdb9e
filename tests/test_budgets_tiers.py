"""A service tier limited apart is a budget of its own: Anthropic's fast
mode (``speed: "fast"``), whose ``anthropic-fast-*`` headers announce limits
"separate from standard Opus rate limits". A lease of tier ``fast`` costs
its tokens in the fast kinds alone; a lease of any other tier never touches
them. On Redis and fakeredis, with an injected clock; the last tests go
through the governed transport to a real HTTP server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from governor import ConfigError, Governor, GovernorConfig, Outcome
from governor.budgets import KINDS, Tokens
from governor.core import Queued, new_id
from governor.headers import budget_limits
from governor.protocol import HolderRecord
from governor.transport import GovernedTransport

from .conftest import FakeClock
from .support import scripted_provider as sp

MakeGov = Callable[..., Governor]
S, R = Outcome.SUCCESS, Outcome.RATE_LIMITED

#: a standard speed of room, and a fast mode of little: 6,000 input and 1,200
#: output tokens a minute (100 and 20 a second)
STANDARD = {
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "80000",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "16000",
}
FAST = {
    "anthropic-fast-input-tokens-limit": "6000",
    "anthropic-fast-input-tokens-remaining": "6000",
    "anthropic-fast-output-tokens-limit": "1200",
    "anthropic-fast-output-tokens-remaining": "1200",
}


def fast(input_: int, output: int) -> Tokens:
    return Tokens(input_, output, tier="fast")


def levels(gov: Governor) -> dict[str, float]:
    return {b.kind: b.level for b in gov.status().budgets}


def learnt(make_gov: MakeGov, clock: FakeClock) -> Governor:
    """A governor that learnt both speeds' limits from one answer's headers."""
    gov = make_gov(GovernorConfig(max_capacity=10, restart_hold=False), clock=clock)
    gov.report(S, headers={**STANDARD, **FAST})
    return gov


# -- the kinds ---------------------------------------------------------------------------------


def test_the_fast_headers_are_budgets_of_their_own() -> None:
    limits = budget_limits({**STANDARD, **FAST, "anthropic-fast-output-tokens-remaining": "900"}, "g")
    assert limits["fast_input_tokens"] == (6000, 6000)
    assert limits["fast_output_tokens"] == (1200, 900)
    assert limits["input_tokens"] == (80000, 80000)
    assert KINDS[-2:] == ("fast_input_tokens", "fast_output_tokens")


def test_a_tokens_tier_counts_in_its_own_kinds_alone() -> None:
    asked = fast(300, 40)
    assert [asked.cost(k) for k in KINDS] == [1, 0, 0, 0, 300, 40]
    assert [Tokens(300, 40).cost(k) for k in KINDS] == [1, 340, 300, 40, 0, 0]
    # a tier no kind is kept for counts as the standard one
    assert [Tokens(300, 40, tier="priority").cost(k) for k in KINDS] == [1, 340, 300, 40, 0, 0]
    assert (asked.arg(), Tokens(3, 4).arg()) == ("300,40,fast", "3,4")
    with pytest.raises(ConfigError, match="tier"):
        Tokens(1, 2, tier="Fast|mode")


def test_the_holder_record_keeps_the_tier_after_the_output() -> None:
    record = HolderRecord(7, 30000, 1, 300, 40, 1, 0, "team-a", "host|1", tier="fast")
    assert record.format() == "7|30000|1|300|40,fast|1|0|team-a|host|1"
    assert HolderRecord.parse(record.format()) == record
    standard = HolderRecord(7, 30000, 1, 300, 40, 1, 0, "team-a", "h")
    assert HolderRecord.parse("7|30000|1|300|40|1|0|team-a|h") == standard
    assert HolderRecord.parse("7|30000|1|300|40,Fast|1|0|team-a|h") is None


def test_a_fast_lease_written_by_acquire_records_its_tier(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=fast(300, 40))
    assert lease is not None
    raw = gov.client.hget(gov.keys.holders, lease.id)
    record = HolderRecord.parse(raw.decode() if isinstance(raw, bytes) else raw)
    assert record is not None and (record.input, record.output, record.tier) == (300, 40, "fast")
    standard = gov.try_acquire(tokens=Tokens(300, 40, tier="standard"))
    assert standard is not None
    raw = gov.client.hget(gov.keys.holders, standard.id)
    assert "|40|" in (raw.decode() if isinstance(raw, bytes) else raw)  # the standard tier: no tier written


# -- admission ---------------------------------------------------------------------------------


def test_a_fast_budget_learnt_from_headers_holds_fast_leases_while_standard_ones_go_in(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = learnt(make_gov, clock)
    assert [(b.kind, b.limit, b.source) for b in gov.status().budgets] == [
        ("input_tokens", 80000, "header"),
        ("output_tokens", 16000, "header"),
        ("fast_input_tokens", 6000, "header"),
        ("fast_output_tokens", 1200, "header"),
    ]
    first = gov.try_acquire(tokens=fast(5000, 1000))
    assert first is not None
    assert levels(gov) == {"input_tokens": 80000, "output_tokens": 16000, "fast_input_tokens": 1000,
                           "fast_output_tokens": 200}  # fmt: skip
    assert gov.try_acquire(tokens=fast(2000, 100)) is None  # 1,000 fast input tokens left
    # the standard speed has room: its leases go in while fast ones cannot
    standard = gov.try_acquire(tokens=Tokens(20000, 4000))
    assert standard is not None
    assert levels(gov)["fast_input_tokens"] == 1000 and levels(gov)["input_tokens"] == 60000
    queued = gov._execute(gov._core.acquire(new_id(), gov._core.ask("w", tokens=fast(2000, 100)), wait=True))
    assert isinstance(queued, Queued)
    assert queued.reason == "fast_input_tokens budget: 2000 wanted, 1000 left of 6000"
    assert queued.hint == pytest.approx(10.0)  # 1,000 more at 100 a second


def test_a_standard_lease_never_consumes_the_fast_budget_nor_waits_on_its_debt(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=Tokens(3000, 500))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(4000, 900))
    after = levels(gov)
    assert (after["fast_input_tokens"], after["fast_output_tokens"]) == (6000, 1200)
    assert (after["input_tokens"], after["output_tokens"]) == (76000, 15100)
    # fast mode in debt: charged beyond its reservation
    lease = gov.try_acquire(tokens=fast(1000, 100))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=fast(9000, 100))
    assert levels(gov)["fast_input_tokens"] == -3000
    assert gov.try_acquire(tokens=fast(1, 0)) is None  # fast leases wait for the debt to refill
    assert gov.try_acquire(tokens=Tokens(1000, 100)) is not None  # a standard one does not
    assert gov.try_acquire() is not None  # nor one that reserves nothing


def test_the_fast_budget_refills_at_its_own_limit(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = learnt(make_gov, clock)
    assert gov.try_acquire(tokens=fast(6000, 0)) is not None
    assert gov.try_acquire(tokens=fast(500, 0)) is None
    clock.advance(4.9)  # 490 refilled at 100 a second
    assert gov.try_acquire(tokens=fast(500, 0)) is None
    clock.advance(0.1)
    assert gov.try_acquire(tokens=fast(500, 0)) is not None
    clock.advance(120)  # full again, never above its limit
    assert levels(gov)["fast_input_tokens"] == 6000


def test_a_fast_request_served_at_the_standard_speed_is_settled_in_the_standard_budgets(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=fast(2000, 400))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(1500, 300, tier="standard"))
    after = levels(gov)
    assert (after["fast_input_tokens"], after["fast_output_tokens"]) == (6000, 1200)  # its reservation back
    assert (after["input_tokens"], after["output_tokens"]) == (78500, 15700)  # what it used, where it was served
    lease = gov.try_acquire(tokens=fast(2000, 400))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(1500, 300))  # no tier said: the one asked for
    assert (levels(gov)["fast_input_tokens"], levels(gov)["input_tokens"]) == (4500, 78500)


def test_a_fast_refusal_clamps_the_fast_budgets_and_no_other(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=fast(100, 10))
    assert lease is not None
    gov.report(R, lease=lease, release=True, usage=Tokens())
    after = levels(gov)
    assert (after["fast_input_tokens"], after["fast_output_tokens"]) == (0, 0)
    assert (after["input_tokens"], after["output_tokens"]) == (80000, 16000)
    lease = gov.try_acquire(tokens=Tokens(100, 10))
    assert lease is not None
    clock.advance(1)  # the fast buckets refill 100 and 20
    gov.report(R, lease=lease, release=True, usage=Tokens())
    after = levels(gov)
    assert (after["input_tokens"], after["output_tokens"]) == (0, 0)
    assert (after["fast_input_tokens"], after["fast_output_tokens"]) == (pytest.approx(100), pytest.approx(20))


def test_a_fast_refusal_reported_without_usage_clamps_the_fast_budgets_alone(
    make_gov: MakeGov, clock: FakeClock
) -> None:
    """The lease's record names the refused call's tier when the report
    carries no usage (read for it: no reserve or caps here, which would
    have read it anyway)."""
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=fast(100, 10))
    assert lease is not None
    gov.report(R, lease=lease, release=True)
    after = levels(gov)
    assert (after["fast_input_tokens"], after["fast_output_tokens"]) == (0, 0)
    assert (after["input_tokens"], after["output_tokens"]) == (80000, 16000)


def test_configured_fast_ceilings_govern_from_the_start(make_gov: MakeGov, clock: FakeClock) -> None:
    config = GovernorConfig(max_capacity=10, fast_output_tokens_per_minute=600, restart_hold=False)
    gov = make_gov(config, clock=clock)
    assert [(b.kind, b.limit, b.source) for b in gov.status().budgets] == [("fast_output_tokens", 600, "configured")]
    assert gov.try_acquire(tokens=Tokens(0, 5000)) is not None  # the standard speed is not governed
    assert gov.try_acquire(tokens=fast(0, 600)) is not None
    assert gov.try_acquire(tokens=fast(0, 1)) is None
    with pytest.raises(ConfigError, match="above the fast_output_tokens budget"):
        gov.try_acquire(tokens=fast(0, 601))


# -- through the governed transport ------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[sp.ScriptedProvider]:
    provider = sp.ScriptedProvider().start()
    yield provider
    provider.stop()


def answer(input_: int, output: int, speed: str | None, headers: dict[str, str] | None = None) -> sp.Reply:
    usage: dict[str, Any] = {"input_tokens": input_, "output_tokens": output}
    if speed is not None:
        usage["speed"] = speed
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-6",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    return sp.Reply(status=200, body=body, headers=headers or {})


def test_the_transport_asks_for_the_requests_tier_and_settles_in_the_one_that_served_it(
    make_gov: MakeGov, clock: FakeClock, server: sp.ScriptedProvider
) -> None:
    server.reset()
    gov = make_gov(GovernorConfig(max_capacity=4, restart_hold=False), clock=clock)
    server.script(
        answer(10, 1, "fast", {**STANDARD, **FAST}),
        answer(1000, 200, "fast"),  # fast, as asked
        answer(500, 100, "standard"),  # fast asked, served at the standard speed
        answer(300, 30, None),  # the standard speed asked
    )
    transport = GovernedTransport(gov, profile="anthropic")
    with httpx.Client(transport=transport, base_url=server.url) as client:

        def post(speed: str | None) -> None:
            body: dict[str, Any] = {"model": "claude-opus-4-6", "max_tokens": 64, "messages": []}
            if speed is not None:
                body["speed"] = speed
            headers = {"anthropic-beta": "fast-mode-2026-02-01"} if speed else {}
            assert client.post(sp.ANTHROPIC_PATH, content=json.dumps(body), headers=headers).status_code == 200

        post("fast")
        assert levels(gov) == {"input_tokens": 80000, "output_tokens": 16000, "fast_input_tokens": 6000,
                               "fast_output_tokens": 1200}  # fmt: skip
        post("fast")
        assert levels(gov) == {"input_tokens": 80000, "output_tokens": 16000, "fast_input_tokens": 5000,
                               "fast_output_tokens": 1000}  # fmt: skip
        post("fast")
        assert levels(gov) == {"input_tokens": 79500, "output_tokens": 15900, "fast_input_tokens": 5000,
                               "fast_output_tokens": 1000}  # fmt: skip
        post(None)
        assert levels(gov) == {"input_tokens": 79200, "output_tokens": 15870, "fast_input_tokens": 5000,
                               "fast_output_tokens": 1000}  # fmt: skip
    assert [r.body.get("speed") for r in server.requests] == ["fast", "fast", "fast", None]


def test_a_tier_is_its_own_budget_only_where_its_provider_limits_it_apart() -> None:
    """OpenAI's service_tier "fast" is priced as a tier of its own, but no
    header announces its limits apart: its requests stay in the standard budgets."""
    from governor._exchange import tiered

    openai_body = json.dumps({"model": "gpt-5", "service_tier": "fast", "messages": []}).encode()
    anthropic_body = json.dumps({"model": "claude-opus-4-6", "speed": "fast", "messages": []}).encode()
    assert tiered(Tokens(10, 5), openai_body, "/v1/chat/completions").tier is None
    assert tiered(Tokens(10, 5), anthropic_body, "/v1/messages").tier == "fast"
    assert tiered(Tokens(10, 5, tier="standard"), anthropic_body, "/v1/messages").tier == "standard"


def test_a_standard_budget_in_debt_does_not_hold_a_queued_fast_waiter(make_gov: MakeGov, clock: FakeClock) -> None:
    gov = learnt(make_gov, clock)
    lease = gov.try_acquire(tokens=Tokens(1000, 100))
    assert lease is not None
    gov.report(S, lease=lease, release=True, usage=Tokens(100000, 100))  # the standard speed in debt
    assert gov.try_acquire(tokens=fast(6000, 0)) is not None  # fast mode drained
    waiter = new_id()
    queued = gov._execute(gov._core.acquire(waiter, gov._core.ask("w", tokens=fast(100, 0)), wait=True))
    assert isinstance(queued, Queued) and queued.reason.startswith("fast_input_tokens budget")
    clock.advance(1)  # fast mode refilled 100; the standard speed still in debt
    assert levels(gov)["input_tokens"] < 0
    refreshed = gov._execute(gov._core.refresh([waiter]))
    assert waiter in refreshed.granted
