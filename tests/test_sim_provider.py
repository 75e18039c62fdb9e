"""The mock LLM provider: a real HTTP server that real SDKs can call.

Each test starts its own provider on a free loopback port. Nothing waits on
a wall clock for the behaviour it checks: concurrent requests are held by a
service time far longer than the test's own work, and limit schedules are
exercised by starting the run in the past.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from governor import Outcome
from governor.classify import default_classifier
from governor.errors import ConfigError
from governor.sim.provider import LIMITED, OK, QUOTA, RATE, MockProvider, ProviderConfig, parse_schedule

BODY = {"model": "sim-1", "messages": [{"role": "user", "content": "hello there"}]}
AUTH = {"Authorization": "Bearer sk-test"}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def start(**settings: Any) -> MockProvider:
    provider = MockProvider(ProviderConfig(**settings))
    await provider.start()
    return provider


async def post(http: aiohttp.ClientSession, provider: MockProvider, body: Any = None) -> tuple[int, Any, Any]:
    async with http.post(f"{provider.url}/v1/chat/completions", json=BODY if body is None else body) as response:
        return response.status, response.headers.copy(), await response.json()


async def test_answers_in_the_chat_completions_shape(http: aiohttp.ClientSession) -> None:
    provider = await start(latency_mean=0.01, latency_sigma=0.0, completion_tokens=3)
    try:
        status, headers, body = await post(http, provider)
    finally:
        await provider.stop()
    assert status == 200
    assert headers["x-request-id"].startswith("req_")
    assert body["object"] == "chat.completion"
    assert body["model"] == "sim-1"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + 3 > 3


async def test_the_hidden_limit_is_enforced_and_excess_gets_429_with_retry_after(http: aiohttp.ClientSession) -> None:
    # Five at once against a limit of two: the service time (2 s) outlasts all the arrivals.
    provider = await start(limit=2, latency_mean=2.0, latency_sigma=0.0, reject_latency=0.0)
    try:
        tasks = [asyncio.create_task(post(http, provider)) for _ in range(5)]
        refused = []
        for task in asyncio.as_completed(tasks):
            status, headers, body = await task
            if status == 429:
                refused.append((headers, body))
            if len(refused) == 3:
                break
        assert provider.served == 2  # the two admitted are still being served
        for headers, body in refused:
            assert body["error"]["code"] == "rate_limit_exceeded"
            # auto: when a slot frees, i.e. the earliest admitted request's end (< 2 s away)
            assert 0 < int(headers["retry-after-ms"]) <= 2000
            assert headers["retry-after"] == "2"
        provider.reset()  # the admitted two are no longer recorded; stop without waiting for them
        assert provider.record.counts()[OK] == 0
    finally:
        for task in tasks:
            task.cancel()
        await provider.stop()


async def test_offered_concurrency_above_the_limit_is_recorded(http: aiohttp.ClientSession) -> None:
    provider = await start(limit=1, latency_mean=0.3, latency_sigma=0.0, reject_latency=0.05)
    try:
        results = await asyncio.gather(*(post(http, provider) for _ in range(3)))
    finally:
        await provider.stop()
    assert sorted(status for status, _, _ in results) == [200, 429, 429]
    record = provider.record
    assert record.peak_over == 2  # three inside, one allowed
    assert record.peak_served == 1
    assert 0.04 <= record.longest_over <= record.time_over
    kinds = sorted(kind for _, _, kind in record.responses)
    assert kinds == [LIMITED, LIMITED, OK]


@pytest.mark.parametrize(
    ("setting", "expected_ms"),
    [("none", None), (1.5, "1500")],
)
async def test_retry_after_is_configurable(http: aiohttp.ClientSession, setting: Any, expected_ms: str | None) -> None:
    provider = await start(limit=0, retry_after=setting, reject_latency=0.0)
    try:
        status, headers, _ = await post(http, provider)
    finally:
        await provider.stop()
    assert status == 429
    assert headers.get("retry-after-ms") == expected_ms
    assert ("retry-after" in headers) == (expected_ms is not None)


async def test_quota_is_exhausted_after_the_budget(http: aiohttp.ClientSession) -> None:
    provider = await start(quota=2, latency_mean=0.01, latency_sigma=0.0, reject_latency=0.0)
    try:
        answers = [await post(http, provider) for _ in range(4)]
    finally:
        await provider.stop()
    assert [status for status, _, _ in answers] == [200, 200, 429, 429]
    for _, headers, body in answers[2:]:
        assert body["error"]["code"] == "insufficient_quota"
        assert "retry-after" not in headers
    assert provider.record.counts()[QUOTA] == 2


async def test_requests_per_period_limit(http: aiohttp.ClientSession) -> None:
    provider = await start(rpm=2, rate_period=60.0, latency_mean=0.01, latency_sigma=0.0, reject_latency=0.0)
    try:
        answers = [await post(http, provider) for _ in range(3)]
    finally:
        await provider.stop()
    assert [status for status, _, _ in answers] == [200, 200, 429]
    headers = answers[2][1]
    assert 59_000 < int(headers["retry-after-ms"]) <= 60_000
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert provider.record.counts()[RATE] == 1


@pytest.mark.parametrize(("counts_refused", "kinds"), [(True, [LIMITED, LIMITED, RATE]), (False, [LIMITED] * 3)])
async def test_refused_requests_can_count_against_the_rate_limit(
    http: aiohttp.ClientSession, counts_refused: bool, kinds: list[str]
) -> None:
    # No capacity at all: every request is refused; whether the refusals use
    # up the request budget is what OpenAI's "unsuccessful requests count" means.
    provider = await start(limit=0, rpm=2, rate_period=60.0, rpm_counts_refused=counts_refused, reject_latency=0.0)
    try:
        answers = [await post(http, provider) for _ in range(3)]
    finally:
        await provider.stop()
    assert [status for status, _, _ in answers] == [429, 429, 429]
    assert [kind for _, _, kind in provider.record.responses] == kinds


async def test_the_schedule_changes_the_hidden_limit(http: aiohttp.ClientSession) -> None:
    provider = await start(
        limit=3, schedule=((5.0, 1), (10.0, 2)), latency_mean=1.0, latency_sigma=0.0, reject_latency=0.0
    )
    try:
        assert provider.limit == 3
        provider.reset(start_at=time.time() - 6)  # the run began 6 s ago: the first change is in force
        assert provider.limit == 1
        tasks = [asyncio.create_task(post(http, provider)) for _ in range(2)]
        status, _, _ = await next(asyncio.as_completed(tasks))
        assert status == 429  # one admitted of two
        provider.reset(start_at=time.time() - 11)
        assert provider.limit == 2
        assert provider.live()["limit"] == 2
        for task in tasks:
            task.cancel()
    finally:
        await provider.stop()
    config = provider.config
    assert [config.limit_at(t) for t in (0.0, 4.9, 5.0, 9.9, 10.0, 100.0)] == [3, 3, 1, 1, 2, 2]


async def test_the_real_openai_sdk_can_call_it() -> None:
    provider = await start(limit=1, quota=3, latency_mean=0.3, latency_sigma=0.0, reject_latency=0.0)
    client = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)
    try:
        reply = await client.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
        assert reply.usage is not None and reply.usage.total_tokens > 0
        results = await asyncio.gather(
            *(
                client.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "x"}])
                for _ in range(2)
            ),
            return_exceptions=True,
        )
        throttled = [r for r in results if isinstance(r, openai.RateLimitError)]
        assert len(throttled) == 1
        verdict = default_classifier(throttled[0])
        assert verdict.kind is Outcome.RATE_LIMITED and verdict.retry_after is not None
        await client.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.RateLimitError) as quota:  # three accepted: the budget is spent
            await client.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "x"}])
        assert default_classifier(quota.value).kind is Outcome.QUOTA_EXHAUSTED
        models = await client.models.list()
        assert [m.id for m in models.data] == ["sim-1"]
    finally:
        await client.close()
        await provider.stop()


@pytest.mark.parametrize(
    ("body", "headers", "status", "needle"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, AUTH, 400, "model"),
        ({"model": "sim-1", "messages": []}, AUTH, 400, "messages"),
        ({"model": "sim-1", "messages": "hello"}, AUTH, 400, "messages"),
        ({"model": "sim-1", "messages": [{"role": "user", "content": "x"}], "stream": True}, AUTH, 400, "stream"),
        (["not", "an", "object"], AUTH, 400, "object"),
        (BODY, {}, 401, "bearer"),
    ],
)
async def test_bad_requests_get_openai_shaped_errors(
    body: Any, headers: dict[str, str], status: int, needle: str
) -> None:
    provider = await start()
    try:
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.post(f"{provider.url}/v1/chat/completions", json=body) as response:
                got, payload = response.status, await response.json()
            async with session.post(
                f"{provider.url}/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}
            ) as response:
                garbage = response.status
    finally:
        await provider.stop()
    assert got == status
    assert needle in payload["error"]["message"].lower()
    assert garbage == (400 if headers else 401)
    assert provider.record.responses == []  # refused input is not an attempt


async def test_control_surface_resets_and_reports(http: aiohttp.ClientSession) -> None:
    provider = await start(limit=5, latency_mean=0.01, latency_sigma=0.0)
    try:
        await post(http, provider)
        async with http.get(f"{provider.url}/sim/stats") as response:
            stats = await response.json()
        assert stats["record"]["counts"][OK] == 1
        assert stats["config"]["limit"] == 5
        async with http.get(f"{provider.url}/sim/config") as response:
            assert ProviderConfig.from_json(await response.json()) == provider.config
        async with http.post(f"{provider.url}/sim/reset", json={"start_at": time.time() + 1}) as response:
            assert response.status == 200
        assert provider.record.responses == []
        async with http.post(f"{provider.url}/sim/reset", json={"start_at": "soon"}) as response:
            assert response.status == 400
            assert "start_at" in (await response.json())["error"]["message"]
        async with http.post(f"{provider.url}/sim/reset", json={"config": {"limit": -1}}) as response:
            assert response.status == 400
        async with http.post(f"{provider.url}/sim/reset", json={"config": {"limit": 7}}) as response:
            assert response.status == 200
        assert provider.config.limit == 7
        async with http.get(f"{provider.url}/sim/live") as response:
            live = await response.json()
        assert live["limit"] == 7 and live["ok"] == 0
    finally:
        await provider.stop()


@pytest.mark.parametrize(
    "settings",
    [
        {"limit": -1},
        {"limit": 1.5},
        {"latency_mean": 0},
        {"latency_sigma": -0.1},
        {"retry_after": "later"},
        {"retry_after": -1},
        {"rpm": 0},
        {"quota": -1},
        {"schedule": ((5.0, 1), (5.0, 2))},
        {"schedule": ((5.0,),)},
        {"sample_interval": 0},
        {"latency_mean": float("nan")},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ProviderConfig(**settings)


def test_schedule_text() -> None:
    assert parse_schedule("15:20, 30:40") == ((15.0, 20), (30.0, 40))
    assert parse_schedule("") == ()
    for bad in ("15", "a:b", "15:2.5"):
        with pytest.raises(ConfigError, match="SECONDS:LIMIT"):
            parse_schedule(bad)
    with pytest.raises(ConfigError, match="unknown provider setting"):
        ProviderConfig.from_json({"limit": 3, "latency": 1})


def test_the_provider_command_serves_until_stopped() -> None:
    command = [sys.executable, "-m", "governor.sim", "provider", "--port", "0", "--limit", "3"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline()  # printed once listening
            assert "hidden limit 3" in line, process.stderr.read() if process.poll() is not None else line
            url = line.split()[3].removesuffix("/v1")
            with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
                reply = client.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].finish_reason == "stop"
        finally:
            process.terminate()
            process.wait(10)


def test_the_provider_command_refuses_bad_settings() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "governor.sim", "provider", "--schedule", "soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "SECONDS:LIMIT" in done.stderr
