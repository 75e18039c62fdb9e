"""The governor on a Redis Cluster: a private three-node
cluster (tests/support/cluster.py), driven through ``redis.cluster.RedisCluster``
and ``redis.asyncio.cluster.RedisCluster``.

Every key of a governor shares one hash slot (checked by the server with
``CLUSTER KEYSLOT``), so each script runs on one node; grants reach
waiters through pub/sub, which a cluster forwards to every node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

from governor import AsyncGovernor, Governor, GovernorConfig, Outcome
from governor.core import new_id
from governor.protocol import governor_keys
from governor.scripts import function_name

from .conftest import FakeClock
from .support.cluster import RedisCluster
from .support.servers import wait_until

pytestmark = pytest.mark.slow

#: the safety-net poll is 30 s: an admission within seconds can only come from the pub/sub push
CONFIG = GovernorConfig(max_capacity=1, lease_ttl=3.0, poll=30.0, queue_ttl=60.0, redis_timeout=2.0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster().start()
    yield c
    c.cleanup()


@pytest.fixture
def client(cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    c = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0], socket_timeout=5)
    yield c
    c.close()


def node_of(client: redis.cluster.RedisCluster, key: str) -> int:
    return int(client.get_node_from_key(key).port)  # type: ignore[no-untyped-call]


def test_every_key_of_a_governor_maps_to_one_slot(client: redis.cluster.RedisCluster) -> None:
    for name in ("openai", "anthropic/claude", "acct:42", "a-b_c.d@e"):
        keys = governor_keys(name)
        slots = {client.cluster_keyslot(key) for key in (*keys.keys, keys.channel)}
        assert len(slots) == 1, f"{name}: keys spread over slots {slots}"


def _exercise(gov: Governor) -> None:
    """Acquire with a real wait (a grant pushed over pub/sub), report, renew,
    status, release."""
    holder = gov.acquire(timeout=10, holder="first")
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(gov.acquire(timeout=20, holder="second")), daemon=True)
    waiter.start()
    wait_until(lambda: gov.status().queued == 1, 10, what="a queued waiter")
    gov.report(Outcome.SUCCESS, lease=holder)
    gov.report(Outcome.RATE_LIMITED, retry_after=0.001)
    gov.renew()
    released = time.monotonic()
    holder.release()
    waiter.join(15)
    assert got and got[0].fence > holder.fence and not got[0].lost
    assert time.monotonic() - released < 5  # pushed, not polled
    gov.renew()
    st = gov.status()
    assert (st.in_flight, st.queued, st.window_attempts) == (1, 0, 2)
    got[0].release()
    assert gov.status().in_flight == 0


def test_the_sync_facade_works_through_redis_cluster(client: redis.cluster.RedisCluster) -> None:
    gov = Governor(client, f"cluster-{uuid.uuid4().hex[:8]}", CONFIG)
    try:
        _exercise(gov)
    finally:
        gov.close()


def test_governors_spread_over_the_nodes(cluster: RedisCluster, client: redis.cluster.RedisCluster) -> None:
    by_node: dict[int, str] = {}
    i = 0
    while len(by_node) < len(cluster.ports):
        name = f"spread-{i}"
        by_node.setdefault(node_of(client, governor_keys(name).state), name)
        i += 1
    for port, name in by_node.items():
        gov = Governor(client, name, CONFIG)
        try:
            _exercise(gov)
            gov.status()
            node = redis.Redis(port=port)
            assert node.exists(gov.keys.state) == 1  # the state lives on the node that owns the slot
            node.close()
        finally:
            client.delete(*gov.keys.keys)
            gov.close()


async def test_the_asyncio_facade_works_through_redis_cluster(cluster: RedisCluster) -> None:
    aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[1], socket_timeout=5)
    await aclient.initialize()  # see the next test: the worker's first SUBSCRIBE needs the slot map
    gov = AsyncGovernor(aclient, f"acluster-{uuid.uuid4().hex[:8]}", CONFIG)
    try:
        holder = await gov.acquire(timeout=10)
        task = asyncio.create_task(gov.acquire(timeout=20))
        deadline = asyncio.get_running_loop().time() + 10
        while (await gov.status()).queued != 1:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        await gov.report(Outcome.SUCCESS, lease=holder)
        await gov.renew()
        await holder.release()
        lease = await asyncio.wait_for(task, 5)  # pushed: the poll is 30 s
        assert lease.fence > holder.fence
        st = await gov.status()
        assert (st.in_flight, st.queued) == (1, 0)
        await lease.release()
        assert (await gov.status()).in_flight == 0
    finally:
        await gov.aclose()
        await aclient.aclose()


def test_from_url_works_on_a_cluster(cluster: RedisCluster, client: redis.cluster.RedisCluster) -> None:
    gov = Governor.from_url(cluster.url, elsewhere(cluster, client, "elsewhere"), CONFIG)
    try:
        _exercise(gov)
    finally:
        gov.close()


def elsewhere(cluster: RedisCluster, client: redis.cluster.RedisCluster, prefix: str) -> str:
    """A governor name whose slot another node than from_url's (the first) serves."""
    names = (f"{prefix}-{uuid.uuid4().hex[:6]}" for _ in range(1000))
    return next(n for n in names if node_of(client, governor_keys(n).state) != cluster.ports[0])


