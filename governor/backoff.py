"""The one backoff of the project: full jitter, capped exponential.

The n-th retry (n >= 1) waits ``uniform(0, min(cap, base * 2**(n-1)))``
(SPEC §5); callers that have a provider's Retry-After use that instead.
Every wait between retries in fleet-governor comes from here: SDK-style
retries, the background loop's reconnects and the swarm benchmark.
"""

from __future__ import annotations

import math
import random as _random

DEFAULT_BASE = 0.25
DEFAULT_CAP = 120.0


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
