#!/usr/bin/env python3
"""Write tests/conformance/vectors.json from the reference model.

    python tests/conformance/generate.py          write the vectors
    python tests/conformance/generate.py --check  exit 1 if the file differs

A vector is a sequence of function calls on one fresh governor, with an
injected clock: each step's ARGV as a client sends it (built by the Python
client's sans-IO core, so the formatting is the protocol's), the reply the
reference model (tests/support/model.py, itself checked against the Lua by
tests/test_model.py) gives, the messages published on the wake channel,
and what the keys hold afterwards. The scenarios below name the paths a
client must get right (grants, the queue, priorities, expiry, renewal and
adoption after a loss, cancel-safety, reports and holds, budgets, tenants,
operator calls); seeded random walks add what no one thought of.

A step may also carry ``call``: what the client was asked to do, in its
own terms (lease id, mode, tokens, class and tenant names; an outcome,
retry-after seconds, usage and rate-limit figures, ``load`` false for a
refusal that is no load signal; ...), with the vector's ``client``
settings (lease and queue TTL, seconds): a client builds its ARGV from
it, with its clock at ARGV[1], and checks it is the step's ``argv`` (the
class's rank and the tenant's weight come from the stored config
``init`` answered).

Placeholders a runner substitutes: ``$channel`` in ARGV[2] (its
governor's wake channel). Each runner picks a fresh governor name per
vector, derives the keys from it as docs/protocol.md says, subscribes to
the channel before the first step (so the functions count exactly one
listener), and checks, after each step: the reply (every element as a
string, nested arrays as arrays; init's name, value pairs from its 4th
element on as a map), the messages published during the step, in order,
and every compared key (``compared_keys``) against its expectation: the
last ``after`` that named it (``after`` names only the keys a step
changed; a key never named is empty). A hash is compared field by field
(a JSON number as a number), a zset as member -> score, a missing key as
empty.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from governor import scripts  # noqa: E402
from governor.budgets import Tokens  # noqa: E402
from governor.config import GovernorConfig  # noqa: E402
from governor.core import Call, GovernorCore, Outcome  # noqa: E402
from governor.protocol import SCHEMA_VERSION, SENTINEL  # noqa: E402

try:  # the test helpers' home moves to tests/support/
    from tests.support.model import STRING_FIELDS, Model  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    from tests.model import STRING_FIELDS, Model

OUT = Path(__file__).resolve().parent / "vectors.json"
CHANNEL = "$channel"
START = 1_000_000.0
#: the keys compared after each step (attempts, limited and events hold the
#: window and the decision log, which the state's counters summarise)
COMPARED = ("state", "config", "policy", "leases", "holders", "queue", "waiters", "aging", "shares", "held", "parked")

Step = Callable[[GovernorCore], Call[Any]] | float | str


class Recorder:
    """Runs steps on the model and writes down what a runner must see."""

    def __init__(self, name: str, about: str, config: GovernorConfig) -> None:
        self.clock = [START]
        self.core = GovernorCore("conformance", config, clock=lambda: self.clock[0])
        self.model = Model()
        self.model.listeners = 1  # the runner's own subscription
        self.vector: dict[str, Any] = {
            "name": name,
            "about": about,
            "client": {"lease_ttl": config.lease_ttl, "queue_ttl": config.queue_ttl},
            "steps": [],
        }
        self.epochs = 0
        self.last: dict[str, Any] = {name: {} for name in COMPARED}

    def run(self, step: Step) -> None:
        if isinstance(step, (int, float)):
            self.clock[0] += step
            return
        if step == "lose":
            self.model.lose_state()
            self.vector["steps"].append({"op": "lose_state", "after": self.after()})
            return
        assert callable(step)
        call = step(self.core)
        args = list(call.args)
        args[1] = CHANNEL
        if call.script == "init":
            self.epochs += 1
            args[2] = f"epoch-{self.epochs}"
        published = len(self.model.published)
        reply = self.model.call(call.script, args)
        text = _strings(reply)
        try:
            call.parse([int(text[0]), *text[1:]])  # the client learns (stored config, fence floor)
        except Exception:  # noqa: BLE001 - a refused cost raises; the reply is what matters here
            pass
        described = getattr(step, "call", None)
        self.vector["steps"].append(
            {
                "op": call.script,
                **({} if described is None else {"call": described}),
                "argv": args,
                "reply": text,
                "published": list(self.model.published[published:]),
                "after": self.after(),
            }
        )

    def after(self) -> dict[str, Any]:
        """The keys whose content changed in the step (a runner keeps the
        last expectation of each key and compares every key each step)."""
        now = self.contents()
        changed = {name: value for name, value in now.items() if value != self.last[name]}
        self.last = now
        return changed

    def contents(self) -> dict[str, Any]:
        m = self.model
        if m.state is None:
            return {name: {} for name in COMPARED}
        return {
            "state": {k: _field(k, v) for k, v in m.S.items()},
            "config": dict(m.raw_config),
            "policy": {k: _field(k, v) for k, v in m.P.items()},
            "leases": dict(m.leases),
            "holders": dict(m.holders),
            "queue": dict(m.queue),
            "waiters": dict(m.waiters),
            "aging": dict(m.aging),
            "shares": dict(m.shares),
            # (held keeps its sentinel while caps or a reserve are set: lib/shares.lua recount)
            "held": {**({SENTINEL: ""} if m.S.get("capped") == 1 else {}), **{k: str(v) for k, v in m.held.items()}},
            "parked": dict(m.parked),
        }


def _field(name: str, value: Any) -> Any:
    if name in STRING_FIELDS:
        return str(value)
    number = float(str(value))
    return int(number) if number.is_integer() else number


def _strings(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_strings(v) for v in value]
    return str(value)


def init(core: GovernorCore) -> Call[Any]:
    return core.init(holds_leases=False, listening=True)


def recovered_init(core: GovernorCore) -> Call[Any]:
    return core.init(holds_leases=True, listening=True)


def _tokens(value: Tokens | int | None) -> list[int] | None:
    if value is None:
        return None
    tokens = Tokens.of(value)
    return [tokens.input, tokens.output]


def acquire(lease_id: str, wait: bool = True, fresh: bool = True, **kw: Any) -> Callable[[GovernorCore], Call[Any]]:
    priority, tenant, tokens = kw.pop("priority", None), kw.pop("tenant", None), kw.pop("tokens", None)

    def step(core: GovernorCore) -> Call[Any]:
        return core.acquire(lease_id, core.ask("host-1/1", tokens, priority, tenant), wait=wait, fresh=fresh)

    mode = ("wait" if fresh else "again") if wait else "try"
    step.call = {  # type: ignore[attr-defined]
        "id": lease_id,
        "holder": "host-1/1",
        "mode": mode,
        "tokens": _tokens(tokens),
        "priority": priority,
        "tenant": tenant,
    }
    return step


def describe(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any] | None:
    """A call's language-neutral description, from which a client builds its ARGV."""
    if name in ("release", "cancel"):
        return {"id": args[0]}
    if name == "renew":
        return {"leases": [list(triple) for triple in args[0]]}
    if name == "refresh":
        return {"ids": list(args[0])}
    if name == "report":
        outcome, retry_after, lease_id, fence = (*args, None)[:4]
        return {
            **({"load": False} if kw.get("load") is False else {}),  # no load signal: outcome b
            "outcome": outcome.name.lower(),
            "retry_after": retry_after,
            "lease": lease_id,
            "fence": fence,
            "release": kw.get("release", False),
            "usage": _tokens(kw.get("usage")),
            "limits": {kind: list(pair) for kind, pair in (kw.get("limits") or {}).items()},
        }
    if name in ("status", "probe", "resume"):
        return {}
    if name == "pause":
        return {"reason": args[0], "duration": args[1]}
    if name == "set_max_capacity":
        return {"n": args[0]}
    if name == "set_shares":  # unset ones keep the stored config's
        return {
            "tenant_weights": kw.get("tenant_weights"),
            "default_weight": kw.get("default_weight"),
            "aging": kw.get("aging", "unchanged"),
            "tenant_caps": kw.get("tenant_caps"),
            "reserve": kw.get("reserve"),
        }
    if name == "reset":  # with_config: store this client's own config
        return {"with_config": args[0]}
    return None


