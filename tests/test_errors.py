"""Bad input and broken environments: each has a defined outcome, a clear
error, and corrupts nothing (SPEC §6 errors; DEVELOPERS standards)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from governor import (
    ConfigError,
    Governor,
    GovernorConfig,
    GovernorError,
    GovernorUnavailable,
    Outcome,
    StateError,
    WrongKeyType,
)
from governor.errors import error_from_reply

from .servers import RedisServer, free_port

MakeGov = Callable[..., Governor]


def snapshot(client: Any, gov: Governor) -> dict[str, Any]:
    """Every key of the governor: its type and content."""
    out: dict[str, Any] = {}
    for key in gov.keys.keys:
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "hash":
            out[key] = (kind, client.hgetall(key))
        elif kind == "zset":
            out[key] = (kind, client.zrange(key, 0, -1, withscores=True))
        elif kind == "stream":
            out[key] = (kind, client.xlen(key))
        else:
            out[key] = (kind, client.dump(key))
    return out


ACTIONS: dict[str, Callable[[Governor], Any]] = {
    "try_acquire": lambda gov: gov.try_acquire(),
    "enqueue": lambda gov: gov.acquire(timeout=0.5),
    "report": lambda gov: gov.report(Outcome.RATE_LIMITED),
    "set_max": lambda gov: gov.set_max_capacity(3),
    "probe": lambda gov: gov.probe(),
}


@pytest.mark.parametrize(
    ("which", "action"),
    [
        ("state", "try_acquire"),
        ("leases", "try_acquire"),
        ("holders", "try_acquire"),
        ("waiters", "try_acquire"),
        ("queue", "enqueue"),
        ("attempts", "report"),
        ("limited", "report"),
        ("events", "set_max"),
        ("holders", "probe"),
    ],
)
def test_a_key_of_the_wrong_type_gives_a_clear_error_and_changes_nothing(
    make_gov: MakeGov, sync_client: Any, which: str, action: str
) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    if action == "enqueue":
        gov.acquire(timeout=5)  # full: the next caller must queue
    key = getattr(gov.keys, which)
    sync_client.delete(key)
    sync_client.set(key, "not a governor key")
    before = snapshot(sync_client, gov)
    with pytest.raises(WrongKeyType, match=rf"key {re.escape(key)} is a string, expected a"):
        ACTIONS[action](gov)
    assert snapshot(sync_client, gov) == before
    sync_client.delete(key)


def test_state_of_another_schema_is_refused(make_gov: MakeGov, sync_client: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    gov.status()
    sync_client.hset(gov.keys.state, "schema", 99)
    try:
        with pytest.raises(StateError, match="schema version 99"):
            gov.status()
    finally:
        sync_client.delete(*gov.keys.keys)


def test_malformed_ids_are_refused_by_the_scripts(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    for bad in ["", "has space", "x" * 129, "semi;colon", "new\nline"]:
        with pytest.raises(ConfigError, match="id must be"):
            gov._execute(gov._core.acquire(bad, "h", wait=False))
    assert gov.status().in_flight == 0


def test_a_tampered_config_is_refused_by_the_scripts(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    call = gov._core.reset(with_config=True)
    args = list(call.args)
    args[args.index("max") + 1] = "-5"
    with pytest.raises(ConfigError, match="max must be"):
        gov._execute(type(call)(call.script, tuple(args), call.parse))


def test_unknown_error_codes_are_errors_never_ignored() -> None:
    error = error_from_reply("GOVERNOR_SOMETHINGNEW detail script: abc, on @user_script:1.", "g")
    assert isinstance(error, StateError) and "unknown error reply GOVERNOR_SOMETHINGNEW" in str(error)
    assert isinstance(error_from_reply("no code at all", "g"), StateError)


def test_unreachable_redis_fails_fast_with_governor_unavailable() -> None:
    port = free_port()  # nothing listens there
    gov = Governor.from_url(f"redis://127.0.0.1:{port}/0", "nowhere", GovernorConfig(redis_timeout=1))
    try:
        started = time.monotonic()
        for operation in (gov.status, lambda: gov.acquire(timeout=30), gov.try_acquire):
            with pytest.raises(GovernorUnavailable, match="unreachable"):
                operation()
        assert time.monotonic() - started < 30
    finally:
        gov.close()


def test_a_private_redis_fails_in_bounded_time(private_redis: RedisServer) -> None:
    gov = Governor.from_url(private_redis.url, "hung", GovernorConfig(redis_timeout=0.5))
    try:
        gov.status()
        private_redis.pause()  # SIGSTOP: the connection stays open, nothing answers
        started = time.monotonic()
        with pytest.raises(GovernorUnavailable):
            gov.status()
        assert time.monotonic() - started < 10
    finally:
        private_redis.unpause()
        gov.close()


def test_invalid_urls_and_names_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="invalid Redis URL"):
        Governor.from_url("http://example", "x")
    for bad in ["", "has space", "{tag}", "a" * 201]:
        with pytest.raises(ConfigError, match="governor name"):
            Governor.from_url("redis://127.0.0.1:1/0", bad)


def test_every_error_is_a_governor_error() -> None:
    for cls in (ConfigError, GovernorUnavailable, StateError):
        assert issubclass(cls, GovernorError)
    assert issubclass(ConfigError, ValueError) and issubclass(GovernorUnavailable, ConnectionError)
