"""governor.transport: every request of an SDK client under the governor.

The callers are the real ``openai`` and ``anthropic`` clients, sync and
asyncio, streamed and not, built by governor.providers over the governed
transport; the provider is a real HTTP server (:class:`Provider`, aiohttp
on a loopback port) that answers in the providers' shapes, with their
rate-limit headers and server-sent events. After each call the governor's
state in Redis tells what the transport reported: attempts and
rate-limited attempts in the window, leases left in flight (none), and the
budgets the headers created and the usage settled. The governor's clock is
a frozen FakeClock, so a budget's level moves only by reservations,
settlements and header clamps: the usage a report carried is read back
exactly from the level.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import gzip
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from aiohttp import web

from governor import AsyncGovernor, ConfigError, Governor, GovernorConfig, Outcome, Status, events, governor_keys
from governor.budgets import Tokens
from governor.config import RetryPolicy
from governor.estimate import DEFAULT_OUTPUT_TOKENS, estimate_request
from governor.headers import parse
from governor.protocol import SENTINEL, HolderRecord
from governor.providers import anthropic_client, async_anthropic_client, async_openai_client, openai_client
from governor.transport import (
    AsyncGovernedTransport,
    GovernedTransport,
    asks_for_stream,
    is_model_request,
    is_stream,
    judge_response,
    stream_outcome,
)

from .conftest import FakeClock
from .support.servers import until, wait_until

MakeGov = Callable[..., Governor]
MakeAGov = Callable[..., AsyncGovernor]

#: retries within milliseconds
FAST = RetryPolicy(max_attempts=3, deadline=20.0, base=0.005, cap=0.02, max_retry_after=0.05)
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello to the fleet"}]


# -- the provider -------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One scripted answer: JSON (``body``) or server-sent events (``events``)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    events: tuple[str, ...] | None = None
    #: after the events, keep the stream open (keep-alive comments) until the client goes away
    hold: bool = False
    #: send the JSON body gzip-compressed
    gzip: bool = False


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Provider:
    """A real HTTP server in the providers' shapes; ``script(...)`` queues answers."""

    def __init__(self) -> None:
        self._answers: collections.deque[Answer] = collections.deque()
        self._lock = threading.Lock()
        self.requests: list[Seen] = []
        self.hung_up = 0  #: held streams whose client went away
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._answers.extend(answers)

    def reset(self) -> None:
        with self._lock:
            self._answers.clear()
            self.requests.clear()
            self.hung_up = 0

    def start(self) -> Provider:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True, name="provider")
        self._thread.start()
        if not ready.wait(10) or not self.port:
            raise RuntimeError("the provider did not start")
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._setup())
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            if self._runner is not None:
                self._loop.run_until_complete(self._runner.cleanup())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _setup(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/{endpoint:.*}", self._model)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _models(self, request: web.Request) -> web.Response:
        with self._lock:
            self.requests.append(Seen(request.method, request.path, dict(request.headers), b""))
        return web.json_response(
            {"object": "list", "data": [{"id": "gpt-test", "object": "model", "created": 1, "owned_by": "x"}]}
        )

    async def _model(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        with self._lock:
            self.requests.append(Seen(request.method, request.path, dict(request.headers), body))
            answer = self._answers.popleft() if self._answers else None
        if answer is None:
            return web.json_response({"error": {"message": "script exhausted", "type": "server_error"}}, status=500)
        if answer.events is None:
            payload = json.dumps(answer.body).encode()
            headers = {"Content-Type": "application/json", **answer.headers}
            if answer.gzip:
                payload = gzip.compress(payload)
                headers["Content-Encoding"] = "gzip"
            return web.Response(status=answer.status, body=payload, headers=headers)
        response = web.StreamResponse(
            status=answer.status,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **answer.headers},
        )
        await response.prepare(request)
        try:
            for event in answer.events:
                await response.write(event.encode())
            if answer.hold:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                    await response.write(b": keep-alive\n\n")
                return response
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            with self._lock:
                self.hung_up += 1
        return response


# -- the providers' shapes ----------------------------------------------------------------------

OPENAI_LIMITS = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-limit-tokens": "200000",
    "x-ratelimit-remaining-tokens": "190000",
    "x-ratelimit-reset-tokens": "3s",
}
ANTHROPIC_LIMITS = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "70000",
    "anthropic-ratelimit-input-tokens-reset": "2030-01-01T00:00:00Z",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "15000",
    "anthropic-ratelimit-output-tokens-reset": "2030-01-01T00:00:00Z",
}


def with_remaining(headers: dict[str, str], **remaining: int) -> dict[str, str]:
    """``headers`` with some remaining figures changed (kind=value, dashes as underscores)."""
    out = dict(headers)
    for kind, value in remaining.items():
        for name in out:
            if name.endswith(f"remaining-{kind.replace('_', '-')}") or (
                name.startswith("anthropic-") and name.endswith(f"-{kind.replace('_', '-')}-remaining")
            ):
                out[name] = str(value)
    return out


def chat_ok(prompt: int = 13, completion: int = 7, headers: dict[str, str] | None = None) -> Answer:
    return Answer(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        },
        headers=OPENAI_LIMITS if headers is None else headers,
    )


def chat_stream(
    usage: tuple[int, int] | None = (13, 7), headers: dict[str, str] | None = None, hold: bool = False
) -> Answer:
    def chunk(delta: dict[str, Any], finish: str | None, with_usage: Any = None) -> str:
        body: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
            "usage": with_usage,
        }
        return f"data: {json.dumps(body)}\n\n"

    chunks = [chunk({"role": "assistant", "content": "hel"}, None), chunk({"content": "lo"}, None)]
    if hold:
        return Answer(events=tuple(chunks), headers=OPENAI_LIMITS if headers is None else headers, hold=True)
    chunks.append(chunk({}, "stop"))
    if usage is not None:
        chunks.append(
            chunk(None, None, {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)})  # type: ignore[arg-type]
        )
    chunks.append("data: [DONE]\n\n")
    return Answer(events=tuple(chunks), headers=OPENAI_LIMITS if headers is None else headers)


