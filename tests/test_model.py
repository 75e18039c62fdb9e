"""The Lua scripts against the reference model: one random sequence
of operations drives both, and after every step they must agree exactly.

Each operation is built by the governor's own core (``gov._core.acquire``,
``refresh``, ``cancel``, ``renew``, ``release``, ``report``, ...), run on
Redis through the functions library (FCALL; on a real Redis the library with
its write-order witness, tests/support/write_order.py: a call that could
still fail after its first write fails), and handed with the same ARGV
to :class:`tests.support.model.Model`. After every step the test compares the
reply, the whole state, config and policy hashes, the leases and holders
(sentinels included), the queue (in order) and waiters, and the status
(capacity, pause, max, not_before, window counts, blocked); at the end,
the messages published on the wake channel. Every policy (adaptive, seed,
fixed) is drawn. The model
checks the admission rules on its own: no admission while paused or held or at
capacity, FIFO grants, no lease granted twice, growing fences.

No background worker runs (the core calls are executed directly) and time
comes from an injected clock, so the run is deterministic and replayable.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable
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
from governor.budgets import KINDS as BUDGET_KINDS
from governor.budgets import MAX_USAGE, Tokens
from governor.core import Ask, Call, Place
from governor.errors import CostTooLarge
from governor.policies import AdaptivePolicy, FixedPolicy, Policy, SeedPolicy
from governor.protocol import LOWER_HELD, QUEUE_BAND, SENTINEL, HolderRecord
from governor.scripts import function_name

from .conftest import FakeClock, load_library
from .support import write_order
from .support.model import Model, init_call, parse_hash

#: operations run by every test of this module, for the report (-s prints them), and
#: how often the random runs reached each budget path (the test fails if one never is)
OPERATIONS = {"count": 0, "checks": 0, "budget_wait": 0, "refused": 0, "settled": 0, "calibrated": 0}
OPERATIONS.update({"rank0": 0, "rank1": 0, "rank2": 0, "aged": 0, "parked": 0, "slow_start": 0})
#: the budgets' and shares' paths under faults and bad input: a refused call's settlement
#: (spent, or given back when the provider does not count refusals), a debt at its bound,
#: a lease adopted after a loss with its own tenant or class, a recount (set_shares,
#: reset) while an expired lease is not yet reclaimed
OPERATIONS.update({"refusal_spent": 0, "refusal_given_back": 0, "debt_bound": 0, "adopted_placed": 0})
OPERATIONS.update({"recount_expired": 0})
FAULT_PATHS = ("refusal_spent", "refusal_given_back", "debt_bound", "adopted_placed", "recount_expired")
#: the queue's paths: waiters of each class, and aged ones
QUEUE_PATHS = ("rank0", "rank1", "rank2", "aged")
#: reached by the random runs every time; budget waits and a cost above a whole limit ('refused',
#: which the tiers' draws make rarer) are walked by the directed replay below every time
BUDGET_PATHS = ("settled", "calibrated")

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


def comparable(script: str, reply: list[str]) -> list[Any]:
    """A reply as compared: init's config pairs (after the epoch and ttl_max) are the stored hash, in no set order."""
    if script == "init" and len(reply) > 4:
        return [*reply[:4], dict(zip(reply[4::2], reply[5::2], strict=True))]
    return reply


def fcall(client: Any, gov: Governor, call: Call[Any]) -> list[Any]:
    """One operation of the library on Redis, as the facade sends it: on a
    real Redis through the write-order witness (tests/support/write_order.py),
    which fails a call that could still fail after its first write."""
    keys = gov.keys.script_keys
    name = function_name(call.script) if isinstance(client, fakeredis.FakeRedis) else write_order.function(call.script)
    return norm(client.fcall(name, len(keys), *keys, *call.args))  # type: ignore[no-any-return]


def load_libraries(client: Any) -> None:
    """The library (a facade's calls), and on a real Redis the witnessed one (fcall's)."""
    load_library(client)
    if not isinstance(client, fakeredis.FakeRedis):
        write_order.load(client)


