"""The governing proxy (governor/proxy.py): the real openai and anthropic SDKs through it.

Each test runs the official SDK, sync, async or streamed, with its base URL
on the proxy, which forwards to the benchmark's mock provider
(bench/provider.py) under a governor on a real Redis; what the governor
recorded is read back from Redis (``status()``) and what reached the
provider from the mock's record. The mock's refusals are made certain by
its settings (a requests window of 1 per 10 minutes, a limit of 0), never
by waiting on a clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from governor import Governor, GovernorConfig
from governor.cli import main
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, ConfigError
from governor.proxy import TOKEN_HEADER, ProxyConfig, Route, error_body
from governor.views import read_events
from tests.support.governing import ServedMock, ServedProxy
from tests.support.servers import wait_until

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
pytest.importorskip("aiohttp")

#: the governors' settings: a hint of the provider's is held for up to 30 s
CONFIG = GovernorConfig(max_capacity=4, retry_after_cap=30.0)
ONCE = RetryPolicy(max_attempts=1, max_retry_after=30.0)
HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def mock() -> Iterator[ServedMock]:
    served = ServedMock()
    yield served
    served.stop()


@pytest.fixture
def gov(redis_url: str, name: str) -> Iterator[Governor]:
    """The governor the proxy's routes share, created with CONFIG."""
    governor = Governor.from_url(redis_url, name, CONFIG)
    governor.status()
    yield governor
    governor.close()


def serve(redis_url: str, name: str, mock: ServedMock, **options: Any) -> ServedProxy:
    routes = (Route("openai", name, mock.url), Route("anthropic", name, mock.url))
    options.setdefault("governor", CONFIG)
    return ServedProxy(ProxyConfig(routes, port=0, **options), redis_url)


@pytest.fixture
def proxy(redis_url: str, name: str, mock: ServedMock, gov: Governor) -> Iterator[ServedProxy]:
    mock.reset()
    served = serve(redis_url, name, mock)
    yield served
    served.stop()


def oai(proxy: ServedProxy, asynchronous: bool = False, **options: Any) -> Any:
    kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return kind(base_url=f"{proxy.url}/openai/v1", api_key="sk-test", max_retries=0, **options)


def claude(proxy: ServedProxy, asynchronous: bool = False, **options: Any) -> Any:
    kind = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
    return kind(base_url=f"{proxy.url}/anthropic", api_key="sk-test", max_retries=0, **options)


def counts(gov: Governor) -> tuple[int, int, int]:
    """(attempts, rate-limited, in flight) as Redis has them."""
    s = gov.status()
    return s.window_attempts, s.window_rate_limited, s.in_flight


# -- the SDKs through the proxy ---------------------------------------------------------------------


def test_openai_sync_is_governed(proxy: ServedProxy, gov: Governor, mock: ServedMock) -> None:
    with oai(proxy) as client:
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=HI)
        models = client.models.list()  # a GET passes through ungoverned
    assert reply.usage.completion_tokens == 12
    assert models.data
    assert counts(gov) == (1, 0, 0)
    assert mock.record()["accepted"] == 1


#: a stream that lasts: 12 deltas of one token, 50 ms apart
SLOW_STREAM = {"per_token_latency": 0.05, "stream_chunk_tokens": 1}


def test_openai_stream_holds_its_lease_to_the_last_byte(proxy: ServedProxy, gov: Governor, mock: ServedMock) -> None:
    mock.reset(**SLOW_STREAM)
    with oai(proxy) as client:
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=HI, stream=True, stream_options={"include_usage": True}
        )
        first = next(iter(stream))
        assert first is not None
        assert gov.status().in_flight == 1  # mid-stream: the lease is held
        chunks = [first, *stream]
    assert chunks[-1].usage.completion_tokens == 12
    wait_until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert counts(gov) == (1, 0, 0)


async def test_openai_async_and_streamed(proxy: ServedProxy, gov: Governor) -> None:
    async with oai(proxy, asynchronous=True) as client:
        replies = await asyncio.gather(
            *(client.chat.completions.create(model="gpt-4o-mini", messages=HI) for _ in range(6))
        )
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=HI, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert all(r.usage.completion_tokens == 12 for r in replies)
    assert text
    wait_until(lambda: gov.status().in_flight == 0, 5, what="the leases released")
    assert counts(gov)[:2] == (7, 0)


def test_anthropic_sync_and_streamed(proxy: ServedProxy, gov: Governor, mock: ServedMock) -> None:
    mock.reset(**SLOW_STREAM)
    with claude(proxy) as client:
        message = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=HI) as stream:
            next(iter(stream.text_stream))
            assert gov.status().in_flight == 1
            final = stream.get_final_message()
    assert message.usage.output_tokens == 12
    assert final.usage.output_tokens == 12
    wait_until(lambda: gov.status().in_flight == 0, 5, what="the stream's lease released")
    assert counts(gov) == (2, 0, 0)


