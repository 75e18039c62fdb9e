"""The key schema: every Redis key of a governor, in one place.

All keys of one governor share the Redis Cluster hash tag ``{name}``, so a
script can touch them atomically on a cluster, and carry the schema version
``v1``, so a future layout can live beside this one. Scripts receive the
keys in :attr:`GovernorKeys.keys` order and never build a key name.

==========================  ======  ===========================================
key                         type    meaning
==========================  ======  ===========================================
``governor:v1:{N}:state``   hash    config, capacity, pause, hold, counters
``governor:v1:{N}:leases``  zset    lease id -> expiry (ms); in-flight = live
``governor:v1:{N}:holders`` hash    lease/waiter id -> ``fence|ttl|since|label``
``governor:v1:{N}:queue``   zset    waiter id -> ticket (FIFO order)
``governor:v1:{N}:waiters`` zset    waiter id -> deadline (ms) to refresh by
``governor:v1:{N}:attempts`` zset   ``seq:outcome`` -> time (ms), the window
``governor:v1:{N}:limited`` zset    the rate-limited subset of ``attempts``
``governor:v1:{N}:events``  stream  decision log (capped)
==========================  ======  ===========================================

Grants to queued callers are announced on the pub/sub channel
``governor:v1:{N}:wake`` (not a key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ConfigError

SCHEMA_VERSION = 1
DEFAULT_PREFIX = "governor"

_NAME = re.compile(r"^[A-Za-z0-9_.:\-/@]{1,200}$")


def validate_name(name: str) -> str:
    """Return ``name`` if it can name a governor, else raise :class:`ConfigError`.

    Braces are refused because they would break the hash tag; whitespace and
    control characters because operators type these names into redis-cli.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"governor name {name!r} is invalid: use 1-200 characters of "
            "letters, digits and _ . : - / @ (no braces, no spaces)"
        )
    return name


@dataclass(frozen=True)
class GovernorKeys:
    """The Redis keys and pub/sub channel of one governor."""

    name: str
    state: str  #: hash: config, policy state and counters
    leases: str  #: zset: lease id -> expiry in ms
    holders: str  #: hash: lease or waiter id -> "fence|ttl_ms|since_ms|holder"
    queue: str  #: zset: waiter id -> ticket, FIFO order
    waiters: str  #: zset: waiter id -> deadline in ms
    attempts: str  #: zset: every attempt in the window -> time in ms
    limited: str  #: zset: rate-limited attempts in the window -> time in ms
    events: str  #: stream: the decision log
    channel: str  #: pub/sub channel announcing grants (not a key)

    #: the Redis type of each key of :attr:`keys`, in the same order
    TYPES = ("hash", "zset", "hash", "zset", "zset", "zset", "zset", "stream")

    @property
    def keys(self) -> tuple[str, ...]:
        """The KEYS of every script, in the order lua/common.lua binds them."""
        return (
            self.state,
            self.leases,
            self.holders,
            self.queue,
            self.waiters,
            self.attempts,
            self.limited,
            self.events,
        )


def governor_keys(name: str, prefix: str = DEFAULT_PREFIX) -> GovernorKeys:
    """Every key of governor ``name``, sharing the hash tag ``{name}``."""
    validate_name(name)
    if not re.match(r"^[A-Za-z0-9_.:\-]{1,64}$", prefix):
        raise ConfigError(f"key prefix {prefix!r} is invalid: use 1-64 characters of letters, digits and _ . : -")
    base = f"{prefix}:v{SCHEMA_VERSION}:{{{name}}}"
    return GovernorKeys(
        name=name,
        state=f"{base}:state",
        leases=f"{base}:leases",
        holders=f"{base}:holders",
        queue=f"{base}:queue",
        waiters=f"{base}:waiters",
        attempts=f"{base}:attempts",
        limited=f"{base}:limited",
        events=f"{base}:events",
        channel=f"{base}:wake",
    )


def name_from_state_key(key: str, prefix: str = DEFAULT_PREFIX) -> str | None:
    """The governor name in a ``state`` key found by SCAN, or None."""
    head, tail = f"{prefix}:v{SCHEMA_VERSION}:{{", "}:state"
    if key.startswith(head) and key.endswith(tail):
        return key[len(head) : -len(tail)]
    return None
