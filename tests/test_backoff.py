"""The one backoff: full-jitter bounds and spread, and Retry-After parsing."""

from __future__ import annotations

import email.utils
import math
import random
import statistics

import httpx
import pytest

from governor.backoff import (
    DEFAULT_BASE,
    DEFAULT_CAP,
    RETRY_AFTER_LIMIT,
    backoff_ceiling,
    full_jitter,
    parse_retry_after,
    retry_wait,
)

NOW = 1_700_000_000.0  # a fixed "now" for HTTP dates


def date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


# -- full jitter ----------------------------------------------------------------


def test_ceiling_is_the_spec_formula() -> None:
    # uniform(0, min(120 s, 0.25 s * 2**(n-1))) for the n-th retry
    assert [backoff_ceiling(n) for n in range(1, 6)] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert backoff_ceiling(10) == 120.0  # 0.25 * 512 = 128, capped
    assert (DEFAULT_BASE, DEFAULT_CAP) == (0.25, 120.0)


def test_ceiling_is_monotone_and_capped_even_for_absurd_attempts() -> None:
    ceilings = [backoff_ceiling(n, 0.1, 30.0) for n in range(1, 3000)]
    assert ceilings == sorted(ceilings)  # monotone
    assert max(ceilings) == 30.0
    assert backoff_ceiling(10**9) == DEFAULT_CAP  # no float overflow


