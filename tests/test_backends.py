"""Where the session Redis comes from: REDIS_URL, else a private
redis-server, else a testcontainers RedisContainer, else one clear failure;
and the launcher the private servers come from."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench import redis_server
from governor import Governor, GovernorConfig

from .conftest import NO_REDIS, NoRedis, choose_session_redis, docker_answers, redis_container
from .support.servers import RedisServer


def _never() -> bool:
    raise AssertionError("not asked: an earlier way was there")


def test_the_url_in_redis_url_comes_first() -> None:
    assert choose_session_redis({"REDIS_URL": "redis://elsewhere:6379/0"}, _never, _never) == "url"


def test_an_empty_redis_url_is_not_a_url() -> None:
    assert choose_session_redis({"REDIS_URL": ""}, lambda: True, _never) == "redis-server"


def test_a_private_server_comes_before_a_container() -> None:
    assert choose_session_redis({}, lambda: True, _never) == "redis-server"


def test_a_container_when_there_is_no_binary_but_docker_answers() -> None:
    assert choose_session_redis({}, lambda: False, lambda: True) == "testcontainers"


def test_without_any_of_the_three_the_error_names_them_all() -> None:
    with pytest.raises(NoRedis) as raised:
        choose_session_redis({}, lambda: False, lambda: False)
    message = str(raised.value)
    assert message == NO_REDIS
    for way in ("REDIS_URL", "redis-server", "Docker", "testcontainers"):
        assert way in message


def test_the_default_probes_find_the_binary_through_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    assert redis_server.redis_server_binary() is None
    with pytest.raises(redis_server.RedisServerMissing, match="apt-get install redis-server"):
        redis_server.RedisServer()
    if not docker_answers():
        with pytest.raises(NoRedis):
            choose_session_redis()


def test_a_test_needing_a_private_server_is_skipped_without_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="needs a private redis-server"):
        RedisServer()


@pytest.mark.skipif(not docker_answers(), reason="no Docker engine answers (DOCKER_HOST or /var/run/docker.sock)")
def test_a_testcontainers_redis_runs_the_governor() -> None:
    with redis_container() as url:
        client = redis.Redis.from_url(url, socket_timeout=10)
        try:
            assert client.ping()
        finally:
            client.close()
        gov = Governor.from_url(url, "container-check", GovernorConfig(max_capacity=2, restart_hold=False))
        try:
            gov.acquire(timeout=10).release()
            assert gov.status().in_flight == 0
        finally:
            gov.close()


def test_the_launcher_stops_pauses_and_restarts_on_the_same_port() -> None:
    with RedisServer() as server:
        port = server.port
        client = redis.Redis(port=port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
        try:
            client.set("k", "v")
            server.pause()
            with pytest.raises(redis.TimeoutError):
                client.get("k")
            server.unpause()
            server.restart()
            assert server.port == port and server.ping()
            assert redis.Redis(port=port).get("k") is None  # nothing persisted
        finally:
            client.close()
    assert not server.ping() and not server.dir.exists()
