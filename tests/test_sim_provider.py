"""The mock LLM provider: a real HTTP server that real SDKs can call.

Each test starts its own provider on a free loopback port. Nothing waits on
a wall clock for the behaviour it checks: concurrent requests are held by a
service time far longer than the test's own work, and limit schedules are
exercised by starting the run in the past.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from bench.provider import (
    ABANDONED,
    CALL_TAG,
    INPUT,
    LIMITED,
    MESSAGE_TOKENS,
    OK,
    OUTPUT,
    OVERLOADED,
    QUOTA,
    RATE,
    REQUESTS,
    TOKENS,
    TOTAL,
    MockProvider,
    ProviderConfig,
    RunRecord,
    go_duration,
    parse_schedule,
    prompt_tokens,
    rfc3339,
    round_thousand,
)
from governor import Outcome
from governor.classify import default_classifier
from governor.errors import ConfigError

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
        ({"model": "sim-1", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, AUTH, 400, "stream"),
        ({"model": "sim-1", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, AUTH, 400, "max_tokens"),
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
    command = [sys.executable, "-m", "bench", "provider", "--port", "0", "--limit", "3", "--tpm", "60000",
               "--rpm", "600", "--rpm-bucket", "--burst", "0.5"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline()  # printed once listening
            assert "hidden limit 3" in line, process.stderr.read() if process.poll() is not None else line
            url = line.split()[3].removesuffix("/v1")
            with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
                raw = client.chat.completions.with_raw_response.create(
                    model="sim-1", messages=[{"role": "user", "content": "hi"}]
                )
            assert raw.parse().choices[0].finish_reason == "stop"
            assert raw.headers["x-ratelimit-limit-tokens"] == "60000"
            assert raw.headers["x-ratelimit-limit-requests"] == "600"
            assert 298 <= int(raw.headers["x-ratelimit-remaining-requests"]) <= 300  # a bucket of half of 600
        finally:
            process.terminate()
            process.wait(10)


def test_the_provider_command_refuses_bad_settings() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "provider", "--schedule", "soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "SECONDS:LIMIT" in done.stderr


# -- rate limits as buckets, tokens, headers ------------------------------------------------------

DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?$|^(\d+)ms$")
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


def duration_seconds(text: str) -> float:
    """A Go duration (what OpenAI sends as a reset) in seconds."""
    match = DURATION.match(text)
    assert match is not None and text, f"not a Go duration: {text!r}"
    hours, minutes, seconds, ms = match.groups()
    if ms is not None:
        return int(ms) / 1000
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


async def poll(condition: Any, timeout: float = 5.0, interval: float = 0.01) -> None:
    """Wait until ``condition()`` (awaited if it returns an awaitable) is true, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(interval)


