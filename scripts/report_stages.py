#!/usr/bin/env python3
"""Where a report's server instructions go, step by step (callgrind).

    python scripts/report_stages.py [--calls 200]

Loads a copy of the library under another name in which the report function
is cut short after each of its top-level steps (``return 0`` there), runs a
successful lease-less report through each cut on a private ``redis-server``
under callgrind, and prints what each step adds: the floor of the call, the
clock and the state's fields, the config's and the policy's fields, the
checks, the window, the policy's decision, the writes (reclaim and touch
are kept from falling due). Needs valgrind.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.instructions import _Callgrind, missing_tools
from bench.redis_server import RedisServer, callgrind
from governor import Governor, GovernorConfig, Outcome, scripts

#: the steps of lua/report.lua, each named by the text it starts with
STEPS = {
    "arguments parsed, begin()": "clock()\nif not load",
    "clock and the state's fields": "prepare()\nlocal policy",
    "prepare(): reclaim's, log's and pause's fields": "local policy = the_policy()",
    "the_policy(): the policy's config and state": "if outcome == 'q' then more",
    "keep_alive(), queue and holders read": "local rl, total",
    "window(): the window's counts": "guard(10)",
    "guards (reclaim not due)": "if outcome == 'q' then\n",
    "record(): the attempt and the policy's decision": "give_back()\nif waiting",
    "the whole report, with finish()": None,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="reports per step")
    calls = parser.parse_args().calls
    why = missing_tools()
    if why:
        print(why, file=sys.stderr)
        return 2
    body = (Path(scripts.__file__).resolve().parent.parent / "lua" / "report.lua").read_text()
    name = scripts.library_name()
    copy = scripts.library().replace(f"name={name}", "name=governor_report_stages").replace(f"{name}_", "stages_")
    cuts = []
    for i, start in enumerate(STEPS.values()):
        cut = body if start is None else body[: body.index(start)] + "\ndo return 0 end\n"
        cuts.append(
            f"OPS.stage{i} = function()\n{cut}\nend\nredis.register_function{{function_name = 'stage{i}', "
            f"callback = function(keys, argv) begin(keys, argv) return OPS.stage{i}() end}}"
        )
    folder = Path(tempfile.mkdtemp(prefix="governor-stages-"))
    server = RedisServer(None, "--hz", "1", wrapper=[*callgrind(folder), "--instr-atstart=no"])
    try:
        server.start()
        counter = _Callgrind(server, folder)
        client = redis.Redis(port=server.port, socket_timeout=120)
        config = GovernorConfig(max_capacity=1000, lease_ttl=3600.0, queue_ttl=3600.0, redis_timeout=30.0)
        gov = Governor(client, "stages", GovernorConfig(**{**config.__dict__, "restart_hold": False}))
        for _ in range(5):
            gov.report(Outcome.SUCCESS, lease=gov.acquire(), release=True)
        client.function_load(copy + "\n" + "\n".join(cuts), replace=True)
        # No reclaim and no touch falls due while counting: a cut function
        # never saves their next due times, so each of its calls would run them.
        client.hset(gov.keys.state, mapping={"reclaim_due": 2**52, "touch_due": 2**52})
        keys = gov.keys.keys
        args = ("", gov.keys.channel, "s", "", "", "", "0")
        counter.count("pair", lambda: (client.incr("x"), client.decr("x")), calls)
        for i in range(len(STEPS)):
            counter.count(f"stage{i}", lambda i=i: client.fcall(f"stage{i}", len(keys), *keys, *args), calls)
        gov.close()
        client.close()
        totals = counter.totals()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
    pair = totals["pair"] / calls
    before = 0.0
    print(f"{'after this step':52s} {'instructions':>12s} {'this step adds':>15s}")
    for i, step in enumerate(STEPS):
        each = totals[f"stage{i}"] / calls
        print(f"{step:52s} {each:12,.0f} {each - before:15,.0f}   ({each / pair:4.1f}x INCR+DECR)")
        before = each
    return 0


if __name__ == "__main__":
    sys.exit(main())
