#!/usr/bin/env python3
"""Where an operation's server instructions go, step by step (callgrind).

    python scripts/report_stages.py [--operation report] [--calls 200] [--queued]

Every operation marks its steps in its own Lua: a top-level line
``-- step: <what the step does>`` (PLANS of lua/lib/plans.lua declares
them); this tool counts those of the hot ones (lua/report.lua,
lua/acquire.lua, lua/release.lua). It loads a copy of the library under another name
in which the operation is cut short before each step (``do return 0 end``
there), runs each cut ``calls`` times on a private ``redis-server`` under
callgrind, and prints what each step adds, from the floor of the call (an
FCALL that returns at once) to the whole operation. Needs valgrind.

``--queued``: the hand-over's two halves instead (release granting the
queue's head, acquire joining the queue), on plain governors each full
with 10 leases and 10 waiters. A cut call leaves its governor half-way, so
each is called once per round on each of ``--governors`` governors, whose
hand-overs are then completed by the whole functions, uncounted.

The cuts are built from the markers, so they move with the Lua;
tests/test_protocol.py loads every cut of every marked operation on a real
Redis and runs it, so a marker that no longer cuts the Lua at a valid place
fails the suite.
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from governor import Governor, GovernorConfig, Outcome, scripts
from governor.scripts import function_name

MARKER = re.compile(r"^-- step: (.+)$", re.M)
#: the operations whose steps are marked, each with its way of calling it
OPERATIONS = ("acquire", "report", "release")


def steps(operation: str) -> list[tuple[str, str]]:
    """(name, the operation's Lua cut short before it) for each marked step,
    then ("the whole <operation>", its whole Lua); the first is the floor."""
    body = (scripts._lua_dir() / f"{operation}.lua").read_text(encoding="utf-8")
    cuts = [("the floor: FCALL, begin()", "do return 0 end\n" + body)]
    marks = list(MARKER.finditer(body))
    for i, mark in enumerate(marks):
        name = marks[i - 1].group(1) if i else "arguments parsed"
        cuts.append((name, body[: mark.start()] + "do return 0 end\n" + body[mark.start() :]))
    cuts.append((marks[-1].group(1) if marks else f"the whole {operation}", body))
    return cuts


def cut_library(operation: str) -> tuple[str, list[str]]:
    """A library of its own holding the whole library and one function per
    cut of ``operation`` (stage0, stage1, ...), and the steps' names."""
    name = scripts.library_name()
    copy = scripts.library().replace(f"name={name}", "name=governor_stages").replace(f"'{name}_", "'stages_")
    names, functions = [], []
    for i, (step, cut) in enumerate(steps(operation)):
        names.append(step)
        functions.append(
            f"{scripts.opening(f'stage{i}', scripts.imports(cut))}\n{cut}\n{scripts.CLOSING}\n"
            f"redis.register_function{{function_name = 'stage{i}', "
            f"callback = function(keys, argv) begin(keys, argv) return OPS.stage{i}() end}}"
        )
    return copy + "\n" + "\n".join(functions) + "\n", names


def governor(client: redis.Redis, leases: int = 10) -> Governor:
    """A governor with room to spare, ``leases`` live leases, nothing due."""
    config = GovernorConfig(max_capacity=100_000, lease_ttl=3600.0, queue_ttl=3600.0, restart_hold=False)
    config = GovernorConfig(**{**config.__dict__, "resume_fraction": 1.0})
    gov = Governor(client, f"stages-{uuid.uuid4().hex[:8]}", config)
    for _ in range(5):
        gov.report(Outcome.SUCCESS, lease=gov.acquire(), release=True)
    for _ in range(leases):
        gov.acquire()
    # No reclaim and no touch falls due while counting: a cut call never saves their next due times.
    client.hset(gov.keys.state, mapping={"reclaim_due": 2**52, "touch_due": 2**52})
    return gov


def calls_of(operation: str, client: redis.Redis, gov: Governor) -> Iterator[Callable[[str], Any]]:
    """Endless calls of a cut function (its name given) of ``operation``, each on a fresh lease or id."""
    keys, core = gov.keys.script_keys, gov._core
    while True:
        if operation == "acquire":
            args = core.acquire(uuid.uuid4().hex, core.ask("stages"), wait=False).args
        else:
            lease = gov.acquire()
            if operation == "report":
                args = core.report(Outcome.SUCCESS, None, lease.id, lease.fence, release=True).args
            else:
                args = core.release(lease.id).args
        yield lambda function, args=args: client.fcall(function, len(keys), *keys, *args)


class QueuedGovernor:
    """A plain governor full with ``depth`` leases and as many waiters,
    driven through the sans-IO core (one FCALL per operation), kept full:
    :meth:`call` is one cut call of a hand-over half, :meth:`complete` ends
    that hand-over with the whole functions."""

    def __init__(self, client: redis.Redis, depth: int = 10) -> None:
        from bench.bench import _config, _Driver
        from bench.instructions import PLAIN, _fill, _no_maintenance

        self.client = client
        self.driver = _Driver(client, f"stages-q-{uuid.uuid4().hex[:8]}", _config(max_capacity=depth, **PLAIN))
        self.driver.run(self.driver.core.init(holds_leases=False))
        self.holders, self.queue = _fill(self.driver, depth, depth)
        _no_maintenance(client, self.driver.core.keys.state)
        self.keys = self.driver.core.keys.script_keys

    def whole(self, call: Any) -> Any:
        return call.parse(self.client.fcall(function_name(call.script), len(self.keys), *self.keys, *call.args))

    def call(self, operation: str) -> tuple[Callable[[str], Any], Callable[[], None]]:
        """(a call of a cut function of ``operation``, its name given; what completes it after)."""
        core = self.driver.core
        if operation == "release":
            holder = self.holders.popleft()
            args = core.release(holder).args

            def complete() -> None:
                self.whole(core.release(holder))  # (released once: grants the head unless the cut did)
                self.holders.append(self.queue.popleft())
                self._join(f"w{uuid.uuid4().hex}")

        else:
            newcomer = f"w{uuid.uuid4().hex}"
            args = core.acquire(newcomer, core.ask("stages"), wait=True).args

            def complete() -> None:
                self._join(newcomer, fresh=False)
                self.whole(core.release(self.holders.popleft()))
                self.holders.append(self.queue.popleft())

        return lambda function: self.client.fcall(function, len(self.keys), *self.keys, *args), complete

    def _join(self, newcomer: str, fresh: bool = True) -> None:
        self.whole(self.driver.core.acquire(newcomer, self.driver.core.ask("stages"), wait=True, fresh=fresh))
        self.queue.append(newcomer)


def count_spare(counter: Any, client: redis.Redis, operation: str, steps: int, calls: int) -> int:
    """Count each cut ``stage<i>`` of ``operation`` over ``calls`` calls on
    a governor with room to spare; returns the calls per step."""
    gov = governor(client)
    for i in range(steps):
        # the calls' arguments are made (and their leases acquired) before counting
        made = calls_of(operation, client, gov)
        prepared = [next(made) for _ in range(calls)]
        runs = iter(prepared)
        counter.count(f"stage{i}", lambda i=i, runs=runs: next(runs)(f"stage{i}"), calls)
    gov.close()
    return calls


def count_queued(counter: Any, client: redis.Redis, operation: str, steps: int, calls: int, governors: int) -> int:
    """Count each cut ``stage<i>`` of a hand-over half over about ``calls``
    calls spread on ``governors`` full governors, as ``stage<i>#<round>``;
    returns the calls per step."""
    fleet = [QueuedGovernor(client) for _ in range(governors)]
    for gov in fleet:  # warm: the cut library's memos hold what they will hold (its own, not the driver's)
        call, complete = gov.call(operation)
        call(f"stage{steps - 1}")
        complete()
    for i in range(steps):
        for round_ in range(max(1, calls // governors)):
            made = [gov.call(operation) for gov in fleet]
            runs = iter(made)
            counter.count(f"stage{i}#{round_}", lambda i=i, runs=runs: next(runs)[0](f"stage{i}"), governors)
            for _, complete in made:
                complete()
    return max(1, calls // governors) * governors


def main() -> int:
    from bench.instructions import InstructionsUnavailable, counted_server

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--operation", choices=OPERATIONS, default="report")
    parser.add_argument("--calls", type=int, default=200, help="calls per step")
    parser.add_argument("--queued", action="store_true", help="the hand-over: release granting, acquire joining")
    parser.add_argument("--governors", type=int, default=50, help="with --queued: full governors taking turns")
    options = parser.parse_args()
    if options.queued and options.operation not in ("acquire", "release"):
        parser.error("--queued breaks down release (granting the head) or acquire (joining the queue)")
    source, names = cut_library(options.operation)
    try:
        with counted_server("governor-stages-") as (counter, client):
            client.function_load(source, replace=True)
            counter.count("pair", lambda: (client.incr("x"), client.decr("x")), options.calls)
            if options.queued:
                counted = count_queued(counter, client, options.operation, len(names), options.calls, options.governors)
            else:
                counted = count_spare(counter, client, options.operation, len(names), options.calls)
            totals = counter.totals()
    except InstructionsUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    pair = totals["pair"] / options.calls
    if options.queued:
        print(f"the hand-over's half, {options.governors} plain governors full with 10 leases and 10 waiters")
    before = 0.0
    print(f"{options.operation}: {'after this step':44s} {'instructions':>12s} {'the step adds':>14s}")
    for i, step in enumerate(names):
        each = totals[f"stage{i}"] / counted
        print(f"  {step:52s} {each:12,.0f} {each - before:14,.0f}   ({each / pair:4.1f}x INCR+DECR)")
        before = each
    return 0


if __name__ == "__main__":
    sys.exit(main())
