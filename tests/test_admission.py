"""Admission through the sync facade: blocking, FIFO, push wake-up,
capacity below in-flight, timeouts. Real threads; every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from governor import (
    AcquireTimeout,
    ConfigError,
    Governor,
    GovernorConfig,
    GovernorError,
    GovernorNotFound,
    Lease,
    Outcome,
)

from .support.servers import wait_until

MakeGov = Callable[..., Governor]


class Waiter(threading.Thread):
    """A thread blocked in acquire(); keeps the lease or the error."""

    def __init__(self, gov: Governor, timeout: float | None = 20, holder: str | None = None) -> None:
        super().__init__(daemon=True)
        self.gov, self.timeout, self.holder = gov, timeout, holder
        self.lease: Lease | None = None
        self.error: BaseException | None = None
        self.admitted_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.lease = self.gov.acquire(timeout=self.timeout, holder=self.holder)
            self.admitted_at = time.monotonic()
        except BaseException as error:  # noqa: BLE001 - reported to the test
            self.error = error


def queued(gov: Governor, n: int) -> None:
    wait_until(lambda: gov.status().queued == n, 10, what=f"{n} queued")


def test_full_gate_blocks_and_admits_on_release(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(policy="fixed", max_capacity=2))
    a, b = gov.acquire(timeout=5), gov.acquire(timeout=5)
    waiter = Waiter(gov)
    queued(gov, 1)
    assert waiter.lease is None
    a.release()
    waiter.join(10)
    assert waiter.lease is not None and not waiter.lease.lost
    st = gov.status()
    assert (st.in_flight, st.queued) == (2, 0)
    b.release()
    waiter.lease.release()
    assert gov.status().in_flight == 0


def test_waiters_are_admitted_in_fifo_order(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    first = gov.acquire(timeout=5)
    waiters = []
    for i in range(5):
        waiters.append(Waiter(gov, holder=f"w{i}"))
        queued(gov, i + 1)
    order = []
    current: Lease = first
    for _ in range(5):
        current.release()
        wait_until(lambda: any(w.lease is not None and w.holder not in order for w in waiters), 10, what="grant")
        nxt = next(w for w in waiters if w.lease is not None and w.holder not in order)
        order.append(nxt.holder)
        assert nxt.lease is not None
        current = nxt.lease
    current.release()
    assert order == [f"w{i}" for i in range(5)]


def test_a_waiter_is_woken_by_push_not_by_polling(make_gov: MakeGov) -> None:
    # The safety-net poll is 30 s: an admission within seconds can only come from the push.
    gov = make_gov(GovernorConfig(max_capacity=1, poll=30, queue_ttl=60))
    holder = gov.acquire(timeout=5)
    waiter = Waiter(gov)
    queued(gov, 1)
    released_at = time.monotonic()
    holder.release()
    waiter.join(10)
    assert waiter.lease is not None
    assert waiter.admitted_at - released_at < 10
    waiter.lease.release()


@pytest.mark.parametrize("hold", ["retry-after", "timed pause"])
def test_a_queue_held_back_for_a_while_is_admitted_when_the_time_is_up(make_gov: MakeGov, hold: str) -> None:
    # The slot comes free during a hold (or a timed pause): that release may
    # not grant, and nothing else happens after it. The waiters must not sit
    # until their 30 s poll: the release announces when to ask again.
    gov = make_gov(GovernorConfig(max_capacity=1, poll=30, queue_ttl=60))
    holder = gov.acquire(timeout=5)
    waiter = Waiter(gov)
    queued(gov, 1)
    if hold == "retry-after":
        gov.report(Outcome.RATE_LIMITED, retry_after=0.3)
    else:
        gov.pause("maintenance", duration=0.3)
    released_at = time.monotonic()
    holder.release()
    assert gov.status().in_flight == 0 and waiter.lease is None  # held back
    waiter.join(10)
    assert waiter.lease is not None
    assert waiter.admitted_at - released_at < 10
    waiter.lease.release()


def test_a_caller_arriving_during_a_hold_is_admitted_when_it_ends(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, poll=30, queue_ttl=60))
    gov.report(Outcome.RATE_LIMITED, retry_after=0.3)
    started = time.monotonic()
    lease = gov.acquire(timeout=10)
    assert time.monotonic() - started < 10
    lease.release()


def test_capacity_may_drop_below_in_flight(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(policy="fixed", max_capacity=4))
    leases = [gov.acquire(timeout=5) for _ in range(4)]
    st = gov.set_max_capacity(2)
    assert (st.capacity, st.in_flight) == (2, 4)  # holders keep running
    waiter = Waiter(gov)
    queued(gov, 1)
    leases[0].release()
    leases[1].release()  # 2 in flight, capacity 2: still no room
    # A release grants within its own script: a grant would show here as a third lease.
    st = gov.status()
    assert (st.in_flight, st.queued) == (2, 1)
    assert waiter.lease is None
    leases[2].release()  # 1 in flight < 2
    waiter.join(10)
    assert waiter.lease is not None
    waiter.lease.release()
    leases[3].release()


def test_timeout_gives_up_the_place(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    holder = gov.acquire(timeout=5)
    started = time.monotonic()
    with pytest.raises(AcquireTimeout, match=r"no lease within 0\.3 s"):
        gov.acquire(timeout=0.3)
    assert time.monotonic() - started < 5
    st = gov.status()
    assert (st.in_flight, st.queued) == (1, 0)
    holder.release()
    assert gov.status().in_flight == 0


def test_timeout_zero_and_try_acquire(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    lease = gov.try_acquire(holder="h")
    assert lease is not None and lease.holder == "h"
    assert gov.try_acquire() is None
    with pytest.raises(AcquireTimeout):
        gov.acquire(timeout=0)
    lease.release()
    assert gov.status().queued == 0


def test_paused_governor_queues_and_resume_admits(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=3))
    gov.pause("key rotation")
    waiter = Waiter(gov)
    queued(gov, 1)
    with pytest.raises(AcquireTimeout, match="paused: key rotation"):
        gov.acquire(timeout=0.5)
    gov.resume()
    waiter.join(10)
    assert waiter.lease is not None
    waiter.lease.release()


def test_release_is_idempotent_and_context_manager_releases(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    with gov.acquire(timeout=5) as lease:
        assert gov.status().in_flight == 1
    assert lease.released and gov.status().in_flight == 0
    lease.release()
    lease.release()
    other = gov.acquire(timeout=5)
    lease.release()  # a stale release never touches someone else's lease
    assert gov.status().in_flight == 1
    other.release()


def test_context_manager_releases_when_the_body_raises(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    with pytest.raises(ZeroDivisionError), gov.acquire(timeout=5):
        1 / 0  # noqa: B018
    assert gov.status().in_flight == 0


def test_fences_increase_and_ids_are_unguessable(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(policy="fixed", max_capacity=50))
    leases = [gov.acquire(timeout=5) for _ in range(50)]
    fences = [lease.fence for lease in leases]
    assert fences == sorted(fences) and len(set(fences)) == 50
    ids = {lease.id for lease in leases}
    assert len(ids) == 50 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    for lease in leases:
        lease.release()


def test_bad_arguments_are_refused_clearly(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=1))
    with pytest.raises(ConfigError, match="timeout"):
        gov.acquire(timeout=-1)
    with pytest.raises(ConfigError, match="holder"):
        gov.acquire(holder="x" * 201)
    with pytest.raises(ConfigError, match="max_capacity"):
        gov.set_max_capacity(0)
    with pytest.raises(ConfigError, match="reason"):
        gov.pause("")
    with pytest.raises(ConfigError, match="retry_after"):
        gov.report(Outcome.RATE_LIMITED, retry_after=float("nan"))
    with pytest.raises(ConfigError, match="outcome"):
        gov.report("success")  # type: ignore[arg-type]
    assert gov.status().in_flight == 0


def test_a_lease_belongs_to_its_governor_object(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    other = make_gov(GovernorConfig(max_capacity=2))
    lease = gov.acquire(timeout=5)
    with pytest.raises(ConfigError, match="belongs to"):
        other.report(Outcome.SUCCESS, lease=lease)
    lease.release()


def test_closed_governor_refuses_new_work(make_gov: MakeGov) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    gov.close()
    with pytest.raises(GovernorError, match="closed"):
        gov.acquire(timeout=1)


def test_operator_calls_can_refuse_to_create_a_governor(make_gov: MakeGov, sync_client: Any) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    for call in (
        lambda: gov.status(create=False),
        lambda: gov.set_max_capacity(3, create=False),
        lambda: gov.pause("x", create=False),
        lambda: gov.resume(create=False),
        lambda: gov.reset(create=False),
    ):
        with pytest.raises(GovernorNotFound):
            call()
    assert sync_client.exists(gov.keys.state) == 0
