"""Process entry points for tests/test_faults_process.py.

Each top-level function runs in a process of its own (multiprocessing,
"spawn"). Workers report through a *control* Redis that the test's faults
never touch: events go to a list (``RPUSH <events> json``) and holders count
themselves in a witness while they hold a lease: :func:`enter` when
``acquire`` returned, :func:`leave` right before they release or as soon as
they see ``lease.lost``. The witness keeps the highest count it reached, so
the test computes the overlap of holders across processes itself, without
asking the governor.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import redis

from governor import Governor, GovernorConfig, GovernorError

from .fault_workers import control_client, emit

#: INCR the holders' count and keep its maximum: KEYS[1] count, KEYS[2] max
ENTER = (
    "local n = redis.call('INCR', KEYS[1]) "
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end "
    "return n"
)


def enter(control: redis.Redis, witness: str) -> int:
    """One more holder (right after ``acquire`` returned); the count now."""
    return int(control.eval(ENTER, 2, witness, f"{witness}:max"))


def leave(control: redis.Redis, witness: str) -> None:
    """One holder less (right before its release, or when it saw the lease lost)."""
    control.decr(witness)


def _hold(lease: Any, seconds: float, check: Any = None) -> bool:
    """Hold ``lease`` for ``seconds``, looking at ``lease.lost`` every 10 ms
    (and calling ``check()`` every 100 ms); True if it stayed held."""
    end = time.monotonic() + seconds
    next_check = 0.0
    while time.monotonic() < end:
        if lease.lost:
            return False
        if check is not None and time.monotonic() >= next_check:
            check()
            next_check = time.monotonic() + 0.1
        time.sleep(0.01)
    return not lease.lost


def _fork_child(
    url: str, gov: Governor, mode: str, timeout: float, hold: float, control_url: str, events: str, witness: str
) -> None:
    """In a child forked from the parent that made ``gov``: take a lease on
    that same object (``acquire`` queued behind the parent, or
    ``try_acquire``), hold it while looking at ``lease.lost``, and say how it went."""
    control = control_client(control_url)
    checker = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
    emit(control, events, kind="child-started", mode=mode)
    started = time.monotonic()
    try:
        lease = gov.acquire(timeout=timeout, holder=f"child/{os.getpid()}") if mode == "queue" else gov.try_acquire()
    except GovernorError as error:
        emit(
            control,
            events,
            kind="child-done",
            error=f"{type(error).__name__}: {error}",
            waited=time.monotonic() - started,
        )
        return
    if lease is None:
        emit(control, events, kind="child-done", error="try_acquire found no room", waited=time.monotonic() - started)
        return
    waited = time.monotonic() - started
    enter(control, witness)
    unlisted: list[float] = []

    def listed() -> None:  # Redis still lists the lease as live
        seconds, micros = checker.time()
        now_ms = seconds * 1000 + micros // 1000
        score = checker.zscore(gov.keys.leases, lease.id)
        if score is None or score <= now_ms:
            unlisted.append(time.monotonic() - started)

    held = _hold(lease, hold, listed)
    leave(control, witness)
    lost = lease.lost
    if not lost:
        lease.release()
    emit(
        control,
        events,
        kind="child-done",
        error=None,
        waited=waited,
        fence=lease.fence,
        id=lease.id,
        held=held,
        lost=lost,
        unlisted=unlisted,
    )
    checker.close()
    control.close()
    gov.close()


def fork_parent(
    url: str,
    name: str,
    config: GovernorConfig,
    parent_leases: int,
    children: int,
    mode: str,
    child_timeout: float,
    child_hold: float,
    control_url: str,
    events: str,
    witness: str,
) -> None:
    """Take ``parent_leases`` leases (the governor is used before the fork),
    fork ``children`` children that use the same governor object, tell the
    test, release when the test says so (``<events>:release``), then wait
    for the children."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    gov.status()
    leases = [gov.acquire(timeout=10, holder=f"parent/{os.getpid()}") for _ in range(parent_leases)]
    for _ in leases:
        enter(control, witness)
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(
            target=_fork_child, args=(url, gov, mode, child_timeout, child_hold, control_url, events, witness)
        )
        for _ in range(children)
    ]
    for proc in procs:
        proc.start()
    emit(
        control, events, kind="forked", children=[proc.pid for proc in procs], fences=[lease.fence for lease in leases]
    )
    deadline = time.monotonic() + 60
    while not control.exists(f"{events}:release") and time.monotonic() < deadline:
        time.sleep(0.01)
    lost = 0
    for lease in leases:
        leave(control, witness)
        lost += lease.lost
        lease.release()
    emit(control, events, kind="parent-released", lost=lost)
    for proc in procs:
        proc.join(child_timeout + child_hold + 30)
    emit(control, events, kind="parent-done", exitcodes=[proc.exitcode for proc in procs])
    gov.close()
    control.close()


def first_acquire(url: str, name: str, connection: Any) -> None:
    """A fresh process's first ``acquire``; tell the test, then wait for its
    word before releasing (so it can count what Redis received meanwhile)."""
    # a Redis the test has just started: no admission hold for a restart (when the field exists)
    fresh = {"restart_hold": False} if "restart_hold" in GovernorConfig.__dataclass_fields__ else {}
    gov = Governor.from_url(url, name, GovernorConfig(max_capacity=2, **fresh))
    started = time.monotonic()
    lease = gov.acquire(timeout=10)
    connection.send({"seconds": time.monotonic() - started, "fence": lease.fence})
    connection.poll(30)
    lease.release()
    gov.close()
