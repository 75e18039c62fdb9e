"""Bad input and broken environments: each has a defined outcome, a clear
error, and corrupts nothing."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions

from governor import (
    AcquireTimeout,
    ConfigError,
    Governor,
    GovernorConfig,
    GovernorError,
    GovernorUnavailable,
    Outcome,
    StateError,
    WrongKeyType,
)
from governor.errors import duration, error_from_reply, map_errors
from governor.protocol import governor_keys
from governor.scripts import field_table, function_name, library, library_name, locate, parts, where

from .support.servers import RedisServer, free_port

MakeGov = Callable[..., Governor]
ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"


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
        ("config", "try_acquire"),
        ("config", "report"),
        ("policy", "report"),
        ("policy", "set_max"),
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
            gov._execute(gov._core.acquire(bad, gov._core.ask("h"), wait=False))
    assert gov.status().in_flight == 0


def test_a_tampered_config_is_refused_by_the_scripts(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    call = gov._core.reset(with_config=True)
    args = list(call.args)
    args[args.index("max_capacity") + 1] = "-5"
    with pytest.raises(ConfigError, match="max_capacity must be"):
        gov._execute(type(call)(call.script, tuple(args), call.parse))
    assert gov.status().max_capacity == 2


@pytest.mark.parametrize("bad", ["abc", "-5", "1.5"])
@pytest.mark.parametrize(("field", "outcome"), [("event_seq", Outcome.SUCCESS), ("fence", Outcome.RATE_LIMITED)])
def test_a_stored_value_that_never_recurs_is_checked_at_every_read(
    make_gov: MakeGov, sync_client: Any, field: str, outcome: Outcome, bad: str
) -> None:
    """The fence and the window's sequence number move on at every write, so
    the library checks them without remembering what it checked: a bad
    value stops each report that reads it before it writes, call after call,
    though a good one was read the call before; mended, reports go on."""
    gov = make_gov(GovernorConfig(max_capacity=4, lease_ttl=60.0))
    lease = gov.acquire()
    gov.report(outcome)  # the field read, good (the lease keeps its one outcome for the mended report)
    good = sync_client.hget(gov.keys.state, field)
    sync_client.hset(gov.keys.state, field, bad)
    before = snapshot(sync_client, gov)
    for _ in range(2):
        with pytest.raises(StateError, match=rf"field {field} holds"):
            gov.report(outcome, lease=lease)
        assert snapshot(sync_client, gov) == before
    sync_client.hset(gov.keys.state, field, good)
    gov.report(outcome, lease=lease)
    assert int(sync_client.hget(gov.keys.state, field)) >= int(good)


def test_unknown_error_codes_are_errors_never_ignored() -> None:
    error = error_from_reply("GOVERNOR_SOMETHINGNEW detail script: abc, on @user_function:1.", "g")
    assert isinstance(error, StateError) and "unknown error reply GOVERNOR_SOMETHINGNEW" in str(error)
    assert isinstance(error_from_reply("no code at all", "g"), StateError)


def test_an_error_reply_keeps_its_detail_without_the_redis_suffix() -> None:
    suffix = f" script: {function_name('acquire')}, on @user_function:4242."
    error = error_from_reply("GOVERNOR_BADARG id must be 1-128 characters" + suffix, "g")
    assert isinstance(error, ConfigError)
    assert str(error) == "governor 'g': invalid argument: id must be 1-128 characters"


# -- a fault in the library names the Lua file and line ------------------------------------


def test_where_names_the_file_and_line_of_every_library_line() -> None:
    """Every line of the library (as FUNCTION LOAD numbers them: the "#!lua"
    line is 1) is named as the file and line it comes from, and every line
    of every file is named exactly once."""
    lines = library().split("\n")
    assert lines[0].startswith("#!lua name=")
    files = {name: text.split("\n") for name, text in parts()}
    assert "(generated)" in files and files["(generated)"] == field_table().split("\n")
    named: dict[str, set[int]] = {name: set() for name in files}
    for number, line in enumerate(lines[1:], start=2):
        place = where(number)
        name, _, at = place.rpartition(":")
        if name not in files:  # the registrations after the parts
            assert place == f"library line {number}", place
            assert line.startswith(("redis.register_function{", "  callback = ", "local begin = ")) or line == "", line
            continue
        index = int(at)
        if name.startswith("lua/") and not name.startswith("lua/lib/"):
            op = Path(name).stem
            body = (ROOT / name).read_text().split("\n")
            if not 1 <= index <= len(body):  # the wrapping "OPS.<op> = (function() ..." and its "end end)()"
                assert line.startswith(f"OPS.{op} = (function() ") or line in ("end end)()", ""), (place, line)
                continue
            assert line == body[index - 1], (place, line)
        else:
            assert line == files[name][index - 1], (place, line)
        assert index not in named[name], f"{place} named twice"
        named[name].add(index)
    for name, text in files.items():
        count = len((ROOT / name).read_text().split("\n")) if name.startswith("lua/") else len(text)
        assert named[name] == set(range(1, count + 1)), f"{name}: lines not named"
    assert where(len(lines) + 100) == f"library line {len(lines) + 100}"


def test_locate_rewrites_every_user_function_line() -> None:
    acquire = _first_line_of("lua/acquire.lua", "local id = arg_id(3, 'id')")
    status = _first_line_of("lua/status.lua", "clock()")
    message = f"ERR user_function:{acquire}: boom script: x, on @user_function:{status}."
    assert locate(message) == f"ERR {where(acquire)}: boom script: x, on @{where(status)}."
    assert where(acquire).startswith("lua/acquire.lua:") and where(status).startswith("lua/status.lua:")
    assert locate("no line here") == "no line here"


def test_map_errors_names_the_lua_file_and_line_of_a_library_fault() -> None:
    line = _first_line_of("lua/lib/records.lua", "local function record_format(")
    text = f"ERR user_function:{line}: attempt to compare nil with number script: f, on @user_function:{line}."
    with pytest.raises(StateError) as caught, map_errors("g", locate):
        raise redis.exceptions.ResponseError(text)
    assert "lua/lib/records.lua:" in str(caught.value) and "user_function" not in str(caught.value)
    body = (LUA / "lib" / "records.lua").read_text().split("\n")
    at = int(str(caught.value).split("lua/lib/records.lua:")[1].split(":")[0])
    assert body[at - 1].startswith("local function record_format(")


def test_a_real_runtime_error_in_the_library_names_the_lua_file_and_line(scratch_redis_url: str) -> None:
    """A copy of the library, loaded under another name with one line of
    lua/status.lua made to fail (in memory: lua/ is untouched), as Redis
    reports it: the error names lua/status.lua and that line."""
    source = library()
    lines = source.split("\n")
    number = _first_line_of("lua/status.lua", "clock()")
    assert lines[number - 1] == "clock()"
    lines[number - 1] = "clock() local broken = nil; broken = broken + 1"
    copy = "\n".join(lines).replace(library_name(), "governor_faulty_copy")
    client = redis.Redis.from_url(scratch_redis_url, decode_responses=True)
    try:
        client.function_load(copy, replace=True)
        keys = governor_keys("faulty-copy").script_keys
        with pytest.raises(StateError) as caught, map_errors("faulty-copy", locate):
            client.fcall(function_name("status").replace(library_name(), "governor_faulty_copy"), len(keys),
                         *keys, "", "chan")  # fmt: skip
        status_line = (LUA / "status.lua").read_text().split("\n").index("clock()") + 1
        assert f"lua/status.lua:{status_line}" in str(caught.value), str(caught.value)
        assert "arithmetic" in str(caught.value) and "user_function" not in str(caught.value)
    finally:
        client.function_delete("governor_faulty_copy")
        client.close()


def test_a_governor_names_the_lua_file_and_line_of_a_library_fault(scratch_redis_url: str) -> None:
    """The governor's own calls locate a fault: the library is replaced, under
    its own name, by a copy whose lua/status.lua fails at one line."""
    lines = library().split("\n")
    number = _first_line_of("lua/status.lua", "clock()")
    lines[number - 1] = "clock() local broken = nil; broken = broken + 1"
    client = redis.Redis.from_url(scratch_redis_url, decode_responses=True)
    gov = Governor.from_url(scratch_redis_url, "faulty-library")
    try:
        client.function_load("\n".join(lines), replace=True)
        with pytest.raises(StateError) as caught:
            gov.status()
        status_line = (LUA / "status.lua").read_text().split("\n").index("clock()") + 1
        assert f"lua/status.lua:{status_line}" in str(caught.value), str(caught.value)
        assert "user_function" not in str(caught.value)
    finally:
        gov.close()
        client.function_delete(library_name())
        client.close()


def _first_line_of(file: str, start: str) -> int:
    """The library line number (FUNCTION LOAD's) of the first line of ``file`` starting with ``start``."""
    for number, line in enumerate(library().split("\n"), start=1):
        if line.startswith(start) and where(number).startswith(file + ":"):
            return number
    raise AssertionError(f"{start!r} is not in {file}")


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


def test_durations_in_messages_print_rounded(make_gov: Callable[..., Any]) -> None:
    """A timeout computed from a deadline (gov.call's retry deadline, a
    transport's) is a float like 1.99999746699973: messages round it."""
    assert [duration(s) for s in (1.99999746699973, 0.25, 0.0499999, 59.96, 3600.4)] == [
        "2.0 s",
        "0.2 s",
        "50 ms",
        "60.0 s",
        "3600 s",
    ]
    gov = make_gov(GovernorConfig(max_capacity=1, policy="fixed"))
    held = gov.try_acquire()
    assert held is not None
    with pytest.raises(AcquireTimeout) as caught:
        with gov.acquire(timeout=0.0499999):
            pass
    assert "no lease within 50 ms (at capacity: 1 in flight of 1" in str(caught.value), str(caught.value)
    held.release()
