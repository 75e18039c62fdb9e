#!/usr/bin/env python3
"""Where an operation's server instructions go, step by step (callgrind).

    python scripts/report_stages.py [--operation report] [--calls 200]

The hot operations mark their steps in their own Lua: a top-level line
``-- step: <what the step does>`` (lua/report.lua, lua/acquire.lua,
lua/release.lua). This tool loads a copy of the library under another name
in which the operation is cut short before each step (``do return 0 end``
there), runs each cut ``calls`` times on a private ``redis-server`` under
callgrind, and prints what each step adds, from the floor of the call (an
FCALL that returns at once) to the whole operation. Needs valgrind.

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
            f"OPS.stage{i} = function()\n{cut}\nend\nredis.register_function{{function_name = 'stage{i}', "
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


def calls(operation: str, client: redis.Redis, gov: Governor) -> Iterator[Callable[[str], Any]]:
    """Endless calls of a cut function (its name given) of ``operation``, each on a fresh lease or id."""
    keys, core = gov.keys.script_keys, gov._core
    while True:
        if operation == "acquire":
            args = core.acquire(uuid.uuid4().hex, "stages", wait=False).args
        else:
            lease = gov.acquire()
            if operation == "report":
                args = core.report(Outcome.SUCCESS, None, lease.id, lease.fence, release=True).args
            else:
                args = core.release(lease.id).args
        yield lambda function, args=args: client.fcall(function, len(keys), *keys, *args)


def main() -> int:
    from bench.instructions import InstructionsUnavailable, counted_server

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--operation", choices=OPERATIONS, default="report")
    parser.add_argument("--calls", type=int, default=200, help="calls per step")
    options = parser.parse_args()
    source, names = cut_library(options.operation)
    try:
        with counted_server("governor-stages-") as (counter, client):
            gov = governor(client)
            client.function_load(source, replace=True)
            counter.count("pair", lambda: (client.incr("x"), client.decr("x")), options.calls)
            for i in range(len(names)):
                # the calls' arguments are made (and their leases acquired) before counting
                made = calls(options.operation, client, gov)
                prepared = [next(made) for _ in range(options.calls)]
                runs = iter(prepared)
                counter.count(f"stage{i}", lambda i=i, runs=runs: next(runs)(f"stage{i}"), options.calls)
            gov.close()
            totals = counter.totals()
    except InstructionsUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    pair = totals["pair"] / options.calls
    before = 0.0
    print(f"{options.operation}: {'after this step':44s} {'instructions':>12s} {'the step adds':>14s}")
    for i, step in enumerate(names):
        each = totals[f"stage{i}"] / options.calls
        print(f"  {step:52s} {each:12,.0f} {each - before:14,.0f}   ({each / pair:4.1f}x INCR+DECR)")
        before = each
    return 0


if __name__ == "__main__":
    sys.exit(main())
