"""Where a state came from, judged by a witness of the test's own.

Each test records every hold it sees (tests/support/holders.py, the event
shape of tests/support/witness.py) and compares the most simultaneous
holders with the capacity, and checks that no two holders held one fence
at the same time; the governor's status is asked only what an operator
would see (its blocked reason, its hold).

- A new Redis: the first lease at once (the README's example within a
  second); the strict mode holds, and says so.
- A state that came back: an RDB snapshot loaded at a restart, an
  append-only file restored from a copy, a replica promoted after a burst.
  Each is a loss: fences above anything issued, the holders adopted, a
  hold for the longest lease TTL recorded, the decision log naming the case.
- The recovery hold against the operator's natural reaction (configure,
  reset, resume) and against clients with different lease TTLs.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from governor import AcquireTimeout, ConfigError, Governor, GovernorConfig, GovernorUnavailable

from .conftest import FakeClock
from .support.faultkit import figure
from .support.holders import Holders
from .support.proxy import Proxy
from .support.servers import RedisServer, wait_until

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def fresh() -> Iterator[RedisServer]:
    """A redis-server started just now (no persistence)."""
    srv = RedisServer().start()
    yield srv
    srv.cleanup()


@pytest.fixture
def holders() -> Iterator[Holders]:
    recorder = Holders()
    yield recorder
    recorder.close()


def log_entries(url: str, gov_name: str) -> list[dict[str, str]]:
    client = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
    try:
        return [fields for _, fields in client.xrange(Governor(client, gov_name).keys.events)]
    finally:
        client.close()


# -- a new Redis ------------------------------------------------------------------------------


def readme_example() -> str:
    """The README's first sync example, as printed."""
    for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        if "Governor.from_url" in block and "gov.acquire(" in block and "await" not in block:
            return str(block)
    raise AssertionError("the README has no sync example with Governor.from_url and gov.acquire")


def test_the_readme_example_on_a_redis_started_a_second_ago_gets_its_first_lease_within_a_second(
    fresh: RedisServer,
) -> None:
    code = readme_example().replace("redis://localhost:6379/0", fresh.url)
    assert fresh.url in code

    class ProviderThrottled(Exception):
        retry_after = 1.0

    entered: list[float] = []

    def call_the_provider() -> str:
        entered.append(time.monotonic())
        return "answer"

    time.sleep(max(0.0, 1.0 - fresh.uptime()))  # started one second before, as a newcomer's would be
    started = time.monotonic()
    exec(
        compile(code, "README.md", "exec"),
        {"call_the_provider": call_the_provider, "ProviderThrottled": ProviderThrottled},
    )
    figure("README example on a new Redis: first lease after", entered[0] - started)
    assert entered and entered[0] - started < 1.0


def test_a_new_redis_admits_at_once_and_says_why(fresh: RedisServer) -> None:
    gov = Governor.from_url(fresh.url, "new", GovernorConfig(max_capacity=4, lease_ttl=30, policy="fixed"))
    try:
        lease = gov.try_acquire()
        assert lease is not None, gov.status().blocked
        st = gov.status()
        assert (st.blocked, st.hold_until, st.recovery_hold) == ("", None, False)
        lease.release()
    finally:
        gov.close()
    assert log_entries(fresh.url, "new")[0]["why"].startswith("first use: no evidence")


def test_the_strict_mode_holds_on_a_young_server_and_every_view_says_why_and_until_when(fresh: RedisServer) -> None:
    config = GovernorConfig(max_capacity=4, lease_ttl=30, restart_hold=True)
    gov = Governor.from_url(fresh.url, "strict", config)
    try:
        assert gov.try_acquire() is None
        st = gov.status()
        assert st.recovery_hold and st.hold_until is not None and st.hold_until <= st.now + 30
        assert st.hold_reason.startswith("strict mode: Redis started")
        assert st.blocked.startswith("recovery hold: strict mode") and "ends in" in st.blocked
        with pytest.raises(AcquireTimeout, match=r"recovery hold: strict mode.*ends in"):
            gov.acquire(timeout=0.3)
    finally:
        gov.close()


