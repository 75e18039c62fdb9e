"""The key schema: one hash tag per governor, a schema version, documented keys."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from governor import SCHEMA_VERSION, ConfigError, governor_keys
from governor.protocol import KEY_NAMES, KEYS, GovernorKeys, name_from_state_key


def test_every_key_shares_the_hash_tag_and_so_one_cluster_slot() -> None:
    keys = governor_keys("openai/gpt-4o@team-a")
    slots = {key_slot(k.encode()) for k in keys.keys}
    assert len(slots) == 1
    assert all(k.startswith(f"governor:v{SCHEMA_VERSION}:{{openai/gpt-4o@team-a}}:") for k in keys.keys)
    assert keys.channel.endswith(":wake") and keys.channel not in keys.keys


def test_keys_are_in_the_order_the_scripts_bind_them() -> None:
    keys = governor_keys("x")
    suffixes = [k.rsplit(":", 1)[1] for k in keys.keys]
    assert suffixes == [
        "state", "config", "policy", "leases", "holders", "queue", "waiters", "attempts", "limited", "events",
        "aging", "shares", "held", "parked", "spend",
    ]  # fmt: skip
    assert tuple(suffixes) == KEY_NAMES == tuple(name for name, _ in KEYS)
    assert keys.keys == tuple(getattr(keys, name) for name in KEY_NAMES)
    assert GovernorKeys.TYPES == (
        "hash", "hash", "hash", "zset", "hash", "zset", "zset", "zset", "zset", "stream", "zset", "zset", "hash",
        "zset", "hash",
    )  # fmt: skip
    assert len(set(keys.keys)) == 15


def test_the_schema_version_is_three_and_in_every_key() -> None:
    assert SCHEMA_VERSION == 3
    keys = governor_keys("x")
    assert all(k.startswith("governor:v3:{x}:") for k in (*keys.keys, keys.channel))
    assert keys.channel == "governor:v3:{x}:wake"


def test_prefix_is_configurable_and_state_keys_parse_back() -> None:
    keys = governor_keys("anthropic", prefix="team1")
    assert keys.state == "team1:v3:{anthropic}:state"
    assert keys.config == "team1:v3:{anthropic}:config" and keys.policy == "team1:v3:{anthropic}:policy"
    assert name_from_state_key(keys.state, prefix="team1") == "anthropic"
    assert name_from_state_key(governor_keys("a/b:c").state) == "a/b:c"
    assert name_from_state_key("governor:v3:{anthropic}:leases") is None
    assert name_from_state_key("governor:v3:{anthropic}:config") is None
    assert name_from_state_key("governor:v1:{anthropic}:state") is None  # another schema's layout


@pytest.mark.parametrize("name", ["", "a b", "a{b}", "tab\there", "x" * 201, "ünïcode"])
def test_names_that_would_break_keys_or_redis_cli_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="governor name"):
        governor_keys(name)
