"""governor.telemetry: OpenTelemetry spans and metrics, read back from the SDK's in-memory exporters.

The governors run on the session's real Redis; the governed OpenAI client
calls the real HTTP provider of tests/test_transport.py. Spans go to an
InMemorySpanExporter (a SimpleSpanProcessor: exported when they end),
metrics to an InMemoryMetricReader (collected when the test reads them).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from governor import AcquireTimeout, Governor, GovernorConfig, Outcome, events, telemetry
from governor.providers import openai_client

from .support.servers import wait_until
from .test_transport import FAST, MESSAGES, OPENAI_LIMITS, Provider, chat_ok, openai_429


class Otel:
    """A tracer and a meter provider of the SDK, with in-memory exporters."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = telemetry.instrument(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def finished(self, name: str) -> list[Any]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, point) of every data point of ``metric``."""
        data = self.reader.get_metrics_data()
        out = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    if found.name == metric:
                        out.extend((dict(p.attributes), p) for p in found.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    made = Otel()
    yield made
    telemetry.uninstrument()


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(redis_url)
    yield made
    made.close()


@pytest.fixture
def gov(client: redis.Redis, name: str) -> Iterator[Governor]:
    made = Governor(client, name, GovernorConfig(max_capacity=1, priorities=("high", "low"), default_priority="low"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Provider]:
    provider = Provider().start()
    yield provider
    provider.stop()


def test_an_acquisition_admitted_at_once_is_one_span_and_one_wait(otel: Otel, gov: Governor, name: str) -> None:
    with gov.acquire(holder="host-1/a", tokens=120, priority="low", tenant="acme") as lease:
        pass
    (span,) = otel.finished("fleet_governor.acquire")
    assert span.attributes == {
        "fleet_governor.governor": name,
        "fleet_governor.priority": "low",
        "fleet_governor.tenant": "acme",
        "fleet_governor.holder": "host-1/a",
        "fleet_governor.tokens.reserved": 120,
        "fleet_governor.outcome": "admitted",
        "fleet_governor.fence": lease.fence,
    }
    assert span.status.status_code is StatusCode.UNSET
    ((labels, point),) = otel.points("fleet_governor.acquire.duration")
    assert labels == {
        "fleet_governor.governor": name,
        "fleet_governor.priority": "low",
        "fleet_governor.outcome": "admitted",
    }
    assert point.count == 1
    ((labels, point),) = otel.points("fleet_governor.tokens.reserved")
    assert (labels, point.value) == ({"fleet_governor.governor": name, "fleet_governor.tenant": "acme"}, 120)


def test_a_queued_acquisition_carries_its_place_and_reason(otel: Otel, gov: Governor) -> None:
    first = gov.acquire()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(gov.acquire(timeout=20)))
    waiter.start()
    wait_until(lambda: gov.status().queued == 1, 10, what="the second caller queued")
    first.release()
    waiter.join(20)
    got[0].release()
    spans = otel.finished("fleet_governor.acquire")
    assert "fleet_governor.queue.position" not in spans[0].attributes
    assert spans[1].attributes["fleet_governor.queue.position"] == 0
    assert spans[1].attributes["fleet_governor.wait.reason"] == "at capacity: 1 in flight of 1"
    assert spans[1].attributes["fleet_governor.fence"] == got[0].fence
    assert not spans[1].events  # capacity is not a hold


def test_a_timeout_is_an_error_span_and_a_timeout_wait(otel: Otel, gov: Governor, name: str) -> None:
    gov.pause("maintenance")
    with pytest.raises(AcquireTimeout):
        gov.acquire(timeout=0.2, priority="high")
    (span,) = otel.finished("fleet_governor.acquire")
    assert span.attributes["fleet_governor.outcome"] == "timeout"
    assert span.attributes["fleet_governor.wait.reason"] == "paused: maintenance"
    assert [e.name for e in span.events] == ["fleet_governor.hold"]
    assert span.status.status_code is StatusCode.ERROR
    assert "fleet_governor.fence" not in span.attributes
    ((labels, _),) = otel.points("fleet_governor.acquire.duration")
    assert labels["fleet_governor.outcome"] == "timeout" and labels["fleet_governor.priority"] == "high"


def test_the_place_and_reason_are_the_ones_on_entry_and_each_hold_is_an_event(otel: Otel) -> None:
    """A wait whose reason changes (capacity, then a pause, then capacity again):
    the span keeps the first place and reason; the pause is one hold event."""
    for event in (
        events.AcquireStarted("g", "batch", "t", 10, "h"),
        events.Waiting("g", "at capacity: 2 in flight of 2", 3),
        events.Waiting("g", "at capacity: 2 in flight of 2", 2),  # the same reason again: nothing new
        events.Waiting("g", "paused: deploy", 1),
        events.Waiting("g", "at capacity: 2 in flight of 2", 0),
        events.Admitted("g", 1.5, False, 42),
    ):
        events.emit(event)
    (span,) = otel.finished("fleet_governor.acquire")
    assert span.attributes["fleet_governor.queue.position"] == 3
    assert span.attributes["fleet_governor.wait.reason"] == "at capacity: 2 in flight of 2"
    assert [(e.name, dict(e.attributes)) for e in span.events] == [
        ("fleet_governor.hold", {"fleet_governor.wait.reason": "paused: deploy"})
    ]


def test_a_caller_held_by_the_fleet_gets_a_hold_event(otel: Otel, gov: Governor) -> None:
    gov.report(Outcome.RATE_LIMITED, retry_after=0.3)  # another host's 429: the fleet holds 0.3 s
    gov.acquire(timeout=10).release()
    (span,) = otel.finished("fleet_governor.acquire")
    assert span.attributes["fleet_governor.wait.reason"].startswith("holding until the provider's retry-after")
    (hold,) = span.events
    assert hold.name == "fleet_governor.hold"
    assert hold.attributes["fleet_governor.wait.reason"] == span.attributes["fleet_governor.wait.reason"]
    assert span.attributes["fleet_governor.outcome"] == "admitted"


def test_a_governed_client_links_its_calls_and_records_retries_and_holds(
    otel: Otel, gov: Governor, server: Provider, name: str
) -> None:
    server.reset()
    server.script(openai_429({**OPENAI_LIMITS, "retry-after-ms": "30"}), chat_ok(13, 7))
    tracer = otel.tracer_provider.get_tracer("app")
    with (
        tracer.start_as_current_span("agent step") as step,
        openai_client(governor=gov, retry=FAST, base_url=f"{server.url}/v1", api_key="test") as oai,
    ):
        oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    acquires = otel.finished("fleet_governor.acquire")
    calls = otel.finished("fleet_governor.call")
    assert len(acquires) == len(calls) == 2
    for acquired, call in zip(acquires, calls, strict=True):
        assert [link.context.span_id for link in call.links] == [acquired.context.span_id]
        assert call.attributes["fleet_governor.fence"] == acquired.attributes["fleet_governor.fence"]
        assert call.parent.span_id == acquired.parent.span_id == step.get_span_context().span_id
    assert [c.attributes["fleet_governor.outcome"] for c in calls] == ["rate_limited", "success"]
    assert [c.attributes["fleet_governor.attempt"] for c in calls] == [1, 2]
    (hold,) = calls[0].events
    assert hold.name == "fleet_governor.hold" and hold.attributes["fleet_governor.hold.seconds"] == pytest.approx(0.03)
    assert not calls[1].events
    (outer,) = otel.finished("agent step")
    (retry,) = outer.events
    assert retry.name == "fleet_governor.retry" and retry.attributes["fleet_governor.attempt"] == 1
    reports = {p[0]["fleet_governor.outcome"]: p[1].value for p in otel.points("fleet_governor.reports")}
    assert reports == {"rate_limited": 1, "success": 1}
    settled = {p[0]["fleet_governor.token.type"]: p[1].value for p in otel.points("fleet_governor.tokens.settled")}
    assert settled == {"input": 13, "output": 7}
    assert [p[1].value for p in otel.points("fleet_governor.holds")] == [1]
    assert [p[1].value for p in otel.points("fleet_governor.retries")] == [1]


def test_the_provider_calls_spans_are_children_of_the_call_span(otel: Otel, gov: Governor) -> None:
    tracer = otel.tracer_provider.get_tracer("app")

    def provider_call() -> str:
        with tracer.start_as_current_span("chat gpt-test"):
            return "ok"

    assert gov.call(provider_call) == "ok"
    (call,) = otel.finished("fleet_governor.call")
    (inner,) = otel.finished("chat gpt-test")
    assert inner.parent.span_id == call.context.span_id
    assert call.attributes["fleet_governor.outcome"] == "success"


def test_observe_reads_the_fleet_from_redis(otel: Otel, client: redis.Redis, gov: Governor, name: str) -> None:
    other = Governor(client, f"{name}-b", GovernorConfig(max_capacity=5))
    try:
        other.status()
        lease = gov.acquire(priority="high")
        otel.telemetry.observe(client, [name, f"{name}-b"])
        ceilings = {p[0]["fleet_governor.governor"]: p[1].value for p in otel.points("fleet_governor.capacity.max")}
        assert ceilings == {name: 1, f"{name}-b": 5}
        in_flight = {
            (p[0]["fleet_governor.governor"], p[0]["fleet_governor.priority"]): p[1].value
            for p in otel.points("fleet_governor.in_flight")
        }
        assert in_flight[(name, "high")] == 1 and in_flight[(name, "low")] == 0
        lease.release()
        gov.pause("drain")
        paused = {p[0]["fleet_governor.governor"]: p[1].value for p in otel.points("fleet_governor.paused")}
        assert paused == {name: 1, f"{name}-b": 0}
    finally:
        other.close()


def test_without_opentelemetry_nothing_is_imported_and_instrument_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"  # as if it were not installed
        "import governor, governor.events\n"
        "assert not any(m.startswith('opentelemetry') and sys.modules[m] for m in sys.modules)\n"
        "assert 'governor.telemetry' not in sys.modules\n"
        "from governor import telemetry\n"
        "try:\n"
        "    telemetry.instrument()\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'fleet-governor[otel]'" in out