# -- a state that came back ---------------------------------------------------------------------

#: capacity 4, lease TTL 3 s; resume_fraction 1: a state held as a loss starts at max_capacity,
#: so only the hold keeps a newcomer out
CAME_BACK = GovernorConfig(max_capacity=4, lease_ttl=3.0, poll=0.2, queue_ttl=1.0, redis_timeout=1.0,
                           resume_fraction=1.0)  # fmt: skip


def newcomer(url: str, name: str, holders: Holders, n: int, timeout: float, hold: float) -> threading.Thread:
    """A fresh process's governor (it never saw this one) that acquires ``n``
    leases at once, holds each ``hold`` seconds, releases."""
    gov = Governor.from_url(url, name, CAME_BACK)

    def one() -> None:
        deadline = time.monotonic() + timeout
        while True:  # as a worker would: Redis may still be loading its files at first
            try:
                lease = holders.entered(gov.acquire(timeout=max(0.1, deadline - time.monotonic()), holder="newcomer"),
                                        "newcomer")  # fmt: skip
                break
            except AcquireTimeout:
                return
            except GovernorUnavailable:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
        time.sleep(hold)
        holders.left(lease)
        lease.release()

    def run() -> None:
        threads = [threading.Thread(target=one) for _ in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout + hold + 10)
        gov.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def hold_and_release(gov: Governor, leases: list[Any], holders: Holders) -> None:
    for lease in leases:
        holders.left(lease)
        try:
            lease.release()
        except Exception:  # noqa: BLE001 - a lease seen lost is already recorded
            pass


def came_back_run(server: RedisServer, restore: Any, holders: Holders, name: str) -> tuple[Any, list[dict[str, str]]]:
    """A holds 2, the state is saved (``restore('save')``), B takes 2 more,
    Redis dies and comes back with the saved state (``restore('back')``), a
    fresh client asks for 2 at once. A and B hold on for 2 lease TTLs."""
    a = Governor.from_url(server.url, name, CAME_BACK)
    b = Governor.from_url(server.url, name, CAME_BACK)
    try:
        a_leases = [holders.entered(a.acquire(timeout=5, holder="a"), "a") for _ in range(2)]
        restore("save")
        b_leases = [holders.entered(b.acquire(timeout=5, holder="b"), "b") for _ in range(2)]
        b_fences = {lease.fence for lease in b_leases}
        restore("back")
        back = time.monotonic()
        fresh = newcomer(server.url, name, holders, 2, timeout=4 * CAME_BACK.lease_ttl, hold=0.5)
        time.sleep(2 * CAME_BACK.lease_ttl)
        fates = {"lost": sum(lease.lost for lease in a_leases + b_leases),
                 "b_same_fence": sum(lease.fence in b_fences for lease in b_leases)}  # fmt: skip
        hold_and_release(a, a_leases, holders)
        hold_and_release(b, b_leases, holders)
        fresh.join(30)
        admitted = [e["t"] for e in holders.events if e.get("role") == "newcomer" and e["kind"] == "entered"]
        assert admitted, "the newcomer was admitted in the end"
        figure("came back: newcomer's first lease after the restart", min(admitted) - back)
    finally:
        a.close()
        b.close()
    seen = holders.witness(CAME_BACK.max_capacity)
    print(f"\n{name}: {seen}; of A's and B's leases {fates['lost']} seen lost, "
          f"{fates['b_same_fence']} of B's kept their fence")  # fmt: skip
    assert seen.peak <= CAME_BACK.max_capacity, f"the witness saw {seen}"
    assert not seen.shared, f"fences held twice at once: {seen.shared}"
    assert fates == {"lost": 0, "b_same_fence": 0}, "A and B adopted (B under new fences), never lost"
    return seen, log_entries(server.url, name)


