"""Fixtures shared by the whole suite.

Every behavioural test runs on a real Redis (a private ``redis-server``
started for the session, or ``REDIS_URL`` when set) and again on fakeredis
with its Lua extra, each with ``decode_responses`` off and on. Governor
names are unique per test. Policy time comes from an injected clock.
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from governor import AsyncGovernor, Governor, GovernorConfig

from .faultkit import Processes
from .servers import RedisServer


class FakeClock:
    """An injected clock: seconds that move only when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis for the session: REDIS_URL, or a private redis-server.

    A governor created on a Redis younger than its lease TTL holds new
    admissions (holders from before a restart may still run), so a private
    server is handed out once it is older than the default TTL, as a
    fleet's Redis would be."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = RedisServer().start()
    try:
        server.wait_older_than(GovernorConfig().lease_ttl)
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A redis-server of the test's own, to stop, pause, flush or restart."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def fake_server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


BACKENDS = [
    pytest.param(("redis", False), id="redis"),
    pytest.param(("redis", True), id="redis-decoded"),
    pytest.param(("fakeredis", False), id="fakeredis"),
    pytest.param(("fakeredis", True), id="fakeredis-decoded"),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def sync_client(backend: tuple[str, bool], redis_url: str, fake_server: fakeredis.FakeServer) -> Iterator[Any]:
    kind, decode = backend
    if kind == "redis":
        client: Any = redis.Redis.from_url(redis_url, decode_responses=decode, socket_timeout=10)
    else:
        client = fakeredis.FakeRedis(server=fake_server, decode_responses=decode)
    yield client
    client.close()


@pytest.fixture
async def async_client(
    backend: tuple[str, bool], redis_url: str, fake_server: fakeredis.FakeServer
) -> AsyncIterator[Any]:
    kind, decode = backend
    if kind == "redis":
        client: Any = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode, socket_timeout=10)
    else:
        client = fakeredis.FakeAsyncRedis(server=fake_server, decode_responses=decode)
    yield client
    await client.aclose()


@pytest.fixture
def control(redis_url: str) -> Iterator[redis.Redis]:
    """The fault tests' control Redis: workers report there, no fault touches it."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def events(control: redis.Redis) -> Iterator[str]:
    """The control-Redis list a test's workers push their events to."""
    key = f"events:{uuid.uuid4().hex}"
    yield key
    control.delete(key)


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Worker processes of a fault test, all ended at teardown."""
    procs = Processes()
    yield procs
    procs.end_all()


@pytest.fixture
def name() -> str:
    """A governor name no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def governors(client: Any, name: str) -> Iterator[Callable[..., Governor]]:
    """The body of a fixture that makes governors on ``client`` (under
    ``name`` unless told otherwise) and closes them after the test."""
    made: list[Governor] = []

    def make(config: GovernorConfig | None = None, clock: Any = None, governor_name: str | None = None) -> Governor:
        gov = Governor(client, governor_name or name, config or GovernorConfig(), clock=clock)
        made.append(gov)
        return gov

    yield make
    for gov in made:
        gov.close()


@pytest.fixture
def make_gov(sync_client: Any, name: str) -> Iterator[Callable[..., Governor]]:
    """Governors on the parametrised sync client, closed after the test."""
    yield from governors(sync_client, name)


@pytest.fixture
async def make_agov(async_client: Any, name: str) -> AsyncIterator[Callable[..., AsyncGovernor]]:
    """Governors on the parametrised asyncio client, closed after the test."""
    made: list[AsyncGovernor] = []

    def make(
        config: GovernorConfig | None = None, clock: Any = None, governor_name: str | None = None
    ) -> AsyncGovernor:
        gov = AsyncGovernor(async_client, governor_name or name, config or GovernorConfig(), clock=clock)
        made.append(gov)
        return gov

    yield make
    for gov in made:
        await gov.aclose()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """The samples a Prometheus exporter on ``port`` serves, parsed with the
    Prometheus client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
