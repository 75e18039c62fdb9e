"""GovernorConfig, the policy classes and RetryPolicy: seed defaults,
validation with clear errors, the stored fields each policy sends."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from typing import Any

import pytest

from governor import ConfigError, GovernorConfig, policies, protocol
from governor.config import RetryPolicy
from governor.config import ms as config_ms
from governor.policies import (
    POLICY_NAMES,
    REGISTRY,
    AdaptivePolicy,
    FixedPolicy,
    Policy,
    SeedPolicy,
    policy_from,
)

#: the policy numbers, which belong to the policy and are not GovernorConfig fields
GONE = (
    "decrease_count",
    "decrease_ratio",
    "ratio_min_attempts",
    "decrease_factor",
    "pause_count",
    "pause_ratio",
    "increase_successes",
    "cut_factor",
    "probe_interval",
)


def test_defaults_are_the_seeds() -> None:
    c = GovernorConfig()
    assert (c.window, c.resume_fraction, c.retry_after_cap) == (60.0, 0.25, 60.0)
    assert (c.max_capacity, c.lease_ttl, c.poll, c.renew_interval) == (128, 30.0, 1.0, 10.0)
    assert c.policy == AdaptivePolicy() and type(c.policy) is AdaptivePolicy
    seed = GovernorConfig(policy="seed").policy
    assert isinstance(seed, SeedPolicy) and seed == SeedPolicy()
    assert (seed.decrease_count, seed.decrease_ratio, seed.ratio_min_attempts) == (2, 0.30, 2)
    assert (seed.decrease_factor, seed.pause_count, seed.increase_successes) == (0.5, 4, 3)
    adaptive = AdaptivePolicy()
    assert (adaptive.pause_count, adaptive.pause_ratio, adaptive.increase_successes) == (4, 0.5, 3)
    assert (adaptive.cut_factor, adaptive.probe_interval) == (0.9, None)  # None: a quarter of the window
    assert adaptive.resolved(60).probe_interval == 15.0
    assert GovernorConfig(policy="fixed").policy == FixedPolicy()


def test_the_policy_is_always_a_policy_instance_after_construction() -> None:
    own = SeedPolicy(decrease_count=3)
    assert GovernorConfig(policy=own).policy is own
    for name in POLICY_NAMES:
        policy = GovernorConfig(policy=name).policy
        assert isinstance(policy, REGISTRY[name]) and policy == REGISTRY[name]()


def test_the_flat_policy_fields_are_gone_from_the_config() -> None:
    names = {f.name for f in dataclasses.fields(GovernorConfig)}
    assert not names & set(GONE), sorted(names & set(GONE))
    for name in GONE:
        with pytest.raises(TypeError):
            GovernorConfig(**{name: 1})  # type: ignore[arg-type]
    # each lives on the policy classes instead
    on_policies = {f.name for cls in REGISTRY.values() for f in dataclasses.fields(cls)}
    assert on_policies == set(GONE)
    adaptive = {f.name for f in dataclasses.fields(AdaptivePolicy)}
    seed = {f.name for f in dataclasses.fields(SeedPolicy)}
    assert {"pause_count", "increase_successes"} <= adaptive & seed
    assert "probe_interval" in adaptive and "probe_interval" not in seed
    assert dataclasses.fields(FixedPolicy) == ()


def test_config_and_policies_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        GovernorConfig().max_capacity = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        AdaptivePolicy().cut_factor = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_capacity", 0, "max_capacity must be >= 1"),
        ("max_capacity", -3, "max_capacity must be >= 1"),
        ("max_capacity", 2.5, "max_capacity must be an integer"),
        ("max_capacity", True, "max_capacity must be an integer"),
        ("max_capacity", 10**7, "max_capacity must be <="),
        ("policy", "aimd", "policy must be one of adaptive, seed, fixed or a Policy instance, got 'aimd'"),
        ("policy", None, "policy must be one of adaptive, seed, fixed"),
        ("policy", AdaptivePolicy, "policy must be one of adaptive, seed, fixed"),  # the class, not an instance
        ("window", 0, "window must be > 0"),
        ("window", -1.0, "window must be > 0"),
        ("window", math.nan, "window must be a finite number"),
        ("window", math.inf, "window must be a finite number"),
        ("window", "60", "window must be a number"),
        ("resume_fraction", -0.1, "resume_fraction must be between 0"),
        ("resume_fraction", 1.5, "resume_fraction must be between 0"),
        ("lease_ttl", 0, "lease_ttl must be > 0"),
        ("lease_ttl", 0.001, "lease_ttl must be >= 0.003"),
        ("poll", 3.0, "queue_ttl .* must be at least twice poll"),
        ("retry_after_cap", -1, "retry_after_cap must be >= 0"),
        ("idle_expiry", 10.0, "idle_expiry must be at least window"),
        ("log_length", 0, "log_length must be >= 1"),
        ("key_prefix", "bad prefix", "key prefix"),
    ],
)
def test_invalid_values_are_refused_with_a_clear_message(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GovernorConfig(**{field: value})  # type: ignore[arg-type]


POLICY_CASES: list[tuple[type[Policy], str, Any, str]] = [
    (AdaptivePolicy, "pause_count", 0, "adaptive policy: pause_count must be >= 1, got 0"),
    (AdaptivePolicy, "pause_count", 2.5, "adaptive policy: pause_count must be an integer, got 2.5"),
    (AdaptivePolicy, "pause_count", True, "adaptive policy: pause_count must be a finite number, got True"),
    (AdaptivePolicy, "increase_successes", 0, "adaptive policy: increase_successes must be >= 1"),
    (AdaptivePolicy, "pause_ratio", 1.5, "adaptive policy: pause_ratio must be between 0 and 1, got 1.5"),
    (AdaptivePolicy, "pause_ratio", -0.1, "adaptive policy: pause_ratio must be between 0 and 1"),
    (AdaptivePolicy, "cut_factor", 0.0, r"adaptive policy: cut_factor must be between 0 and 1 \(exclusive\)"),
    (AdaptivePolicy, "cut_factor", 1.0, r"adaptive policy: cut_factor must be between 0 and 1 \(exclusive\)"),
    (AdaptivePolicy, "cut_factor", math.nan, "adaptive policy: cut_factor must be a finite number"),
    (AdaptivePolicy, "cut_factor", "0.5", "adaptive policy: cut_factor must be a finite number"),
    (AdaptivePolicy, "probe_interval", -1.0, "adaptive policy: probe_interval must be 0 to 86400 seconds"),
    (AdaptivePolicy, "probe_interval", 86401, "adaptive policy: probe_interval must be 0 to 86400 seconds"),
    (AdaptivePolicy, "probe_interval", math.inf, "adaptive policy: probe_interval must be a finite number"),
    (SeedPolicy, "decrease_count", 0, "seed policy: decrease_count must be >= 1, got 0"),
    (SeedPolicy, "decrease_count", math.inf, "seed policy: decrease_count must be a finite number"),
    (SeedPolicy, "ratio_min_attempts", 0, "seed policy: ratio_min_attempts must be >= 1"),
    (SeedPolicy, "pause_count", -1, "seed policy: pause_count must be >= 1"),
    (SeedPolicy, "increase_successes", 0, "seed policy: increase_successes must be >= 1"),
    (SeedPolicy, "increase_successes", 1.5, "seed policy: increase_successes must be an integer"),
    (SeedPolicy, "decrease_ratio", 1.5, "seed policy: decrease_ratio must be between 0 and 1, got 1.5"),
    (SeedPolicy, "decrease_ratio", -0.1, "seed policy: decrease_ratio must be between 0 and 1"),
    (SeedPolicy, "decrease_factor", 1.0, r"seed policy: decrease_factor must be between 0 and 1 \(exclusive\)"),
    (SeedPolicy, "decrease_factor", 0.0, r"seed policy: decrease_factor must be between 0 and 1 \(exclusive\)"),
]


@pytest.mark.parametrize(
    ("cls", "field", "value", "message"), POLICY_CASES, ids=[f"{c.name}.{f}={v!r}" for c, f, v, _ in POLICY_CASES]
)
def test_each_policy_validates_its_own_numbers(cls: type[Policy], field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cls(**{field: value})


def test_the_bounds_themselves_are_accepted() -> None:
    AdaptivePolicy(pause_count=1, pause_ratio=0.0, increase_successes=1, cut_factor=0.01, probe_interval=0)
    AdaptivePolicy(pause_ratio=1.0, cut_factor=0.99, probe_interval=86400)
    SeedPolicy(decrease_count=1, decrease_ratio=0.0, ratio_min_attempts=1, decrease_factor=0.01)
    SeedPolicy(decrease_ratio=1.0, decrease_factor=0.99, pause_count=1, increase_successes=1)


def test_fixed_has_no_numbers() -> None:
    with pytest.raises(TypeError):
        FixedPolicy(pause_count=4)  # type: ignore[call-arg]
    assert FixedPolicy().script_fields() == {} and FixedPolicy.state == {}


def test_the_policy_names() -> None:
    assert POLICY_NAMES == ("adaptive", "seed", "fixed")
    assert REGISTRY == {"adaptive": AdaptivePolicy, "seed": SeedPolicy, "fixed": FixedPolicy}
    for name, cls in REGISTRY.items():
        assert cls.name == name and issubclass(cls, Policy)
        assert type(policy_from(name)) is cls
    own = SeedPolicy(decrease_count=3)
    assert policy_from(own) is own
    for bad in ("aimd", "Adaptive", "", 3, None):
        with pytest.raises(ConfigError, match="policy must be one of adaptive, seed, fixed"):
            policy_from(bad)  # type: ignore[arg-type]


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        GovernorConfig(max_capacity=0)
    with pytest.raises(ValueError):
        SeedPolicy(decrease_count=0)


def _pairs(config: GovernorConfig) -> dict[str, str]:
    fields = config.script_fields()
    assert len(fields) % 2 == 0
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    assert len(pairs) * 2 == len(fields), "a field sent twice"
    return pairs


BASE = ["policy", "max_capacity", "window_ms", "resume_fraction", "retry_after_cap_ms", "idle_ms", "log_length",
        "priorities", "default_priority", "aging_ms", "tenant_weights", "default_weight", "tenant_caps", "reserve",
        "requests_per_minute", "tokens_per_minute", "input_tokens_per_minute", "output_tokens_per_minute",
        "fast_input_tokens_per_minute", "fast_output_tokens_per_minute"]  # fmt: skip


def test_script_fields_carry_the_base_fields_in_script_units() -> None:
    config = GovernorConfig(
        max_capacity=7, window=1.5, resume_fraction=0.5, retry_after_cap=2.25, idle_expiry=3600, log_length=99
    )
    pairs = _pairs(config)
    assert list(pairs)[: len(BASE)] == BASE == list(protocol.CONFIG)
    assert (pairs["policy"], pairs["max_capacity"], pairs["window_ms"]) == ("adaptive", "7", "1500")
    assert (pairs["resume_fraction"], pairs["retry_after_cap_ms"]) == ("0.5", "2250")
    assert (pairs["idle_ms"], pairs["log_length"]) == ("3600000", "99")
    assert config_ms(1.5) == protocol.ms(1.5) == 1500  # ms is still importable from governor.config


def test_script_fields_of_the_adaptive_policy() -> None:
    policy = AdaptivePolicy(pause_count=5, pause_ratio=0.6, increase_successes=2, cut_factor=0.8, probe_interval=0.25)
    pairs = _pairs(GovernorConfig(policy=policy))
    assert list(pairs) == [*BASE, "pause_count", "pause_ratio", "increase_successes", "cut_factor", "probe_ms"]
    assert pairs["policy"] == "adaptive"
    own = {k: pairs[k] for k in list(pairs)[len(BASE) :]}
    assert own == {"pause_count": "5", "pause_ratio": "0.6", "increase_successes": "2", "cut_factor": "0.8",
                   "probe_ms": "250"}  # fmt: skip
    assert own == policy.script_fields()


def test_script_fields_of_the_seed_policy() -> None:
    policy = SeedPolicy(decrease_count=3, decrease_ratio=0.3, ratio_min_attempts=4, decrease_factor=0.25)
    pairs = _pairs(GovernorConfig(policy=policy))
    assert list(pairs) == [
        *BASE, "decrease_count", "decrease_ratio", "ratio_min_attempts", "decrease_factor", "pause_count",
        "increase_successes",
    ]  # fmt: skip
    assert pairs["policy"] == "seed"
    assert (pairs["decrease_count"], pairs["decrease_ratio"], pairs["ratio_min_attempts"]) == ("3", "0.3", "4")
    assert (pairs["decrease_factor"], pairs["pause_count"], pairs["increase_successes"]) == ("0.25", "4", "3")
    assert "probe_ms" not in pairs and "cut_factor" not in pairs


def test_script_fields_of_the_fixed_policy_are_the_base_alone() -> None:
    pairs = _pairs(GovernorConfig(policy="fixed"))
    assert list(pairs) == BASE and pairs["policy"] == "fixed"


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_stored_value_is_of_its_protocol_kind_and_reads_back(name: str) -> None:
    """What a config sends is what the Lua accepts (the kinds of
    policies.fields()), and a stored config gives the policy back."""
    kinds = policies.fields()["config"]
    pairs = _pairs(GovernorConfig(policy=name))
    cls = REGISTRY[name]
    assert list(pairs) == [*protocol.CONFIG, *(field for field, _ in cls.stored.values())]
    for field, raw in pairs.items():
        kind = kinds[field]
        if kind.type == "str":
            assert not kind.values or raw in kind.values, (field, raw)
            continue
        value = float(raw)
        assert kind.low <= value <= kind.high, (field, raw, kind)
        if kind.type == "int":
            assert raw.isdigit(), (field, raw)
    assert cls.from_stored(pairs) == cls()
    custom = SeedPolicy(decrease_ratio=0.35, decrease_factor=0.75, pause_count=6)
    assert SeedPolicy.from_stored(_pairs(GovernorConfig(policy=custom))) == custom
    adaptive = AdaptivePolicy(cut_factor=0.8, probe_interval=2.5)
    assert AdaptivePolicy.from_stored(_pairs(GovernorConfig(policy=adaptive))) == adaptive


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


# -- a second client's config -----------------------------------------------------------------


def test_a_config_that_differs_from_the_stored_one_is_said_once_with_the_command_that_changes_it(
    redis_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first client stores its config; a later one with another
    max_capacity gets the stored one, and a warning, once, naming the field
    and the command that changes it; that command, run, makes the warning
    go (and a client that asks for nothing in particular is told nothing)."""
    from click.testing import CliRunner

    from governor import Governor
    from governor.cli import main

    first = Governor.from_url(redis_url, name, GovernorConfig(max_capacity=8))
    first.status()
    caplog.set_level(logging.WARNING, logger="governor")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "governor" and "differs from" in r.getMessage()]

    second = Governor.from_url(redis_url, name, GovernorConfig(max_capacity=64, lease_ttl=20))
    assert second.status().max_capacity == 8  # the stored config rules
    with second.acquire(timeout=5):
        pass
    told = warnings()
    assert len(told) == 1, told  # once, not at every call
    assert "max_capacity 64 here, 8 stored" in told[0]
    assert "lease_ttl" not in told[0]  # each client's own
    command = re.search(r"`governor -n \S+ (set-max \d+)`", told[0])
    assert command is not None, told[0]

    for plain in (
        Governor.from_url(redis_url, name),
        Governor.from_url(redis_url, name, GovernorConfig(max_capacity=8)),
    ):
        plain.status()
        plain.close()
    assert len(warnings()) == 1  # no config, or the stored one: nothing to say

    result = CliRunner().invoke(main, ["--url", redis_url, "--name", name, *command.group(1).split()])
    assert result.exit_code == 0, result.output
    third = Governor.from_url(redis_url, name, GovernorConfig(max_capacity=64))
    assert third.status().max_capacity == 64
    assert len(warnings()) == 1  # the command helped
    for gov in (first, second, third):
        gov.close()