def test_switching_to_a_cluster_client_leaves_other_callers_calls_alone(
    cluster: RedisCluster, client: redis.cluster.RedisCluster
) -> None:
    """from_url starts on a standalone client; the first redirection switches
    to a cluster client while other threads may be mid-call on the standalone
    one: it is closed with the governor, not under them (a reply they wait
    for is still read)."""
    gov = Governor.from_url(cluster.url, elsewhere(cluster, client, "switch"), CONFIG)
    standalone = gov._connection.client
    try:
        in_flight = standalone.connection_pool.get_connection()
        in_flight.send_command("CLIENT", "ID")  # another caller's call, its reply not read yet
        gov.acquire(timeout=5).release()  # redirected: a cluster client from now on
        assert isinstance(gov._connection.client, redis.cluster.RedisCluster)
        connection_id = int(in_flight.read_response())
        standalone.connection_pool.release(in_flight)
    finally:
        gov.close()
    first = redis.Redis(port=cluster.ports[0], socket_timeout=5)
    assert not first.client_list(client_id=[connection_id]), "the governor's close closed the standalone client"
    first.close()


async def test_an_asyncio_switch_to_a_cluster_client_leaves_other_tasks_calls_alone(
    cluster: RedisCluster, client: redis.cluster.RedisCluster
) -> None:
    gov = AsyncGovernor.from_url(cluster.url, elsewhere(cluster, client, "aswitch"), CONFIG)
    standalone = gov._connection.client
    try:
        in_flight = await standalone.connection_pool.get_connection()
        await in_flight.send_command("CLIENT", "ID")
        await (await gov.acquire(timeout=5)).release()
        assert isinstance(gov._connection.client, redis.asyncio.cluster.RedisCluster)
        connection_id = int(await in_flight.read_response())
        await standalone.connection_pool.release(in_flight)
    finally:
        await gov.aclose()
    first = redis.Redis(port=cluster.ports[0], socket_timeout=5)
    assert not first.client_list(client_id=[connection_id]), "the governor's close closed the standalone client"
    first.close()


def test_a_cluster_node_refuses_a_call_with_the_state_key_alone(
    cluster: RedisCluster, client: redis.cluster.RedisCluster
) -> None:
    """On a cluster a call passes every key, so that a migrating slot is
    refused before it runs: the state key alone (a standalone client on the
    node serving the slot, as from_url starts) is answered GOVERNOR_KEYS with
    nothing written, and the governor's connection then passes every key."""
    name = f"keys-{uuid.uuid4().hex[:6]}"
    keys = governor_keys(name)
    serving = redis.Redis(port=node_of(client, keys.state), socket_timeout=5)
    gov = Governor(serving, name, CONFIG)
    try:
        assert not gov._connection.every_key
        gov.acquire(timeout=5).release()  # answered GOVERNOR_KEYS once, sent again with every key
        assert gov._connection.every_key
        before = {key: serving.dump(key) for key in keys.keys}
        call = gov._core.acquire(new_id(), gov._core.ask("alone"), wait=False)
        with pytest.raises(redis.exceptions.ResponseError, match="GOVERNOR_KEYS this Redis is a cluster node"):
            serving.fcall(function_name(call.script), 1, keys.state, *call.args)
        assert {key: serving.dump(key) for key in keys.keys} == before
        assert gov.status().in_flight == 0
    finally:
        gov.close()
        serving.close()