def op(name: str, *args: Any, **kw: Any) -> Callable[[GovernorCore], Call[Any]]:
    def step(core: GovernorCore) -> Call[Any]:
        if name == "renew":  # (id, epoch, holder) each: the lease of that holder's default ask
            return core.renew([(lease_id, epoch, core.ask(holder)) for lease_id, epoch, holder in args[0]])
        return getattr(core, name)(*args, **kw)  # type: ignore[no-any-return]

    step.call = describe(name, args, kw)  # type: ignore[attr-defined]
    return step


FIXED = GovernorConfig(max_capacity=2, policy="fixed", lease_ttl=9.0, queue_ttl=3.0, poll=1.0)

SCENARIOS: list[tuple[str, str, GovernorConfig, list[Step]]] = [
    (
        "grant-and-release",
        "init creates the state; two admitted at once, fences growing; release and release again",
        FIXED,
        [init, init, acquire("a"), acquire("b"), op("status"), op("release", "a"), op("release", "a"), op("status")],
    ),
    (
        "queue-fifo-and-wake",
        "at capacity callers queue in order; a release grants the head and publishes 'epoch id:fence'",
        FIXED,
        [
            init,
            acquire("a"),
            acquire("b"),
            acquire("c"),
            acquire("d"),
            0.5,
            op("refresh", ["c", "d"]),
            op("release", "a"),
            op("refresh", ["c", "d"]),
            op("release", "b"),
            op("release", "c"),
            op("release", "d"),
        ],
    ),
    (
        "try-denied",
        "mode try is admitted now or denied, never queued",
        FIXED,
        [
            init,
            acquire("a", wait=False),
            acquire("b", wait=False),
            acquire("c", wait=False),
            acquire("q"),
            acquire("d", wait=False),
        ],
    ),
    (
        "priorities",
        "a higher class is granted first, whatever the arrival order",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=9.0, queue_ttl=30.0),
        [
            init,
            acquire("a"),
            acquire("low", priority="batch"),
            acquire("mid"),
            acquire("high", priority="interactive"),
            op("release", "a"),
            op("release", "high"),
            op("release", "mid"),
            op("release", "low"),
        ],
    ),
    (
        "aging",
        "a lower class's waiter goes ahead of every class after aging",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=60.0, queue_ttl=60.0, aging=5.0),
        [
            init,
            acquire("a"),
            acquire("low", priority="batch"),
            6.0,
            acquire("high", priority="interactive"),
            op("refresh", ["low", "high"]),
            op("release", "a"),
            op("status"),
        ],
    ),
    (
        "tenants-weighted",
        "two tenants weighted 3:1 share grants in proportion while both wait",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=60.0, queue_ttl=60.0, tenant_weights={"big": 3}),
        [
            init,
            acquire("a"),
            *[acquire(f"b{i}", tenant="big") for i in range(4)],
            *[acquire(f"s{i}", tenant="small") for i in range(2)],
            op("release", "a"),
            op("release", "b0"),
            op("release", "b1"),
            op("release", "b2"),
            op("release", "s0"),
        ],
    ),
    (
        "tenant-cap-parks",
        "a tenant at its cap is parked; its lease's end puts its first parked waiter back",
        GovernorConfig(max_capacity=3, policy="fixed", lease_ttl=60.0, queue_ttl=60.0, tenant_caps={"t": 1}),
        [
            init,
            acquire("t1", tenant="t"),
            acquire("t2", tenant="t"),
            acquire("u1", tenant="u"),
            op("status"),
            op("release", "t1"),
            op("refresh", ["t2"]),
            op("release", "t2"),
        ],
    ),
    (
        "expiry-and-reclaim",
        "a lease not renewed expires after its TTL; its slot comes back; its late report is fenced off",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=3.0, queue_ttl=30.0),
        [
            init,
            acquire("a"),
            acquire("b"),
            3.5,
            op("refresh", ["b"]),
            op("report", Outcome.SUCCESS, None, "a", 0),
            op("renew", [("a", "epoch-1", "host-1/1")]),
            op("release", "b"),
        ],
    ),
    (
        "renew-keeps-a-lease",
        "a renewed lease outlives its first TTL; renew answers ok, then lost for a released one",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=3.0, queue_ttl=30.0),
        [
            init,
            acquire("a"),
            2.0,
            op("renew", [("a", "epoch-1", "host-1/1")]),
            2.0,
            acquire("b", wait=False),
            op("status"),
            op("release", "a"),
            op("renew", [("a", "epoch-1", "host-1/1")]),
        ],
    ),
    (
        "state-lost-adoption",
        "every key gone: calls answer missing; init (recovered) holds for a TTL; renew adopts the lease, "
        "with a higher fence",
        GovernorConfig(max_capacity=4, policy="fixed", lease_ttl=6.0, queue_ttl=30.0),
        [
            init,
            acquire("a"),
            acquire("b"),
            "lose",
            acquire("c", wait=False),
            op("release", "b"),
            op("report", Outcome.SUCCESS, None, "b", 0),
            op("cancel", "c"),
            op("refresh", ["c"]),
            op("renew", [("a", "epoch-1", "host-1/1")]),
            op("status"),
            recovered_init,
            op("renew", [("a", "epoch-1", "host-1/1")]),
            acquire("c", wait=False),
            op("status"),
            6.5,
            acquire("d", wait=False),
        ],
    ),
    (
        "cancel-gives-back",
        "cancel removes a waiter, releases a grant that came meanwhile, and is harmless twice",
        FIXED,
        [
            init,
            acquire("a"),
            acquire("b"),
            acquire("w1"),
            acquire("w2"),
            op("cancel", "w1"),
            op("release", "a"),
            op("cancel", "w2"),
            op("cancel", "w2"),
            op("status"),
        ],
    ),
    (
        "acquire-again",
        "mode again answers granted for a granted id, refreshes a queued one, re-queues a dropped one",
        GovernorConfig(max_capacity=1, policy="fixed", lease_ttl=30.0, queue_ttl=2.0),
        [
            init,
            acquire("a"),
            acquire("w"),
            acquire("w", fresh=False),
            2.5,
            op("refresh", []),
            acquire("w", fresh=False),
            op("release", "a"),
            acquire("w", fresh=False),
        ],
    ),
    (
        "rate-limited-hold",
        "a rate-limited report with Retry-After holds the fleet; the hold is published to waiters and ends",
        GovernorConfig(max_capacity=2, policy="fixed", lease_ttl=60.0, queue_ttl=60.0, retry_after_cap=10.0),
        [
            init,
            acquire("a"),
            op("report", Outcome.RATE_LIMITED, 4.0, "a", 0, release=True),
            acquire("b", wait=False),
            acquire("c"),
            op("status"),
            4.5,
            op("refresh", ["c"]),
            op("report", Outcome.ERROR, None, "c", 0, release=True),
            op("report", Outcome.QUOTA_EXHAUSTED, None, None),
        ],
    ),
    (
        "adaptive-policy",
        "the adaptive policy starts at the resume level, grows on successes and pauses on 429s",
        GovernorConfig(max_capacity=8, lease_ttl=60.0, queue_ttl=60.0),
        [
            init,
            op("status"),
            *[
                s
                for i in range(4)
                for s in (acquire(f"a{i}"), op("report", Outcome.SUCCESS, None, f"a{i}", 0, release=True))
            ],
            op("status"),
            *[
                s
                for i in range(4)
                for s in (acquire(f"r{i}"), op("report", Outcome.RATE_LIMITED, None, f"r{i}", 0, release=True))
            ],
            op("status"),
            61.0,
            op("probe"),
        ],
    ),
    (
        "background-refusal",
        "a refusal that is no load signal (load=False, outcome b): under the adaptive policy an attempt, not a "
        "refusal of the window, no cut and no fleet hold; a load signal after it cuts and holds",
        GovernorConfig(max_capacity=8, lease_ttl=60.0, queue_ttl=60.0, retry_after_cap=10.0),
        [
            init,
            acquire("a"),
            acquire("b"),
            op("report", Outcome.RATE_LIMITED, 4.0, "a", None, release=True, load=False),
            op("status"),
            op("report", Outcome.RATE_LIMITED, 4.0, "b", None, release=True),
            op("status"),
        ],
    ),
    (
        "background-refusal-fixed",
        "a refusal that is no load signal, to a policy with no rule for it: a refusal as any, its hold included",
        GovernorConfig(max_capacity=2, policy="fixed", lease_ttl=60.0, queue_ttl=60.0, retry_after_cap=10.0),
        [
            init,
            acquire("a"),
            op("report", Outcome.RATE_LIMITED, 2.0, "a", 0, release=True, load=False),
            op("status"),
        ],
    ),
    (
        "budgets",
        "token and request budgets: a reservation, a settlement, a refill, a header calibration (the ceiling "
        "below it wins), a refused cost, a refusal (a 429) clamping the buckets",
        GovernorConfig(
            max_capacity=4, policy="fixed", requests_per_minute=3, tokens_per_minute=600, lease_ttl=10.0, queue_ttl=30.0
        ),
        [
            init,
            acquire("big", wait=False, tokens=Tokens(5000, 0)),  # above the tokens budget's whole limit
            acquire("a", wait=False, tokens=Tokens(300, 100)),
            op("report", Outcome.SUCCESS, None, "a", None, release=True, usage=Tokens(50, 50)),
            acquire("b", wait=False, tokens=Tokens(200, 0)),
            acquire("c", wait=False, tokens=10),
            acquire("d", wait=False),
            acquire("e", tokens=Tokens(400, 0)),
            20.0,
            op("refresh", ["e"]),
            op("report", Outcome.SUCCESS, None, None, None, limits={"tokens": (900, 50)}),
            op("status"),
            acquire("f", wait=False, tokens=Tokens(5000, 0)),
            op("report", Outcome.RATE_LIMITED, None, "b", None, release=True, usage=Tokens()),
            op("status"),
        ],
    ),
    (
        "operator",
        "pause holds admissions and resume lifts it; set_max changes the ceiling and tells clients (!config)",
        FIXED,
        [
            init,
            acquire("a"),
            op("pause", "maintenance", 30.0),
            acquire("b"),
            acquire("c", wait=False),
            op("resume"),
            op("refresh", ["b"]),
            op("set_max_capacity", 3),
            acquire("d", wait=False),
            op("set_shares", tenant_weights={"x": 2}),
            op("reset", False),
            op("status"),
        ],
    ),
]

