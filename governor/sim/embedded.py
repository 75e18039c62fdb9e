"""The Redis a demo or benchmark runs on when none is given.

In order of preference: the URL the user gave; a private ``redis-server``
started on a free loopback port (nothing on disk, stopped afterwards);
else an in-process fakeredis with Lua, which only threads of this process
can reach, so the hosts become threads.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis


@dataclass
class Backend:
    """Where the governors live for one run."""

    kind: str  #: "url" (given), "redis-server" (private) or "fakeredis" (in-process)
    url: str | None  #: a Redis URL other processes can use; None for fakeredis
    fake_server: Any = None
    _process: subprocess.Popen[bytes] | None = None
    _dir: Path | None = None

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
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            self._process = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

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
    binary = shutil.which("redis-server")
    if binary is not None:
        return _start_private(binary)
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


def _start_private(binary: str) -> Backend:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    folder = Path(tempfile.mkdtemp(prefix="governor-sim-redis-"))
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--dir", str(folder), "--logfile", str(folder / "redis.log")]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    backend = Backend("redis-server", url, _process=process, _dir=folder)
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return backend
            except redis.RedisError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = folder / "redis.log"
                    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                    backend.close()
                    raise RuntimeError(f"redis-server did not start: {tail.strip() or 'no log'}") from None
                time.sleep(0.05)
    finally:
        client.close()
