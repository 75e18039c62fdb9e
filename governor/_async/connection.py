"""The governor's connection to Redis: its client and how a function of
the library is run on it.

The client is the given one when its pool already bounds every call, else
one of the governor's own on the same settings (timeouts of
``redis_timeout``, no retries, a pool sized for the governor). A call runs
one function of the library; a server that lost the library gets it again,
a redirection to another cluster node switches to a cluster client, and
Redis's errors become the governor's (:func:`governor.errors.map_errors`).

The server is checked where the library is loaded and where the server
refuses FCALL or FUNCTION LOAD outright (never on the hot path): a Redis
below 7.0, a server without Functions or without its Lua engine, an
evicting ``maxmemory-policy`` raise ConfigError naming the server, its
version and what it needs (:mod:`governor.server`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, TypeVar

import redis.asyncio as redis_client
import redis.asyncio.cluster as redis_cluster
import redis.asyncio.retry as redis_retry
import redis.backoff
import redis.exceptions

from ..config import GovernorConfig
from ..core import Call, text
from ..errors import (
    ConfigError,
    GovernorUnavailable,
    Migrating,
    NotReplicated,
    WrongKeyType,
    WrongNode,
    duration,
    map_errors,
    wrong_key_type,
)
from ..protocol import GovernorKeys, ms
from ..scripts import EVERY_KEY, MISSING_FUNCTION, function_name, library, library_name, locate
from ..server import is_missing_engine, is_unknown_command, no_functions, no_lua, not_durable, refusal
from ._compat import sleep

log = logging.getLogger("governor")
T = TypeVar("T")

#: connections of the governor's pool besides its callers': pub/sub and the worker
OWN_CONNECTIONS = 2
#: connection-pool settings redis-py adds by itself (not copied to the governor's pool)
_POOL_INTERNAL = (
    "himport_registry",
    "maint_notifications_pool_handler",
    "orig_host_address",
    "orig_socket_timeout",
    "orig_socket_connect_timeout",
)


def _connection_options(config: GovernorConfig) -> dict[str, Any]:
    """How the governor's own connections behave: socket timeouts of
    ``redis_timeout``, so a hung Redis fails in bounded time, and no retries:
    a retried script may run twice, and a retry only delays the failure."""
    return {
        "socket_timeout": config.redis_timeout,
        "socket_connect_timeout": config.redis_timeout,
        "retry": redis_retry.Retry(redis.backoff.NoBackoff(), 0),
        "retry_on_error": [],
    }


def _bounded(pool: Any, config: GovernorConfig) -> bool:
    """The pool already behaves as the governor's own connections must."""
    options = pool.connection_kwargs
    retry = options.get("retry")
    timeouts = [options.get("socket_timeout"), options.get("socket_connect_timeout")]
    return (
        (retry is None or retry.get_retries() == 0)
        and all(t is not None and t <= config.redis_timeout for t in timeouts)
        and pool.max_connections >= config.redis_connections + OWN_CONNECTIONS
    )


def _own_client(client: Any, config: GovernorConfig) -> Any:
    """The client the governor talks through: the given one when its pool
    already bounds every call (see _bounded), else one of the governor's
    own on the same connection settings (host, credentials, TLS, decoding)
    with the governor's timeouts, no retries and a pool sized for the
    governor (``redis_connections`` callers plus pub/sub and the worker).
    A cluster client is used as it is."""
    if not isinstance(client, redis_client.Redis) or _bounded(client.connection_pool, config):
        return client
    pool = client.connection_pool
    options = {k: v for k, v in pool.connection_kwargs.items() if k not in _POOL_INTERNAL}
    own = _connection_options(config)
    for key in ("socket_timeout", "socket_connect_timeout"):
        given = options.get(key)
        if given is not None and given < own[key]:
            own[key] = given
    options.update(own)
    max_connections = config.redis_connections + OWN_CONNECTIONS
    own_pool = redis_client.ConnectionPool(
        connection_class=pool.connection_class, max_connections=max_connections, **options
    )
    return redis_client.Redis.from_pool(own_pool)  # closing the client closes its pool


def client_from_url(url: str, config: GovernorConfig, **redis_options: Any) -> tuple[Any, dict[str, Any]]:
    """A client of the governor's own for ``url``, and the options it was made with."""
    options: dict[str, Any] = {**_connection_options(config), **redis_options}
    try:
        client = redis_client.Redis.from_url(url, max_connections=config.redis_connections + OWN_CONNECTIONS, **options)
    except ValueError as error:
        raise ConfigError(f"invalid Redis URL {url!r}: {error}") from error
    return client, options