def openai_429(headers: dict[str, str] | None = None, code: str = "rate_limit_exceeded") -> Answer:
    return Answer(
        429,
        {"error": {"message": "Rate limit reached for tokens per min", "type": "tokens", "param": None, "code": code}},
        {**OPENAI_LIMITS, "retry-after-ms": "10"} if headers is None else headers,
    )


def message_ok(
    input_tokens: int = 21, output_tokens: int = 9, cache_read: int = 0, headers: dict[str, str] | None = None
) -> Answer:
    return Answer(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_read_input_tokens": cache_read,
            },
        },
        headers=ANTHROPIC_LIMITS if headers is None else headers,
    )


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def message_stream(
    input_tokens: int = 21, output_tokens: int = 9, error: str | None = None, hold: bool = False
) -> Answer:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        },
    }
    events = [
        sse("message_start", start),
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        sse("ping", {"type": "ping"}),
        sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hel"}},
        ),
    ]
    if error is not None:
        events.append(sse("error", {"type": "error", "error": {"type": error, "message": "Overloaded"}}))
        return Answer(events=tuple(events), headers=ANTHROPIC_LIMITS)
    if hold:
        return Answer(events=tuple(events), headers=ANTHROPIC_LIMITS, hold=True)
    events += [
        sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        ),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return Answer(events=tuple(events), headers=ANTHROPIC_LIMITS)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(
    params=[pytest.param(("redis", False), id="redis"), pytest.param(("fakeredis", True), id="fakeredis-decoded")]
)
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    """Real Redis and fakeredis, decode_responses off and on once each (the
    transport adds no reply parsing of its own)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server() -> Iterator[Provider]:
    provider = Provider().start()
    yield provider
    provider.stop()


@pytest.fixture
def provider(server: Provider) -> Provider:
    server.reset()
    return server


@pytest.fixture
def gov(make_gov: MakeGov) -> Governor:
    return make_gov(GovernorConfig(), clock=FakeClock())


@pytest.fixture
def agov(make_agov: MakeAGov) -> AsyncGovernor:
    return make_agov(GovernorConfig(), clock=FakeClock())


@pytest.fixture
def oai(gov: Governor, provider: Provider) -> Iterator[openai.OpenAI]:
    with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
        yield client


@pytest.fixture
def claude(gov: Governor, provider: Provider) -> Iterator[anthropic.Anthropic]:
    with anthropic_client(governor=gov, retry=FAST, base_url=provider.url, api_key="test") as client:
        yield client


@pytest.fixture
async def aoai(agov: AsyncGovernor, provider: Provider) -> AsyncIterator[openai.AsyncOpenAI]:
    async with async_openai_client(governor=agov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
        yield client


@pytest.fixture
async def aclaude(agov: AsyncGovernor, provider: Provider) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with async_anthropic_client(governor=agov, retry=FAST, base_url=provider.url, api_key="test") as client:
        yield client


def counts(status: Status) -> tuple[int, int, int, int]:
    """(attempts, rate-limited, in flight, quota-exhausted)"""
    return status.window_attempts, status.window_rate_limited, status.in_flight, status.quota_exhausted


def levels(status: Status) -> dict[str, tuple[int, int, float, int, str]]:
    """kind -> (limit, burst, level, reserved, source)"""
    return {b.kind: (b.limit, b.burst, b.level, b.reserved, b.source) for b in status.budgets}


def holders(client: Any, name: str) -> list[HolderRecord]:
    """The holder records in Redis (the sentinel left out)."""
    raw = client.hgetall(governor_keys(name).holders)
    records = []
    for key, value in raw.items():
        key = key.decode() if isinstance(key, bytes) else key
        if key != SENTINEL:
            record = HolderRecord.parse(value.decode() if isinstance(value, bytes) else value)
            assert record is not None
            records.append(record)
    return records


def estimate_of(seen: Seen) -> Tokens:
    return estimate_request(seen.body, seen.path)


# -- the pure parts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "governed"),
    [
        ("POST", "/v1/chat/completions", True),
        ("post", "/openai/deployments/gpt4/chat/completions", True),  # Azure's paths
        ("POST", "/v1/completions", True),
        ("POST", "/v1/responses", True),
        ("POST", "/v1/messages", True),
        ("POST", "/v1/messages/", True),
        ("POST", "/v1/embeddings", True),
        ("GET", "/v1/models", False),
        ("GET", "/v1/chat/completions", False),
        ("POST", "/v1/messages/count_tokens", False),
        ("POST", "/v1/messages/batches", False),
        ("POST", "/v1/files", False),
        ("POST", "/v1/responses/resp_1/cancel", False),
        ("POST", "/v1/mymessages", False),
    ],
)
def test_which_requests_are_governed(method: str, path: str, governed: bool) -> None:
    assert is_model_request(method, path) is governed


def test_stream_detection() -> None:
    assert asks_for_stream(b'{"model": "m", "stream": true}')
    assert not asks_for_stream(b'{"model": "m", "stream": false}')
    assert not asks_for_stream(b'{"messages": [{"content": "\\"stream\\": true"}]}')
    assert asks_for_stream(b'{"stream": true, "broken')  # not JSON: the flag is still read
    assert not asks_for_stream(b"")
    assert is_stream(200, "text/event-stream; charset=utf-8", False)
    assert is_stream(200, "text/plain", True)
    assert not is_stream(200, "application/json", True)  # a JSON answer to a streaming request is read whole
    assert not is_stream(429, "text/event-stream", True)  # errors are judged before the caller sees them


def test_judge_response() -> None:
    headers = httpx.Headers({"retry-after": "2", **OPENAI_LIMITS})
    throttled = judge_response(429, headers, json.dumps(openai_429().body).encode())
    assert (throttled.outcome, throttled.retry_after, throttled.usage) == (Outcome.RATE_LIMITED, 2.0, Tokens())
    assert throttled.headers is headers
    quota = judge_response(429, {}, json.dumps(openai_429(code="insufficient_quota").body).encode())
    assert (quota.outcome, quota.usage) == (Outcome.QUOTA_EXHAUSTED, Tokens())
    overloaded = judge_response(529, {}, b'{"type": "error", "error": {"type": "overloaded_error"}}')
    assert overloaded.outcome is Outcome.RATE_LIMITED
    assert judge_response(503, {}, None).outcome is Outcome.RATE_LIMITED
    azure = judge_response(429, {"x-ms-retry-after-ms": "1500"}, b'{"error": {"code": "429", "message": "slow"}}')
    assert (azure.outcome, azure.retry_after) == (Outcome.RATE_LIMITED, 1.5)
    assert judge_response(500, {"x-ms-retry-after-ms": "1500"}, None).retry_after is None
    assert judge_response(500, {}, b"oops").outcome is Outcome.ERROR
    assert judge_response(400, {}, None).usage == Tokens()
    ok = judge_response(200, {}, json.dumps(chat_ok().body).encode())
    assert (ok.outcome, ok.usage) == (Outcome.SUCCESS, Tokens(13, 7))
    assert judge_response(200, {}, b"not json").usage is None
    assert judge_response(200, {}, None).usage is None
    assert judge_response(307, {}, None).usage == Tokens()


def test_stream_outcome() -> None:
    from governor.streams import StreamUsage

    fine = StreamUsage()
    fine.feed(b'data: {"usage": {"prompt_tokens": 3, "completion_tokens": 4}}\n\n')
    assert stream_outcome(fine, False) == (Outcome.SUCCESS, Tokens(3, 4), "stream")
    assert stream_outcome(fine, True)[:2] == (Outcome.ERROR, Tokens(3, 4))
    refused = StreamUsage()
    refused.feed(b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error"}}\n\n')
    assert stream_outcome(refused, False)[:2] == (Outcome.RATE_LIMITED, Tokens())  # nothing said: nothing spent
    broken = StreamUsage()
    broken.feed(b'event: error\ndata: {"type": "error", "error": {"type": "api_error"}}\n\n')
    assert stream_outcome(broken, False)[:2] == (Outcome.ERROR, None)
    assert stream_outcome(StreamUsage(), False)[:2] == (Outcome.SUCCESS, None)  # unknown: the reservation stands


def test_the_constructor_checks_its_arguments(gov: Governor, agov: AsyncGovernor) -> None:
    with pytest.raises(ConfigError, match="needs a Governor"):
        GovernedTransport(agov)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a AsyncGovernor"):
        AsyncGovernedTransport(gov)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="handle_request"):
        GovernedTransport(gov, object())
    with pytest.raises(ConfigError, match="handle_async_request"):
        AsyncGovernedTransport(agov, httpx2.HTTPTransport())
    with pytest.raises(ConfigError, match="RetryPolicy"):
        GovernedTransport(gov, retry=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="holder"):
        GovernedTransport(gov, holder=7)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout"):
        GovernedTransport(gov, timeout=-1.0)
    with pytest.raises(ConfigError, match="estimate"):
        GovernedTransport(gov, estimate="4 chars a token")  # type: ignore[arg-type]


def test_a_transport_of_the_other_library_is_refused(gov: Governor, provider: Provider) -> None:
    with httpx2.Client(transport=GovernedTransport(gov, httpx.HTTPTransport())) as client:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="wraps a httpx transport but serves a httpx2 client"):
            client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES})
    assert provider.requests == []


# -- openai, sync ------------------------------------------------------------------------------


def test_openai_chat_reports_usage_and_headers(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    provider.script(chat_ok(13, 7), chat_ok(40, 25, with_remaining(OPENAI_LIMITS, tokens=199000, requests=499)))
    reply = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, max_completion_tokens=50)
    assert reply.choices[0].message.content == "hello"
    first = gov.status()
    assert counts(first) == (1, 0, 0, 0)
    # The headers made the budgets: the provider's limits, its remaining as the level.
    assert levels(first) == {
        "requests": (500, 499, 499, 0, "header"),
        "tokens": (200000, 190000, 190000, 0, "header"),
    }
    reply = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, max_completion_tokens=50)
    second = gov.status()
    assert counts(second) == (2, 0, 0, 0)
    # The second call reserved its estimate and its report settled 40 + 25: the level
    # fell by the usage, not the estimate (the frozen clock refills nothing).
    estimate = estimate_of(provider.requests[1])
    assert estimate.total != 65
    assert levels(second)["tokens"] == (200000, 199000, 190000 - 65, 0, "header")
    assert levels(second)["requests"][2] == 498
    assert all(seen.headers.get("x-stainless-retry-count") == "0" for seen in provider.requests)


def test_openai_stream_holds_its_lease_and_reports_the_usage_chunk(
    gov: Governor, oai: openai.OpenAI, provider: Provider, sync_client: Any, name: str
) -> None:
    provider.script(chat_ok(), chat_stream(usage=(30, 12), headers=with_remaining(OPENAI_LIMITS, tokens=195000)))
    oai.chat.completions.create(model="gpt-test", messages=MESSAGES)  # makes the budgets
    stream = oai.chat.completions.create(
        model="gpt-test", messages=MESSAGES, max_tokens=100, stream=True, stream_options={"include_usage": True}
    )
    first = next(iter(stream))
    assert first.choices[0].delta.content == "hel"
    estimate = estimate_of(provider.requests[1])
    during = gov.status()
    assert during.in_flight == 1
    assert levels(during)["tokens"][3] == estimate.total  # reserved, in Redis, while the stream runs
    [record] = holders(sync_client, name)
    assert (record.input, record.output) == (estimate.input, 100)
    rest = list(stream)
    assert rest[-1].usage is not None and rest[-1].usage.total_tokens == 42
    after = gov.status()
    assert counts(after) == (2, 0, 0, 0)  # reported once, at the end of the stream
    assert levels(after)["tokens"][2:4] == (190000 - 42, 0)
    assert holders(sync_client, name) == []
    stream.close()  # closing after the end reports nothing more
    assert counts(gov.status()) == (2, 0, 0, 0)


def test_a_stream_without_usage_keeps_its_reservation(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    provider.script(chat_ok(), chat_stream(usage=None, headers=with_remaining(OPENAI_LIMITS, tokens=195000)))
    oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    with oai.chat.completions.create(model="gpt-test", messages=MESSAGES, max_tokens=100, stream=True) as stream:
        list(stream)
    estimate = estimate_of(provider.requests[1])
    # No usage said: the reservation stands as spent (governor/budgets.py).
    assert levels(gov.status())["tokens"][2:4] == (190000 - estimate.total, 0)


def test_throttle_then_success_is_retried_by_the_one_loop(
    gov: Governor, oai: openai.OpenAI, provider: Provider
) -> None:
    provider.script(chat_ok(), openai_429(OPENAI_LIMITS), chat_ok(40, 25))
    oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    reply = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, max_completion_tokens=50)
    assert reply.choices[0].message.content == "hello"
    assert len(provider.requests) == 3
    assert [seen.headers.get("x-stainless-retry-count") for seen in provider.requests] == ["0", "0", "0"]
    status = gov.status()
    assert counts(status) == (
        3,
        0,
        0,
        0,
    )  # a refusal whose headers show requests and tokens left is no load signal: an attempt
    # The 429's reservation stands as spent (a provider counts refused requests unless its
    # profile says otherwise: report(refusals_count=False)); the success's usage is charged.
    refused = estimate_of(provider.requests[1]).total
    assert refused > 0
    assert levels(status)["tokens"][2] == 190000 - 65 - refused


def test_retry_after_holds_the_fleet(make_gov: MakeGov, provider: Provider) -> None:
    gov = make_gov(GovernorConfig())  # the real clock: the hold must pass
    provider.script(openai_429({"retry-after-ms": "30"}), chat_ok())
    with openai_client(governor=gov, retry=FAST, base_url=f"{provider.url}/v1", api_key="test") as client:
        started = time.monotonic()
        reply = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        took = time.monotonic() - started
    assert reply.choices[0].message.content == "hello"
    assert took >= 0.03  # the provider's wait, cut to FAST's 50 ms at most
    status = gov.status()
    assert counts(status) == (2, 1, 0, 0)
    assert status.not_before is not None


def test_throttled_to_the_end_the_sdk_raises_its_own_error(
    gov: Governor, oai: openai.OpenAI, provider: Provider
) -> None:
    provider.script(openai_429(OPENAI_LIMITS), openai_429(OPENAI_LIMITS), openai_429(OPENAI_LIMITS))
    with pytest.raises(openai.RateLimitError) as raised:
        oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert raised.value.status_code == 429
    assert len(provider.requests) == FAST.max_attempts
    assert counts(gov.status()) == (
        3,
        0,
        0,
        0,
    )  # a refusal whose headers show requests and tokens left is no load signal: an attempt


def test_sdk_retries_are_off(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    assert oai.max_retries == 0
    provider.script(Answer(500, {"error": {"message": "boom", "type": "server_error"}}))
    with pytest.raises(openai.InternalServerError):
        oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert len(provider.requests) == 1  # neither the SDK nor the governor retries a 500
    assert counts(gov.status()) == (1, 0, 0, 0)


def test_quota_exhausted_is_reported_not_retried(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    provider.script(openai_429(code="insufficient_quota"))
    with pytest.raises(openai.RateLimitError, match="Rate limit reached"):
        oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert len(provider.requests) == 1
    assert counts(gov.status()) == (0, 0, 0, 1)


def test_get_models_is_ungoverned(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    gov.pause("a governed request would wait here")
    models = oai.models.list()
    assert [model.id for model in models] == ["gpt-test"]
    assert provider.requests[0].method == "GET"
    assert counts(gov.status()) == (0, 0, 0, 0)


def test_a_malformed_header_never_raises(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    seen: list[events.Event] = []
    events.subscribe(seen.append)
    try:
        bad = {
            "x-ratelimit-limit-tokens": "lots",
            "x-ratelimit-remaining-tokens": "-1",
            "x-ratelimit-reset-tokens": "whenever",
            "x-ratelimit-remaining-requests": "9" * 40,
            "retry-after-ms": "soon",
        }
        provider.script(chat_ok(headers=bad))
        reply = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    finally:
        events.unsubscribe(seen.append)
    assert reply.choices[0].message.content == "hello"
    status = gov.status()
    assert counts(status) == (1, 0, 0, 0)
    assert status.budgets == ()  # a malformed header changes nothing
    malformed = [e for e in seen if isinstance(e, events.MalformedHeaders) and e.name == gov.name]
    assert len(malformed) == 1
    assert set(malformed[0].headers) == set(bad)


def test_an_unparseable_body_is_estimated_by_the_fallback(gov: Governor, provider: Provider) -> None:
    provider.script(chat_ok(), Answer(body={"ok": True}, headers=with_remaining(OPENAI_LIMITS, tokens=195000)))
    body = b"this is not JSON, " * 100
    with httpx2.Client(transport=GovernedTransport(gov, httpx2.HTTPTransport(), retry=FAST)) as client:
        client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES})
        response = client.post(f"{provider.url}/v1/chat/completions", content=body)
    assert response.json() == {"ok": True}
    fallback = Tokens(math.ceil(len(body) / 4), DEFAULT_OUTPUT_TOKENS)
    assert estimate_request(body) == fallback
    # An answer without usage keeps the reservation: the level fell by exactly the fallback estimate.
    assert levels(gov.status())["tokens"][2] == 190000 - fallback.total


def test_a_gzipped_answer_is_read_for_its_usage(gov: Governor, provider: Provider) -> None:
    ok = chat_ok(40, 25)
    provider.script(chat_ok(), Answer(body=ok.body, headers=with_remaining(OPENAI_LIMITS, tokens=195000), gzip=True))
    with httpx2.Client(transport=GovernedTransport(gov, retry=FAST)) as client:
        client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES})
        response = client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES})
    assert response.headers["content-encoding"] == "gzip"
    assert response.json()["usage"]["total_tokens"] == 65  # the client still decodes it
    assert levels(gov.status())["tokens"][2] == 190000 - 65


def test_a_plain_httpx_client(gov: Governor, provider: Provider) -> None:
    """The transport serves httpx clients too (older SDKs, hand-made calls), streams included."""
    provider.script(chat_ok(), chat_stream(usage=(30, 12), headers=with_remaining(OPENAI_LIMITS, tokens=195000)))
    with httpx.Client(transport=GovernedTransport(gov, retry=FAST)) as client:  # type: ignore[arg-type]
        assert client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES}).status_code == 200
        body = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        with client.stream("POST", f"{provider.url}/v1/chat/completions", json=body) as response:
            assert gov.status().in_flight == 1
            text = b"".join(response.iter_raw())
        assert b"[DONE]" in text
    status = gov.status()
    assert counts(status) == (2, 0, 0, 0)
    assert levels(status)["tokens"][2] == 190000 - 42


def test_a_stream_closed_early_leaves_no_lease(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    provider.script(chat_stream(hold=True))
    stream = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    assert next(iter(stream)).choices[0].delta.content == "hel"
    assert gov.status().in_flight == 1
    stream.close()
    status = gov.status()
    assert counts(status) == (1, 0, 0, 0)  # reported at the close, a success
    wait_until(lambda: provider.hung_up == 1, 10, what="the provider to see the client go")


def test_an_abandoned_stream_leaves_no_lease(gov: Governor, oai: openai.OpenAI, provider: Provider) -> None:
    provider.script(message_stream(hold=True))  # an Anthropic-shaped stream is served at any path
    stream = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    iterator = iter(stream)
    del iterator
    assert gov.status().in_flight == 1
    del stream
    gc.collect()
    wait_until(lambda: gov.status().in_flight == 0, 10, what="the abandoned stream's report")
    assert counts(gov.status()) == (1, 0, 0, 0)


# -- anthropic, sync ---------------------------------------------------------------------------


def test_anthropic_message_settles_input_and_output(
    gov: Governor, claude: anthropic.Anthropic, provider: Provider
) -> None:
    provider.script(
        message_ok(),
        message_ok(
            input_tokens=50,
            output_tokens=30,
            cache_read=1000,
            headers=with_remaining(ANTHROPIC_LIMITS, input_tokens=75000),
        ),
    )
    claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    first = levels(gov.status())
    assert first == {
        "requests": (50, 49, 49, 0, "header"),
        "input_tokens": (80000, 70000, 70000, 0, "header"),
        "output_tokens": (16000, 15000, 15000, 0, "header"),
    }
    reply = claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    assert reply.content[0].text == "hello"  # type: ignore[union-attr]
    after = levels(gov.status())
    # cache reads do not count toward Anthropic's input tokens per minute on current models
    assert after["input_tokens"][2] == 70000 - 50
    assert after["output_tokens"][2] == 15000 - 30


def test_anthropic_stream_reports_message_start_and_delta_usage(
    gov: Governor, claude: anthropic.Anthropic, provider: Provider
) -> None:
    provider.script(message_ok(), message_stream(input_tokens=44, output_tokens=17))
    claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    with claude.messages.stream(model="claude-test", max_tokens=64, messages=MESSAGES) as stream:
        assert gov.status().in_flight == 1
        final = stream.get_final_message()
    assert final.usage.output_tokens == 17
    after = gov.status()
    assert counts(after) == (2, 0, 0, 0)
    assert levels(after)["input_tokens"][2] == 70000 - 44
    assert levels(after)["output_tokens"][2] == 15000 - 17


def test_anthropic_overload_inside_a_stream_is_reported_as_no_load_signal(
    gov: Governor, claude: anthropic.Anthropic, provider: Provider
) -> None:
    provider.script(message_stream(error="overloaded_error"))
    stream = claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES, stream=True)
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        list(stream)
    status = gov.status()
    assert counts(status) == (1, 0, 0, 0)  # reported as an overload (no load signal), the lease released
    assert len(provider.requests) == 1  # a stream handed over is not retried


def spy_on_refusals(gov: Governor, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each rate-limited report said of ``refusals_count``, in order."""
    said: list[bool] = []
    report = gov.report

    def spy(outcome: Outcome, *args: Any, **kwargs: Any) -> Any:
        if outcome is Outcome.RATE_LIMITED:
            said.append(kwargs.get("refusals_count", True))
        return report(outcome, *args, **kwargs)

    monkeypatch.setattr(gov, "report", spy)
    return said


