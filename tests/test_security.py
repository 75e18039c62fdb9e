"""Security: the least-privilege Redis ACL of a worker, AUTH, TLS, lease ids,
and hostile state or arguments (a key of the wrong type, an absurd config
sent straight to the library's functions, malformed ids) that must give a
clear error and change nothing.

The worker ACL (also in docs/operating.md, "Security"):

    ACL SETUSER <user> reset on ><password>
        ~governor:v3:{<NAME>}:* &governor:v3:{<NAME>}:wake -@all
        +fcall +function|load +subscribe +unsubscribe +ping +type +wait
        +del +exists +hdel +hexists +hget +hgetall +hincrby +hmget +hset +hsetnx +info
        +pexpire +publish +time +xadd +zadd +zcard +zcount +zrange +zrangebyscore +zrank
        +zrem +zremrangebyscore +zscore
        [+client|setinfo on Redis >= 7.2]

(the second half is what the library's Lua calls: WORKER_SCRIPT_COMMANDS,
kept equal to the Lua by a test below).

Redis 7 checks the commands a function calls against the caller's ACL, so
the Lua's commands must be granted too, and a function (even one in a
library a worker loaded itself) cannot reach outside the key pattern and
channel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from governor import (
    AsyncGovernor,
    ConfigError,
    Governor,
    GovernorConfig,
    GovernorUnavailable,
    Outcome,
    StateError,
)
from governor.core import Call, new_id
from governor.policies import Policy, SeedPolicy
from governor.protocol import KEY_NAMES, KEYS, SENTINEL, governor_keys
from governor.scripts import library, library_name

from .conftest import FakeClock
from .support.model import init_call
from .support.servers import RedisServer, free_port, until, wait_until

NAME = "acl-gov"
PASSWORD = "s3cret-worker-password"
#: the commands the scripts call (Redis 7 checks them against the caller's ACL)
WORKER_SCRIPT_COMMANDS = (
    "cluster|myid cluster|nodes del exists hdel hexists hget hgetall hincrby hmget hset hsetnx info pexpire "
    "publish time type xadd zadd zcard zcount zrange zrangebyscore zrank zrem zremrangebyscore zscore"
).split()
#: what the client itself sends (besides HGETALL of the config hash, after an
#: operator changed it, among the commands above): the library's functions
#: (FCALL), the library (FUNCTION LOAD, again after a flush or restart), the wake channel, PING,
#: TYPE to name a key of the wrong type, WAIT for replicas (with
#: wait_replicas); and on Redis >= 7.2 the client library's name on connect
#: (CLIENT SETINFO, refused quietly when not granted)
WORKER_CLIENT_COMMANDS = "fcall function|load subscribe unsubscribe ping type wait".split()
SETINFO = "client|setinfo"


def worker_acl(
    name: str, user: str = "worker", password: str = PASSWORD, setinfo: bool = True, load: bool = True
) -> list[str]:
    """ACL SETUSER arguments of the least-privilege worker of governor
    ``name``; ``load=False``: one that may not FUNCTION LOAD (a shared Redis)."""
    keys = governor_keys(name)
    client_commands = [c for c in WORKER_CLIENT_COMMANDS if load or c != "function|load"]
    prefix = keys.state[: -len("state")]
    return [
        user,
        "reset",
        "on",
        f">{password}",
        f"~{prefix}*",
        f"&{keys.channel}",
        "-@all",
        *(f"+{command}" for command in client_commands + WORKER_SCRIPT_COMMANDS),
        *([f"+{SETINFO}"] if setinfo else []),
    ]


def test_the_acl_grants_exactly_the_commands_the_scripts_call() -> None:
    source = library()
    # every call names its command as a literal, so the list below is all of them
    assert not re.search(r"redis\.p?call\(\s*[^'\s]", source), "a redis.call whose command is not a literal"
    # (a container command by its subcommand: CLUSTER MYID is cluster|myid)
    used = {
        (f"{c}|{sub}" if c.lower() == "cluster" else c).lower()
        for c, sub in re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'(?:\s*,\s*'([A-Za-z]+)')?", source)
    }
    granted = set(WORKER_SCRIPT_COMMANDS)
    assert used <= granted, f"the library calls {sorted(used - granted)}: add them to the worker ACL (and its page)"
    assert granted <= used, f"the library calls {sorted(granted - used)} no more: drop them from the worker ACL"


def test_the_documented_acl_is_the_tested_one() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "operating.md").read_text()
    block = page[page.index("ACL SETUSER gov-worker") :].split("\n\n", 1)[0]
    granted = set(re.findall(r"\+([a-z|]+)", block))
    assert granted == set(WORKER_CLIENT_COMMANDS) | set(WORKER_SCRIPT_COMMANDS)


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    admin = redis.Redis(port=server.port)  # the default user keeps every right
    try:
        admin.execute_command("ACL", "SETUSER", *worker_acl(NAME))  # type: ignore[no-untyped-call]
    except redis.ResponseError:  # Redis < 7.2 has no CLIENT SETINFO
        admin.execute_command("ACL", "SETUSER", *worker_acl(NAME, setinfo=False))  # type: ignore[no-untyped-call]
    admin.close()
    yield server
    server.cleanup()


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=acl_server.port, decode_responses=True)
    client.execute_command("ACL", "LOG", "RESET")  # type: ignore[no-untyped-call]
    yield client
    client.close()


def worker_url(server: RedisServer, user: str = "worker", password: str = PASSWORD) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


FAST = GovernorConfig(max_capacity=1, lease_ttl=0.9, poll=0.2, queue_ttl=1.0, redis_timeout=2.0)


def denials(admin: redis.Redis) -> list[str]:
    log = admin.execute_command("ACL", "LOG")  # type: ignore[no-untyped-call]
    return [f"{e['reason']}:{e['object']}" for e in log]


def test_a_least_privilege_worker_can_do_everything_the_client_does(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    admin.delete(*governor_keys(NAME).keys)
    gov = Governor.from_url(worker_url(acl_server), NAME, FAST)
    try:
        holder = gov.acquire(timeout=5)
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(gov.acquire(timeout=10)), daemon=True)
        waiter.start()  # a real wait: the wake channel and the refresh path
        wait_until(lambda: gov.status().queued == 1, 10, what="a queued waiter")
        gov.report(Outcome.RATE_LIMITED, retry_after=0.001, lease=holder)
        gov.renew()
        holder.release()
        waiter.join(10)
        assert got and not got[0].lost
        admin.function_flush()  # the library gone: loaded again with FUNCTION LOAD
        gov.report(Outcome.SUCCESS, lease=got[0])
        admin.delete(*gov.keys.keys)  # state gone: re-created with init
        gov.renew()
        got[0].release()
        assert gov.call(lambda: "answer", timeout=5) == "answer"
        gov.probe()
        gov.set_max_capacity(2)
        gov.pause("drill", duration=5)
        gov.resume()
        gov.reset()
        gov.configure()
        assert gov.status().in_flight == 0
    finally:
        gov.close()
    assert denials(admin) == []


def test_a_worker_that_may_not_load_functions_runs_the_operators_library_and_cannot_replace_it(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    """On a Redis shared by governors of different users, FUNCTION LOAD would
    let one user replace the library every other user's calls run: such
    workers get +fcall without +function|load, and an operator loads the
    library (`governor library --load`)."""
    from click.testing import CliRunner

    from governor.cli import main

    try:
        admin.execute_command("ACL", "SETUSER", *worker_acl(NAME, user="runner", load=False))  # type: ignore[no-untyped-call]
    except redis.ResponseError:  # Redis < 7.2 has no CLIENT SETINFO
        admin.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", *worker_acl(NAME, user="runner", setinfo=False, load=False)
        )
    admin.delete(*governor_keys(NAME).keys)
    admin.function_flush()
    runner = redis.Redis.from_url(worker_url(acl_server, "runner"))
    gov = Governor.from_url(worker_url(acl_server, "runner"), NAME, FAST)
    try:
        with pytest.raises(GovernorUnavailable, match="governor library --load"):
            gov.status()  # no library, and this user may not load it: told what to run
        admin_url = f"redis://127.0.0.1:{acl_server.port}/0"
        done = CliRunner().invoke(main, ["--url", admin_url, "library"])
        assert done.exit_code == 0 and "NOT loaded" in done.output
        done = CliRunner().invoke(main, ["--url", admin_url, "library", "--load"])
        assert done.exit_code == 0 and f"library {library_name()}: loaded" in done.output, done.output
        lease = gov.acquire(timeout=5)  # the operator's library serves the worker
        lease.release()
        assert gov.status().in_flight == 0
        with pytest.raises(redis.exceptions.NoPermissionError):
            runner.function_load(library(), replace=True)  # nor can it put other code in its place
    finally:
        gov.close()
        runner.close()
        admin.execute_command("ACL", "DELUSER", "runner")  # type: ignore[no-untyped-call]


async def test_the_asyncio_client_needs_nothing_more(acl_server: RedisServer, admin: redis.Redis) -> None:
    gov = AsyncGovernor.from_url(worker_url(acl_server), NAME, FAST)
    try:
        await gov.configure()
        holder = await gov.acquire(timeout=5)
        task = asyncio.create_task(gov.acquire(timeout=10))

        async def waiting() -> bool:
            return (await gov.status()).queued == 1

        await until(waiting, what="the second caller queued")
        await gov.report(Outcome.SUCCESS, lease=holder)
        await holder.release()
        lease = await asyncio.wait_for(task, 10)
        await gov.renew()
        await lease.release()
        assert (await gov.status()).in_flight == 0
    finally:
        await gov.aclose()
    assert denials(admin) == []


def test_the_worker_reaches_nothing_outside_its_keys(acl_server: RedisServer, admin: redis.Redis) -> None:
    admin.set("other:secret", "42")
    worker = redis.Redis.from_url(worker_url(acl_server), decode_responses=True)
    try:
        for command in (
            ("GET", "other:secret"),
            ("SET", "other:secret", "x"),
            ("DEL", "other:secret"),
            ("KEYS", "*"),
            ("FLUSHALL",),
            ("CONFIG", "GET", "*"),
            ("SCRIPT", "FLUSH"),
            ("SCRIPT", "LOAD", "return 1"),
            ("EVAL", "return 1", "0"),
            ("FUNCTION", "FLUSH"),
            ("FUNCTION", "DELETE", library_name()),
            ("FUNCTION", "LIST"),
            ("FCALL_RO", "anything", "0"),
            ("PUBLISH", "other-channel", "x"),
            ("ACL", "WHOAMI"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.execute_command(*command)  # type: ignore[no-untyped-call]
        # a function of a library the worker loads itself runs with the worker's rights
        refused = "(?i)no permissions|can't run this command|can't publish"
        bodies = {
            "get": ("return redis.call('GET', keys[1])", ["other:secret"]),  # a command it may not run
            "set": ("return redis.call('SET', 'other:secret', 'owned')", []),
            "hset": ("return redis.call('HSET', keys[1], 'f', 'v')", ["other:hash"]),  # its command, a foreign key
            "zscore": ("return redis.call('ZSCORE', keys[1], 'm')", ["governor:v3:{someone-else}:leases"]),
            "publish": ("return redis.call('PUBLISH', 'governor:v3:{someone-else}:wake', 'x')", []),
        }
        own = "#!lua name=worker_own_test\n" + "\n".join(
            f"redis.register_function('worker_own_{fn}', function(keys, args) {body} end)"
            for fn, (body, _) in bodies.items()
        )
        worker.function_load(own, replace=True)
        try:
            for fn, (_, keys) in bodies.items():
                with pytest.raises(redis.exceptions.ResponseError, match=refused):
                    worker.fcall(f"worker_own_{fn}", len(keys), *keys)
        finally:
            admin.function_delete("worker_own_test")
        pubsub = worker.pubsub()  # type: ignore[no-untyped-call]
        with pytest.raises(redis.exceptions.NoPermissionError):  # the refusal comes as the reply
            pubsub.subscribe("governor:v3:{someone-else}:wake")
            pubsub.get_message(timeout=2)
        pubsub.close()
    finally:
        worker.close()
    assert admin.get("other:secret") == "42" and not admin.exists("other:hash")


def test_another_governors_keys_are_refused_with_a_clear_error(acl_server: RedisServer) -> None:
    gov = Governor.from_url(worker_url(acl_server), "not-mine", FAST)
    try:
        with pytest.raises(GovernorUnavailable, match="refused access"):
            gov.status()
        with pytest.raises(GovernorUnavailable, match="refused access"):
            gov.try_acquire()
    finally:
        gov.close()


def test_wrong_credentials_are_refused_with_a_clear_error(acl_server: RedisServer) -> None:
    for url in (worker_url(acl_server, password="wrong"), worker_url(acl_server, user="nobody")):
        gov = Governor.from_url(url, NAME, FAST)
        try:
            with pytest.raises(GovernorUnavailable, match=r"refused access|invalid username-password"):
                gov.status()
        finally:
            gov.close()


# -- TLS ------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, int, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed: no throwaway certificate for the TLS test")
    certs = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=governor-test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=certs)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=certs)  # fmt: skip
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "server.crt", cwd=certs)  # fmt: skip
    tls_port = free_port()
    server = RedisServer(
        None,
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(certs / "server.crt"),
        "--tls-key-file", str(certs / "server.key"),
        "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "no",
    )  # fmt: skip
    try:
        server.start()
    except AssertionError:
        server.cleanup()
        pytest.skip("this redis-server was built without TLS support")
    yield server, tls_port, certs
    server.cleanup()


def test_tls_with_a_verified_server_certificate(tls_server: tuple[RedisServer, int, Path]) -> None:
    _, port, certs = tls_server
    gov = Governor.from_url(f"rediss://127.0.0.1:{port}/0", "tls", FAST, ssl_ca_certs=str(certs / "ca.crt"))
    try:
        holder = gov.acquire(timeout=5)
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(gov.acquire(timeout=10)), daemon=True)
        waiter.start()
        wait_until(lambda: gov.status().queued == 1, 10, what="a queued waiter")
        gov.report(Outcome.SUCCESS, lease=holder)
        holder.release()
        waiter.join(10)
        assert got
        got[0].release()
    finally:
        gov.close()


def test_tls_refuses_an_unknown_certificate_clearly(tls_server: tuple[RedisServer, int, Path]) -> None:
    _, port, _ = tls_server
    gov = Governor.from_url(f"rediss://127.0.0.1:{port}/0", "tls", FAST)  # the system CAs do not know ours
    try:
        with pytest.raises(GovernorUnavailable, match=r"(?i)certificate"):
            gov.status()
    finally:
        gov.close()


# -- lease ids ------------------------------------------------------------------------------


def test_lease_ids_are_128_random_bits_and_distinct() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    # every one of the 128 bits is set in about half of the ids (6 sigma: 0.5 +- 0.021)
    values = [int(i, 16) for i in ids]
    for bit in range(128):
        share = sum((v >> bit) & 1 for v in values) / len(values)
        assert 0.479 < share < 0.521, f"bit {bit} is set in {share:.3f} of the ids"


# -- hostile state and arguments ----------------------------------------------------------------


def snapshot(client: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """Every key's serialized value and expiry."""
    return {key: (client.dump(key), client.pttl(key) > 0) for key in keys}