def test_an_rdb_snapshot_loaded_at_a_restart_is_a_loss(holders: Holders) -> None:
    server = RedisServer(None, "--dbfilename", "dump.rdb").start()
    try:

        def restore(step: str) -> None:
            if step == "save":
                server.client().save()
            else:
                server.kill()  # nothing saved since the snapshot: B's grants are not in it
                server.start()

        seen, entries = came_back_run(server, restore, holders, "rdb")
    finally:
        server.cleanup()
    print(f"\nRDB snapshot restored: {seen}")
    came_back = [e for e in entries if e["kind"] == "came-back"]
    print("decision log:", [e["why"] for e in came_back])
    assert came_back and "loaded from an RDB snapshot at a restart" in came_back[0]["why"]
    assert seen.peak <= CAME_BACK.max_capacity, f"the witness saw {seen}"
    assert not seen.shared, f"fences held twice at once: {seen.shared}"
    assert any(h for h in holders.events if h.get("role") == "newcomer"), "the newcomer was admitted in the end"


def test_an_append_only_file_restored_from_a_copy_is_a_loss(holders: Holders) -> None:
    server = RedisServer(None, "--appendonly", "yes", "--appendfsync", "always", "--appenddirname", "aof").start()
    copy = server.dir / "aof-copy"
    try:

        def restore(step: str) -> None:
            if step == "save":
                shutil.copytree(server.dir / "aof", copy)
            else:
                server.kill()
                shutil.rmtree(server.dir / "aof")
                shutil.copytree(copy, server.dir / "aof")  # the copy: B's grants are not in it
                server.start()

        seen, entries = came_back_run(server, restore, holders, "aof")
    finally:
        server.cleanup()
    print(f"\nAOF restored from a copy: {seen}")
    came_back = [e for e in entries if e["kind"] == "came-back"]
    print("decision log:", [e["why"] for e in came_back])
    assert came_back and "loaded from the append-only file at a restart" in came_back[0]["why"]
    assert seen.peak <= CAME_BACK.max_capacity, f"the witness saw {seen}"
    assert not seen.shared, f"fences held twice at once: {seen.shared}"


#: a replica's first sync starts at once
NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")


@pytest.mark.slow
def test_a_replica_promoted_after_a_burst_is_a_loss(holders: Holders) -> None:
    """The primary dies within the replication lag (0.3 s) of a burst: the
    promoted replica lacks B's grants and its fence counter is behind."""
    primary = RedisServer(None, *NO_SYNC_DELAY).start()
    link = Proxy(primary.port).start()
    link.delay(0.3)
    replica = RedisServer(None, *NO_SYNC_DELAY, "--replicaof", "127.0.0.1", str(link.port)).start()
    front = Proxy(primary.port).start()
    try:
        replica_client = replica.client(decode_responses=True, socket_timeout=2)
        wait_until(lambda: replica_client.info("replication").get("master_link_status") == "up", 15, what="sync")

        def restore(step: str) -> None:
            if step == "save":
                keys = Governor(replica_client, "promoted").keys
                wait_until(lambda: replica_client.zcard(keys.leases) == 3, 10, what="A's leases on the replica")
            else:
                primary.kill()  # within the lag: the replica never had B's grants
                link.reset()
                link.stop()
                replica_client.replicaof("NO", "ONE")
                front.retarget(replica.port, reset=True)

        server = _Front(front)
        seen, entries = came_back_run(server, restore, holders, "promoted")  # type: ignore[arg-type]
        replica_client.close()
    finally:
        front.stop()
        link.stop()
        primary.cleanup()
        replica.cleanup()
    print(f"\nreplica promoted after a burst: {seen}")
    came_back = [e for e in entries if e["kind"] == "came-back"]
    print("decision log:", [e["why"] for e in came_back])
    assert came_back and "a replica promoted to primary" in came_back[0]["why"]
    assert seen.peak <= CAME_BACK.max_capacity, f"the witness saw {seen}"
    assert not seen.shared, f"fences held twice at once: {seen.shared}"


