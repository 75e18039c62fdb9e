"""docker/grafana/dashboards/fleet-governor.json: every panel's query asks for what is really exported.

The queries are parsed with a PromQL parser (promql-parser); each metric
they select, each label they match, group by or match on, and each label
their legends print is checked against a real scrape: ``governor
exporter``'s /metrics over HTTP for governors on a private Redis, set up
so that every kind of series appears (classes, tenants, budgets, a pause,
a hold, waiters), plus the clients' histogram of this process's registry
after real admissions.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from governor import Governor, GovernorConfig, Outcome, Tokens
from governor.metrics import start_exporter
from governor.policies import FixedPolicy

from .support.servers import RedisServer, wait_until

promql = pytest.importorskip("promql_parser", reason="promql-parser reads the dashboard's queries")

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docker/grafana/dashboards/fleet-governor.json"
#: Grafana's variables, as Grafana would put them in before the query reaches Prometheus
VARIABLES = {"$__rate_interval": "1m", "$governor": ".*"}
Exported = dict[str, set[str]]  # sample name -> its label names


def queries() -> list[tuple[str, str, str]]:
    """(panel title, query with Grafana's variables put in, legend) of every panel's target."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            out.append((panel["title"], expr, target.get("legendFormat", "")))
    return out


def walk(node: Any, selectors: list[tuple[str, set[str]]], grouped: list[set[str]]) -> set[str]:
    """Collect each selector (metric, labels matched) and each label list used to group or
    match under ``node``; returns the labels its result may carry."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        labels = {m.name for m in node.matchers.matchers}
        selectors.append((node.name, labels))
        return {"*" + node.name}  # its labels: whatever the metric carries
    if kind == "MatrixSelector":
        return walk(node.vector_selector, selectors, grouped)
    if kind == "Call":
        found: set[str] = set()
        for arg in node.args:
            found |= walk(arg, selectors, grouped)
        return found
    if kind == "AggregateExpr":
        inner = walk(node.expr, selectors, grouped)
        if node.param is not None:
            walk(node.param, selectors, grouped)
        labels = set(node.modifier.labels) if node.modifier is not None else set()
        grouped.append(labels)
        by = node.modifier is not None and str(node.modifier.type).endswith("By")
        return labels if by else inner
    if kind == "BinaryExpr":
        found = walk(node.lhs, selectors, grouped) | walk(node.rhs, selectors, grouped)
        if node.modifier is not None and node.modifier.matching is not None:
            grouped.append(set(node.modifier.matching.labels))
        return found
    if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        return walk(node.expr, selectors, grouped)
    return set()  # a number or a string


def parse_query(expr: str) -> tuple[list[tuple[str, set[str]]], list[set[str]], set[str]]:
    selectors: list[tuple[str, set[str]]] = []
    grouped: list[set[str]] = []
    result = walk(promql.parse(expr), selectors, grouped)
    return selectors, grouped, result


@pytest.fixture(scope="module")
def exported() -> Iterator[Exported]:
    """What a real exporter and a real client serve for a fleet that shows every kind of series."""
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    govs: list[Governor] = []
    exporter: Any = None
    try:

        def make(name: str, **config: Any) -> Governor:
            gov = Governor(client, name, GovernorConfig(policy=FixedPolicy(), **config))
            gov.resume(lift_recovery_hold=True)  # a new Redis: no holders from before to wait for
            govs.append(gov)
            return gov

        chat = make("chat", max_capacity=1, priorities=("high", "low"), default_priority="low")
        held = chat.acquire(timeout=5, priority="high", tenant="acme")
        waiter = Governor(client, "chat", chat.config)
        govs.append(waiter)
        got: list[Any] = []
        thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30, tenant="zeta")))
        thread.start()
        wait_until(lambda: chat.status().queued == 1, 10, what="a waiter")
        embed = make("embed", max_capacity=4, tokens_per_minute=6000)
        with embed.acquire(timeout=5, tokens=Tokens(100)) as lease:
            embed.report(Outcome.RATE_LIMITED, retry_after=30, lease=lease)  # a hold, in the decision log
        make("batch", max_capacity=2).pause("maintenance")
        exporter, _ = start_exporter(client, port=0)
        port = exporter.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        text += prometheus_client.generate_latest().decode()  # this process's clients: the wait histogram
        out: Exported = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
        yield out
        held.release()
        thread.join(30)
        for lease in got:
            lease.release()
    finally:
        if exporter is not None:
            exporter.shutdown()
            exporter.server_close()
        for gov in govs:
            gov.close()
        client.close()
        server.cleanup()


def test_the_dashboard_has_the_panels_the_operators_need() -> None:
    titles = {title for title, _, _ in queries()}
    for needed in ("Capacity, in flight", "wait p50 / p99 by class", "429s", "Holds", "Budgets remaining",
                   "time until full", "Per-tenant share"):  # fmt: skip
        assert any(needed in title for title in titles), needed


@pytest.mark.parametrize("title, expr, legend", queries(), ids=lambda v: str(v)[:40])
def test_every_query_names_exported_metrics_and_labels(exported: Exported, title: str, expr: str, legend: str) -> None:
    selectors, grouped, result = parse_query(expr)
    assert selectors, f"{title}: {expr} selects no metric"
    carried: set[str] = set()
    for metric, labels in selectors:
        assert metric in exported, f"{title}: {metric} is not exported (exported: {sorted(exported)})"
        assert labels <= exported[metric], f"{title}: {metric} has no label {labels - exported[metric]}"
        carried |= exported[metric]
    for labels in grouped:
        assert labels <= carried, f"{title}: grouped or matched on {labels - carried}, which no selected metric has"
    legend_labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    # what the result carries: the by() labels of an outer aggregation, else the selected metrics' labels
    shown = {label for r in result for label in (exported[r[1:]] if r.startswith("*") else {r})}
    assert legend_labels <= shown, f"{title}: the legend prints {legend_labels - shown}, which the result lacks"


def test_the_checks_catch_a_wrong_name_or_label(exported: Exported) -> None:
    """The parse sees through functions, aggregations and vector matching."""
    selectors, grouped, result = parse_query(
        'histogram_quantile(0.5, sum by (le, tenant) (rate(governor_admission_wait_seconds_bucket{x="1"}[1m])))'
    )
    assert selectors == [("governor_admission_wait_seconds_bucket", {"x"})]
    assert grouped == [{"le", "tenant"}] and result == {"le", "tenant"}
    assert "tenant" not in exported["governor_admission_wait_seconds_bucket"]
    assert "governor_budget_levels" not in exported and "budget" in exported["governor_budget_level"]
