"""The background worker of the asyncio facade: _Background and _Waiter.

This file is the source of truth; scripts/unasync.py generates
governor/_sync/background.py from it, as it does the facade.

One background worker per governor object (a task here, a thread in the
sync facade) listens for grants on the governor's pub/sub channel,
refreshes this process's queued callers every ``poll`` seconds in one
script call (a recovery probe too), and renews every held lease each
``lease_ttl / 3`` in one call. The facade (governor.py) registers its
waiters and leases here and starts and stops the worker; the worker sees
the facade through :class:`Governed` only, builds its calls with the
governor's core and runs them through the facade.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..backoff import full_jitter
from ..config import GovernorConfig
from ..core import Call, GovernorCore, Granted, Refreshed, Renewed
from ..errors import GovernorError, GovernorUnavailable, map_errors
from ._compat import Event, Lock, Worker, sleep

if TYPE_CHECKING:
    from .lease import AsyncLease

T = TypeVar("T")

log = logging.getLogger("governor")

#: the background worker looks at its closed flag at least this often (s)
LISTEN_SLICE = 0.25
#: ids per refresh or renew call, so no single script call grows unbounded
BATCH = 500


class Governed(Protocol):
    """The governor as its background worker sees it: these members only."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> GovernorConfig: ...

    @property
    def keys(self) -> Any: ...

    @property
    def client(self) -> Any: ...

    #: aclose() was called: the worker stops
    _closed: bool

    async def _execute(self, call: Call[T], *, slot: bool = True) -> T:
        """Run one script (``slot=False``: outside the callers' connections)."""
        ...

    async def _learn_config(self) -> None:
        """Read the stored config anew (an operator changed it)."""
        ...

    def _forked(self) -> None:
        """In a child forked from the process that made the governor: its
        per-process limits anew (the parent's threads may hold them)."""
        ...


class _Waiter:
    """A caller of this process waiting in the queue; the background worker
    hands it a grant, tells it to enqueue again, or fails it."""

    def __init__(self, lease_id: str) -> None:
        self.lease_id = lease_id
        #: what its caller waits on, made by the first to need it (most
        #: callers are granted at once and never wait): _Background.event_of
        self.event: Event | None = None
        self.enqueued = False
        self.granted: Granted | None = None
        #: local time by which a grant to this waiter surely lives: a grant is
        #: made after the last request that found it queued was sent
        self.deadline = 0.0
        self.confirmed_at = 0.0
        self.retry = False
        self.error: GovernorError | None = None
        self.reason = ""
        self.position = -1
        #: its acquire had a slot to go out on (until then, Redis has not heard of it)
        self.sent = False

    def made_event(self) -> Event:
        """Its event, made now if nobody needed it yet (under the worker's lock)."""
        if self.event is None:
            self.event = Event()
        return self.event


