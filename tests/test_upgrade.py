"""A rolling upgrade: clients of two versions on one governor.

The older client is the release before the layout handshake (commit
9e3613f, layout 3: its states carry no origin stamp), installed by the
fixture into a virtual environment of its own (cached in the temporary
directory). Processes of both versions contend for one governor of
capacity 4 and report every hold to a control Redis; the witness
(tests/support/witness.py) counts the holders and the fences of both.

The handshake: a state stamped by a newer layout that admits only newer
clients is refused, naming both layouts and the upgrade step, never
advising to reset or delete the state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from governor import Governor, GovernorConfig, LayoutError, Outcome, StateError
from governor.budgets import Tokens
from governor.protocol import ADDED, LAYOUT, MIN_LAYOUT, STATE, TIERS_LAYOUT

from .support.faultkit import figure
from .support.servers import RedisServer
from .support.witness import read_events, witness

ROOT = Path(__file__).resolve().parent.parent
#: the last release of layout 3 (no origin stamp, no recovery hold of its own)
OLD_COMMIT = "9e3613f"
#: the last commit before fast mode (layout 4: it knows no record of a tier, no tier's budget)
PRE_TIERS_COMMIT = "55a9967"

#: run by both versions' interpreters: ``threads`` callers acquire, hold 0.1-0.3 s, release, for
#: ``seconds``; every hold is reported to the control Redis in the witness's event shape
WORKER = r"""
import json, os, random, sys, threading, time
import redis
import governor
from governor import Governor, GovernorConfig, GovernorError, AcquireTimeout

url, name, control_url, events, role, threads, seconds, config = sys.argv[1:9]
config = GovernorConfig(**json.loads(config))
control = redis.Redis.from_url(control_url, decode_responses=True)
gov = Governor.from_url(url, name, config)
counts = {"admitted": 0, "errors": 0}
lock = threading.Lock()

def emit(**event):
    control.rpush(events, json.dumps(event))

def caller(seed):
    rng = random.Random(seed)
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            lease = gov.acquire(timeout=1.0, holder=role)
        except AcquireTimeout:
            continue
        except GovernorError as error:
            with lock:
                counts["errors"] += 1
            emit(kind="error", role=role, error=str(error))
            time.sleep(0.05)
            continue
        key = f"{role}/{os.getpid()}/{lease.id}"
        emit(kind="entered", key=key, role=role, t=time.monotonic(), fence=lease.fence)
        with lock:
            counts["admitted"] += 1
        time.sleep(rng.uniform(0.1, 0.3))
        t = time.monotonic()
        emit(kind="left", key=key, how="lost" if lease.lost else "released", t=t, held_until=t)
        try:
            lease.release()
        except GovernorError:
            pass

workers = [threading.Thread(target=caller, args=(i,)) for i in range(int(threads))]
for w in workers:
    w.start()
for w in workers:
    w.join()
emit(kind="done", role=role, version=governor.__file__, **counts)
gov.close()
"""

CONFIG = {"max_capacity": 4, "policy": "fixed", "lease_ttl": 3.0, "poll": 0.2, "queue_ttl": 1.0, "redis_timeout": 2.0}


def older_python(commit: str, layout: int) -> Path:
    """The interpreter of a virtual environment holding an older release
    (``commit`` of this checkout's history, of ``layout``); its dependencies are
    this environment's, its ``governor`` the older one."""
    cache = Path(tempfile.gettempdir()) / f"governor-old-{commit}"
    python = cache / "venv" / "bin" / "python"
    if not (cache / "ready").exists():
        src = cache / "src"
        src.mkdir(parents=True, exist_ok=True)
        try:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True, timeout=60
            ).stdout
        except (OSError, subprocess.CalledProcessError) as error:
            pytest.skip(f"the older release {commit} is not in this checkout's history ({error})")
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True, timeout=60)
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", str(cache / "venv")], check=True, timeout=120
            )
        except (OSError, subprocess.CalledProcessError) as error:
            pytest.skip(f"cannot create a virtual environment for the older release: {error}")
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        # the older source first, then this environment's packages for its dependencies (a path a
        # .pth names is not a site directory: the newer governor's own .pth there is not run)
        Path(site, "governor-old.pth").write_text(f"{src}\n{sysconfig.get_paths()['purelib']}\n")
        (cache / "ready").write_text(commit)
    found = subprocess.run(
        [str(python), "-c", "import governor, governor.protocol as p; print(governor.__file__, getattr(p, 'LAYOUT', 3))"],  # noqa: E501
        check=True, capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir(),
    ).stdout.split()  # fmt: skip
    assert found[0].startswith(str(cache / "src")) and found[1] == str(layout), found
    return python