def test_openai_refusals_are_reported_as_counted(
    gov: Governor, oai: openai.OpenAI, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI counts a refused request against its limits (its profile): the
    transport's report of a 429 says so, and the reservation is spent."""
    said = spy_on_refusals(gov, monkeypatch)
    provider.script(openai_429(OPENAI_LIMITS), chat_ok())
    oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert said == [True]
    assert judge_response(429, {}, None).refusals_count  # no profile: counted, the cautious rule


def test_anthropic_refusals_are_reported_as_not_counted(
    gov: Governor, claude: anthropic.Anthropic, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anthropic does not count a refused request (its profile): the
    transport's report of a 429 says so, and the reservation is given back."""
    said = spy_on_refusals(gov, monkeypatch)
    refusal = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    provider.script(Answer(429, refusal, {**ANTHROPIC_LIMITS, "retry-after": "0"}), message_ok())
    claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    assert said == [False]


def test_anthropic_throttle_then_success(gov: Governor, claude: anthropic.Anthropic, provider: Provider) -> None:
    throttled = Answer(
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        {**ANTHROPIC_LIMITS, "retry-after": "0"},
    )
    # (the 529 tells what remains too: a refusal without figures would empty the budgets, which
    # this test's frozen clock never refills)
    overloaded = Answer(529, {"type": "error", "error": {"type": "overloaded_error"}}, ANTHROPIC_LIMITS)
    provider.script(throttled, overloaded, message_ok())
    reply = claude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    assert reply.usage.input_tokens == 21
    assert counts(gov.status()) == (3, 0, 0, 0)  # room left, then an overload: neither is a load signal


# -- asyncio -----------------------------------------------------------------------------------


async def test_async_openai_chat_and_stream(agov: AsyncGovernor, aoai: openai.AsyncOpenAI, provider: Provider) -> None:
    provider.script(
        chat_ok(),
        chat_ok(40, 25, with_remaining(OPENAI_LIMITS, tokens=199000)),
        chat_stream(usage=(30, 12), headers=with_remaining(OPENAI_LIMITS, tokens=199000)),
    )
    await aoai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    reply = await aoai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert reply.usage is not None and reply.usage.total_tokens == 65
    assert levels(await agov.status())["tokens"][2] == 190000 - 65
    stream = await aoai.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None
    status = await agov.status()
    assert counts(status) == (3, 0, 0, 0)
    assert levels(status)["tokens"][2] == 190000 - 65 - 42


async def test_async_throttle_then_success(agov: AsyncGovernor, aoai: openai.AsyncOpenAI, provider: Provider) -> None:
    provider.script(openai_429(OPENAI_LIMITS), chat_ok())
    reply = await aoai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert reply.choices[0].message.content == "hello"
    assert [seen.headers.get("x-stainless-retry-count") for seen in provider.requests] == ["0", "0"]
    assert counts(await agov.status()) == (
        2,
        0,
        0,
        0,
    )  # a refusal whose headers show requests and tokens left is no load signal: an attempt


async def test_async_get_models_is_ungoverned(
    agov: AsyncGovernor, aoai: openai.AsyncOpenAI, provider: Provider
) -> None:
    await agov.pause("a governed request would wait here")
    page = await aoai.models.list()
    assert [model.id for model in page.data] == ["gpt-test"]
    assert counts(await agov.status()) == (0, 0, 0, 0)


async def test_async_anthropic_message_and_stream(
    agov: AsyncGovernor, aclaude: anthropic.AsyncAnthropic, provider: Provider
) -> None:
    provider.script(message_ok(), message_ok(50, 30), message_stream(input_tokens=44, output_tokens=17))
    await aclaude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    await aclaude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    async with aclaude.messages.stream(model="claude-test", max_tokens=64, messages=MESSAGES) as stream:
        assert (await agov.status()).in_flight == 1
        final = await stream.get_final_message()
    assert final.usage.output_tokens == 17
    status = await agov.status()
    assert counts(status) == (3, 0, 0, 0)
    assert levels(status)["input_tokens"][2] == 70000 - 50 - 44
    assert levels(status)["output_tokens"][2] == 15000 - 30 - 17


async def test_async_overload_inside_a_stream(
    agov: AsyncGovernor, aclaude: anthropic.AsyncAnthropic, provider: Provider
) -> None:
    provider.script(message_stream(error="overloaded_error"))
    stream = await aclaude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES, stream=True)
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        async for _ in stream:
            pass
    assert counts(await agov.status()) == (1, 0, 0, 0)  # an overload: no load signal


async def test_async_stream_closed_early_leaves_no_lease(
    agov: AsyncGovernor, aclaude: anthropic.AsyncAnthropic, provider: Provider
) -> None:
    provider.script(message_stream(hold=True))
    stream = await aclaude.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES, stream=True)
    async for event in stream:
        if event.type == "content_block_delta":
            break
    assert (await agov.status()).in_flight == 1
    await stream.close()
    assert counts(await agov.status()) == (1, 0, 0, 0)
    await until(lambda: provider.hung_up == 1, what="the provider to see the client go")


