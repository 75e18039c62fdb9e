"""A scripted LLM provider: a real HTTP server that real SDK clients call.

It speaks the shapes of OpenAI's chat-completions API
(``POST /v1/chat/completions``) and Anthropic's messages API
(``POST /v1/messages``), streaming or not, and answers each request with
the next reply a test queued: a success, or one of the failures the
classifier must tell apart (a 429 with each form of Retry-After, OpenAI's
``insufficient_quota``, Anthropic's credit and spend-limit errors, a 529
or 503 overload, an ``overloaded_error`` event inside a streamed 200).
An empty queue answers 500 ``script exhausted``, so a test that calls more
often than it meant to fails loudly.

aiohttp runs in a background thread with its own event loop on a free
loopback port, so sync and asyncio tests alike can call it.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``status`` 0 means success in the API's own shape."""

    status: int = 0
    body: Any = None  #: JSON body of an error
    headers: dict[str, str] = field(default_factory=dict)
    #: Anthropic SSE: after message_start, send this error event instead of the rest
    stream_error: Any = None
    #: seconds to wait before answering (a call in flight, for cancellation tests)
    delay: float = 0.0


@dataclass(frozen=True)
class Seen:
    """A request the provider received."""

    path: str
    headers: dict[str, str]
    body: Any


OK = Reply()


# -- failure shapes, as the providers send them -----------------------------------


def openai_rate_limited(**headers: str) -> Reply:
    return Reply(
        429,
        {
            "error": {
                "message": "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1.",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        headers,
    )


def openai_insufficient_quota() -> Reply:
    return Reply(
        429,
        {
            "error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
        },
    )


def openai_overloaded() -> Reply:
    return Reply(
        503,
        {"error": {"message": "The engine is currently overloaded, please try again later", "type": "server_error"}},
    )


def openai_server_error() -> Reply:
    return Reply(500, {"error": {"message": "The server had an error", "type": "server_error", "code": None}})


def openai_bad_request() -> Reply:
    return Reply(
        400,
        {"error": {"message": "Invalid 'messages'", "type": "invalid_request_error", "code": "invalid_value"}},
    )


def anthropic_error(status: int, error_type: str, message: str, error_code: str | None = None, **headers: str) -> Reply:
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    return Reply(status, {"type": "error", "error": error, "request_id": "req_scripted"}, headers)


def anthropic_rate_limited(**headers: str) -> Reply:
    return anthropic_error(
        429, "rate_limit_error", "This request would exceed the rate limit for your organization", **headers
    )


def anthropic_overloaded(**headers: str) -> Reply:
    return anthropic_error(529, "overloaded_error", "Overloaded", **headers)


def anthropic_unavailable(**headers: str) -> Reply:
    return anthropic_error(503, "api_error", "Service unavailable", **headers)


def anthropic_credit_too_low() -> Reply:
    return anthropic_error(
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
    )


def anthropic_spend_limit() -> Reply:
    return anthropic_error(
        400,
        "invalid_request_error",
        "You have reached your specified API usage limits. You will regain access on 2026-01-01 at 00:00 UTC.",
    )


def anthropic_enforced_spend_limit() -> Reply:
    return anthropic_error(
        429,
        "rate_limit_error",
        "Your organization has crossed the monthly usage threshold of its API tier.",
        "enforced_spend_limit_reached",
    )


def anthropic_stream_overloaded() -> Reply:
    return Reply(stream_error={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def http_date(seconds_from_now: float) -> str:
    """An HTTP date (IMF-fixdate) ``seconds_from_now`` in the future."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# -- success bodies -------------------------------------------------------------


def _openai_completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop", "logprobs": None}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _openai_chunks(model: str) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        body = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    return [chunk({"role": "assistant", "content": "ok"}, None), chunk({}, "stop"), "data: [DONE]\n\n"]


def _anthropic_message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _anthropic_events(model: str, error: Any) -> list[str]:
    start = {**_anthropic_message(model), "content": [], "stop_reason": None}
    events = [_sse("message_start", {"type": "message_start", "message": start})]
    if error is not None:
        return [*events, _sse("error", error)]
    return [
        *events,
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        ),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]


# -- the server -------------------------------------------------------------------


class ScriptedProvider:
    """The server; ``script(...)`` queues replies, ``requests`` lists what came."""

    def __init__(self) -> None:
        self._replies: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self.requests: list[Seen] = []
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()

    @property
    def pending(self) -> int:
        """Replies queued and not yet served."""
        with self._lock:
            return len(self._replies)

    def start(self) -> ScriptedProvider:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="scripted-provider", daemon=True)
        self._thread.start()
        if not ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the scripted provider did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._setup())
        except BaseException as error:  # noqa: BLE001 - reported to start()
            self._error = error
            ready.set()
            return
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
        app.router.add_post(OPENAI_PATH, self._openai)
        app.router.add_post(ANTHROPIC_PATH, self._anthropic)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _next(self, request: web.Request) -> tuple[Reply | None, dict[str, Any]]:
        try:
            body = await request.json()
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Seen(request.path, dict(request.headers), body))
            reply = self._replies.popleft() if self._replies else None
        if reply is not None and reply.delay:
            await asyncio.sleep(reply.delay)
        return reply, body if isinstance(body, dict) else {}

    @staticmethod
    def _exhausted() -> web.Response:
        return web.json_response(
            {"error": {"message": "script exhausted", "type": "server_error", "code": None}}, status=500
        )

    @staticmethod
    def _error_response(reply: Reply) -> web.Response:
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    async def _stream(self, request: web.Request, events: list[str]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in events:
            await response.write(event.encode())
        await response.write_eof()
        return response

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        reply, body = await self._next(request)
        if reply is None:
            return self._exhausted()
        if reply.status:
            return self._error_response(reply)
        model = str(body.get("model", "scripted"))
        if body.get("stream"):
            return await self._stream(request, _openai_chunks(model))
        return web.json_response(_openai_completion(model))

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        reply, body = await self._next(request)
        if reply is None:
            return self._exhausted()
        if reply.status:
            return self._error_response(reply)
        model = str(body.get("model", "scripted"))
        if body.get("stream") or reply.stream_error is not None:
            return await self._stream(request, _anthropic_events(model, reply.stream_error))
        return web.json_response(_anthropic_message(model))
