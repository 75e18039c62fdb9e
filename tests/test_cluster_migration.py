"""A governor's cluster slot migrated while a fleet runs on it.

The slot is moved by hand, as ``redis-cli --cluster reshard`` does it
(SETSLOT IMPORTING / MIGRATING, MIGRATE of the keys, SETSLOT NODE), one key
at a time and slowly, so the keys are split for about a second. A witness of
the test's own (tests/support/holders.py) counts the holders and fences;
the callers' errors are collected: each names the migration (``Migrating``,
a GovernorUnavailable), none is a ConfigError, and the fleet is admitted
again once the slot has moved (after the recovery hold a state that came
from another server takes: the longest lease TTL).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
import redis.cluster

from governor import AcquireTimeout, ConfigError, Governor, GovernorConfig, GovernorError

from .support.cluster import RedisCluster
from .support.faultkit import figure
from .support.holders import Holders

pytestmark = pytest.mark.slow

CONFIG = GovernorConfig(max_capacity=4, lease_ttl=1.5, poll=0.2, queue_ttl=1.0, redis_timeout=1.0, policy="fixed")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster().start()
    yield c
    c.cleanup()


def node_ids(client: redis.Redis) -> dict[int, str]:
    """port -> node id, from CLUSTER NODES."""
    out = {}
    for line in str(client.execute_command("CLUSTER", "NODES")).splitlines():  # type: ignore[no-untyped-call]
        parts = line.split()
        out[int(parts[1].split(":")[1].split("@")[0])] = parts[0]
    return out


def migrate_slowly(cluster: RedisCluster, name: str, pause: float) -> tuple[int, int]:
    """Move governor ``name``'s slot to another node, one key every ``pause`` s."""
    admin = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0], decode_responses=True)
    keys = Governor(admin, name).keys
    slot = admin.keyslot(keys.state)
    source_port = int(admin.get_node_from_key(keys.state).port)  # type: ignore[no-untyped-call]
    admin.close()
    target_port = next(p for p in cluster.ports if p != source_port)
    source = redis.Redis(port=source_port, decode_responses=True)
    target = redis.Redis(port=target_port, decode_responses=True)
    ids = node_ids(source)
    target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source_port])  # type: ignore[no-untyped-call]
    source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target_port])  # type: ignore[no-untyped-call]
    while True:
        batch = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)  # type: ignore[no-untyped-call]
        if not batch:
            break
        source.execute_command("MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *batch)  # type: ignore[no-untyped-call]
        time.sleep(pause)
    for port in cluster.ports:
        node = redis.Redis(port=port)
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target_port])  # type: ignore[no-untyped-call]
        node.close()
    source.close()
    target.close()
    return source_port, target_port


def test_a_migrating_slot_fails_fast_naming_the_migration_and_never_exceeds(cluster: RedisCluster) -> None:
    name = f"moving-{time.monotonic_ns()}"  # (no "migrat" in the name: the messages are searched for it)
    holders = Holders()
    errors: Counter[str] = Counter()
    messages: list[str] = []
    error_times: list[float] = []
    stop = threading.Event()
    gov = Governor.from_url(cluster.url, name, CONFIG)

    def caller() -> None:
        while not stop.is_set():
            try:
                lease = holders.entered(gov.acquire(timeout=1.0, holder="caller"), "caller")
            except AcquireTimeout:
                continue
            except GovernorError as error:
                errors[type(error).__name__] += 1
                messages.append(str(error))
                error_times.append(time.monotonic())
                if isinstance(error, ConfigError):
                    errors["ConfigError"] += 1
                time.sleep(0.02)
                continue
            time.sleep(0.1)
            holders.left(lease)
            try:
                lease.release()
            except GovernorError as error:
                errors[f"release {type(error).__name__}"] += 1
                messages.append(str(error))

    threads = [threading.Thread(target=caller) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        started = time.monotonic()
        migrate_slowly(cluster, name, pause=0.1)
        moved = time.monotonic()
        figure("slot migration: took", moved - started)
        time.sleep(2 * CONFIG.lease_ttl + 1.0)  # past the hold of a state that came from another node
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        gov.close()
    seen = holders.witness(CONFIG.max_capacity)
    after = [e for e in holders.events if e["kind"] == "entered" and e["t"] > moved]
    print(f"\nslot migration: {seen}; errors {dict(errors)}; admissions after: {len(after)}")
    print("first messages:", messages[:3])
    if error_times:
        print(f"errors from {min(error_times) - started:.3f} s to {max(error_times) - started:.3f} s after the start")
    before = [e for e in holders.events if e["kind"] == "entered" and e["t"] < started]
    print(f"admissions before the migration: {len(before)}")
    assert seen.peak <= CONFIG.max_capacity and not seen.shared, f"the witness saw {seen}"
    assert errors["ConfigError"] == 0 and errors["WrongNode"] == 0, dict(errors)
    assert all("migrat" in m for m in messages), messages[:5]
    assert after, "the fleet is admitted again once the slot has moved"


def test_migrating_is_a_governor_unavailable() -> None:
    from governor import Migrating

    assert issubclass(Migrating, GovernorError) and not issubclass(Migrating, ConfigError)


def test_a_slot_moved_intact_from_a_live_primary_holds_nobody(cluster: RedisCluster) -> None:
    """Two holders, the slot moved (MIGRATE, key by key, no call running
    while the keys are split). Before: the moved state was stamped by
    another node, a loss: a hold of ttl_max. Now the state names the node it
    was stamped on; one stamped by a primary this node sees alive was moved
    intact: no hold, the holders keep their fences, a newcomer takes the
    rest of the capacity at once, no more."""
    name = f"moved-{time.monotonic_ns()}"
    holders = Holders()
    gov = Governor.from_url(cluster.url, name, CONFIG)
    newcomer = Governor.from_url(cluster.url, name, CONFIG)
    try:
        leases = [holders.entered(gov.acquire(timeout=5, holder="a"), "a") for _ in range(2)]
        fences = [lease.fence for lease in leases]
        migrate_slowly(cluster, name, pause=0.0)
        got = [newcomer.try_acquire() for _ in range(3)]
        st = newcomer.status()
        assert not st.recovery_hold, st.hold_reason
        assert [lease is not None for lease in got] == [True, True, False]
        for lease in got:
            if lease is not None:
                holders.entered(lease, "newcomer")
        gov.renew()
        assert [lease.fence for lease in leases] == fences and not any(lease.lost for lease in leases)
        seen = holders.witness(CONFIG.max_capacity)
        assert seen.peak <= CONFIG.max_capacity and not seen.shared, str(seen)
        for lease in [*leases, *got]:
            if lease is not None:
                holders.left(lease)
                lease.release()
    finally:
        gov.close()
        newcomer.close()
        holders.close()