@pytest.mark.parametrize(
    ("attempt", "base", "cap"),
    [(0, 0.25, 1.0), (-1, 0.25, 1.0), (1, -0.1, 1.0), (1, 0.25, -1.0), (1, math.nan, 1.0), (1, 0.25, math.inf)],
)
def test_ceiling_rejects_bad_arguments(attempt: int, base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        backoff_ceiling(attempt, base, cap)


def test_jitter_stays_within_zero_and_the_ceiling() -> None:
    rng = random.Random(1)
    for attempt in range(1, 40):
        ceiling = backoff_ceiling(attempt, 0.05, 3.0)
        for _ in range(50):
            assert 0.0 <= full_jitter(attempt, 0.05, 3.0, rng) <= ceiling


def test_zero_base_or_cap_means_no_wait() -> None:
    assert full_jitter(5, 0.0, 10.0) == 0.0
    assert full_jitter(5, 1.0, 0.0) == 0.0


def test_jitter_is_uniform_over_the_whole_range() -> None:
    """Full jitter, not lockstep: 4000 callers failing at the same retry spread
    evenly over [0, ceiling]. Fixed seed; the bounds are loose enough for any
    seed to pass with overwhelming probability, tight enough to fail for a
    fixed delay, "equal jitter" (ceiling/2 + uniform(0, ceiling/2)) or a
    10 % jitter."""
    rng = random.Random(20240501)
    ceiling = backoff_ceiling(4)  # 2 s
    waits = [full_jitter(4, rng=rng) for _ in range(4000)]
    # Mean and spread of uniform(0, c): c/2 and c/sqrt(12).
    assert statistics.fmean(waits) == pytest.approx(ceiling / 2, rel=0.05)
    assert statistics.pstdev(waits) == pytest.approx(ceiling / math.sqrt(12), rel=0.05)
    # Chi-square over 10 equal bins, 9 degrees of freedom: 27.9 is the 0.1 % point.
    bins = [0] * 10
    for wait in waits:
        bins[min(9, int(wait / ceiling * 10))] += 1
    expected = len(waits) / 10
    chi2 = sum((count - expected) ** 2 / expected for count in bins)
    assert chi2 < 27.9, bins
    # The first tenth of the range is used too: nobody is forced to wait long.
    assert min(waits) < ceiling * 0.01 and max(waits) > ceiling * 0.99


def test_two_callers_do_not_retry_in_lockstep() -> None:
    """Two hosts that were throttled together pick different waits; over 8
    retries their schedules never coincide within a millisecond."""
    a, b = random.Random(1), random.Random(2)
    pairs = [(full_jitter(n, rng=a), full_jitter(n, rng=b)) for n in range(1, 9)]
    assert all(abs(x - y) > 0.001 for x, y in pairs)


# -- the decision: Retry-After or backoff -------------------------------------------


def test_retry_wait_honours_the_providers_retry_after() -> None:
    assert retry_wait(1, 7.5) == 7.5
    assert retry_wait(9, 0.0) == 0.0  # "retry now" is honoured, not replaced by a backoff
    assert retry_wait(3, 500.0, max_retry_after=120.0) == 120.0  # cut to the policy's maximum


def test_retry_wait_without_retry_after_is_full_jitter() -> None:
    assert retry_wait(3, None, base=0.1, cap=5.0, rng=random.Random(7)) == full_jitter(3, 0.1, 5.0, random.Random(7))
    waits = {retry_wait(2, None, base=0.1, cap=5.0, rng=random.Random(seed)) for seed in range(20)}
    assert len(waits) == 20 and all(0 <= w <= 0.2 for w in waits)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_retry_wait_rejects_a_bad_retry_after(bad: float) -> None:
    with pytest.raises(ValueError):
        retry_wait(1, bad)


def test_retry_wait_rejects_attempt_zero_with_or_without_retry_after() -> None:
    with pytest.raises(ValueError):
        retry_wait(0, 1.0)
    with pytest.raises(ValueError):
        retry_wait(0, None)


# -- Retry-After parsing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "20.5"}, 0.0205),
        ({"Retry-After": "30"}, 30.0),
        ({"retry-after": "0"}, 0.0),
        ({"Retry-After": " 2.5 "}, 2.5),  # fractional, as some providers send
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),  # milliseconds win
        ({"retry-after-ms": "soon", "retry-after": "4"}, 4.0),  # garbage ms: fall back to seconds
        ({"RETRY-AFTER": "12"}, 12.0),  # a plain dict is searched case-insensitively
        ({}, None),
        ({"x-ratelimit-reset-requests": "1s"}, None),  # not a Retry-After
    ],
)
def test_numeric_forms(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_http_date_form_against_now() -> None:
    assert parse_retry_after({"Retry-After": date(NOW + 90)}, now=NOW) == 90.0
    # RFC 850 and asctime, the obsolete forms HTTP still allows
    assert parse_retry_after({"Retry-After": "Sunday, 06-Nov-94 08:49:37 GMT"}, now=784111777.0 - 7) == 7.0
    assert parse_retry_after({"Retry-After": "Sun Nov  6 08:49:37 1994"}, now=784111777.0 - 7) == 7.0


def test_http_date_is_measured_against_the_responses_date_header() -> None:
    """The provider's clock against the provider's clock: a host whose clock is
    an hour off still waits what the provider asked."""
    headers = {"Date": date(NOW), "Retry-After": date(NOW + 20)}
    assert parse_retry_after(headers, now=NOW + 3600) == 20.0
    assert parse_retry_after(headers, now=NOW - 3600) == 20.0
    # An unreadable Date header: fall back to now.
    assert parse_retry_after({"Date": "yesterday", "Retry-After": date(NOW + 20)}, now=NOW) == 20.0


def test_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after({"Retry-After": date(NOW - 500)}, now=NOW) == 0.0


def test_http_date_without_now_uses_the_wall_clock() -> None:
    import time

    wait = parse_retry_after({"Retry-After": date(time.time() + 100)})
    assert wait is not None and 98.0 <= wait <= 100.0


@pytest.mark.parametrize(
    "value",
    [
        "-5",  # negative
        "-0.5",
        "nan",
        "NaN",
        "inf",
        "Infinity",
        "1e3",  # exponent: not delay-seconds
        "0x10",
        "1_000",  # float() would accept it
        "soon",
        "",
        "   ",
        "5 seconds",
        "Wed, 99 Foo 2015 07:28:00 GMT",
        "\x00\x01",
        "9" * 500 + "x",
        "Wed, 21 Oct 2015 07:28:00 GMT" * 10,  # absurdly long
    ],
)
def test_garbage_is_ignored(value: str) -> None:
    assert parse_retry_after({"Retry-After": value}, now=NOW) is None
    assert parse_retry_after({"retry-after-ms": value}, now=NOW) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Retry-After", "99999999999"),
        ("Retry-After", "1" + "0" * 400),  # overflows a float: still "very long", not garbage
        ("Retry-After", "86400.5"),
        ("retry-after-ms", "86400000"),  # exactly a day
        ("retry-after-ms", "86400000.5"),
        ("retry-after-ms", "9" * 400),
    ],
)
def test_huge_values_read_as_one_day(name: str, value: str) -> None:
    assert parse_retry_after({name: value}) == RETRY_AFTER_LIMIT


def test_header_containers() -> None:
    assert parse_retry_after(httpx.Headers({"Retry-After": "3"})) == 3.0
    assert parse_retry_after([("Retry-After", "3")]) == 3.0
    assert parse_retry_after([(b"retry-after-ms", b"40")]) == 0.04
    assert parse_retry_after({"retry-after": b"8"}) == 8.0
    assert parse_retry_after(None) is None
    # Odd containers and values are as good as no header.
    assert parse_retry_after(42) is None
    assert parse_retry_after([("Retry-After",)]) is None
    assert parse_retry_after({"Retry-After": 5}) is None  # not a header string


def test_azure_milliseconds_are_read_after_retry_after_ms_and_before_retry_after() -> None:
    assert parse_retry_after({"x-ms-retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "x-ms-retry-after-ms": "1500"}) == 0.25
    assert parse_retry_after({"x-ms-retry-after-ms": "soon", "Retry-After": "9"}) == 9.0  # garbage falls through
