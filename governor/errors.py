"""The exception tree, and the one place foreign errors are translated.

Every error the library raises derives from :class:`GovernorError`; where a
builtin exception means the same thing it is a base too, so ``except
TimeoutError`` catches an acquire timeout. :func:`map_errors` is the only
code that turns redis-py exceptions and the scripts' ``GOVERNOR_*`` error
replies into this tree; an unknown reply code is an error, never ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import redis.exceptions


def duration(seconds: float) -> str:
    """A duration as messages print it, rounded: ``2.0 s`` (not
    ``1.99999746699973 s``), ``40 ms`` below a tenth of a second, whole
    seconds from 100 s."""
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 100:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s"


class GovernorError(Exception):
    """Base of every error raised by fleet-governor."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name  #: the governor concerned, when there is one


class ConfigError(GovernorError, ValueError):
    """A config value, governor name or argument is invalid."""


class CostTooLarge(ConfigError):
    """A lease's cost is above a budget's whole limit (its tokens per minute):
    it could never be admitted, so it is refused at once instead of waiting."""


class UsageTooLarge(ConfigError):
    """A reported usage is beyond any call's (governor.budgets.MAX_USAGE): a
    bug in the caller's counting, refused before it reaches the budgets."""


class AcquireTimeout(GovernorError, TimeoutError):
    """No lease was granted within the timeout; the caller's place is given up."""


class LeaseLost(GovernorError):
    """A lease expired before it was renewed or released (the holder stalled
    past its TTL, or Redis was unreachable); its slot went to someone else."""


class LeaseReported(LeaseLost):
    """The lease already carried its outcome: a second report on it (after a
    report, with ``release=True`` or not) counts nothing. A lease carries one
    outcome; report once, then release (or report with ``release=True``)."""


class QuotaExhausted(GovernorError):
    """The provider says the account's quota or spend limit is used up.

    Billing or a per-day quota, not a throttle: retrying does not help and
    the adaptive policy ignores it. :attr:`until` is when a per-day quota
    comes back (Unix seconds; None: billing, an operator has to act).
    """

    def __init__(self, message: str, *, name: str | None = None, until: float | None = None) -> None:
        super().__init__(message, name=name)
        self.until = until  #: Unix seconds the quota resets, when the provider's error says when


class GovernorNotFound(GovernorError, LookupError):
    """No governor of that name exists in this Redis (nothing was created)."""


class GovernorUnavailable(GovernorError, ConnectionError):
    """Redis could not be reached, or did not answer in time."""


class RedisFull(GovernorUnavailable):
    """Redis refused to run a writing script: it is out of memory (``maxmemory``
    reached under ``noeviction``). Nothing was written."""


class NotReplicated(GovernorUnavailable):
    """A grant or renewal was not confirmed by ``wait_replicas`` replicas within
    ``redis_timeout``; a grant is given back, a renewal is tried again."""


class WrongNode(ConfigError):
    """The Redis is a cluster node that does not own the governor's slot: the
    client must be a cluster client (``from_url`` switches by itself)."""


class StateError(GovernorError):
    """The governor's state in Redis is unusable: a key of the wrong type, a
    schema written by another version, or a reply this client cannot read."""


class LayoutError(StateError):
    """The state's layout admits only newer clients than this one: upgrade this
    client (docs/upgrade.md). The running fleet's state is fine: keep it."""

    def __init__(self, message: str, *, name: str | None = None, layout: int = 0, min_layout: int = 0) -> None:
        super().__init__(message, name=name)
        self.layout = layout  #: the layout that wrote the state
        self.min_layout = min_layout  #: the oldest client layout that may use it


class HashMissing(StateError):
    """The config or policy hash is gone while the state is there (evicted,
    deleted): the facades store their config again (init) and call again."""


class Migrating(GovernorUnavailable):
    """The governor's cluster slot is moving between two nodes (``TRYAGAIN``,
    ``ASK``): its keys are on both for a moment. Retried within the caller's
    timeout; raised only when the migration outlasts it."""


class WrongKeyType(StateError):
    """A key of the governor holds another Redis type: another program wrote
    to it. Nothing was changed; delete the key or use another name."""


