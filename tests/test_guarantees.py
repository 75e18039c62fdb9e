"""The bounds docs/guarantees.md states, read from the page and measured.

A holder in a worker process of its own (tests/support/recovery_workers.py,
recorded for the witness) is killed with SIGKILL while a caller of this
process waits for the slot (recorded by tests/support/holders.py). The
time the slot comes back is measured in Redis's own clock: from the
killed holder's last renewal (its lease's expiry in ``leases``, less the
TTL) to the waiter's grant (its lease's expiry, less the TTL).
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Any

import redis

from governor import Governor, GovernorConfig

from .support import recovery_workers
from .support.faultkit import Processes, figure
from .support.holders import Holders
from .support.servers import wait_until
from .support.witness import read_events

PAGE = Path(__file__).parent.parent / "docs" / "guarantees.md"


def stated_bound(fault: str, config: GovernorConfig) -> float:
    """The bound the page's row for ``fault`` states ("within `a` + `b` ..."), in
    seconds, for ``config``: the sum of the config fields it names."""
    row = next(line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {fault} |"))
    found = re.search(r"within (?:one )?(`\w+`(?: \+ `\w+`)*)", row)
    assert found is not None, f"the row for {fault!r} states no bound: {row}"
    return sum(float(getattr(config, field)) for field in re.findall(r"`(\w+)`", found.group(1)))


def test_a_killed_holders_slot_comes_back_within_the_bound_the_page_states(
    redis_url: str, name: str, control: redis.Redis, events: str, processes: Processes
) -> None:
    config = GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=2.0, poll=0.5, queue_ttl=2.0, redis_timeout=1.0)
    bound = stated_bound("a holder is killed (SIGKILL)", config)
    holder = processes.start(
        recovery_workers.hold_until_told, redis_url, name, config, 1, redis_url, events, f"{events}:stop"
    )
    wait_until(lambda: any(e["kind"] == "holding" for e in read_events(control, events)), 30, what="the holder")
    recorder = Holders()
    gov = Governor.from_url(redis_url, name, config)
    admin = redis.Redis.from_url(redis_url, socket_timeout=5)
    leases = gov.keys.leases
    granted: dict[str, Any] = {}

    def wait() -> None:
        lease = recorder.entered(gov.acquire(timeout=30, holder="waiter"))
        granted["expiry"] = admin.zscore(leases, lease.id)  # read at once: before any renewal
        granted["lease"] = lease

    waiter = threading.Thread(target=wait, daemon=True)
    try:
        waiter.start()
        wait_until(lambda: admin.zcard(gov.keys.queue) == 1, 10, what="the waiter in the queue")
        processes.signal(signal.SIGKILL, holder)
        held = [(m.decode(), s) for m, s in admin.zrange(leases, 0, -1, withscores=True) if m != b"~"]
        assert len(held) == 1, held
        last_renewal = held[0][1] / 1000 - config.lease_ttl
        waiter.join(timeout=30)
        assert "lease" in granted, "the waiter was never granted the killed holder's slot"
        grant = granted["expiry"] / 1000 - config.lease_ttl
        back = grant - last_renewal
        figure("a killed holder's slot came back after its last renewal", back)
        assert config.lease_ttl <= back <= bound, (back, bound)  # the stated bound, to the ms of Redis's clock
        recorder.left(granted["lease"])
        granted["lease"].release()
    finally:
        recorder.close()
        gov.close()
        admin.close()