class _Front:
    """The front proxy, as came_back_run uses a server (its url)."""

    def __init__(self, proxy: Proxy) -> None:
        self.url = proxy.url


# -- the recovery hold against the operator and against other TTLs -------------------------------


def _cut_off_holder(gov: Governor, holders: Holders, clock: FakeClock, n: int, ttl: float) -> float:
    """``gov`` takes ``n`` leases and is cut off at once (closed: it renews no
    more); a cut-off holder believes in them for ``ttl``. Returns when."""
    leases = [gov.try_acquire() for _ in range(n)]
    assert all(lease is not None for lease in leases)
    start = clock.now
    for lease in leases:
        assert lease is not None
        holders.believed(f"cut-off/{lease.id}", lease.fence, start, start + ttl)
    gov.close()
    return start


def _admit_all(gov: Governor, holders: Holders, n: int) -> int:
    admitted = 0
    for _ in range(n):
        lease = gov.try_acquire()
        if lease is not None:
            holders.entered(lease, "after")
            admitted += 1
    return admitted


@pytest.mark.parametrize("operator", ["configure", "reset", "resume"])
def test_configure_reset_and_resume_keep_the_recovery_hold(
    make_gov: Any, sync_client: Any, clock: FakeClock, operator: str
) -> None:
    holders = Holders(now=clock)
    try:
        config = GovernorConfig(max_capacity=4, lease_ttl=6.0, resume_fraction=1.0)
        _cut_off_holder(make_gov(config, clock=clock), holders, clock, 4, config.lease_ttl)
        fleet = make_gov(config, clock=clock)
        fleet.status()  # the rest of the fleet knew the governor
        sync_client.delete(*fleet.keys.keys)  # Redis restarted without persistence
        clock.advance(0.5)
        st = fleet.status()  # re-created: a loss this client knows of
        clock.advance(1.0)
        after = getattr(fleet, operator)()  # the operator's natural reaction, one second later
        admitted = _admit_all(fleet, holders, 4)
        seen = holders.witness(4, until=clock.now + 1.0)  # the admitted hold on
        print(f"\n{operator} one second after the restart: {seen}")
        assert admitted == 0 and seen.peak <= 4, f"{operator} lifted the recovery hold: {seen}"
        assert after.hold_until == st.hold_until and after.blocked.startswith("recovery hold:")
        assert st.recovery_hold and st.hold_reason.startswith("the state was lost")
        clock.advance(config.lease_ttl)  # the hold is over, and so is the cut-off holder's belief
        assert _admit_all(fleet, holders, 4) == 4
        assert holders.witness(4, until=clock.now + 1.0).peak <= 4
    finally:
        holders.close()