# Redis appends " script: <name>, on @user_function:N." and fakeredis a stack
# traceback on the next lines: the detail is the rest of the code's line.
def _who(name: str | None) -> str:
    """The message prefix naming the governor, when there is one."""
    return f"governor {name!r}: " if name is not None else ""


_REPLY = re.compile(r"GOVERNOR_([A-Z]+) (.*?)(?: script: \S+, on @user_\w+:\d+\..*)?$", re.M)


def error_from_reply(message: str, name: str | None) -> GovernorError:
    """The :class:`GovernorError` for a script's ``GOVERNOR_*`` error reply."""
    match = _REPLY.search(message)
    if match is None:
        return StateError(f"{_who(name)}Redis answered with an error: {message}", name=name)
    code, detail = match.group(1), match.group(2).strip()
    if code == "WRONGTYPE":
        return wrong_key_type(detail, name)
    if code == "BADARG":
        return ConfigError(f"{_who(name)}invalid argument: {detail}", name=name)
    if code == "BADSTATE":
        return StateError(
            f"{_who(name)}stored state is unusable ({detail}); nothing was changed. If clients of another "
            "version share this governor, upgrade this one (docs/upgrade.md); else another program wrote "
            "to its keys: store a value the detail names in that field of the governor's state, config or "
            "policy hash (`redis-cli HSET <key> <field> <value>`; holders and waiters kept)",
            name=name,
        )
    if code == "MISSING":
        return HashMissing(f"{_who(name)}the {detail} hash is gone while the state is there", name=name)
    if code == "LAYOUT":
        parts = detail.split()
        layout, low = (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[1].isdigit() else (0, 0)
        spoken = re.search(r"speaks layout (\d+)", detail)  # the library's own layout, in its reply
        client = f"layout {spoken.group(1)}" if spoken else "an older layout"
        return LayoutError(
            f"{_who(name)}the state has layout {layout} and admits clients of layout {low} and later; this "
            f"client speaks {client}. Nothing was changed: upgrade this client to a release of layout "
            f"{low} or later (docs/upgrade.md) and keep the state, the running fleet uses it",
            name=name,
            layout=layout,
            min_layout=low,
        )
    if code == "KEYS":
        return ConfigError(f"{_who(name)}{detail}", name=name)
    if code == "SCHEMA":
        return StateError(
            f"{_who(name)}the state has schema version {detail}; nothing was changed. Upgrade this client "
            "to the release the rest of the fleet runs (docs/upgrade.md) and keep the state",
            name=name,
        )
    return StateError(f"{_who(name)}unknown error reply GOVERNOR_{code}: {detail}", name=name)


def wrong_key_type(detail: str, name: str | None) -> WrongKeyType:
    """The error for a key of the wrong type; ``detail`` names it when known."""
    return WrongKeyType(
        f"{_who(name)}key {detail}; another program wrote to this governor's keys. "
        "Nothing was changed. Delete the key (see `governor keys`) or choose another governor name.",
        name=name,
    )


class map_errors:  # used as a function: ``with map_errors(name):``
    """Translate redis-py errors raised inside the block into the tree above;
    ``locate`` names the Lua file and line in a library fault's message
    (:func:`governor.scripts.locate`, given where the library's functions run).
    Any other exception goes through unchanged. A class rather than a
    generator: every call to Redis enters one, and a class costs about a
    third of a generator's entry and exit."""

    __slots__ = ("_locate", "_name")

    def __init__(self, name: str | None, locate: Callable[[str], str] | None = None) -> None:
        self._name = name
        self._locate = locate

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, redis.exceptions.RedisError):
            _raise_mapped(exc, self._name, self._locate)


