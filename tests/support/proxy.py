"""A fault-injecting TCP proxy on loopback, for the fault tests.

``Proxy(upstream_port)`` listens on a free 127.0.0.1 port and forwards every
connection to 127.0.0.1:upstream_port. The test steers the link while
clients use it:

- ``cut()``: a partition. Nothing is forwarded in either direction and the
  connections stay open in silence, like a dead link: bytes sent meanwhile
  (and a peer's close) are buffered, as TCP would keep retransmitting them,
  and delivered in order by ``heal()``. New connections are accepted but
  not connected upstream until the heal.
- ``heal()``: forward again, buffered bytes first.
- ``reset()``: close every connection at once (with RST), like a network
  reset; buffered bytes are lost.
- ``delay(seconds)``: every chunk is delivered ``seconds`` after it was
  read, in both directions, in order.
- ``retarget(port, reset=False)``: new connections go to another upstream;
  ``reset=True`` also resets the existing ones.

The proxy runs an asyncio loop in a daemon thread; every method is
thread-safe and returns once the loop has applied it. Only loopback
addresses are used. A connection whose buffer outgrows ``max_buffer`` bytes
(a long cut under heavy traffic) is reset rather than growing without bound.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

HOST = "127.0.0.1"
CHUNK = 65536
T = TypeVar("T")


class _Pipe:
    """One direction of one connection: chunks read from ``reader``, each
    written to ``writer`` once it is due and the link is not cut."""

    def __init__(self, proxy: Proxy, conn: _Connection, reader: asyncio.StreamReader) -> None:
        self.proxy = proxy
        self.conn = conn
        self.reader = reader
        self.writer: asyncio.StreamWriter | None = None
        #: (due time, chunk); an empty chunk stands for the sender's close (EOF)
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.buffered = 0
        self.changed = asyncio.Event()

    async def read(self) -> None:
        while True:
            data = await self.reader.read(CHUNK)
            self.queue.append((time.monotonic() + self.proxy._delay, data))
            self.buffered += len(data)
            self.changed.set()
            if not data:
                return
            if self.buffered > self.proxy.max_buffer:
                self.conn.reset()
                return

    async def write(self) -> None:
        while True:
            while not self.queue or self.proxy._cut or self.writer is None:
                self.changed.clear()
                await self.changed.wait()
            due, data = self.queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue  # the link may have been cut meanwhile
            self.queue.popleft()
            self.buffered -= len(data)
            if not data:
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return
            self.writer.write(data)
            await self.writer.drain()


class _Connection:
    """A client connection and its upstream connection, with a pipe each way."""

    def __init__(self, proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client = writer
        self.upstream: asyncio.StreamWriter | None = None
        self.up = _Pipe(proxy, self, reader)  # client -> upstream
        self.down: _Pipe | None = None  # upstream -> client
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    async def run(self, port: int) -> None:
        self.tasks.append(asyncio.ensure_future(self.up.read()))
        try:
            healed = self.proxy._healed
            assert healed is not None
            while self.proxy._cut:  # a dead link: nothing goes through until the heal
                await healed.wait()
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 5)
        except (OSError, asyncio.TimeoutError):
            self.reset()
            return
        if self.closed:
            up_writer.close()
            return
        self.upstream = up_writer
        self.up.writer = up_writer
        self.up.changed.set()
        self.down = _Pipe(self.proxy, self, up_reader)
        self.down.writer = self.client
        self.tasks += [
            asyncio.ensure_future(self.up.write()),
            asyncio.ensure_future(self.down.read()),
            asyncio.ensure_future(self.down.write()),
        ]
        # Done once both directions delivered their close, or at the first error.
        writes = (self.tasks[1], self.tasks[3])
        pending: set[asyncio.Task[None]] = set(self.tasks)
        failed = False
        while pending and not failed and not all(task.done() for task in writes):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            failed = any(not task.cancelled() and task.exception() is not None for task in done)
        self.close(abort=failed)

    def wake(self) -> None:
        for pipe in (self.up, self.down):
            if pipe is not None:
                pipe.changed.set()

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            if abort:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    try:  # linger 0: the close sends RST, like a reset link
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    except OSError:
                        pass
                writer.transport.abort()
            else:
                writer.close()
        self.proxy._connections.discard(self)

    def reset(self) -> None:
        self.close(abort=True)


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of 127.0.0.1:upstream_port (see the module doc)."""

    def __init__(self, upstream_port: int, *, max_buffer: int = 8 * 1024 * 1024) -> None:
        self.upstream_port = upstream_port
        self.max_buffer = max_buffer
        self.port = 0
        self._cut = False
        self._delay = 0.0
        self._connections: set[_Connection] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._healed: asyncio.Event | None = None  # made on the loop

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> Proxy:
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy->{self.upstream_port}", daemon=True)
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        self._healed = asyncio.Event()
        self._healed.set()
        self._server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread."""
        if self._thread is None:
            return
        try:
            self._call(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None
            self._loop.close()

    async def _stop(self) -> None:
        for _ in range(3):  # connections still in the listener's backlog are taken and handled
            await asyncio.sleep(0.01)
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.reset()
        handlers = [task for task in self._handlers if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.wait(handlers, timeout=2)

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        return self._apply(lambda: len(self._connections))

    # -- faults -------------------------------------------------------------------

    def cut(self) -> None:
        """Stop forwarding both ways; connections stay open, silent."""

        def apply() -> None:
            self._cut = True
            assert self._healed is not None
            self._healed.clear()

        self._apply(apply)

    def heal(self) -> None:
        """Forward again, buffered bytes first."""

        def apply() -> None:
            self._cut = False
            assert self._healed is not None
            self._healed.set()
            for conn in list(self._connections):
                conn.wake()

        self._apply(apply)

    def reset(self) -> None:
        """Close every open connection with RST; new ones are accepted as before."""

        def apply() -> None:
            for conn in list(self._connections):
                conn.reset()

        self._apply(apply)

    def delay(self, seconds: float) -> None:
        """Deliver every chunk read from now on ``seconds`` later (0: no delay)."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")

        def apply() -> None:
            self._delay = seconds

        self._apply(apply)

    def retarget(self, port: int, reset: bool = False) -> None:
        """Send new connections to 127.0.0.1:port; ``reset`` the open ones too."""

        def apply() -> None:
            self.upstream_port = port
            if reset:
                for conn in list(self._connections):
                    conn.reset()

        self._apply(apply)

    # -- plumbing -----------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(self, reader, writer)
        self._connections.add(conn)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await conn.run(self.upstream_port)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            conn.reset()
        finally:
            self._handlers.discard(task)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _apply(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return self._call(run())