RANDOM_WALKS = 6
WALK_STEPS = 30


def random_walk(seed: int) -> tuple[str, str, GovernorConfig, list[Step]]:
    rng = random.Random(seed)
    config = GovernorConfig(
        max_capacity=rng.choice([1, 2, 3]),
        policy=rng.choice(["fixed", "adaptive", "seed"]),
        lease_ttl=rng.choice([3.0, 9.0]),
        queue_ttl=rng.choice([2.0, 5.0]),
        requests_per_minute=rng.choice([None, 6]),
        tenant_weights={"t": 2},
    )
    ids: list[str] = []
    steps: list[Step] = [init]
    for n in range(WALK_STEPS):
        kind = rng.choice(
            ["acquire", "acquire", "try", "release", "cancel", "renew", "refresh", "report", "advance", "probe"]
        )
        if kind in ("acquire", "try") or not ids:
            lease_id = f"w{seed}-{n}"
            ids.append(lease_id)
            kw: dict[str, Any] = {}
            if rng.random() < 0.3:
                kw["priority"] = rng.choice(["interactive", "batch"])
            if rng.random() < 0.3:
                kw["tenant"] = "t"
            steps.append(acquire(lease_id, wait=kind != "try", **kw))
        elif kind == "release":
            steps.append(op("release", rng.choice(ids)))
        elif kind == "cancel":
            steps.append(op("cancel", rng.choice(ids)))
        elif kind == "renew":
            steps.append(op("renew", [(i, "epoch-1", "host-1/1") for i in rng.sample(ids, min(2, len(ids)))]))
        elif kind == "refresh":
            steps.append(op("refresh", rng.sample(ids, min(3, len(ids)))))
        elif kind == "report":
            outcome = rng.choice([Outcome.SUCCESS, Outcome.SUCCESS, Outcome.RATE_LIMITED, Outcome.ERROR])
            steps.append(op("report", outcome, None, rng.choice(ids), None, release=rng.random() < 0.5))
        elif kind == "advance":
            steps.append(rng.choice([0.5, 1.5, 4.0]))
        else:
            steps.append(op("probe"))
    return f"random-walk-{seed}", f"seeded random operations (seed {seed})", config, steps


