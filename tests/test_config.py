"""GovernorConfig and RetryPolicy: seed defaults, validation with clear errors."""

from __future__ import annotations

import dataclasses
import math

import pytest

from governor import ConfigError, GovernorConfig
from governor.config import RetryPolicy


def test_defaults_are_the_seeds() -> None:
    c = GovernorConfig()
    assert (c.window, c.decrease_count, c.decrease_ratio, c.ratio_min_attempts) == (60.0, 2, 0.30, 2)
    assert (c.decrease_factor, c.pause_count, c.resume_fraction, c.increase_successes) == (0.5, 4, 0.25, 3)
    assert (c.max_capacity, c.lease_ttl, c.poll, c.renew_interval) == (128, 30.0, 1.0, 10.0)
    assert c.policy == "adaptive" and GovernorConfig(policy="seed").policy == "seed"


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        GovernorConfig().max_capacity = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_capacity", 0, "max_capacity must be >= 1"),
        ("max_capacity", -3, "max_capacity must be >= 1"),
        ("max_capacity", 2.5, "max_capacity must be an integer"),
        ("max_capacity", True, "max_capacity must be an integer"),
        ("max_capacity", 10**7, "max_capacity must be <="),
        ("policy", "aimd", "policy must be one of adaptive, seed"),
        ("window", 0, "window must be > 0"),
        ("window", -1.0, "window must be > 0"),
        ("window", math.nan, "window must be a finite number"),
        ("window", math.inf, "window must be a finite number"),
        ("window", "60", "window must be a number"),
        ("decrease_ratio", 1.5, "decrease_ratio must be between 0"),
        ("decrease_factor", 1.0, "decrease_factor must be between 0 and 1"),
        ("cut_factor", 0.0, "cut_factor must be between 0 and 1"),
        ("pause_count", 0, "pause_count must be >= 1"),
        ("resume_fraction", -0.1, "resume_fraction must be between 0"),
        ("lease_ttl", 0, "lease_ttl must be > 0"),
        ("lease_ttl", 0.001, "lease_ttl must be >= 0.003"),
        ("poll", 3.0, "queue_ttl .* must be at least twice poll"),
        ("retry_after_cap", -1, "retry_after_cap must be >= 0"),
        ("idle_expiry", 10.0, "idle_expiry must be at least window"),
        ("key_prefix", "bad prefix", "key prefix"),
    ],
)
def test_invalid_values_are_refused_with_a_clear_message(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GovernorConfig(**{field: value})  # type: ignore[arg-type]


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        GovernorConfig(max_capacity=0)


def test_script_fields_carry_every_policy_number_in_script_units() -> None:
    fields = GovernorConfig(window=1.5, probe_interval=0.25, decrease_ratio=0.3).script_fields()
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    assert pairs["window_ms"] == "1500" and pairs["probe_ms"] == "250" and pairs["dec_ratio"] == "0.3"
    assert set(pairs) >= {"policy", "max", "dec_count", "pause_count", "inc_succ", "idle_ms", "log_len"}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_attempts", 0, "max_attempts must be >= 1"),
        ("base", -1.0, "base must be >= 0"),
        ("cap", math.nan, "cap must be a finite number"),
        ("deadline", 0, "deadline must be > 0"),
    ],
)
def test_retry_policy_validation(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]
