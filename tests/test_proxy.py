"""The fault-injecting TCP proxy of the fault tests (tests/support/proxy.py), on an
echo server and on a real Redis."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType

import pytest
import redis

from .support.proxy import Proxy
from .support.servers import RedisServer, wait_until


class EchoServer:
    """Echoes every chunk back, prefixed with its tag, on a free loopback port."""

    def __init__(self, tag: bytes = b"") -> None:
        self.tag = tag
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = int(self.listener.getsockname()[1])
        self.closing = threading.Event()
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> EchoServer:
        self.thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.closing.set()
        self.thread.join(5)
        self.listener.close()

    def _serve(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        with conn:
            while not self.closing.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(self.tag + data)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def nothing_arrives(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(100) == b"" and False
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


def test_forwards_both_ways(echo: EchoServer) -> None:
    with Proxy(echo.port) as proxy, connect(proxy.port) as sock:
        for i in range(20):
            sock.sendall(b"ping %d;" % i)
            assert recv_exactly(sock, len(b"ping %d;" % i)) == b"ping %d;" % i
        big = bytes(range(256)) * 2000  # many chunks, in order
        sock.sendall(big)
        assert recv_exactly(sock, len(big)) == big


def test_a_cut_is_silent_and_the_heal_delivers_in_order(echo: EchoServer) -> None:
    with Proxy(echo.port) as proxy, connect(proxy.port) as sock:
        sock.sendall(b"before;")
        assert recv_exactly(sock, 7) == b"before;"
        proxy.cut()
        sock.sendall(b"one;")
        sock.sendall(b"two;")
        assert nothing_arrives(sock, 0.3)  # nothing answers, nothing closes
        late = connect(proxy.port)  # a connection made during the cut is silent too
        late.sendall(b"late;")
        assert nothing_arrives(late, 0.2)
        assert echo.accepted == 1
        proxy.heal()
        assert recv_exactly(sock, 8) == b"one;two;"
        assert recv_exactly(late, 5) == b"late;"
        late.close()


def test_a_close_during_a_cut_is_delivered_at_the_heal(echo: EchoServer) -> None:
    """The upstream going away is not seen through a cut link."""
    with Proxy(echo.port) as proxy, connect(proxy.port) as sock:
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        proxy.cut()
        sock.sendall(b"yz")
        sock.shutdown(socket.SHUT_WR)
        assert nothing_arrives(sock, 0.3)
        proxy.heal()
        assert recv_exactly(sock, 3) == b"yz"  # then the echo server sees EOF and closes
        assert sock.recv(10) == b""


def test_reset_closes_every_connection(echo: EchoServer) -> None:
    with Proxy(echo.port) as proxy:
        socks = [connect(proxy.port) for _ in range(3)]
        for sock in socks:
            sock.sendall(b"hi")
            assert recv_exactly(sock, 2) == b"hi"
        wait_until(lambda: proxy.connections == 3, 5, what="three connections")
        proxy.reset()
        for sock in socks:
            try:
                assert sock.recv(10) == b""
            except ConnectionResetError:
                pass
            sock.close()
        assert proxy.connections == 0
        with connect(proxy.port) as sock:  # new connections work as before
            sock.sendall(b"again")
            assert recv_exactly(sock, 5) == b"again"


def test_delay_applies_to_each_direction_and_keeps_order(echo: EchoServer) -> None:
    with Proxy(echo.port) as proxy, connect(proxy.port) as sock:
        proxy.delay(0.15)
        started = time.monotonic()
        for i in range(5):
            sock.sendall(b"%d," % i)
            time.sleep(0.01)
        got = recv_exactly(sock, 10)
        elapsed = time.monotonic() - started
        assert got == b"0,1,2,3,4,"
        assert 0.3 <= elapsed < 1.5  # once each way
        proxy.delay(0)
        started = time.monotonic()
        sock.sendall(b"now")
        assert recv_exactly(sock, 3) == b"now"
        assert time.monotonic() - started < 0.15


def test_retarget_sends_new_connections_elsewhere(echo: EchoServer) -> None:
    with EchoServer(b"B:") as other, Proxy(echo.port) as proxy:
        old = connect(proxy.port)
        old.sendall(b"a")
        assert recv_exactly(old, 1) == b"a"
        proxy.retarget(other.port)
        old.sendall(b"b")
        assert recv_exactly(old, 1) == b"b"  # an open connection keeps its upstream
        with connect(proxy.port) as new:
            new.sendall(b"c")
            assert recv_exactly(new, 3) == b"B:c"
        proxy.retarget(echo.port, reset=True)
        try:
            assert old.recv(10) == b""
        except ConnectionResetError:
            pass
        old.close()
        with connect(proxy.port) as new:
            new.sendall(b"d")
            assert recv_exactly(new, 1) == b"d"


def test_an_unreachable_upstream_closes_the_client() -> None:
    with EchoServer() as gone:
        port = gone.port
    with Proxy(port) as proxy:
        try:
            with connect(proxy.port) as sock:
                assert sock.recv(10) == b""
        except ConnectionResetError:
            pass  # reset during or right after the connect: closed all the same


def test_stop_closes_the_listener_and_connections(echo: EchoServer) -> None:
    proxy = Proxy(echo.port).start()
    sock = connect(proxy.port)
    proxy.cut()  # even a connection held silent by a cut
    late = connect(proxy.port)
    proxy.stop()
    for s in (sock, late):
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
        s.close()
    with pytest.raises(OSError):
        connect(proxy.port).close()


def test_redis_through_the_proxy(private_redis: RedisServer) -> None:
    with Proxy(private_redis.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            assert client.ping()
            proxy.cut()
            with pytest.raises(redis.TimeoutError):
                client.ping()
            proxy.heal()
            assert client.ping()  # a new connection; the timed-out one was dropped
            proxy.reset()
            assert client.ping()  # redis-py reconnects after the reset
        finally:
            client.close()
