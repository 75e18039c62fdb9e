"""Python and Node workers on one governor at once.

Node worker processes (clients/typescript/interop/worker.ts, built from
the package) and Python workers share one governor name; every hold is
recorded for the project's witness (tests/support/witness.py) in the
same event format, on one clock (CLOCK_MONOTONIC in both languages), and
the witness counts the holders, never the governor's own status: never
more holders than capacity, every fence unique, FIFO and the priority
classes honoured across languages, a killed Node holder's slot back
within one lease TTL, a requests budget shared exactly.

Skipped, saying why, when ``node`` is not on PATH or the package's
dependencies are not installed (``npm ci`` in clients/typescript).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig
from tests.support.faultkit import Processes
from tests.support.recovery_workers import contend
from tests.support.witness import holds_from, overlap, read_events

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
WORKER = PACKAGE / "dist" / "interop" / "worker.js"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not on PATH: the interop tests need Node 20+"
)


@pytest.fixture(scope="module")
def built() -> Path:
    """The Node package compiled (tsc), once per run, unless its output is
    newer than every source (.ci/run builds it before the suite: other test
    processes may be running the compiled hosts meanwhile)."""
    if not (PACKAGE / "node_modules").is_dir():
        pytest.skip("the Node package's dependencies are not installed: run `npm ci` in clients/typescript")
    sources = [*PACKAGE.glob("src/**/*.ts"), *PACKAGE.glob("interop/**/*.ts"), PACKAGE / "tsconfig.json"]
    if WORKER.exists() and WORKER.stat().st_mtime >= max(path.stat().st_mtime for path in sources):
        return WORKER
    result = subprocess.run(
        ["npx", "tsc", "-p", "tsconfig.json"], cwd=PACKAGE, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return WORKER


class NodeWorkers:
    """Node worker processes, all killed at teardown."""

    def __init__(self, worker: Path) -> None:
        self.worker = worker
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, **args: Any) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(["node", str(self.worker), json.dumps(args)], stdin=subprocess.DEVNULL)
        self.started.append(process)
        return process

    def end_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def node(built: Path) -> Iterator[NodeWorkers]:
    workers = NodeWorkers(built)
    yield workers
    workers.end_all()


def node_config(config: GovernorConfig) -> dict[str, Any]:
    """The Node client's config of a Python GovernorConfig (the fields these tests use)."""
    out: dict[str, Any] = {
        "maxCapacity": config.max_capacity,
        "policy": config.policy.name if not isinstance(config.policy, str) else config.policy,
        "leaseTtl": config.lease_ttl,
        "poll": config.poll,
        "queueTtl": config.queue_ttl,
        "restartHold": config.restart_hold,
    }
    if config.requests_per_minute is not None:
        out["requestsPerMinute"] = config.requests_per_minute
    return out