policies = st.one_of(
    st.builds(
        AdaptivePolicy,
        pause_count=st.integers(2, 4),
        pause_ratio=st.sampled_from([0.0, 0.5, 1.0]),
        increase_successes=st.integers(1, 3),
        cut_factor=st.sampled_from([0.5, 0.9]),
        probe_interval=st.sampled_from([0.0, 3.0]),
    ),
    st.builds(
        SeedPolicy,
        decrease_count=st.integers(1, 3),
        decrease_ratio=st.sampled_from([0.3, 0.5]),
        ratio_min_attempts=st.just(2),
        decrease_factor=st.just(0.5),
        pause_count=st.integers(2, 4),
        increase_successes=st.integers(1, 3),
    ),
    st.just(FixedPolicy()),
)
#: budget ceilings per minute: none, or small enough that leases wait for refills
ceilings = st.fixed_dictionaries(
    {},
    optional={
        "requests_per_minute": st.sampled_from([3, 60]),
        "tokens_per_minute": st.sampled_from([600, 6000]),
        "input_tokens_per_minute": st.sampled_from([500, 5000]),
        "output_tokens_per_minute": st.sampled_from([300, 3000]),
        "fast_input_tokens_per_minute": st.sampled_from([400, 4000]),
    },
)
#: the classes' aging (None: never; 0.5 s and 2 s: within a run's clock steps) and the tenants' weights
shares = st.fixed_dictionaries(
    {"aging": st.sampled_from([None, 0.5, 2.0, 30.0])},
    optional={
        "tenant_weights": st.sampled_from([{"a": 3, "b": 1}, {"a": 1000}]),
        "default_weight": st.just(2),
        "tenant_caps": st.sampled_from([{"a": 1}, {"a": 2, "default": 1}]),
    },
)
configs = st.builds(
    lambda policy, cap, window, resume, ra_cap, budgets, share, reserve: GovernorConfig(
        policy=policy,
        max_capacity=cap,
        reserve=min(reserve, cap - 1),
        window=window,
        resume_fraction=resume,
        retry_after_cap=ra_cap,
        lease_ttl=10.0,
        poll=1.0,
        queue_ttl=3.0,
        **budgets,
        **share,
    ),
    policies,
    st.integers(1, 6),
    st.sampled_from([10.0, 20.0]),
    st.sampled_from([0.25, 0.5, 1.0]),
    st.sampled_from([0.0, 4.0, 60.0]),
    ceilings,
    shares,
    st.sampled_from([0, 0, 1, 2]),
)
#: where a caller waits: its class (None: the default) and tenant (None: the default)
places = st.tuples(st.sampled_from([None, "interactive", "default", "batch"]), st.sampled_from([None, "a", "b", "c"]))
#: a lease's estimate, and a call's usage: none, small, or above some limits
token_counts = st.one_of(
    st.none(),
    st.builds(
        Tokens,
        st.sampled_from([0, 100, 450, 4000]),
        st.sampled_from([0, 50, 250, 2500]),
        st.sampled_from([None, None, "fast", "standard"]),  # a tier with budgets of its own, or the standard one
    ),
)
#: a call's reported usage: as above, or one far beyond any budget (the debt bound)
usages = st.one_of(token_counts, st.just(Tokens(MAX_USAGE // 2, MAX_USAGE // 2)))
#: a response's rate-limit figures for one kind: (limit, remaining), either may be absent
figures = st.tuples(
    st.one_of(st.none(), st.sampled_from([0, 5, 700, 9000])), st.one_of(st.none(), st.sampled_from([0, 3, 400, 8000]))
)
limit_sets = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(list(BUDGET_KINDS)), figures.filter(lambda f: f != (None, None)), max_size=3),
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
        self.asked: dict[str, tuple[Place, Tokens]] = {}  #: lease id -> the place and tokens it asked with
        self.pubsub: Any = None

    # -- plumbing -------------------------------------------------------------

    @property
    def g(self) -> Governor:
        assert self.gov is not None
        return self.gov

    def run(self, call: Call[Any]) -> list[Any]:
        """Run one script on Redis and on the model; the replies must agree."""
        OPERATIONS["count"] += 1
        real = fcall(self.client, self.g, call)
        expected = norm(self.model.call(call.script, call.args))
        assert comparable(call.script, real) == comparable(call.script, expected), (
            f"{call.script}{call.args[2:]}: Redis {real} != model {expected}"
        )
        self._count_budget_paths(call, real)
        call.parse(self._raw(real))  # the core keeps its fence floor and last sighting
        return real

    def _count_budget_paths(self, call: Call[Any], reply: list[Any]) -> None:
        kind = reply[1] if len(reply) > 1 else ""
        if kind == "refused":
            OPERATIONS["refused"] += 1
        elif kind in ("queued", "denied") and " budget: " in str(reply[3 if kind == "queued" else 2]):
            OPERATIONS["budget_wait"] += 1
        elif call.script == "report" and kind == "reported" and len(call.args) > 7:
            usage, limits = call.args[7], call.args[9:]
            if usage and self.model.state is not None and self.model.active():
                OPERATIONS["settled"] += 1
            if any(limits):
                OPERATIONS["calibrated"] += 1

    @staticmethod
    def _raw(reply: list[str]) -> list[Any]:
        """The reply as the core parses it (the schema number first)."""
        return [int(reply[0]), *reply[1:]]

    def note_grant(self, lease_id: str, reply: list[str]) -> None:
        if reply[1] == "granted":
            self.epoch_of[lease_id] = reply[4]

    def note_start(self, recovered: bool = False) -> None:
        """After a config stored afresh (create, reset, a lost state re-created):
        the adaptive policy starts at the resume level, the others at max_capacity
        (every policy at the resume level when a client that knew the governor
        re-created it); the comparison after every operation checks Redis agrees."""
        m = self.model
        if m.state is None or m.S["paused"]:
            return
        C = m.C
        level = max(1, math.floor(C["max_capacity"] * C["resume_fraction"]))
        expected = level if recovered or m.policy.name == "adaptive" else C["max_capacity"]
        assert m.S["capacity"] == expected, (m.policy.name, m.S["capacity"], expected)
        if expected < C["max_capacity"]:
            OPERATIONS["slow_start"] += 1

    def new_id(self) -> str:
        lease_id = f"lease-{len(self.ids):04d}"  # deterministic: replays sort the same
        self.ids.append(lease_id)
        return lease_id

    # -- setup ----------------------------------------------------------------

    @initialize(config=configs)
    def create(self, config: GovernorConfig) -> None:
        name = f"model-{uuid.uuid4().hex[:12]}"
        self.gov = Governor(self.client, name, config, clock=self.clock)
        load_libraries(self.client)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(self.gov.keys.channel)
        self.pubsub.get_message(timeout=5)  # the confirmation: we listen from here on
        self.model.listeners = 1
        self.run(init_call(self.g._core, holds_leases=False))
        self.note_start()

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

    def acquire(self, call: Any) -> list[Any]:
        """Run an acquire; a refused cost raises CostTooLarge when the core parses it."""
        try:
            return self.run(call)
        except CostTooLarge:
            return ["2", "refused"]

    @rule(holder=st.sampled_from(["a", "host-2/agent-7", "x|y z"]), tokens=token_counts, where=places)
    def enqueue(self, holder: str, tokens: Tokens | None, where: tuple[str | None, str | None]) -> None:
        lease_id = self.new_id()
        ask = self.g._core.ask(holder, tokens, *where)
        self.asked[lease_id] = (ask.place, ask.tokens)
        self.note_grant(lease_id, self.acquire(self.g._core.acquire(lease_id, ask, wait=True)))
        OPERATIONS[f"rank{ask.place.rank}"] += 1

    @rule(tokens=token_counts, where=places)
    def try_acquire(self, tokens: Tokens | None, where: tuple[str | None, str | None]) -> None:
        lease_id = self.new_id()
        ask = self.g._core.ask("try", tokens, *where)
        self.asked[lease_id] = (ask.place, ask.tokens)
        self.note_grant(lease_id, self.acquire(self.g._core.acquire(lease_id, ask, wait=False)))

    @rule(
        tokens=token_counts,
        usage=usages,
        calls=st.integers(2, 5),
        outcome=st.sampled_from([Outcome.SUCCESS, Outcome.RATE_LIMITED]),
        refusals_count=st.booleans(),
    )
    def short_calls(
        self, tokens: Tokens | None, usage: Tokens | None, calls: int, outcome: Outcome, refusals_count: bool
    ) -> None:
        """Calls that come and go (try, then report and release at once), as a
        busy fleet makes them: they drain the budgets that concurrency leaves
        room for; refused ones (a 429 with its usage, counted by the provider
        or not) clamp them."""
        for _ in range(calls):
            lease_id = self.new_id()
            reply = self.acquire(self.g._core.acquire(lease_id, self.g._core.ask("short", tokens=tokens), wait=False))
            if reply[1] == "granted":
                self._count_refusal(outcome, usage, refusals_count)
                call = self.g._core.report(
                    outcome, None, lease_id, int(reply[2]), release=True, usage=usage, refusals_count=refusals_count
                )
                self.run(call)
                self._count_debt()

    def _count_refusal(self, outcome: Outcome, usage: Tokens | None, refusals_count: bool) -> None:
        """A live lease's refused call is about to be settled."""
        if (
            outcome is Outcome.RATE_LIMITED
            and usage is not None
            and self.model.state is not None
            and self.model.active()
        ):
            OPERATIONS["refusal_spent" if refusals_count else "refusal_given_back"] += 1

    def _count_debt(self) -> None:
        m = self.model
        if m.state is not None and any(m.budget_level(k) <= -m._capacity_of(k) for k in m.active()):
            OPERATIONS["debt_bound"] += 1

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def acquire_again(self, data: st.DataObject) -> None:
        """The same id again (mode 'again'): idempotent when granted, a refreshed
        place when queued, queued anew when gone."""
        lease_id = data.draw(st.sampled_from(self.ids))
        self.note_grant(
            lease_id, self.acquire(self.g._core.acquire(lease_id, self.g._core.ask("again"), wait=True, fresh=False))
        )

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
        # A process renews the ids it holds, never one it waits on in the queue
        # (a waiter refreshes its place): adopting a queued id would grant it twice.
        ids = data.draw(st.lists(st.sampled_from(self.ids), min_size=1, max_size=4, unique=True))
        ids = [i for i in ids if i not in self.model.queue]
        if not ids:
            return
        epoch = self.model.S["epoch"]
        default = (self.g._core.ask().place, Tokens())
        renewals = [
            (i, self.epoch_of.get(i, epoch), Ask("h", tokens, None, None, place))
            for i in ids
            for place, tokens in [self.asked.get(i, default)]
        ]
        reply = self.run(self.g._core.renew(renewals))
        for i, status in zip(ids, reply[3::2], strict=True):
            if status == "adopted":
                self.epoch_of[i] = reply[2]
                place, _ = self.asked.get(i, default)
                if place.rank > 0 or place.tenant != default[0].tenant:
                    OPERATIONS["adopted_placed"] += 1

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def refresh(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(self.ids), min_size=0, max_size=4, unique=True))
        reply = self.run(self.g._core.refresh(ids))
        for i, status in zip(ids, reply[5::4], strict=True):
            if status == "granted":
                self.epoch_of[i] = reply[2]

    # -- outcomes and policy ----------------------------------------------------

    @rule(
        data=st.data(),
        outcome=st.sampled_from(list(Outcome)),
        retry_after=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 2.0, 100.0])),
        with_lease=st.booleans(),
        release=st.booleans(),
        usage=usages,
        limits=limit_sets,
        refusals_count=st.booleans(),
        load=st.booleans(),
    )
    def report(
        self,
        data: st.DataObject,
        outcome: Outcome,
        retry_after: float | None,
        with_lease: bool,
        release: bool,
        usage: Tokens | None,
        limits: dict[str, tuple[int | None, int | None]] | None,
        refusals_count: bool,
        load: bool,
    ) -> None:
        """One report of any outcome; a refusal may be no load signal (load=False: outcome 'b')."""
        lease_id = data.draw(st.sampled_from(self.ids)) if with_lease and self.ids else None
        fence = None
        m = self.model
        if m.state is not None:  # the fence of a lease of this wave or of an older one
            fence = data.draw(st.one_of(st.none(), st.integers(m.S["fence"] - 3, m.S["fence"])))
        if lease_id is not None and m.leases.get(lease_id, 0) > m.now:
            self._count_refusal(outcome, usage, refusals_count)
        call = self.g._core.report(
            outcome,
            retry_after,
            lease_id,
            fence,
            release=release,
            usage=usage,
            limits=limits,
            refusals_count=refusals_count,
            load=load,
        )
        self.run(call)
        self._count_debt()

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

    @rule(
        weights=st.sampled_from([{}, {"a": 1, "b": 5}, {"c": 7}]),
        aging=st.sampled_from([None, 1.0, 4.0]),
        caps=st.sampled_from([None, {}, {"a": 1}, {"b": 1, "a": 3}]),
        reserve=st.sampled_from([None, 0, 1]),
    )
    def set_shares(
        self, weights: dict[str, int], aging: float | None, caps: dict[str, int] | None, reserve: int | None
    ) -> None:
        """An operator changes the weights, the aging, the caps or the
        reserve: later waiters use the weights, caps and reserve apply at once."""
        if reserve is not None:
            reserve = min(reserve, int(self.model.raw_config["max_capacity"]) - 1)
        self.g._core.stored_config = dict(self.model.raw_config)  # the ceiling it checks the reserve against
        self._note_recount()
        self.run(self.g._core.set_shares(tenant_weights=weights, aging=aging, tenant_caps=caps, reserve=reserve))
        self.g._core.stored_config = dict(self.model.raw_config)  # as the config wake has every client learn

    @rule(with_config=st.booleans())
    def reset(self, with_config: bool) -> None:
        """Without a config: the stored one applied afresh; with one: this client's."""
        self._note_recount()
        self.run(self.g._core.reset(with_config))
        self.note_start()

    @rule(data=st.data())
    def configure_another_policy(self, data: st.DataObject) -> None:
        """reset with another client's config: the policy (and its fields) may change."""
        policy: Policy = data.draw(policies)
        other = GovernorConfig(
            policy=policy,
            max_capacity=data.draw(st.integers(1, 6)),
            window=self.g.config.window,
            lease_ttl=10.0,
            poll=1.0,
            queue_ttl=3.0,
        )
        core = type(self.g._core)(self.g.name, other, clock=self.clock)
        self.run(core.reset(with_config=True))
        self.note_start()

    def _note_recount(self) -> None:
        """A recount is about to run while an expired lease waits to be reclaimed."""
        m = self.model
        if m.state is not None and any(0 < expiry <= m.now for expiry in m.leases.values()):
            OPERATIONS["recount_expired"] += 1

    # -- time and faults ------------------------------------------------------

    @rule(ms=clock_steps)
    def advance(self, ms: int) -> None:
        self.clock.advance(ms / 1000)

    @rule(holds_leases=st.booleans())
    def lose_state(self, holds_leases: bool) -> None:
        """Every key gone (a restart without persistence); the next caller re-creates."""
        self.client.delete(*self.g.keys.keys)
        self.model.lose_state()
        core = self.g._core
        knew = core.last_seen is not None and core.local_now() - core.last_seen < core.config.idle_expiry
        self.run(init_call(core, holds_leases=holds_leases))
        self.note_start(recovered=holds_leases or knew)

    # -- checks ---------------------------------------------------------------

    @invariant()
    def redis_holds_what_the_model_holds(self) -> None:
        if self.gov is None:
            return
        keys, c = self.g.keys, self.client
        stored = self.model.stored()
        for hash_name in ("state", "config", "policy"):
            raw = as_str_dict(c.hgetall(getattr(keys, hash_name)))
            raw.pop("origin", None)  # the Redis server that wrote the state: outside any model
            real = raw if hash_name == "config" else parse_hash(raw)
            want = stored[hash_name]
            differ = {k: (real.get(k), want.get(k)) for k in set(real) | set(want) if real.get(k) != want.get(k)}
            assert not differ, f"{hash_name} fields (Redis, model): {differ}"
        assert as_zset(c.zrange(keys.leases, 0, -1, withscores=True)) == self.model.leases
        assert as_str_dict(c.hgetall(keys.holders)) == self.model.holders
        assert [norm(m) for m in c.zrange(keys.queue, 0, -1)] == self.model.queue_order()
        assert as_zset(c.zrange(keys.queue, 0, -1, withscores=True)) == self.model.queue
        assert as_zset(c.zrange(keys.waiters, 0, -1, withscores=True)) == self.model.waiters
        assert as_zset(c.zrange(keys.aging, 0, -1, withscores=True)) == self.model.aging
        OPERATIONS["aged"] += sum(1 for score in self.model.queue.values() if score < QUEUE_BAND)
        assert as_zset(c.zrange(keys.shares, 0, -1, withscores=True)) == self.model.shares
        held = {norm(k): v for k, v in c.hgetall(keys.held).items()}
        assert (SENTINEL in held) == (self.model.S["capped"] == 1)  # held's sentinel while capped
        assert {k: int(v) for k, v in held.items() if k != SENTINEL} == self.model.held
        assert as_zset(c.zrange(keys.parked, 0, -1, withscores=True)) == self.model.parked
        OPERATIONS["parked"] += len(self.model.parked)
        OPERATIONS["checks"] += 1
        self.run(self.g._core.status())  # capacity, pause, max, not_before, counts, window

    @invariant()
    def live_leases_have_distinct_fences(self) -> None:
        if self.gov is None or self.model.state is None:
            return
        live = [m for m, e in self.model.leases.items() if e > self.model.now]
        assert SENTINEL not in live
        records = [HolderRecord.parse(self.model.holders[m]) for m in live]
        fences = [r.fence for r in records if r is not None]
        assert len(fences) == len(live) and len(set(fences)) == len(fences)
        assert all(r is not None for r in records)


