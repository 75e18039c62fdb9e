"""Private ``redis-server`` processes: the one launcher of the project.

Used by ``python -m bench demo`` and ``python -m bench bench`` when no Redis is given
(:mod:`bench.embedded`), by ``python -m bench bench --instructions`` under
callgrind (:mod:`bench.instructions`), and by the tests
(``tests/support/servers.py`` re-exports it) for standalone servers, replicas
(``--replicaof`` in ``extra``) and cluster nodes (``--cluster-enabled``).

Each server runs from the ``redis-server`` binary on a loopback port (a
free one unless given), keeps nothing on disk (``--save ""``, no AOF, its
own temporary directory), and can be stopped, killed, paused and restarted
on the same port. ``wrapper`` puts a program in front of the binary, e.g.
:func:`callgrind` for ``valgrind --tool=callgrind``.

Only the standard library and redis-py are imported: the tests import
this module without the ``bench`` extra's aiohttp and matplotlib.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

_NO_RETRY = Retry(NoBackoff(), 0)  # an answer or not, at once: redis-py retries with backoff by default
INSTALL_HINT = "apt-get install redis-server"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` binary on PATH."""


def redis_server_binary() -> str | None:
    """The ``redis-server`` on PATH, looked up at each call (a test may hide it)."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def valgrind_missing() -> str | None:
    """Why :func:`callgrind` cannot run here, or None when it can."""
    missing = [tool for tool in ("valgrind", "vgdb") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found: apt-get install valgrind"
    return None


def callgrind(folder: Path) -> list[str]:
    """A wrapper that runs the server under ``valgrind --tool=callgrind``,
    its dumps written to ``folder/callgrind.<pid>[.<n>]``."""
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/callgrind.%p"]


def _poll(predicate: Callable[[], bool], timeout: float, interval: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


class RedisServer:
    """One redis-server process on a fixed loopback port.

    ``extra`` arguments go to redis-server after the defaults (so they win);
    ``wrapper`` goes before the binary; ``start_timeout`` is how long
    :meth:`start` waits for the first PING (a wrapped server starts slowly).
    """

    def __init__(
        self,
        port: int | None = None,
        *extra: str,
        wrapper: Sequence[str] = (),
        start_timeout: float | None = None,
    ) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RedisServerMissing(f"redis-server is not installed ({INSTALL_HINT})")
        self.binary = binary
        self.port = port or free_port()
        self.extra = extra
        self.wrapper = tuple(wrapper)
        self.start_timeout = start_timeout if start_timeout is not None else (120.0 if wrapper else 10.0)
        self.dir = Path(tempfile.mkdtemp(prefix=f"governor-redis-{self.port}-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The server's process id (valgrind runs the server in its own process)."""
        assert self.process is not None, "not started"
        return self.process.pid

    def args(self) -> list[str]:
        return [
            *self.wrapper,
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *self.extra,
        ]  # fmt: skip

    def start(self) -> RedisServer:
        """Start the process and return once it answers PING; on failure the
        process is ended and the error quotes the end of its log."""
        self.process = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process = self.process
        if not _poll(lambda: self.ping() or process.poll() is not None, self.start_timeout, 0.05) or not self.ping():
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"redis-server on port {self.port} did not start: {tail or 'no log'}")
        return self

    def log_tail(self, chars: int = 500) -> str:
        log = self.dir / "redis.log"
        return log.read_text(errors="replace")[-chars:].strip() if log.exists() else ""

    def client(self, **options: object) -> redis.Redis:
        """A new client of this server (the caller closes it)."""
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]

    def ping(self) -> bool:
        client = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5, retry=_NO_RETRY)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def uptime(self) -> float:
        """Seconds since the server started (INFO server)."""
        client = redis.Redis(port=self.port, socket_timeout=5, retry=_NO_RETRY)
        try:
            return float(client.info("server")["uptime_in_seconds"])
        finally:
            client.close()

    def wait_older_than(self, seconds: float) -> None:
        """Return once the server has run for more than ``seconds``."""
        if not _poll(lambda: self.uptime() > seconds, seconds + 10, 0.2):
            raise RuntimeError(f"redis-server on port {self.port} did not get older than {seconds} s")

    def stop(self) -> None:
        """Terminate the server and wait for it; nothing survives (no persistence)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGCONT)  # a paused server must run to exit
                self.process.terminate()
                try:
                    self.process.wait(max(10.0, self.start_timeout))
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
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
        """Stop and start again on the same port (an empty server: nothing persisted)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop, and delete the server's directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