def chat(content: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-1", "messages": [{"role": "user", "content": content}], **extra}


def messages_body(content: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-1", "max_tokens": 64, "messages": [{"role": "user", "content": content}], **extra}


async def post_messages(
    provider: MockProvider, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession(headers=ANTHROPIC_HEADERS if headers is None else headers) as session:
        async with session.post(f"{provider.url}/v1/messages", json=body) as response:
            return response.status, response.headers.copy(), await response.json()


def test_formats() -> None:
    assert [go_duration(s) for s in (0, 0.0004, 0.012, 1, 1.5, 8.64, 59.9999, 360, 3723.5)] == [
        "0s", "1ms", "12ms", "1s", "1.5s", "8.64s", "1m0s", "6m0s", "1h2m3.5s",
    ]  # fmt: skip
    for text in ("0s", "12ms", "1s", "6m0s", "1h2m3.5s"):
        assert duration_seconds(go_duration(duration_seconds(text))) == duration_seconds(text)
    assert rfc3339(1_700_000_000.2) == "2023-11-14T22:13:21Z"  # rounded up: full by then
    assert [round_thousand(x) for x in (0, 499, 500, 1499, 13_800, 14_500)] == [0, 0, 1000, 1000, 14_000, 15_000]
    assert prompt_tokens({"messages": [{"content": "x" * 400}]}) == 100 + MESSAGE_TOKENS
    blocks = {"messages": [{"content": [{"type": "text", "text": "y" * 40}]}], "system": "z" * 8}
    assert prompt_tokens(blocks) == 10 + MESSAGE_TOKENS + 2 + MESSAGE_TOKENS
    assert prompt_tokens({"messages": []}) == 1


async def test_the_token_estimate_is_charged_at_the_start_and_corrected_at_the_end(http: aiohttp.ClientSession) -> None:
    # 400 tokens a minute, a bucket of half that: refill is negligible during the test.
    provider = await start(tpm=400, burst=0.5, latency_mean=0.3, latency_sigma=0.0, reject_latency=0.0)
    try:
        body = chat("abcd" * 16, max_tokens=100)  # prompt 16 + 4, estimate 120
        first = asyncio.create_task(post(http, provider, body))
        await poll(lambda: provider.served == 1)
        assert provider.level(TOTAL) == pytest.approx(200 - 120, abs=1)
        status, headers, error = await post(http, provider, body)  # 80 left < 120: refused meanwhile
        assert status == 429 and error["error"]["type"] == "tokens"
        assert error["error"]["code"] == "rate_limit_exceeded"
        assert 0 < int(headers["retry-after-ms"]) <= 7000  # 40 more tokens at 400 / 60 s
        status, headers, reply = await first
        assert status == 200
        used = reply["usage"]["total_tokens"]
        assert used == 20 + 16  # the estimate became the real usage
        assert int(headers["x-ratelimit-remaining-tokens"]) in range(200 - used, 200 - used + 3)
        status, _, error = await post(http, provider, chat(max_tokens=300))  # above the bucket: never fits
        assert status == 429 and "too large" in error["error"]["message"].lower()
    finally:
        await provider.stop()
    assert provider.record.refused == {"tokens": 2}
    assert provider.record.served[0][1:] == (20, 16)
    assert [kind for _, _, kind in provider.record.responses] == [TOKENS, OK, TOKENS]


async def test_a_bucket_refills_continuously(http: aiohttp.ClientSession) -> None:
    # Four requests a second, all four at once at most: the fifth waits a quarter second.
    provider = await start(
        rpm=4, rpm_bucket=True, rate_period=1.0, burst=1.0, latency_mean=0.001, latency_sigma=0.0, reject_latency=0.0
    )
    try:
        began = time.monotonic()
        answers = [await post(http, provider) for _ in range(5)]
        assert [status for status, _, _ in answers] == [200, 200, 200, 200, 429]
        headers = answers[4][1]
        assert headers["x-ratelimit-limit-requests"] == "4"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert 0 < int(headers["retry-after-ms"]) <= 250
        assert answers[4][2]["error"]["type"] == "requests"

        async def admitted() -> bool:
            status, _, _ = await post(http, provider)
            return status == 200

        await poll(admitted, timeout=5.0, interval=0.02)
        assert time.monotonic() - began >= 0.2  # one request's worth of refill, no sooner
    finally:
        await provider.stop()
    assert provider.record.refused.get("requests", 0) >= 1
    assert provider.record.counts()[RATE] == provider.record.refused["requests"]


async def test_headers_are_consistent_remaining_falls_and_reset_shrinks(http: aiohttp.ClientSession) -> None:
    # A minute's period: between requests the refill is a token or two.
    provider = await start(
        rpm=600, rpm_bucket=True, tpm=60_000, burst=0.1, latency_mean=0.001, latency_sigma=0.0, completion_tokens=50
    )
    try:
        seen = [await post(http, provider, chat("w" * 400, max_tokens=100)) for _ in range(3)]
        for kind, capacity, rate in (("requests", 60, 10.0), ("tokens", 6000, 1000.0)):
            remaining = [int(h[f"x-ratelimit-remaining-{kind}"]) for _, h, _ in seen]
            resets = [duration_seconds(h[f"x-ratelimit-reset-{kind}"]) for _, h, _ in seen]
            assert remaining[0] > remaining[1] > remaining[2], kind
            assert resets[0] < resets[1] < resets[2], kind
            for left, reset in zip(remaining, resets, strict=True):  # reset: when the bucket is full again
                assert reset == pytest.approx((capacity - left) / rate, abs=1.5 / rate + 0.005)
            assert {h[f"x-ratelimit-limit-{kind}"] for _, h, _ in seen} == {str(capacity * 10)}
        # A request too large for the bucket is refused without a charge: its headers
        # show the bucket filling up again.
        probes: list[tuple[int, float]] = []

        async def full() -> bool:
            _, headers, _ = await post(http, provider, chat(max_tokens=7000))
            probes.append(
                (int(headers["x-ratelimit-remaining-tokens"]), duration_seconds(headers["x-ratelimit-reset-tokens"]))
            )
            return probes[-1][1] == 0

        await poll(full, timeout=5.0, interval=0.02)
        assert [left for left, _ in probes] == sorted(left for left, _ in probes)
        assert [reset for _, reset in probes] == sorted((reset for _, reset in probes), reverse=True)
        assert probes[-1][0] == 6000
    finally:
        await provider.stop()


async def test_anthropic_headers_round_token_remainders(http: aiohttp.ClientSession) -> None:
    settings = {"rpm": 50, "input_tpm": 60_000, "output_tpm": 400, "rpm_bucket": True, "latency_mean": 0.001,
                "latency_sigma": 0.0, "completion_tokens": 30}  # fmt: skip
    for rounded in (True, False):
        provider = await start(round_remaining=rounded, **settings)
        try:
            before = time.time()
            status, headers, body = await post_messages(provider, messages_body("q" * 4800))  # 1200 + 4 tokens
        finally:
            await provider.stop()
        assert status == 200 and body["usage"] == {
            "input_tokens": 1204, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        }  # fmt: skip
        assert headers["anthropic-ratelimit-requests-remaining"] == "11"  # 12 at once, never rounded
        input_left = int(headers["anthropic-ratelimit-input-tokens-remaining"])
        output_left = int(headers["anthropic-ratelimit-output-tokens-remaining"])
        if rounded:
            assert (input_left, output_left) == (14_000, 0)  # 13,796 and 70 to the nearest thousand
        else:
            # refilled meanwhile: 1,000 input and 6.7 output tokens a second (60,000 and 400 a minute)
            waited = time.time() - before
            assert 13_796 <= input_left <= 13_796 + math.ceil(waited * 1000)
            assert 70 <= output_left <= 70 + math.ceil(waited * 400 / 60)
        assert headers["anthropic-ratelimit-input-tokens-limit"] == "60000"
        # tokens-*: the most restrictive of the two (output: 70 of 100 left, input 13,796 of 15,000)
        assert headers["anthropic-ratelimit-tokens-limit"] == "400"
        for name in ("requests", "input-tokens", "output-tokens", "tokens"):
            reset = datetime.strptime(headers[f"anthropic-ratelimit-{name}-reset"], "%Y-%m-%dT%H:%M:%SZ")
            at = reset.replace(tzinfo=timezone.utc).timestamp()
            assert before <= at <= time.time() + 61
        assert "x-ratelimit-limit-requests" not in headers


async def test_anthropic_output_estimate_and_refusals(http: aiohttp.ClientSession) -> None:
    # Output tokens: max_tokens is charged at the start, the real output kept at the end.
    provider = await start(
        output_tpm=400, burst=0.5, latency_mean=0.3, latency_sigma=0.0, completion_tokens=10, reject_latency=0.0,
        round_remaining=False,
    )  # fmt: skip
    try:
        first = asyncio.create_task(post_messages(provider, messages_body(max_tokens=150)))
        await poll(lambda: provider.served == 1)
        status, headers, error = await post_messages(provider, messages_body(max_tokens=150))
        assert status == 429
        assert error == {"type": "error", "error": {"type": "rate_limit_error", "message": error["error"]["message"]}}
        assert "output tokens" in error["error"]["message"]
        assert 1 <= int(headers["retry-after"]) <= 15 and "retry-after-ms" not in headers
        assert int(headers["anthropic-ratelimit-output-tokens-remaining"]) in range(50, 53)
        status, headers, reply = await first
        assert status == 200 and reply["usage"]["output_tokens"] == 10
        assert int(headers["anthropic-ratelimit-output-tokens-remaining"]) in range(190, 193)
        assert reply["stop_reason"] == "end_turn" and reply["content"][0]["type"] == "text"
    finally:
        await provider.stop()
    assert provider.record.refused == {"output_tokens": 1}


@pytest.mark.parametrize("counts_refused", [True, False])
async def test_refused_requests_use_up_a_requests_bucket(http: aiohttp.ClientSession, counts_refused: bool) -> None:
    provider = await start(
        limit=0, rpm=3, rpm_bucket=True, burst=1.0, rpm_counts_refused=counts_refused, reject_latency=0.0
    )
    try:
        answers = [await post(http, provider) for _ in range(5)]
    finally:
        await provider.stop()
    remaining = [h["x-ratelimit-remaining-requests"] for _, h, _ in answers]
    if counts_refused:
        assert remaining == ["2", "1", "0", "0", "0"]  # each refusal took a request
        assert provider.record.refused == {"concurrency": 3, "requests": 2}
    else:
        assert remaining == ["3"] * 5
        assert provider.record.refused == {"concurrency": 5}
    assert provider.record.accepted == 0


async def test_completions_are_lognormal_capped_and_take_time_per_token(http: aiohttp.ClientSession) -> None:
    provider = await start(completion_mean=50.0, completion_sigma=1.0, latency_mean=0.001, latency_sigma=0.0, seed=7)
    try:
        answers = [await post(http, provider, chat(max_tokens=120)) for _ in range(40)]
    finally:
        await provider.stop()
    sizes = [body["usage"]["completion_tokens"] for _, _, body in answers]
    assert max(sizes) == 120 and min(sizes) < 30  # a long tail, cut at max_tokens
    for size, (_, _, body) in zip(sizes, answers, strict=True):
        assert body["choices"][0]["finish_reason"] == ("length" if size == 120 else "stop")
        assert len(body["choices"][0]["message"]["content"].split()) == size
    assert provider.record.completion_tokens == sum(sizes)
    # Latency grows with the completion: 100 tokens at 4 ms each take 0.4 s at least.
    provider = await start(completion_tokens=100, per_token_latency=0.004, latency_mean=0.001, latency_sigma=0.0)
    try:
        began = time.monotonic()
        status, _, _ = await post(http, provider)
        assert status == 200 and time.monotonic() - began >= 0.4
    finally:
        await provider.stop()


async def test_the_record_gives_token_throughput() -> None:
    record = RunRecord(started_wall=0.0, served=[(0.5, 100, 20), (0.9, 50, 5), (1.2, 10, 10), (2.9, 1, 1)])
    assert record.throughput() == [175, 20, 2]
    assert record.throughput(kind=OUTPUT, end=4.0) == [25, 10, 1, 0]
    assert record.tokens_between(0.0, 1.0, INPUT) == 150
    assert (record.prompt_tokens, record.completion_tokens) == (161, 36)
    again = RunRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again.served == record.served and again.throughput() == record.throughput()
    old = record.to_json()
    for key in ("accepted", "refused", "served", "wasted_tokens", "levels"):
        del old[key]
    assert RunRecord.from_json(old).served == []  # a record written before these fields


# -- the real SDKs, streamed and not ------------------------------------------------------------------


async def test_the_openai_sdk_sync_and_async_streamed_and_not() -> None:
    provider = await start(rpm=100, tpm=100_000, latency_mean=0.01, latency_sigma=0.0, completion_tokens=20)
    url = f"{provider.url}/v1"
    messages = [{"role": "user", "content": "x" * 40}]  # 10 + 4 tokens
    try:
        aclient = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
        raw = await aclient.chat.completions.with_raw_response.create(model="sim-1", messages=messages, max_tokens=50)
        reply = raw.parse()
        assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (14, 20)
        assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
        stream = await aclient.chat.completions.create(
            model="sim-1", messages=messages, max_tokens=50, stream=True, stream_options={"include_usage": True}
        )
        text, usage, finish = "", None, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            else:
                usage = chunk.usage
        assert text == " ".join(["ok"] * 20) and finish == "stop"
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (14, 20, 34)
        no_usage = await aclient.chat.completions.create(model="sim-1", messages=messages, stream=True)
        assert all([chunk.usage is None and chunk.choices async for chunk in no_usage])
        await aclient.close()

        def sync_calls() -> tuple[Any, Any]:
            with openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0) as client:
                reply = client.chat.completions.create(model="sim-1", messages=messages, max_tokens=5)
                chunks = list(
                    client.chat.completions.create(
                        model="sim-1", messages=messages, stream=True, stream_options={"include_usage": True}
                    )
                )
            return reply, chunks

        reply, chunks = await asyncio.to_thread(sync_calls)
        assert reply.usage.completion_tokens == 5 and reply.choices[0].finish_reason == "length"
        assert chunks[-1].usage.completion_tokens == 20 and chunks[-1].choices == []
    finally:
        await provider.stop()
    assert provider.record.accepted == 5
    assert [c for _, _, c in provider.record.served] == [20, 20, 20, 5, 20]


async def test_the_anthropic_sdk_sync_and_async_streamed_and_not() -> None:
    # A period of ten hours: the buckets hardly refill during the test.
    provider = await start(rpm=100, input_tpm=100_000, output_tpm=20_000, rate_period=36_000.0, latency_mean=0.01,
                           latency_sigma=0.0, completion_tokens=20)  # fmt: skip
    messages = [{"role": "user", "content": "x" * 40}]  # 10 + 4 tokens
    try:
        aclient = anthropic.AsyncAnthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)
        raw = await aclient.messages.with_raw_response.create(
            model="sim-1", max_tokens=64, messages=messages, system="y" * 8
        )
        reply = await raw.parse()
        assert (reply.usage.input_tokens, reply.usage.output_tokens) == (14 + 2 + 4, 20)
        assert reply.content[0].text == " ".join(["ok"] * 20) and reply.stop_reason == "end_turn"
        assert raw.headers["anthropic-ratelimit-output-tokens-limit"] == "20000"
        async with aclient.messages.stream(model="sim-1", max_tokens=64, messages=messages) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
        assert text == " ".join(["ok"] * 20)
        assert (final.usage.input_tokens, final.usage.output_tokens) == (14, 20)
        events = await aclient.messages.create(model="sim-1", max_tokens=12, messages=messages, stream=True)
        kinds = [event.type async for event in events]
        assert kinds[:2] == ["message_start", "content_block_start"]
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        await aclient.close()

        def sync_calls() -> tuple[Any, Any]:
            with anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0) as client:
                reply = client.messages.create(model="sim-1", max_tokens=5, messages=messages)
                with client.messages.stream(model="sim-1", max_tokens=64, messages=messages) as stream:
                    final = stream.get_final_message()
                models = client.models.list()
            return reply, (final, models)

        reply, (final, models) = await asyncio.to_thread(sync_calls)
        assert reply.usage.output_tokens == 5 and reply.stop_reason == "max_tokens"
        assert final.usage.output_tokens == 20
        assert [m.id for m in models.data] == ["sim-1"]
    finally:
        await provider.stop()
    assert [c for _, _, c in provider.record.served] == [20, 20, 12, 5, 20]
    assert provider.level(OUTPUT) == pytest.approx(5000 - 77, abs=2)  # every estimate corrected


