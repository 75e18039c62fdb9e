"""The write-order witness (tests/support/write_order.py) finds what it is
for: tests/test_model.py runs every operation of its random runs through it,
so here it is shown failing a library that reads after its first write."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig, Outcome
from governor.core import Granted, Queued
from governor.scripts import library

from .conftest import FakeClock
from .support import write_order

RELEASED = "if not waiting then return {SCHEMA, 'released', removed} end"


@pytest.mark.parametrize(
    ("late", "found"),
    [
        ("fields.read_more('config', 'reserve')", "field reserve of .*:config first checked after the first write"),
        ("redis.call('ZCARD', KEY.aging)", "ZCARD of .*:aging after the first write, its type untold"),
        ("fail('BADSTATE', 'late')", "GOVERNOR_BADSTATE late after the first write"),
    ],
)
def test_the_witness_fails_a_call_that_could_fail_after_its_first_write(
    scratch_redis_url: str, late: str, found: str
) -> None:
    """release without waiters writes (ZREM of the lease) and returns; here
    it does one more thing after that write, each a way to fail half-way."""
    client: Any = redis.Redis.from_url(scratch_redis_url)
    gov = Governor(client, "witnessed", GovernorConfig(max_capacity=2), clock=FakeClock())
    try:
        lease = gov.acquire()
        assert RELEASED in library()
        write_order.load(client, write_order.witness(library().replace(RELEASED, f"{late}\n{RELEASED}")))
        call = gov._core.release(lease.id)
        keys = gov.keys.script_keys
        with pytest.raises(redis.exceptions.ResponseError, match=f"GOVERNOR_AFTERWRITE {found}"):
            client.fcall(write_order.function("release"), len(keys), *keys, *call.args)
        write_order.load(client)  # the library as it is: the same call passes
        reply = client.fcall(write_order.function("release"), len(keys), *keys, *gov._core.release("other").args)
        assert int(reply[0]) > 0 and reply[1] == b"released"
    finally:
        client.delete(*gov.keys.keys)
        gov.close()
        client.close()


@pytest.mark.parametrize("due", ["nothing", "reclaim", "aging"])
@pytest.mark.parametrize("via", ["release", "report"])
def test_a_hand_over_reads_what_it_uses_before_its_first_write_whatever_is_due(
    scratch_redis_url: str, via: str, due: str
) -> None:
    """A hand-over (a lease given back by release, or by a success's report,
    the queue's head granted) reads the head, its deadline and its record
    before its first write and grants from them when nothing due can move
    the queue; with a reclaim or an aging due it reads the config and the
    head again. Through the witness, on each path: the head is granted."""
    client: Any = redis.Redis.from_url(scratch_redis_url)
    clock = FakeClock()
    classes = ("high", "default", "low") if due == "aging" else ("default",)
    config = GovernorConfig(max_capacity=1, priorities=classes, default_priority="default", aging=1.0)
    gov = Governor(client, f"hand-over-{via}-{due}", config, clock=clock)
    keys = gov.keys.script_keys
    core = gov._core
    try:
        write_order.load(client)

        def run(call: Any) -> Any:
            return call.parse(client.fcall(write_order.function(call.script), len(keys), *keys, *call.args))

        run(core.init(holds_leases=False))
        holder = "h" + "0" * 31
        granted = run(core.acquire(holder, core.ask("holder"), wait=True))
        assert isinstance(granted, Granted)
        for waiter in ("w1" + "0" * 30, "w2" + "0" * 30):
            assert isinstance(run(core.acquire(waiter, core.ask("waiter"), wait=True)), Queued)
        # nothing due but what the case says (a new governor reclaims at its first chance)
        client.hset(gov.keys.state, mapping={"reclaim_due": 0 if due == "reclaim" else 2**52, "touch_due": 2**52})
        if due == "aging":
            clock.advance(2.0)  # both waiters waited aging: the head is in band 0 at the next grant
        if via == "release":
            assert run(core.release(holder)) is True
        else:
            assert run(core.report(Outcome.SUCCESS, None, holder, granted.fence, release=True)) is True
        assert client.zscore(gov.keys.leases, holder) is None
        assert client.zscore(gov.keys.leases, "w1" + "0" * 30) is not None  # the head, granted
        assert client.zscore(gov.keys.queue, "w2" + "0" * 30) is not None  # the next, still queued
    finally:
        client.delete(*gov.keys.keys)
        gov.close()
        client.close()