async def test_async_abandoned_stream_leaves_no_lease(
    agov: AsyncGovernor, aoai: openai.AsyncOpenAI, provider: Provider
) -> None:
    provider.script(chat_stream(hold=True))
    stream = await aoai.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    assert (await agov.status()).in_flight == 1
    del stream
    gc.collect()

    async def released() -> bool:
        return (await agov.status()).in_flight == 0

    await until(released, what="the abandoned stream's report")
    assert counts(await agov.status()) == (1, 0, 0, 0)


async def test_async_response_dropped_unclosed_is_reported_by_the_collector(
    agov: AsyncGovernor, provider: Provider
) -> None:
    """A streamed response nobody closes: the governed stream's finalizer
    reports it as a task of the loop it was opened on."""
    provider.script(chat_stream(hold=True))
    async with httpx2.AsyncClient(transport=AsyncGovernedTransport(agov, retry=FAST)) as client:
        request = client.build_request(
            "POST", f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES, "stream": True}
        )
        response = await client.send(request, stream=True)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert (await agov.status()).in_flight == 1
        del response, request
        gc.collect()

        async def released() -> bool:
            return (await agov.status()).in_flight == 0

        await until(released, what="the collected stream's report")
    assert counts(await agov.status()) == (1, 0, 0, 0)