@pytest.mark.parametrize("backend", ["redis", "fakeredis"])
def test_the_scripts_agree_with_the_model(backend: str, redis_url: str, fake_server: fakeredis.FakeServer) -> None:
    if backend == "redis":
        client: Any = redis.Redis.from_url(redis_url, socket_timeout=10)
    else:
        client = fakeredis.FakeRedis(server=fake_server)
    machine = type("Machine", (GovernorMachine,), {"client": client})
    before = dict(OPERATIONS)
    try:
        run_state_machine_as_test(machine, settings=SETTINGS)
    finally:
        client.close()
    ran = {key: OPERATIONS[key] - before[key] for key in OPERATIONS}
    calls, checks = ran["count"], ran["checks"]
    print(f"\n{backend}: {calls - checks} operations, each followed by a full comparison ({calls} script calls)")
    print(f"{backend}: budget paths reached: " + ", ".join(f"{key} {ran[key]}" for key in BUDGET_PATHS))
    assert calls - checks > 500
    assert all(ran[key] > 0 for key in BUDGET_PATHS), f"a budget path was never reached: {ran}"
    print(f"{backend}: adaptive starts below max_capacity (create, reset, configure, lost state): {ran['slow_start']}")
    assert ran["slow_start"] > 0, f"no adaptive governor started below max_capacity: {ran}"
    # the fault paths are reached only sometimes (a refused call needs an active budget
    # with room and a usage): the directed replay below walks each of them every time
    print(f"{backend}: fault paths reached: " + ", ".join(f"{key} {ran[key]}" for key in FAULT_PATHS))
    print(f"{backend}: queue paths reached: " + ", ".join(f"{key} {ran[key]}" for key in QUEUE_PATHS))
    # aging is reached only sometimes (a lower class's waiter must outlive aging
    # while the slots stay taken): the directed replay below walks it every time
    assert all(ran[key] > 0 for key in QUEUE_PATHS if key != "aged"), f"a queue path was never reached: {ran}"


