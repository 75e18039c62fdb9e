"""One key of a governor lost (evicted, or a mistaken DEL) while the others
stay: a detected loss, never a silent stall, never "open" while stuck; every
StateError's remedy works when followed.

A witness of the test's own (tests/support/holders.py) counts the holders,
all of them and those of the capped tenant, against the capacity and the cap.
"""

from __future__ import annotations

from typing import Any

import pytest

from governor import Governor, GovernorConfig
from governor.cli.render import state_line

from .conftest import FakeClock
from .support.holders import Holders

CAP = 1
CAPACITY = 4
CONFIG = GovernorConfig(
    max_capacity=CAPACITY, policy="fixed", lease_ttl=3.0, poll=0.2, queue_ttl=1.0, tenant_caps={"capped": CAP}
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _admit(gov: Governor, holders: Holders, n: int, tenant: str | None = None) -> list[Any]:
    leases = []
    for _ in range(n):
        lease = gov.try_acquire(tenant=tenant)
        if lease is not None:
            leases.append(holders.entered(lease, tenant or "default"))
    return leases


def _tenant_witness(holders: Holders, tenant: str, until: float) -> Any:
    only = Holders(now=holders.now)
    only.events = [e for e in holders.events if e.get("role") == tenant or e["key"] in {
        x["key"] for x in holders.events if x.get("role") == tenant}]  # fmt: skip
    seen = only.witness(CAP, until=until)
    only.close()
    return seen


@pytest.mark.parametrize("key", ["leases", "holders"])
def test_leases_or_holders_lost_is_a_loss_not_a_stall(
    make_gov: Any, clock: FakeClock, sync_client: Any, key: str
) -> None:
    holders = Holders(now=clock)
    try:
        fleet = make_gov(CONFIG, clock=clock)
        capped = _admit(fleet, holders, 1, "capped")
        others = _admit(fleet, holders, 2)
        assert len(capped) == 1 and len(others) == 2
        sync_client.delete(getattr(fleet.keys, key))  # evicted, or a mistaken DEL
        st = fleet.status()
        # never "open" while stuck (the heartbeat's reclaim may have found it already: then the hold says it)
        assert f"key(s) {key} lost" in st.blocked, st.blocked
        assert not state_line(st).startswith("OPEN")
        clock.advance(1.1)  # reclaim looks at most once a second
        newcomer = make_gov(CONFIG, clock=clock)
        if key == "holders":  # the leases count right meanwhile: the heartbeat's reclaim finds it
            fleet.renew()
        assert _admit(newcomer, holders, 4) == []  # the loss was found: held for the holders to re-register
        st = newcomer.status()
        assert st.recovery_hold and st.hold_reason.startswith(f"key(s) {key} lost")
        fleet.renew()  # the heartbeat: the holders' leases adopted into the new epoch
        assert newcomer.status().in_flight == 3
        for _ in range(2):  # the hold is over, the holders' heartbeat keeping them
            clock.advance(CONFIG.lease_ttl / 2 + 0.05)
            fleet.renew()
        assert len(_admit(newcomer, holders, 4)) == 1  # 3 in flight: one slot left
        for lease in capped:
            holders.left(lease)
            lease.release()
        again = _admit(newcomer, holders, 1, "capped")
        assert len(again) == 1, newcomer.status().blocked  # the capped tenant is not stuck
        seen = holders.witness(CAPACITY, until=clock.now + 1.0)  # the admitted hold on
        assert seen.peak <= CAPACITY and not seen.shared, f"the witness saw {seen}"
        assert _tenant_witness(holders, "capped", clock.now + 1.0).peak <= CAP
        kinds = [_text(e[b"kind"] if b"kind" in e else e["kind"]) for _, e in sync_client.xrange(fleet.keys.events)]
        assert "lost-key" in kinds
    finally:
        holders.close()


@pytest.mark.parametrize("key", ["config", "policy"])
def test_config_or_policy_lost_is_stored_again_and_every_remedy_works(
    make_gov: Any, clock: FakeClock, sync_client: Any, key: str
) -> None:
    fleet = make_gov(CONFIG, clock=clock)
    lease = fleet.try_acquire()
    assert lease is not None
    sync_client.delete(getattr(fleet.keys, key))
    st = fleet.status()  # stored again from this client's config: no StateError
    assert st.max_capacity == CAPACITY and st.in_flight == 1
    assert sync_client.exists(fleet.keys.config) and sync_client.exists(fleet.keys.policy)
    lease.release()
    for remedy in ("reset", "configure", "resume"):
        sync_client.delete(getattr(fleet.keys, key))
        assert getattr(fleet, remedy)().max_capacity == CAPACITY
    fresh = make_gov(CONFIG, clock=clock)  # a client that never saw the governor
    sync_client.delete(getattr(fleet.keys, key))
    got = fresh.try_acquire()
    assert got is not None
    got.release()
    kinds = [_text(e[b"kind"] if b"kind" in e else e["kind"]) for _, e in sync_client.xrange(fleet.keys.events)]
    assert "repair" in kinds
