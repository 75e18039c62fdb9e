"""Reserve, settle and approve spend (governor/spend.py) through a governor.

This file is the source of truth; scripts/unasync.py generates
governor/_sync/spend.py from it.

A call's money goes through three steps, each one atomic call of
``lua/spend.lua``: :meth:`AsyncSpend.reserve` before the call (the most it
can cost; SpendExhausted at once when a budget cannot afford it, unless
the caller asked to wait and the budget resets before its timeout),
:meth:`AsyncSpend.settle` after it (what it was charged: the usage at the
tier that served it, or what the provider bills a refusal, often nothing),
and an operator's :meth:`AsyncSpend.approve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import new_id
from ..errors import ConfigError
from ..protocol import DEFAULT_TENANT, ms, validate_tenant
from ..spend import SpendBudget, SpendExhausted
from ._compat import sleep

if TYPE_CHECKING:
    from .governor import AsyncGovernor

#: seconds a reservation waits for its settlement past the lease TTL and the call's timeout
SETTLE_GRACE = 60.0


@dataclass(frozen=True)
class Reservation:
    """What :meth:`AsyncSpend.reserve` took: settle it once."""

    id: str
    tenant: str | None
    micros: int
    requests: int = 1
    tokens: int = 0


class AsyncSpend:
    """The spend budgets of one governor (``GovernorConfig.spend``)."""

    def __init__(self, governor: AsyncGovernor) -> None:
        self._gov = governor

    @property
    def active(self) -> bool:
        """Whether the config names any spend budget."""
        return bool(self._gov.config.spend)

    async def reserve(
        self,
        micros: int,
        *,
        tenant: str | None = None,
        timeout: float | None = None,
        wait: bool = False,
        requests: int = 1,
        tokens: int = 0,
    ) -> Reservation:
        """Reserve ``micros`` (micro-dollars; ``requests`` and ``tokens`` for
        the budgets that count those) in every budget the call counts in.
        SpendExhausted when one cannot afford it; with ``wait``, the caller
        waits for the window to reset instead when that is within
        ``timeout`` seconds (None: any time)."""
        core, budgets = self._gov._core, self._gov.config.spend
        keep = self._gov.config.lease_ttl + (timeout or self._gov.config.queue_ttl) + SETTLE_GRACE
        started = core.local_now()
        while True:
            call_id = new_id()
            who = validate_tenant(tenant or DEFAULT_TENANT)
            call = core.spend("reserve", call_id, who, (micros, requests, tokens), str(ms(keep)), budgets)
            answer = await self._gov._execute(call)
            if answer is None:
                return Reservation(call_id, tenant, micros, requests, tokens)
            assert isinstance(answer, SpendExhausted)
            if not wait or answer.resets_at is None:
                raise answer
            pause = max(0.001, answer.resets_at - core.wall_ms() / 1000)
            if timeout is not None and core.local_now() - started + pause > timeout:
                raise answer
            await sleep(pause)

    async def settle(
        self, reservation: Reservation, micros: int, *, requests: int | None = None, tokens: int | None = None
    ) -> None:
        """Settle ``reservation`` with the call's charge (micro-dollars), and
        the requests and tokens it took (None: what it reserved)."""
        tenant = validate_tenant(reservation.tenant or DEFAULT_TENANT)
        took = (
            micros,
            reservation.requests if requests is None else requests,
            reservation.tokens if tokens is None else tokens,
        )
        reserved = f"{reservation.micros},{reservation.requests},{reservation.tokens}"
        call = self._gov._core.spend("settle", reservation.id, tenant, took, reserved, self._gov.config.spend)
        await self._gov._execute(call)

    async def approve(self, budget: str | SpendBudget, *, tenant: str | None = None, add: Any = 0) -> float:
        """Raise ``budget``'s limit by ``add`` (dollars; requests or tokens
        for a budget of those) for the fleet (or ``tenant``) until its window
        resets; a paused threshold lifts. Returns when the approval ends
        (Unix seconds)."""
        scope = "*" if tenant is None else validate_tenant(tenant)
        found = self._budget(budget)
        call = self._gov._core.spend("approve", found.name, scope, (found.amount("add", add),), "", (found,))
        return float(await self._gov._execute(call))

    def _budget(self, budget: str | SpendBudget) -> SpendBudget:
        if isinstance(budget, SpendBudget):
            return budget
        for each in self._gov.config.spend:
            if each.name == budget:
                return each
        names = ", ".join(b.name for b in self._gov.config.spend) or "none"
        raise ConfigError(f"no spend budget {budget!r} in this governor's config (its budgets: {names})")