async def test_an_overload_inside_a_stream() -> None:
    provider = await start(stream_error_rate=1.0, completion_tokens=40, latency_mean=0.01, latency_sigma=0.0, seed=3)
    try:
        aclient = anthropic.AsyncAnthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as raised:
            async with aclient.messages.stream(
                model="sim-1", max_tokens=64, messages=[{"role": "user", "content": "x"}]
            ) as s:
                async for _ in s.text_stream:
                    pass
        assert raised.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        assert default_classifier(raised.value).kind is Outcome.RATE_LIMITED
        await aclient.close()
        oclient = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(openai.APIError):
            async for _ in await oclient.chat.completions.create(
                model="sim-1", messages=[{"role": "user", "content": "x"}], stream=True
            ):
                pass
        await oclient.close()
    finally:
        await provider.stop()
    assert [kind for _, _, kind in provider.record.responses] == [OVERLOADED, OVERLOADED]
    assert provider.record.served == [] and provider.record.wasted_tokens >= 2 * 5


async def test_a_stream_closed_early_is_charged_what_was_sent(http: aiohttp.ClientSession) -> None:
    provider = await start(
        output_tpm=6000, completion_tokens=400, per_token_latency=0.002, stream_chunk_tokens=8, latency_mean=0.001,
        latency_sigma=0.0, round_remaining=False,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession(headers=ANTHROPIC_HEADERS) as session:
            async with session.post(
                f"{provider.url}/v1/messages", json=messages_body(max_tokens=500, stream=True)
            ) as r:
                assert r.status == 200 and r.content_type == "text/event-stream"
                assert int(r.headers["anthropic-ratelimit-output-tokens-remaining"]) in range(1000, 1003)  # 1500 - 500
                await r.content.readuntil(b"content_block_delta")
        await poll(lambda: provider.record.responses)
    finally:
        await provider.stop()
    assert [kind for _, _, kind in provider.record.responses] == [ABANDONED]
    assert provider.level(OUTPUT) > 1500 - 200  # charged what was sent, not 500
    assert provider.record.served == []


@pytest.mark.parametrize(
    ("body", "headers", "status", "kind", "needle"),
    [
        ({"model": "sim-1", "messages": [{"role": "user", "content": "x"}]}, ANTHROPIC_HEADERS, 400,
         "invalid_request_error", "max_tokens"),
        (messages_body(), {"anthropic-version": "2023-06-01"}, 401, "authentication_error", "x-api-key"),
        (messages_body(), {"x-api-key": "sk-ant-test"}, 400, "invalid_request_error", "anthropic-version"),
        (messages_body(messages=[]), ANTHROPIC_HEADERS, 400, "invalid_request_error", "messages"),
        (messages_body(system=3), ANTHROPIC_HEADERS, 400, "invalid_request_error", "system"),
    ],
)  # fmt: skip
async def test_bad_requests_get_anthropic_shaped_errors(
    body: Any, headers: dict[str, str], status: int, kind: str, needle: str
) -> None:
    provider = await start()
    try:
        got, _, payload = await post_messages(provider, body, headers)
    finally:
        await provider.stop()
    assert got == status and payload["type"] == "error" and payload["error"]["type"] == kind
    assert needle in payload["error"]["message"]
    assert provider.record.responses == []


async def test_anthropic_quota_is_a_billing_error() -> None:
    provider = await start(quota=0, reject_latency=0.0)
    try:
        client = anthropic.AsyncAnthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(model="sim-1", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        await client.close()
    finally:
        await provider.stop()
    assert default_classifier(raised.value).kind is Outcome.QUOTA_EXHAUSTED


@pytest.mark.parametrize(
    "settings",
    [{"burst": 0}, {"burst": 1.5}, {"tpm": 0}, {"input_tpm": 2.5}, {"stream_error_rate": 2}, {"completion_mean": 0},
     {"per_token_latency": -1}, {"rpm_bucket": "yes"}, {"stream_chunk_tokens": 0}, {"default_max_tokens": 0}],
)  # fmt: skip
def test_bad_rate_limit_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ProviderConfig(**settings)


def test_the_config_names_its_rate_limits() -> None:
    config = ProviderConfig(rpm=120, tpm=60_000, output_tpm=6_000, burst=0.1)
    assert config.rate_limits() == {"requests": 120, "tokens": 60_000, "output_tokens": 6_000}
    assert config.refill_rate(TOTAL) == 1000.0 and config.refill_rate(INPUT) is None
    assert config.capacity(TOTAL) == 6000.0 and config.capacity(REQUESTS) == 12.0
    assert ProviderConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


async def test_accepted_requests_carry_their_tag_into_the_record(http: aiohttp.ClientSession) -> None:
    provider = await start(limit=1, latency_mean=0.2, latency_sigma=0.0, reject_latency=0.0)
    try:
        url = f"{provider.url}/v1/chat/completions"

        async def tagged(tag: str) -> int:
            async with http.post(url, json=BODY, headers={CALL_TAG: tag}) as response:
                return response.status

        first = asyncio.create_task(tagged("a/0/0"))
        await poll(lambda: provider.served == 1)
        assert await tagged("b/0/0") == 429  # refused: no arrival recorded for it
        assert await first == 200
        assert await tagged("b/0/0") == 200  # its retry, accepted
    finally:
        await provider.stop()
    assert [tag for tag, _ in provider.record.tagged] == ["a/0/0", "b/0/0"]
    arrivals = [t for _, t in provider.record.tagged]
    assert 0 <= arrivals[0] < arrivals[1]


def test_the_provider_command_announces_realistic_limits_by_default() -> None:
    command = [sys.executable, "-m", "bench", "provider", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline()
            assert "hidden limit" in line, process.stderr.read() if process.poll() is not None else line
            url = line.split()[3].removesuffix("/v1")
            with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
                raw = client.chat.completions.with_raw_response.create(
                    model="sim-1", messages=[{"role": "user", "content": "hi"}]
                )
            assert raw.headers["x-ratelimit-limit-requests"] == "500"
            assert raw.headers["x-ratelimit-limit-tokens"] == "200000"
        finally:
            process.terminate()
            process.wait(10)


# -- the other providers' shapes ------------------------------------------------------------------


async def test_gemini_shape_refuses_with_retry_info_and_no_headers() -> None:
    provider = await start(latency_mean=0.01, latency_sigma=0.0, limit=0, retry_after=3.0)
    try:
        async with aiohttp.ClientSession(headers={"x-goog-api-key": "k"}) as session:
            body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
            async with session.post(f"{provider.url}/v1beta/models/gemini-2.5-flash:generateContent", json=body) as r:
                status, headers, error = r.status, r.headers, await r.json()
    finally:
        await provider.stop()
    assert status == 429 and error["error"]["status"] == "RESOURCE_EXHAUSTED"
    kinds = {detail["@type"].rpartition("/")[2]: detail for detail in error["error"]["details"]}
    assert kinds["google.rpc.RetryInfo"]["retryDelay"] == "3.000s"
    assert kinds["google.rpc.QuotaFailure"]["violations"][0]["quotaId"].endswith("PerMinutePerProjectPerModel")
    assert not any(name.lower().startswith(("x-ratelimit", "retry-after")) for name in headers)


async def test_gemini_per_day_quota_names_a_per_day_quota_id() -> None:
    provider = await start(latency_mean=0.01, latency_sigma=0.0, daily_quota=0)
    try:
        async with aiohttp.ClientSession(headers={"x-goog-api-key": "k"}) as session:
            body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
            async with session.post(f"{provider.url}/v1beta/models/gemini-2.5-flash:generateContent", json=body) as r:
                error = await r.json()
    finally:
        await provider.stop()
    quota = error["error"]["details"][0]["violations"][0]["quotaId"]
    assert "PerDay" in quota
    assert default_classifier_of_body(429, error).kind is Outcome.QUOTA_EXHAUSTED


def default_classifier_of_body(status: int, body: Any) -> Any:
    from governor.classify import classify_http

    return classify_http(status, {}, body)


async def test_bedrock_stream_is_event_stream_framing_botocore_reads() -> None:
    from botocore.eventstream import EventStreamBuffer

    from bench.provider import event_frame

    frame = event_frame({":event-type": "metadata", ":message-type": "event"}, b'{"usage":{"inputTokens":1}}')
    buffer = EventStreamBuffer()
    buffer.add_data(frame[:7])
    buffer.add_data(frame[7:])
    (message,) = list(buffer)
    assert message.headers[":event-type"] == "metadata"
    assert json.loads(message.payload) == {"usage": {"inputTokens": 1}}


async def test_bedrock_throttling_is_named_in_x_amzn_errortype() -> None:
    provider = await start(latency_mean=0.01, latency_sigma=0.0, limit=0)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "AWS4-HMAC-SHA256 Credential=k"}) as session:
            body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
            async with session.post(f"{provider.url}/model/amazon.nova-lite-v1:0/converse", json=body) as r:
                status, headers, error = r.status, r.headers, await r.json()
    finally:
        await provider.stop()
    assert status == 429 and headers["x-amzn-ErrorType"].startswith("ThrottlingException:")
    assert error == {"message": "Too many requests, please wait before trying again."}


async def test_azure_shape_sends_its_odd_headers_and_x_ms_retry_after_ms() -> None:
    provider = await start(latency_mean=0.01, latency_sigma=0.0, limit=0, retry_after=2.0, tpm=1000)
    try:
        async with aiohttp.ClientSession(headers={"api-key": "k"}) as session:
            url = f"{provider.url}/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
            async with session.post(url, json={"messages": [{"role": "user", "content": "hi"}]}) as r:
                status, headers = r.status, r.headers
    finally:
        await provider.stop()
    assert status == 429
    assert headers["x-ms-retry-after-ms"] == "2000"
    assert headers["x-ratelimit-limit-requests"] == "0" and headers["x-ratelimit-remaining-requests"] == "-1"
    assert headers["x-ratelimit-limit-tokens"] == "1000" and "x-ratelimit-reset-tokens" not in headers
