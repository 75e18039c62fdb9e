"""The script registry: the Lua of lua/, registered once per Redis client.

Each operation is ``lua/<name>.lua``; its script is ``lua/lib/common.lua``,
then the fragments of ``lua/lib/`` its header names on its ``Uses`` line
(in FRAGMENTS order), then the operation itself. A script pays for every
function it defines on every call, so each loads only what it uses. The
files ship inside the wheel (``governor/lua``) and are read once per
process. ``register_script`` gives redis-py ``Script`` objects, which run
EVALSHA and reload the script on NOSCRIPT (after a Redis restart or a
``SCRIPT FLUSH``), so this module keeps no SHA cache of its own; a facade
loads every script in one pipelined round trip before its first call.

Each script opens with its flags (``#!lua``; ``flags=no-writes`` for the
read-only ones), so Redis refuses a writing script before it runs when it
is out of memory, instead of failing it at its first write. fakeredis
knows no flags: its scripts go without the line.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any

OPERATIONS: tuple[str, ...] = (
    "acquire",
    "cancel",
    "init",
    "pause",
    "probe",
    "refresh",
    "release",
    "renew",
    "report",
    "reset",
    "resume",
    "set_max",
    "status",
)
#: operations that never write: Redis runs them when out of memory, and on replicas
READ_ONLY: frozenset[str] = frozenset({"status"})
COMMON = "common"
#: the fragments of lua/lib/, in the order a script includes them
FRAGMENTS: tuple[str, ...] = ("admission", "policy", "admin", "config")
_USES = re.compile(r"^Uses\s+(.+?)\s*(?:\(.*\))?$", re.M)


def _lua_dir() -> Path:
    """governor/lua inside an installed wheel, else lua/ of a source checkout."""
    packaged = resources.files("governor") / "lua"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "lua"


def uses(body: str) -> tuple[str, ...]:
    """The fragments an operation's header names on its ``Uses`` line."""
    match = _USES.search(body)
    named = re.findall(r"lib/(\w+)\.lua", match.group(1)) if match else []
    unknown = set(named) - set(FRAGMENTS)
    if unknown:
        raise ValueError(f"unknown Lua fragment(s): {', '.join(sorted(unknown))}")
    return tuple(f for f in FRAGMENTS if f in named)


def flags(operation: str) -> str:
    """The script's first line: its flags for Redis."""
    return "#!lua flags=no-writes" if operation in READ_ONLY else "#!lua"


@functools.cache
def source(operation: str, flagged: bool = True) -> str:
    """The full Lua source of ``operation``: its flags (when ``flagged``), the
    prelude, its fragments, then the operation."""
    if operation not in OPERATIONS:
        raise KeyError(f"unknown governor script {operation!r}")
    folder = _lua_dir()
    body = (folder / f"{operation}.lua").read_text(encoding="utf-8")
    parts = [(folder / "lib" / f"{name}.lua").read_text(encoding="utf-8") for name in (COMMON, *uses(body))]
    head = [flags(operation)] if flagged else []
    return "\n".join([*head, *parts, f"-- ==== {operation}.lua ====", body])


def _is_fakeredis(client: Any) -> bool:
    """The client talks to fakeredis (its own class, or its connections')."""
    pool = getattr(client, "connection_pool", None)
    kinds = [type(client), getattr(pool, "connection_class", type(client))]
    return any(kind.__module__.split(".")[0] == "fakeredis" for kind in kinds)


class Scripts:
    """The registered scripts of one client, by operation name."""

    def __init__(self, client: Any) -> None:
        flagged = not _is_fakeredis(client)
        self._scripts = {op: client.register_script(source(op, flagged)) for op in OPERATIONS}

    def __getitem__(self, operation: str) -> Any:
        return self._scripts[operation]

    def sources(self) -> list[str]:
        """Every script's source, to load them all in one round trip."""
        return [script.script for script in self._scripts.values()]
