"""The Redis a demo or benchmark runs on when none is given.

In order of preference: the URL the user gave; a private ``redis-server``
on a free loopback port (nothing on disk, stopped afterwards), started by
the one launcher, :mod:`bench.redis_server`; else an in-process
fakeredis with Lua, which only threads of this process can reach, so the
hosts become threads.
"""

from __future__ import annotations

import shutil  # noqa: F401 - tests hide the binary with monkeypatch.setattr(embedded.shutil, "which", ...)
from dataclasses import dataclass
from typing import Any

import redis

from .redis_server import RedisServer, RedisServerMissing, redis_server_binary


@dataclass
class Backend:
    """Where the governors live for one run."""

    kind: str  #: "url" (given), "redis-server" (private) or "fakeredis" (in-process)
    url: str | None  #: a Redis URL other processes can use; None for fakeredis
    fake_server: Any = None
    _server: RedisServer | None = None

    @property
    def shared(self) -> bool:
        """Whether other processes can reach it (so hosts can be processes)."""
        return self.url is not None

    def describe(self) -> str:
        if self.kind == "url":
            return f"Redis at {self.url}"
        if self.kind == "redis-server":
            return f"a private redis-server at {self.url} (started for this run, stopped after it)"
        return (
            "an in-process fakeredis (no redis-server binary found): hosts are threads of one process, "
            "so figures are less faithful; pass --redis-url for real host processes"
        )

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


def open_backend(redis_url: str | None, allow_fake: bool = True) -> Backend:
    """The given Redis, else a private redis-server, else fakeredis."""
    if redis_url:
        client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        try:
            client.ping()
        except redis.RedisError as error:
            raise ConnectionError(f"cannot reach Redis at {redis_url}: {error}") from error
        finally:
            client.close()
        return Backend("url", redis_url)
    if redis_server_binary() is not None:
        return _start_private()
    if not allow_fake:
        raise RuntimeError("no Redis: pass --redis-url, or install redis-server")
    try:
        import fakeredis
        import lupa  # noqa: F401 - fakeredis needs it for Lua
    except ImportError as error:
        raise RuntimeError(
            "no Redis: pass --redis-url, install redis-server, or install fakeredis[lua] for an in-process one"
        ) from error
    return Backend("fakeredis", None, fake_server=fakeredis.FakeServer())


def _start_private() -> Backend:
    try:
        server = RedisServer().start()
    except RedisServerMissing as error:  # gone since it was looked up
        raise RuntimeError(f"no Redis: {error}") from error
    return Backend("redis-server", server.url, _server=server)