@pytest.fixture(scope="module")
def old_python() -> Path:
    """The release of OLD_COMMIT (layout 3)."""
    return older_python(OLD_COMMIT, 3)


@pytest.fixture(scope="module")
def pre_tiers_python() -> Path:
    """The release of PRE_TIERS_COMMIT (layout 4, before fast mode)."""
    return older_python(PRE_TIERS_COMMIT, 4)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer().start()
    yield srv
    srv.cleanup()


@pytest.fixture
def control(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port, db=1, decode_responses=True)
    yield client
    client.close()


def start(
    python: Path, server: RedisServer, name: str, events: str, role: str, seconds: float
) -> subprocess.Popen[bytes]:
    control_url = f"redis://127.0.0.1:{server.port}/1"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(
        [str(python), "-c", WORKER, server.url, name, control_url, events, role, "2", str(seconds), json.dumps(CONFIG)],
        cwd=tempfile.gettempdir(), env=env,
    )  # fmt: skip


def test_an_older_and_a_newer_fleet_share_one_governor(
    old_python: Path, server: RedisServer, control: redis.Redis
) -> None:
    name, events = "upgrade", f"events:{uuid.uuid4().hex}"
    old = [start(old_python, server, name, events, "old", 5.0) for _ in range(2)]  # the running fleet
    time.sleep(1.0)  # the older clients create the state (layout 3, unstamped)
    new = [start(Path(sys.executable), server, name, events, "new", 3.0) for _ in range(2)]  # the upgrade rolls in
    for process in old + new:
        assert process.wait(60) == 0
    seen = witness(control, events, CONFIG["max_capacity"], time.monotonic())
    done = {e["role"]: e for e in read_events(control, events) if e["kind"] == "done"}
    errors = [e["error"] for e in read_events(control, events) if e["kind"] == "error"]
    print(
        f"\nolder and newer fleet on one governor: {seen}; admitted { ({r: d['admitted'] for r, d in done.items()}) }"
    )
    figure("mixed versions: most simultaneous holders (capacity 4)", seen.peak, "")
    assert seen.peak <= CONFIG["max_capacity"] and not seen.shared, f"the witness saw {seen}"
    assert done["old"]["admitted"] > 0 and done["new"]["admitted"] > 0, done
    assert done["old"]["version"].startswith(str(old_python.parent.parent.parent / "src")), done["old"]["version"]
    assert not errors, errors[:3]
    admin = server.client(decode_responses=True)
    try:  # served as it was, stamped by the newer client
        origin = admin.hget(Governor(admin, name).keys.state, "origin")
        assert origin.startswith(f"{LAYOUT}:{MIN_LAYOUT}:"), origin
    finally:
        admin.close()


