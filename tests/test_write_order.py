"""The write-order witness (tests/support/write_order.py) finds what it is
for: tests/test_model.py runs every operation of its random runs through it,
so here it is shown failing a library that reads after its first write."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from governor import Governor, GovernorConfig
from governor.scripts import library

from .conftest import FakeClock
from .support import write_order

RELEASED = "if not waiting then return {SCHEMA, 'released', removed} end"


@pytest.mark.parametrize(
    ("late", "found"),
    [
        ("more('config', 'reserve')", "field reserve of .*:config first checked after the first write"),
        ("redis.call('ZCARD', K.aging)", "ZCARD of .*:aging after the first write, its type untold"),
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