def recorded(control: redis.Redis, events: str, kind: str, count: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
    """The first ``count`` events of ``kind`` (read, not taken: the witness reads them all later)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in read_events(control, events) if e.get("kind") == kind]
        if len(found) >= count:
            return found[:count]
        errors = [e for e in read_events(control, events) if e.get("kind") == "error"]
        assert not errors, errors
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} {kind!r} events not recorded within {timeout} s: {found}")
        time.sleep(0.02)


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)


def test_a_mixed_fleet_never_holds_more_than_capacity_and_fences_are_unique(
    redis_url: str, name: str, control: redis.Redis, events: str, processes: Processes, node: NodeWorkers
) -> None:
    config = GovernorConfig(max_capacity=4, policy="fixed", restart_hold=False, lease_ttl=5.0, poll=0.2)
    go, stop = f"go:{uuid.uuid4().hex}", f"stop:{uuid.uuid4().hex}"
    for _ in range(2):
        processes.start(contend, redis_url, name, config, redis_url, events, "python", 3, 0.03, 5.0, go, stop)
        node.start(
            url=redis_url, name=name, config=node_config(config), control=redis_url, events=events, mode="contend",
            role="node", callers=3, hold=0.03, acquireTimeout=5, goKey=go, stopKey=stop,
        )  # fmt: skip
    recorded(control, events, "ready", 4)
    control.set(go, "1", ex=120)
    try:

        def enough() -> bool:
            roles = [e.get("role") for e in read_events(control, events) if e.get("kind") == "entered"]
            return roles.count("python") >= 40 and roles.count("node") >= 40

        wait_for(enough, 60, "40 holds in each language")
    finally:
        control.set(stop, "1", ex=120)
    recorded(control, events, "done", 4)
    seen = read_events(control, events)
    holds = holds_from(seen)
    result = overlap(holds, capacity=4, until=time.monotonic())
    assert result.excess == 0 and result.peak <= 4, str(result)
    assert result.shared == [], str(result)
    entered = [e for e in seen if e.get("kind") == "entered"]
    fences = [int(e["fence"]) for e in entered]
    assert len(set(fences)) == len(fences), "a fence was handed out twice"
    assert result.peak == 4, f"the fleet never filled its capacity: {result}"
    by_role = {role: sum(1 for e in entered if e.get("role") == role) for role in ("python", "node")}
    print(f"mixed fleet: {result}; holds by language {by_role}; fences {min(fences)}..{max(fences)}")


def test_fifo_and_priority_classes_hold_across_languages(
    redis_url: str, name: str, control: redis.Redis, events: str, node: NodeWorkers
) -> None:
    """Waiters of both languages queue behind one holder, one after the
    other; the grants (in fence order) follow the classes, then arrival."""
    config = GovernorConfig(max_capacity=1, policy="fixed", restart_hold=False, lease_ttl=10.0, queue_ttl=30.0)
    gov = Governor.from_url(redis_url, name, config)
    first = gov.acquire(timeout=5)
    arrivals = [
        ("node-1", "default"),
        ("python-1", "default"),
        ("node-2", "batch"),
        ("python-2", "interactive"),
        ("node-3", "interactive"),
        ("python-3", "batch"),
    ]
    granted: dict[str, int] = {}
    threads = []

    def python_waiter(label: str, priority: str) -> None:
        lease = gov.acquire(timeout=30, holder=label, priority=priority)
        granted[label] = lease.fence
        lease.release()

    try:
        for queued, (label, priority) in enumerate(arrivals, start=1):
            if label.startswith("node"):
                node.start(
                    url=redis_url, name=name, config=node_config(config), control=redis_url, events=events,
                    mode="once", holder=label, priority=priority,
                )  # fmt: skip
            else:
                thread = threading.Thread(target=python_waiter, args=(label, priority), daemon=True)
                thread.start()
                threads.append(thread)
            wait_for(lambda n=queued: gov.status().queued == n, 30, f"{label} queued")
        first.release()
        for thread in threads:
            thread.join(30)

        def node_done() -> bool:
            return sum(1 for e in read_events(control, events) if e.get("kind") == "left") == 3

        wait_for(node_done, 30, "the Node waiters served")
    finally:
        gov.close()
    for event in read_events(control, events):
        if event.get("kind") == "entered":
            granted[event["holder"]] = int(event["fence"])
    order = sorted(granted, key=granted.__getitem__)
    assert order == ["python-2", "node-3", "node-1", "python-1", "node-2", "python-3"], granted


def test_a_killed_node_holder_gives_its_slot_back_within_one_ttl(
    redis_url: str, name: str, control: redis.Redis, events: str, node: NodeWorkers
) -> None:
    config = GovernorConfig(max_capacity=1, policy="fixed", restart_hold=False, lease_ttl=2.0, poll=0.1)
    holder = node.start(
        url=redis_url, name=name, config=node_config(config), control=redis_url, events=events, mode="hold"
    )
    (holding,) = recorded(control, events, "holding")
    gov = Governor.from_url(redis_url, name, config)
    try:
        assert gov.try_acquire() is None, "the Node holder's slot is taken"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        lease = gov.acquire(timeout=10)
        back = time.monotonic() - killed
        assert lease.fence > int(holding["fence"])
        lease.release()
    finally:
        gov.close()
    # Renewed at most lease_ttl / 3 before the kill: the slot stays taken
    # until the lease's TTL runs out, then a refresh (every poll) reclaims it.
    print(f"killed Node holder: slot back {back:.3f} s after SIGKILL (lease_ttl {config.lease_ttl} s)")
    assert back <= config.lease_ttl + config.poll + 0.5, f"slot back {back:.3f} s after the kill"
    assert back >= config.lease_ttl * 2 / 3 - 0.2, f"slot back {back:.3f} s after the kill: before the TTL ran out"


def test_a_requests_budget_is_shared_exactly(
    redis_url: str, name: str, control: redis.Redis, events: str, node: NodeWorkers
) -> None:
    """Python and Node callers take from one requests bucket as fast as they
    can: together they are admitted what it held plus what refilled, never more."""
    config = GovernorConfig(max_capacity=100, policy="fixed", restart_hold=False, requests_per_minute=30)
    gov = Governor.from_url(redis_url, name, config)
    go = f"go:{uuid.uuid4().hex}"
    try:
        start_level = gov.status().budget("requests")
        assert start_level is not None
        node.start(
            url=redis_url, name=name, config=node_config(config), control=redis_url, events=events, mode="budget",
            seconds=1.5, pause=0.02, goKey=go,
        )  # fmt: skip
        recorded(control, events, "ready")
        python = [0]

        def python_caller() -> None:
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                lease = gov.try_acquire(holder="python")
                if lease is not None:
                    python[0] += 1
                    lease.release()
                time.sleep(0.02)  # as the Node caller: both take from the bucket while it lasts

        began = time.monotonic()
        control.set(go, "1", ex=60)
        thread = threading.Thread(target=python_caller, daemon=True)
        thread.start()
        thread.join(30)
        (done,) = recorded(control, events, "done")
        elapsed = time.monotonic() - began
        end = gov.status().budget("requests")
        assert end is not None
    finally:
        gov.close()
    total = python[0] + int(done["admitted"])
    print(
        f"budget: python {python[0]} + node {done['admitted']} = {total} admitted; "
        f"bucket held {start_level.level:g}, {start_level.limit / 60 * elapsed:.2f} refilled in {elapsed:.2f} s"
    )
    refill = start_level.limit / 60 * elapsed
    assert python[0] > 0 and int(done["admitted"]) > 0, (python[0], done)
    assert start_level.level <= total <= start_level.level + refill + 1, (total, start_level, elapsed)
    assert end.level < 1 + refill, end


def test_node_and_python_share_a_governor_on_a_redis_cluster(
    redis_url: str, control: redis.Redis, events: str, node: NodeWorkers
) -> None:
    """The Node worker is given one node's URL, on which the governor's slot
    is not: it switches to a cluster client on MOVED, loads the library on
    every primary, and holds a lease a Python waiter then gets, fence above."""
    from tests.support.cluster import RedisCluster

    cluster = RedisCluster().start()
    try:
        first = redis.Redis(host="127.0.0.1", port=cluster.ports[0])
        mine = []  # the slot ranges of the node the Node worker is given
        for start, end, primary, *_ in first.execute_command("CLUSTER", "SLOTS"):
            if int(primary[1]) == cluster.ports[0]:
                mine.append((int(start), int(end)))
        first.close()
        name = next(
            n
            for n in (f"interop-{uuid.uuid4().hex[:8]}" for _ in range(1000))
            if not any(a <= redis.cluster.key_slot(f"{{{n}}}".encode()) <= b for a, b in mine)
        )
        config = GovernorConfig(max_capacity=1, policy="fixed", restart_hold=False, lease_ttl=10.0)
        node.start(
            url=cluster.url, name=name, config=node_config(config), control=redis_url, events=events,
            mode="once", holder="node-on-cluster", hold=0.5,
        )  # fmt: skip
        (entered,) = recorded(control, events, "entered")
        gov = Governor.from_url(cluster.url, name, config)
        try:
            lease = gov.acquire(timeout=20)
            assert lease.fence > int(entered["fence"])
            lease.release()
        finally:
            gov.close()
    finally:
        cluster.cleanup()
