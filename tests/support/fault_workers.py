"""Process entry points for the fault tests (tests/test_faults.py).

Each function runs in its own process (multiprocessing, "spawn") so the
test can SIGKILL, SIGSTOP and SIGCONT it. A worker tells the test what it
does through a list in a Redis the faults do not touch (the *control*
Redis): ``RPUSH <events> json``. Holders count themselves in a counter
there while they hold (``INCR`` / ``DECR``), so the test can compare the
number of simultaneous holders across processes with the capacity.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
import time
from typing import Any

import redis

from governor import AcquireTimeout, Governor, GovernorConfig, GovernorError, GovernorUnavailable, LeaseLost, Outcome


def control_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)


def emit(control: redis.Redis, events: str, **event: Any) -> None:
    event.setdefault("pid", os.getpid())
    event.setdefault("t", time.monotonic())
    control.rpush(events, json.dumps(event))


def hold_forever(url: str, name: str, config: GovernorConfig, n: int, control_url: str, events: str) -> None:
    """Take ``n`` leases, say so, and hold them (heartbeat running) until killed."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    leases = [gov.acquire(timeout=10, holder=f"hold-forever/{os.getpid()}") for _ in range(n)]
    emit(control, events, kind="holding", fences=[lease.fence for lease in leases], ids=[lease.id for lease in leases])
    while True:
        time.sleep(0.05)


def _forked_child(url: str, gov: Governor, control_url: str, events: str) -> None:
    control = control_client(control_url)
    lease = gov.acquire(timeout=10, holder=f"child/{os.getpid()}")
    emit(control, events, kind="child-holding", id=lease.id)
    while True:
        time.sleep(0.05)


def hold_and_fork(url: str, name: str, config: GovernorConfig, control_url: str, events: str) -> None:
    """Hold a lease, then fork a child that uses the same governor object
    (as a pre-fork server or a fork-started pool would) and hold on."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    lease = gov.acquire(timeout=10, holder=f"parent/{os.getpid()}")
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(url, gov, control_url, events))
    child.start()
    emit(control, events, kind="holding", id=lease.id, child=child.pid)
    while True:
        time.sleep(0.05)


def stall_then_clean_up(url: str, name: str, config: GovernorConfig, control_url: str, events: str) -> None:
    """Hold a lease; once it is lost (the test stopped us past its TTL),
    report and release late, say what happened, and exit."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    lease = gov.acquire(timeout=10, holder=f"stalled/{os.getpid()}")
    emit(control, events, kind="holding", id=lease.id, fence=lease.fence)
    deadline = time.monotonic() + 60
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.01)
    outcome = "recorded"
    try:
        gov.report(Outcome.RATE_LIMITED, lease=lease)
    except LeaseLost:
        outcome = "lease-lost"
    lease.release()
    emit(control, events, kind="done", lost=lease.lost, report=outcome)
    gov.close()


def wait_in_queue(url: str, name: str, config: GovernorConfig, control_url: str, events: str) -> None:
    """Queue for a lease; say whether it is known lost the moment acquire returns."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    emit(control, events, kind="queuing")
    lease = gov.acquire(timeout=60, holder=f"waiter/{os.getpid()}")
    lost_at_return = lease.lost
    emit(control, events, kind="granted", id=lease.id, fence=lease.fence, lost_at_return=lost_at_return)
    time.sleep(config.renew_interval * 2 + 0.2)
    emit(control, events, kind="later", lost=lease.lost)
    lease.release()
    gov.close()


def fleet_worker(
    url: str,
    name: str,
    config: GovernorConfig,
    control_url: str,
    counter: str,
    events: str,
    threads: int,
    seconds: float,
    seed: int,
) -> None:
    """Threads that acquire, count themselves while holding, report a random
    outcome and release, riding out Redis faults, for ``seconds``.

    Each admission is logged with the count of simultaneous holders seen
    right after joining (``INCR``), whether the lease is local (admitted by
    the fallback limit) and when (monotonic), so the test can judge each
    phase of the run."""
    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    gov.status()
    emit(control, events, kind="ready")
    while not control.exists(f"{events}:go"):  # all hosts start together
        time.sleep(0.01)
    stop = time.monotonic() + seconds
    rng = random.Random(seed)
    log: list[dict[str, Any]] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def agent(agent_seed: int) -> None:
        local_rng = random.Random(agent_seed)
        while time.monotonic() < stop:
            try:
                lease = gov.acquire(timeout=local_rng.uniform(0.2, 1.5), holder=f"fleet/{os.getpid()}")
            except AcquireTimeout:
                continue
            except GovernorError as error:
                with lock:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                time.sleep(0.05)
                continue
            try:
                holding = control.incr(counter)
                with lock:
                    log.append({"t": time.monotonic(), "holding": holding, "local": lease.local})
                time.sleep(local_rng.uniform(0.0, 0.03))
                control.decr(counter)
                outcome = local_rng.choice([Outcome.SUCCESS] * 6 + [Outcome.ERROR])
                try:
                    gov.report(outcome, lease=lease)
                except (LeaseLost, GovernorUnavailable):
                    pass
            finally:
                try:
                    lease.release()
                except GovernorError:
                    pass

    workers = [threading.Thread(target=agent, args=(rng.random(),)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + 60)
    gov.close()
    emit(control, events, kind="fleet-done", admissions=log, errors=errors)


def chaos_worker(
    url: str, name: str, config: GovernorConfig, control_url: str, counter: str, threads: int, seed: int
) -> None:
    """Random acquire / report / release until killed or told to stop
    (SIGTERM). While holding, the worker's count sits in ``counter`` under
    its pid (HINCRBY), so the test can discount a worker it killed."""
    import signal

    control = control_client(control_url)
    gov = Governor.from_url(url, name, config)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    pid = str(os.getpid())
    over = f"{counter}:over"
    count_script = control.register_script(
        # join, then the number of holders of the workers still counted: a
        # worker listed in KEYS[2] is stopped for good (its leases expire)
        "redis.call('HINCRBY', KEYS[1], ARGV[1], 1) "
        "local n, all = 0, redis.call('HGETALL', KEYS[1]) "
        "for i = 1, #all, 2 do "
        "if redis.call('SISMEMBER', KEYS[2], all[i]) == 0 then n = n + tonumber(all[i + 1]) end end "
        "return n"
    )

    def agent(agent_seed: int) -> None:
        rng = random.Random(agent_seed)
        while not stopping.is_set():
            try:
                lease = gov.acquire(timeout=rng.uniform(0.05, 1.0), holder=f"chaos/{pid}")
            except AcquireTimeout:
                continue
            except GovernorError:
                time.sleep(0.05)
                continue
            try:
                holding = int(count_script(keys=[counter, f"{counter}:stopped"], args=[pid]))
                if holding > config.max_capacity:
                    control.rpush(over, json.dumps({"pid": pid, "holding": holding, "fence": lease.fence}))
                time.sleep(rng.uniform(0.0, 0.05))
                control.hincrby(counter, pid, -1)
                outcome = rng.choice([Outcome.SUCCESS] * 8 + [Outcome.RATE_LIMITED, Outcome.ERROR])
                try:
                    gov.report(outcome, lease=lease)
                except GovernorError:
                    pass
            finally:
                try:
                    lease.release()
                except GovernorError:
                    pass

    rng = random.Random(seed)
    workers = [threading.Thread(target=agent, args=(rng.random(),), daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    gov.close()
