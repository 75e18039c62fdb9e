"""What a server must have to host the governor's library, told from its
``INFO`` fields: Functions (Redis 7.0 or later; every Valkey), a Lua
engine, and a ``maxmemory-policy`` that never evicts the governor's keys.

Sans-IO: the connection (governor/_async/connection.py) asks ``INFO`` once,
where a client first loads the library, and again when the server refuses
``FCALL`` or ``FUNCTION LOAD`` outright; nothing here runs on the hot path.
docs/install.md ("Where it runs") lists the servers and what each needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: the oldest Redis with Functions (FUNCTION LOAD, FCALL)
MIN_REDIS = (7, 0)
WHERE = "docs/install.md: Where it runs"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def version_of(text: str) -> tuple[int, ...]:
    """``7.0.15`` -> (7, 0, 15); (0,) when it holds no version."""
    found = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in found.group(1).split(".")) if found else (0,)


def nodes(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The INFO of each node: a cluster client answers with one mapping per node."""
    if info and all(isinstance(value, Mapping) for value in info.values()):
        return list(info.values())
    return [info]


def identify(info: Mapping[str, Any]) -> str:
    """The server's product and version: ``Valkey 9.1.2``, ``Redis 6.2.12``,
    or the ``redis_version`` a compatible server announces (``Redis-compatible
    server announcing 7.2.4`` when it names itself otherwise)."""
    name = _text(info.get("server_name", "")).lower()
    if name == "valkey" and info.get("valkey_version"):
        return f"Valkey {_text(info['valkey_version'])}"
    version = _text(info.get("redis_version", "?"))
    if name in ("", "redis"):
        if info.get("dragonfly_version"):
            return f"Dragonfly {_text(info['dragonfly_version'])}"
        return f"Redis {version}"
    return f"{name} (announcing Redis {version})"


def refusal(info: Mapping[str, Any]) -> str | None:
    """Why the server whose INFO this is cannot host the library, or None:
    a Redis below 7.0 (no Functions), or a ``maxmemory`` with a policy
    other than ``noeviction`` (every governor key has a TTL, so any evicting
    policy may drop the lease set: running holders vanish and the fleet is
    over-admitted)."""
    for node in nodes(info):
        who = identify(node)
        is_valkey = _text(node.get("server_name", "")).lower() == "valkey"
        version = version_of(_text(node.get("redis_version", "")))
        if not is_valkey and "redis_version" in node and version < MIN_REDIS:
            return (
                f"the server is {who}, which has no Functions (FUNCTION LOAD, FCALL): the governor is a "
                f"Redis Functions library and needs Redis 7.0 or later, or Valkey 7.2 or later ({WHERE})"
            )
        policy = _text(node.get("maxmemory_policy", "noeviction"))
        maxmemory = int(_text(node.get("maxmemory", 0) or 0))
        if maxmemory > 0 and policy != "noeviction":
            return (
                f"the server is {who} with maxmemory {maxmemory} and maxmemory-policy {policy}: it may evict the "
                "governor's keys (every one has a TTL), and evicted leases hide running holders, so the fleet is "
                "over-admitted. The governor needs maxmemory-policy noeviction (CONFIG SET maxmemory-policy "
                f"noeviction, and in the server's config file; {WHERE})"
            )
    return None


def not_durable(settings: Mapping[str, Any]) -> str | None:
    """Why a server whose ``CONFIG GET append*`` answered ``settings`` may
    lose a write it acknowledged at a restart, or None: the declaration
    ``GovernorConfig.durable_redis`` needs ``appendonly yes`` and
    ``appendfsync always``."""
    got = {_text(k): _text(v) for k, v in settings.items()}
    if got.get("appendonly") == "yes" and got.get("appendfsync") == "always":
        return None
    return (
        f"the server has appendonly {got.get('appendonly', '?')} and appendfsync {got.get('appendfsync', '?')}: a "
        "restart there may lose grants it acknowledged, so durable_redis=True would let a fleet be over-granted. "
        "Run `CONFIG SET appendonly yes` and `CONFIG SET appendfsync always` (and put both in the server's config "
        "file), or leave durable_redis off"
    )


def no_functions(info: Mapping[str, Any] | None) -> str:
    """Why a server that answered ``FCALL`` with "unknown command" cannot host
    the library; ``info`` None when INFO was refused too."""
    who = f"the server is {identify(nodes(info)[0])}" if info else "the server (INFO refused: version unknown)"
    return (
        f"{who} and does not know FCALL: the governor is a Redis Functions library and needs "
        f"Redis 7.0 or later, Valkey 7.2 or later, or a service that offers Functions ({WHERE})"
    )


def no_lua(info: Mapping[str, Any] | None, answer: str) -> str:
    """Why a server whose ``FUNCTION LOAD`` found no Lua engine (``answer``)
    cannot host the library."""
    who = f"the server is {identify(nodes(info)[0])}" if info else "the server (INFO refused: version unknown)"
    return (
        f"{who} without its Lua engine (FUNCTION LOAD answered: {answer.strip()}): the governor's library is Lua. "
        "Valkey 9.1 and later run Lua as a module: load it (the valkey-lua package of the distribution, "
        f"`loadmodule` in the server's config) or run a build that includes it ({WHERE})"
    )


def is_unknown_command(answer: str) -> bool:
    """The server does not know a command (Redis 6 and most look-alikes answer so for FCALL)."""
    return "unknown command" in answer.lower()


def is_missing_engine(answer: str) -> bool:
    """FUNCTION LOAD found no engine for the library's ``#!lua`` (Valkey without its Lua module)."""
    lowered = answer.lower()
    return "engine" in lowered and ("not found" in lowered or "could not find" in lowered)
