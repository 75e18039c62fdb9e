#!/usr/bin/env python3
"""What single Lua steps cost a Redis server, in instructions (callgrind).

    python scripts/lua_costs.py [--repeat 1000]

Each snippet runs ``repeat`` times in a loop inside one function of a
small library of its own, on a private ``redis-server`` under callgrind;
the figure is its instructions per run, above an empty loop's. These are
the figures behind the library's choices of one way of writing a hot step
over another (the comments name this script, not its figures, which
drift: lua/lib/numbers.lua passing integers to redis.call as strings,
lua/lib/args.lua's id check, presence by ZRANK). A snippet's
garbage is collected within the loop, so its share of the collector counts
too. Needs valgrind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: name -> one run of the snippet (locals: id, a lease id; big, a time in ms as a
#: number; bigs, the same as a string; small, a small integer); lua_costs:zk and lua_costs:hk are a
#: zset of one member and a hash of ten fields
SNIPPETS = {
    "empty loop (the floor)": "",
    "ZADD, score a number": "redis.call('ZADD', 'lua_costs:zk', big, 'm')",
    "ZADD, score its digits": "redis.call('ZADD', 'lua_costs:zk', bigs, 'm')",
    "string.format('%d', x)": "local r = string.format('%d', big)",
    "'x' .. n (a number concatenated)": "local r = 'x' .. small",
    "tonumber(s)": "local r = tonumber(bigs)",
    "ZSCORE (a double reply)": "local r = redis.call('ZSCORE', 'lua_costs:zk', 'm')",
    "ZRANK (an integer reply)": "local r = redis.call('ZRANK', 'lua_costs:zk', 'm')",
    "EXISTS": "local r = redis.call('EXISTS', 'nokey')",
    "TYPE (a status reply)": "local r = redis.call('TYPE', 'lua_costs:zk')['ok']",
    "ZCARD (an integer reply)": "local r = redis.call('ZCARD', 'lua_costs:zk')",
    "HMGET of 6 fields": "local r = redis.call('HMGET', 'lua_costs:hk', 'a', 'b', 'c', 'd', 'e', 'f')",
    "TIME": "local r = redis.call('TIME')",
    "id check, the set '^[%w%-_.:]+$'": "local r = string.find(id, '^[%w%-_.:]+$')",
    "id check, one class '^%w+$'": "local r = string.find(id, '^%w+$')",
    "a holder record parsed (9 captures)": (
        "local r = {string.match(record, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')}"
    ),
    "an empty table": "local r = {}",
    "a table of 3 fields": "local r = {a = 1, b = 2, c = 3}",
    "a Lua function call": "local r = f(1)",
    "a global looked up (tonumber)": "local r = tonumber",
    "an upvalue looked up": "local r = UPVALUE",
}

LOCALS = (
    "local id, big, bigs, small = args[1], 1796212788376017, '1796212788376017', 7\n"
    "local record = '1796212788376017|3600000|1796212788732|0|0|11|1|default|worker-1'\n"
    "local function f(x) return x end\n"
)


def library(repeat: int) -> str:
    functions = []
    for i, code in enumerate(SNIPPETS.values()):
        functions.append(
            f"redis.register_function{{function_name='snippet{i}', callback=function(keys, args)\n"
            f"{LOCALS}for _ = 1, {repeat} do {code} end\nreturn 1 end}}"
        )
    return "#!lua name=lua_costs\nlocal UPVALUE = 1\n" + "\n".join(functions)


def main() -> int:
    from bench.instructions import InstructionsUnavailable, counted_server

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1000, help="runs of each snippet per call")
    options = parser.parse_args()
    calls = 3
    lease_id = "3e755cd1edbc40055833f7a0673d6f88"
    try:
        with counted_server("governor-lua-costs-") as (counter, client):
            client.function_load(library(options.repeat), replace=True)
            client.zadd("lua_costs:zk", {"m": 5})
            client.hset("lua_costs:hk", mapping={field: "12" for field in "abcdefghij"})
            for i in range(len(SNIPPETS)):
                client.fcall(f"snippet{i}", 0, lease_id)  # (the first call of a function warms it)
                counter.count(f"snippet{i}", lambda i=i: client.fcall(f"snippet{i}", 0, lease_id), calls)
            totals = counter.totals()
    except InstructionsUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    floor = totals["snippet0"] / calls
    print(f"server instructions per run of each snippet ({options.repeat} runs a call, above an empty loop):")
    for i, name in enumerate(SNIPPETS):
        if i:
            print(f"  {name:40s} {(totals[f'snippet{i}'] / calls - floor) / options.repeat:8,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