def test_a_state_only_newer_clients_may_use_is_refused_naming_both_layouts(server: RedisServer) -> None:
    gov = Governor.from_url(server.url, "newer", GovernorConfig(max_capacity=4))
    admin = server.client(decode_responses=True)
    try:
        gov.status()
        origin = admin.hget(gov.keys.state, "origin")
        _, _, run_id, replid = origin.split(":")
        admin.hset(gov.keys.state, "origin", f"{LAYOUT + 1}:{LAYOUT + 1}:{run_id}:{replid}")
        before = admin.hgetall(gov.keys.state)
        for call in (gov.status, gov.try_acquire, gov.reset):
            with pytest.raises(LayoutError) as caught:
                call()
            message = str(caught.value)
            assert f"layout {LAYOUT + 1}" in message and f"this client speaks layout {LAYOUT}" in message
            assert "upgrade this client" in message and "docs/upgrade.md" in message
            assert "reset" not in message.lower() and "keep the state" in message
            assert "delete" not in message.lower()
            assert (caught.value.layout, caught.value.min_layout) == (LAYOUT + 1, LAYOUT + 1)
        assert admin.hgetall(gov.keys.state) == before  # nothing was changed
        # a newer layout that still admits this one is served, and left stamped as it is
        admin.hset(gov.keys.state, "origin", f"{LAYOUT + 1}:{MIN_LAYOUT}:{run_id}:{replid}")
        lease = gov.try_acquire()
        assert lease is not None
        lease.release()
        assert admin.hget(gov.keys.state, "origin") == f"{LAYOUT + 1}:{MIN_LAYOUT}:{run_id}:{replid}"
    finally:
        admin.close()
        gov.close()


def test_an_unreadable_state_never_advises_deleting_a_running_fleets_state(server: RedisServer) -> None:
    gov = Governor.from_url(server.url, "unreadable", GovernorConfig(max_capacity=4))
    admin = server.client()
    try:
        gov.status()
        admin.hset(gov.keys.state, "capacity", "many")  # what another version or program may leave
        with pytest.raises(StateError) as caught:
            gov.status()
        message = str(caught.value)
        assert "delete" not in message.lower() and "`governor reset`" not in message, message
        assert "docs/upgrade.md" in message
    finally:
        admin.close()
        gov.close()


FAST_HEADERS = {"anthropic-fast-input-tokens-limit": "6000", "anthropic-fast-input-tokens-remaining": "6000"}
STANDARD_HEADERS = {
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "80000",
}


def test_a_state_an_older_version_created_reads_its_later_fields_as_their_defaults(server: RedisServer) -> None:
    """A state and a config created before fast mode lack its budgets' fields:
    each reads as its default (not governed), and every call uses the state;
    a field present but unreadable still makes the state unusable."""
    config = GovernorConfig(max_capacity=4, input_tokens_per_minute=6000)
    gov = Governor.from_url(server.url, "older-fields", config)
    admin = server.client(decode_responses=True)
    try:
        gov.status()
        later = [f for f in ADDED if admin.hexists(gov.keys.state, f) or admin.hexists(gov.keys.config, f)]
        assert len(later) == len(ADDED) >= 12, later  # five state fields and a ceiling of each fast kind
        admin.hdel(gov.keys.state, *(f for f in ADDED if f in STATE))
        admin.hdel(gov.keys.config, *(f for f in ADDED if f not in STATE))
        admin.hset(gov.keys.state, "touch_due", 0)  # the next writing call checks every field
        lease = gov.try_acquire(tokens=Tokens(100, 20))
        assert lease is not None
        gov.report(Outcome.SUCCESS, lease=lease, usage=Tokens(80, 10))
        lease.release()
        fast_lease = gov.try_acquire(tokens=Tokens(100, 20, tier="fast"))
        assert fast_lease is not None
        fast_lease.release()
        assert [b.kind for b in gov.status().budgets] == ["input_tokens"]
        # a fast answer's headers calibrate the fast budgets: read as not governed, then learnt
        for remaining in ("6000", "5000"):
            gov.report(Outcome.SUCCESS, headers={**FAST_HEADERS, "anthropic-fast-input-tokens-remaining": remaining})
        status = gov.status()
        assert [b.kind for b in status.budgets] == ["input_tokens", "fast_input_tokens"], status.budgets
        assert status.budgets[1].limit == 6000 and status.budgets[1].level < 5500  # (refilling since)
        assert GovernorConfig.from_stored(admin.hgetall(gov.keys.config)).fast_input_tokens_per_minute is None
        gov.reset()
        # present and unreadable: the next call that checks every field refuses the state
        admin.hset(gov.keys.state, mapping={"fast_output_tokens_limit": "many", "touch_due": 0})
        with pytest.raises(StateError, match="fast_output_tokens_limit"):
            gov.try_acquire(tokens=Tokens(100, 20, tier="fast"))
    finally:
        admin.close()
        gov.close()