def test_sync_response_dropped_unclosed_is_reported_by_the_collector(gov: Governor, provider: Provider) -> None:
    provider.script(chat_stream(hold=True))
    with httpx2.Client(transport=GovernedTransport(gov, retry=FAST)) as client:
        request = client.build_request(
            "POST", f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES, "stream": True}
        )
        response = client.send(request, stream=True)
        assert gov.status().in_flight == 1
        del response, request
        gc.collect()
        wait_until(lambda: gov.status().in_flight == 0, 10, what="the collected stream's report")
    assert counts(gov.status()) == (1, 0, 0, 0)


async def test_async_unparseable_body(agov: AsyncGovernor, provider: Provider) -> None:
    provider.script(chat_ok(), Answer(body={"ok": True}, headers=with_remaining(OPENAI_LIMITS, tokens=195000)))
    body = b"\xff\xfe not json" * 50
    async with httpx2.AsyncClient(transport=AsyncGovernedTransport(agov, retry=FAST)) as client:
        await client.post(f"{provider.url}/v1/chat/completions", json={"messages": MESSAGES})
        response = await client.post(f"{provider.url}/v1/chat/completions", content=body)
    assert response.json() == {"ok": True}
    fallback = estimate_request(body)
    assert fallback == Tokens(math.ceil(len(body) / 4), DEFAULT_OUTPUT_TOKENS)
    assert levels(await agov.status())["tokens"][2] == 190000 - fallback.total


