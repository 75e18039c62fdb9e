"""Process entry points for the recovery fault tests (tests/test_faults_recovery.py).

Each function runs in its own process (multiprocessing, "spawn"). Every
holder records itself for the witness (tests/support/witness.py) in the *control*
Redis, which no fault touches: ``entered`` as ``acquire`` returns,
``fence`` when its lease's fence changes (an adoption), ``left`` just
before it releases, or as soon as it sees ``lease.lost`` (a watcher thread
looks every 10 ms). Other events say what the process is doing
(``ready``, ``holding``, ``calling``, ``done``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import redis

from governor import AcquireTimeout, Governor, GovernorConfig, GovernorError, Lease, LeaseLost, Outcome

from .fault_workers import emit

#: how often the watcher looks at lease.lost and lease.fence
LOOK = 0.01
#: no worker outlives this, whatever the test forgot to say
LIFETIME = 90.0


class Watch:
    """Records this process's holds for the witness and watches them for loss."""

    def __init__(self, control_url: str, events: str, role: str) -> None:
        self.control = redis.Redis.from_url(control_url, socket_timeout=5, decode_responses=True)
        self.events = events
        self.role = role
        self._lock = threading.Lock()
        #: lease id -> (lease, fence recorded, last look that found it live)
        self._held: dict[str, tuple[Lease, int, float]] = {}
        self._lost: dict[str, threading.Event] = {}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="witness-watch", daemon=True)
        self._thread.start()

    def emit(self, **event: Any) -> None:
        emit(self.control, self.events, role=self.role, **event)

    def key(self, lease: Lease) -> str:
        return f"{os.getpid()}/{lease.id}"

    def entered(self, lease: Lease) -> threading.Event:
        """``acquire`` just returned ``lease``; the event is set if it is seen lost."""
        now = time.monotonic()
        lost = threading.Event()
        with self._lock:
            self._held[lease.id] = (lease, lease.fence, now)
            self._lost[lease.id] = lost
        self.emit(kind="entered", key=self.key(lease), fence=lease.fence, epoch=lease.epoch, t=now)
        return lost

    def leaving(self, lease: Lease) -> bool:
        """About to release ``lease``: recorded now. False if it was seen lost before."""
        now = time.monotonic()
        with self._lock:
            entry = self._held.pop(lease.id, None)
        if entry is None:
            return False
        self.emit(kind="left", key=self.key(lease), how="released", t=now, held_until=now)
        return True

    def _run(self) -> None:
        while not self._closing.wait(LOOK):
            now = time.monotonic()
            with self._lock:
                entries = list(self._held.items())
            for lease_id, (lease, fence, last_live) in entries:
                if lease.released:
                    continue
                if lease.lost:
                    with self._lock:
                        if self._held.pop(lease_id, None) is None:
                            continue  # released meanwhile
                    self.emit(kind="left", key=self.key(lease), how="lost", t=now, held_until=last_live)
                    self._lost[lease_id].set()
                    continue
                if lease.fence != fence:
                    self.emit(kind="fence", key=self.key(lease), fence=lease.fence, epoch=lease.epoch, t=now)
                with self._lock:
                    if lease_id in self._held:
                        self._held[lease_id] = (lease, lease.fence, now)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(5)
        self.control.close()


def _stop_requested(control: redis.Redis, stop_key: str) -> bool:
    try:
        return bool(control.exists(stop_key))
    except redis.RedisError:
        return False


def hold_until_told(
    url: str, name: str, config: GovernorConfig, n: int, control_url: str, events: str, stop_key: str
) -> None:
    """Take ``n`` leases and hold them (heartbeat running) until ``stop_key``
    is set in the control Redis, every lease is lost, or the lifetime ends;
    then release what is still held and say how each lease fared."""
    watch = Watch(control_url, events, "holder")
    gov = Governor.from_url(url, name, config)
    leases = [gov.acquire(timeout=10, holder=f"holder/{os.getpid()}") for _ in range(n)]
    start = [(lease.fence, lease.epoch) for lease in leases]
    lost = [watch.entered(lease) for lease in leases]
    watch.emit(kind="holding", fences=[lease.fence for lease in leases], epoch=leases[0].epoch)
    deadline = time.monotonic() + LIFETIME
    while not _stop_requested(watch.control, stop_key) and time.monotonic() < deadline:
        if all(event.is_set() for event in lost):
            break
        time.sleep(0.05)
    fates = []
    for lease, (fence, epoch), seen_lost in zip(leases, start, lost, strict=True):
        was_lost = seen_lost.is_set() or not watch.leaving(lease)
        fates.append({"lost": was_lost, "fence": lease.fence, "first_fence": fence, "adopted": lease.epoch != epoch})
        try:
            lease.release()
        except GovernorError:
            pass
    watch.emit(kind="done", fates=fates)
    gov.close()
    watch.close()


def contend(
    url: str,
    name: str,
    config: GovernorConfig,
    control_url: str,
    events: str,
    role: str,
    threads: int,
    hold: float,
    acquire_timeout: float,
    go_key: str,
    stop_key: str,
    once: bool = False,
    report: bool = False,
    seed: int = 0,
) -> None:
    """``threads`` callers that acquire, hold for about ``hold`` seconds
    (0.5x-1.5x, or until the lease is seen lost) and release, over and over
    until ``stop_key`` is set (or once each, with ``once``).

    The governor object makes no call before ``go_key`` is set in the control
    Redis (an empty ``go_key``: start at once), so a test can start a process
    that has never seen the governor and let it call exactly when it wants.
    ``report``: release with a success report (``report(release=True)``, as
    ``call()`` does), so the adaptive policy sees the fleet's outcomes."""
    watch = Watch(control_url, events, role)
    gov = Governor.from_url(url, name, config)
    watch.emit(kind="ready")
    deadline = time.monotonic() + LIFETIME
    while go_key and not _stop_requested(watch.control, go_key) and time.monotonic() < deadline:
        time.sleep(0.002)
    watch.emit(kind="calling")
    errors: dict[str, int] = {}
    last_error: dict[str, str] = {}
    admitted = [0]
    lock = threading.Lock()

    def caller(rng: random.Random) -> None:
        while time.monotonic() < deadline and not _stop_requested(watch.control, stop_key):
            try:
                lease = gov.acquire(timeout=acquire_timeout, holder=f"{role}/{os.getpid()}")
            except AcquireTimeout:
                continue
            except GovernorError as error:
                with lock:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                    last_error[type(error).__name__] = f"{time.monotonic():.3f}: {error}"
                time.sleep(0.05)
                continue
            lost = watch.entered(lease)
            with lock:
                admitted[0] += 1
            lost.wait(hold * rng.uniform(0.5, 1.5))
            watch.leaving(lease)
            try:
                if report and not lease.lost:
                    gov.report(Outcome.SUCCESS, lease=lease, release=True)
                else:
                    lease.release()
            except (LeaseLost, GovernorError):
                pass
            if once:
                return

    rng = random.Random(seed)
    workers = [threading.Thread(target=caller, args=(random.Random(rng.random()),)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(LIFETIME)
    watch.emit(kind="done", admitted=admitted[0], errors=errors, last_error=last_error)
    gov.close()
    watch.close()