class _Background:
    """Listens for grants, refreshes waiters, renews leases: one per governor."""

    def __init__(self, governor: Governed, core: GovernorCore) -> None:
        self._gov = governor
        self._core = core
        self._lock = Lock()
        self._waiters: dict[str, _Waiter] = {}
        self._leases: dict[str, AsyncLease] = {}
        self._worker: Worker | None = None
        self._listening = Event()
        #: the worker's first try to listen ended, in listening or in a failure
        self._attempted = Event()
        self._renew_now = False
        #: learn the stored config anew (init.lua) at the worker's next turn: an
        #: operator changed it
        self._learn_config = False
        #: the last attempt to reach Redis failed: callers do not wait for the worker
        self._failing = False
        self._pid = os.getpid()
        #: monotonic time of the last successful contact with Redis
        self._last_ok = time.monotonic()

    # -- called by the facade --------------------------------------------------

    def add_waiter(self, lease_id: str) -> _Waiter:
        self.check_fork()  # a child's first waiter must survive the fork check
        waiter = _Waiter(lease_id)
        with self._lock:
            self._waiters[lease_id] = waiter
        return waiter

    def event_of(self, waiter: _Waiter) -> Event:
        """What ``waiter``'s caller waits on (made under the lock the worker
        wakes it under, so both hold the same one)."""
        with self._lock:
            return waiter.made_event()

    def remove_waiter(self, lease_id: str) -> None:
        with self._lock:
            self._waiters.pop(lease_id, None)

    def add_lease(self, lease: AsyncLease) -> AsyncLease:
        """Renew ``lease`` (made by the facade) from now on; returns it."""
        self.check_fork()  # a child's first lease must be renewed by the child
        with self._lock:
            self._leases[lease.id] = lease
        return lease

    def drop_lease(self, lease: AsyncLease) -> None:
        with self._lock:
            self._leases.pop(lease.id, None)

    def holds_leases(self) -> bool:
        self.check_fork()
        return bool(self._leases)

    def listening(self) -> bool:
        """This process's worker is subscribed to the governor's channel."""
        return self._listening.is_set() and self._pid == os.getpid()

    def check_fork(self) -> None:
        """In a child forked from the process that made this object, nothing of
        the parent's is ours: not its worker, its waiters nor its leases (the
        child renewing them would keep a dead parent's slots taken)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._lock = Lock()
        self._waiters = {}
        self._leases = {}
        self._worker = None
        self._listening = Event()
        self._attempted = Event()
        self._failing = False
        self._gov._forked()

    def state_lost(self) -> None:
        """The state was re-created: renew (and so re-register) leases at once."""
        self._renew_now = True

    async def start(self, wait_listening: bool, timeout: float | None = None) -> None:
        """Start the worker if it is not running; optionally wait until it
        listens, so no grant announced after this can be missed: at most
        ``redis_timeout`` (or ``timeout``), and no longer than its first try
        takes to fail (a refused connection fails at once)."""
        self.check_fork()
        if self._listening.is_set():
            return  # the worker runs and listens: it clears the flag on a failure and when it ends
        with self._lock:  # threads making their first calls at once start one worker
            if self._worker is None or not self._worker.alive():
                self._listening.clear()
                self._attempted.clear()
                self._worker = Worker(self._run, name=f"governor:{self._gov.name}")
        if wait_listening and not self._failing:
            limit = self._gov.config.redis_timeout
            await self._attempted.wait(limit if timeout is None else max(0.0, min(limit, timeout)))

    async def stop(self) -> None:
        if self._worker is not None:
            await self._worker.stop(LISTEN_SLICE + self._gov.config.redis_timeout)
            self._worker = None

    # -- the worker ----------------------------------------------------------

    async def _run(self) -> None:
        config = self._gov.config
        pubsub: Any = None
        failures = 0
        next_refresh = 0.0
        next_renew = time.monotonic() + config.renew_interval
        try:
            while not self._gov._closed:
                try:
                    if pubsub is None:
                        pubsub = await self._subscribe()
                        next_refresh = 0.0  # grants announced before we listened
                        # Contact was lost, and Redis may have restarted meanwhile:
                        # renew now, so a new state adopts these holders at once.
                        self._renew_now = bool(self._leases)
                    if self._learn_config:
                        await self._gov._learn_config()
                        self._learn_config = False
                    now = time.monotonic()
                    if now >= next_refresh:
                        next_refresh = now + await self._refresh()
                    if self._renew_now or now >= next_renew:
                        # The next renewal is due only once this one got
                        # through: a failed one is tried again after the
                        # worker's short backoff, not a whole interval later.
                        await self._renew()
                        self._renew_now = False
                        next_renew = now + config.renew_interval
                    self._last_ok = time.monotonic()
                    self._failing = False
                    failures = 0
                    wait = max(0.0, min(next_refresh, next_renew) - time.monotonic())
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(wait, LISTEN_SLICE))
                    if message is not None and message.get("type") == "message":
                        retry_in = self._dispatch(message["data"])
                        if retry_in is not None:
                            next_refresh = min(next_refresh, time.monotonic() + retry_in)
                except Exception as error:  # noqa: BLE001 - the worker must outlive any failure
                    failures += 1
                    self._failing = True
                    self._listening.clear()
                    self._attempted.set()
                    await self._close_pubsub(pubsub)
                    pubsub = None
                    self._fail_waiters_if_stale(error)
                    if failures == 1 or failures % 20 == 0:
                        log.warning("governor %r: background worker error (%s); retrying", self._gov.name, error)
                    await sleep(full_jitter(min(failures, 8), base=0.05, cap=config.poll))
        finally:
            self._listening.clear()
            await self._close_pubsub(pubsub)

    async def _subscribe(self) -> Any:
        client = self._gov.client
        with map_errors(self._gov.name):
            # redis.asyncio clients set up lazily, and a RedisCluster's pub/sub
            # needs its slot map before the first SUBSCRIBE (idempotent).
            # sync: pass
            await client.initialize()
            pubsub = client.pubsub()
            await pubsub.subscribe(self._gov.keys.channel)
            deadline = time.monotonic() + self._gov.config.redis_timeout
            while True:
                message = await pubsub.get_message(timeout=LISTEN_SLICE)
                if message is not None and message.get("type") == "subscribe":
                    break
                if time.monotonic() > deadline:
                    raise GovernorUnavailable("no confirmation of the pub/sub subscription", name=self._gov.name)
        self._listening.set()
        self._attempted.set()
        return pubsub

    async def _close_pubsub(self, pubsub: Any) -> None:
        if pubsub is not None:
            try:
                # sync: pubsub.close()
                await pubsub.aclose()
            except Exception:  # noqa: BLE001 - best effort on a broken connection
                pass

    def _dispatch(self, data: Any) -> float | None:
        """A message on the channel: grants; admission held back for a while
        (returns the seconds until this process's waiters should ask again);
        or a new state whose holders must re-register now."""
        wake = self._core.parse_wake(data)
        if wake.config_changed:  # learn it anew, at the worker's next turn
            self._learn_config = True
            return 0.0
        if wake.retry_in is not None:
            return wake.retry_in + 0.001
        if not wake.grants:
            with self._lock:
                stale = any(lease.epoch != wake.epoch for lease in self._leases.values())
            if stale:  # leases of a lost state: re-register them now
                self._renew_now = True
            return None
        ttl = self._gov.config.lease_ttl
        with self._lock:
            for lease_id, fence in wake.grants.items():
                waiter = self._waiters.get(lease_id)
                if waiter is not None:
                    waiter.granted = Granted(fence, wake.epoch)
                    waiter.deadline = waiter.confirmed_at + ttl
                    waiter.made_event().set()
        return None

    async def _refresh(self) -> float:
        """Refresh this process's queued callers; seconds until the next refresh."""
        poll = self._gov.config.poll
        with self._lock:
            ids = [w.lease_id for w in self._waiters.values() if w.enqueued and w.granted is None]
        if not ids:
            return poll
        hint = poll
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            sent_at = self._core.local_now()
            result: Refreshed = await self._gov._execute(self._core.refresh(chunk), slot=False)
            if result.hint > 0:
                hint = min(hint, result.hint + 0.001)
            with self._lock:
                for lease_id, (fence, remaining) in result.granted.items():
                    waiter = self._waiters.get(lease_id)
                    if waiter is not None:
                        waiter.granted = Granted(fence, result.epoch, remaining)
                        waiter.deadline = sent_at + remaining
                        waiter.made_event().set()
                for lease_id, (position, why) in result.queued.items():
                    waiter = self._waiters.get(lease_id)
                    if waiter is not None:
                        waiter.confirmed_at, waiter.reason, waiter.position = sent_at, why, position
                for lease_id in result.unknown:
                    waiter = self._waiters.get(lease_id)
                    if waiter is not None:
                        waiter.retry = True
                        waiter.made_event().set()
        return hint

    async def _renew(self) -> None:
        with self._lock:
            leases = [lease for lease in self._leases.values() if not lease.lost and not lease.released]
        for start in range(0, len(leases), BATCH):
            chunk = leases[start : start + BATCH]
            sent_at = self._core.local_now()
            call = self._core.renew([lease._renewal() for lease in chunk])
            result: Renewed = await self._gov._execute(call, slot=False)
            by_id = {lease.id: lease for lease in chunk}
            for lease_id in result.ok:
                by_id[lease_id]._renewed(sent_at + self._gov.config.lease_ttl)
            for lease_id, fence in result.adopted.items():
                lease = by_id[lease_id]
                if lease.released:  # released while this renewal was on its way: undo the adoption
                    await self._gov._execute(self._core.release(lease_id), slot=False)
                    continue
                lease.fence, lease.epoch = fence, result.epoch
                lease._renewed(sent_at + self._gov.config.lease_ttl)
            for lease_id in result.lost:
                if by_id[lease_id].released:  # released while this renewal was on its way: nothing was lost
                    continue
                by_id[lease_id]._lost = True
                log.warning("governor %r: lease %s was lost (expired before renewal)", self._gov.name, lease_id)
        with self._lock:
            for lease_id in [i for i, lease in self._leases.items() if lease.lost or lease.released]:
                del self._leases[lease_id]

    def _fail_waiters_if_stale(self, error: Exception) -> None:
        """Fail closed: after queue_ttl without reaching Redis the waiters'
        places are gone; tell them rather than let them wait blind. An error
        Redis answered with (an unusable state, a wrong key type) reaches
        them at once, as it is: waiting does not mend it."""
        if isinstance(error, GovernorError) and not isinstance(error, GovernorUnavailable):
            failure: GovernorError = error
        elif time.monotonic() - self._last_ok < self._gov.config.queue_ttl:
            return
        elif isinstance(error, GovernorUnavailable):
            failure = error
        else:
            failure = GovernorUnavailable(f"governor {self._gov.name!r}: {error}", name=self._gov.name)
        with self._lock:
            for waiter in self._waiters.values():
                waiter.error = failure
                waiter.made_event().set()
