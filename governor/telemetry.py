"""OpenTelemetry: a span per acquisition, the provider call's span linked to it, and metrics.

Install the ``otel`` extra (``pip install 'fleet-governor[otel]'``: the
OpenTelemetry API; an application brings its own SDK and exporters) and
call :func:`instrument` once. Nothing else in the library imports this
module or OpenTelemetry: without :func:`instrument` nothing is recorded.

It listens to the facades' events (:mod:`governor.events`), so it sees the
callers of this process; :meth:`Telemetry.observe` adds what Redis holds
for the whole fleet (capacity, in flight, queue, budgets), read at each
collection. OpenTelemetry has no convention for waiting on a rate limit,
so the names are the project's own, under ``fleet_governor.``; each is
listed in docs/operating.md.

Spans (tracer ``fleet_governor``):

* ``fleet_governor.acquire`` (INTERNAL), from ``acquire()`` to the lease or
  the failure, a child of the caller's current span. Attributes:
  ``fleet_governor.governor``, ``.priority``, ``.tenant``, ``.holder``,
  ``.tokens.reserved``, ``.queue.position`` (the waiters ahead when it
  was first queued, -1 parked at its tenant's cap; absent when admitted at
  once), ``.wait.reason`` (the admission rule's reason it first waited
  for; absent when admitted at once), ``.outcome`` (``admitted``,
  ``local``, ``timeout``, ``cancelled``, ``error``) and ``.fence``. An event
  ``fleet_governor.hold`` each time the reason it waits becomes a pause or
  a hold (``fleet_governor.wait.reason``).
* ``fleet_governor.call`` (INTERNAL), one per attempt of ``call()`` and of
  the governed clients (which go through it): the provider call runs with
  it current, so an SDK's or an HTTP library's own spans are its children;
  it links to the ``fleet_governor.acquire`` span that admitted it.
  Attributes: ``fleet_governor.governor``, ``.attempt``, ``.fence``,
  ``.outcome`` (the reported outcome, or ``handed_over`` for a stream that
  reports when it ends). An event ``fleet_governor.hold`` when its
  rate-limited report asks the fleet to hold (``fleet_governor.hold.seconds``).
* An event ``fleet_governor.retry`` (``fleet_governor.attempt``,
  ``fleet_governor.retry.wait``, seconds) on the span current around
  ``call()`` (the application's, or an SDK instrumentation's) before each retry.

Metrics (meter ``fleet_governor``; attribute ``fleet_governor.governor`` on each):
see :data:`METRICS`.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import events

SCOPE = "fleet_governor"
GOVERNOR = "fleet_governor.governor"
PRIORITY = "fleet_governor.priority"
TENANT = "fleet_governor.tenant"
OUTCOME = "fleet_governor.outcome"

#: every metric this module records: name -> (instrument, unit, what it measures)
METRICS: dict[str, tuple[str, str, str]] = {
    "fleet_governor.acquire.duration": (
        "histogram", "s", "Time a caller of this process waited for a lease, by priority and outcome",
    ),
    "fleet_governor.tokens.reserved": (
        "counter", "{token}", "Tokens the admitted leases of this process reserved from the budgets, by tenant",
    ),
    "fleet_governor.tokens.settled": (
        "counter", "{token}", "Tokens the reports of this process settled (the usage), by fleet_governor.token.type",
    ),
    "fleet_governor.reports": ("counter", "{report}", "Outcomes call() reported, by outcome"),
    "fleet_governor.holds": (
        "counter", "{hold}", "Rate-limited reports of this process that asked the fleet to hold (a Retry-After)",
    ),
    "fleet_governor.retries": ("counter", "{retry}", "Retries call() waited for"),
    "fleet_governor.capacity": ("gauge", "{lease}", "The adaptive limit now (0 while paused), from Redis"),
    "fleet_governor.capacity.max": ("gauge", "{lease}", "The configured ceiling, from Redis"),
    "fleet_governor.ceiling": (
        "gauge", "{lease}", "The in-flight level of the last pushback the policy learnt (0: unknown), from Redis",
    ),
    "fleet_governor.in_flight": ("gauge", "{lease}", "Live leases of the fleet, by priority, from Redis"),
    "fleet_governor.queue.depth": ("gauge", "{waiter}", "Live waiters of the fleet, by priority, from Redis"),
    "fleet_governor.paused": ("gauge", "1", "1 while admissions are paused, from Redis"),
    "fleet_governor.holding": ("gauge", "1", "1 while a Retry-After or recovery hold runs, from Redis"),
    "fleet_governor.budget.level": (
        "gauge", "{token}", "What a budget's bucket holds now, by fleet_governor.budget, from Redis",
    ),
    "fleet_governor.budget.reserved": (
        "gauge", "{token}", "What the leases in flight reserved from a budget, by fleet_governor.budget, from Redis",
    ),
}  # fmt: skip

#: the acquire.duration histogram's buckets: a free slot (ms) to a long pause (minutes)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: the words of the admission rule's reasons that are a pause or a hold (lua/lib/admission.lua blocked())
HOLD_WORDS = ("paused", "holding", "recovery hold")


@dataclass
class _Acquire:
    span: Any
    name: str
    priority: str
    tenant: str
    tokens: int
    reason: str = ""


@dataclass
class _Attempt:
    span: Any
    token: object
    outcome: str = ""


_acquire: contextvars.ContextVar[_Acquire | None] = contextvars.ContextVar("fleet_governor_acquire", default=None)
_admitted: contextvars.ContextVar[Any] = contextvars.ContextVar("fleet_governor_admitted", default=None)
_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("fleet_governor_attempt", default=None)


@dataclass
class _Observed:
    """What :meth:`Telemetry.observe` reads of one Redis, kept for one collection."""

    client: Any
    names: Sequence[str] | None
    prefix: str
    read: bool = False
    rows: list[tuple[Any, Any]] = field(default_factory=list)  # (Status, Breakdown) per governor


class Telemetry:
    """The OpenTelemetry subscriber to the facades' events (made by :func:`instrument`)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace

        self._trace = trace
        version = _version()
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE, version)
        self.meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE, version)
        unit = {name: spec[1] for name, spec in METRICS.items()}
        doc = {name: spec[2] for name, spec in METRICS.items()}

        def counter(name: str) -> Any:
            return self.meter.create_counter(name, unit=unit[name], description=doc[name])

        self._wait = self.meter.create_histogram(
            "fleet_governor.acquire.duration",
            unit="s",
            description=doc["fleet_governor.acquire.duration"],
            explicit_bucket_boundaries_advisory=list(WAIT_BUCKETS),
        )
        self._reserved = counter("fleet_governor.tokens.reserved")
        self._settled = counter("fleet_governor.tokens.settled")
        self._reports = counter("fleet_governor.reports")
        self._holds = counter("fleet_governor.holds")
        self._retries = counter("fleet_governor.retries")
        self._observed: list[_Observed] = []
        self._lock = threading.Lock()
        self._gauges = False
        self._served: set[str] = set()

    # -- the events ---------------------------------------------------------------------

    def __call__(self, event: events.Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _started(self, event: events.AcquireStarted) -> None:
        span = self.tracer.start_span(
            "fleet_governor.acquire",
            attributes={
                GOVERNOR: event.name,
                PRIORITY: event.priority,
                TENANT: event.tenant,
                "fleet_governor.holder": event.holder,
                "fleet_governor.tokens.reserved": event.tokens,
            },
        )
        _acquire.set(_Acquire(span, event.name, event.priority, event.tenant, event.tokens))

    def _waiting(self, event: events.Waiting) -> None:
        state = _acquire.get()
        if state is None or state.name != event.name or event.reason == state.reason:
            return
        if not state.reason:
            state.span.set_attribute("fleet_governor.queue.position", event.position)
            state.span.set_attribute("fleet_governor.wait.reason", event.reason)
        if event.reason.startswith(HOLD_WORDS):
            state.span.add_event("fleet_governor.hold", {"fleet_governor.wait.reason": event.reason})
        state.reason = event.reason

    def _ended(self, event: events.Event, outcome: str, seconds: float, fence: int | None = None) -> None:
        state = _acquire.get()
        if state is None or state.name != event.name:
            return
        _acquire.set(None)
        span = state.span
        span.set_attribute(OUTCOME, outcome)
        if fence is not None:
            span.set_attribute("fleet_governor.fence", fence)
            _admitted.set(span.get_span_context())
        if isinstance(event, events.AcquireFailed):
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{outcome}: {event.error}"))
        span.end()
        labels = {GOVERNOR: event.name, PRIORITY: state.priority, OUTCOME: outcome}
        self._wait.record(seconds, labels)
        if fence is not None and state.tokens:
            self._reserved.add(state.tokens, {GOVERNOR: event.name, TENANT: state.tenant})

    def _admitted(self, event: events.Admitted) -> None:
        self._ended(event, "local" if event.local else "admitted", event.waited_seconds, event.fence)

    def _failed(self, event: events.AcquireFailed) -> None:
        self._ended(event, event.outcome, event.waited_seconds)

    def _attempt_started(self, event: events.AttemptStarted) -> None:
        from opentelemetry import context

        admitted = _admitted.get()
        links = [self._trace.Link(admitted)] if admitted is not None else None
        span = self.tracer.start_span(
            "fleet_governor.call",
            attributes={
                GOVERNOR: event.name,
                "fleet_governor.attempt": event.attempt,
                "fleet_governor.fence": event.fence,
            },
            links=links,
        )
        _admitted.set(None)
        token = context.attach(self._trace.set_span_in_context(span))
        _attempt.set(_Attempt(span, token))

    def _reported(self, event: events.Reported) -> None:
        attempt = _attempt.get()
        labels = {GOVERNOR: event.name}
        self._reports.add(1, {**labels, OUTCOME: event.outcome})
        for kind, count in (("input", event.input_tokens), ("output", event.output_tokens)):
            if count:
                self._settled.add(count, {**labels, "fleet_governor.token.type": kind})
        if event.retry_after is not None and event.outcome == "rate_limited":
            self._holds.add(1, labels)
            if attempt is not None:
                attempt.span.add_event("fleet_governor.hold", {"fleet_governor.hold.seconds": event.retry_after})
        if attempt is not None:
            attempt.outcome = event.outcome

    def _attempt_ended(self, event: events.AttemptEnded) -> None:
        from opentelemetry import context

        attempt = _attempt.get()
        if attempt is None:
            return
        _attempt.set(None)
        try:
            context.detach(attempt.token)  # type: ignore[arg-type]
        finally:
            attempt.span.set_attribute(OUTCOME, "handed_over" if event.handed_over else attempt.outcome or "raised")
            attempt.span.end()

    def _retrying(self, event: events.Retrying) -> None:
        self._retries.add(1, {GOVERNOR: event.name})
        span = self._trace.get_current_span()
        if span.is_recording():
            span.add_event(
                "fleet_governor.retry",
                {
                    GOVERNOR: event.name,
                    "fleet_governor.attempt": event.attempt,
                    "fleet_governor.retry.wait": event.wait_seconds,
                },
            )

    # -- what Redis holds ---------------------------------------------------------------

    def observe(self, client: Any, names: Sequence[str] | None = None, *, prefix: str = "governor") -> None:
        """Record the fleet's gauges (capacity, ceiling, in flight and queue
        by class, pause, hold, budgets) of ``names`` (None: every governor
        found in the Redis) from ``client`` (a synchronous redis-py client),
        read with the read-only ``status`` at each collection of the meter's
        readers (once per collection, however many gauges ask)."""
        from .protocol import validate_name

        checked = None if names is None else [validate_name(n) for n in names]
        with self._lock:
            self._observed.append(_Observed(client, checked, prefix))
            if self._gauges:
                return
            self._gauges = True
        specs = {
            "fleet_governor.capacity": lambda s, b: [(s.capacity, {})],
            "fleet_governor.capacity.max": lambda s, b: [(s.max_capacity, {})],
            "fleet_governor.ceiling": lambda s, b: [(s.ceiling, {})],
            "fleet_governor.paused": lambda s, b: [(int(s.paused), {})],
            "fleet_governor.holding": lambda s, b: [(int(s.holding), {})],
            "fleet_governor.in_flight": lambda s, b: [(c.in_flight, {PRIORITY: p}) for p, c in b.by_class.items()],
            "fleet_governor.queue.depth": lambda s, b: [(c.queued, {PRIORITY: p}) for p, c in b.by_class.items()],
            "fleet_governor.budget.level": lambda s, b: [
                (x.level, {"fleet_governor.budget": x.kind}) for x in s.budgets
            ],
            "fleet_governor.budget.reserved": lambda s, b: [
                (x.reserved, {"fleet_governor.budget": x.kind}) for x in s.budgets
            ],
        }
        for name, values in specs.items():
            self.meter.create_observable_gauge(
                name, callbacks=[self._callback(name, values)], unit=METRICS[name][1], description=METRICS[name][2]
            )

    def _callback(self, gauge: str, values: Any) -> Any:
        from opentelemetry.metrics import Observation

        def callback(options: Any) -> Iterable[Any]:
            for status, breakdown in self._rows(gauge):
                for value, labels in values(status, breakdown):
                    yield Observation(value, {GOVERNOR: status.name, **labels})

        return callback

    def _rows(self, gauge: str) -> list[tuple[Any, Any]]:
        """Each governor's (Status, Breakdown): read again when ``gauge`` asks
        a second time (a new collection: each gauge asks once per collection)."""
        from ._sync.governor import Governor
        from .config import GovernorConfig
        from .errors import GovernorError
        from .views import list_governors, read_breakdown

        rows: list[tuple[Any, Any]] = []
        with self._lock:
            fresh = gauge in self._served or not self._served
            self._served = {gauge} if fresh else {*self._served, gauge}
            for observed in self._observed:
                if not fresh and observed.read:
                    rows.extend(observed.rows)
                    continue
                observed.rows, observed.read = [], True
                config = GovernorConfig(key_prefix=observed.prefix)
                try:
                    names = observed.names or list_governors(observed.client, observed.prefix)
                except GovernorError:
                    continue
                for name in names:
                    governor = Governor(observed.client, name, config)
                    try:
                        status = governor.status(create=False)
                        observed.rows.append((status, read_breakdown(observed.client, governor.keys)))
                    except GovernorError:  # missing or unreadable: no value this time
                        continue
                rows.extend(observed.rows)
        return rows


_HANDLERS: dict[type, Any] = {
    events.AcquireStarted: Telemetry._started,
    events.Waiting: Telemetry._waiting,
    events.Admitted: Telemetry._admitted,
    events.AcquireFailed: Telemetry._failed,
    events.AttemptStarted: Telemetry._attempt_started,
    events.Reported: Telemetry._reported,
    events.AttemptEnded: Telemetry._attempt_ended,
    events.Retrying: Telemetry._retrying,
}


def _version() -> str | None:
    """The installed distribution's version (None from a source tree that is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("fleet-governor")
    except metadata.PackageNotFoundError:
        return None


_installed: Telemetry | None = None
_install_lock = threading.Lock()


def instrument(*, tracer_provider: Any = None, meter_provider: Any = None) -> Telemetry:
    """Record the spans and metrics of every governor of this process from
    now on, with ``tracer_provider`` and ``meter_provider`` (None: the
    global ones OpenTelemetry's SDK set up). Calling it again replaces the
    providers. Raises ImportError, saying what to install, without
    OpenTelemetry's API."""
    global _installed
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "governor.telemetry needs OpenTelemetry: pip install 'fleet-governor[otel]' "
            "(and opentelemetry-sdk with an exporter to send what it records somewhere)"
        ) from error
    with _install_lock:
        if _installed is not None:
            events.unsubscribe(_installed)
        _installed = Telemetry(tracer_provider, meter_provider)
        events.subscribe(_installed)
        return _installed


def uninstrument() -> None:
    """Stop recording (the instruments already made stay with their meter)."""
    global _installed
    with _install_lock:
        if _installed is not None:
            events.unsubscribe(_installed)
            _installed = None