def test_headers_reported_are_the_ones_parsed() -> None:
    """What the transport hands to report() is read by governor.headers as the budgets above assume."""
    limits = parse(OPENAI_LIMITS)
    assert (limits.budgets["tokens"].limit, limits.budgets["tokens"].remaining) == (200000, 190000)
    limits = parse(ANTHROPIC_LIMITS)
    assert set(limits.budgets) == {"requests", "input_tokens", "output_tokens"}


# -- against the mock provider (bench.provider) -------------------------------------------

#: a period of ten hours: the mock's buckets hardly refill during a test
SLOW = {"rate_period": 36_000.0, "latency_mean": 0.01, "latency_sigma": 0.0, "completion_tokens": 20}


def settled(previous: tuple[int, int, float, int, str], used: int, remaining: int) -> float:
    """The level a report leaves on a frozen clock: the previous level less the usage
    (the reservation given back), clamped to the provider's remaining and the burst."""
    limit, burst, level, _, _ = previous
    return min(level - used, remaining, min(max(burst, remaining), limit))


async def test_mock_provider_openai_async(agov: AsyncGovernor) -> None:
    from bench.provider import MockProvider, ProviderConfig

    async with MockProvider(ProviderConfig(rpm=100, tpm=100_000, **SLOW)) as mock:
        async with async_openai_client(governor=agov, retry=FAST, base_url=f"{mock.url}/v1", api_key="t") as client:
            await client.chat.completions.create(model="sim-1", messages=MESSAGES, max_tokens=64)
            first = levels(await agov.status())
            assert {kind: figures[0] for kind, figures in first.items()} == {"requests": 100, "tokens": 100_000}
            assert {figures[4] for figures in first.values()} == {"header"}
            raw = await client.chat.completions.with_raw_response.create(
                model="sim-1", messages=MESSAGES, max_tokens=64
            )
            reply = raw.parse()
            assert reply.usage is not None
            second = levels(await agov.status())
            remaining = int(raw.headers["x-ratelimit-remaining-tokens"])
            assert second["tokens"][2] == settled(first["tokens"], reply.usage.total_tokens, remaining)
            stream = await client.chat.completions.create(
                model="sim-1", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
            assert (await agov.status()).in_flight == 1
            remaining = int(stream.response.headers["x-ratelimit-remaining-tokens"])  # sent at the stream's start
            chunks = [chunk async for chunk in stream]
            usage = chunks[-1].usage
            assert usage is not None and usage.completion_tokens == 20
    status = await agov.status()
    assert counts(status) == (3, 0, 0, 0)
    assert levels(status)["tokens"][2] == settled(second["tokens"], usage.total_tokens, remaining)
    assert mock.record.accepted == 3


async def test_mock_provider_anthropic_sync_and_async(make_gov: MakeGov, agov: AsyncGovernor) -> None:
    from bench.provider import MockProvider, ProviderConfig

    gov = make_gov(GovernorConfig(), clock=FakeClock())
    async with MockProvider(ProviderConfig(rpm=100, input_tpm=100_000, output_tpm=20_000, **SLOW)) as mock:

        def sync_calls() -> tuple[Any, Any]:
            with anthropic_client(governor=gov, retry=FAST, base_url=mock.url, api_key="t") as client:
                reply = client.messages.create(model="sim-1", max_tokens=8, messages=MESSAGES)
                with client.messages.stream(model="sim-1", max_tokens=64, messages=MESSAGES) as stream:
                    assert gov.status().in_flight == 1
                    final = stream.get_final_message()
            return reply, final

        reply, final = await asyncio.to_thread(sync_calls)
        assert (reply.usage.output_tokens, final.usage.output_tokens) == (8, 20)
        status = gov.status()
        assert counts(status) == (2, 0, 0, 0)
        assert {b.kind: (b.limit, b.source) for b in status.budgets} == {
            "requests": (100, "header"),  # no tokens budget: Anthropic's tokens-* is the tighter of the two
            "input_tokens": (100_000, "header"),
            "output_tokens": (20_000, "header"),
        }
        async with async_anthropic_client(governor=agov, retry=FAST, base_url=mock.url, api_key="t") as aclient:
            await aclient.messages.create(model="sim-1", max_tokens=8, messages=MESSAGES)
            async with aclient.messages.stream(model="sim-1", max_tokens=64, messages=MESSAGES) as astream:
                assert (await agov.status()).in_flight == 1
                afinal = await astream.get_final_message()
        assert afinal.usage.output_tokens == 20
    assert counts(await agov.status()) == (4, 0, 0, 0)  # one governor in Redis: the sync and the async calls
    assert mock.record.accepted == 4


async def test_mock_provider_overload_inside_a_stream(agov: AsyncGovernor) -> None:
    from bench.provider import MockProvider, ProviderConfig

    async with MockProvider(ProviderConfig(stream_error_rate=1.0, seed=3, **{**SLOW, "completion_tokens": 40})) as mock:
        async with async_anthropic_client(governor=agov, retry=FAST, base_url=mock.url, api_key="t") as client:
            with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
                async with client.messages.stream(model="sim-1", max_tokens=64, messages=MESSAGES) as stream:
                    async for _ in stream.text_stream:
                        pass
    assert counts(await agov.status()) == (1, 0, 0, 0)  # an overload: no load signal


async def test_mock_provider_throttle_is_retried(make_agov: MakeAGov) -> None:
    """Two calls at once against a hidden concurrency limit of one: the one refused
    is retried by the transport after the provider's Retry-After, and both succeed."""
    from bench.provider import MockProvider, ProviderConfig

    agov = make_agov(GovernorConfig())  # the real clock: the provider's hold must pass
    patient = RetryPolicy(max_attempts=10, deadline=20.0, base=0.005, cap=0.05, max_retry_after=2.0)
    async with MockProvider(ProviderConfig(limit=1, latency_mean=0.5, latency_sigma=0.0)) as mock:
        async with async_openai_client(governor=agov, retry=patient, base_url=f"{mock.url}/v1", api_key="t") as client:
            replies = await asyncio.gather(
                *(client.chat.completions.create(model="sim-1", messages=MESSAGES, max_tokens=8) for _ in range(2))
            )
    assert all(reply.choices[0].message.content for reply in replies)
    assert mock.record.accepted == 2 and mock.record.refused.get("concurrency", 0) >= 1
    status = await agov.status()
    assert status.window_rate_limited == mock.record.refused["concurrency"]
    assert (status.window_attempts, status.in_flight) == (2 + status.window_rate_limited, 0)


def test_the_transport_queues_in_its_class_and_a_request_may_name_its_own(
    gov: Governor, provider: Provider, sync_client: Any, name: str
) -> None:
    """The client's leases wait in its class for its tenant; a request's
    X-Governor-* headers name others, and never reach the provider."""
    provider.script(chat_stream(usage=(3, 2)), chat_stream(usage=(3, 2)))
    base = f"{provider.url}/v1"
    with openai_client(governor=gov, retry=FAST, base_url=base, api_key="test", priority="interactive",
                       tenant="team-a") as client:  # fmt: skip
        stream = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
        next(iter(stream))
        [record] = holders(sync_client, name)
        assert (record.rank, record.tenant) == (0, "team-a")
        stream.close()
        stream = client.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,
            extra_headers={"X-Governor-Priority": "batch", "X-Governor-Tenant": "nightly"},
        )
        next(iter(stream))
        [record] = holders(sync_client, name)
        assert (record.rank, record.tenant) == (2, "nightly")
        stream.close()
    assert not any(h.lower().startswith("x-governor") for seen in provider.requests for h in seen.headers)
    with pytest.raises(ConfigError, match="unknown priority"):
        openai_client(governor=gov, base_url=base, api_key="test", priority="urgent")
    with pytest.raises(ConfigError, match="tenant"):
        GovernedTransport(gov, tenant="a b")


