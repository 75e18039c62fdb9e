"""The Lua of lua/ against governor/protocol.py and governor/policies.py: the
library names no key, reply kind, status field, holder record layout, wake
word, outcome or policy that the Python side does not, and the other way
round. Each static check is backed where it can be by a real call (on
every backend) whose reply or stored value the Python side parses."""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig, protocol
from governor.budgets import Tokens
from governor.core import Granted, Queued, new_id, text
from governor.policies import REGISTRY
from governor.protocol import (
    KEY_NAMES,
    KEYS,
    REPLIES,
    SENTINEL,
    STATUS_FIELDS,
    WAKE_CONFIG,
    WAKE_RETRY,
    WAKE_TTL,
    HolderRecord,
    Outcome,
    Wake,
    ms,
)
from governor.scripts import COMMON as COMMON_NAME
from governor.scripts import (
    FRAGMENTS,
    OPERATIONS,
    defined,
    defines_line,
    field_table,
    function_name,
    parts,
    used,
    uses_line,
)

from .conftest import FakeClock

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"
MakeGov = Callable[..., Governor]


def code(path: Path) -> str:
    """A Lua file without its comments."""
    lua = re.sub(r"--\[\[.*?\]\]", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.sub(r"--[^\n]*", "", lua)


def every_file() -> list[Path]:
    return sorted(LUA.rglob("*.lua"))


COMMON = code(LUA / "lib" / "common.lua")
#: the whole library's fragments, common first, in the library's order
LIBRARY = "\n".join(code(LUA / "lib" / f"{name}.lua") for name in (COMMON_NAME, *FRAGMENTS))

# -- keys ----------------------------------------------------------------------------------


def test_the_lua_binds_every_key_of_the_generated_blueprint() -> None:
    """KEY_NAMES and TYPES are generated from governor.protocol.KEYS; every
    loop over the keys (deriving them, check_types, the expiry push) covers all."""
    generated = field_table()
    assert f"local KEY_NAMES = {{{', '.join(repr(n) for n in KEY_NAMES)}}}" in generated
    assert "KEY_NAMES = {" not in LIBRARY and "TYPES = {" not in LIBRARY
    # (the expiry push leaves the spend key alone: it lives until its longest window ends)
    loops = re.findall(
        r"for i = 1, ([^ ]+) do\s+"
        r"(?:list\[|check_type\(|(?:if KEY_NAMES\[i\] ~= 'spend' then )?redis\.call\('PEXPIRE')",
        LIBRARY,
    )
    assert loops == ["#KEY_NAMES"] * 3, loops


def test_every_key_the_lua_names_is_a_protocol_key() -> None:
    used: dict[str, set[str]] = {}
    for path in every_file():
        for name in re.findall(r"(?<![\w.])KEY\.(\w+)", code(path)):
            used.setdefault(name, set()).add(path.name)
    unknown = {name: sorted(files) for name, files in used.items() if name not in KEY_NAMES}
    assert not unknown, f"keys the Lua names that governor.protocol.KEY_NAMES does not: {unknown}"
    assert set(used) >= set(KEY_NAMES) - {"config", "policy"}  # those two are reached as K[hash] too
    # KEYS[i] by number only below the count of keys
    for path in every_file():
        for index in re.findall(r"KEYS\[(\d+)\]", code(path)):
            assert 1 <= int(index) <= len(KEYS), (path.name, index)


def test_keys_are_named_never_numbered() -> None:
    """guard(KEY.waiters, KEY.holders): no Lua reaches a key by its position."""
    guarded = 0
    for path in every_file():
        source = code(path)
        assert not re.findall(r"KEYS\[\d+\]", source), path.name
        for function, args in re.findall(r"\b(guard|guard_grant)\(((?:[^()]|\([^()]*\))*)\)", source):
            names = [a.strip() for a in args.split(",")][1 if function == "guard_grant" else 0 :]
            if names in (["..."], ["unpack(keys)"]):
                continue  # the definitions
            assert all(re.fullmatch(r"KEY\.\w+", n) for n in names), (path.name, args)
            guarded += 1
    assert guarded >= 8


def _defined(source: str) -> set[str]:
    """The names a fragment defines at its top level (its scope's)."""
    return set(defined(source))


def _needed(source: str, before: tuple[str, ...]) -> list[str]:
    """The fragments among ``before`` whose names ``source`` uses, in order."""
    source = re.sub(r"'(?:[^'\\]|\\.)*'", "''", source)
    words = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\b", source))
    return [f for f in before if words & _defined(code(LUA / "lib" / f"{f}.lua"))]


def _uses_line(path: Path) -> list[str]:
    return list(uses_line(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_each_fragment_uses_only_earlier_ones_and_says_which(fragment: str) -> None:
    """The library's order is right: a fragment uses only names defined
    above it (common and the fragments before it), and its Uses line names
    exactly those it uses."""
    order = (COMMON_NAME, *FRAGMENTS)
    path = LUA / "lib" / f"{fragment}.lua"
    later = order[order.index(fragment) + 1 :]
    assert not _needed(code(path), later), f"{fragment} uses a later fragment: reorder governor.scripts.FRAGMENTS"
    assert _uses_line(path) == _needed(code(path), order[: order.index(fragment)])


def test_no_two_library_files_define_one_name() -> None:
    """The fragments are one chunk: a name defined again further down
    shadows the first for every file below it (an operation would call
    another function than the one its fragment meant)."""
    files = (COMMON_NAME, *FRAGMENTS)
    seen: dict[str, str] = {}
    for name in files:
        for known in _defined(code(LUA / "lib" / f"{name}.lua")):
            assert known not in seen, f"{known} is defined by lib/{seen[known]}.lua and lib/{name}.lua"
            seen[known] = name


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_operations_uses_line_names_what_it_uses(operation: str) -> None:
    path = LUA / f"{operation}.lua"
    assert _uses_line(path) == _needed(code(path), (COMMON_NAME, *FRAGMENTS))


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_each_fragments_defines_line_names_what_it_defines_for_the_others(fragment: str) -> None:
    """A fragment's "Defines:" line names names of its own scope only (what
    the fragment's table returns), and every one of them another file uses
    (a name it keeps to itself may be left off)."""
    path = LUA / "lib" / f"{fragment}.lua"
    text = path.read_text(encoding="utf-8")
    declared, own = defines_line(text), defined(text)
    assert len(set(declared)) == len(declared), f"lib/{fragment}.lua's Defines line names a name twice"
    assert not [n for n in declared if n not in own], (
        f"lib/{fragment}.lua's Defines line names what it does not define: drop them, or define them"
    )
    files = [LUA / "lib" / f"{name}.lua" for name in FRAGMENTS] + [LUA / f"{name}.lua" for name in OPERATIONS]
    users = [other for other in files if other != path and fragment in uses_line(other.read_text(encoding="utf-8"))]
    wanted = {name for other in users for name in used(other.read_text(encoding="utf-8")) if name in own}
    assert not sorted(wanted - set(declared)), (
        f"other files use these names of lib/{fragment}.lua, which its Defines line does not name: add them"
    )


def test_a_defines_line_is_names_and_a_full_stop() -> None:
    assert defines_line("--[[ x\nDefines: a, b,\nc.\nProse. ]]") == ("a", "b", "c")
    assert defines_line("Defines: nothing.\n") == ()
    with pytest.raises(ValueError, match="Lua names only"):
        defines_line("Defines: load (every call's read).\n")
    with pytest.raises(ValueError, match="Defines"):
        defines_line("Uses lib/common.lua.\n")


def test_the_sentinel_is_the_protocols() -> None:
    assert re.findall(r"local SENTINEL = '([^']*)'", COMMON) == [SENTINEL]


# -- replies -------------------------------------------------------------------------------


def _reply_helpers() -> dict[str, str]:
    """Fragment functions that build a reply: name -> the kind they reply."""
    helpers: dict[str, str] = {}
    for path in sorted((LUA / "lib").glob("*.lua")):
        source = code(path)
        for match in re.finditer(r"\{\s*SCHEMA,\s*'(\w+)'", source):
            (function,) = re.findall(r"local function (\w+)\(", source[: match.start()])[-1:]
            helpers[function] = match.group(1)
    return helpers


def test_the_reply_helpers_are_the_missing_and_status_replies() -> None:
    assert _reply_helpers() == {"missing_reply": "missing", "status_reply": "status"}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_reply_kind_an_operation_returns_is_the_protocols(operation: str) -> None:
    source = code(LUA / f"{operation}.lua")
    kinds = set(re.findall(r"\{\s*SCHEMA,\s*'(\w+)'", source))
    kinds |= {kind for helper, kind in _reply_helpers().items() if re.search(rf"\b{helper}\(", source)}
    assert kinds == set(REPLIES[operation]), f"{operation}.lua replies {sorted(kinds)}"


def test_every_operation_has_its_replies() -> None:
    assert set(REPLIES) == set(OPERATIONS)
    assert all(len(set(kinds)) == len(kinds) for kinds in REPLIES.values())


def test_a_real_status_reply_has_the_status_fields_in_order(make_gov: MakeGov, sync_client: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=3), clock=FakeClock())
    status = gov.status()  # creates the governor, loads the library
    keys = gov.keys.script_keys
    reply = sync_client.fcall(function_name("status"), len(keys), *keys, gov._core.now_arg(), gov.keys.channel)
    assert int(text(reply[0])) == protocol.SCHEMA_VERSION and text(reply[1]) == "status"
    assert tuple(text(name) for name in reply[2::2]) == STATUS_FIELDS
    values = dict(zip((text(n) for n in reply[2::2]), (text(v) for v in reply[3::2]), strict=True))
    assert values["max_capacity"] == "3" and values["policy"] == "adaptive" and values["blocked"] == ""
    assert status.max_capacity == 3 and status.pause_reason == "" and status.blocked == ""


def test_a_call_passes_the_state_key_and_the_library_derives_the_others(make_gov: MakeGov, sync_client: Any) -> None:
    """One key per call on a standalone Redis (each key passed costs the
    call): the keys the library writes are exactly the protocol's names for
    the governor. Every key in order is accepted too (a cluster's calls); any
    other key list is refused before anything is written."""
    gov = make_gov(GovernorConfig(max_capacity=3), clock=FakeClock())
    assert gov.keys.script_keys == (gov.keys.state,)
    lease = gov.acquire()
    gov.report(protocol.Outcome.RATE_LIMITED, lease=lease, release=True)  # writes the window, the log
    written = {text(k) for k in sync_client.keys(f"*{{{gov.name}}}*")}
    assert written and written <= set(gov.keys.keys), written - set(gov.keys.keys)
    args = (gov._core.now_arg(), gov.keys.channel)
    for keys in (gov.keys.script_keys, gov.keys.keys):
        reply = sync_client.fcall(function_name("status"), len(keys), *keys, *args)
        assert text(reply[1]) == "status"
    before = {key: sync_client.dump(key) for key in gov.keys.keys}
    swapped = (gov.keys.state, gov.keys.policy, gov.keys.config, *gov.keys.keys[3:])
    refused = {
        (gov.keys.leases,): "the first key must be the governor's state key",
        (gov.keys.state, gov.keys.config): "a function takes the governor's state key",
        swapped: "key 2 must be",
    }
    for keys, message in refused.items():
        with pytest.raises(redis.exceptions.ResponseError, match=f"GOVERNOR_BADARG {message}"):
            sync_client.fcall(
                function_name("acquire"), len(keys), *keys, *gov._core.acquire("x", gov._core.ask("t"), True).args
            )
    assert {key: sync_client.dump(key) for key in gov.keys.keys} == before


# -- the holder record ---------------------------------------------------------------------


def test_the_holder_record_format_is_the_protocols() -> None:
    admission = code(LUA / "lib" / "records.lua")
    (params, output, body) = re.findall(
        r"local function record_format\(([^)]*)\)\s*(local output = .*?)\s*return (.*?)\nend",
        admission,
        re.S,
    )[0]
    params_list = [p.strip() for p in params.split(",")]
    fields = [f.name for f in HolderRecord.__dataclass_fields__.values()]
    # the tokens are the record's input, output and tier (the output followed by ",tier" when one is said)
    expanded = [q for p in params_list for q in (("input", "output", "tier") if p == "tokens" else (p,))]
    assert sorted(p + ("_ms" if p in ("ttl", "since") else "") for p in expanded) == sorted(fields)
    assert "output = output .. ',' .. tokens.tier" in output, output
    # the parameters in that order, '|' between them: seven integers formatted, then the tenant and the holder
    parts = [part.strip() for part in body.replace("\n", " ").split("..")]
    assert parts[1::2] == ["'|'"] * 8, parts
    values = parts[0::2]
    # the fence as the digits its caller made once; each other integer as its digits: int() or dec() of the
    # parameter (the time: NOW_S, NOW's digits, when it is NOW)
    assert values[0] == "fence", values
    assert values[4] == "output", values
    integer = re.compile(r"^(?:\((\w+) == NOW and NOW_S or )?(?:int|dec)\(([\w.]+)\)\)?$")
    formatted = [integer.match(v) for i, v in enumerate(values[1:7]) if i != 3]
    assert all(m and m.group(1) in (None, m.group(2)) for m in formatted), values
    named = ["fence"] + [m.group(2) for m in formatted if m] + values[7:]
    assert named == ["fence", "ttl", "since", "tokens.input", "level", "rank", "tenant", "holder"], values
    assert values[7:] == ["tenant", "holder"]
    standard, tiered = re.findall(r"string\.match\(raw, '([^']*)'\)", admission)
    # seven numbers, the tenant (no '|'), then the holder (may hold '|'); a record of a tier has
    # ",tier" after its output, matched by the second pattern alone
    assert standard == r"^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$"
    assert tiered == r"^(%d+)|(%d+)|(%d+)|(%d+)|(%d+),([%l%d_]+)|(%d+)|(%d+)|([^|]*)|(.*)$"
    (names,) = re.findall(
        r"(fence, ttl, since, input, output, tier, level, rank, tenant, holder) =\s+string\.match", admission
    )
    assert [n.strip() for n in names.split(",")] == expanded


def test_a_record_written_by_a_real_acquire_parses(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock()
    gov = make_gov(GovernorConfig(max_capacity=1, lease_ttl=7.5), clock=clock)
    core = gov._core
    label = "host-1/agent 7|with a pipe"
    lease_id, waiter_id = new_id(), new_id()
    granted = gov._execute(
        core.acquire(lease_id, core.ask(label, tokens=Tokens(1200, 300), priority="batch", tenant="team-a"), wait=False)
    )
    assert isinstance(granted, Granted)
    raw = text(sync_client.hget(gov.keys.holders, lease_id))
    record = HolderRecord.parse(raw)
    assert record == HolderRecord(granted.fence, 7500, ms(clock.now), 1200, 300, 1, 2, "team-a", label)
    assert record is not None and record.format() == raw
    clock.advance(1)
    queued = gov._execute(core.acquire(waiter_id, core.ask("waiter"), wait=True))
    assert isinstance(queued, Queued)
    waiting = HolderRecord.parse(text(sync_client.hget(gov.keys.holders, waiter_id)))
    assert waiting == HolderRecord(0, 7500, ms(clock.now), 0, 0, 0, 1, "default", "waiter")  # fence 0: not granted yet
    clock.advance(1)
    assert gov._execute(core.release(lease_id)) is True  # grants the waiter
    promoted = HolderRecord.parse(text(sync_client.hget(gov.keys.holders, waiter_id)))
    assert promoted is not None and promoted.fence > granted.fence
    assert (promoted.ttl_ms, promoted.since_ms, promoted.input, promoted.holder) == (7500, ms(clock.now), 0, "waiter")
    # the sentinels: never a record, never live
    assert text(sync_client.hget(gov.keys.holders, SENTINEL)) == "" and HolderRecord.parse("") is None
    assert sync_client.zscore(gov.keys.leases, SENTINEL) == 0


# -- wake messages -------------------------------------------------------------------------


def _published() -> list[str]:
    """The message expressions of every PUBLISH in the Lua."""
    out = []
    for path in every_file():
        out += re.findall(r"redis\.call\('PUBLISH', CHANNEL, ([^\n]*)\)", code(path))
    return out


def test_the_wake_words_are_the_protocols() -> None:
    messages = _published()
    words = {word for message in messages for word in re.findall(r"'([^']*)'", message)}
    assert words == {" " + WAKE_RETRY, " " + WAKE_CONFIG, " " + WAKE_TTL, " "}, words  # ' ' joins the grants
    assert any(m.startswith("STATE.epoch .. ' @' .. int(") for m in messages), messages
    assert "STATE.epoch .. ' ~' .. int(STATE.ttl_max)" in messages
    assert "STATE.epoch .. ' !config'" in messages
    assert "epoch" in messages  # a new state: the epoch alone
    assert any("table.concat(words, ' ')" in m for m in messages)  # grants: id:fence words


def _next_wake(pubsub: Any, timeout: float = 5.0) -> Wake:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message and text(message["type"]) == "message":
            return Wake.parse(text(message["data"]))
    raise AssertionError("no wake message")


def test_real_wake_messages_parse(make_gov: MakeGov, sync_client: Any) -> None:
    clock = FakeClock()
    gov = make_gov(GovernorConfig(max_capacity=1, restart_hold=False), clock=clock)
    core = gov._core
    holder, waiter = new_id(), new_id()
    assert isinstance(gov._execute(core.acquire(holder, core.ask("h"), wait=False)), Granted)
    epoch = gov.status().epoch
    assert isinstance(gov._execute(core.acquire(waiter, core.ask("w"), wait=True)), Queued)
    pubsub = sync_client.pubsub()
    try:
        pubsub.subscribe(gov.keys.channel)
        assert text(pubsub.get_message(timeout=5)["type"]) == "subscribe"
        gov._execute(core.report(Outcome.RATE_LIMITED, 2.0, None))  # a hold with a waiter queued: ask again then
        wake = _next_wake(pubsub)
        assert (wake.epoch, wake.retry_in, wake.grants, wake.config_changed) == (epoch, 2.0, {}, False)
        gov._execute(core.set_max_capacity(2))
        wake = _next_wake(pubsub)
        assert (wake.epoch, wake.config_changed, wake.retry_in) == (epoch, True, None)
        wake = _next_wake(pubsub)  # its grant, still held back
        assert (wake.retry_in, wake.grants, wake.config_changed) == (2.0, {}, False)
        clock.advance(3)  # the hold is over
        assert gov._execute(core.release(holder)) is True
        wake = _next_wake(pubsub)
        assert wake.epoch == epoch and set(wake.grants) == {waiter}
        record = HolderRecord.parse(text(sync_client.hget(gov.keys.holders, waiter)))
        assert record is not None and wake.grants[waiter] == record.fence
        longer = make_gov(GovernorConfig(max_capacity=2, lease_ttl=90.0), clock=clock)
        lease = longer.try_acquire()  # a TTL longer than any before (granted or not): told to every listener
        wake = _next_wake(pubsub)
        assert (wake.epoch, wake.ttl_max, wake.grants, wake.retry_in) == (epoch, 90_000, {}, None)
        assert core.parse_wake(f"{epoch} {WAKE_TTL}90000") and core.ttl_max_ms == 90_000  # the client learns it
        if lease is not None:
            lease.release()
        clock.advance(31)  # a third of its TTL later: it announces again, and nothing rose
        longer.try_acquire()  # (granted or denied: either way announced)
        assert longer._core.announced_at == clock.now
        assert pubsub.get_message(timeout=0.2) is None
    finally:
        pubsub.close()


# -- outcomes ------------------------------------------------------------------------------


def test_outcome_values_are_exactly_what_report_accepts() -> None:
    report = code(LUA / "report.lua")
    (check,) = re.findall(r"if (outcome ~= .*?) then\s*fail\('BADARG', 'outcome must be", report, flags=re.S)
    accepted = re.findall(r"outcome ~= '(\w+)'", check)
    # every outcome, and the refusal a profile says is no load signal
    assert sorted(accepted) == sorted([*(o.value for o in Outcome), protocol.BACKGROUND_REFUSAL])
    assert len(accepted) == len(Outcome) + 1


def test_every_outcome_is_recorded_and_another_refused(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=4), clock=FakeClock())
    core = gov._core
    for outcome in Outcome:
        assert gov._execute(core.report(outcome, None, None)) is True, outcome
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited, status.quota_exhausted) == (3, 1, 1)
    call = core.report(Outcome.SUCCESS, None, None)
    with pytest.raises(protocol.ConfigError, match="outcome must be s, r, e, q or b, got x"):
        gov._connection.run(type(call)(call.script, (*call.args[:2], "x", *call.args[3:]), call.parse))


# -- policies ------------------------------------------------------------------------------


def _lua_policies() -> dict[str, dict[str, list[str]]]:
    source = "\n".join(code(LUA / "lib" / f"{name}.lua") for name in ("policy", "adaptive"))
    out: dict[str, dict[str, list[str]]] = {}
    for name, entry in re.findall(r"POLICIES\.(\w+) = \{(.*?)\n {0,2}\}", source, flags=re.S):
        lists = {
            key: re.findall(r"'(\w+)'", body)
            for key, body in re.findall(r"^ {2,4}(config|state|later) = \{([^}]*)\}", entry, flags=re.M)
        }
        functions = set(re.findall(r"^ {2,4}(\w+) = function", entry, flags=re.M))
        allowed = {
            "reset",
            "limited",
            "success",
            "new_max",
            "no_news",  # growth by time while callers wait: a policy may have none
            "quiet",  # a success that changes nothing but the streak, told before the rest is read
            "background",  # a refusal that is no load signal (others read it as a refusal)
        }
        assert {"reset", "limited", "success", "new_max"} <= functions <= allowed, (name, functions)
        out[name] = lists
    return out


def test_the_lua_policies_are_the_registry() -> None:
    lua = _lua_policies()
    assert set(lua) == set(REGISTRY)
    for name, cls in REGISTRY.items():
        assert lua[name]["config"] == [field for field, _ in cls.stored.values()], name
        own_state = [field for field in cls.state if field not in protocol.POLICY_STATE]
        assert lua[name]["state"] + lua[name].get("later", []) == own_state, name  # later: absent as 0


def test_every_policy_round_trips_through_a_real_init(make_gov: MakeGov, sync_client: Any) -> None:
    """What init stores for each policy is exactly the config hash the
    protocol describes: the base fields and the policy's own, nothing else;
    the policy hash holds streak and the policy's own state."""
    for name, cls in REGISTRY.items():
        gov = make_gov(GovernorConfig(policy=name), clock=FakeClock(), governor_name=f"proto-{name}-{new_id()[:8]}")
        assert gov.status().policy == name
        stored = {text(k): text(v) for k, v in sync_client.hgetall(gov.keys.config).items()}
        assert list(stored) and set(stored) == set(protocol.CONFIG) | {f for f, _ in cls.stored.values()}
        learnt = {text(k) for k in sync_client.hgetall(gov.keys.policy)}
        assert learnt == set(protocol.POLICY_STATE) | set(cls.state), name
        stored_state = {text(k) for k in sync_client.hgetall(gov.keys.state)}
        assert stored_state == set(protocol.STATE) | set(protocol.STATE_ORIGIN)
        sync_client.delete(*gov.keys.keys)


# -- the step-by-step cost breakdown (scripts/report_stages.py) ------------------------------


def _stages() -> Any:
    spec = importlib.util.spec_from_file_location("report_stages", ROOT / "scripts" / "report_stages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("operation", ["acquire", "report", "release"])
def test_every_step_of_the_cost_breakdown_cuts_the_lua_where_it_runs(operation: str, redis_url: str) -> None:
    """The breakdown is cut at the operation's own "-- step:" markers: each
    cut loads and runs on a real Redis (a marker inside a block, or one
    that no longer exists, fails here), the last being the whole operation."""
    stages = _stages()
    assert operation in stages.OPERATIONS
    marked = stages.MARKER.findall((LUA / f"{operation}.lua").read_text())
    assert len(marked) >= 2, f"{operation}.lua marks no steps"
    source, names = stages.cut_library(operation)
    assert len(names) == len(marked) + 2  # the floor, the arguments, then one per marked step
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        gov = stages.governor(client, leases=2)
        client.function_load(source, replace=True)
        calls = stages.calls_of(operation, client, gov)
        for i in range(len(names) - 1):
            assert next(calls)(f"stage{i}") == 0, names[i]
        whole = next(calls)(f"stage{len(names) - 1}")
        assert whole[1] in protocol.REPLIES[operation] and whole[1] != "missing", whole
        gov.close()
        client.delete(*gov.keys.keys)
    finally:
        client.function_delete("governor_stages")
        client.close()


@pytest.mark.parametrize("operation", ["acquire", "release"])
def test_the_hand_over_breakdown_cuts_each_half_and_keeps_its_governor_full(operation: str, redis_url: str) -> None:
    """--queued: each cut of a hand-over half runs on a full governor (the
    whole one granting the head, or queueing the newcomer), and completing
    it leaves the governor as full as before: the rounds count like calls."""
    stages = _stages()
    source, names = stages.cut_library(operation)
    client = redis.Redis.from_url(redis_url)
    try:
        client.function_load(source, replace=True)
        gov = stages.QueuedGovernor(client, depth=3)
        client.function_load(source, replace=True)
        for i in range(len(names)):
            call, complete = gov.call(operation)
            reply = call(f"stage{i}")
            if i < len(names) - 1:
                assert reply == 0, names[i]
            else:
                assert reply[1] == (b"released" if operation == "release" else b"queued"), reply
            complete()
            status = gov.whole(gov.driver.core.status())
            assert (status.in_flight, status.queued) == (3, 3), names[i]
            assert sorted(gov.holders) == sorted(
                m.decode() for m in client.zrange(gov.driver.core.keys.leases, 0, -1) if m != b"~"
            )
        client.delete(*gov.driver.core.keys.keys)
    finally:
        client.function_delete("governor_stages")
        client.close()


def test_the_lua_cost_snippets_load_and_run_on_a_real_redis(redis_url: str) -> None:
    """scripts/lua_costs.py's snippets (the figures the Lua's comments quote)
    load as one library and each runs: a snippet Redis refuses fails here,
    not when someone next prices a step."""
    spec = importlib.util.spec_from_file_location("lua_costs", ROOT / "scripts" / "lua_costs.py")
    assert spec is not None and spec.loader is not None
    costs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(costs)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.function_load(costs.library(2), replace=True)
        for i in range(len(costs.SNIPPETS)):
            assert client.fcall(f"snippet{i}", 0, "3e755cd1edbc40055833f7a0673d6f88") == 1
    finally:
        client.function_delete("lua_costs")
        client.delete("lua_costs:zk", "lua_costs:hk")
        client.close()


def test_int_writes_every_integer_as_its_digits(redis_url: str) -> None:
    """int() (lib/numbers.lua) writes the scores, deadlines and fences the
    hot paths hand Redis: above 9,999 from remembered leading digits and
    pairs of trailing ones. Every integer up to 2^53 comes out as Python
    writes it, the carries and the largest included; below, negative or
    fractional, as string.format('%d') does."""
    body = "\n".join(text for _, text in parts())
    source = (
        f"#!lua name=governor_int_test\n{body}\n"
        "redis.register_function('governor_int_test', function(keys, argv)\n"
        "  call.begin(keys, argv)\n"
        "  local out = {}\n"
        "  for i = 3, #argv do out[#out + 1] = numbers.int(tonumber(argv[i])) end\n"
        "  return out\n"
        "end)\n"
    )
    top = 2**53
    values = [10_000, 10_001, 19_999, 99_999_999, 100_000_000, 1_796_212_788_376, 1_796_212_788_376_017]
    values += [top, top - 1, top - 9_999, top - 10_000, 10**15 + 9_999, 10**15 + 10_000]
    values += [k * 10_000 + low for k in (1, 12_345, 90_071_992_547) for low in (0, 1, 99, 100, 9_900, 9_999)]
    values += [0, 1, 9_999, -1, -10_000, -1_796_212_788_376]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.function_load(source, replace=True)
        # twice: the second time from the remembered leading digits
        for _ in range(2):
            got = client.fcall("governor_int_test", 1, "int-test:{x}:state", "", "", *map(str, values))
            assert got == [str(v) for v in values]
        assert client.fcall("governor_int_test", 1, "int-test:{x}:state", "", "", "12.75", "-3.5") == ["12", "-3"]
    finally:
        client.function_delete("governor_int_test")
        client.close()