def test_lifting_the_recovery_hold_is_an_explicit_named_choice(
    make_gov: Any, sync_client: Any, clock: FakeClock
) -> None:
    config = GovernorConfig(max_capacity=4, lease_ttl=6.0, resume_fraction=1.0)
    gov = make_gov(config, clock=clock)
    gov.status()
    sync_client.delete(*gov.keys.keys)
    assert gov.status().recovery_hold
    st = gov.resume(lift_recovery_hold=True)
    assert not st.recovery_hold and not st.holding and st.hold_reason == ""
    assert gov.try_acquire() is not None
    entries = [{_text(k): _text(v) for k, v in e.items()} for _, e in sync_client.xrange(gov.keys.events)]
    resume = [e for e in entries if e["kind"] == "resume"]
    assert resume and "lifting the recovery hold: the state was lost" in resume[-1]["why"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_the_hold_covers_the_longest_lease_ttl_any_client_announced(
    make_gov: Any, sync_client: Any, clock: FakeClock, name: str
) -> None:
    """A client of lease_ttl 1.5 re-creates the state lost under a holder
    of lease_ttl 6 that is cut off: the hold is 6 s, not 1.5 s."""
    holders = Holders(now=clock)
    try:
        short = make_gov(GovernorConfig(max_capacity=4, lease_ttl=1.5, poll=0.2, queue_ttl=1, resume_fraction=1.0),
                         clock=clock)  # fmt: skip
        long_ = make_gov(GovernorConfig(max_capacity=4, lease_ttl=6.0, resume_fraction=1.0), clock=clock)
        _cut_off_holder(long_, holders, clock, 4, 6.0)
        short.status()  # the short-TTL client has used the governor
        sync_client.delete(*short.keys.keys)
        clock.advance(0.1)
        st = short.status()  # re-created by the short-TTL client
        for _ in range(4):  # 0.5 s steps up to 2 s past the loss
            clock.advance(0.5)
            _admit_all(short, holders, 4)
        seen = holders.witness(4, until=clock.now + 1.0)  # the admitted hold on
        print(f"\nlease_ttl 1.5 re-creates under a cut-off holder of lease_ttl 6: {seen}")
        assert seen.peak <= 4 and not seen.shared, f"the witness saw {seen}"
        assert st.hold_until == pytest.approx(st.now + 6.0) and st.ttl_max == 6.0  # recorded, learnt
        clock.advance(4.0)
        assert _admit_all(short, holders, 4) == 4
    finally:
        holders.close()


@pytest.mark.parametrize("first_call", ["status", "acquire"])
def test_a_short_ttl_client_that_called_first_learns_a_longer_ttl_from_its_next_acquire(
    make_gov: Any, sync_client: Any, clock: FakeClock, first_call: str
) -> None:
    """The short-TTL client (1.5 s) calls first, so init tells it 1.5 s; a
    6 s client comes, takes the 4 leases and is cut off; the short one asks
    for a lease (denied: the 4 are taken) and Redis loses the state. Before:
    it re-created the state with a hold of 1.5 s (it learnt the longest TTL
    from init and status alone): 8 holders against 4 for 1.9 s. Now a client
    learns it from its acquire that announces its own TTL (at most a third
    of it apart), and a listening client at once, on the wake channel, when
    the longest rises: the hold is 6 s."""
    holders = Holders(now=clock)
    try:
        short = make_gov(GovernorConfig(max_capacity=4, lease_ttl=1.5, poll=0.2, queue_ttl=1, resume_fraction=1.0),
                         clock=clock)  # fmt: skip
        if first_call == "status":
            short.status()
        else:
            lease = short.try_acquire()
            assert lease is not None
            lease.release()
        long_ = make_gov(GovernorConfig(max_capacity=4, lease_ttl=6.0, resume_fraction=1.0), clock=clock)
        _cut_off_holder(long_, holders, clock, 4, 6.0)
        assert short.try_acquire() is None  # the 4 are taken: denied
        wait_until(lambda: short._core.ttl_max_ms == 6000, 5, what="the short-TTL client to learn the 6 s TTL")
        sync_client.delete(*short.keys.keys)  # Redis restarted without persistence
        clock.advance(0.1)
        st = short.status()  # re-created by the short-TTL client
        for _ in range(4):  # 0.5 s steps up to 2 s past the loss
            clock.advance(0.5)
            _admit_all(short, holders, 4)
        seen = holders.witness(4, until=clock.now + 1.0)
        print(f"\nlease_ttl 1.5 first, then a cut-off holder of lease_ttl 6: {seen}")
        assert seen.peak <= 4 and not seen.shared, f"the witness saw {seen}"
        assert st.hold_until == pytest.approx(st.now + 6.0), st
    finally:
        holders.close()


@pytest.mark.parametrize("declared", [True, False], ids=["durable", "undeclared"])
def test_a_restart_that_reloads_a_durable_append_only_file_holds_nobody(holders: Holders, declared: bool) -> None:
    """appendonly yes, appendfsync always: every write is on disk before it
    is acknowledged, so a restart (SIGKILL) that reloads the file loses
    nothing. Before: the reloaded state was stamped by the old server
    process and held the fleet for ttl_max. Declared durable
    (GovernorConfig.durable_redis), it now admits at once: the holders keep
    their leases and fences, and a newcomer takes the rest of the capacity,
    no more. Undeclared, it holds as before."""
    config = dataclasses.replace(CAME_BACK, durable_redis=declared)
    server = RedisServer(None, "--appendonly", "yes", "--appendfsync", "always", "--appenddirname", "aof").start()
    a = Governor.from_url(server.url, "durable", config)
    try:
        leases = [holders.entered(a.acquire(timeout=5, holder="a"), "a") for _ in range(2)]
        fences = [lease.fence for lease in leases]
        server.kill()
        server.start()
        newcomer = Governor.from_url(server.url, "durable", config)
        try:
            got = [newcomer.try_acquire() for _ in range(3)]
            st = newcomer.status()
            if declared:
                assert not st.recovery_hold, st.hold_reason
                assert [g is not None for g in got] == [True, True, False]  # the rest of the capacity, no more
                a.renew()
                assert [lease.fence for lease in leases] == fences and not any(lease.lost for lease in leases)
                why = [e["why"] for e in log_entries(server.url, "durable") if e["kind"] == "came-back"]
                assert why and "declared durable" in why[0] and "no hold" in why[0], why
            else:
                assert st.recovery_hold and got == [None, None, None]
            for lease in got:
                if lease is not None:
                    holders.entered(lease, "newcomer")
            seen = holders.witness(CAME_BACK.max_capacity)
            assert seen.peak <= CAME_BACK.max_capacity and not seen.shared, str(seen)
            for lease in got:
                if lease is not None:
                    holders.left(lease)
                    lease.release()
        finally:
            newcomer.close()
        hold_and_release(a, leases, holders)
    finally:
        a.close()
        server.cleanup()


def test_a_durable_declaration_the_server_does_not_keep_is_refused_and_the_advice_helps() -> None:
    """durable_redis=True on a server with appendfsync everysec (the default)
    is refused before anything is stored, naming both settings and the
    commands; running them makes the declaration accepted."""
    config = dataclasses.replace(CAME_BACK, durable_redis=True)
    server = RedisServer(None, "--appendonly", "no", "--appendfsync", "everysec").start()
    try:
        gov = Governor.from_url(server.url, "durable", config)
        with pytest.raises(ConfigError, match="appendonly no and appendfsync everysec") as raised:
            gov.status()
        assert not server.client().exists(gov.keys.state)  # nothing stored
        advice = str(raised.value)
        for command in re.findall(r"`CONFIG SET (\w+) (\w+)`", advice):
            server.client().config_set(*command)
        assert gov.status().max_capacity == CAME_BACK.max_capacity
        assert server.client().hget(gov.keys.state, "durable") == b"1"
        gov.close()
    finally:
        server.cleanup()


def test_a_status_after_the_loss_was_handled_no_longer_tells_of_it() -> None:
    # A read-only call that finds a state restored from a snapshot says so;
    # once a writing call has handled it as a loss, the next status must not
    # repeat it (what a call found is the call's own, not the server's).
    server = RedisServer(None, "--dbfilename", "dump.rdb").start()
    config = dataclasses.replace(CAME_BACK, restart_hold=False)
    try:
        gov = Governor.from_url(server.url, "told-once", config)
        gov.status()
        server.client().save()
        server.kill()
        server.start()
        gov.close()
        gov = Governor.from_url(server.url, "told-once", config)
        pending = "the next writing call handles it as a loss"
        assert pending in gov.status(create=False).blocked  # read only, as governor status reads
        with pytest.raises(AcquireTimeout):  # the writing call handles the loss: a recovery hold
            gov.acquire(timeout=0.2)
        blocked = gov.status(create=False).blocked
        assert blocked.startswith("recovery hold") and pending not in blocked
        gov.close()
    finally:
        server.cleanup()