def vectors() -> dict[str, Any]:
    out = []
    for name, about, config, steps in [*SCENARIOS, *(random_walk(seed) for seed in range(1, RANDOM_WALKS + 1))]:
        recorder = Recorder(name, about, config)
        for step in steps:
            recorder.run(step)
        out.append(recorder.vector)
    return {
        "about": (
            "Conformance vectors of the fleet-governor protocol (docs/protocol.md), from the reference model. "
            "Written by tests/conformance/generate.py; see its docstring for how a runner uses them."
        ),
        "schema": SCHEMA_VERSION,
        "library": scripts.library_name(),
        "placeholders": {"$channel": "the governor's wake channel (ARGV[2])"},
        "compared_keys": list(COMPARED),
        "vectors": out,
    }


def coverage(data: dict[str, Any]) -> dict[str, Any]:
    """Which functions and reply kinds the vectors reach."""
    ops: dict[str, int] = {}
    replies: dict[str, int] = {}
    steps = 0
    for vector in data["vectors"]:
        for step in vector["steps"]:
            steps += 1
            ops[step["op"]] = ops.get(step["op"], 0) + 1
            if "reply" in step:
                key = f"{step['op']}:{step['reply'][1]}"
                replies[key] = replies.get(key, 0) + 1
                for word in step["reply"][3:] if step["op"] in ("renew", "refresh") else ():
                    if word in ("ok", "adopted", "lost", "granted", "queued", "unknown"):
                        key = f"{step['op']}:{word}"
                        replies[key] = replies.get(key, 0) + 1
    return {"vectors": len(data["vectors"]), "steps": steps, "functions": ops, "replies": replies}


def text() -> str:
    """The vectors as JSON: one line per step, so a change reads as a diff of its steps."""
    data = vectors()
    lines = ["{"]
    for key, value in data.items():
        if key != "vectors":
            lines.append(f" {json.dumps(key)}: {json.dumps(value)},")
    lines.append(' "vectors": [')
    for i, vector in enumerate(data["vectors"]):
        head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in vector.items() if k != "steps")
        lines.append(f'  {{{head}, "steps": [')
        steps = [f"   {json.dumps(step, separators=(',', ':'))}" for step in vector["steps"]]
        lines.append(",\n".join(steps))
        lines.append("  ]}" + ("," if i < len(data["vectors"]) - 1 else ""))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if vectors.json differs from the model's")
    parser.add_argument("--coverage", action="store_true", help="print the functions and replies reached")
    args = parser.parse_args()
    fresh = text()
    if args.coverage:
        print(json.dumps(coverage(json.loads(fresh)), indent=1))
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != fresh:
            print(
                "tests/conformance/vectors.json differs from the model: run tests/conformance/generate.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
