"""governor.headers: provider rate-limit headers into budgets.

The header sets are the ones the providers document and send: OpenAI's
``x-ratelimit-*`` with Go-style durations, Anthropic's
``anthropic-ratelimit-*`` with RFC 3339 resets, Azure OpenAI's
remaining-only figures and ``x-ms-retry-after-ms``. Whatever arrives,
parse() never raises and names what it could not read.
"""

from __future__ import annotations

import email.utils
import math
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import ConfigError
from governor.backoff import parse_retry_after
from governor.headers import (
    EMPTY,
    FIGURES,
    KINDS,
    BudgetHeader,
    RateLimits,
    parse,
    parse_duration,
    parse_rfc3339,
)

#: 2025-01-01T00:00:00Z
NEW_YEAR = 1_735_689_600.0

#: a real OpenAI chat-completions answer's rate-limit headers (the usage-based trio is not ours)
OPENAI = {
    "x-ratelimit-limit-requests": "5000",
    "x-ratelimit-limit-tokens": "160000",
    "x-ratelimit-limit-tokens_usage_based": "160000",
    "x-ratelimit-remaining-requests": "4999",
    "x-ratelimit-remaining-tokens": "159976",
    "x-ratelimit-remaining-tokens_usage_based": "159976",
    "x-ratelimit-reset-requests": "12ms",
    "x-ratelimit-reset-tokens": "9ms",
    "x-ratelimit-reset-tokens_usage_based": "9ms",
}

ANTHROPIC = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2025-01-01T00:00:01Z",
    "anthropic-ratelimit-tokens-limit": "100000",
    "anthropic-ratelimit-tokens-remaining": "98000",
    "anthropic-ratelimit-tokens-reset": "2025-01-01T00:00:02.5Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "79000",
    "anthropic-ratelimit-input-tokens-reset": "2025-01-01T01:00:00+01:00",  # the same instant as NEW_YEAR
    "anthropic-ratelimit-output-tokens-limit": "20000",
    "anthropic-ratelimit-output-tokens-remaining": "19000",
    "anthropic-ratelimit-output-tokens-reset": "2024-12-31T23:59:00Z",  # in the past: whole now
    # not budgets of ours: ignored, not malformed
    "anthropic-ratelimit-unified-reset": "1735689600",
    "anthropic-priority-input-tokens-limit": "1000",
    "request-id": "req_1",
}


def test_openai_headers() -> None:
    limits = parse(OPENAI)
    assert dict(limits.budgets) == {
        "requests": BudgetHeader(limit=5000, remaining=4999, reset_ms=12),
        "tokens": BudgetHeader(limit=160000, remaining=159976, reset_ms=9),
    }
    assert limits.retry_after is None
    assert limits.malformed == ()
    assert limits


def test_anthropic_headers_measured_from_now() -> None:
    limits = parse(ANTHROPIC, now=NEW_YEAR)
    assert dict(limits.budgets) == {  # tokens-*, the tighter of input and output, is no budget of its own
        "requests": BudgetHeader(50, 49, 1000),
        "input_tokens": BudgetHeader(80000, 79000, 0),
        "output_tokens": BudgetHeader(20000, 19000, 0),
    }
    assert list(limits.budgets) == [k for k in KINDS if k != "tokens"]  # in the governor's order
    assert limits.malformed == ()
    later = parse(ANTHROPIC, now=NEW_YEAR - 10.25)
    assert later.budgets["requests"].reset_ms == 11250
    assert later.budgets["input_tokens"].reset_ms == 10250


def test_anthropic_tokens_alone_are_a_tokens_budget() -> None:
    alone = {k: v for k, v in ANTHROPIC.items() if "input-tokens" not in k and "output-tokens" not in k}
    assert parse(alone, now=NEW_YEAR).budgets["tokens"] == BudgetHeader(100000, 98000, 2500)
    both = {**OPENAI, **ANTHROPIC}  # a gateway: OpenAI's tokens figures are a tokens budget
    assert parse(both, now=NEW_YEAR).budgets["tokens"].limit in (100000, 160000)