async def test_anthropic_async(proxy: ServedProxy, gov: Governor) -> None:
    async with claude(proxy, asynchronous=True) as client:
        messages = await asyncio.gather(
            *(client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI) for _ in range(5))
        )
    assert [m.usage.output_tokens for m in messages] == [12] * 5
    assert counts(gov) == (5, 0, 0)


# -- throttles held fleet-wide ----------------------------------------------------------------------


def test_a_429_through_the_proxy_holds_the_whole_fleet(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    """The provider's Retry-After becomes the governor's hold: a caller that
    never went through the proxy (another process, another host) waits too."""
    mock.reset(limit=0, retry_after=20.0)
    served = serve(redis_url, name, mock, retry=ONCE)
    try:
        start = time.time()
        with oai(served) as client, pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)
    finally:
        served.stop()
    assert caught.value.response.headers["retry-after"] == "20"  # the provider's answer, passed on
    held = gov.status().not_before
    assert held is not None and start + 19 < held <= time.time() + 20.5
    assert counts(gov) == (1, 1, 0)
    other = Governor.from_url(redis_url, name, CONFIG)
    try:
        with pytest.raises(AcquireTimeout):
            other.acquire(timeout=0.2)
    finally:
        other.close()
    assert mock.attempts() == 1


def test_a_throttle_is_retried_by_the_governor_once_per_attempt(
    redis_url: str, name: str, gov: Governor, mock: ServedMock
) -> None:
    """rpm 1: the second call is refused, held for a short hint and retried by
    the proxy's governor; the SDK retries nothing (max_retries=0) and the mock
    saw exactly the governor's attempts."""
    mock.reset(limit=0, retry_after=0.01)
    retry = RetryPolicy(max_attempts=3, base=0.001, cap=0.002, max_retry_after=0.05)
    served = serve(redis_url, name, mock, retry=retry, governor=GovernorConfig(max_capacity=4, retry_after_cap=0.05))
    try:
        with claude(served) as client, pytest.raises(anthropic.RateLimitError):
            client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
    finally:
        served.stop()
    assert mock.attempts() == 3
    assert counts(gov)[:2] == (3, 3)


# -- a used-up quota: billing, not a throttle ------------------------------------------------------


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_a_used_up_quota_passes_the_providers_error_and_tells_the_fleet(
    redis_url: str, name: str, gov: Governor, mock: ServedMock, shape: str
) -> None:
    """The provider refuses for its quota (OpenAI's 429 insufficient_quota,
    Anthropic's 400 billing error): the caller's SDK gets the provider's own
    answer, the governor records a quota exhaustion (status and the
    decision log, for every process and host to see), retries nothing, holds
    nothing and leaves the capacity alone, as it does for a governed client."""
    mock.reset(quota=0)
    before = gov.status()
    served = serve(redis_url, name, mock, retry=RetryPolicy(max_attempts=3, base=0.001, cap=0.002))
    try:
        if shape == "openai":
            with oai(served) as client, pytest.raises(openai.RateLimitError) as caught:
                client.chat.completions.create(model="gpt-4o-mini", messages=HI)
            assert caught.value.code == "insufficient_quota"
        else:
            with claude(served) as client, pytest.raises(anthropic.BadRequestError) as caught:
                client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
            assert "credit balance" in caught.value.message
    finally:
        served.stop()
    assert "fleet-governor" not in caught.value.message  # the provider's error, not the proxy's
    assert mock.attempts() == 1  # not retried: waiting does not bring a quota back
    status = gov.status()
    assert (status.quota_exhausted, status.window_rate_limited, status.in_flight) == (1, 0, 0)
    assert status.quota_at is not None
    assert status.not_before is None and not status.paused  # no hold: the fleet is told, not stopped
    assert status.capacity == before.capacity
    (event,) = read_events(gov.client, gov.keys, 1, kinds={"quota"})
    assert "quota exhausted" in event.get("why")


# -- the governor's own errors in the provider's shape ---------------------------------------------


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_no_lease_in_time_is_a_429_in_the_providers_shape(
    redis_url: str, name: str, gov: Governor, mock: ServedMock, shape: str
) -> None:
    mock.reset()
    gov.pause("maintenance")
    served = serve(redis_url, name, mock, queue_timeout=0.2)
    try:
        if shape == "openai":
            with oai(served) as client, pytest.raises(openai.RateLimitError) as caught:
                client.chat.completions.create(model="gpt-4o-mini", messages=HI)
            assert caught.value.code == "rate_limit_exceeded"
        else:
            with claude(served) as client, pytest.raises(anthropic.RateLimitError) as caught:
                client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
            assert caught.value.body["error"]["type"] == "rate_limit_error"
    finally:
        served.stop()
        gov.resume()
    assert caught.value.response.headers["retry-after"] == "1"
    assert "no slot" in caught.value.message
    assert mock.attempts() == 0


