"""The ``governor`` command against a real Redis.

Each governor is put in a known state through the library, on an injected
clock that starts a known time behind the Redis server's (the CLI reads
with the server's TIME, as the scripts do). Every subcommand is checked in
its human form and with ``--json``; bad input gives one clear line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
from click.testing import CliRunner, Result

from governor import Governor, GovernorConfig, Outcome, views
from governor.cli import main, render
from governor.cli.app import safe_url
from governor.cli.control import COMPARED, compared
from governor.cli.keys import redis_cli_base
from governor.core import Granted, Queued, new_id
from governor.protocol import KEY_NAMES, SCHEMA_VERSION, STATUS_FIELDS, governor_keys

from .conftest import FakeClock, governors, scrape
from .support.servers import RedisServer, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
BEHIND = 10.0
R, S = Outcome.RATE_LIMITED, Outcome.SUCCESS
Run = Callable[..., Result]


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def behind(client: redis.Redis) -> FakeClock:
    """A clock BEHIND s behind the Redis server's: what happened on it is that old
    when the CLI looks (and still inside a 60 s window)."""
    return FakeClock(views.server_time_ms(client) / 1000 - BEHIND)


@pytest.fixture
def make(client: redis.Redis, name: str) -> Iterator[Callable[..., Governor]]:
    yield from governors(client, name)


@pytest.fixture
def run(redis_url: str, name: str) -> Run:
    """Run the CLI in-process; ``url``/``gov`` override the global options."""
    runner = CliRunner()

    def run(*args: str, url: str | None = None, gov: str | None = name) -> Result:
        options = ["--url", url or redis_url, "--timeout", "2"]
        if gov is not None:
            options += ["--name", gov]
        result = runner.invoke(main, [*options, *args], env={"GOVERNOR_REDIS_URL": None, "GOVERNOR_NAME": None})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert "Traceback" not in result.output
        return result

    return run


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def as_json(result: Result) -> Any:
    return json.loads(ok(result))


def refused(result: Result, *phrases: str, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr
    return result.stderr


#: long TTLs: the injected clock moves by whole seconds and nobody refreshes
SLOW = {"lease_ttl": 600.0, "queue_ttl": 600.0, "poll": 1.0, "restart_hold": False}


def take(gov: Governor, label: str, priority: str | None = None, tenant: str | None = None) -> None:
    """A lease granted at once, of this class and tenant."""
    assert isinstance(
        gov._execute(gov._core.acquire(new_id(), gov._core.ask(label, priority=priority, tenant=tenant), wait=False)),
        Granted,
    )


def enqueue(gov: Governor, label: str, priority: str | None = None, tenant: str | None = None) -> None:
    """A waiter queued, of this class and tenant (nobody refreshes it: the TTLs are long)."""
    assert isinstance(
        gov._execute(gov._core.acquire(new_id(), gov._core.ask(label, priority=priority, tenant=tenant), wait=True)),
        Queued,
    )


def shares_state(make: Callable[..., Governor], clock: FakeClock) -> Governor:
    """3 in flight of 3 (interactive team-a, default team-a, batch team-b), 4
    queued: a batch waiter of team-b that aged, then interactive default,
    then two default of team-a (FIFO within a class and tenant)."""
    config = GovernorConfig(
        max_capacity=3, policy="fixed", aging=5.0, tenant_weights={"team-a": 3, "team-b": 1}, **SLOW
    )
    gov = make(config, clock=clock)
    take(gov, "orchestrator/main", "interactive", "team-a")
    take(gov, "host-1/agent-1", None, "team-a")
    take(gov, "host-2/agent-2", "batch", "team-b")
    enqueue(gov, "host-2/agent-7", "batch", "team-b")
    clock.advance(6)  # it waited past the aging: the next script moves it ahead of every class
    enqueue(gov, "host-3/agent-9", "interactive")
    enqueue(gov, "host-1/agent-3", None, "team-a")
    enqueue(gov, "host-1/agent-4", None, "team-a")
    return gov


def known_state(make: Callable[..., Governor], clock: FakeClock) -> Governor:
    """capacity 4 of 8 (seed: two 429s halve), 2 of 3 window attempts rate-limited, 3 in flight."""
    gov = make(GovernorConfig(policy="seed", max_capacity=8, lease_ttl=300), clock=clock)
    for i in range(3):
        assert gov.try_acquire(holder=f"host-{i % 2}/agent-{i}") is not None
    gov.report(R)
    gov.report(R)
    gov.report(S)
    return gov


# -- status and list ---------------------------------------------------------------


def test_status_human_and_json(run: Run, make: Callable[..., Governor], behind: FakeClock, name: str) -> None:
    known_state(make, behind)
    out = ok(run("status"))
    assert f"governor    {name}  (policy seed, schema v{SCHEMA_VERSION})" in out
    assert "blocked     no: new callers are admitted" in out
    assert "capacity    4 / 8" in out
    assert "in flight   3" in out
    assert "window      2 rate-limited of 3 attempts (66.7%)" in out
    assert "not_before  none" in out
    data = as_json(run("status", "--json"))
    assert data["name"] == name
    assert (data["capacity"], data["max_capacity"], data["in_flight"], data["queued"]) == (4, 8, 3, 0)
    assert (data["window_rate_limited"], data["window_attempts"]) == (2, 3)
    assert (data["paused"], data["state"], data["blocked"], data["policy"], data["schema"]) == (
        False,
        "open",
        "",
        "seed",
        SCHEMA_VERSION,
    )
    assert data["pause_reason"] == "" and "reason" not in data
    assert data["rate_limited_share"] == pytest.approx(2 / 3, abs=1e-3)
    # the classes, the aging and the weights, and who is in flight: the defaults
    assert "classes     interactive, default, batch  (highest first; a caller naming none: default)" in out
    assert "aging       30.0s: a waiter of a lower class then goes ahead of every class" in out
    assert "weights     any other tenant 1" in out
    assert (data["priorities"], data["default_priority"], data["aging"]) == (
        ["interactive", "default", "batch"],
        "default",
        30.0,
    )
    assert (data["tenant_weights"], data["default_weight"], data["tenants"]) == ({}, 1, 1)
    assert data["by_class"]["default"] == {"in_flight": 3, "queued": 0, "aged": 0}
    assert data["by_tenant"] == {"default": {"in_flight": 3, "queued": 0, "aged": 0}}
    assert data["counts_complete"] is True


def table_rows(out: str, header: str) -> list[list[str]]:
    """The rows of the table whose header starts with ``header``, each split on whitespace."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or (line.startswith("(") and not line.startswith(views.OTHER)):  # a note after it
            break
        rows.append(line.split())
    return rows


def test_status_per_class_and_tenant(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    shares_state(make, behind)
    out = ok(run("status"))
    assert "weights     team-a=3, team-b=1; any other tenant 1" in out
    assert table_rows(out, "CLASS") == [
        ["interactive", "1", "1", "0"],
        ["default", "1", "2", "0"],
        ["batch", "1", "1", "1"],
    ]
    assert table_rows(out, "TENANT") == [  # the most loaded first
        ["team-a", "3", "2", "2", "0"],
        ["team-b", "1", "1", "1", "1"],
        ["default", "1", "0", "1", "0"],
    ]
    data = as_json(run("status", "--json"))
    assert data["tenant_weights"] == {"team-a": 3, "team-b": 1} and data["aging"] == 5.0
    assert data["by_class"]["batch"] == {"in_flight": 1, "queued": 1, "aged": 1}
    assert set(data["by_tenant"]) == {"team-a", "team-b", "default"}  # (JSON keys are sorted)
    # bounded: the most loaded by name, the others summed
    out = ok(run("status", "--top", "1"))
    assert table_rows(out, "TENANT") == [
        ["team-a", "3", "2", "2", "0"],
        [views.OTHER, "-", "1", "2", "1", "(2", "tenants)"],
    ]
    data = as_json(run("status", "--json", "--top", "1"))
    assert data["by_tenant"] == {
        "team-a": {"in_flight": 2, "queued": 2, "aged": 0},
        views.OTHER: {"in_flight": 1, "queued": 2, "aged": 1},
    }
    assert data["tenants"] == 3


def test_status_shows_why_callers_wait(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    gov = make(GovernorConfig(max_capacity=4, retry_after_cap=600), clock=behind)
    gov.report(R, retry_after=500)  # the hold ends 490 s from now
    out = ok(run("status"))
    assert "HOLDING until" in out
    assert "blocked     holding until the provider's retry-after" in out  # the scripts' words
    data = as_json(run("status", "--json"))
    assert data["state"] == "holding" and data["blocked"].startswith(
        "holding until the provider's retry-after (ends in 4"
    )
    gov.pause("deploy in progress")
    out = ok(run("status"))
    assert "PAUSED by an operator (new callers queue" in out
    assert "blocked     paused: deploy in progress" in out
    data = as_json(run("status", "--json"))
    assert (data["state"], data["blocked"], data["pause_kind"], data["pause_reason"]) == (
        "paused",
        "paused: deploy in progress",
        "operator",
        "deploy in progress",
    )


def test_an_operator_pause_without_a_reason_is_said_once(
    run: Run, make: Callable[..., Governor], behind: FakeClock
) -> None:
    make(GovernorConfig(max_capacity=4), clock=behind).status()
    ok(run("pause", "--duration", "5m"))  # the default reason
    out = ok(run("status"))
    line = next(x for x in out.splitlines() if x.startswith("state"))
    assert "PAUSED by an operator until " in line
    assert out.count("operator") == 1, out  # who paused, said once; the reason says there is none
    assert as_json(run("status", "--json"))["blocked"] == "paused: no reason given"
    ok(run("pause", "--reason", "provider incident"))
    out = ok(run("status"))
    assert "PAUSED by an operator (new callers" in out and "blocked     paused: provider incident" in out


def test_status_warns_when_redis_may_evict_the_governor(run: Run, private_redis: RedisServer, name: str) -> None:
    client = redis.Redis.from_url(private_redis.url)
    gov = Governor(client, name, GovernorConfig(max_capacity=2))
    gov.status()  # creates it
    gov.close()
    assert "WARNING" not in ok(run("status", url=private_redis.url))  # no maxmemory: nothing is evicted
    client.config_set("maxmemory", "1gb")
    client.config_set("maxmemory-policy", "noeviction")
    assert as_json(run("status", "--json", url=private_redis.url))["warnings"] == []
    client.config_set("maxmemory-policy", "volatile-lru")  # the governor's keys carry TTLs: evictable
    out = ok(run("status", url=private_redis.url))
    assert "WARNING: this Redis may evict the governor's keys (maxmemory-policy volatile-lru)" in out
    assert "noeviction" in as_json(run("status", "--json", url=private_redis.url))["warnings"][0]
    client.close()


def test_unknown_governor_is_refused_and_not_created(run: Run, client: redis.Redis, name: str) -> None:
    for command in (["status"], ["leases"], ["queue"], ["events"], ["watch", "--count", "1"]):
        refused(run(*command), f"no governor named {name!r}", "governor list")
    for command in (
        ["set-max", "3"],
        ["pause"],
        ["resume"],
        ["reset"],
        ["configure", "--policy", "seed"],
        ["set-shares", "--weight", "a=2"],
    ):
        refused(run(*command), f"no governor named {name!r}")
    assert views.list_governors(client).count(name) == 0
    assert client.exists(*governor_keys(name).keys) == 0


def test_bad_input(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    refused(run("status", gov=None), "Pass --name NAME", code=2)
    refused(run("status", gov="has space"), "is invalid", code=2)
    refused(run("status", url="http://example"), "invalid Redis URL", code=2)
    make(GovernorConfig(max_capacity=4), clock=behind).status()
    refused(run("set-max", "0"), "0 is not in the range", code=2)
    refused(run("set-max", "-3"), code=2)
    refused(run("set-max", "many"), "'many' is not a valid integer", code=2)
    refused(run("pause", "--duration", "soon"), "is not a duration", code=2)
    refused(run("pause", "--duration", "0"), "must be longer than 0 seconds", code=2)
    refused(run("pause", "--reason", ""), "reason", code=2)
    refused(run("events", "--follow", "--since", "yesterday"), "not a stream entry id", code=2)
    refused(run("events", "--since", "1"), "go with --follow", code=2)
    refused(run("configure", "--policy", "bogus"), "'bogus' is not one of", code=2)
    refused(
        run("configure", "--policy", "fixed", "--cut-factor", "0.5"), "the fixed policy has no --cut-factor", code=2
    )
    refused(run("configure", "--cut-factor", "1.5"), "cut_factor must be between 0 and 1", code=2)  # adaptive's
    refused(run("configure", "--decrease-count", "2"), "the adaptive policy has no --decrease-count", code=2)
    refused(run("configure", "--pause-count", "many"), "'many' is not a valid integer", code=2)


def test_unreachable_redis(run: Run) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for command in (["status"], ["list"], ["leases"], ["set-max", "3"], ["keys"]):
        err = refused(run(*command, url=url), "unreachable", "check the URL", f"(url: {url})")
        assert len(err.strip().splitlines()) == 1


def invoke(*args: str) -> Result:
    """The CLI with exactly these arguments (no global options added, none from the environment)."""
    env = {"GOVERNOR_REDIS_URL": None, "GOVERNOR_NAME": None, "GOVERNOR_PREFIX": None}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def test_global_options_also_after_the_command(
    redis_url: str, make: Callable[..., Governor], behind: FakeClock, name: str
) -> None:
    known_state(make, behind)
    data = json.loads(ok(invoke("status", "--url", redis_url, "-n", name, "--timeout", "2", "--json")))
    assert (data["name"], data["capacity"]) == (name, 4)
    assert json.loads(ok(invoke("--url", redis_url, "--json", "status", "--name", name)))["name"] == name
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    out = ok(invoke("--url", nowhere, "-n", "someone-else", "status", "--url", redis_url, "-n", name))
    assert f"governor    {name}" in out  # given after the command, they win
    assert "no governors at" in ok(invoke("list", "--url", redis_url, "--prefix", "nothing-here"))
    assert "set to 5" in ok(invoke("set-max", "5", "-n", name, "--url", redis_url))
    for command in OPERATOR_COMMANDS:
        help_text = ok(invoke(command, "--help"))
        for option in ("--url", "--prefix", "--timeout"):
            assert option in help_text, (command, option)
        assert "-n, --name" in help_text, command


#: every operator command: arguments it needs, a bad argument, whether it
#: needs the governor to exist, whether it needs Redis to start
OPERATOR_COMMANDS: dict[str, tuple[list[str], list[str], bool, bool]] = {
    "status": ([], ["--bogus"], True, True),
    "list": ([], ["--bogus"], False, True),
    "watch": (["--count", "1", "--interval", "0.01"], ["--interval", "0"], True, True),
    "leases": ([], ["--limit", "0"], True, True),
    "queue": ([], ["--limit", "0"], True, True),
    "events": ([], ["--count", "-1"], True, True),
    "keys": ([], ["--bogus"], False, True),
    "library": ([], ["--bogus"], False, True),
    "set-max": (["3"], ["0"], True, True),
    "pause": ([], ["--duration", "soon"], True, True),
    "resume": ([], ["--bogus"], True, True),
    "reset": ([], ["--bogus"], True, True),
    "configure": (["--policy", "seed"], ["--policy", "bogus"], True, True),
    "set-shares": (["--aging", "off"], ["--weight", "a"], True, True),
    "exporter": (["--port", "0"], ["--port", "-1"], False, False),
    "explain": (["--tenant", "t"], ["--class"], True, True),
    "top": (["--once"], ["--interval", "0"], False, True),
    "proxy": (["--openai", "o"], ["--port", "-1"], False, False),
    "spend": ([], ["--bogus"], True, True),
}


def test_the_exit_status_table_covers_every_command() -> None:
    commands = set(main.list_commands(click.Context(main)))
    assert commands == set(OPERATOR_COMMANDS)


@pytest.mark.parametrize("command", sorted(OPERATOR_COMMANDS))
def test_exit_status_of_every_command(command: str, redis_url: str, name: str) -> None:
    """Usage errors exit 2 (a bad argument, an invalid governor name, before or after
    the command); runtime failures exit 1 (no such governor, Redis unreachable)."""
    needed, bad, needs_governor, needs_redis = OPERATOR_COMMANDS[command]
    where = ["--url", redis_url, "--timeout", "2"]
    refused(invoke(*where, "-n", name, command, *needed, *bad), code=2)
    refused(invoke(*where, "-n", "has space", command, *needed), "is invalid", code=2)
    refused(invoke(*where, command, *needed, "-n", "has space"), "is invalid", code=2)
    if needs_governor:
        refused(invoke(*where, "-n", name, command, *needed), f"no governor named {name!r}", code=1)
    if needs_redis:
        nowhere = f"redis://127.0.0.1:{free_port()}/0"
        refused(invoke("--url", nowhere, "-n", name, command, *needed), "unreachable", code=1)


def test_password_is_never_printed(run: Run) -> None:
    url = f"redis://user:s3cret@127.0.0.1:{free_port()}/0"
    err = refused(run("status", url=url), "unreachable")
    assert "s3cret" not in err and "user:***@" in err
    assert safe_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"


def test_list(run: Run, make: Callable[..., Governor], behind: FakeClock, name: str) -> None:
    known_state(make, behind)
    other = f"{name}-b"
    make(GovernorConfig(max_capacity=2), clock=behind, governor_name=other).pause("maintenance")
    out = ok(run("list", gov=None))
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].split()[:2] == ["NAME", "STATE"]
    assert lines[name].split()[:6] == [name, "open", "4/8", "3", "0", "2/3"]
    assert lines[other].split()[:3] == [other, "paused", "0/2"] and "maintenance" in lines[other]
    data = as_json(run("list", "--json", gov=None))
    found = {g["name"]: g for g in data["governors"]}
    assert found[name]["capacity"] == 4 and found[other]["paused"] is True
    assert not {name, other} & set(data["errors"])
    assert "no governors at" in ok(run("--prefix", "nothing-here", "list", gov=None))


def test_list_reports_a_broken_governor_without_failing(run: Run, client: redis.Redis, name: str) -> None:
    client.hset(governor_keys(name).state, mapping={"schema": "99"})
    try:
        data = as_json(run("list", "--json", gov=None))
        assert "schema version 99" in data["errors"][name]
        out = ok(run("list", gov=None))
        assert any(line.startswith(name) and "error" in line for line in out.splitlines())
    finally:
        client.delete(governor_keys(name).state)  # the session Redis is shared: other tests list it too


# -- watch --------------------------------------------------------------------------


def test_watch_lines_json_and_screen(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    known_state(make, behind)
    lines = ok(run("watch", "--count", "3", "--interval", "0.01", "--lines")).splitlines()
    assert lines[0].split()[:3] == ["TIME", "(UTC)", "STATE"]
    assert len(lines) == 4
    assert all(line.split()[1:6] == ["open", "4/8", "3", "0", "2/3"] for line in lines[1:])
    samples = [
        json.loads(line) for line in ok(run("watch", "--count", "2", "--interval", "0.01", "--json")).splitlines()
    ]
    assert [s["capacity"] for s in samples] == [4, 4]
    screen = ok(run("watch", "--count", "2", "--interval", "0.01", "--screen"))
    assert screen.count("\x1b[H\x1b[J") == 2  # redrawn in place
    assert "capacity   " in screen and "OPEN: 1 free slot(s)" in screen
    assert any(ch in screen for ch in render.SPARK)
    assert "blocked: -" in screen


# -- leases and queue -------------------------------------------------------------------


def test_leases(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    known_state(make, behind)
    out = ok(run("leases"))
    header, *rows = out.split("\n\n")[0].splitlines()
    assert header.split() == ["LEASE", "ID", "HOLDER", "HOST", "CLASS", "TENANT", "AGE", "TTL", "LEFT", "FENCE"]
    assert [row.split()[1] for row in rows] == ["host-0/agent-0", "host-1/agent-1", "host-0/agent-2"]
    assert [row.split()[3:5] for row in rows] == [["default", "default"]] * 3
    assert "3 live lease(s) on 2 host(s): host-0 2, host-1 1" in out
    assert "  by class:  interactive 0, default 3, batch 0" in out and "  by tenant: default 3" in out
    data = as_json(run("leases", "--json"))
    assert data["total"] == 3
    assert [x["host"] for x in data["leases"]] == ["host-0", "host-1", "host-0"]
    assert {(x["priority"], x["tenant"]) for x in data["leases"]} == {("default", "default")}
    for lease in data["leases"]:
        assert BEHIND <= lease["age"] < BEHIND + 10 and 300 - BEHIND - 10 < lease["ttl_left"] <= 300 - BEHIND
        assert lease["live"] is True and lease["ttl"] == 300
    assert data["leases"][0]["fence"] < data["leases"][1]["fence"] < data["leases"][2]["fence"]
    assert "showing 2 of 3" in ok(run("leases", "--limit", "2"))


def test_no_leases_no_queue(run: Run, make: Callable[..., Governor], behind: FakeClock, name: str) -> None:
    make(GovernorConfig(max_capacity=4), clock=behind).status()
    assert f"governor {name!r}: no leases held" in ok(run("leases"))
    assert f"governor {name!r}: nobody is queued" in ok(run("queue"))
    assert as_json(run("queue", "--json"))["waiters"] == []


def test_queue(run: Run, make: Callable[..., Governor], client: redis.Redis) -> None:
    clock = FakeClock(views.server_time_ms(client) / 1000)
    gov = make(GovernorConfig(max_capacity=1, poll=1, queue_ttl=120), clock=clock)
    lease = gov.try_acquire(holder="holder/0")
    assert lease is not None
    done = []
    threads = []
    for i in range(2):

        def wait(label: str = f"worker-{i}/agent-{i}") -> None:
            with gov.acquire(timeout=30, holder=label):
                done.append(label)

        threads.append(threading.Thread(target=wait, daemon=True))
        threads[-1].start()
        wait_until(lambda i=i: gov.status().queued == i + 1, 10, what="queued")
    try:
        out = ok(run("queue"))
        assert "blocked: at capacity: 1 in flight of 1" in out  # the scripts' words
        rows = table_rows(out, "POS")
        assert [row[2:7] for row in rows] == [
            ["worker-0/agent-0", "worker-0", "default", "default", "-"],
            ["worker-1/agent-1", "worker-1", "default", "default", "-"],
        ]
        assert [row[0] for row in rows] == ["1", "2"]  # counted from 1: the first is next
        data = as_json(run("queue", "--json"))
        assert [(w["place"], w["position"]) for w in data["waiters"]] == [(1, 0), (2, 1)]
        assert data["blocked"] == "at capacity: 1 in flight of 1" and data["total"] == 2
        assert [w["holder"] for w in data["waiters"]] == ["worker-0/agent-0", "worker-1/agent-1"]
        assert all(0 <= w["waited"] < 30 and w["live"] for w in data["waiters"])
    finally:
        lease.release()
        for thread in threads:
            thread.join(10)
    assert done == ["worker-0/agent-0", "worker-1/agent-1"]


def test_queue_by_class_and_tenant(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    shares_state(make, behind)
    out = ok(run("queue"))
    rows = table_rows(out, "POS")
    assert [row[2] for row in rows] == ["host-2/agent-7", "host-3/agent-9", "host-1/agent-3", "host-1/agent-4"]
    assert [row[4:7] for row in rows] == [  # the aged batch waiter first, then a higher class first
        ["batch", "team-b", "yes"],
        ["interactive", "default", "-"],
        ["default", "team-a", "-"],
        ["default", "team-a", "-"],
    ]
    assert "4 live waiter(s)" in out
    assert "  by class:  interactive 1, default 2, batch 1 (1 aged)" in out
    assert "  by tenant: team-a 2, default 1, team-b 1 (1 aged)" in out
    assert table_rows(out, "CLASS") == [
        ["interactive", "default", "1", "0"],
        ["default", "team-a", "2", "0"],
        ["batch", "team-b", "1", "1"],
    ]
    data = as_json(run("queue", "--json"))
    first = data["waiters"][0]
    assert (first["priority"], first["tenant"], first["aged"], first["holder"]) == (
        "batch",
        "team-b",
        True,
        "host-2/agent-7",
    )
    assert "ticket" not in first and all(isinstance(w["tag"], int) for w in data["waiters"])
    summary = data["summary"]
    assert summary["by_class"]["batch"] == {"in_flight": 0, "queued": 1, "aged": 1}
    assert summary["by_tenant"]["team-b"] == {"in_flight": 0, "queued": 1, "aged": 1}
    assert {"priority": "batch", "tenant": "team-b", "in_flight": 0, "queued": 1, "aged": 1} in summary[
        "by_class_and_tenant"
    ]
    assert (summary["tenants"], summary["counts_complete"]) == (3, True)
    # the summary counts every waiter, not only those shown; bounded by --top
    out = ok(run("queue", "--limit", "1", "--top", "1"))
    assert len(table_rows(out, "POS")) == 1 and "showing 1 of 4" in out
    assert f"  by tenant: team-a 2, {views.OTHER} 2 (1 aged)" in out
    assert table_rows(out, "CLASS") == [
        ["interactive", views.OTHER, "1", "0"],
        ["default", "team-a", "2", "0"],
        ["batch", views.OTHER, "1", "1"],
    ]
    leases = ok(run("leases"))
    assert "  by class:  interactive 1, default 1, batch 1" in leases
    assert "  by tenant: team-a 2, team-b 1" in leases


# -- events -----------------------------------------------------------------------------


def test_events(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    gov = make(GovernorConfig(policy="seed", max_capacity=8), clock=behind)
    gov.report(R)
    gov.report(R)
    gov.set_max_capacity(6)
    gov.pause("deploy", duration=60)
    lines = ok(run("events")).splitlines()
    assert [line.split()[1] for line in lines] == ["pause", "set_max", "capacity", "create"]
    assert "paused until" in lines[0] and "operator: deploy" in lines[0]
    assert "max_capacity 8 -> 6, capacity 6: operator" in lines[1]
    assert "capacity 8 -> 4: rate-limited: decrease [window: 2 rate-limited of 2 attempts]" in lines[2]
    assert lines[3].startswith(render.when(behind.now))
    data = as_json(run("events", "--json", "--count", "2"))
    assert [e["kind"] for e in data] == ["pause", "set_max"]
    assert data[1]["fields"] == {"from": "8", "to": "6", "capacity_from": "4", "why": "operator"}
    assert (data[0]["capacity"], data[0]["paused"]) == (0, True)
    only = ok(run("events", "--kind", "capacity", "--kind", "create")).splitlines()
    assert [line.split()[1] for line in only] == ["capacity", "create"]


def test_events_of_aging_and_shares(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    gov = shares_state(make, behind)
    (line,) = ok(run("events", "--kind", "age")).splitlines()
    assert "1 waiter(s) aged after 5.0s, first host-2/agent-7: waited aging_ms" in line
    gov.set_shares(tenant_weights={"team-a": 2}, aging=None)
    (line,) = ok(run("events", "--kind", "set_shares")).splitlines()
    assert "tenant weights team-a=3,team-b=1 -> team-a=2, default weight 1, aging 5.0s -> off: operator" in line


def test_events_follow_from_an_id(
    run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock
) -> None:
    gov = make(GovernorConfig(max_capacity=8), clock=behind)
    gov.status()
    start = views.last_event_id(client, gov.keys)
    gov.set_max_capacity(5)
    gov.set_max_capacity(6)
    lines = ok(run("events", "--follow", "--since", start, "--max-events", "2")).splitlines()
    assert [line.split()[1] for line in lines] == ["set_max", "set_max"]
    assert "max_capacity 8 -> 5" in lines[0] and "max_capacity 5 -> 6" in lines[1]
    objects = [
        json.loads(x) for x in ok(run("events", "-f", "--since", start, "--max-events", "1", "--json")).splitlines()
    ]
    assert [o["fields"]["to"] for o in objects] == ["5"]


def test_events_follow_prints_the_backlog_then_new_decisions(
    run: Run, make: Callable[..., Governor], behind: FakeClock
) -> None:
    gov = make(GovernorConfig(max_capacity=8), clock=behind)
    gov.set_max_capacity(5)
    stop = threading.Event()

    def keep_deciding() -> None:  # until the command returns (bounded either way)
        deadline = time.monotonic() + 20
        while not stop.wait(0.05) and time.monotonic() < deadline:
            gov.pause("later")

    writer = threading.Thread(target=keep_deciding, daemon=True)
    writer.start()
    try:
        lines = ok(run("events", "--follow", "--count", "2", "--max-events", "1")).splitlines()
    finally:
        stop.set()
        writer.join(10)
    assert [line.split()[1] for line in lines] == ["create", "set_max", "pause"]  # oldest first, then new


# -- changes --------------------------------------------------------------------------------


def test_set_max(run: Run, make: Callable[..., Governor], behind: FakeClock, name: str) -> None:
    gov = known_state(make, behind)
    out = ok(run("set-max", "3"))
    assert f"governor {name!r}: max_capacity set to 3" in out
    assert "max_capacity  8 -> 3" in out and "capacity      4 -> 3" in out
    assert "streak        1 -> 0" in out  # set-max clears what the policy learnt
    assert "blocked       - -> 'at capacity: 3 in flight of 3'" in out
    assert "now: FULL: 3 in flight of 3" in out and "  blocked: at capacity: 3 in flight of 3" in out
    assert gov.status().max_capacity == 3
    data = as_json(run("set-max", "10", "--json"))
    assert data["changed"]["max_capacity"] == [3, 10] and data["changed"]["capacity"] == [3, 10]
    assert data["after"]["capacity"] == 10 and data["action"] == "max_capacity set to 10"
    assert "nothing changed" in ok(run("set-max", "10"))


def test_pause_resume(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    gov = known_state(make, behind)
    out = ok(run("pause", "--reason", "provider incident", "--duration", "5m"))
    assert "paused for 5m00s" in out
    assert "capacity      4 -> 0" in out and "paused        no -> yes" in out
    assert "pause_reason  - -> 'provider incident'" in out
    assert "blocked       - -> 'paused: provider incident'" in out
    st = gov.status(create=False)
    assert st.paused and st.pause_reason == "provider incident" and st.paused_until == pytest.approx(behind.now + 300)
    out = ok(run("resume"))
    assert "capacity      0 -> 4" in out and "paused        yes -> no" in out
    data = as_json(run("pause", "--json"))
    assert data["after"]["pause_reason"] == "no reason given" and data["after"]["paused_until"] is None
    assert data["changed"]["blocked"] == ["", "paused: no reason given"]
    data = as_json(run("resume", "--json"))
    assert data["changed"]["paused"] == [True, False]
    logged = len(views.read_events(gov.client, gov.keys, 1000))
    out = ok(run("resume"))  # nothing to lift
    assert "nothing changed" in out
    assert len(views.read_events(gov.client, gov.keys, 1000)) == logged  # and the decision log says nothing either


def test_operator_commands_print_only_real_changes(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    """A token bucket refills between the command's two looks: not a change it made."""
    gov = make(GovernorConfig(policy="fixed", max_capacity=40, requests_per_minute=60, lease_ttl=300), clock=behind)
    for _ in range(30):
        assert gov.try_acquire() is not None  # the requests bucket half empty: it refills at 1 a second
    out = ok(run("pause"))
    assert "budgets" not in out and "capacity      40 -> 0" in out
    out = ok(run("resume"))
    assert "budgets" not in out
    assert "nothing changed" in ok(run("resume"))
    assert "budgets" not in as_json(run("set-max", "30", "--json"))["changed"]


def test_reset(run: Run, make: Callable[..., Governor], behind: FakeClock) -> None:
    gov = known_state(make, behind)
    out = ok(run("reset"))
    assert "capacity             4 -> 8" in out
    assert "window_rate_limited  2 -> 0" in out and "window_attempts      3 -> 0" in out
    assert "streak               1 -> 0" in out
    assert gov.status(create=False).capacity == 8
    assert as_json(run("reset", "--json"))["changed"] == {}


def test_compared_fields_are_the_status_reply_s(make: Callable[..., Governor], behind: FakeClock) -> None:
    st = known_state(make, behind).status(create=False)
    values = {f: compared(st, f) for f in COMPARED}  # each one is read from the Status
    assert (values["window_ms"], values["pause_reason"], values["policy"]) == (60000, "", "seed")
    assert set(COMPARED) < set(STATUS_FIELDS)
    assert {"capacity", "max_capacity", "pause_reason", "blocked", "policy", "window_ms", "streak"} <= set(COMPARED)
    assert not {"now", "in_flight", "queued", "fence"} & set(COMPARED)  # traffic moves them


def test_configure(run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock) -> None:
    gov = known_state(make, behind)  # seed, capacity 4 of 8
    ok(run("set-max", "6"))  # the stored config's other fields are kept, an operator's max_capacity too
    before = views.read_config(client, gov.keys)
    out = ok(run("configure", "--policy", "adaptive", "--cut-factor", "0.8"))
    assert "configured: policy adaptive" in out
    changes = [line.split() for line in out.splitlines()]
    assert ["policy", "'seed'", "->", "'adaptive'"] in changes
    assert "  stored config:" in out.splitlines()
    assert ["cut_factor", "-", "->", "0.8"] in changes and ["decrease_count", "2", "->", "-"] in changes
    stored = views.read_config(client, gov.keys)
    assert (stored["policy"], stored["cut_factor"], stored["probe_ms"], stored["pause_ratio"]) == (
        "adaptive",
        "0.8",
        "15000",  # adaptive's defaults for what was not given
        "0.5",
    )
    assert "decrease_count" not in stored
    assert {f: stored[f] for f in ("max_capacity", "window_ms", "resume_fraction", "idle_ms")} == {
        f: before[f] for f in ("max_capacity", "window_ms", "resume_fraction", "idle_ms")
    } and stored["max_capacity"] == "6"
    st = gov.status(create=False)
    # reset with the new config, stored afresh: the adaptive slow start at max(1, 6 // 4)
    assert (st.policy, st.capacity, st.window_attempts) == ("adaptive", 1, 0)
    data = as_json(run("configure", "--cut-factor", "0.7", "--probe-interval", "5", "--json"))  # the policy stays
    assert data["config_changed"] == {"cut_factor": ["0.8", "0.7"], "probe_ms": ["15000", "5000"]}
    assert data["config"]["policy"] == "adaptive" and data["after"]["policy"] == "adaptive"
    data = as_json(run("configure", "--policy", "seed", "--decrease-count", "3", "--json"))
    assert data["changed"]["policy"] == ["adaptive", "seed"]
    assert (data["config"]["decrease_count"], data["config"]["decrease_ratio"]) == ("3", "0.3")
    data = as_json(run("configure", "--policy", "fixed", "--json"))
    assert data["config_changed"]["decrease_count"] == ["3", None]
    assert [e.kind for e in views.read_events(client, gov.keys, 4)] == ["reset"] * 4
    assert set(data["config"]) == {"policy", "max_capacity", "window_ms", "resume_fraction", "retry_after_cap_ms",
                                   "idle_ms", "log_length", "requests_per_minute", "tokens_per_minute",
                                   "input_tokens_per_minute", "output_tokens_per_minute",
                                   "fast_input_tokens_per_minute", "fast_output_tokens_per_minute", "priorities",
                                   "default_priority", "aging_ms", "tenant_weights", "default_weight",
                                   "tenant_caps", "reserve"}  # fmt: skip


def test_set_shares(run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock, name: str) -> None:
    gov = shares_state(make, behind)  # team-a=3, team-b=1, aging 5 s
    out = ok(run("set-shares", "--weight", "team-c=5", "--weight", "team-a=2", "--aging", "1m"))
    assert f"governor {name!r}: shares set: weights team-a=2, team-b=1, team-c=5; any other tenant 1" in out
    changes = [line.split() for line in out.splitlines()]
    assert ["tenant_weights", "team-a=3,team-b=1", "->", "team-a=2,team-b=1,team-c=5"] in changes  # the rest kept
    assert ["aging_ms", "5000", "->", "60000"] in changes
    assert "now: FULL: 3 in flight of 3, 4 queued" in out
    stored = views.read_config(client, gov.keys)
    assert (stored["tenant_weights"], stored["aging_ms"], stored["default_weight"]) == (
        "team-a=2,team-b=1,team-c=5",
        "60000",
        "1",
    )
    data = as_json(run("set-shares", "--unset", "team-b", "--default-weight", "2", "--aging", "off", "--json"))
    assert data["config_changed"] == {
        "aging_ms": ["60000", "0"],
        "default_weight": ["1", "2"],
        "tenant_weights": ["team-a=2,team-b=1,team-c=5", "team-a=2,team-c=5"],
    }
    assert data["changed"] == {} and data["after"]["queued"] == 4  # the queue and the policy are kept
    assert data["config"]["tenant_weights"] == "team-a=2,team-c=5"
    assert "weights     team-a=2, team-c=5; any other tenant 2" in ok(run("status"))
    assert "aging       off: a lower class waits as long as a higher one is queued" in ok(run("status"))
    data = as_json(run("set-shares", "--clear", "--weight", "solo=7", "--aging", "45", "--json"))
    assert (data["config"]["tenant_weights"], data["config"]["aging_ms"]) == ("solo=7", "45000")
    assert "nothing changed" in ok(run("set-shares", "--weight", "solo=7"))
    assert ok(run("set-shares", "--clear")) and views.read_config(client, gov.keys)["tenant_weights"] == ""
    assert [e.kind for e in views.read_events(client, gov.keys, 5)] == ["set_shares"] * 5
    assert gov.status().queued == 4  # nobody lost a place


def test_set_shares_caps_and_reserve(
    run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock
) -> None:
    gov = shares_state(make, behind)  # 3 in flight of 3, 4 queued
    out = ok(run("set-shares", "--cap", "team-a=1", "--cap", "team-b=2", "--reserve", "1"))
    assert "caps team-a=1,team-b=2; reserve 1" in out
    stored = views.read_config(client, gov.keys)
    assert (stored["tenant_caps"], stored["reserve"]) == ("team-a=1,team-b=2", "1")
    data = as_json(run("set-shares", "--uncap", "team-b", "--reserve", "0", "--json"))
    assert data["config_changed"] == {"tenant_caps": ["team-a=1,team-b=2", "team-a=1"], "reserve": ["1", "0"]}
    assert gov.status().queued == 4  # nobody lost a place: parked waiters are still waiters
    refused(run("set-shares", "--cap", "team-a=0"), "must be an integer in [1, 1000000]", code=2)
    refused(run("set-shares", "--reserve", "3"), "reserve must be an integer in [0, max_capacity - 1 = 2]", code=2)
    refused(run("set-shares", "--uncap", "bad name"), "tenant 'bad name' is invalid", code=2)


def test_set_shares_bad_input(run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock) -> None:
    gov = make(GovernorConfig(max_capacity=4, tenant_weights={"a": 2}), clock=behind)
    gov.status()
    refused(run("set-shares"), "nothing to change", code=2)
    refused(run("set-shares", "--weight", "a"), "'a' is not TENANT=WEIGHT", code=2)
    refused(run("set-shares", "--weight", "a=x"), "is not TENANT=WEIGHT", code=2)
    refused(run("set-shares", "--weight", "a=0"), "must be an integer in [1, 1000]", code=2)
    refused(run("set-shares", "--weight", "a=1001"), "must be an integer in [1, 1000]", code=2)
    refused(run("set-shares", "--weight", "bad name=3"), "tenant 'bad name' is invalid", code=2)
    refused(run("set-shares", "--unset", "bad name"), "tenant 'bad name' is invalid", code=2)
    refused(run("set-shares", "--default-weight", "0"), "0 is not in the range", code=2)
    refused(run("set-shares", "--aging", "soon"), "is not a duration nor 'off'", code=2)
    refused(run("set-shares", "--aging", "0"), "must be longer than 0 seconds", code=2)
    refused(run("set-shares", "--aging", "2d"), "aging must be None or between 0 and 86400 seconds", code=2)
    stored = views.read_config(client, gov.keys)
    assert (stored["tenant_weights"], stored["aging_ms"]) == ("a=2", "30000")  # nothing was written
    assert [e.kind for e in views.read_events(client, gov.keys, 1)] == ["create"]


def test_change_never_recreates_a_governor_that_vanished_underneath(
    run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    gov = make(GovernorConfig(max_capacity=4), clock=behind)
    gov.status()
    real = Governor.set_max_capacity

    def wipe_first(self: Governor, n: int, *, create: bool = True) -> Any:
        client.delete(*self.keys.keys)  # the state expires between the look and the change
        return real(self, n, create=create)

    monkeypatch.setattr(Governor, "set_max_capacity", wipe_first)
    refused(run("set-max", "3"), "no governor named")
    assert client.exists(gov.keys.state) == 0


def test_change_refuses_a_governor_recreated_underneath(
    run: Run, make: Callable[..., Governor], client: redis.Redis, behind: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(GovernorConfig(max_capacity=4), clock=behind).status()
    real = Governor.set_max_capacity

    def recreate_first(self: Governor, n: int, *, create: bool = True) -> Any:
        client.delete(*self.keys.keys)  # the state is lost and another client re-creates it
        make(GovernorConfig(max_capacity=4), clock=behind).status()
        return real(self, n, create=create)

    monkeypatch.setattr(Governor, "set_max_capacity", recreate_first)
    refused(run("set-max", "3"), "was re-created while", "repeat the command")


# -- keys -------------------------------------------------------------------------------


def test_keys_with_ready_redis_cli_commands(run: Run, make: Callable[..., Governor], redis_url: str, name: str) -> None:
    gov = make(GovernorConfig(max_capacity=4))
    gov.status()
    out = ok(run("keys"))
    assert f"state     governor:v{SCHEMA_VERSION}:{{{name}}}:state  (hash" in out
    assert f"channel   governor:v{SCHEMA_VERSION}:{{" in out
    data = as_json(run("keys", "--json"))
    assert data["exists"] is True and data["wrong_type"] == []
    roles = {k["role"]: k for k in data["keys"]}
    assert list(roles) == [*KEY_NAMES, "channel"]
    assert roles["state"]["type"] == "hash" and roles["events"]["size"] == 1
    assert (roles["leases"]["type"], roles["leases"]["size"]) == ("zset", 0)  # its sentinel is not counted
    assert roles["queue"]["type"] == "none" and roles["queue"]["expected_type"] == "zset"
    assert "ZRANGE" in roles["queue"]["redis_cli"] and "-20" in roles["attempts"]["redis_cli"]
    if subprocess.run(["which", "redis-cli"], capture_output=True).returncode != 0:
        pytest.skip("redis-cli is not installed")
    for role, expected in (("state", b"capacity"), ("config", b"max_capacity"), ("events", b"first use")):
        done = subprocess.run(roles[role]["redis_cli"], shell=True, capture_output=True, timeout=10)
        assert done.returncode == 0 and expected in done.stdout, done


def test_keys_of_a_missing_governor(run: Run, name: str) -> None:
    result = run("keys")
    assert result.exit_code == 0
    assert "there is no governor" in result.stderr
    assert as_json(run("keys", "--json"))["exists"] is False


def test_keys_says_which_key_has_the_wrong_type(run: Run, client: redis.Redis, name: str) -> None:
    client.set(governor_keys(name).leases, "not a zset")
    try:
        result = run("keys")
        assert result.exit_code == 0
        assert "(string; WRONG TYPE, the scripts expect a zset)" in result.stdout
        assert "is a string, not a zset" in result.stderr
        assert as_json(run("keys", "--json"))["wrong_type"] == ["leases"]
    finally:
        client.delete(governor_keys(name).leases)


def test_redis_cli_base() -> None:
    assert redis_cli_base("redis://localhost:6379/0") == (["redis-cli", "-h", "localhost", "-p", "6379"], None)
    args, note = redis_cli_base("rediss://alice:pw@cache.internal:6380/3")
    assert args == ["redis-cli", "--tls", "-h", "cache.internal", "-p", "6380", "-n", "3", "--user", "alice"]
    assert note is not None and "REDISCLI_AUTH" in note and "pw" not in " ".join(args)
    assert redis_cli_base("unix:///run/redis.sock?db=2") == (["redis-cli", "-s", "/run/redis.sock", "-n", "2"], None)


# -- the command list -------------------------------------------------------------------------


def test_help_lists_the_operator_commands_only(run: Run) -> None:
    out = ok(run("--help", gov=None))
    for command in ("status", "list", "watch", "leases", "queue", "events", "set-max", "pause", "resume", "reset",
                    "configure", "set-shares", "keys", "exporter"):  # fmt: skip
        assert command in out
    operator = set(main.list_commands(click.Context(main)))
    assert not operator & {"demo", "bench", "provider", "swarm", "worker", "budgets", "matrix", "shares"}


# -- the exporter -------------------------------------------------------------------------


def test_exporter_serves_metrics_and_stops_on_sigterm(
    redis_url: str, make: Callable[..., Governor], behind: FakeClock, name: str
) -> None:
    known_state(make, behind)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = ["--url", redis_url, "exporter", "--name", name, "--name", f"{name}-x", "--port", str(port),
               "--top-tenants", "3"]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "governor.cli", *command, "--addr", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        metrics: dict[Any, float] = {}

        def scraped() -> bool:
            nonlocal metrics
            try:
                metrics = scrape(port)
            except OSError:
                return False
            return True

        wait_until(scraped, 20, interval=0.1, what="the exporter to answer")
        g = (("governor", name),)
        assert metrics[("governor_up", g)] == 1
        assert metrics[("governor_capacity", g)] == 4
        assert metrics[("governor_max_capacity", g)] == 8
        assert metrics[("governor_in_flight", g)] == 3
        assert metrics[("governor_window_rate_limited", g)] == 2
        assert metrics[("governor_window_attempts", g)] == 3
        assert metrics[("governor_decisions_total", (("governor", name), ("kind", "capacity")))] == 1
        assert metrics[("governor_priority_in_flight", (("governor", name), ("priority", "default")))] == 3
        assert metrics[("governor_tenant_in_flight", (("governor", name), ("tenant", "default")))] == 3
        assert metrics[("governor_up", (("governor", f"{name}-x"),))] == 0  # named but missing: not created
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
        assert b"serving /metrics for" in process.stderr.read()  # type: ignore[union-attr]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def test_exporter_bad_input(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    refused(run("exporter", gov=None), "Pass --name NAME (repeatable) or --all", code=2)
    refused(run("exporter", "--all", "--name", "a", gov=None), "not both", code=2)
    refused(run("exporter", "--name", "bad name", gov=None), "is invalid", code=2)
    refused(run("--json", "exporter", "--all", gov=None), "no --json", code=2)
    refused(run("exporter", "--all", "--top-tenants", "-1", gov=None), "--top-tenants", code=2)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    refused(run("exporter", "--all", gov=None), "pip install prometheus-client (the metrics extra")


def test_exporter_port_in_use(run: Run) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused(run("exporter", "--all", "--port", str(port), "--addr", "127.0.0.1", gov=None), "cannot listen on")


def test_resume_reset_and_configure_say_they_keep_a_recovery_hold_and_one_flag_lifts_it(
    run: Run, make: Callable[..., Governor], behind: FakeClock, client: redis.Redis
) -> None:
    gov = make(GovernorConfig(max_capacity=4, lease_ttl=60), clock=behind)
    gov.status()
    client.delete(*gov.keys.keys)  # Redis restarted without persistence: the client knew the governor
    assert gov.status().recovery_hold
    out = ok(run("status"))
    assert "HOLDING: recovery hold until" in out and "the state was lost" in out
    for command in ("resume", "reset"):
        out = ok(run(command))
        assert "kept: recovery hold until" in out and "--lift-recovery-hold" in out, out
        assert gov.status().recovery_hold
    out = ok(run("resume", "--lift-recovery-hold"))
    assert "recovery hold lifted" in out and "kept:" not in out
    assert not gov.status().recovery_hold


def test_status_shows_the_longest_lease_ttl_and_reset_counts_it_from_the_live_leases(
    run: Run, make: Callable[..., Governor], behind: FakeClock
) -> None:
    fleet = make(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=60.0), clock=behind)
    held = fleet.try_acquire()
    assert held is not None
    one_off = make(GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=3600.0), clock=behind)
    lease = one_off.try_acquire()
    assert lease is not None
    lease.release()  # gone: nobody holds a lease of 3600 s any more
    assert "lease TTLs  longest announced lately 1h00m" in ok(run("status"))
    out = ok(run("reset"))
    assert "ttl_max" in out and "3600" in out, out
    assert fleet.status().ttl_max == 60.0  # the live lease's
    assert "longest announced lately 1m00s" in ok(run("status"))
    held.release()
