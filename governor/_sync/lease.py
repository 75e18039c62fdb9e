"""GENERATED from governor/_async/lease.py by scripts/unasync.py; do not edit.

Change the asyncio source and run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import logging
import math
from types import TracebackType
from typing import TYPE_CHECKING

from ..core import Ask
from ..errors import ConfigError, GovernorError, LeaseReported

if TYPE_CHECKING:
    from .governor import Governor

log = logging.getLogger("governor")


def _check_report(governor: Governor, lease: Lease | None, release: bool) -> None:
    """report()'s checks of its lease: this governor's, given when it releases,
    and not reported yet (a lease carries one outcome)."""
    if lease is not None and lease._governor is not governor:
        raise ConfigError(f"lease {lease.id} belongs to governor {lease._governor.name!r}, not this object")
    if release and lease is None:
        raise ConfigError("report(release=True) needs the lease to release")
    if lease is not None and lease._reported:
        raise LeaseReported(
            f"governor {governor.name!r}: lease {lease.id} already carried its outcome; nothing counted",
            name=governor.name,
        )


class Lease:
    """One slot of the fleet-wide limit, held until released or lost.

    Renewed in the background every ``lease_ttl / 3``. ``lost`` turns true
    when a renewal finds the lease gone (the holder stalled past its TTL) or
    when no renewal got through before the TTL ran out; the slot may then
    belong to someone else, and a late ``release()`` or report touches
    nothing of theirs. Release is idempotent; leaving ``with lease:``
    releases.
    """

    def __init__(
        self,
        governor: Governor,
        lease_id: str,
        fence: int,
        epoch: str,
        deadline: float,
        ask: Ask,
        local: bool = False,
    ) -> None:
        self._governor = governor
        self.id = lease_id  #: unguessable lease id (also its key in Redis)
        self.fence = fence  #: monotonically increasing fencing token (0 for a local lease)
        self.epoch = epoch  #: the state incarnation the lease belongs to
        self.holder = ask.holder  #: label shown to operators
        self.tokens = ask.tokens  #: what the lease reserved from the budgets (settled by its report)
        self.priority = ask.place.priority  #: the priority class it waited in
        self.tenant = ask.place.tenant  #: the tenant whose share it counts in
        self._ask = ask
        #: admitted by the local fallback limit while Redis was unreachable
        #: (``on_unavailable="local"``); registered in Redis once it answers again
        self.local = local
        #: local time (governor._core.local_now) by which the lease surely lives
        #: unless renewed; a local lease has no deadline until Redis adopts it
        self._deadline = math.inf if local else deadline
        self._lost = False
        self._released = False
        self._reported = False  #: it carried its outcome (report): a second report raises

    @property
    def governor(self) -> Governor:
        return self._governor

    def _renewed(self, until: float) -> None:
        """A renewal sent at ``until - lease_ttl`` got through: the lease lives
        until then, unless a later renewal already said longer (two renewals
        answered out of order: the background worker's and ``renew()``'s), as
        renew.lua never shortens a lease either. A local lease gets its first
        deadline (it had none)."""
        self._deadline = until if math.isinf(self._deadline) else max(self._deadline, until)

    def _renewal(self) -> tuple[str, str, Ask]:
        """What its renewal carries: a new state adopts it with its ask (holder, place, reservation)."""
        return (self.id, self.epoch, self._ask)

    @property
    def lost(self) -> bool:
        """True once the lease is known, or must be assumed, to have expired."""
        if not self._lost and not self._released and self._governor._core.local_now() > self._deadline:
            self._lost = True
        return self._lost

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        self._governor._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.release()
            return
        try:
            self.release()
        except GovernorError as error:  # the body's exception matters more; the TTL reclaims the slot
            log.warning("governor %r: release of lease %s failed: %s", self._governor.name, self.id, error)

    def __repr__(self) -> str:
        state = "lost" if self._lost else "released" if self._released else "held"
        return f"<Lease {self._governor.name}/{self.id} fence={self.fence} {state}>"
