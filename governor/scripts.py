"""The script registry: the Lua of lua/, registered once per Redis client.

Each operation is ``lua/<name>.lua`` with ``lua/common.lua`` prepended. The
files ship inside the wheel (``governor/lua``); they are read once per
process. ``register_script`` gives redis-py ``Script`` objects, which run
EVALSHA and reload the script on NOSCRIPT (after a Redis restart or a
``SCRIPT FLUSH``), so this module keeps no SHA cache of its own.
"""

from __future__ import annotations

import functools
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
COMMON = "common"


def _lua_dir() -> Path:
    """governor/lua inside an installed wheel, else lua/ of a source checkout."""
    packaged = resources.files("governor") / "lua"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "lua"


@functools.cache
def source(operation: str) -> str:
    """The full Lua source of ``operation``: the common prelude, then the operation."""
    if operation not in OPERATIONS:
        raise KeyError(f"unknown governor script {operation!r}")
    folder = _lua_dir()
    common = (folder / f"{COMMON}.lua").read_text(encoding="utf-8")
    body = (folder / f"{operation}.lua").read_text(encoding="utf-8")
    return f"{common}\n-- ==== {operation}.lua ====\n{body}"


class Scripts:
    """The registered scripts of one client, by operation name."""

    def __init__(self, client: Any) -> None:
        self._scripts = {op: client.register_script(source(op)) for op in OPERATIONS}

    def __getitem__(self, operation: str) -> Any:
        return self._scripts[operation]