def test_default_now_is_this_hosts_clock() -> None:
    import time

    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    reset = parse({"anthropic-ratelimit-requests-reset": soon}).budgets["requests"].reset_ms
    assert reset is not None and 55_000 <= reset <= 61_000


def test_azure_remaining_only_and_ms_retry_after() -> None:
    limits = parse(
        {
            "x-ratelimit-remaining-requests": "79",
            "x-ratelimit-remaining-tokens": "61353",
            "x-ms-retry-after-ms": "1500",
            "x-ms-region": "North Central US",
        }
    )
    assert dict(limits.budgets) == {
        "requests": BudgetHeader(remaining=79),
        "tokens": BudgetHeader(remaining=61353),
    }
    assert limits.retry_after == 1.5


def test_azure_bare_seconds_reset_and_minus_one() -> None:
    limits = parse(
        {"x-ratelimit-reset-tokens": "55", "x-ratelimit-limit-tokens": "-1", "x-ratelimit-remaining-tokens": "-1"}
    )
    assert dict(limits.budgets) == {"tokens": BudgetHeader(reset_ms=55000)}
    assert set(limits.malformed) == {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("12ms", 0.012),
        ("1h2m3.5s", 3723.5),
        ("0.5s", 0.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("1m30s", 90.0),
        ("8.64s", 8.64),
        ("20ms", 0.02),
        ("500us", 0.0005),
        ("250µs", 0.00025),
        ("100ns", 1e-7),
        ("2h", 7200.0),
        (".5s", 0.5),
        ("  7s ", 7.0),
        ("55", 55.0),
        ("1.5", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    value = parse_duration(text)
    assert value is not None and math.isclose(value, seconds, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("text", ["", "s", "1", "-1s", "1x", "1 s", "1s2", "ms", "1.s.", "1e3s", "nan", "inf", "1d"])
def test_bad_durations(text: str) -> None:
    if text == "1":  # a bare number is Azure's seconds
        assert parse_duration(text) == 1.0
        return
    assert parse_duration(text) is None


@pytest.mark.parametrize(
    ("reset", "ms"),
    [("12ms", 12), ("0.5ms", 1), ("500us", 1), ("1h2m3.5s", 3_723_500), ("0", 0), ("6m0s", 360_000)],
)
def test_reset_ms_rounds_up(reset: str, ms: int) -> None:
    """A reset is never read as sooner than it is: a fraction of a ms is a whole one."""
    assert parse({"x-ratelimit-reset-requests": reset}).budgets["requests"].reset_ms == ms


@pytest.mark.parametrize(
    ("text", "unix"),
    [
        ("2025-01-01T00:00:00Z", NEW_YEAR),
        ("2025-01-01t00:00:00z", NEW_YEAR),
        ("2025-01-01 00:00:00Z", NEW_YEAR),
        ("2025-01-01T00:00:00.250Z", NEW_YEAR + 0.25),
        ("2025-01-01T00:00:00.123456789Z", NEW_YEAR + 0.123456789),
        ("2025-01-01T02:00:00+02:00", NEW_YEAR),
        ("2024-12-31T19:00:00-05:00", NEW_YEAR),
        ("2024-12-31T23:59:60Z", NEW_YEAR - 1),  # a leap second reads as the second before
    ],
)
def test_rfc3339(text: str, unix: float) -> None:
    value = parse_rfc3339(text)
    assert value is not None and math.isclose(value, unix, abs_tol=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "2025-01-01",
        "2025-01-01T00:00:00",  # no offset: not RFC 3339
        "2025-13-01T00:00:00Z",
        "2025-01-01T25:00:00Z",
        "2025-01-01T00:00:00+24:00",
        "1735689600",
        "Wed, 01 Jan 2025 00:00:00 GMT",
        "soon",
    ],
)
def test_bad_rfc3339(text: str) -> None:
    assert parse_rfc3339(text) is None
    assert parse({"anthropic-ratelimit-tokens-reset": text}).malformed == ("anthropic-ratelimit-tokens-reset",)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "30"}, 0.03),
        ({"retry-after-ms": "30", "retry-after": "2"}, 0.03),  # ms first, as governor.backoff
        ({"x-ms-retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),  # a bad one falls through to the next
        ({"retry-after": "999999999"}, 86400.0),  # bounded to a day
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert parse(headers).retry_after == seconds
    assert parse_retry_after(headers) == seconds or "x-ms-retry-after-ms" in headers


def test_retry_after_http_date() -> None:
    date = email.utils.formatdate(NEW_YEAR, usegmt=True)
    later = email.utils.formatdate(NEW_YEAR + 30, usegmt=True)
    # against the response's own Date, whatever this host's clock says
    assert parse({"Retry-After": later, "Date": date}, now=0.0).retry_after == 30.0
    assert parse({"Retry-After": later}, now=NEW_YEAR + 10).retry_after == 20.0
    assert parse({"Retry-After": date}, now=NEW_YEAR + 10).retry_after == 0.0  # in the past
    assert parse({"Retry-After": later, "Date": "garbage"}, now=NEW_YEAR).retry_after == 30.0


def test_malformed_are_named_and_the_rest_kept() -> None:
    limits = parse(
        {
            "x-ratelimit-limit-requests": "lots",
            "x-ratelimit-remaining-requests": "3",
            "x-ratelimit-reset-requests": "1fortnight",
            "x-ratelimit-limit-tokens": "1.5",
            "x-ratelimit-remaining-tokens": str(2**60),  # beyond what a Lua number holds exactly
            "Retry-After": "later",
            "retry-after-ms": "",
        }
    )
    assert dict(limits.budgets) == {"requests": BudgetHeader(remaining=3)}
    assert limits.retry_after is None
    assert set(limits.malformed) == {
        "x-ratelimit-limit-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "retry-after",
        "retry-after-ms",
    }


def test_names_in_any_case_and_any_container() -> None:
    expected = {"requests": BudgetHeader(limit=10, remaining=9, reset_ms=1000)}
    mixed = {
        "X-RateLimit-Limit-Requests": "10",
        "X-RATELIMIT-REMAINING-REQUESTS": "9",
        "x-ratelimit-reset-requests": "1s",
    }
    assert dict(parse(mixed).budgets) == expected
    assert dict(parse(httpx.Headers(mixed)).budgets) == expected
    assert dict(parse([(k.encode(), v.encode()) for k, v in mixed.items()]).budgets) == expected
    assert dict(parse({"x-ratelimit-limit-requests": 10}).budgets) == {"requests": BudgetHeader(limit=10)}  # type: ignore[dict-item]


def test_a_header_sent_twice_is_malformed() -> None:
    headers = httpx.Headers([("x-ratelimit-remaining-tokens", "5"), ("x-ratelimit-remaining-tokens", "6")])
    assert parse(headers).malformed == ("x-ratelimit-remaining-tokens",)
    assert parse([("x-ratelimit-remaining-tokens", "5"), ("X-Ratelimit-Remaining-Tokens", "6")]).budgets == {}


def test_anthropic_wins_when_both_families_speak() -> None:
    limits = parse({"x-ratelimit-limit-tokens": "1", "anthropic-ratelimit-tokens-limit": "2"})
    assert limits.budgets["tokens"].limit == 2


def test_nothing_said() -> None:
    assert parse(None) is EMPTY
    assert parse({}) == EMPTY
    assert parse({"content-type": "application/json"}) == EMPTY
    assert not EMPTY


class Exploding:
    def items(self) -> Any:
        raise RuntimeError("no")


@pytest.mark.parametrize("headers", [Exploding(), 42, [("only-one",)], [(1, 2)], "x-ratelimit-limit-requests"])
def test_odd_containers_never_raise(headers: Any) -> None:
    assert isinstance(parse(headers), RateLimits)


NAMES = st.sampled_from(
    [*FIGURES, "retry-after", "retry-after-ms", "x-ms-retry-after-ms", "date", "x-other", "RETRY-AFTER"]
)
VALUES = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"-?\d{0,30}(\.\d{0,5})?(ms|s|m|h|us)?", fullmatch=True),
    st.from_regex(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,12})?(Z|[+-]\d{2}:\d{2})?", fullmatch=True),
    st.binary(max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(NAMES, VALUES), max_size=12), st.floats(allow_nan=True, allow_infinity=True))
