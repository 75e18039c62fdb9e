"""The Lua library's room to grow: its main chunk's locals, its files' size,
one scope per fragment and one bounded memo.

Lua 5.1 allows a function 200 active locals; the library's main chunk is
one function, so a library whose top level declares more fails to load
(``FUNCTION LOAD``: "main function has more than 200 local variables").
Each fragment of lua/lib/ is a scope of its own (governor/scripts.py
``parts``): its names are the scope's, and the main chunk keeps only
common.lua's, the generated blueprint's and one table per fragment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from governor import scripts

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"
#: the most main-chunk locals the library may declare: half of Lua 5.1's 200, the rest room to grow
MOST_LOCALS = 100
#: the most lines a Lua file may hold
MOST_LINES = 400


@pytest.fixture
def functions(scratch_redis_url: str) -> Iterator[redis.Redis]:
    """A client of a Redis whose functions libraries the test may load
    (each under a name of its own, deleted after)."""
    client = redis.Redis.from_url(scratch_redis_url)
    before = {entry[1] for entry in client.function_list()}
    try:
        yield client
    finally:
        for entry in client.function_list():
            if entry[1] not in before:
                client.function_delete(entry[1])
        client.close()


def _with_spare_locals(source: str, spare: int, name: str) -> str:
    """The library under the name ``name`` with ``spare`` more locals
    declared at the top of its main chunk."""
    extra = "".join(f"local spare_{i} = {i}\n" for i in range(spare))
    return source.replace("\n", "\n" + extra, 1).replace(scripts.library_name(), name)


def main_chunk_locals(client: redis.Redis, source: str) -> int:
    """The main-chunk locals ``source`` takes at its busiest point: 200 less
    the most extra locals it loads with (found by bisection, each try a
    FUNCTION LOAD on a real Redis)."""

    def loads(spare: int) -> bool:
        try:
            client.function_load(_with_spare_locals(source, spare, f"governor_locals_{spare}"), replace=True)
        except redis.exceptions.ResponseError as error:
            assert "more than 200 local variables" in str(error), str(error)
            return False
        client.function_delete(f"governor_locals_{spare}")
        return True

    low, high = 0, 200
    assert loads(low), "the library does not load"
    while low < high:
        middle = (low + high + 1) // 2
        if loads(middle):
            low = middle
        else:
            high = middle - 1
    return 200 - low


def test_the_main_chunk_takes_at_most_half_of_lua_s_200_locals(functions: redis.Redis) -> None:
    used = main_chunk_locals(functions, scripts.library())
    assert used <= MOST_LOCALS, (
        f"the library's main chunk takes {used} of Lua 5.1's 200 locals (at most {MOST_LOCALS}): keep a name in "
        "the fragment's own scope (lua/lib/<fragment>.lua), not in lib/common.lua"
    )
    # the count is the real one: a library of as many locals more than the limit fails to load
    with pytest.raises(redis.exceptions.ResponseError, match="more than 200 local variables"):
        functions.function_load(_with_spare_locals(scripts.library(), 201 - used, "governor_locals_over"))


def test_a_name_declared_at_the_top_of_common_counts_and_one_in_a_fragment_does_not(
    functions: redis.Redis,
) -> None:
    """The bisection counts the main chunk's locals: one more in common.lua
    is one more; one more in a fragment's scope is none."""
    source = scripts.library()
    used = main_chunk_locals(functions, source)
    common = scripts.parts()[1][1]
    assert main_chunk_locals(functions, source.replace(common, common + "\nlocal one_more = 1")) == used + 1
    fragment = dict(scripts.parts())["lua/lib/numbers.lua"]
    wrapped = fragment.replace("\nlocal function num(", "\nlocal one_more = 1\nlocal function num(", 1)
    assert wrapped != fragment
    assert main_chunk_locals(functions, source.replace(fragment, wrapped)) == used


def test_no_lua_file_is_longer_than_400_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines()) for path in LUA.rglob("*.lua")
    }
    assert sizes and not {path: n for path, n in sizes.items() if n > MOST_LINES}


def test_a_fragment_s_names_reach_only_the_files_whose_uses_line_names_it() -> None:
    """A file's scope binds the names it uses of the fragments its Uses line
    names, and no other fragment's."""
    text = "--[[ x\nUses lib/common.lua, lib/numbers.lua.\n]]\nlocal a = int(num('1')) + arg_int(3, 'n')\n"
    assert scripts.imports(text) == "local num, int = numbers.num, numbers.int "
    assert scripts.imports(text.replace("lib/numbers.lua", "lib/args.lua")) == "local arg_int = args.arg_int "
    with pytest.raises(ValueError, match="Uses"):
        scripts.imports("local a = num('1')\n")


# -- the bounded memo --------------------------------------------------------------------------------


def test_every_memo_is_the_bounded_memo() -> None:
    """Values remembered across calls are kept by memo() of lib/common.lua
    alone: no file counts and empties a table of its own."""
    idiom = re.compile(r"if \w+ >= \d+ then \w+, \w+ = \{\}, 0 end")
    files = sorted(LUA.rglob("*.lua"))
    assert not [path.name for path in files if idiom.search(path.read_text(encoding="utf-8"))]
    memos = [m for path in files for m in re.findall(r"^local (\w+), (\w+) = memo\((\d+)\)", path.read_text(), re.M)]
    assert len(memos) == 7, memos  # numbers, high digits, decimals, places, derived keys, checked fields, wording


def test_the_memo_keeps_at_most_its_limit_and_then_starts_again(functions: redis.Redis) -> None:
    """memo(limit) on a real Redis: a value is found where remember() put it
    (one key or a path of keys), and the value after the limit empties the
    table first."""
    body = "\n".join(text for _, text in scripts.parts()[:2])  # the blueprint and common.lua
    source = (
        f"#!lua name=governor_memo_test\n{body}\n"
        "redis.register_function('governor_memo_test', function(keys, argv)\n"
        "  redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table = runtime_globals()\n"
        "  local kept, remember = memo(3)\n"
        "  local out = {}\n"
        "  local function size() local n = 0 for _ in pairs(kept) do n = n + 1 end return n end\n"
        "  out[#out + 1] = remember('a', 1)\n"
        "  out[#out + 1] = remember('b', 'x', 'y')\n"
        "  out[#out + 1] = kept[1] .. kept.x.y .. size()\n"
        "  out[#out + 1] = remember('c', 3)\n"
        "  out[#out + 1] = tostring(kept[1]) .. size()\n"
        "  out[#out + 1] = remember('d', 4)\n"
        "  out[#out + 1] = tostring(kept[1]) .. tostring(kept.x) .. kept[4] .. size()\n"
        "  return out\n"
        "end)\n"
    )
    functions.function_load(source, replace=True)
    reply = [v.decode() for v in functions.fcall("governor_memo_test", 0)]
    assert reply == ["a", "b", "ab2", "c", "a3", "d", "nilnild1"]
