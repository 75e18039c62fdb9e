"""The functions library with a witness of its write order.

Redis keeps what a function wrote when the function then fails, so every
function checks what could stop it before its first write (lua/lib/common.lua,
"No write and then a failure"). The witness makes that structural: it is the
library itself, with each ``redis.call`` and ``redis.pcall`` passed through a
check, and it fails a call with ``GOVERNOR_AFTERWRITE`` when, after the
call's first write (a command that changes a key, or PUBLISH), the call

- runs a command on a key whose type no command of the call told before
  that write (a typed command that succeeded on the key, or a TYPE guard);
- checks a stored field (``read``, ``load``, ``read_all``) that it neither
  checked before that write nor wrote itself (``set``): a value first read
  after a write could fail the call half-way;
- or raises any ``GOVERNOR_*`` error.

It needs no fault to find a path that could fail half-way: each call the
model's random operations make (tests/test_model.py runs them through it on
a real Redis) is checked as it runs, whatever the keys hold. The one
deliberate exception is add_lease()'s: a holders key of another type undoes
the fence it took (its only write) before it fails.
"""

from __future__ import annotations

import functools
from typing import Any

from governor.scripts import library, library_name

#: the witness's library name, and its functions' prefix
NAME = "governor_watched"

PRELUDE = r"""
-- The write-order witness (tests/support/write_order.py).
local WATCH = {wrote = false, told = {}, fields = {}}
-- Commands that succeed whatever their key holds: they tell nothing of its type.
local UNTYPED = {EXISTS = true, DEL = true, PEXPIRE = true, EXPIRE = true, PUBLISH = true, TIME = true, INFO = true}
local WRITING = {HSET = true, HSETNX = true, HDEL = true, HINCRBY = true, ZADD = true, ZREM = true,
  ZREMRANGEBYSCORE = true, ZREMRANGEBYRANK = true, XADD = true, XTRIM = true, PEXPIRE = true, EXPIRE = true,
  DEL = true, PUBLISH = true, SET = true}
local function watched(how, ...)
  local command = string.upper((...))
  local key = select(2, ...)
  -- (a pcall returns its error: the caller handles it, as add_lease() does)
  if WATCH.wrote and how ~= redis.pcall and not UNTYPED[command] and command ~= 'TYPE' and not WATCH.told[key] then
    error('GOVERNOR_AFTERWRITE ' .. command .. ' of ' .. tostring(key) .. ' after the first write, its type untold', 0)
  end
  local reply = how(...)
  if not (type(reply) == 'table' and reply.err) and not UNTYPED[command] then WATCH.told[key] = true end
  if WRITING[command] then WATCH.wrote = true end
  return reply
end
local function no_check_after_a_write(what)
  if WATCH.wrote then error('GOVERNOR_AFTERWRITE ' .. what .. ' after the first write', 0) end
end
-- A stored field checked: before the first write, or known (checked before it, or written by the call).
local function field_checked(key, field)
  local known = key .. ' ' .. field
  if WATCH.wrote and not WATCH.fields[known] then
    error('GOVERNOR_AFTERWRITE field ' .. field .. ' of ' .. key .. ' first checked after the first write', 0)
  end
  WATCH.fields[known] = true
end
"""


def _patch(text: str, old: str, new: str) -> str:
    if old not in text:
        raise AssertionError(f"the write-order witness no longer finds {old!r} in the library")
    return text.replace(old, new, 1)


@functools.cache
def source() -> str:
    """The witnessed library's text (FUNCTION LOAD)."""
    return witness(library())


def witness(text: str) -> str:
    """``text``, the library's source (governor.scripts.library()), with the witness."""
    name = library_name()
    text = text.replace(f"name={name}", f"name={NAME}").replace(f"'{name}_", f"'{NAME}_")
    text = text.replace("redis.call(", "watched(redis.call, ").replace("redis.pcall(", "watched(redis.pcall, ")
    text = _patch(text, "\nlocal BATCH = 64\n", PRELUDE + "\nlocal BATCH = 64\n")
    text = _patch(
        text,
        "local function begin(keys, argv)\n",
        "local function begin(keys, argv)\n  WATCH.wrote, WATCH.told, WATCH.fields = false, {}, {}\n",
    )
    text = _patch(
        text,
        "local function fail(code, detail)\n",
        "local function fail(code, detail)\n  no_check_after_a_write('GOVERNOR_' .. code .. ' ' .. detail)\n",
    )
    text = _patch(
        text,
        "local function read(key, into, fields)\n",
        "local function read(key, into, fields)\n  for i = 1, #fields do field_checked(key, fields[i]) end\n",
    )
    text = _patch(
        text,
        "local function load(fields, ttls)\n",
        "local function load(fields, ttls)\n  field_checked(KEY.state, 'origin')\n"
        "  if ttls then\n"
        "    field_checked(KEY.state, 'ttl_max') field_checked(KEY.state, 'ttl_cur')\n"
        "    field_checked(KEY.state, 'ttl_since')\n"
        "  end\n"
        "  for i = 1, #fields do field_checked(KEY.state, fields[i]) end\n",
    )
    text = _patch(
        text,
        "    if FIELDS[f] then into[f] = value_of(f, flat[i + 1]) end\n",
        "    if FIELDS[f] then\n      field_checked(key, f)\n      into[f] = value_of(f, flat[i + 1])\n    end\n",
    )
    text = _patch(
        text,
        "local function set(hash, field, value)\n",
        "local function set(hash, field, value)\n  WATCH.fields[KEY[hash] .. ' ' .. field] = true\n",
    )
    # add_lease(): the fence undone, nothing is left written
    undo = "watched(redis.call, 'HINCRBY', KEY.state, 'fence', '-1')"
    return _patch(text, undo, undo + "\n    WATCH.wrote = false")


def load(client: Any, text: str | None = None) -> None:
    """Load the witnessed library, or ``text`` (a witness()) in its place."""
    client.function_load(text or source(), replace=True)


def function(operation: str) -> str:
    """The witnessed function of ``operation``."""
    return f"{NAME}_{operation}"