def test_never_raises(pairs: list[tuple[str, Any]], now: float) -> None:
    limits = parse(pairs, now=now if math.isfinite(now) else None)
    for kind, figures in limits.budgets.items():
        assert kind in KINDS
        for value in (figures.limit, figures.remaining, figures.reset_ms):
            assert value is None or (isinstance(value, int) and value >= 0)
    assert limits.retry_after is None or 0 <= limits.retry_after <= 86400
    assert set(limits.malformed) <= {name.lower() for name, _ in pairs}


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": -1},
        {"remaining": 1.5},
        {"reset_ms": True},
        {"limit": 2**53},
        {"remaining": "3"},
    ],
)
def test_budget_header_is_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BudgetHeader(**bad)


def test_rate_limits_is_validated() -> None:
    with pytest.raises(ConfigError, match="unknown budget kind"):
        RateLimits({"concurrency": BudgetHeader(limit=1)})
    with pytest.raises(ConfigError, match="BudgetHeader"):
        RateLimits({"tokens": {"limit": 1}})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="retry_after"):
        RateLimits(retry_after=-1.0)
    with pytest.raises(ConfigError, match="retry_after"):
        RateLimits(retry_after=math.inf)
    with pytest.raises(ConfigError, match="malformed"):
        RateLimits(malformed=["x"])  # type: ignore[arg-type]
    limits = RateLimits({"tokens": BudgetHeader(limit=1), "requests": BudgetHeader(limit=2)})
    assert list(limits.budgets) == ["requests", "tokens"]
    with pytest.raises(TypeError):
        limits.budgets["tokens"] = BudgetHeader()  # type: ignore[index]


