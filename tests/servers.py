"""Private redis-server processes for the tests: standalone and cluster.

Each server runs from the ``redis-server`` binary on a free loopback port,
keeps nothing on disk, and can be stopped, killed, paused and restarted on
the same port (the fault tests need all four).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate, timeout: float, interval: float = 0.02, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


async def until(predicate, timeout: float = 10, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Await ``predicate()`` (sync or async) becoming true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


class RedisServer:
    """One redis-server process on a fixed loopback port."""

    def __init__(self, port: int | None = None, *extra: str) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = port or free_port()
        self.extra = extra
        self.dir = Path(tempfile.mkdtemp(prefix=f"governor-redis-{self.port}-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.ping, 10, what=f"redis-server on port {self.port}")
        return self

    def uptime(self) -> float:
        """Seconds since the server started (INFO server)."""
        client = redis.Redis(port=self.port, socket_timeout=5)
        try:
            return float(client.info("server")["uptime_in_seconds"])
        finally:
            client.close()

    def wait_older_than(self, seconds: float) -> None:
        """Return once the server has run for more than ``seconds``."""
        wait_until(lambda: self.uptime() > seconds, seconds + 10, interval=0.2, what="the server's age")

    def ping(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """Terminate the server and wait for it; nothing survives (no persistence)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGCONT)
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (a hung Redis)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def unpause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