#: run by an older client: its status and an admission on governor ``name``, each "served" (answered) or its error
OLDER_CALLS = r"""
import json, sys
from governor import Governor, GovernorConfig, GovernorError
url, name = sys.argv[1:3]
gov = Governor.from_url(url, name, GovernorConfig(max_capacity=4, policy="fixed"))
told = []
for call in (gov.status, gov.try_acquire):
    try:
        found = call()
        if hasattr(found, "release"):
            found.release()
        told.append("served")
    except GovernorError as error:
        told.append(f"{type(error).__name__}: {error}")
gov.close()
print(json.dumps(told))
"""


def older_calls(python: Path, server: RedisServer, name: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", OLDER_CALLS, server.url, name],
        check=True, capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir(), env=env,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_client_before_fast_mode_refuses_a_state_holding_a_fast_lease(
    pre_tiers_python: Path, server: RedisServer
) -> None:
    """A fast lease's record (``output,fast``) is one a client before fast mode
    would misread: the lease stamps the state as one only clients of
    TIERS_LAYOUT on may use, and the older client refuses it, naming the
    upgrade; a state of standard leases alone it shares."""
    name = "tiers-stamp"
    gov = Governor.from_url(server.url, name, GovernorConfig(max_capacity=4, policy="fixed", restart_hold=False))
    admin = server.client(decode_responses=True)
    try:
        standard = gov.try_acquire(tokens=Tokens(100, 20))
        assert standard is not None
        assert older_calls(pre_tiers_python, server, name) == ["served", "served"]
        assert admin.hget(gov.keys.state, "origin").startswith(f"{LAYOUT}:{MIN_LAYOUT}:")
        fast = gov.try_acquire(tokens=Tokens(100, 20, tier="fast"))
        assert fast is not None
        assert admin.hget(gov.keys.state, "origin").startswith(f"{LAYOUT}:{TIERS_LAYOUT}:")
        told = older_calls(pre_tiers_python, server, name)
        assert len(told) == 2 and all(t.startswith("LayoutError") for t in told), told
        assert f"layout {LAYOUT}" in told[1] and "upgrade this client" in told[1], told
        fast.release()
        standard.release()
        again = gov.try_acquire(tokens=Tokens(100, 20, tier="fast"))  # the newer client goes on
        assert again is not None
        again.release()
    finally:
        admin.close()
        gov.close()


def test_a_fast_budget_active_stamps_the_state_for_clients_of_fast_mode_alone(server: RedisServer) -> None:
    """A fast budget learnt from a fast answer's headers, or configured, is a
    field a client before fast mode cannot read: the state is stamped
    TIERS_LAYOUT; standard budgets leave it to every layout from MIN_LAYOUT."""
    admin = server.client(decode_responses=True)
    try:
        for name, config, headers, min_layout in (
            ("standard", {}, STANDARD_HEADERS, MIN_LAYOUT),
            ("learnt", {}, FAST_HEADERS, TIERS_LAYOUT),
            ("configured", {"fast_output_tokens_per_minute": 1200}, {}, TIERS_LAYOUT),
        ):
            gov = Governor.from_url(server.url, name, GovernorConfig(max_capacity=4, restart_hold=False, **config))
            try:
                gov.report(Outcome.SUCCESS, headers=headers)
                assert gov.status().budgets, name
                assert admin.hget(gov.keys.state, "origin").startswith(f"{LAYOUT}:{min_layout}:"), name
            finally:
                gov.close()
    finally:
        admin.close()