def test_kinds_are_the_governors() -> None:
    """The standard kinds a header speaks of, then a tier's own: each named
    <tier>_<kind> as budget_limits names a tier's figures."""
    budgets = pytest.importorskip("governor.budgets")
    assert tuple(budgets.KINDS[: len(KINDS)]) == KINDS
    assert budgets.KIND_TIER == {kind: kind.split("_")[0] for kind in budgets.KINDS[len(KINDS) :]}
    assert all(kind.partition("_")[2] in KINDS for kind in budgets.KIND_TIER)


def test_undated_retry_at_is_only_an_http_date_with_nothing_to_measure_it_against() -> None:
    """The one case the fleet's clock must settle: Retry-After as an HTTP date,
    no usable Date header, no figure in an earlier header."""
    from governor.headers import undated_retry_at

    when = "Wed, 21 Oct 2026 07:28:00 GMT"
    at = 1_792_567_680.0
    assert undated_retry_at({"Retry-After": when}) == at
    assert undated_retry_at({"retry-after": when, "date": "garbage"}) == at
    assert undated_retry_at({"retry-after": when, "date": "Wed, 21 Oct 2026 07:27:00 GMT"}) is None  # dated
    assert undated_retry_at({"retry-after": "30"}) is None  # a figure
    assert undated_retry_at({"retry-after-ms": "1500", "retry-after": when}) is None  # the earlier header decides
    assert undated_retry_at({"retry-after-ms": "soon", "retry-after": when}) == at  # an unreadable one does not
    assert undated_retry_at({"retry-after": "tomorrow"}) is None
    assert undated_retry_at(None) is None and undated_retry_at({}) is None