# -- an HTTP-date Retry-After is measured by the fleet's clock -------------------------------


@pytest.mark.parametrize("dated", [False, True])
def test_an_http_date_retry_after_is_measured_by_the_fleets_clock_never_the_hosts(
    make_gov: MakeGov, provider: Provider, monkeypatch: pytest.MonkeyPatch, dated: bool
) -> None:
    """A 429 whose Retry-After is an HTTP date 5 s ahead, from a host whose
    clock is 10 minutes behind: without a usable ``Date`` header the wait is
    measured by the fleet's clock (Redis TIME; here the injected one), with
    one the provider's date against its own; either way the fleet holds 5 s,
    not the 60 s cap the host's clock would make of it."""
    import email.utils
    import types

    from governor import backoff

    fleet = FakeClock(1_790_000_000.0)
    gov = make_gov(GovernorConfig(), clock=fleet)
    host = types.SimpleNamespace(time=lambda: fleet.now - 600.0, monotonic=time.monotonic)
    monkeypatch.setattr(backoff, "time", host)  # this host's clock, 10 minutes behind
    headers = {"retry-after": email.utils.formatdate(fleet.now + 5, usegmt=True)}
    headers["date"] = email.utils.formatdate(fleet.now, usegmt=True) if dated else ""  # "": none to go by
    provider.script(openai_429(headers))
    once = RetryPolicy(max_attempts=1)
    with openai_client(governor=gov, retry=once, base_url=f"{provider.url}/v1", api_key="test") as client:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=MESSAGES)
    assert provider.requests[-1].path.endswith("/chat/completions")
    status = gov.status()
    assert status.not_before is not None
    assert status.not_before - status.now == pytest.approx(5.0, abs=0.01)