class Connection:
    """The Redis client of one governor and the calls of its library's functions."""

    def __init__(self, client: Any, name: str, keys: GovernorKeys, config: GovernorConfig) -> None:
        self._name = name
        self._keys = keys
        self._config = config
        #: Redis's errors as the governor's, around every call (it keeps no state)
        self._errors = map_errors(name, locate)
        self.client = _own_client(client, config)
        #: the client is the governor's own: closing the governor closes it
        self.owns_client = self.client is not client
        #: from_url's URL and options, to switch to a cluster client when redirected
        self.url: str | None = None
        self.options: dict[str, Any] = {}
        #: durable_redis checked against the server's settings (once: check_durable)
        self._durable_checked = False
        #: (time.monotonic(), what happened) of the last grant or renewal the replicas did not confirm
        self.unconfirmed: tuple[float, str] | None = None
        #: a call passes every key (a Redis Cluster: a migrating slot is refused
        #: before the call runs), else the state key alone; a standalone client
        #: of a cluster node learns it from the library (GOVERNOR_KEYS)
        self.every_key = isinstance(self.client, redis_cluster.RedisCluster)
        #: clients replaced by the switch to a cluster client: other callers may
        #: be mid-call on them, so they are closed with the governor
        self.replaced: list[Any] = []

    def own(self, url: str, options: dict[str, Any]) -> None:
        """The client was made from ``url`` (:func:`client_from_url`) for this
        governor: closing the governor closes it, and a redirection to
        another cluster node switches to a cluster client on the same URL."""
        self.owns_client = True
        self.url, self.options = url, options

    async def run(self, call: Call[T]) -> Any:
        """Run one function of the library and parse its reply; the errors of
        Redis become the governor's (a library fault names its Lua file and
        line). A cluster slot that is migrating is asked again for up to
        ``redis_timeout``."""
        give_up = time.monotonic() + self._config.redis_timeout
        pause = 0.005
        while True:
            try:
                return await self._run_once(call)
            except Migrating:
                if time.monotonic() + pause > give_up:
                    raise
                await sleep(pause)
                pause = min(pause * 2, 0.1)

    async def _run_once(self, call: Call[T]) -> Any:
        client = self.client
        try:
            with self._errors:
                reply, confirmed = await self._send(call)
        except WrongKeyType as error:
            raise await self._which_key(error) from error
        except Migrating as error:
            # a standalone client of from_url redirected by ASK: a cluster client follows it
            if self.url is None or isinstance(client, redis_cluster.RedisCluster):
                raise
            if not isinstance(error.__cause__, redis.exceptions.AskError):
                raise
            await self._switch_to_cluster(client)
            return await self._run_once(call)
        except WrongNode as error:
            if isinstance(client, redis_cluster.RedisCluster):  # the slot moved: the client follows it
                raise Migrating(
                    f"governor {self._name!r}: the governor's cluster slot moved to another node ({error}); "
                    "retried until the caller's timeout",
                    name=self._name,
                ) from error
            if self.url is None:
                raise
            await self._switch_to_cluster(client)
            return await self._run_once(call)
        result = call.parse(reply)
        if confirmed is not True:
            what = (
                f"grants are not confirmed: {call.script} was acknowledged by {confirmed} of "
                f"wait_replicas={self._config.wait_replicas} replica(s) within replica_timeout="
                f"{duration(self._config.replica_wait)}"
            )
            self.unconfirmed = (time.monotonic(), what)
            raise NotReplicated(
                f"governor {self._name!r}: {what}. The replicas lag more than that, or fewer are connected: check "
                "`INFO replication` on the primary (connected_slaves, each replica's lag); raise replica_timeout "
                "(below redis_timeout and lease_ttl / 3) or lower wait_replicas. The grant was given back",
                name=self._name,
            )
        if call.confirm and self._config.wait_replicas:
            self.unconfirmed = None
        return result

    def unconfirmed_within(self, seconds: float) -> str | None:
        """What the replicas last failed to confirm, if within ``seconds``."""
        last = self.unconfirmed
        return last[1] if last is not None and time.monotonic() - last[0] < seconds else None

    async def _send(self, call: Call[T], reload: bool = True) -> tuple[Any, bool | int]:
        """The function's reply, and True when the replicas confirmed it (else how many did): with
        ``wait_replicas``, a call whose answer is relied on (a grant, a
        renewal) goes in one pipeline with a ``WAIT`` on the same connection.
        A server that lost the library (a restart, FUNCTION FLUSH, a new
        cluster node) has it loaded again, and the call is sent again."""
        keys = self._keys.keys if self.every_key else self._keys.script_keys
        command = (function_name(call.script), len(keys), *keys, *call.args)
        replicas = self._config.wait_replicas
        try:
            if not (replicas and call.confirm):
                return await self.client.fcall(*command), True
            pipe = self.client.pipeline(transaction=False)
            pipe.fcall(*command)
            # Below redis_timeout (GovernorConfig checks), so a slow replica is told apart from a hung Redis.
            pipe.execute_command("WAIT", replicas, ms(self._config.replica_wait))
            reply, acknowledged = await pipe.execute()
        except redis.exceptions.ResponseError as error:
            if EVERY_KEY in str(error) and len(keys) == 1:  # a cluster node: nothing ran
                self.every_key = True
                return await self._send(call, reload)
            if is_unknown_command(str(error)):  # no Functions at all: say which server, never the raw reply
                why = no_functions(await self._info())
                raise ConfigError(f"governor {self._name!r}: {why}", name=self._name) from error
            if not reload or MISSING_FUNCTION not in str(error):
                raise
            await self._load_library()
            return await self._send(call, reload=False)
        return reply, True if int(acknowledged) >= replicas else int(acknowledged)

    async def _load_library(self) -> None:
        """Load the library (on every primary of a cluster) when Redis said a
        function is missing: the first call on a Redis that never had it, or
        after a restart without persistence, a FUNCTION FLUSH, a new cluster
        node. A process whose Redis has it sends none (a load costs Redis a
        compile of the whole library). A user whose ACL refuses FUNCTION LOAD
        (a worker of a shared Redis, docs/operating.md: Security) fails naming the
        operator's command that loads it. The server is checked first, once
        per load (:func:`governor.server.refusal`): one that cannot host the
        library raises ConfigError instead."""
        info = await self._info()
        why = refusal(info) if info is not None else None
        if why is not None:
            raise ConfigError(f"governor {self._name!r}: {why}", name=self._name)
        try:
            await self.client.function_load(library(), replace=True)
        except redis.exceptions.NoPermissionError as error:
            raise GovernorUnavailable(
                f"governor {self._name!r}: the functions library {library_name()} is not loaded on this Redis "
                "and this user may not load it (ACL +function|load): an operator runs `governor library --load`",
                name=self._name,
            ) from error
        except redis.exceptions.ResponseError as error:
            if not is_missing_engine(str(error)):
                raise
            raise ConfigError(f"governor {self._name!r}: {no_lua(info, str(error))}", name=self._name) from error

    async def check_durable(self) -> None:
        """A client declaring the server durable (``durable_redis``) checks it
        once: ConfigError when its ``appendonly`` and ``appendfsync`` may lose
        a write it acknowledged. Not readable (an ACL without CONFIG, a cluster
        client's answer per node): taken on the operator's word."""
        if self._durable_checked:
            return
        try:
            settings = await self.client.config_get("append*")
        except redis.exceptions.ResponseError:  # NoPermissionError included
            settings = None
        if isinstance(settings, Mapping) and any(text(k) == "appendfsync" for k in settings):
            why = not_durable(settings)
            if why is not None:
                raise ConfigError(f"governor {self._name!r}: durable_redis=True, but {why}", name=self._name)
        self._durable_checked = True

    async def _info(self) -> Mapping[str, Any] | None:
        """The server's INFO (its default sections; one mapping per node from
        a cluster client), None when refused (an ACL without INFO)."""
        try:
            info = await self.client.info()
        except redis.exceptions.ResponseError:  # NoPermissionError included
            return None
        return info if isinstance(info, Mapping) else None

    async def _switch_to_cluster(self, standalone: Any) -> None:
        """from_url was given a cluster node: use a cluster client instead of
        ``standalone`` (once: a caller redirected on it after another caller
        switched uses the cluster client too)."""
        assert self.url is not None
        if self.client is not standalone:
            return
        try:
            cluster = redis_cluster.RedisCluster.from_url(self.url, **self.options)
        except ValueError as error:
            raise ConfigError(f"invalid Redis Cluster URL {self.url!r}: {error}") from error
        if self.client is not standalone:  # another thread switched while this one connected
            # sync: cluster.close()
            await cluster.aclose()
            return
        self.replaced.append(self.client)  # (standalone, or a racing thread's cluster client)
        self.every_key = True  # first: a call between the two sends every key to the old client, harmlessly
        self.client = cluster
        log.info("governor %r: %s is a Redis Cluster node; using a cluster client", self._name, self.url)

    async def _which_key(self, error: WrongKeyType) -> WrongKeyType:
        """A script stopped on a key of the wrong type: name the key."""
        with map_errors(self._name):
            for key, expected in zip(self._keys.keys, self._keys.TYPES, strict=True):
                actual = text(await self.client.type(key))
                if actual not in ("none", expected):
                    return wrong_key_type(f"{key} is a {actual}, expected a {expected}", self._name)
        return error

    async def read(self, key: str) -> Any:
        """A hash of the governor (HGETALL), read without a script."""
        with map_errors(self._name):
            return await self.client.hgetall(key)

    async def aclose(self) -> None:
        """Close the client if it is the governor's own."""
        if self.owns_client:
            for client in (*self.replaced, self.client):
                # sync: client.close()
                await client.aclose()