@pytest.fixture
def real(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _populated(
    real: redis.Redis, clock: FakeClock, name: str, policy: Policy | str = "adaptive"
) -> tuple[Governor, str]:
    """A governor with a lease held (counted in held: its tenant has a cap
    of 1), a waiter parked at that cap, a waiter queued (in a class that
    ages, for a tenant: aging and shares hold it; it is due to age once the
    test moves the clock; the reserve keeps it out) and attempts in the
    window. Built with the core's calls, so no background worker runs
    beside the test."""
    config = GovernorConfig(
        max_capacity=2, idle_expiry=64, policy=policy, aging=5.0, queue_ttl=30.0, reserve=1,
        tenant_caps={"default": 1},
    )  # fmt: skip
    gov = Governor(real, name, config, clock=clock)
    lease_id = new_id()
    gov._execute(gov._core.acquire(lease_id, gov._core.ask("holder"), wait=False))
    gov._execute(gov._core.acquire(new_id(), gov._core.ask("parked"), wait=True))
    gov._execute(gov._core.acquire(new_id(), gov._core.ask("waiter", tenant="b"), wait=True))
    gov.report(Outcome.SUCCESS)
    gov.report(Outcome.RATE_LIMITED)
    return gov, lease_id


def _operations(gov: Governor, lease_id: str) -> dict[str, Call[Any]]:
    core = gov._core
    return {
        "init": init_call(core, holds_leases=True),
        "acquire": core.acquire(new_id(), core.ask("h"), wait=True),
        "try_acquire": core.acquire(new_id(), core.ask("h"), wait=False),
        "acquire-again": core.acquire(lease_id, core.ask("h"), wait=True, fresh=False),
        "refresh": core.refresh([lease_id, new_id()]),
        "cancel": core.cancel(lease_id),
        "renew": core.renew([(lease_id, "old-epoch", core.ask("h")), (new_id(), "old-epoch", core.ask("h"))]),
        "release": core.release(lease_id),
        "report-s": core.report(Outcome.SUCCESS, None, lease_id, 1),
        "report-r": core.report(Outcome.RATE_LIMITED, 5.0, None),
        "report-q": core.report(Outcome.QUOTA_EXHAUSTED, None, None),
        "probe": core.probe(),
        "status": core.status(),
        "set_max": core.set_max_capacity(3),
        "set_shares": core.set_shares(tenant_weights={"a": 2}),
        "set_caps": core.set_shares(tenant_caps={"default": 2}, reserve=0),
        "pause": core.pause("drill", 5.0),
        "resume": core.resume(),
        "reset": core.reset(with_config=False),
        "configure": core.reset(with_config=True),
        "spend-reserve": core.spend("reserve", new_id(), "default", (5, 1, 0), "60000", ()),
        "spend-settle": core.spend("settle", new_id(), "default", (5, 1, 0), "3,1,0", ()),
    }


#: the Redis type of each key, in governor_keys order (the order the Lua binds them)
KEY_TYPES = tuple(kind for _, kind in KEYS)
WRONG = {"hash": ("rpush", "x"), "zset": ("sadd", "x"), "stream": ("set", "x")}


KEY_CASES = [pytest.param(i, id=key.split(":")[-1]) for i, key in enumerate(governor_keys("x").keys)]


def test_the_wrong_type_cases_cover_every_key() -> None:
    assert [case.id for case in KEY_CASES] == list(KEY_NAMES) and len(KEY_CASES) == 15
    assert set(KEY_TYPES) <= set(WRONG)


@pytest.mark.parametrize("which", KEY_CASES)
def test_a_key_of_the_wrong_type_stops_every_script_and_nothing_changes(
    real: redis.Redis, which: int, request: pytest.FixtureRequest
) -> None:
    """Each function either fails with a clear StateError and changes nothing
    at all, or never touches the foreign key (its value and expiry stay).
    leases and holders keep their sentinel entry (protocol.SENTINEL), so
    they exist before the foreign value replaces them, as in a fleet."""
    clock = FakeClock()
    name = f"wrongtype-{which}-{id(request)}"
    problems = []
    gov, lease_id = _populated(real, clock, name)
    gov.close()
    keys = gov.keys.keys
    key, expected = keys[which], KEY_TYPES[which]
    try:
        for op in _operations(gov, lease_id):
            real.delete(*keys)
            gov, lease_id = _populated(real, clock, name)
            calls = _operations(gov, lease_id)
            assert real.zscore(gov.keys.leases, SENTINEL) == 0 and real.hget(gov.keys.holders, SENTINEL) == b""
            real.delete(key)
            command, value = WRONG[expected]
            getattr(real, command)(key, value)  # another program's key, no expiry
            clock.advance(9)  # past idle_ms / 8: a writing script pushes every key's expiry back
            before = snapshot(real, keys)
            try:
                gov._connection.run(calls[op])
            except StateError as error:
                if "another program wrote" not in str(error) and "wrong" not in str(error).lower():
                    problems.append(f"{op}: unclear error {error}")
                if snapshot(real, keys) != before:
                    changed = [k.split(":")[-1] for k in keys if snapshot(real, (k,)) != {k: before[k]}]
                    problems.append(f"{op}: failed but changed {changed}")
            else:
                if snapshot(real, (key,)) != {key: before[key]}:
                    problems.append(f"{op}: succeeded and changed the foreign key (value or expiry)")
            finally:
                gov.close()
    finally:
        real.delete(*keys)
    assert not problems, "\n".join(problems)


#: (field, value, the policy whose field it is)
TAMPERED_CONFIG = [
    ("max_capacity", "-5", "adaptive"),
    ("max_capacity", "0", "adaptive"),
    ("max_capacity", "1e309", "adaptive"),
    ("max_capacity", "nan", "adaptive"),
    ("max_capacity", "inf", "adaptive"),
    ("max_capacity", "2.5", "adaptive"),
    ("max_capacity", "99999999999", "adaptive"),
    ("window_ms", "abc", "adaptive"),
    ("window_ms", "0", "fixed"),
    ("resume_fraction", "1.01", "adaptive"),
    ("retry_after_cap_ms", "-1", "seed"),
    ("decrease_ratio", "1.5", "seed"),
    ("decrease_count", "0", "seed"),
    ("decrease_factor", "nan", "seed"),
    ("cut_factor", "-0.1", "adaptive"),
    ("pause_count", "0", "adaptive"),
    ("probe_ms", "1e400", "adaptive"),
    ("idle_ms", "10", "adaptive"),
    ("log_length", "0", "adaptive"),
    ("policy", "evil", "adaptive"),
]


@pytest.mark.parametrize("field,value,policy", TAMPERED_CONFIG, ids=[f"{p}:{f}={v}" for f, v, p in TAMPERED_CONFIG])
@pytest.mark.parametrize("script", ["init", "reset"])
def test_an_absurd_config_sent_straight_to_the_scripts_is_refused(
    real: redis.Redis, script: str, field: str, value: str, policy: str
) -> None:
    clock = FakeClock()
    gov, _ = _populated(real, clock, f"tamper-{script}-{policy}-{field}-{abs(hash(value))}", policy)
    keys = gov.keys.keys
    try:
        if script == "init":
            real.delete(*keys)
        call = init_call(gov._core, holds_leases=False) if script == "init" else gov._core.reset(with_config=True)
        args = list(call.args)
        args[args.index(field, 2) + 1] = value
        before = snapshot(real, keys)
        with pytest.raises(ConfigError, match=f"{field} must be"):
            gov._connection.run(Call(call.script, tuple(args), call.parse))
        assert snapshot(real, keys) == before
    finally:
        real.delete(*keys)
        gov.close()


@pytest.mark.parametrize("policy", ["adaptive", "seed", "fixed"])
def test_missing_unknown_and_odd_config_fields_are_refused(real: redis.Redis, policy: str) -> None:
    gov, _ = _populated(real, FakeClock(), f"tamper-fields-{policy}", policy)
    keys = gov.keys.keys
    other = "decrease_ratio" if policy != "seed" else "cut_factor"  # another policy's field
    try:
        call = gov._core.reset(with_config=True)
        args = list(call.args)
        i = args.index("window_ms")
        variants = {
            "missing": (args[:i] + args[i + 2 :], "config field window_ms is missing"),
            "unknown": ([*args, "root", "1"], "unknown config field root"),
            "another policy's": ([*args, other, "0.5"], f"unknown config field {other} for policy {policy}"),
            "odd": ([*args, "max_capacity"], "config field max_capacity has no value"),
            "a v1 name": ([*args, "max", "5"], f"unknown config field max for policy {policy}"),
        }
        if policy != "fixed":  # a field of its own policy, missing
            own = SeedPolicy.stored["decrease_count"][0] if policy == "seed" else "probe_ms"
            j = args.index(own)
            variants["own field missing"] = (args[:j] + args[j + 2 :], f"config field {own} is missing")
        before = snapshot(real, keys)
        for what, (variant, message) in variants.items():
            with pytest.raises(ConfigError, match=message):
                gov._connection.run(Call(call.script, tuple(variant), call.parse))
            assert snapshot(real, keys) == before, what
    finally:
        real.delete(*keys)
        gov.close()


BAD_IDS = ["", "has space", "x" * 129, "semi;colon", "new\nline", "{tag}", "ünï", "a|b", SENTINEL]
BAD_NUMBERS = ["-1", "nan", "abc", "1.5", ""]


def test_malformed_ids_and_numbers_are_refused_by_every_script(real: redis.Redis) -> None:
    clock = FakeClock()
    gov, lease_id = _populated(real, clock, "tamper-args")
    keys = gov.keys.keys
    core = gov._core
    try:
        before = snapshot(real, keys)
        init = init_call(core, holds_leases=False)
        for bad in BAD_IDS:
            for call in (
                core.acquire(bad, core.ask("h"), wait=True),
                core.acquire(bad, core.ask("h"), wait=False),
                core.acquire(bad, core.ask("h"), wait=True, fresh=False),
                core.cancel(bad),
                core.release(bad),
                core.refresh([lease_id, bad]),
                core.renew([(bad, "e", core.ask("h"))]),
                *([core.report(Outcome.SUCCESS, None, bad, 1)] if bad else []),  # '': no lease, valid
                Call("init", (*init.args[:2], bad, *init.args[3:]), init.parse),  # the epoch
            ):
                with pytest.raises(ConfigError, match="must be 1-128 characters"):
                    gov._connection.run(call)
        for bad in BAD_NUMBERS:
            for call, index, empty_ok in _number_arguments(gov, lease_id):
                if bad == "" and empty_ok:
                    continue
                args = list(call.args)
                args[index] = bad
                with pytest.raises(ConfigError, match="must be an integer"):
                    gov._connection.run(Call(call.script, tuple(args), call.parse))
        acquire_call = core.acquire(new_id(), core.ask("h"), wait=True)
        acquire, parse = acquire_call.args, acquire_call.parse
        for mode in ("", "WAIT", "fresh", "wait "):
            with pytest.raises(ConfigError, match="mode must be wait, again or try"):
                gov._connection.run(Call("acquire", (*acquire[:6], mode), parse))
        with pytest.raises(ConfigError, match="mode must be"):  # ARGV[7] missing
            gov._connection.run(Call("acquire", acquire[:6], parse))
        for announce in ("", "yes", "2"):
            with pytest.raises(ConfigError, match="announce must be 1 or 0"):
                gov._connection.run(Call("acquire", (*acquire[:11], announce), parse))
        with pytest.raises(ConfigError, match="outcome must be"):
            report = core.report(Outcome.SUCCESS, None, None)
            gov._connection.run(Call("report", (*report.args[:2], "x", "", "", "", "0"), core._parse_reported))
        too_long = dataclasses.replace(core.ask("h"), holder="x" * 201)  # the script's own check, past the client's
        with pytest.raises(ConfigError, match="holder"):
            gov._connection.run(core.acquire(new_id(), too_long, wait=True))
        with pytest.raises(ConfigError, match="holder"):
            gov._connection.run(core.renew([(lease_id, "e", too_long)]))
        with pytest.raises(ConfigError, match="sevens"):
            gov._connection.run(
                Call("renew", (*core.renew([(lease_id, "e", core.ask("h"))]).args, "extra"), lambda r: r)
            )
        with pytest.raises(ConfigError, match="reason"):
            gov._connection.run(Call("pause", (*core.pause("x", 1.0).args[:2], "x" * 501, "0"), core._parse_status))
        assert snapshot(real, keys) == before
        assert gov.status().in_flight == 1  # the governor still works
    finally:
        real.delete(*keys)
        gov.close()


def test_a_release_with_nobody_waiting_refuses_a_malformed_id_and_changes_nothing(real: redis.Redis) -> None:
    """Without waiters release checks its id only when no lease has it
    (a pattern match is the dearest part of the call): a malformed id, the
    sentinel included, is still refused before anything is written."""
    clock = FakeClock()
    gov = Governor(real, "tamper-release", GovernorConfig(max_capacity=2), clock=clock)
    keys = gov.keys.keys
    core = gov._core
    try:
        lease_id = new_id()
        gov._execute(core.acquire(lease_id, core.ask("holder"), wait=False))
        before = snapshot(real, keys)
        for bad in BAD_IDS:
            with pytest.raises(ConfigError, match="must be 1-128 characters"):
                gov._connection.run(core.release(bad))
        assert snapshot(real, keys) == before
        assert gov._connection.run(core.release(new_id())) is False  # a valid id of no lease: nothing to release
        assert gov._connection.run(core.release(lease_id)) is True
    finally:
        real.delete(*keys)
        gov.close()


def _number_arguments(gov: Governor, lease_id: str) -> list[tuple[Call[Any], int, bool]]:
    """Calls with an integer argument, its index in ARGV, and whether ''
    is a valid value there (the clock: Redis TIME; none)."""
    core = gov._core
    init = init_call(core, holds_leases=False)
    calls = [
        (core.acquire(new_id(), core.ask("h"), wait=True), 4, False),  # ttl_ms
        (core.acquire(new_id(), core.ask("h"), wait=True), 5, False),  # queue_ttl_ms
        (core.acquire(new_id(), core.ask("h"), wait=False), 4, False),  # ttl_ms
        (core.renew([(lease_id, "e", core.ask("h"))]), 2, False),  # ttl_ms
        (core.refresh([lease_id]), 2, False),  # queue_ttl_ms
        (core.report(Outcome.RATE_LIMITED, 1.0, None), 3, True),  # retry_after_ms
        (core.report(Outcome.SUCCESS, None, lease_id, 1), 5, True),  # fence
        (core.set_max_capacity(2), 2, False),
        (core.pause("x", 1.0), 3, False),  # duration_ms
        (init, 4, False),  # fence_floor
        (init, 5, False),  # ttl_ms
        (init, 7, False),  # notice_ms
    ]
    # the clock (ARGV[1]) of every function that reads it; release without
    # waiters and cancel of an unknown id read no clock
    for call in (
        core.acquire(new_id(), core.ask("h"), wait=True),
        core.refresh([lease_id]),
        core.renew([(lease_id, "e", core.ask("h"))]),
        core.report(Outcome.SUCCESS, None, None),
        core.probe(),
        core.status(),
        core.set_max_capacity(2),
        core.pause("x", 1.0),
        core.resume(),
        core.reset(with_config=False),
        core.reset(with_config=True),
        init,
    ):
        calls.append((call, 0, True))
    return calls


def test_an_infinite_number_is_refused_by_every_script(real: redis.Redis) -> None:
    gov, lease_id = _populated(real, FakeClock(), "tamper-infinity")
    keys = gov.keys.keys
    accepted = []
    try:
        for call, index, _ in _number_arguments(gov, lease_id):
            for infinite in ("1e400", "inf", "-inf"):
                args = list(call.args)
                args[index] = infinite
                try:
                    gov._connection.run(Call(call.script, tuple(args), call.parse))
                except ConfigError:
                    continue
                accepted.append(f"{call.script} ARGV[{index + 1}] = {infinite}")
        assert not accepted, f"accepted as an integer: {accepted}"
    finally:
        real.delete(*keys)
        gov.close()
