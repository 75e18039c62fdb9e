"""The asyncio facade: AsyncGovernor (its leases are in lease.py).

This package is the source of truth for both facades: scripts/unasync.py
generates governor/_sync/ from it (``async``/``await`` dropped, names
mapped, the line after each ``# sync:`` comment swapped for the code in the
comment), and a test fails when the two drift. The facade only does I/O
and waiting; arguments and replies belong to governor.core.

One background worker per governor object (background.py) listens for
grants, refreshes this process's queued callers and renews its leases; the
connection to Redis and the calls of the library's functions are in
connection.py.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar, cast

import redis.asyncio.cluster as redis_cluster

from .. import events
from ..budgets import Tokens
from ..classify import Classifier
from ..config import GovernorConfig, RetryPolicy
from ..core import (
    MISSING,
    UNSET,
    Ask,
    Call,
    Clock,
    Denied,
    GovernorCore,
    Granted,
    Outcome,
    Queued,
    Status,
    _Unset,
    new_id,
)
from ..errors import (
    AcquireTimeout,
    ConfigError,
    GovernorError,
    GovernorNotFound,
    GovernorUnavailable,
    HashMissing,
    LeaseLost,
    NotReplicated,
    StateError,
    duration,
)
from ..headers import budget_limits

# sync: from ._compat import Semaphore, shielded
from ._compat import AcquireContext, Semaphore, shielded
from .background import _Background, _Waiter
from .connection import Connection, client_from_url
from .lease import AsyncLease, _check_report
from .retry import retry_call, retry_decorator
from .spend import AsyncSpend

log = logging.getLogger("governor")
T = TypeVar("T")

#: the epoch of leases admitted by the local fallback, before Redis adopts them
LOCAL_EPOCH = "local"


class AsyncGovernor:
    """The fleet-wide adaptive concurrency limit, for asyncio code.

    ``client`` is a ``redis.asyncio.Redis`` (or ``RedisCluster``). The governor
    talks to Redis on connections of its own, made with that client's settings
    (host, credentials, TLS, decoding) but with the governor's timeouts, no
    retries and at most ``redis_connections`` of them for callers: any number of
    tasks may share one object. A cluster client is used as it is. ``clock``,
    when given, returns seconds and replaces Redis ``TIME`` for policy and lease
    time, so tests step time instead of sleeping. One object per process and loop.
    """

    def __init__(
        self,
        client: Any,
        name: str,
        config: GovernorConfig | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._core = GovernorCore(name, config, clock)
        self._connection = Connection(client, name, self._core.keys, self._core.config)
        if self.config.wait_replicas and isinstance(self._connection.client, redis_cluster.RedisCluster):
            raise ConfigError(
                "wait_replicas is not supported on a Redis Cluster client (WAIT needs the primary's connection)"
            )
        self._closed = False
        self._background = _Background(self, self._core)
        self._local = Semaphore(self._core.config.local_capacity)
        #: callers' script calls in progress, at most redis_connections at once
        self._slots = Semaphore(self._core.config.redis_connections)

    @classmethod
    def from_url(
        cls,
        url: str,
        name: str,
        config: GovernorConfig | None = None,
        *,
        clock: Clock | None = None,
        **redis_options: Any,
    ) -> AsyncGovernor:
        """A governor with its own Redis client, closed by ``aclose()``.

        Socket timeouts are ``config.redis_timeout`` and nothing is retried by
        redis-py, so an unreachable or hung Redis raises GovernorUnavailable in
        bounded time; ``redis_options`` go to redis-py. The URL may name a
        standalone Redis or any node of a Redis Cluster: the first redirection
        to another node switches to a cluster client.
        """
        config = config if config is not None else GovernorConfig()
        client, options = client_from_url(url, config, **redis_options)
        governor = cls(client, name, config, clock=clock)
        governor._connection.own(url, options)
        return governor

    # -- properties -------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def config(self) -> GovernorConfig:
        return self._core.config

    @property
    def spend(self) -> AsyncSpend:
        """The spend budgets: reserve, settle, approve (governor/_async/spend.py)."""
        return AsyncSpend(self)

    @property
    def keys(self) -> Any:
        """The Redis keys of this governor (governor.protocol.GovernorKeys)."""
        return self._core.keys

    @property
    def client(self) -> Any:
        return self._connection.client

    # -- admission ----------------------------------------------------------------

    def acquire(
        self,
        timeout: float | None = None,
        holder: str | None = None,
        *,
        tokens: Tokens | int | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        # sync: ) -> Lease:
    ) -> AcquireContext[AsyncLease]:
        """Wait in the fleet-wide queue for a lease.

        Use ``async with gov.acquire() as lease:`` to release on the way out,
        or ``lease = await gov.acquire()`` and ``lease.release()``. Raises AcquireTimeout
        after ``timeout`` seconds (None: wait as long as it takes); a caller
        cancelled at any point leaves no slot taken and none lost.
        ``tokens`` (a Tokens, or an int of input tokens) is the call's
        estimate, reserved from the budgets until the lease's report settles
        it; a cost above a budget's whole limit raises CostTooLarge at once.
        ``priority`` names the caller's class (GovernorConfig.priorities; None:
        the default class): a higher class is admitted first, FIFO within a
        class, and a waiter of a lower class goes ahead of every class once
        it waited ``aging``. ``tenant`` (None: the default tenant) names whose
        share it counts in: at capacity, the waiting tenants are granted in
        proportion to their weights (GovernorConfig.tenant_weights).
        """
        # sync: return self._acquire(timeout, self.ask(holder, tokens=tokens, priority=priority, tenant=tenant))
        return AcquireContext(self._acquire(timeout, self.ask(holder, tokens=tokens, priority=priority, tenant=tenant)))

    async def _acquire(self, timeout: float | None, ask: Ask) -> AsyncLease:
        self._check_open()
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ConfigError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        ask = self._core.placed(ask)  # the classes and weights in force now
        with events.acquiring(self.name, ask) as started:  # AcquireStarted now, AcquireFailed if it raises
            deadline = None if timeout is None else started + timeout
            lease = None
            while lease is None:
                try:
                    lease = await self._acquire_shared(ask, deadline, timeout)
                except GovernorUnavailable as error:
                    if self.config.on_unavailable != "local":
                        raise
                    # None: no local permit within a poll; Redis may answer again
                    lease = await self._acquire_local(ask, deadline, error, slice_=self.config.poll)
        try:
            events.emit(events.Admitted(self.name, time.monotonic() - started, lease.local, lease.fence))
        except BaseException:  # interrupted here, the lease never reaches the caller: give it back
            await self._release(lease)  # its call to Redis is shielded
            raise
        return lease

    def ask(
        self,
        holder: str | None = None,
        *,
        tokens: Tokens | int | None = None,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> Ask:
        """:meth:`acquire`'s arguments checked, as one value (ConfigError when one is wrong)."""
        return self._core.ask(holder, tokens, priority, tenant)

    async def _acquire_shared(self, ask: Ask, deadline: float | None, timeout: float | None) -> AsyncLease:
        while True:
            lease_id, granted, expires = await self._wait_for_grant(ask, deadline, timeout)
            try:
                claimed = await self._claim(lease_id, granted, expires, ask)
                if claimed is not None:
                    return self._hold(lease_id, *claimed, ask)
            except NotReplicated:
                await self._abandon(lease_id)  # Redis answers: give the grant back
                raise
            except GovernorUnavailable:
                raise  # no use telling an unreachable Redis; the grant expires by TTL
            except BaseException:
                await self._abandon(lease_id)
                raise
            # The grant expired before this caller could take it (it stalled
            # past the TTL): queue again, under a new id.

    async def _wait_for_grant(
        self, ask: Ask, deadline: float | None, timeout: float | None
    ) -> tuple[str, Granted, float]:
        """Queue (or be admitted at once); the grant and the local time by
        which it surely lives."""
        lease_id = new_id()
        waiter = self._background.add_waiter(lease_id)
        try:
            await self._background.start(wait_listening=True, timeout=timeout)
            sent_at = self._core.local_now()
            call = self._core.acquire(lease_id, ask, wait=True)
            result = await self._execute(call, sending=waiter)
            waiter.enqueued, waiter.confirmed_at = True, sent_at
            expires = sent_at + (result.remaining or 0.0) if isinstance(result, Granted) else 0.0
            while not isinstance(result, Granted):
                if isinstance(result, Queued):
                    waiter.reason, waiter.position = events.waiting(self.name, result.reason, result.position)
                result, expires = await self._wait_turn(waiter, deadline, timeout, ask)
            return lease_id, result, expires
        except NotReplicated:
            await self._abandon(lease_id)  # Redis answers: give the place or grant back
            raise
        except GovernorUnavailable:
            raise  # no use telling an unreachable Redis; the place and any grant expire by TTL
        except BaseException:
            if waiter.sent:  # cancelled before its acquire was sent: Redis never heard of it
                await self._abandon(lease_id)
            raise
        finally:
            self._background.remove_waiter(lease_id)

    async def _claim(self, lease_id: str, granted: Granted, expires: float, ask: Ask) -> tuple[Granted, float] | None:
        """Take a grant. One that may expire before the heartbeat's next
        renewal (its waiter stalled, or heard of it late) is renewed first,
        and so is one announced on pub/sub when replicas must confirm it:
        the grant and its new deadline, or None when it is already lost."""
        pushed = granted.remaining is None
        if expires - self._core.local_now() > self.config.renew_interval and not (pushed and self.config.wait_replicas):
            return granted, expires
        sent_at = self._core.local_now()
        renewed = await self._execute(self._core.renew([(lease_id, granted.epoch, ask)]))
        expires = sent_at + self.config.lease_ttl
        if lease_id in renewed.ok:
            return granted, expires
        if lease_id in renewed.adopted:
            return Granted(renewed.adopted[lease_id], renewed.epoch), expires
        return None

    async def _acquire_local(
        self, ask: Ask, deadline: float | None, error: GovernorUnavailable, slice_: float | None = None
    ) -> AsyncLease | None:
        """The fallback while Redis is unreachable: a per-process limit of
        ``local_capacity``; the heartbeat registers these leases in Redis as
        soon as it answers (renew.lua adopts them). A caller waits for a
        local permit at most ``slice_`` at a time (None when the slice ends
        before the deadline), so that it asks Redis again instead of being
        admitted locally after Redis is back, beside the shared limit."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait = remaining if slice_ is None else (slice_ if remaining is None else min(slice_, remaining))
        if not await self._local.acquire(wait):
            if wait != remaining:
                return None
            raise AcquireTimeout(
                f"governor {self.name!r}: Redis is unreachable ({error}) and the local fallback limit "
                f"of {self.config.local_capacity} is full",
                name=self.name,
            ) from error
        log.warning("governor %r: Redis unreachable, admitting under the local limit: %s", self.name, error)
        lease = self._hold(new_id(), Granted(0, LOCAL_EPOCH), math.inf, ask, local=True)
        await self._background.start(wait_listening=False)
        return lease

    async def _wait_turn(
        self, waiter: _Waiter, deadline: float | None, timeout: float | None, ask: Ask
    ) -> tuple[Granted | Queued | Denied, float]:
        """Wait for the background worker's news: a grant (and the local time
        by which it surely lives), or the next step."""
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            where = "parked at its tenant's cap" if waiter.position < 0 else f"{waiter.position} ahead"
            raise AcquireTimeout(
                f"governor {self.name!r}: no lease within {duration(timeout or 0.0)} "
                f"({waiter.reason or 'queued'}; {where} at last look)",
                name=self.name,
            )
        slice_ = self.config.queue_ttl if remaining is None else min(remaining, self.config.queue_ttl)
        await (event := self._background.event_of(waiter)).wait(slice_)
        event.clear()
        if waiter.error is not None:
            raise waiter.error
        if waiter.granted is not None:
            return waiter.granted, waiter.deadline
        if waiter.retry:
            waiter.retry = False
            sent_at = self._core.local_now()
            result = await self._execute(self._core.acquire(waiter.lease_id, ask, wait=True, fresh=False))
            waiter.confirmed_at = sent_at
            expires = sent_at + (result.remaining or 0.0) if isinstance(result, Granted) else 0.0
            return result, expires
        await self._background.start(wait_listening=False)  # a safety net if the worker died
        return Queued(waiter.position, waiter.reason, 0.0, ""), 0.0

    async def _abandon(self, lease_id: str) -> str:
        """Give up a place or a grant; never raises (the TTLs clean up after us).
        Returns what was given up: 'queued', 'granted', 'none' or 'failed'."""
        try:
            return await shielded(lambda: self._execute(self._core.cancel(lease_id), urgent=True))
        except GovernorError as error:
            log.warning(
                "governor %r: cancel of %s failed (%s); its place expires by itself", self.name, lease_id, error
            )
            return "failed"

    async def try_acquire(
        self,
        holder: str | None = None,
        *,
        tokens: Tokens | int | None = None,
        priority: str | None = None,
        tenant: str | None = None,
    ) -> AsyncLease | None:
        """A lease if one is free right now (every budget with room for
        ``tokens``) and nobody is queued, else None (``priority`` and
        ``tenant`` as for :meth:`acquire`: the lease counts in them)."""
        self._check_open()
        ask = self.ask(holder, tokens=tokens, priority=priority, tenant=tenant)
        lease_id = new_id()
        sent_at = self._core.local_now()
        try:
            result = await self._execute(self._core.acquire(lease_id, ask, wait=False))
        except GovernorUnavailable as error:
            if isinstance(error, NotReplicated):
                await self._abandon(lease_id)  # Redis answers: give the grant back
            if self.config.on_unavailable != "local":
                raise
            try:
                return await self._acquire_local(ask, time.monotonic(), error)
            except AcquireTimeout:
                return None
        except BaseException:
            await self._abandon(lease_id)  # the grant may have happened unseen
            raise
        if not isinstance(result, Granted):
            return None
        lease = self._hold(lease_id, result, sent_at + (result.remaining or 0.0), ask)
        await self._background.start(wait_listening=False)
        return lease

    def _hold(self, lease_id: str, granted: Granted, deadline: float, ask: Ask, local: bool = False) -> AsyncLease:
        """The lease of a grant, renewed by the background worker from now on."""
        lease = AsyncLease(self, lease_id, granted.fence, granted.epoch, deadline, ask, local)
        return self._background.add_lease(lease)

    async def _forget(self, lease: AsyncLease) -> bool:
        """This process no longer holds ``lease``; False if it was released
        already. Redis is told by the caller (release.lua, or report.lua with
        its release flag); a lease Redis never saw (local) is done here."""
        if lease._released:
            return False
        lease._released = True
        self._background.drop_lease(lease)
        if lease.local:
            self._local.release()
        return lease.epoch != LOCAL_EPOCH

    async def _release(self, lease: AsyncLease) -> bool:
        """Give a lease back; False if there was nothing to tell Redis."""
        if not await self._forget(lease):
            return False
        # Shielded: a caller cancelled while releasing must not leak the slot.
        await shielded(lambda: self._execute(self._core.release(lease.id), urgent=True))
        return True

    # -- calls under the limit --------------------------------------------------------------

    async def call(
        self,
        # sync: fn: Callable[..., T],
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        classify: Classifier | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        holder: str | None = None,
        tokens: Tokens | int | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` under the fleet limit: acquire a lease
        (reserving ``tokens``, waiting in class ``priority`` for ``tenant``),
        call, classify the outcome, report it (with the usage an SDK result
        carries), release, and retry throttled calls with the provider's
        Retry-After or the backoff. Quota exhaustion raises
        QuotaExhausted at once; other errors propagate."""
        ask = self.ask(holder, tokens=tokens, priority=priority, tenant=tenant)
        return await retry_call(self, fn, args, kwargs, ask, classify=classify, retry=retry, timeout=timeout)

    def limit(
        self,
        *,
        classify: Classifier | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        holder: str | None = None,
        priority: str | None = None,
        tenant: str | None = None,
        # sync: ) -> Callable[[Callable[..., T]], Callable[..., T]]:
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        """Decorator form of :meth:`call`: every call of the function goes through it."""
        ask = self.ask(holder, priority=priority, tenant=tenant)
        return retry_decorator(self, ask, classify=classify, retry=retry, timeout=timeout)

    # -- outcomes and policy ------------------------------------------------------------

    async def report(
        self,
        outcome: Outcome,
        retry_after: float | None = None,
        lease: AsyncLease | None = None,
        *,
        release: bool = False,
        usage: Tokens | None = None,
        headers: Mapping[str, str] | None = None,
        refusals_count: bool = True,
        load: bool = True,
    ) -> None:
        """Feed one provider outcome to the fleet's policy and budgets.

        ``retry_after`` (seconds, rate-limited only) holds the whole fleet
        until then, capped by ``config.retry_after_cap``; with QUOTA_EXHAUSTED
        it is when a per-day quota comes back (logged; ``status().quota_until``).
        Pass the ``lease`` the call ran under: the adaptive policy then knows
        which admission wave the outcome belongs to. A lost lease is fenced
        off: nothing is recorded and LeaseLost is raised; a second report
        LeaseReported. ``release=True`` also releases the lease, in the same
        round trip. ``usage`` (the tokens the call used) settles the lease's
        reservation; ``headers`` (the response's) calibrate the budgets
        (governor/headers.py; unreadable ones are counted, never raised). A
        rate-limited outcome clamps the fleet's buckets to 0 unless its headers
        say what remains; ``refusals_count`` (the profile's) says whether the
        provider counted the refused call: its reservation is then spent, else
        given back. ``load=False`` (rate-limited only): a refusal that is no
        load signal (an overload, a 529, headers showing room left), which the
        adaptive policy weighs as the provider's background (no cut, hold or
        clamp); other policies read it as any refusal. A usage beyond MAX_USAGE
        raises UsageTooLarge.
        """
        if usage is not None and not isinstance(usage, Tokens):
            raise ConfigError(f"usage must be a Tokens (input and output tokens) or None, got {usage!r}")
        if usage is not None:
            usage.as_usage()  # before the lease is given up: a refused report changes nothing
        limits = None if headers is None else budget_limits(headers, self.name)
        _check_report(self, lease, release)
        lease_id, fence = None, None
        if lease is not None and lease.epoch != LOCAL_EPOCH:  # a local lease is not in Redis yet
            fence = lease.fence
            if not lease.released:  # a lease released before its report is not checked
                lease_id = lease.id
        releasing = release and lease is not None and await self._forget(lease)
        call = self._core.report(
            outcome,
            retry_after,
            lease_id,
            fence,
            release=releasing,
            usage=usage,
            limits=limits,
            refusals_count=refusals_count,
            load=load,
        )
        try:
            # Shielded when it releases: a caller cancelled meanwhile must not leak the slot.
            recorded = await (shielded(lambda: self._execute(call, urgent=True)) if releasing else self._execute(call))
        except GovernorUnavailable as error:
            if self.config.on_unavailable != "local":
                raise
            log.info("governor %r: outcome not recorded, Redis unreachable: %s", self.name, error)
            return
        if lease is not None:
            lease._reported = True  # its one outcome (lost or counted)
        if not recorded and lease is not None:
            lease._lost = True
            raise LeaseLost(
                f"governor {self.name!r}: lease {lease.id} (fence {lease.fence}) expired before this report; "
                "its outcome was not counted and its slot may be someone else's",
                name=self.name,
            )

    async def probe(self) -> Status:
        """Time-driven recovery: reclaim expired leases, lift a drained pause,
        admit waiters; returns the status."""
        return await self._execute(self._core.probe())

    async def status(self, *, create: bool = True) -> Status:
        """The governor's state, read-only in Redis. A governor that does not
        exist yet is created from this object's config, unless ``create`` is
        False: then GovernorNotFound is raised (what operator tools want).
        While this object's grants are not confirmed by ``wait_replicas``
        replicas, ``blocked`` says so."""
        status = self._found(await self._execute(self._core.status(create)))
        unconfirmed = self._connection.unconfirmed_within(self.config.lease_ttl)
        if unconfirmed is not None:
            status = replace(status, blocked=unconfirmed + (f"; {status.blocked}" if status.blocked else ""))
        return status

    async def set_max_capacity(self, n: int, *, create: bool = True) -> Status:
        """Change the ceiling, keeping what the policy learnt: a lower one applies at once, a higher
        one the adaptive policy approaches (seed, fixed: at once); while paused, the resume uses it."""
        return self._found(await self._execute(self._core.set_max_capacity(n, create)))

    async def set_shares(
        self,
        *,
        tenant_weights: Mapping[str, int] | None = None,
        default_weight: int | None = None,
        aging: float | _Unset | None = UNSET,
        tenant_caps: Mapping[str, int] | None = None,
        reserve: int | None = None,
        create: bool = True,
    ) -> Status:
        """Change the tenants' weights or caps (each the whole mapping), the
        default weight, the reserve or the aging (None: never) fleet-wide at
        run time; what is not given stays. Every client uses the weights for
        the callers it queues from then on (the config wake); caps and the
        reserve apply at once; what the policy learnt is kept."""
        if self._core.stored_config is None:
            await self._learn_config()  # changes are to the fleet's config, not this object's
        call = self._core.set_shares(tenant_weights, default_weight, aging, tenant_caps, reserve, create)
        status = self._found(await self._execute(call))
        await self._learn_config()  # this object's next callers use them at once
        return status

    async def pause(self, reason: str, duration: float | None = None, *, create: bool = True) -> Status:
        """Stop admissions fleet-wide (held leases keep running) until
        ``resume()`` or for ``duration`` seconds."""
        return self._found(await self._execute(self._core.pause(reason, duration, create)))

    async def resume(self, *, lift_recovery_hold: bool = False, create: bool = True) -> Status:
        """Lift any pause and any Retry-After hold. A recovery hold (after a
        loss: ``Status.hold_until``) stays unless ``lift_recovery_hold``:
        holders from before the loss may still run unseen until it ends."""
        return self._found(await self._execute(self._core.resume(create, lift_recovery_hold)))

    async def reset(self, *, create: bool = True) -> Status:
        """Forget what the policy learnt (window, pause, Retry-After hold,
        adaptive memory); capacity goes back to max_capacity (the adaptive
        policy: to its slow start from the resume level); the longest lease
        TTL (``Status.ttl_max``) is counted again from the live leases. The
        stored config, holders, waiters and a recovery hold are kept."""
        return self._found(await self._execute(self._core.reset(with_config=False, create=create)))

    async def configure(self, *, create: bool = True) -> Status:
        """Store this object's config as the governor's (the first client to
        create a governor stores its config; later ones use it) and reset.
        ``create=False``: GovernorNotFound instead of creating a missing one."""
        return self._found(await self._execute(self._core.reset(with_config=True, create=create)))

    def _found(self, status: object) -> Status:
        """With ``create=False`` a missing governor answers None: say so."""
        if not isinstance(status, Status):
            raise GovernorNotFound(f"no governor named {self.name!r} in this Redis", name=self.name)
        return status

    async def renew(self) -> None:
        """Renew every lease this object holds now (the heartbeat does it
        every ``lease_ttl / 3``)."""
        self._background.check_fork()
        await self._background._renew()

    # -- plumbing -----------------------------------------------------------------

    async def _execute(
        self, call: Call[T], *, slot: bool = True, sending: _Waiter | None = None, urgent: bool = False
    ) -> T:
        """Run one script; when the state is missing, re-create it and run
        again. ``slot``: a caller's call, one of at most ``redis_connections``
        at once (the background worker has a connection of its own).
        ``sending``: the waiter whose id the call carries, marked sent once
        the call has its slot (a caller cancelled before has nothing to give
        back). ``urgent``: a call that gives a slot back (release, cancel, a
        releasing report) goes ahead of the callers waiting for a slot, so a
        crowd of new acquires never holds up the capacity they wait for."""
        if slot:
            await self._slots.acquire(None, urgent=urgent)
        if sending is not None:
            sending.sent = True
        try:
            if call.recreate and self._core.stored_config is None:
                await self._init()  # the first call learns the stored config (or creates the state)
            result = await self._run_repaired(call)
            if result is MISSING:
                if not call.recreate:
                    return call.if_missing  # type: ignore[no-any-return]
                await self._init()
                result = await self._connection.run(call)
                if result is MISSING:
                    raise StateError(f"governor {self.name!r}: state vanished right after creation", name=self.name)
            return cast(T, result)
        finally:
            if slot:
                self._slots.release()

    async def _run_repaired(self, call: Call[T]) -> Any:
        """Run ``call``; a config or policy hash lost while the state stayed
        is stored again (init) and the call made again."""
        try:
            return await self._connection.run(call)
        except HashMissing:
            await self._init()
            return await self._connection.run(call)

    async def _init(self) -> str:
        """Create the state if it is missing (init.lua) and learn the stored config; 'created'
        or 'exists'. A client declaring the server durable checks it first (once)."""
        if self._core.config.durable_redis:
            await self._connection.check_durable()
        init = self._core.init(holds_leases=self._background.holds_leases(), listening=self._background.listening())
        created: str = await self._connection.run(init)
        if created == "created" and self._background.holds_leases():
            self._background.state_lost()
        return created

    async def _learn_config(self) -> None:
        """The stored config anew, after an operator changed it: read from
        the config hash, never created (init here could re-create a state
        lost meanwhile from the config this object held before the change)."""
        self._core.learn_stored_config(await self._connection.read(self._core.keys.config))

    def _forked(self) -> None:
        """In a child forked from the process that made this object: this process's
        own local and connection limits (the parent's threads may hold its semaphores)."""
        self._local = Semaphore(self._core.config.local_capacity)
        self._slots = Semaphore(self._core.config.redis_connections)

    async def _fleet_time(self) -> float:
        """The fleet's clock, Unix seconds: Redis ``TIME`` (the injected clock when one is given)."""
        if self._core.clock is not None:
            return self._core.clock()
        seconds, micros = await self._connection.client.time()
        return float(seconds) + float(micros) / 1e6

    def _check_open(self) -> None:
        if self._closed:
            raise GovernorError(f"governor {self.name!r} is closed", name=self.name)

    async def aclose(self) -> None:
        """Stop the background worker (held leases are no longer renewed) and
        close the Redis client if ``from_url`` made it."""
        if self._closed:
            return
        self._closed = True
        await self._background.stop()
        await self._connection.aclose()

    async def __aenter__(self) -> AsyncGovernor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncGovernor {self.name!r} policy={self.config.policy} max={self.config.max_capacity}>"
