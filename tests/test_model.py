"""The Lua scripts against the reference model (SPEC §8): one random sequence
of operations drives both, and after every step they must agree exactly.

Each operation is built by the governor's own core (``gov._core.acquire``,
``refresh``, ``cancel``, ``renew``, ``release``, ``report``, ...), run on
Redis through the registered scripts, and handed with the same ARGV to
:class:`tests.model.Model`. After every step the test compares the reply,
the whole state hash, the leases, holders, queue (in order) and waiters,
and the status (capacity, pause, max, not_before, window counts); at the
end, the grant announcements published on the wake channel. The model
checks SPEC §3 on its own: no admission while paused or held or at
capacity, FIFO grants, no lease granted twice, growing fences.

No background worker runs (the core calls are executed directly) and time
comes from an injected clock, so the run is deterministic and replayable.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, ClassVar

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from governor import Governor, GovernorConfig, Outcome
from governor.core import Call

from .conftest import FakeClock
from .model import Model, init_call, parse_state

#: operations run by every test of this module, for the report (-s prints them)
OPERATIONS = {"count": 0, "checks": 0}

SETTINGS = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # no tracing "explain" phase
)


def norm(value: Any) -> Any:
    """A reply with every element as str (Redis and the model differ only in type)."""
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def as_str_dict(raw: dict[Any, Any]) -> dict[str, str]:
    return {norm(k): norm(v) for k, v in raw.items()}


def as_zset(raw: Any) -> dict[str, int]:
    return {norm(m): int(s) for m, s in raw}


configs = st.builds(
    lambda policy, cap, window, dec_count, ratio, pause_count, pause_ratio, resume, inc, cut, probe, ra_cap: (
        GovernorConfig(
            policy=policy,
            max_capacity=cap,
            window=window,
            decrease_count=dec_count,
            decrease_ratio=ratio,
            ratio_min_attempts=2,
            decrease_factor=0.5,
            pause_count=pause_count,
            pause_ratio=pause_ratio,
            resume_fraction=resume,
            increase_successes=inc,
            cut_factor=cut,
            probe_interval=probe,
            retry_after_cap=ra_cap,
            lease_ttl=10.0,
            poll=1.0,
            queue_ttl=3.0,
        )
    ),
    st.sampled_from(["seed", "adaptive"]),
    st.integers(1, 6),
    st.sampled_from([10.0, 20.0]),
    st.integers(1, 3),
    st.sampled_from([0.3, 0.5]),
    st.integers(2, 4),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([0.25, 0.5, 1.0]),
    st.integers(1, 3),
    st.sampled_from([0.5, 0.9]),
    st.sampled_from([0.0, 3.0]),
    st.sampled_from([0.0, 4.0, 60.0]),
)
clock_steps = st.one_of(st.integers(1, 2500), st.sampled_from([3000, 10000, 10001, 20000, 61000]))


class GovernorMachine(RuleBasedStateMachine):
    """Random operations on one governor, run on Redis and on the model."""

    client: ClassVar[Any] = None

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.clock = FakeClock()
        self.gov: Governor | None = None
        self.ids: list[str] = []
        self.epoch_of: dict[str, str] = {}  #: lease id -> epoch it was granted in
        self.pubsub: Any = None

    # -- plumbing -------------------------------------------------------------

    @property
    def g(self) -> Governor:
        assert self.gov is not None
        return self.gov

    def run(self, call: Call[Any]) -> list[Any]:
        """Run one script on Redis and on the model; the replies must agree."""
        OPERATIONS["count"] += 1
        real: list[Any] = norm(self.g._scripts[call.script](keys=self.g.keys.keys, args=call.args))
        expected = norm(self.model.call(call.script, call.args))
        assert real == expected, f"{call.script}{call.args[2:]}: Redis {real} != model {expected}"
        call.parse(self._raw(real))  # the core keeps its fence floor and last sighting
        return real

    @staticmethod
    def _raw(reply: list[str]) -> list[Any]:
        """The reply as the core parses it (the schema number first)."""
        return [int(reply[0]), *reply[1:]]

    def note_grant(self, lease_id: str, reply: list[str]) -> None:
        if reply[1] == "granted":
            self.epoch_of[lease_id] = reply[4]

    def new_id(self) -> str:
        lease_id = f"lease-{len(self.ids):04d}"  # deterministic: replays sort the same
        self.ids.append(lease_id)
        return lease_id

    # -- setup ----------------------------------------------------------------

    @initialize(config=configs)
    def create(self, config: GovernorConfig) -> None:
        name = f"model-{uuid.uuid4().hex[:12]}"
        self.gov = Governor(self.client, name, config, clock=self.clock)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(self.gov.keys.channel)
        self.pubsub.get_message(timeout=5)  # the confirmation: we listen from here on
        self.model.listeners = 1
        self.run(init_call(self.g._core, holds_leases=False))

    def teardown(self) -> None:
        if self.gov is None:
            return
        try:
            published: list[str] = []
            deadline = time.monotonic() + 5
            while len(published) < len(self.model.published) and time.monotonic() < deadline:
                message = self.pubsub.get_message(timeout=0.05)
                if message is not None and message["type"] == "message":
                    published.append(norm(message["data"]))
            assert published == self.model.published, "the grant announcements differ"
        finally:
            self.pubsub.close()
            self.client.delete(*self.g.keys.keys)
            self.g.close()

    # -- admission ------------------------------------------------------------

    @rule(holder=st.sampled_from(["a", "host-2/agent-7", "x|y z"]))
    def enqueue(self, holder: str) -> None:
        lease_id = self.new_id()
        self.note_grant(lease_id, self.run(self.g._core.acquire(lease_id, holder, wait=True)))

    @rule()
    def try_acquire(self) -> None:
        lease_id = self.new_id()
        self.note_grant(lease_id, self.run(self.g._core.acquire(lease_id, "try", wait=False)))

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), wait=st.booleans())
    def acquire_again(self, data: st.DataObject, wait: bool) -> None:
        """The same id again: idempotent when granted, a refreshed place when queued."""
        lease_id = data.draw(st.sampled_from(self.ids))
        self.note_grant(lease_id, self.run(self.g._core.acquire(lease_id, "again", wait=wait, fresh=False)))

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self.run(self.g._core.cancel(data.draw(st.sampled_from(self.ids))))

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self.run(self.g._core.release(data.draw(st.sampled_from(self.ids))))

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(self.ids), min_size=1, max_size=4, unique=True))
        epoch = self.model.S["epoch"]
        reply = self.run(self.g._core.renew([(i, self.epoch_of.get(i, epoch), "h") for i in ids]))
        for i, status in zip(ids, reply[3::2], strict=True):
            if status == "adopted":
                self.epoch_of[i] = reply[2]

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def refresh(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(self.ids), min_size=0, max_size=4, unique=True))
        reply = self.run(self.g._core.refresh(ids))
        for i, status in zip(ids, reply[5::3], strict=True):
            if status == "granted":
                self.epoch_of[i] = reply[2]

    # -- outcomes and policy ----------------------------------------------------

    @rule(
        data=st.data(),
        outcome=st.sampled_from(list(Outcome)),
        retry_after=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 2.0, 100.0])),
        with_lease=st.booleans(),
        release=st.booleans(),
    )
    def report(
        self, data: st.DataObject, outcome: Outcome, retry_after: float | None, with_lease: bool, release: bool
    ) -> None:
        lease_id = data.draw(st.sampled_from(self.ids)) if with_lease and self.ids else None
        fence = None
        if self.model.state is not None:  # the fence of a lease of this wave or of an older one
            fence = data.draw(st.one_of(st.none(), st.integers(self.model.S["fence"] - 3, self.model.S["fence"])))
        self.run(self.g._core.report(outcome, retry_after, lease_id, fence, release=release))

    @rule()
    def probe(self) -> None:
        self.run(self.g._core.probe())

    @rule(n=st.integers(1, 7))
    def set_max_capacity(self, n: int) -> None:
        self.run(self.g._core.set_max_capacity(n))

    @rule(duration=st.one_of(st.none(), st.sampled_from([0.5, 5.0, 30.0])))
    def pause(self, duration: float | None) -> None:
        self.run(self.g._core.pause("maintenance", duration))

    @rule()
    def resume(self) -> None:
        self.run(self.g._core.resume())

    @rule(with_config=st.booleans())
    def reset(self, with_config: bool) -> None:
        self.run(self.g._core.reset(with_config))

    # -- time and faults ------------------------------------------------------

    @rule(ms=clock_steps)
    def advance(self, ms: int) -> None:
        self.clock.advance(ms / 1000)

    @rule(holds_leases=st.booleans())
    def lose_state(self, holds_leases: bool) -> None:
        """Every key gone (a restart without persistence); the next caller re-creates."""
        self.client.delete(*self.g.keys.keys)
        self.model.lose_state()
        self.run(init_call(self.g._core, holds_leases=holds_leases))

    # -- checks ---------------------------------------------------------------

    @invariant()
    def redis_holds_what_the_model_holds(self) -> None:
        if self.gov is None:
            return
        keys, c = self.g.keys, self.client
        real, want = parse_state(as_str_dict(c.hgetall(keys.state))), self.model.stored_state()
        differ = {k: (real.get(k), want.get(k)) for k in set(real) | set(want) if real.get(k) != want.get(k)}
        assert not differ, f"state fields (Redis, model): {differ}"
        assert as_zset(c.zrange(keys.leases, 0, -1, withscores=True)) == self.model.leases
        assert as_str_dict(c.hgetall(keys.holders)) == self.model.holders
        assert [norm(m) for m in c.zrange(keys.queue, 0, -1)] == self.model.queue_order()
        assert as_zset(c.zrange(keys.queue, 0, -1, withscores=True)) == self.model.queue
        assert as_zset(c.zrange(keys.waiters, 0, -1, withscores=True)) == self.model.waiters
        OPERATIONS["checks"] += 1
        self.run(self.g._core.status())  # capacity, pause, max, not_before, counts, window

    @invariant()
    def live_leases_have_distinct_fences(self) -> None:
        if self.gov is None or self.model.state is None:
            return
        live = [m for m, e in self.model.leases.items() if e > self.model.now]
        fences = [self.model.holders[m].split("|", 1)[0] for m in live]
        assert len(set(fences)) == len(fences)


@pytest.mark.parametrize("backend", ["redis", "fakeredis"])
def test_the_scripts_agree_with_the_model(backend: str, redis_url: str, fake_server: fakeredis.FakeServer) -> None:
    if backend == "redis":
        client: Any = redis.Redis.from_url(redis_url, socket_timeout=10)
    else:
        client = fakeredis.FakeRedis(server=fake_server)
    machine = type("Machine", (GovernorMachine,), {"client": client})
    calls, checks = OPERATIONS["count"], OPERATIONS["checks"]
    try:
        run_state_machine_as_test(machine, settings=SETTINGS)
    finally:
        client.close()
    calls, checks = OPERATIONS["count"] - calls, OPERATIONS["checks"] - checks
    print(f"\n{backend}: {calls - checks} operations, each followed by a full comparison ({calls} script calls)")
    assert calls - checks > 500


def test_a_capacity_jump_admits_at_most_a_batch_per_call_like_the_model(redis_url: str) -> None:
    """Beyond the random runs' small queues: 150 waiters, then capacity from 1 to 200."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    clock = FakeClock()
    gov = Governor(client, f"model-batch-{uuid.uuid4().hex[:8]}", GovernorConfig(max_capacity=1), clock=clock)
    model = Model()

    def both(call: Call[Any]) -> list[Any]:
        real: list[Any] = norm(gov._scripts[call.script](keys=gov.keys.keys, args=call.args))
        assert real == norm(model.call(call.script, call.args)), call.script
        return real

    try:
        both(init_call(gov._core, holds_leases=False))
        both(gov._core.acquire("holder", "h", wait=False))
        for i in range(150):
            both(gov._core.acquire(f"w{i:03d}", "h", wait=True))
        both(gov._core.set_max_capacity(200))
        assert len(model.grants) == 1 + 64  # one batch of grants in the call
        both(gov._core.refresh([]))
        both(gov._core.probe())
        assert len(model.grants) == 1 + 150  # the rest by the next calls, in FIFO order
        assert [lease for lease, _ in model.grants[1:]] == [f"w{i:03d}" for i in range(150)]
        assert as_zset(client.zrange(gov.keys.leases, 0, -1, withscores=True)) == model.leases
    finally:
        client.delete(*gov.keys.keys)
        gov.close()
        client.close()
