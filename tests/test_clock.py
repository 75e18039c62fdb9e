"""The Redis host's clock is the only clock, and it is trusted:
what a jump of it does to the holders, shown with an injected clock that
stands for Redis TIME while the holders keep their own monotonic time."""

from __future__ import annotations

import time
from collections.abc import Callable

from governor import Governor, GovernorConfig

from .conftest import FakeClock

MakeGov = Callable[..., Governor]


def _holder_keeps_own_time(gov: Governor) -> None:
    """Lease deadlines on the holder's monotonic clock, not on Redis's."""
    gov._core.local_now = time.monotonic  # type: ignore[method-assign]


def test_a_forward_jump_over_grants_until_the_holders_next_renewal(make_gov: MakeGov, clock: FakeClock) -> None:
    config = GovernorConfig(policy="fixed", max_capacity=2, lease_ttl=30)
    holder_gov, other = make_gov(config, clock=clock), make_gov(config, clock=clock)
    _holder_keeps_own_time(holder_gov)
    held = [holder_gov.acquire(timeout=5) for _ in range(2)]
    assert other.try_acquire() is None  # full

    clock.advance(config.lease_ttl + 1)  # the Redis host's clock jumps forward past every lease
    # Both leases ended in Redis while their holders still believe: the excess.
    extra = [other.try_acquire(), other.try_acquire()]
    assert all(lease is not None for lease in extra)
    witness = sum(not lease.lost for lease in held) + sum(lease is not None and not lease.lost for lease in extra)
    assert witness == 4  # twice the capacity, until the holders renew

    holder_gov.renew()  # the next heartbeat tells them
    assert all(lease.lost for lease in held)
    assert sum(not lease.lost for lease in held) + len(extra) == config.max_capacity
    for lease in extra:
        assert lease is not None
        lease.release()


def test_a_backward_jump_keeps_leases_longer(make_gov: MakeGov, clock: FakeClock) -> None:
    config = GovernorConfig(max_capacity=1, lease_ttl=30)
    crashed, other = make_gov(config, clock=clock), make_gov(config, clock=clock)
    crashed.acquire(timeout=5)  # never renewed again: its holder crashed
    clock.advance(-10)  # the Redis host's clock jumps back
    clock.advance(config.lease_ttl + 1)  # one TTL of Redis time later the lease still lives (10 s more)
    assert other.try_acquire() is None
    clock.advance(10)
    lease = other.try_acquire()
    assert lease is not None
    lease.release()
