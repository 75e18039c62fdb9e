"""Prometheus metrics: the clients' admission wait, and the exporter's view of Redis.

Two sources, because they live in different processes:

* Every client records how long each caller waited for admission in the
  histogram ``governor_admission_wait_seconds{governor,priority}`` of the
  default registry (:func:`observe_admission`, subscribed to the facades'
  :class:`governor.events.AcquireStarted` and :class:`governor.events.Admitted`
  events when this module is imported; ``priority`` is the caller's class).
  A worker publishes it with its own ``prometheus_client`` endpoint, e.g.
  ``prometheus_client.start_http_server(8000)``.
* Every client counts the rate-limit headers its reports could not read
  in ``governor_malformed_headers_total{governor,header}`` (its
  :class:`governor.events.MalformedHeaders` events; ``header`` is one of the
  provider's known header names, a bounded set).
* ``governor exporter`` serves :class:`GovernorCollector`, which reads each
  governor's state from Redis on every scrape (read-only: the ``status``
  script, the decision log, the leases and the queue), so what Prometheus
  sees is what the scripts decide on, whichever host changed it. In flight
  and queued per priority class and per tenant are counted from the leases
  and the queue (at most :data:`governor.views.COUNT_LIMIT` of each); the
  tenant label is bounded: the ``top_tenants`` most loaded by name, the
  others summed as ``tenant="(other)"``.

``prometheus_client`` is optional (the ``metrics`` extra): without it
:func:`observe_admission` does nothing, and the exporter refuses to start
with a message that says how to install it.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import events
from .errors import GovernorError

#: admission waits run from a free slot (ms) to a long pause (minutes)
ADMISSION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: at most this many decision-log entries are read per governor per scrape
EVENTS_PER_SCRAPE = 20_000
_PAGE = 1000
#: each spend budget unit (governor.spend.UNITS) and the suffix of its figures' metric names
SPEND_UNITS = {"usd": "dollars", "requests": "requests", "tokens": "tokens"}
#: tenants exported by name per governor (the most loaded: in flight + queued); the others are one series
TOP_TENANTS = 10


class _NoOp:
    def observe(self, amount: float) -> None:
        return None


_NOOP = _NoOp()
_children: dict[tuple[str, str], Any] = {}  # (governor, class) -> histogram child, or _NOOP without prometheus_client
#: the class of the acquire under way in this thread or task (its AcquireStarted event)
_class: contextvars.ContextVar[str] = contextvars.ContextVar("governor_metrics_class", default="")
_histogram: Any = None
_lock = threading.Lock()


def observe_admission(name: str, seconds: float, priority: str = "") -> None:
    """Record how long a caller of class ``priority`` waited for admission to governor ``name``.

    Called on every admission by ``acquire()`` (its Admitted event): after
    the first call per name and class it is one dict lookup and one histogram
    observation, or nothing at all when prometheus_client is not installed.
    """
    child = _children.get((name, priority))
    if child is None:
        child = _child(name, priority)
    child.observe(seconds)


def _on_event(event: events.Event) -> None:
    """The client-side metrics' subscriber to the facades' events."""
    if isinstance(event, events.AcquireStarted):
        _class.set(event.priority)
    elif isinstance(event, events.Admitted):
        observe_admission(event.name, event.waited_seconds, _class.get())
    elif isinstance(event, events.MalformedHeaders):
        for header in event.headers:
            count_malformed(event.name, header)


_malformed: Any = None


def count_malformed(name: str, header: str) -> None:
    """Count one rate-limit header of governor ``name`` that could not be read
    (nothing without prometheus_client)."""
    global _malformed
    with _lock:
        if _malformed is None:
            try:
                import prometheus_client
            except ImportError:
                _malformed = _NOOP
            else:
                _malformed = prometheus_client.Counter(
                    "governor_malformed_headers",
                    "Rate-limit headers of provider responses that could not be read (they changed nothing)",
                    ["governor", "header"],
                )
    if _malformed is not _NOOP:
        _malformed.labels(name, header).inc()


def _child(name: str, priority: str) -> Any:
    global _histogram
    with _lock:
        if (name, priority) in _children:
            return _children[name, priority]
        try:
            import prometheus_client
        except ImportError:
            _children[name, priority] = _NOOP
            return _NOOP
        if _histogram is None:
            _histogram = prometheus_client.Histogram(
                "governor_admission_wait_seconds",
                "Time callers of this process waited for a lease (queue and pauses included), by their class",
                ["governor", "priority"],
                buckets=ADMISSION_BUCKETS,
            )
        child = _histogram.labels(name, priority)
        _children[name, priority] = child
        return child


events.subscribe(_on_event)


# -- the exporter -----------------------------------------------------------------


@dataclass
class _Tracked:
    """What the collector remembers of one governor between scrapes."""

    governor: Any  #: a governor.Governor on the collector's client
    last_id: str = "0"  #: newest decision-log entry already counted
    decisions: dict[str, int] = field(default_factory=dict)  #: kind -> count since the exporter started
    aged: int = 0  #: waiters the ``age`` decisions moved ahead of every class


class GovernorCollector:
    """A Prometheus collector that reads governors from Redis on each scrape.

    ``names`` lists the governors to export; None exports every governor in
    the Redis (found with SCAN on each scrape, so new ones appear and
    vanished ones disappear). Reading never creates a governor: a named one
    that does not exist is exported as ``governor_up 0``.

    Decisions are counted from the decision log: the first scrape counts
    what the log holds, later scrapes what was appended since. A burst that
    overflows the capped log between two scrapes is not counted whole.

    ``top_tenants`` bounds the tenant label: the tenants with the most in
    flight and queued are exported by name, the others summed as
    ``tenant="(other)"`` (a name no tenant can have).
    """

    def __init__(
        self,
        client: Any,
        names: Sequence[str] | None = None,
        *,
        prefix: str = "governor",
        top_tenants: int = TOP_TENANTS,
    ) -> None:
        from .config import GovernorConfig
        from .errors import ConfigError
        from .protocol import validate_name

        if isinstance(top_tenants, bool) or not isinstance(top_tenants, int) or not 0 <= top_tenants <= 1000:
            raise ConfigError(f"top_tenants must be an integer from 0 to 1000, got {top_tenants!r}")
        self._top = top_tenants
        self._client = client
        self._names = None if names is None else [validate_name(n) for n in dict.fromkeys(names)]
        self._config = GovernorConfig(key_prefix=prefix)
        self._prefix = prefix
        self._tracked: dict[str, _Tracked] = {}
        self._lock = threading.Lock()

    def _track(self, name: str) -> _Tracked:
        tracked = self._tracked.get(name)
        if tracked is None:
            from ._sync.governor import Governor

            tracked = self._tracked[name] = _Tracked(Governor(self._client, name, self._config))
        return tracked

    def _count_decisions(self, tracked: _Tracked) -> None:
        from .views import read_events_after

        keys = tracked.governor.keys
        for _ in range(EVENTS_PER_SCRAPE // _PAGE):
            events = read_events_after(self._client, keys, tracked.last_id, _PAGE)
            for event in events:
                tracked.decisions[event.kind] = tracked.decisions.get(event.kind, 0) + 1
                if event.kind == "age":
                    moved = event.get("waiters", "0")
                    tracked.aged += int(moved) if moved.isdigit() else 0
            if events:
                tracked.last_id = events[-1].id
            if len(events) < _PAGE:
                return

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        from .config import parse_weights
        from .prices import MICROS
        from .spend import read_lines, seconds_until
        from .views import OTHER, list_governors, log_length, read_breakdown, read_config, server_time_ms

        started = time.monotonic()
        label = ["governor"]

        def gauge(metric: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(metric, doc, labels=label)

        up = gauge("governor_up", "1 if the exporter read the governor's state, 0 if it is missing or unreadable")
        g = {
            "capacity": gauge("governor_capacity", "Current adaptive limit of concurrent leases (0 while paused)"),
            "max_capacity": gauge("governor_max_capacity", "Configured ceiling of concurrent leases"),
            "in_flight": gauge("governor_in_flight", "Live leases across the fleet"),
            "queued": gauge("governor_queued", "Callers waiting in the FIFO queue"),
            "paused": gauge("governor_paused", "1 while admissions are paused"),
            "holding": gauge("governor_holding", "1 while a provider's Retry-After holds admissions"),
            "not_before": gauge(
                "governor_not_before_timestamp_seconds", "End of the Retry-After hold, Unix time (0: none)"
            ),
            "paused_until": gauge(
                "governor_paused_until_timestamp_seconds", "End of a timed operator pause, Unix time (0: none)"
            ),
            "window_rate_limited": gauge("governor_window_rate_limited", "Rate-limited attempts in the window"),
            "window_attempts": gauge("governor_window_attempts", "Reported attempts in the window"),
            "window": gauge("governor_window_seconds", "Length of the sliding window"),
            "ceiling": gauge("governor_ceiling", "Adaptive: in-flight level of the last pushback (0: unknown)"),
            "log": gauge("governor_decision_log_entries", "Entries in the capped decision log"),
        }
        quota = CounterMetricFamily(
            "governor_quota_exhausted", "Quota-exhausted reports since the governor was created", labels=label
        )
        decisions = CounterMetricFamily(
            "governor_decisions", "Decisions read from the decision log, by kind", labels=[*label, "kind"]
        )
        budget_labels = [*label, "budget", "source"]
        b = {
            "limit": GaugeMetricFamily(
                "governor_budget_limit", "A budget's limit per minute (its refill rate)", labels=budget_labels
            ),
            "burst": GaugeMetricFamily(
                "governor_budget_burst", "What a budget's bucket holds at most", labels=budget_labels
            ),
            "level": GaugeMetricFamily(
                "governor_budget_level",
                "What a budget's bucket holds now (below 0: charged beyond)",
                labels=budget_labels,
            ),
            "reserved": GaugeMetricFamily(
                "governor_budget_reserved", "What the leases in flight reserved from a budget", labels=budget_labels
            ),
        }
        priority_labels = [*label, "priority"]
        p = {
            "in_flight": GaugeMetricFamily(
                "governor_priority_in_flight", "Live leases of each priority class", labels=priority_labels
            ),
            "queued": GaugeMetricFamily(
                "governor_priority_queued",
                "Live waiters of each priority class (the aged ones too, in the class they joined)",
                labels=priority_labels,
            ),
            "aged": GaugeMetricFamily(
                "governor_priority_aged",
                "Waiters of each class that waited the aging time and went ahead of every class",
                labels=priority_labels,
            ),
        }
        oldest = GaugeMetricFamily(
            "governor_priority_oldest_wait_seconds",
            "How long the longest-waiting live waiter of each class has waited so far (0: none waiting)",
            labels=priority_labels,
        )
        tenant_labels = [*label, "tenant"]
        t = {
            "in_flight": GaugeMetricFamily(
                "governor_tenant_in_flight",
                f"Live leases of each tenant (the most loaded by name, the rest as tenant={OTHER!r})",
                labels=tenant_labels,
            ),
            "queued": GaugeMetricFamily(
                "governor_tenant_queued",
                f"Live waiters of each tenant (the most loaded by name, the rest as tenant={OTHER!r})",
                labels=tenant_labels,
            ),
        }
        weight = GaugeMetricFamily(
            "governor_tenant_weight", "The weight of each tenant exported by name (its share at capacity)",
            labels=tenant_labels,
        )  # fmt: skip
        complete = gauge(
            "governor_counts_complete",
            "1 if the counts per class and tenant read every lease and waiter, 0 if they were cut at the limit",
        )
        aged = CounterMetricFamily(
            "governor_aged_waiters",
            "Waiters that went ahead of every class after the aging time (decision log: age), since the exporter began",
            labels=label,
        )
        spend_labels = [*label, "budget", "scope", "window"]
        figures = {
            "spent": ("spent", "Spent in the spend budget's window, reservations included"),
            "reserved": ("reserved", "Reserved by calls not yet settled"),
            "limit": ("limit", "The window's limit, an operator's approval included"),
            "remaining": ("remaining", "What the window has left"),
        }
        # one family per figure and unit, the unit in the name: usd -> _dollars, requests, tokens
        s_g = {
            (unit, key): GaugeMetricFamily(
                f"governor_spend_{figure}_{SPEND_UNITS[unit]}", f"{doc} ({what})", labels=spend_labels
            )
            for unit, what in (
                ("usd", "dollars"),
                ("requests", "requests"),
                ("tokens", "tokens: input + output"),
            )
            for key, (figure, doc) in figures.items()
        }
        s_reset = GaugeMetricFamily(
            "governor_spend_resets_in_seconds",
            "Seconds until the window resets (a rolling one: until its oldest charge leaves it)",
            labels=spend_labels,
        )
        s_soft = GaugeMetricFamily(
            "governor_spend_threshold_reached",
            "1 once the window's spend reached its soft threshold (decision log: spend-threshold)",
            labels=spend_labels,
        )
        s_paused = GaugeMetricFamily(
            "governor_spend_paused",
            "1 while the scope is paused at its soft threshold until approved",
            labels=spend_labels,
        )
        info = InfoMetricFamily(
            "governor", "Policy, pause and schema of each governor", labels=[*label, "policy", "pause_kind", "reason"]
        )
        with self._lock:
            try:
                names = self._names if self._names is not None else list_governors(self._client, self._prefix)
            except GovernorError:
                names = list(self._tracked) if self._names is None else self._names
            for gone in set(self._tracked) - set(names):
                del self._tracked[gone]
            for name in names:
                tracked = self._track(name)
                try:
                    status = tracked.governor.status(create=False)
                    entries = log_length(self._client, tracked.governor.keys)
                    self._count_decisions(tracked)
                    breakdown = read_breakdown(self._client, tracked.governor.keys)
                    stored = read_config(self._client, tracked.governor.keys)
                    now_ms = server_time_ms(self._client)
                    spending = read_lines(self._client.hgetall(tracked.governor.keys.spend), now_ms)
                except GovernorError:  # missing (GovernorNotFound), unreachable or unreadable
                    up.add_metric([name], 0)
                    continue
                up.add_metric([name], 1)
                values = {
                    "capacity": status.capacity,
                    "max_capacity": status.max_capacity,
                    "in_flight": status.in_flight,
                    "queued": status.queued,
                    "paused": int(status.paused),
                    "holding": int(status.holding),
                    "not_before": status.not_before or 0,
                    "paused_until": status.paused_until or 0,
                    "window_rate_limited": status.window_rate_limited,
                    "window_attempts": status.window_attempts,
                    "window": status.window,
                    "ceiling": status.ceiling,
                    "log": entries,
                }
                for key, value in values.items():
                    g[key].add_metric([name], value)
                quota.add_metric([name], status.quota_exhausted)
                for budget in status.budgets:
                    labels = [name, budget.kind, budget.source]
                    for key in b:
                        b[key].add_metric(labels, getattr(budget, key))
                for kind, count in sorted(tracked.decisions.items()):
                    decisions.add_metric([name, kind], count)
                aged.add_metric([name], tracked.aged)
                for line in spending:
                    if line.unit not in SPEND_UNITS:  # a unit of a newer client: governor spend shows it
                        continue
                    labels = [name, line.budget, line.scope, line.window]
                    scale = MICROS if line.unit == "usd" else 1
                    for key in figures:
                        s_g[line.unit, key].add_metric(labels, getattr(line, key) / scale)
                    s_reset.add_metric(labels, 0 if line.resets_at is None else seconds_until(line.resets_at, now_ms))
                    reached = line.threshold > 0 and line.spent >= line.threshold * line.limit
                    s_soft.add_metric(labels, int(reached))
                    s_paused.add_metric(labels, int(line.paused))
                for priority, counted in breakdown.by_class.items():
                    for key in p:
                        p[key].add_metric([name, priority], getattr(counted, key))
                    oldest.add_metric([name, priority], breakdown.oldest.get(priority, 0.0))
                try:
                    weights = dict(parse_weights(stored.get("tenant_weights", "")))
                except ValueError:
                    weights = {}
                default = stored.get("default_weight", "")
                for tenant, counted in breakdown.top_tenants(self._top).items():
                    for key in t:
                        t[key].add_metric([name, tenant], getattr(counted, key))
                    share = weights.get(tenant) or (int(default) if default.isdigit() else 0)
                    if tenant != OTHER and share:
                        weight.add_metric([name, tenant], share)
                complete.add_metric([name], int(breakdown.complete))
                info.add_metric(
                    [name, status.policy, status.pause_kind, status.pause_reason], {"schema": str(status.schema)}
                )
        yield up
        yield from g.values()
        yield from b.values()
        yield from p.values()
        yield oldest
        yield from t.values()
        yield weight
        yield complete
        yield quota
        yield decisions
        yield aged
        yield from s_g.values()
        yield s_reset
        yield s_soft
        yield s_paused
        yield info
        duration = GaugeMetricFamily("governor_exporter_scrape_duration_seconds", "Time this scrape took to read Redis")
        duration.add_metric([], time.monotonic() - started)
        yield duration


def start_exporter(
    client: Any,
    names: Sequence[str] | None = None,
    *,
    port: int = 9733,
    addr: str = "127.0.0.1",
    prefix: str = "governor",
    top_tenants: int = TOP_TENANTS,
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` for ``names`` (None: every governor) on a daemon thread,
    on ``addr`` (loopback by default: this machine only; ``"0.0.0.0"`` for
    every interface, as in a container Prometheus scrapes from another).

    Returns prometheus_client's (server, thread); ``server.shutdown()``
    stops it. Raises ImportError without prometheus_client.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(GovernorCollector(client, names, prefix=prefix, top_tenants=top_tenants))
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return server, thread