def test_an_unknown_priority_header_is_a_400(proxy: ServedProxy, mock: ServedMock) -> None:
    with oai(proxy, default_headers={"x-governor-priority": "no-such-class"}) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)
    assert "no-such-class" in caught.value.message
    assert mock.attempts() == 0


def test_redis_unreachable_is_a_503(name: str, mock: ServedMock) -> None:
    mock.reset()
    routes = (Route("anthropic", name, mock.url),)
    served = ServedProxy(
        ProxyConfig(routes, port=0, governor=GovernorConfig(redis_timeout=0.5)), "redis://127.0.0.1:9/0"
    )
    try:
        with claude(served) as client, pytest.raises(anthropic.InternalServerError) as caught:
            client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
    finally:
        served.stop()
    assert caught.value.status_code == 503
    assert caught.value.body["error"]["type"] == "api_error"
    assert mock.attempts() == 0


def test_an_unreachable_upstream_is_a_502_in_the_providers_shape(name: str, gov: Governor, redis_url: str) -> None:
    """Nothing listens upstream: the attempt is reported as an error (not a
    throttle: the fleet is not held), its lease given back, and the caller
    gets a 502 in the provider's shape."""
    from tests.support.servers import free_port

    closed = f"http://127.0.0.1:{free_port()}"
    served = ServedProxy(ProxyConfig((Route("openai", name, closed),), port=0, governor=CONFIG), redis_url)
    try:
        with oai(served) as client, pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)
    finally:
        served.stop()
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unreachable"
    assert closed in caught.value.message
    status = gov.status()
    assert (status.window_attempts, status.window_rate_limited, status.in_flight) == (1, 0, 0)
    assert status.not_before is None


def test_error_bodies_are_the_providers_shapes() -> None:
    assert error_body("openai", "quota", "m") == (
        429,
        {"error": {"message": "m", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}},
    )
    assert error_body("anthropic", "busy", "m") == (
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "m"}},
    )


# -- who may use it -----------------------------------------------------------------------------------


def test_a_token_is_required_when_one_is_set(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    mock.reset()
    token = "t" * 32
    served = serve(redis_url, name, mock, token=token)
    try:
        with oai(served) as client, pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)
        with oai(served, default_headers={TOKEN_HEADER: token}) as client:
            client.chat.completions.create(model="gpt-4o-mini", messages=HI)
    finally:
        served.stop()
    assert mock.attempts() == 1


def test_beyond_loopback_needs_a_token(name: str) -> None:
    routes = (Route("openai", name),)
    with pytest.raises(ConfigError, match="token"):
        ProxyConfig(routes, host="0.0.0.0")
    ProxyConfig(routes, host="0.0.0.0", token="s" * 16)
    ProxyConfig(routes, host="::1")
    with pytest.raises(ConfigError, match="16 characters"):
        ProxyConfig(routes, token="short")


def test_bad_routes_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="one route per shape"):
        ProxyConfig((Route("openai", name), Route("openai", name)))
    with pytest.raises(ConfigError, match="http"):
        Route("openai", name, "ftp://x")
    with pytest.raises(ConfigError, match="shape"):
        Route("gemini", name)


def test_the_command_refuses_what_it_cannot_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOVERNOR_PROXY_TOKEN", raising=False)
    runner = CliRunner()
    nothing = runner.invoke(main, ["proxy"])
    assert nothing.exit_code == 2 and "--openai NAME" in nothing.output
    open_wide = runner.invoke(main, ["proxy", "--openai", "o", "--host", "0.0.0.0"])
    assert open_wide.exit_code == 2 and "GOVERNOR_PROXY_TOKEN" in open_wide.output


@pytest.mark.timeout(300)  # a process of its own: slow to start on a busy machine
def test_the_command_serves_as_the_recipe_says(redis_url: str, name: str, gov: Governor, mock: ServedMock) -> None:
    """`governor proxy` as printed in docs/frameworks.md, in a process of its
    own, with both SDKs pointed at it by their base URLs."""
    import os
    import subprocess
    import sys

    from tests.support.servers import free_port

    mock.reset()
    port = free_port()
    governor_cli = os.path.join(os.path.dirname(sys.executable), "governor")
    args = [governor_cli, "--url", redis_url, "proxy", "--openai", name, "--anthropic", name]
    args += ["--openai-upstream", mock.url, "--anthropic-upstream", mock.url, "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "GOVERNOR_PROXY_TOKEN"}
    server = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        import httpx

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.HTTPError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                return False

        wait_until(up, 120, what="the proxy serving")
        env_openai = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/openai/v1", api_key="k", max_retries=0)
        env_anthropic = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}/anthropic", api_key="k", max_retries=0)
        with env_openai, env_anthropic:
            env_openai.chat.completions.create(model="gpt-4o-mini", messages=HI)
            env_anthropic.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=HI)
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()
    assert server.returncode == 0  # SIGTERM stops it cleanly
    assert counts(gov) == (2, 0, 0)
