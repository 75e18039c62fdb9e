"""governor.metrics: the clients' admission histogram and the exporter's collector.

The collector is read through its registry on every backend, and scraped
over HTTP (prometheus_client's own server) from a real Redis, the text
parsed with prometheus_client's parser.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
from prometheus_client import REGISTRY, CollectorRegistry

from governor import Governor, GovernorConfig, Outcome, metrics, views
from governor.budgets import Tokens
from governor.core import Granted, Queued, new_id
from governor.errors import ConfigError
from governor.events import AcquireStarted, Admitted, emit
from governor.metrics import GovernorCollector, observe_admission, start_exporter
from governor.protocol import SCHEMA_VERSION, governor_keys
from governor.spend import UNITS, SpendBudget
from governor.views import server_time_ms

from .conftest import FakeClock, Samples, scrape
from .support.servers import free_port

MakeGov = Callable[..., Governor]


def key(metric: str, governor: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return metric, tuple(sorted({"governor": governor, **labels}.items()))


def collect(collector: GovernorCollector) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in registry.collect() for s in family.samples}


# -- the client histogram --------------------------------------------------------------


def test_observe_admission_feeds_a_histogram_per_governor(name: str) -> None:
    def sample(suffix: str, **labels: str) -> float | None:
        labels = {"governor": name, "priority": "", **labels}
        return REGISTRY.get_sample_value(f"governor_admission_wait_seconds_{suffix}", labels)

    assert sample("count") is None
    observe_admission(name, 0.2)
    observe_admission(name, 3.0)
    assert sample("count") == 2
    assert sample("sum") == pytest.approx(3.2)
    assert sample("bucket", le="0.25") == 1
    assert sample("bucket", le="5.0") == 2
    other = {"governor": f"{name}-other", "priority": ""}
    assert REGISTRY.get_sample_value("governor_admission_wait_seconds_count", other) is None


def test_every_admission_is_observed_in_its_class(make_gov: MakeGov, name: str) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2, priorities=("high", "low"), default_priority="low"))

    def count(priority: str) -> float:
        labels = {"governor": name, "priority": priority}
        return REGISTRY.get_sample_value("governor_admission_wait_seconds_count", labels) or 0

    with gov.acquire(timeout=5):
        pass
    with gov.acquire(timeout=5, priority="high"):
        pass
    with gov.acquire(timeout=5, priority="low"):
        pass
    assert (count("high"), count("low")) == (1, 2)


def test_the_histogram_listens_to_admitted_events(name: str) -> None:
    """The facades do not import metrics: they emit, and metrics subscribes."""
    emit(AcquireStarted(name, "batch", "", 0, "h"))
    emit(Admitted(name, 0.3, False))
    emit(Admitted(name, 0.7, True))
    labels = {"governor": name, "priority": "batch"}
    assert REGISTRY.get_sample_value("governor_admission_wait_seconds_count", labels) == 2
    assert REGISTRY.get_sample_value("governor_admission_wait_seconds_sum", labels) == pytest.approx(1.0)


def test_observe_admission_is_a_no_op_without_prometheus_client(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    monkeypatch.setattr(metrics, "_children", {})
    observe_admission(name, 1.0)
    observe_admission(name, 2.0)
    assert metrics._children[name, ""] is metrics._NOOP


# -- the collector -------------------------------------------------------------------------


def test_collector_reads_the_state(make_gov: MakeGov, sync_client: Any, name: str) -> None:
    clock = FakeClock(server_time_ms(sync_client) / 1000 - 1)  # the collector reads at the server's time
    gov = make_gov(GovernorConfig(policy="seed", max_capacity=8, retry_after_cap=30), clock=clock)
    held = [gov.try_acquire(holder=f"h/{i}") for i in range(3)]
    gov.report(Outcome.RATE_LIMITED)
    gov.report(Outcome.RATE_LIMITED, retry_after=5)
    gov.report(Outcome.QUOTA_EXHAUSTED)
    got = collect(GovernorCollector(sync_client, [name]))
    expected = {
        "governor_up": 1,
        "governor_capacity": 4,
        "governor_max_capacity": 8,
        "governor_in_flight": 3,
        "governor_queued": 0,
        "governor_paused": 0,
        "governor_window_rate_limited": 2,
        "governor_window_attempts": 2,
        "governor_window_seconds": 60,
        "governor_not_before_timestamp_seconds": pytest.approx(clock.now + 5),
        "governor_quota_exhausted_total": 1,
        "governor_decision_log_entries": 4,  # create, capacity, hold, quota
    }
    for metric, value in expected.items():
        assert got[key(metric, name)] == value, metric
    for kind in ("create", "capacity", "hold", "quota"):
        assert got[key("governor_decisions_total", name, kind=kind)] == 1
    assert got[key("governor_info", name, policy="seed", pause_kind="", reason="", schema=str(SCHEMA_VERSION))] == 1
    for lease in held:
        assert lease is not None
        lease.release()


def test_collector_reads_each_budget(make_gov: MakeGov, sync_client: Any, name: str) -> None:
    clock = FakeClock(server_time_ms(sync_client) / 1000 - 1)
    gov = make_gov(GovernorConfig(max_capacity=8, tokens_per_minute=6000), clock=clock)
    lease = gov.try_acquire(tokens=Tokens(1500, 500))
    assert lease is not None
    gov.report(Outcome.SUCCESS, headers={"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "90"})
    got = collect(GovernorCollector(sync_client, [name]))
    tokens = {"budget": "tokens", "source": "configured"}
    requests = {"budget": "requests", "source": "header"}
    assert got[key("governor_budget_limit", name, **tokens)] == 6000
    assert got[key("governor_budget_reserved", name, **tokens)] == 2000
    assert 4000 <= got[key("governor_budget_level", name, **tokens)] <= 4500  # refilled by the server clock, 1 s on
    assert (
        got[key("governor_budget_limit", name, **requests)],
        got[key("governor_budget_burst", name, **requests)],
    ) == (
        100,
        90,
    )
    lease.release()


def test_collector_reads_each_spend_budget_and_scope(make_gov: MakeGov, sync_client: Any, name: str) -> None:
    clock = FakeClock(server_time_ms(sync_client) / 1000)  # the collector reads on the server's clock
    budget = SpendBudget("daily", "1d", limit=10, tenants={"acme": 2}, threshold=0.5, pause=True)
    gov = make_gov(GovernorConfig(spend=(budget,)), clock=clock)
    gov.spend.reserve(1_000_000, tenant="acme")
    got = collect(GovernorCollector(sync_client, [name]))
    fleet = {"budget": "daily", "scope": "*", "window": "rolling:86400000:10"}
    acme = {**fleet, "scope": "acme"}
    assert got[key("governor_spend_spent_dollars", name, **fleet)] == 1.0
    assert got[key("governor_spend_reserved_dollars", name, **acme)] == 1.0
    assert got[key("governor_spend_remaining_dollars", name, **acme)] == 1.0
    assert got[key("governor_spend_limit_dollars", name, **fleet)] == 10.0
    # (a rolling window counts a charge for its slot and the window after it: at most a tenth more)
    assert 86400 <= got[key("governor_spend_resets_in_seconds", name, **fleet)] <= 86400 * 1.1
    assert got[key("governor_spend_threshold_reached", name, **acme)] == 1
    assert got[key("governor_spend_paused", name, **acme)] == 1
    assert got[key("governor_spend_paused", name, **fleet)] == 0
    assert got[key("governor_decisions_total", name, kind="spend-threshold")] == 1


def test_collector_reads_the_requests_and_tokens_budgets_in_their_own_units(
    make_gov: MakeGov, sync_client: Any, name: str
) -> None:
    """A budget of requests or tokens per window has the figures of the
    dollar ones, named for its unit (no dollars in them), and the same
    reset, threshold and pause gauges."""
    clock = FakeClock(server_time_ms(sync_client) / 1000)
    rpd = SpendBudget("rpd", "day", limit=10, tenants={"acme": 4}, threshold=0.5, pause=True, unit="requests")
    tpd = SpendBudget("tpd", "day", limit=100_000, unit="tokens")
    gov = make_gov(GovernorConfig(spend=(rpd, tpd)), clock=clock)
    settled = gov.spend.reserve(0, tenant="acme", tokens=3_000)
    gov.spend.settle(settled, 0, tokens=1_500)  # used less than it reserved
    gov.spend.reserve(0, tenant="acme", tokens=2_000)  # in flight
    got = collect(GovernorCollector(sync_client, [name]))
    requests = {"budget": "rpd", "scope": "*", "window": "day@UTC"}
    acme = {**requests, "scope": "acme"}
    tokens = {"budget": "tpd", "scope": "*", "window": "day@UTC"}
    expected = {
        key("governor_spend_spent_requests", name, **requests): 2,
        key("governor_spend_reserved_requests", name, **requests): 1,
        key("governor_spend_limit_requests", name, **requests): 10,
        key("governor_spend_remaining_requests", name, **requests): 8,
        key("governor_spend_spent_requests", name, **acme): 2,
        key("governor_spend_limit_requests", name, **acme): 4,
        key("governor_spend_remaining_requests", name, **acme): 2,
        key("governor_spend_spent_tokens", name, **tokens): 3_500,
        key("governor_spend_reserved_tokens", name, **tokens): 2_000,
        key("governor_spend_limit_tokens", name, **tokens): 100_000,
        key("governor_spend_remaining_tokens", name, **tokens): 96_500,
        key("governor_spend_threshold_reached", name, **acme): 1,
        key("governor_spend_paused", name, **acme): 1,
        key("governor_spend_paused", name, **requests): 0,
        key("governor_spend_threshold_reached", name, **tokens): 0,
    }
    assert {sample: got.get(sample) for sample in expected} == expected
    end = rpd.window.bounds(round(clock() * 1000))[1]  # type: ignore[union-attr]
    for labels in (requests, acme, tokens):
        resets = got[key("governor_spend_resets_in_seconds", name, **labels)]
        assert resets == pytest.approx((end - server_time_ms(sync_client)) / 1000, abs=5), labels
    spend_series = {
        metric
        for metric, labels in got
        if metric.startswith("governor_spend_") and dict(labels).get("budget") in ("rpd", "tpd")
    }
    assert not any(metric.endswith("_dollars") for metric in spend_series), spend_series
    assert set(metrics.SPEND_UNITS) == set(UNITS)  # every unit a budget can count is exported


def test_unreadable_rate_limit_headers_are_counted(make_gov: MakeGov, name: str) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    labels = {"governor": name, "header": "x-ratelimit-remaining-tokens"}
    before = REGISTRY.get_sample_value("governor_malformed_headers_total", labels) or 0
    gov.report(Outcome.SUCCESS, headers={"x-ratelimit-remaining-tokens": "n/a"})
    gov.report(Outcome.SUCCESS, headers={"X-RateLimit-Remaining-Tokens": "1e3x"})
    assert REGISTRY.get_sample_value("governor_malformed_headers_total", labels) == before + 2


def test_decisions_are_counted_incrementally_and_in_bounded_pages(
    make_gov: MakeGov, sync_client: Any, clock: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_PAGE", 3)
    monkeypatch.setattr(metrics, "EVENTS_PER_SCRAPE", 6)
    gov = make_gov(GovernorConfig(max_capacity=8), clock=clock)
    for n in range(1, 10):
        gov.set_max_capacity(n)
    collector = GovernorCollector(sync_client, [name])
    first = collect(collector)
    assert first[key("governor_decisions_total", name, kind="create")] == 1
    assert first[key("governor_decisions_total", name, kind="set_max")] == 5  # 6 read in this scrape
    assert collect(collector)[key("governor_decisions_total", name, kind="set_max")] == 9  # the rest
    gov.pause("x")
    third = collect(collector)
    assert third[key("governor_decisions_total", name, kind="set_max")] == 9
    assert third[key("governor_decisions_total", name, kind="pause")] == 1
    assert third[key("governor_paused", name)] == 1
    info = key("governor_info", name, policy="adaptive", pause_kind="operator", reason="x", schema=str(SCHEMA_VERSION))
    assert third[info] == 1  # the reason label is the status's pause_reason


def test_a_missing_governor_is_down_and_not_created(sync_client: Any, name: str) -> None:
    got = collect(GovernorCollector(sync_client, [name]))
    assert got[key("governor_up", name)] == 0
    assert key("governor_capacity", name) not in got
    assert sync_client.exists(*governor_keys(name).keys) == 0


def test_all_mode_follows_governors_as_they_come_and_go(make_gov: MakeGov, sync_client: Any, name: str) -> None:
    collector = GovernorCollector(sync_client)
    assert key("governor_up", name) not in collect(collector)
    gov = make_gov(GovernorConfig(max_capacity=3))
    gov.status()
    got = collect(collector)
    assert got[key("governor_up", name)] == 1 and got[key("governor_max_capacity", name)] == 3
    sync_client.delete(*gov.keys.keys)
    assert key("governor_up", name) not in collect(collector)


def test_invalid_names_are_refused(sync_client: Any) -> None:
    with pytest.raises(ConfigError):
        GovernorCollector(sync_client, ["no spaces allowed"])
    for top in (-1, 1001, 2.5, True):
        with pytest.raises(ConfigError, match="top_tenants"):
            GovernorCollector(sync_client, ["ok"], top_tenants=top)  # type: ignore[arg-type]


#: long TTLs: the injected clock moves by whole seconds and nobody refreshes
SLOW = {"lease_ttl": 600.0, "queue_ttl": 600.0, "poll": 1.0, "restart_hold": False}


def join(gov: Governor, priority: str | None, tenant: str | None, wait: bool) -> None:
    """A caller of this class and tenant: granted at once (``wait`` False) or queued."""
    reply = gov._execute(gov._core.acquire(new_id(), gov._core.ask("h/1", priority=priority, tenant=tenant), wait=wait))
    assert isinstance(reply, Queued if wait else Granted)


def test_collector_counts_per_class_and_tenant_with_a_bounded_tenant_label(
    make_gov: MakeGov, sync_client: Any, name: str
) -> None:
    clock = FakeClock(server_time_ms(sync_client) / 1000 - 1)  # live by the server's clock
    config = GovernorConfig(max_capacity=4, policy="fixed", aging=5.0, tenant_weights={"t0": 5}, **SLOW)
    gov = make_gov(config, clock=clock)
    # in flight: t0 interactive, t0 default, t1 batch, t2 batch; queued: t3 batch (aged), t0, t4, t5 default
    for priority, tenant in (("interactive", "t0"), (None, "t0"), ("batch", "t1"), ("batch", "t2")):
        join(gov, priority, tenant, wait=False)
    join(gov, "batch", "t3", wait=True)
    clock.advance(6)
    for tenant in ("t0", "t4", "t5"):
        join(gov, None, tenant, wait=True)
    got = collect(GovernorCollector(sync_client, [name], top_tenants=2))
    for priority, (in_flight, queued, aged) in {
        "interactive": (1, 0, 0),
        "default": (1, 3, 0),
        "batch": (2, 1, 1),
    }.items():
        assert got[key("governor_priority_in_flight", name, priority=priority)] == in_flight, priority
        assert got[key("governor_priority_queued", name, priority=priority)] == queued, priority
        assert got[key("governor_priority_aged", name, priority=priority)] == aged, priority
    # the batch waiter joined a second before the server's clock; nobody of interactive waits
    assert 0.9 < got[key("governor_priority_oldest_wait_seconds", name, priority="batch")] < 60
    assert got[key("governor_priority_oldest_wait_seconds", name, priority="interactive")] == 0
    tenants = {k[1] for k in got if k[0] == "governor_tenant_in_flight"}
    assert tenants == {
        key("", name, tenant=t)[1] for t in ("t0", "t1", views.OTHER)
    }  # the 2 most loaded, then the rest
    assert (
        got[key("governor_tenant_in_flight", name, tenant="t0")],
        got[key("governor_tenant_queued", name, tenant="t0")],
    ) == (2, 1)
    assert got[key("governor_tenant_in_flight", name, tenant="t1")] == 1  # load 1, named before t2..t5 by name
    assert got[key("governor_tenant_in_flight", name, tenant=views.OTHER)] == 1
    assert got[key("governor_tenant_queued", name, tenant=views.OTHER)] == 3
    assert got[key("governor_tenant_weight", name, tenant="t0")] == 5
    assert got[key("governor_tenant_weight", name, tenant="t1")] == 1  # the default weight
    assert key("governor_tenant_weight", name, tenant=views.OTHER) not in got
    # the sums of the bounded series are the governor's totals
    for metric, total in (("in_flight", "governor_in_flight"), ("queued", "governor_queued")):
        series = [v for k, v in got.items() if k[0] == f"governor_tenant_{metric}"]
        assert sum(series) == got[key(total, name)]
        series = [v for k, v in got.items() if k[0] == f"governor_priority_{metric}"]
        assert sum(series) == got[key(total, name)]
    assert got[key("governor_counts_complete", name)] == 1
    assert got[key("governor_decisions_total", name, kind="age")] == 1
    assert got[key("governor_aged_waiters_total", name)] == 1
    every = collect(GovernorCollector(sync_client, [name]))  # the default: 10 tenants by name
    assert {dict(k[1])["tenant"] for k in every if k[0] == "governor_tenant_queued"} == {f"t{i}" for i in range(6)}


def test_the_aged_counter_adds_every_age_decision_and_counts_are_cut_at_a_limit(
    make_gov: MakeGov, sync_client: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(server_time_ms(sync_client) / 1000 - 1)
    gov = make_gov(GovernorConfig(max_capacity=1, policy="fixed", aging=2.0, **SLOW), clock=clock)
    join(gov, None, None, wait=False)
    collector = GovernorCollector(sync_client, [name])
    for i in range(3):
        join(gov, "batch", f"b{i}", wait=True)
    clock.advance(3)
    join(gov, "interactive", None, wait=True)  # the three batch waiters age in one decision
    assert collect(collector)[key("governor_aged_waiters_total", name)] == 3
    join(gov, "default", None, wait=True)
    clock.advance(3)
    join(gov, "batch", None, wait=True)  # the default waiter ages
    got = collect(collector)
    assert got[key("governor_aged_waiters_total", name)] == 4
    assert got[key("governor_decisions_total", name, kind="age")] == 2
    assert got[key("governor_priority_aged", name, priority="batch")] == 3
    monkeypatch.setattr(views, "COUNT_LIMIT", 2)
    cut = collect(collector)
    assert cut[key("governor_counts_complete", name)] == 0
    assert sum(v for k, v in cut.items() if k[0] == "governor_priority_queued") == 2  # of 6 queued
    assert cut[key("governor_queued", name)] == 6


# -- over HTTP ---------------------------------------------------------------------------


@pytest.fixture
def serve(redis_url: str) -> Iterator[Callable[..., int]]:
    """Start exporters on free ports; each is shut down after the test."""
    servers: list[Any] = []
    clients: list[Any] = []

    def serve(names: list[str] | None, url: str = redis_url, top_tenants: int = 10) -> int:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        clients.append(client)
        server, _ = start_exporter(client, names, port=free_port(), addr="127.0.0.1", top_tenants=top_tenants)
        servers.append(server)
        return int(server.server_port)

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()
    for client in clients:
        client.close()


def test_the_exporter_listens_on_this_machine_only_unless_told(fake_server: Any) -> None:
    """Metrics name the fleet's governors and holders: by default only this
    machine reaches them (the CLI's --addr, start_exporter's addr)."""
    from governor.cli.exporter import exporter

    (addr,) = [p for p in exporter.params if p.name == "addr"]
    assert addr.default == "127.0.0.1"
    client = fakeredis.FakeRedis(server=fake_server)
    server, _ = start_exporter(client, None, port=free_port())
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def test_exporter_over_http(serve: Callable[..., int], redis_url: str, name: str, clock: Any) -> None:
    client = redis.Redis.from_url(redis_url)
    gov = Governor(client, name, GovernorConfig(max_capacity=5, resume_fraction=1.0), clock=clock)
    try:
        gov.pause("provider incident")
        port = serve([name])
        got = scrape(port)
        assert got[key("governor_up", name)] == 1
        assert got[key("governor_paused", name)] == 1
        assert got[key("governor_capacity", name)] == 0
        assert got[key("governor_decisions_total", name, kind="pause")] == 1
        assert got[("governor_exporter_scrape_duration_seconds", ())] >= 0
        gov.resume()
        got = scrape(port)
        assert got[key("governor_capacity", name)] == 5
        assert got[key("governor_decisions_total", name, kind="resume")] == 1
        every = scrape(serve(None))
        assert every[key("governor_max_capacity", name)] == 5
    finally:
        gov.close()
        client.close()


def test_exporter_over_http_per_class_and_tenant(serve: Callable[..., int], redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    # the server's clock: its leases are live
    gov = Governor(client, name, GovernorConfig(policy="fixed", max_capacity=5))
    try:
        with gov.acquire(timeout=5, priority="batch", tenant="team-x"), gov.acquire(timeout=5, tenant="team-y"):
            got = scrape(serve([name]))
            assert got[key("governor_priority_in_flight", name, priority="batch")] == 1
            assert got[key("governor_priority_in_flight", name, priority="default")] == 1
            assert got[key("governor_priority_queued", name, priority="interactive")] == 0
            assert got[key("governor_tenant_in_flight", name, tenant="team-x")] == 1
            assert got[key("governor_tenant_weight", name, tenant="team-y")] == 1
            bounded = scrape(serve([name], top_tenants=0))
            assert bounded[key("governor_tenant_in_flight", name, tenant=views.OTHER)] == 2  # no tenant by name
            assert not [k for k in bounded if k[0] == "governor_tenant_weight"]
    finally:
        gov.close()
        client.close()


def test_exporter_keeps_answering_when_redis_is_unreachable(serve: Callable[..., int], name: str) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    got = scrape(serve([name], url=closed))
    assert got[key("governor_up", name)] == 0
    every = scrape(serve(None, url=closed))
    assert not [k for k in every if k[0] == "governor_up"]
    assert ("governor_exporter_scrape_duration_seconds", ()) in every
