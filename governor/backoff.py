"""The one backoff of the project: full jitter, capped exponential, and Retry-After.

The n-th retry (n >= 1) waits ``uniform(0, min(cap, base * 2**(n-1)))``
unless the provider said how long to wait: then its
``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date) is honoured,
cut to a maximum. :func:`retry_wait` is the one function that makes that
choice. Every wait between retries in fleet-governor comes from here:
``Governor.call``, the background loop's reconnects and the swarm benchmark.

Full jitter, not a fixed or "equal jitter" delay: callers that failed
together do not come back together, so a fleet does not retry in lockstep.
"""

from __future__ import annotations

import email.utils
import math
import random as _random
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_BASE = 0.25
DEFAULT_CAP = 120.0
#: the longest provider-requested wait honoured by default (RetryPolicy.max_retry_after)
DEFAULT_MAX_RETRY_AFTER = 120.0
#: a Retry-After beyond this (or too large to represent) is read as this: one day
RETRY_AFTER_LIMIT = 86400.0

# Delay-seconds per RFC 9110 is 1*DIGIT; a fraction is accepted as providers send
# one (OpenAI's SDK does too). No sign, exponent, "nan" or "inf": those are garbage.
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def backoff_ceiling(attempt: int, base: float = DEFAULT_BASE, cap: float = DEFAULT_CAP) -> float:
    """The upper bound of the wait before retry number ``attempt`` (1-based)."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    if not (math.isfinite(base) and math.isfinite(cap)) or base < 0 or cap < 0:
        raise ValueError(f"base and cap must be finite and >= 0, got {base!r}, {cap!r}")
    # 2**(attempt-1) overflows a float near attempt 1025; the cap is reached long before.
    return min(cap, base * 2.0 ** min(attempt - 1, 1000))


def full_jitter(
    attempt: int,
    base: float = DEFAULT_BASE,
    cap: float = DEFAULT_CAP,
    rng: _random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt``: uniform over [0, ceiling]."""
    ceiling = backoff_ceiling(attempt, base, cap)
    return (rng or _random).uniform(0.0, ceiling)


def retry_wait(
    attempt: int,
    retry_after: float | None = None,
    *,
    base: float = DEFAULT_BASE,
    cap: float = DEFAULT_CAP,
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
    rng: _random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    The provider's ``retry_after`` (seconds, as :func:`parse_retry_after`
    reads it) when there is one, cut to ``max_retry_after``; otherwise full
    jitter. A Retry-After is not jittered: the governor's fleet-wide hold and
    FIFO queue already spread the callers that come back after it.
    """
    if retry_after is None:
        return full_jitter(attempt, base, cap, rng)
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    if not math.isfinite(retry_after) or retry_after < 0:
        raise ValueError(f"retry_after must be finite and >= 0 seconds, got {retry_after!r}")
    if not math.isfinite(max_retry_after) or max_retry_after < 0:
        raise ValueError(f"max_retry_after must be finite and >= 0 seconds, got {max_retry_after!r}")
    return min(retry_after, max_retry_after)


#: the headers that say how long to wait, in the order they are preferred, and
#: their unit (None: ``Retry-After``'s delay-seconds or HTTP date); Azure
#: OpenAI sends ``x-ms-retry-after-ms``
RETRY_AFTER_HEADERS: tuple[tuple[str, float | None], ...] = (
    ("retry-after-ms", 0.001),
    ("x-ms-retry-after-ms", 0.001),
    ("retry-after", None),
)


def parse_retry_after(headers: Any, *, now: float | None = None) -> float | None:
    """Seconds the provider asks to wait, from response headers; None if it did not say.

    ``retry-after-ms`` (milliseconds, OpenAI and Anthropic send it), then
    Azure's ``x-ms-retry-after-ms``, then ``Retry-After``, which may be
    delay-seconds or an HTTP date (:data:`RETRY_AFTER_HEADERS`); the first
    readable one wins (:func:`read_retry_after`).
    ``headers`` is any mapping (case-insensitive ones such as httpx's are
    looked up directly, a plain dict by scanning its keys) or a list of
    ``(name, value)`` pairs, with str or bytes.
    """
    if headers is None:
        return None
    clock = time.time() if now is None else now
    for name, unit in RETRY_AFTER_HEADERS:
        text = _header(headers, name)
        if text is not None:
            seconds = read_retry_after(text, unit, _header(headers, "date"), clock)
            if seconds is not None:
                return seconds
    return None


def read_retry_after(text: str, unit: float | None, date: str | None, now: float) -> float | None:
    """Seconds of one Retry-After-like header's value; None if unreadable.

    A number (digits, with an optional fraction) times ``unit`` (seconds per
    unit: 0.001 for the ``-ms`` headers); with ``unit`` None
    (``Retry-After``) also an HTTP date, measured against the response's own
    ``date`` header when there is one (the provider's clock against the
    provider's clock, so a host's clock skew does not matter), else against
    ``now`` (Unix seconds); a date in the past means 0. Garbage never
    raises: a negative, non-numeric, NaN or infinite value is unreadable; a
    value beyond a day, or too large for a float, reads as
    :data:`RETRY_AFTER_LIMIT`.
    """
    value = _number(text)
    if value is not None:
        return _bounded(value * (1.0 if unit is None else unit))
    if unit is not None:
        return None
    when = _http_date(text)
    if when is None:
        return None
    reference = _http_date(date)
    if reference is None:
        reference = now
    return _bounded(max(0.0, when - reference))


def _bounded(seconds: float) -> float:
    return min(seconds, RETRY_AFTER_LIMIT)  # inf (an overflowing digit string) included


def _number(text: str) -> float | None:
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    return float(text)  # digits only: finite or +inf, never NaN


def _http_date(text: str | None) -> float | None:
    """An HTTP date (RFC 9110: IMF-fixdate, or the obsolete forms) as Unix seconds."""
    if text is None or len(text) > 100:
        return None
    try:
        parsed = email.utils.parsedate_tz(text)
        if parsed is None:
            return None
        return float(email.utils.mktime_tz(parsed))
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _header(headers: Any, name: str) -> str | None:
    """One header's value, looked up case-insensitively in any header container."""
    try:
        if isinstance(headers, Mapping) or hasattr(headers, "items"):
            value = headers.get(name)
            if value is None:
                value = _scan(headers.items(), name)
        else:
            value = _scan(headers, name)
    except Exception:  # noqa: BLE001 - an odd container is as good as no header
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) else None


def _scan(pairs: Iterable[Any], name: str) -> Any:
    for pair in pairs:
        key, value = pair
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if isinstance(key, str) and key.lower() == name:
            return value
    return None