def test_a_capacity_jump_admits_at_most_a_batch_per_call_like_the_model(redis_url: str) -> None:
    """Beyond the random runs' small queues: 150 waiters, then capacity from 1 to 200 (the fixed
    policy follows a new max_capacity at once)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    clock = FakeClock()
    config = GovernorConfig(max_capacity=1, policy="fixed")
    gov = Governor(client, f"model-batch-{uuid.uuid4().hex[:8]}", config, clock=clock)
    load_libraries(client)
    model = Model()

    def both(call: Call[Any]) -> list[Any]:
        real = fcall(client, gov, call)
        assert comparable(call.script, real) == comparable(call.script, norm(model.call(call.script, call.args)))
        return real

    try:
        both(init_call(gov._core, holds_leases=False))
        both(gov._core.acquire("holder", gov._core.ask("h"), wait=False))
        for i in range(150):
            both(gov._core.acquire(f"w{i:03d}", gov._core.ask("h"), wait=True))
        both(gov._core.set_max_capacity(200))
        assert len(model.grants) == 1 + 64  # one batch of grants in the call
        both(gov._core.refresh([]))
        both(gov._core.probe())
        assert len(model.grants) == 1 + 150  # the rest by the next calls, in FIFO order
        assert [lease for lease, _ in model.grants[1:]] == [f"w{i:03d}" for i in range(150)]
        assert as_zset(client.zrange(gov.keys.leases, 0, -1, withscores=True)) == model.leases
        assert model.leases[SENTINEL] == 0 and model.holders[SENTINEL] == ""
    finally:
        client.delete(*gov.keys.keys)
        gov.close()
        client.close()


# -- replays: sequences the random runs found, kept as plain tests ------------------------------


#: a replay step: the state lost (every key gone), then re-created by a client holding leases
LOSE = "lose"


@dataclasses.dataclass(frozen=True)
class Check:
    """A replay step that asserts something of the model (which Redis agrees with)."""

    check: Callable[[Model], object]


def replay(client: Any, steps: list[Any], config: GovernorConfig | None = None) -> Model:
    """Run ``steps`` (a Call factory taking the core, seconds for the clock
    to move, or LOSE: every key gone, the state re-created by a client that
    knew it) on Redis and on the model; every reply and the keys must agree."""
    clock = FakeClock()
    config = config or GovernorConfig(max_capacity=1, lease_ttl=10.0, poll=1.0, queue_ttl=3.0)
    gov = Governor(client, f"model-replay-{uuid.uuid4().hex[:8]}", config, clock=clock)
    load_libraries(client)
    model = Model()
    try:
        for i, step in enumerate([lambda core: init_call(core, holds_leases=False), *steps]):
            if isinstance(step, (int, float)):
                clock.advance(step)
                continue
            if isinstance(step, Check):
                assert step.check(model), f"step {i}: the model's check failed (held {model.held})"
                continue
            if step == LOSE:
                client.delete(*gov.keys.keys)
                model.lose_state()
                step = lambda core: init_call(core, holds_leases=True)  # noqa: E731
            call = step(gov._core)
            real, want = fcall(client, gov, call), norm(model.call(call.script, call.args))
            assert comparable(call.script, real) == comparable(call.script, want), (
                f"{call.script}{call.args[2:]}: Redis {real} != model {want}"
            )
            try:
                call.parse([int(real[0]), *real[1:]])
            except CostTooLarge:  # what the client raises for an acquire refused outright
                assert real[1] == "refused", real
            assert as_str_dict(client.hgetall(gov.keys.holders)) == model.holders
            assert as_zset(client.zrange(gov.keys.queue, 0, -1, withscores=True)) == model.queue
        return model
    finally:
        client.delete(*gov.keys.keys)
        gov.close()


@pytest.fixture(params=["redis", "fakeredis"])
def replay_client(request: pytest.FixtureRequest, redis_url: str, fake_server: fakeredis.FakeServer) -> Any:
    if request.param == "redis":
        client: Any = redis.Redis.from_url(redis_url, socket_timeout=10)
    else:
        client = fakeredis.FakeRedis(server=fake_server)
    yield client
    client.close()


def test_budget_waits_refills_and_settlements_agree_with_the_model(replay_client: Any) -> None:
    """The budget paths step by step, beyond what the random runs happen to
    reach: a try denied by the requests budget, a waiter queued on the
    tokens budget and admitted by the refill, a settlement, a header clamp."""
    config = GovernorConfig(
        max_capacity=4, requests_per_minute=3, tokens_per_minute=600, lease_ttl=10.0, poll=1.0, queue_ttl=30.0
    )
    usage = Tokens(50, 50)
    model = replay(
        replay_client,
        [
            lambda core: core.acquire("a", core.ask("h", tokens=Tokens(300, 100)), wait=False),
            lambda core: core.report(Outcome.SUCCESS, None, "a", None, release=True, usage=usage),
            lambda core: core.acquire("b", core.ask("h", tokens=Tokens(200, 0)), wait=False),
            lambda core: core.acquire("c", core.ask("h", tokens=10), wait=False),
            lambda core: core.acquire("d", core.ask("h"), wait=False),  # the requests budget: 3 a minute
            lambda core: core.acquire("e", core.ask("h", tokens=Tokens(400, 0)), wait=True),  # queued on both
            lambda core: core.acquire("f", core.ask("h", tokens=Tokens(700, 0)), wait=True),  # above 600: refused
            20.0,  # one request and 200 tokens back
            lambda core: core.refresh(["e"]),
            lambda core: core.report(Outcome.SUCCESS, None, None, None, limits={"tokens": (600, 50)}),
            lambda core: core.status(),
        ],
        config,
    )
    assert model.S["budgets"] == "requests,tokens"
    assert model.leases.get("e", 0) > model.now, "the refill admitted the waiter"


def test_growth_without_reports_agrees_with_the_model(replay_client: Any) -> None:
    """No news is not bad news, step by step (the random runs' waiters rarely
    outlive a probe interval): waiters at a full capacity and nothing refused
    double the slow start every probe interval of the head's wait; a 429 in
    the window or a Retry-After hold stops it; with a ceiling learnt, a probe
    by time once the window has no refusal."""
    config = GovernorConfig(max_capacity=8, window=8.0, lease_ttl=3600.0, poll=1.0, queue_ttl=30.0)
    waiters = [f"w{i}" for i in range(6)]
    model = replay(
        replay_client,
        [
            lambda core: core.acquire("a", core.ask("h"), wait=False),
            lambda core: core.acquire("b", core.ask("h"), wait=False),  # capacity 2 of 8: full
            *[lambda core, w=w: core.acquire(w, core.ask("h"), wait=True) for w in waiters],
            1.5,
            lambda core: core.refresh(waiters),  # the head waited 1.5 s < 2 s: nothing yet
            0.5,
            lambda core: core.refresh(waiters),  # 2 s: 4, two granted
            1.0,
            lambda core: core.refresh(waiters[2:]),  # the head waited 1 s at 4: not yet
            1.0,
            lambda core: core.probe(),  # 2 s at 4: 8, the rest granted
        ],
        config,
    )
    assert model.S["capacity"] == 8 and all(model.leases.get(w, 0) > model.now for w in waiters)
    refused = replay(
        replay_client,
        [
            lambda core: core.acquire("a", core.ask("h"), wait=False),
            lambda core: core.acquire("b", core.ask("h"), wait=False),
            lambda core: core.acquire("w", core.ask("h"), wait=True),
            lambda core: core.report(Outcome.RATE_LIMITED, 3.0, None),  # at 2 in flight: cut to 1, hold 3 s
            lambda core: core.release("b"),
            lambda core: core.refresh(["w"]),  # the hold: no growth
            5.0,
            lambda core: core.refresh(["w"]),  # a 429 in the window: no growth
            4.0,
            lambda core: core.refresh(["w"]),  # the window has no 429 now, and a ceiling: a probe by time
        ],
        config,
    )
    assert refused.P["ceiling"] == 2 and refused.S["capacity"] == 2  # cut to 1, probed back to 2
    assert refused.leases.get("w", 0) > refused.now


def test_a_dead_waiter_does_not_keep_a_try_out(replay_client: Any) -> None:
    """A waiter past its deadline never counts, even before it is removed
    (lua/lib/common.lua, Cost): a try with room is admitted, as status'
    blocked ('') says it would be."""
    replay(
        replay_client,
        [
            lambda core: core.acquire("a", core.ask("h"), wait=True),  # granted: 1 in flight of 1
            lambda core: core.acquire("b", core.ask("h"), wait=True),  # queued behind it
            10.001,  # a's lease expired, b stopped refreshing 7 s ago
            lambda core: core.status(),  # blocked '': a new caller would be admitted
            lambda core: core.acquire("c", core.ask("h"), wait=False),  # ... and so it is
        ],
    )


@pytest.mark.parametrize("give_back", ["release", "report"])
def test_releasing_a_waiters_id_leaves_its_place_alone(replay_client: Any, give_back: str) -> None:
    """release (and report with release) take a lease and its holder record;
    an id that holds no lease but waits in the queue keeps its record, so
    the next grant admits it."""

    def release_b(core: Any) -> Call[Any]:
        if give_back == "release":
            return core.release("b")  # type: ignore[no-any-return]
        return core.report(Outcome.SUCCESS, None, "b", None, release=True)  # type: ignore[no-any-return]  # 'lost'

    model = replay(
        replay_client,
        [
            lambda core: core.acquire("a", core.ask("h"), wait=True),
            lambda core: core.acquire("b", core.ask("h"), wait=True),
            release_b,  # no lease 'b': nothing to give back
            lambda core: core.release("a"),  # the slot goes to b
        ],
    )
    assert [lease for lease, _ in model.grants] == ["a", "b"]


def test_classes_aging_and_tenant_shares_agree_with_the_model(replay_client: Any) -> None:
    """The queue's paths step by step: three classes, two weighted tenants,
    a batch waiter that ages ahead of every class, a cancel, a dead waiter,
    a change of weights, and the pruning of finish tags behind vtime."""
    config = GovernorConfig(
        max_capacity=1, policy="fixed", aging=0.5, tenant_weights={"a": 3}, lease_ttl=10.0, poll=1.0, queue_ttl=3.0
    )

    def wait(lease_id: str, priority: str | None = None, tenant: str | None = None) -> Any:
        return lambda core: core.acquire(lease_id, core.ask("h", priority=priority, tenant=tenant), wait=True)

    model = replay(
        replay_client,
        [
            wait("holder"),
            wait("b1", "batch", "b"),
            0.2,
            wait("i1", "interactive", "a"),
            wait("i2", "interactive", "b"),
            wait("d1", None, "a"),
            wait("d2", None, "a"),
            wait("gone", "batch"),
            lambda core: core.cancel("gone"),
            0.4,  # b1 has waited 0.6 s: it ages at the next grant
            lambda core: core.release("holder"),
            lambda core: core.refresh(["i1", "i2", "d1", "d2"]),
            lambda core: core.release("b1"),
            lambda core: core.set_shares(tenant_weights={"b": 5}, aging=None),
            wait("late", "batch", "b"),
            lambda core: core.release("i1"),
            2.0,
            lambda core: core.refresh(["late"]),  # i2, d1, d2 stopped refreshing: gone
            lambda core: core.probe(),
        ],
        config,
    )
    assert [lease for lease, _ in model.grants] == ["holder", "b1", "i1", "i2"]
    assert model.S["aging_due"] == 0 and not model.aging


def test_refusals_debt_adoption_and_recounts_agree_with_the_model(replay_client: Any) -> None:
    """The paths of budgets and shares under faults and bad input, each
    walked once: a refused call's reservation spent, then given back (the
    provider does not count refusals), both clamped to 0; a usage far beyond
    the bucket charged down to the debt bound; a state lost and re-created
    with its buckets empty, a lease adopted with its tenant, class and
    reservation; a recount (set_shares, reset) while an expired lease is not
    yet reclaimed."""
    config = GovernorConfig(
        max_capacity=4,
        tokens_per_minute=600,
        tenant_caps={"a": 1},
        reserve=1,
        lease_ttl=10.0,
        poll=1.0,
        queue_ttl=30.0,
        policy="fixed",
    )
    R, S = Outcome.RATE_LIMITED, Outcome.SUCCESS
    a_batch = Ask("h", Tokens(100, 0), "batch", "a", Place("batch", 2, "a", 1))
    b_default = Ask("h", Tokens(), None, "b", Place("default", 1, "b", 1))
    tokens = Tokens(100, 0)

    def report(outcome: Outcome, lease: str, usage: Tokens, refusals_count: bool = True) -> Any:
        return lambda core: core.report(
            outcome, None, lease, None, release=True, usage=usage, refusals_count=refusals_count
        )

    def level(m: Model) -> float:
        return m.budget_level("tokens")

    model = replay(
        replay_client,
        [
            lambda core: core.acquire("r1", core.ask("h", tokens=tokens), wait=False),
            Check(lambda m: level(m) == 500),
            report(R, "r1", Tokens()),  # spent, then clamped to 0
            Check(lambda m: level(m) == 0),
            30.0,
            lambda core: core.acquire("r2", core.ask("h", tokens=tokens), wait=False),
            Check(lambda m: level(m) == 200),
            report(R, "r2", Tokens(), refusals_count=False),  # given back (300), then clamped to 0
            Check(lambda m: level(m) == 0),
            60.0,
            lambda core: core.acquire("d1", core.ask("h", tokens=tokens), wait=False),
            report(S, "d1", Tokens(10**8, 0)),  # charged down to the debt bound
            Check(lambda m: level(m) == -600),
            120.0,
            lambda core: core.acquire("held", a_batch, wait=False),
            Check(lambda m: m.held == {"a": 1, LOWER_HELD: 1}),
            LOSE,  # re-created: the bucket starts empty, held for the holders to re-register
            Check(lambda m: level(m) == 0 and m.held == {}),
            lambda core: core.renew([("held", "lost-epoch", a_batch)]),  # adopted: a, batch, 100 tokens
            Check(lambda m: m.held == {"a": 1, LOWER_HELD: 1} and level(m) == -100),
            6.0,
            lambda core: core.renew([("held", "", a_batch)]),
            6.0,  # past the hold
            lambda core: core.renew([("held", "", a_batch)]),
            lambda core: core.set_max_capacity(4),  # a re-created state starts at the resume level
            lambda core: core.acquire("dead", b_default, wait=False),
            Check(lambda m: "dead" in m.leases),
            5.0,
            lambda core: core.renew([("held", "", a_batch)]),
            5.5,  # dead's lease (10 s) ran out, not reclaimed
            Check(lambda m: "dead" in m.leases and m.held == {"a": 1, LOWER_HELD: 2}),
            lambda core: core.set_shares(tenant_caps={"a": 1, "b": 2}, reserve=1),  # reclaims, then recounts
            Check(lambda m: "dead" not in m.leases and m.held == {"a": 1, LOWER_HELD: 1}),
            lambda core: core.acquire("dead2", b_default, wait=False),
            5.0,
            lambda core: core.renew([("held", "", a_batch)]),
            5.5,  # dead2 ran out, not reclaimed
            lambda core: core.reset(False),  # recounts (dead2 included), then reclaims it: counted once
            Check(lambda m: "dead2" not in m.leases and m.held == {"a": 1, LOWER_HELD: 1}),
        ],
        config,
    )
    assert "held" in model.leases