async def test_the_first_acquire_on_a_fresh_asyncio_cluster_client_does_not_wait(
    cluster: RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[2], socket_timeout=5)
    gov = AsyncGovernor(aclient, f"afresh-{uuid.uuid4().hex[:8]}", CONFIG)
    try:
        started = time.monotonic()
        lease = await gov.acquire(timeout=CONFIG.poll)
        waited = time.monotonic() - started
        await lease.release()
        print(f"\nfirst acquire on a fresh asyncio cluster client: {waited:.3f} s")
        assert "background worker error" not in caplog.text
        assert waited < CONFIG.redis_timeout / 2  # nothing to wait for: an empty governor
    finally:
        await gov.aclose()
        await aclient.aclose()


@pytest.mark.parametrize("facade", ["sync", "asyncio"])
async def test_a_node_that_lost_the_library_has_it_loaded_again(cluster: RedisCluster, facade: str) -> None:
    """A node without the functions (a node added to the cluster, or one
    restarted without persistence, here a FUNCTION FLUSH on the node serving
    the governor's slot) answers "Function not found"; the client loads the
    library again and the call goes through."""
    name = f"reload-{facade}-{uuid.uuid4().hex[:6]}"
    config = GovernorConfig(max_capacity=2, lease_ttl=3.0, poll=0.2, queue_ttl=1.0, redis_timeout=2.0)
    probe = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0], socket_timeout=5)
    try:
        serving = redis.Redis(port=node_of(probe, governor_keys(name).state), socket_timeout=5)
        if facade == "sync":
            gov = Governor(probe, name, config)
            gov.acquire(timeout=5).release()
            serving.function_flush()
            lease = gov.acquire(timeout=5)  # "Function not found", loaded again, admitted
            assert not lease.local and lease.fence > 0
            lease.release()
            assert gov.status().in_flight == 0
            gov.close()
        else:
            aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0], socket_timeout=5)
            agov = AsyncGovernor(aclient, name, config)
            await (await agov.acquire(timeout=5)).release()
            serving.function_flush()
            alease = await agov.acquire(timeout=5)
            assert not alease.local and alease.fence > 0
            await alease.release()
            assert (await agov.status()).in_flight == 0
            await agov.aclose()
            await aclient.aclose()
        assert serving.function_list(library="governor_*"), "the serving node has the library again"
        serving.close()
    finally:
        probe.close()


def test_classes_and_tenants_order_the_queue_on_a_cluster(client: redis.cluster.RedisCluster) -> None:
    """The queue's order (a higher class first, an aged waiter ahead of
    every class, weighted tenants) on a cluster node, and set_shares."""
    clock = FakeClock()
    config = dataclasses.replace(CONFIG, lease_ttl=600.0, policy="fixed", aging=8.0, tenant_weights={"a": 3})
    gov = Governor(client, f"cluster-{uuid.uuid4().hex[:8]}", config, clock=clock)
    core = gov._core
    try:
        holder = new_id()
        gov._execute(core.acquire(holder, core.ask("holder"), wait=False))
        ids = {}
        for label, priority, tenant in [("old", "batch", None), ("d", None, "a"), ("i", "interactive", "b")]:
            ids[label] = new_id()
            gov._execute(core.acquire(ids[label], core.ask(label, priority=priority, tenant=tenant), wait=True))
            clock.advance(3)  # by the first hand-over the batch waiter has waited 9 s: aged; d 6 s: not yet
        order = []
        for _ in range(3):
            gov._execute(core.release(holder))
            (holder,) = [i for i in ids.values() if client.zscore(gov.keys.leases, i) is not None and i not in order]
            order.append(holder)
        assert order == [ids["old"], ids["i"], ids["d"]]
        gov.set_shares(tenant_weights={"a": 5})
        assert core.ask(tenant="a").place.weight == 5
    finally:
        client.delete(*gov.keys.keys)
        gov.close()
