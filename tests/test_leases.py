"""Leases: TTL, renewal, the background heartbeat, loss and fencing."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from governor import Governor, GovernorConfig
from governor.replies import default_holder

from .support.servers import wait_until

MakeGov = Callable[..., Governor]


def test_renewal_keeps_a_lease_alive_past_its_ttl(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(max_capacity=2, lease_ttl=30), clock=clock)
    lease = gov.acquire(timeout=5)
    for _ in range(5):  # 100 s in all, renewed every 20 s
        clock.advance(20)
        gov.renew()
        assert not lease.lost
    assert gov.status().in_flight == 1
    lease.release()
    assert gov.status().in_flight == 0


def test_an_unrenewed_lease_expires_and_its_slot_comes_back(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(max_capacity=1, lease_ttl=30), clock=clock)
    crashed = gov.acquire(timeout=5)  # its holder dies: nobody renews
    assert gov.try_acquire() is None
    clock.advance(29.9)
    assert gov.try_acquire() is None
    clock.advance(0.2)
    assert gov.status().in_flight == 0
    successor = gov.try_acquire()
    assert successor is not None and successor.fence > crashed.fence
    gov.renew()  # the heartbeat finds the old lease gone
    assert crashed.lost and not successor.lost
    crashed.release()  # a late release touches nothing of the successor's
    assert gov.status().in_flight == 1
    successor.release()


def test_a_lease_is_assumed_lost_when_no_renewal_got_through_within_its_ttl(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    gov = make_gov(GovernorConfig(max_capacity=1, lease_ttl=30), clock=clock)
    lease = gov.acquire(timeout=5)
    clock.advance(30.5)  # no renewal was attempted: the holder cannot know it still holds
    assert lease.lost


def test_background_heartbeat_renews_in_real_time(make_gov: MakeGov) -> None:
    # A heartbeat every 0.5 s: a 1 s stall of the process (a loaded CI machine) stays within the TTL.
    gov = make_gov(GovernorConfig(max_capacity=1, lease_ttl=1.5, poll=0.2, queue_ttl=1))
    lease = gov.acquire(timeout=5)
    deadline = time.monotonic() + 5.0  # more than three TTLs
    while time.monotonic() < deadline:
        assert not lease.lost
        time.sleep(0.1)
    assert gov.status().in_flight == 1
    lease.release()


def test_threads_starting_together_share_one_background_worker(make_gov: MakeGov) -> None:
    """The first calls of 16 threads at once start the heartbeat once: a
    worker per thread would hold a pub/sub connection and a script
    connection each, and run the pool dry."""
    gov = make_gov(GovernorConfig(max_capacity=16))
    go = threading.Barrier(16)

    def first_call() -> None:
        go.wait()
        gov.acquire(timeout=5).release()

    threads = [threading.Thread(target=first_call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    workers = [t for t in threading.enumerate() if t.name == f"governor:{gov.name}"]
    assert len(workers) == 1, f"{len(workers)} background workers for one governor"


def test_closed_governor_stops_renewing_and_the_slot_returns(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1, lease_ttl=0.5, poll=0.2, queue_ttl=1))
    watcher = make_gov(GovernorConfig(max_capacity=1, lease_ttl=0.5, poll=0.2, queue_ttl=1))
    gov.acquire(timeout=5)
    gov.close()  # as if the process died: no release, no heartbeat
    wait_until(lambda: watcher.status().in_flight == 0, 5, what="the expired lease to stop counting")
    lease = watcher.acquire(timeout=5)
    lease.release()


def test_report_can_release_in_the_same_call(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from governor import LeaseReported, Outcome

    gov = make_gov(GovernorConfig(max_capacity=2), clock=clock)
    lease = gov.acquire(timeout=5)
    gov.report(Outcome.SUCCESS, lease=lease, release=True)
    assert lease.released
    st = gov.status()
    assert (st.in_flight, st.window_attempts) == (0, 1)
    lease.release()  # idempotent
    with pytest.raises(LeaseReported):  # a lease carries one outcome
        gov.report(Outcome.SUCCESS, lease=lease)
    assert gov.status().window_attempts == 1


def test_a_lost_lease_reported_with_release_is_cleaned_up(make_gov: MakeGov, clock) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from governor import LeaseLost, Outcome

    gov = make_gov(GovernorConfig(max_capacity=2, lease_ttl=10), clock=clock)
    lease = gov.acquire(timeout=5)
    clock.advance(11)
    with pytest.raises(LeaseLost):
        gov.report(Outcome.SUCCESS, lease=lease, release=True)
    st = gov.status()
    assert (st.in_flight, st.window_attempts) == (0, 0)
    assert lease.released and lease.lost


def test_the_default_holder_names_this_host_and_process_even_in_a_forked_child() -> None:
    """The label is made once per process: a child forked after the parent
    made it names itself, not its parent."""
    for label in (default_holder,):
        assert label() == f"{socket.gethostname()}/{os.getpid()}"
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child: tell its label and leave at once
            os.write(write, label().encode())
            os._exit(0)
        os.close(write)
        told = os.read(read, 512).decode()
        os.close(read)
        os.waitpid(child, 0)
        assert told == f"{socket.gethostname()}/{child}"