def _raise_mapped(error: redis.exceptions.RedisError, name: str | None, locate: Callable[[str], str] | None) -> None:
    """Raise the governor's error for redis-py's ``error``."""
    try:
        raise error
    except (redis.exceptions.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
        raise GovernorUnavailable(
            f"{_who(name)}Redis refused access ({exc}); check the credentials and the ACL "
            "(docs/operating.md: Security)",
            name=name,
        ) from exc
    except redis.exceptions.OutOfMemoryError as exc:
        raise RedisFull(
            f"{_who(name)}Redis is full (out of memory: maxmemory reached) and refused the script; "
            "nothing was written. Free memory or raise maxmemory",
            name=name,
        ) from exc
    except redis.exceptions.MaxConnectionsError as exc:  # the governor bounds its own use: a shared pool ran dry
        raise GovernorUnavailable(
            f"{_who(name)}the Redis client's connection pool is exhausted ({exc}); "
            "give the governor a client of its own or a larger max_connections",
            name=name,
        ) from exc
    except redis.exceptions.BusyLoadingError as exc:
        raise GovernorUnavailable(f"{_who(name)}Redis is loading its data set; retry shortly", name=name) from exc
    except redis.exceptions.ClusterError as exc:
        if "TTL exhausted" not in str(exc):
            raise GovernorUnavailable(
                f"{_who(name)}Redis is unreachable ({type(exc).__name__}: {exc}); check the URL and that Redis is up",
                name=name,
            ) from exc
        raise Migrating(
            f"{_who(name)}the cluster client was redirected again and again for the governor's slot (TTL "
            "exhausted): its slot is migrating between two nodes, or a failover is under way; retried until the "
            "caller's timeout",
            name=name,
        ) from exc
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise GovernorUnavailable(
            f"{_who(name)}Redis is unreachable ({type(exc).__name__}: {exc}); check the URL and that Redis is up",
            name=name,
        ) from exc
    except redis.exceptions.TryAgainError as exc:
        raise Migrating(
            f"{_who(name)}the governor's cluster slot is migrating between two nodes and its keys are split "
            f"for a moment (TRYAGAIN: {exc}); retried until the caller's timeout",
            name=name,
        ) from exc
    except redis.exceptions.MovedError as exc:
        raise WrongNode(
            f"{_who(name)}this Redis is part of a cluster and the governor's slot is served by {exc.node_addr}: "
            "use a redis.cluster.RedisCluster client (Governor.from_url detects a cluster by itself)",
            name=name,
        ) from exc
    except redis.exceptions.AskError as exc:  # after MovedError: a MovedError is an AskError
        raise Migrating(
            f"{_who(name)}the governor's cluster slot is migrating to {exc.node_addr} (ASK); retried until the "
            "caller's timeout",
            name=name,
        ) from exc
    except redis.exceptions.ReadOnlyError as exc:  # redis-py strips the READONLY code from the message
        raise GovernorUnavailable(
            f"{_who(name)}connected to a read-only replica ({exc}): the governor writes to its keys (status() too, "
            "where it stores its config). Point the client at the primary (a Sentinel or cluster client follows a "
            "failover); `governor status` reads a replica",
            name=name,
        ) from exc
    except redis.exceptions.ResponseError as exc:
        text = str(exc)
        if "GOVERNOR_" in text:
            raise error_from_reply(text, name) from exc
        if text.startswith("WRONGTYPE"):
            raise wrong_key_type("of this governor holds the wrong Redis type", name) from exc
        if text.startswith("OOM"):
            raise RedisFull(
                f"{_who(name)}Redis is full (out of memory: maxmemory reached): {text}; nothing was written",
                name=name,
            ) from exc
        if text.startswith("TRYAGAIN"):
            raise Migrating(
                f"{_who(name)}the governor's cluster slot is migrating between two nodes and its keys are split "
                f"for a moment ({text}); retried until the caller's timeout",
                name=name,
            ) from exc
        if text.startswith(("BUSY", "LOADING", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "NOREPLICAS")):
            raise GovernorUnavailable(f"{_who(name)}Redis cannot serve now: {text}", name=name) from exc
        if locate is not None:  # a fault in the library: name the Lua file and line
            text = locate(text)
        raise StateError(f"{_who(name)}Redis answered with an error: {text}", name=name) from exc
    except redis.exceptions.RedisError as exc:
        raise GovernorUnavailable(f"{_who(name)}Redis error: {type(exc).__name__}: {exc}", name=name) from exc
