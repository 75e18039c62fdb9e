"""governor.estimate: the estimate of a request, the usage of a response and of a stream.

The request bodies and responses here are the real SDKs' own: the openai
and anthropic clients send through an in-memory transport that records the
body and answers with provider-shaped JSON or server-sent events, and the
SDKs' own parsers read the same bytes that StreamUsage reads, so the two
must agree on the usage.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import Outcome
from governor.budgets import Tokens
from governor.estimate import (
    CHARS_PER_TOKEN,
    DEFAULT_OUTPUT_TOKENS,
    LEGACY_COMPLETIONS_DEFAULT,
    MEDIA_TOKENS,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    estimate_request,
)
from governor.profiles import usage_of
from governor.streams import StreamUsage

IMAGE = "data:image/png;base64," + "iVBORw0KGgo" * 2000  # 22k characters of base64: media, not text


def tokens_of(chars: int, messages: int = 0, media: int = 0, token_ids: int = 0) -> int:
    """The documented input rule."""
    return (
        REQUEST_OVERHEAD
        + math.ceil(chars / CHARS_PER_TOKEN)
        + MESSAGE_OVERHEAD * messages
        + MEDIA_TOKENS * media
        + token_ids
    )


# -- estimate_request -------------------------------------------------------------------


def test_openai_chat_body() -> None:
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},  # 14 characters
            {"role": "user", "content": "hi"},  # 2
        ],
    }
    assert estimate_request(body) == Tokens(tokens_of(16, messages=2), DEFAULT_OUTPUT_TOKENS)
    assert estimate_request({**body, "max_tokens": 50}).output == 50
    assert estimate_request({**body, "max_completion_tokens": 70, "max_tokens": 50}).output == 70
    assert estimate_request({**body, "max_completion_tokens": 70, "n": 3}).output == 210
    assert estimate_request({**body, "max_completion_tokens": None, "max_tokens": 9}).output == 9
    # a maximum that is no count is not one: the default
    assert estimate_request({**body, "max_tokens": "lots"}).output == DEFAULT_OUTPUT_TOKENS
    assert estimate_request({**body, "max_tokens": True}).output == DEFAULT_OUTPUT_TOKENS
    assert estimate_request({**body, "max_tokens": 10, "n": 0}).output == 10


def test_bytes_text_and_mapping_agree() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo wörld"}], "max_tokens": 5}
    raw = json.dumps(body).encode()
    assert estimate_request(raw) == estimate_request(raw.decode()) == estimate_request(body)
    assert estimate_request(body) == Tokens(tokens_of(11, messages=1), 5)


def test_content_parts_and_media() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},  # 22
                    {"type": "image_url", "image_url": {"url": IMAGE, "detail": "high"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGR" * 100, "format": "wav"}},
                ],
            }
        ],
        "max_completion_tokens": 300,
    }
    assert estimate_request(body) == Tokens(tokens_of(22, messages=1, media=2), 300)


def test_tool_calls_and_tools() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},  # 17
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },  # "call_1" 6 + "get_weather" 11 + 16
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},  # 6 + 5
        ],
        "tools": tools,
    }
    schema = len(json.dumps(tools, separators=(",", ":")))
    assert estimate_request(body).input == tokens_of(17 + 33 + 11 + schema, messages=3)


def test_anthropic_messages_body() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],  # 9
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE}},
                    {"type": "text", "text": "Describe it."},  # 12
                ],
            },
            {"role": "assistant", "content": "A cat."},  # 6
            {"role": "user", "content": "More."},  # 5
        ],
        "thinking": {"type": "enabled", "budget_tokens": 512},
    }
    assert estimate_request(body, "/v1/messages") == Tokens(tokens_of(9 + 12 + 6 + 5, messages=3, media=1), 1024)


def test_responses_api_body() -> None:
    body = {
        "model": "gpt-4.1",
        "instructions": "Answer in French.",  # 17
        "input": "Hello there",  # 11
        "max_output_tokens": 200,
    }
    assert estimate_request(body, "/v1/responses") == Tokens(tokens_of(28), 200)
    items = {
        "model": "gpt-4.1",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What's this?"},
                    {"type": "input_image", "image_url": IMAGE},
                ],
            }
        ],
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
    }
    schema = len(json.dumps(items["text"], separators=(",", ":")))
    assert estimate_request(items, "/v1/responses") == Tokens(
        tokens_of(12 + schema, messages=1, media=1), DEFAULT_OUTPUT_TOKENS
    )


def test_legacy_completions_and_embeddings() -> None:
    prompt = {"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test"}  # 18
    assert estimate_request(prompt, "/v1/completions") == Tokens(tokens_of(18), LEGACY_COMPLETIONS_DEFAULT)
    assert estimate_request({**prompt, "max_tokens": 7, "best_of": 3, "n": 2}, "/v1/completions").output == 21
    ids = {"model": "davinci-002", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 1}
    assert estimate_request(ids, "/v1/completions") == Tokens(tokens_of(0, token_ids=5), 1)
    embed = {"model": "text-embedding-3-small", "input": ["first text", "second"]}  # 10 + 6
    assert estimate_request(embed, "/v1/embeddings") == Tokens(tokens_of(16), 0)
    assert estimate_request(embed, "/v1/embeddings/").output == 0
    assert estimate_request(prompt, "/v1/chat/completions").output == DEFAULT_OUTPUT_TOKENS


@pytest.mark.parametrize(
    "body",
    [b"not json at all", "{truncated", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"', b"42"],
)
def test_unparseable_body_fallback(body: bytes | str) -> None:
    size = len(body.encode() if isinstance(body, str) else body)
    assert estimate_request(body, "/v1/chat/completions") == Tokens(
        math.ceil(size / CHARS_PER_TOKEN), DEFAULT_OUTPUT_TOKENS
    )


@pytest.mark.parametrize("body", [None, b"", "", b"  \n"])
def test_no_body_estimates_nothing(body: bytes | str | None) -> None:
    assert estimate_request(body) == Tokens()


def test_deeply_nested_body_is_bounded() -> None:
    deep: Any = "x"
    for _ in range(500):
        deep = [deep]
    assert estimate_request({"messages": deep}).input >= REQUEST_OVERHEAD
    text = "[" * 100_000 + "]" * 100_000  # beyond json's recursion limit: the fallback
    assert estimate_request(text) == Tokens(50_000, DEFAULT_OUTPUT_TOKENS)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["messages", "system", "input", "prompt", "tools", "text", "max_tokens", "n"]), JSON
    )
)
def test_any_json_body_estimates(body: dict[str, Any]) -> None:
    estimate = estimate_request(json.dumps(body), "/v1/chat/completions")
    assert isinstance(estimate, Tokens) and estimate.input >= REQUEST_OVERHEAD


# -- the real SDKs' request bodies ------------------------------------------------------

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-test",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 5},
    },
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 6,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
    },
}


class Recorder:
    """An in-memory provider: records each request body and answers with ``reply``."""

    def __init__(self, reply: Callable[[httpx2.Request], httpx2.Response]) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self._reply = reply

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(request.read())
        self.paths.append(request.url.path)
        return self._reply(request)


def sse_response(body: bytes) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def json_response(body: Any) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(200, json=body)


def openai_with(recorder: Recorder) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="test",
        base_url="http://provider/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(recorder)),
    )


def anthropic_with(recorder: Recorder) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test",
        base_url="http://provider",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(recorder)),
    )


def test_estimate_of_the_openai_sdks_body_and_usage_of_its_reply() -> None:
    recorder = Recorder(json_response(COMPLETION))
    with openai_with(recorder) as client:
        reply = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "Hello, world"}], max_completion_tokens=42
        )
    assert estimate_request(recorder.bodies[0], recorder.paths[0]) == Tokens(tokens_of(12, messages=1), 42)
    assert usage_of(reply) == usage_of(reply.usage) == usage_of(COMPLETION) == Tokens(19, 10)


def test_estimate_of_the_anthropic_sdks_body_and_usage_of_its_reply() -> None:
    recorder = Recorder(json_response(MESSAGE))
    with anthropic_with(recorder) as client:
        reply = client.messages.create(
            model="claude-test",
            max_tokens=64,
            system="Be brief.",
            messages=[{"role": "user", "content": "Hello, world"}],
        )
    assert estimate_request(recorder.bodies[0], recorder.paths[0]) == Tokens(tokens_of(9 + 12, messages=1), 64)
    # cache writes and reads are input, as the provider counts them against the input budget
    assert usage_of(reply) == usage_of(reply.usage) == usage_of(MESSAGE) == Tokens(12 + 100 + 2000, 6)


# -- usage_of ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "usage"),
    [
        ({"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}, Tokens(3, 4)),
        ({"prompt_tokens": 3, "completion_tokens": 4}, Tokens(3, 4)),  # the usage part itself
        ({"object": "list", "usage": {"prompt_tokens": 8, "total_tokens": 8}}, Tokens(8, 0)),  # embeddings
        (
            {"usage": {"input_tokens": 5, "output_tokens": 6, "input_tokens_details": {"cached_tokens": 4}}},
            Tokens(5, 6),
        ),
        ({"usage": {"input_tokens": 5, "output_tokens": 6, "cache_read_input_tokens": None}}, Tokens(5, 6)),
        ({"usage": {"input_tokens": 5}}, Tokens(5, 0)),
        ({"usage": None}, None),
        ({"id": "x"}, None),
        (None, None),
        ("usage", None),
        ({"usage": {"prompt_tokens": -1, "completion_tokens": 4}}, None),
        ({"usage": {"prompt_tokens": 1.5, "completion_tokens": 4}}, None),
        ({"usage": {"prompt_tokens": True, "completion_tokens": 4}}, None),
        ({"usage": {"input_tokens": 5, "output_tokens": 6, "cache_creation_input_tokens": "many"}}, None),
        ({"usage": {"input_tokens": 2**60, "output_tokens": 6}}, None),
        ({"usage": "lots"}, None),
    ],
)
def test_usage_of_dicts(obj: Any, usage: Tokens | None) -> None:
    assert usage_of(obj) == usage


def test_usage_of_sdk_objects() -> None:
    from anthropic.types import Message
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

    assert usage_of(ChatCompletion.model_validate(COMPLETION)) == Tokens(19, 10)
    assert usage_of(ChatCompletion.model_validate({**COMPLETION, "usage": None})) is None
    assert usage_of(Message.model_validate(MESSAGE)) == Tokens(2112, 6)
    embedding = CreateEmbeddingResponse.model_validate(
        {"object": "list", "data": [], "model": "e", "usage": {"prompt_tokens": 8, "total_tokens": 8}}
    )
    assert usage_of(embedding) == Tokens(8, 0)
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-4.1",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 30,
                "input_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 0},
                "output_tokens": 7,
                "output_tokens_details": {"reasoning_tokens": 2},
                "total_tokens": 37,
            },
        }
    )
    assert usage_of(response) == Tokens(30, 7)


class Raising:
    @property
    def usage(self) -> Any:
        raise RuntimeError("no")


def test_usage_of_an_object_whose_usage_raises() -> None:
    assert usage_of(Raising()) is None


# -- StreamUsage ------------------------------------------------------------------------


def chat_chunk(content: str | None, usage: dict[str, int] | None, with_usage_field: bool = True) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [] if content is None else [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    if with_usage_field:
        chunk["usage"] = usage
    return chunk


def openai_stream(usage: dict[str, int] | None = None, newline: str = "\n") -> bytes:
    """OpenAI chat-completion chunks; with include_usage every chunk has "usage": null and a last one has it."""
    chunks = [chat_chunk("Bonjour", None), chat_chunk(" à tous ✓", None)]
    if usage is not None:
        chunks.append(chat_chunk(None, usage))
    lines = [f"data: {json.dumps(chunk, ensure_ascii=False)}{newline}{newline}" for chunk in chunks]
    return ("".join(lines) + f"data: [DONE]{newline}{newline}").encode()


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def anthropic_stream(error: dict[str, Any] | None = None) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            **MESSAGE,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 1000},
        },
    }
    events = [sse("message_start", start), 'event: ping\ndata: {"type": "ping"}\n\n']
    events.append(
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
    )
    events.append(
        sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hé"}},
        )
    )
    if error is not None:
        events.append(sse("error", error))
        return "".join(events).encode()
    events += [
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 9}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return "".join(events).encode()


def fed(data: bytes, pieces: list[int] | None = None) -> StreamUsage:
    """A StreamUsage fed ``data`` cut at ``pieces`` (offsets), then finished."""
    stream = StreamUsage()
    cuts = [0, *sorted(pieces or []), len(data)]
    for start, end in itertools.pairwise(cuts):
        stream.feed(data[start:end])
    stream.finish()
    return stream


USAGE = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}


def test_openai_stream_usage_chunk() -> None:
    stream = fed(openai_stream(USAGE))
    assert stream.usage == Tokens(11, 4)
    assert stream.done and stream.error is None and stream.events == 4
    without = fed(openai_stream(None))
    assert without.usage is None and without.done


def test_every_split_of_a_stream_reads_the_same() -> None:
    multiline = b'data: {"choices": [],\r\ndata: "usage": {"prompt_tokens": 2,\r\ndata:"completion_tokens": 3}}\r\n\r\n'
    streams = (
        openai_stream(USAGE),
        openai_stream(USAGE, "\r\n"),
        openai_stream(USAGE, "\r"),
        anthropic_stream(),
        multiline,
    )
    for data in streams:
        whole = fed(data)
        assert whole.usage is not None
        for cut in range(len(data) + 1):
            one = fed(data, [cut])
            assert (one.usage, one.done, one.events) == (whole.usage, whole.done, whole.events), (data[:cut], cut)
        bytewise = StreamUsage()
        for i in range(len(data)):
            bytewise.feed(data[i : i + 1])
        bytewise.finish()
        assert (bytewise.usage, bytewise.done, bytewise.events) == (whole.usage, whole.done, whole.events)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(anthropic_stream())), max_size=30))
def test_any_splits_of_an_anthropic_stream(cuts: list[int]) -> None:
    assert fed(anthropic_stream(), cuts).usage == Tokens(25 + 1000, 15)


def test_anthropic_stream_usage() -> None:
    stream = fed(anthropic_stream())
    assert stream.usage == Tokens(1025, 15)  # message_delta is cumulative: the last one, not a sum
    assert stream.done and stream.error is None


def test_anthropic_stream_usage_as_it_goes() -> None:
    data = anthropic_stream()
    stream = StreamUsage()
    marker = data.index(b"event: content_block_start")
    stream.feed(data[:marker])
    assert stream.usage == Tokens(1025, 1)  # message_start's
    stream.feed(data[marker:])
    assert stream.usage == Tokens(1025, 15)


def test_message_delta_with_input_figures() -> None:
    data = anthropic_stream().replace(
        b'"usage": {"output_tokens": 15}',
        b'"usage": {"input_tokens": 30, "cache_read_input_tokens": 1000, '
        b'"cache_creation_input_tokens": 5, "output_tokens": 15}',
    )
    assert fed(data).usage == Tokens(1035, 15)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, Outcome.RATE_LIMITED),
        ({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, Outcome.RATE_LIMITED),
        ({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}, Outcome.ERROR),
        ({"type": "error", "error": {"type": "billing_error", "message": "pay up"}}, Outcome.QUOTA_EXHAUSTED),
    ],
)
def test_error_event_inside_a_stream(error: dict[str, Any], kind: Outcome) -> None:
    stream = fed(anthropic_stream(error))
    assert stream.error is not None and stream.error.kind is kind
    assert stream.usage == Tokens(1025, 1)  # what the stream said before the error
    assert not stream.done


def test_openai_error_inside_a_stream() -> None:
    data = b'data: {"error": {"message": "overloaded", "type": "server_error", "code": "rate_limit_exceeded"}}\n\n'
    stream = fed(openai_stream(None)[:100] + b"\n\n" + data)
    assert stream.error is not None and stream.error.kind is Outcome.RATE_LIMITED


def test_responses_api_stream() -> None:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None}
    done = {**response, "status": "completed", "usage": {"input_tokens": 30, "output_tokens": 7, "total_tokens": 37}}
    data = "".join(
        [
            sse("response.created", {"type": "response.created", "sequence_number": 0, "response": response}),
            sse(
                "response.output_text.delta",
                {"type": "response.output_text.delta", "delta": "Hi", "sequence_number": 1},
            ),
            sse("response.completed", {"type": "response.completed", "sequence_number": 2, "response": done}),
        ]
    ).encode()
    stream = fed(data)
    assert stream.usage == Tokens(30, 7) and stream.done and stream.error is None
    failed = {**response, "status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow down"}}
    stream = fed(sse("response.failed", {"type": "response.failed", "sequence_number": 1, "response": failed}).encode())
    assert stream.error is not None and stream.error.kind is Outcome.RATE_LIMITED
    stream = fed(
        sse("error", {"type": "error", "code": "server_error", "message": "boom", "sequence_number": 1}).encode()
    )
    assert stream.error is not None and stream.error.kind is Outcome.ERROR


def test_comments_garbage_and_a_last_event_without_blank_line() -> None:
    data = (
        b": keep-alive\n\n"
        b"data: not json\n\n"
        b'data: {"usage": [1, 2]}\n\n'
        b'event: message_start\ndata: {"message": "no"}\n\n'
        b"retry: 1000\nid: 7\n\n"
        b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}'
    )
    stream = StreamUsage()
    stream.feed(data)
    assert stream.usage is None  # the last event is not closed yet
    stream.finish()
    assert stream.usage == Tokens(2, 3)


def test_multiline_data_is_joined() -> None:
    data = b'data: {"choices": [],\ndata: "usage": {"prompt_tokens": 2,\ndata:"completion_tokens": 3}}\n\n'
    assert fed(data).usage == Tokens(2, 3)


def test_an_oversized_event_is_dropped_and_the_rest_read() -> None:
    stream = StreamUsage(max_event_bytes=1000)
    stream.feed(b"data: " + b"x" * 600 + b"\ndata: " + b"y" * 600 + b"\n\n")
    stream.feed(b"data: " + b"z" * 5000)  # a line that never ends
    stream.feed(b"z" * 5000 + b"\n\n")
    stream.feed(b'data: {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}\n\n')
    stream.finish()
    assert stream.dropped == 2
    assert stream.usage == Tokens(1, 1)


# -- the SDKs read the same streams to the same usage -------------------------------------


def test_openai_sdk_reads_the_same_usage() -> None:
    data = openai_stream(USAGE)
    with openai_with(Recorder(sse_response(data))) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    sdk_usage = chunks[-1].usage
    assert sdk_usage is not None
    assert usage_of(sdk_usage) == fed(data).usage == Tokens(11, 4)


def test_anthropic_sdk_reads_the_same_usage() -> None:
    data = anthropic_stream()
    with anthropic_with(Recorder(sse_response(data))) as client:
        with client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            final = stream.get_final_message()
    assert usage_of(final) == fed(data).usage == Tokens(1025, 15)


def test_anthropic_sdk_raises_the_error_event_streamusage_classifies() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    data = anthropic_stream(error)
    with anthropic_with(Recorder(sse_response(data))) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            list(
                client.messages.create(
                    model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
                )
            )
    from governor.classify import classify_anthropic

    ours = fed(data).error
    assert ours is not None and ours.kind is classify_anthropic(raised.value).kind is Outcome.RATE_LIMITED


def chunks_of(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_sdk_sse_decoder_agrees_on_events() -> None:
    """The SDK's own SSE decoder splits the stream into the events StreamUsage counts."""
    from openai._streaming import SSEDecoder

    for data in (openai_stream(USAGE), openai_stream(USAGE, "\r\n"), anthropic_stream()):
        events = [e for e in SSEDecoder().iter_bytes(chunks_of(data, 7)) if e.data]
        assert len(events) == fed(data).events


# -- Gemini and Bedrock -----------------------------------------------------------------------


def test_gemini_estimate_reads_contents_and_max_output_tokens() -> None:
    from governor.profiles.google import estimate_gemini

    body = {
        "contents": [{"role": "user", "parts": [{"text": "x" * 400}]}],
        "systemInstruction": {"parts": [{"text": "y" * 40}]},
        "generationConfig": {"maxOutputTokens": 50, "candidateCount": 2},
    }
    assert estimate_gemini(json.dumps(body).encode()) == Tokens(3 + 110 + 2 * 4, 100)
    assert estimate_gemini(b"") == Tokens()


def test_bedrock_estimate_is_input_plus_max_tokens_times_the_burndown() -> None:
    from governor.profiles import REGISTRY

    body = {"messages": [{"role": "user", "content": [{"text": "x" * 400}]}], "inferenceConfig": {"maxTokens": 64}}
    raw = json.dumps(body).encode()
    assert REGISTRY["bedrock"].estimate(raw, "/model/amazon.nova-lite-v1:0/converse") == Tokens(3 + 100 + 4, 64)
    claude = "/model/anthropic.claude-sonnet-4-20250514-v1:0/converse"
    assert REGISTRY["bedrock"].estimate(raw, claude) == Tokens(107, 64 * 5)


def test_usage_of_gemini_and_bedrock_answers() -> None:
    gemini = {
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 7,
            "totalTokenCount": 22,
        }
    }
    assert usage_of(gemini) == Tokens(10, 12)
    bedrock = {
        "usage": {
            "inputTokens": 10,
            "outputTokens": 5,
            "totalTokens": 15,
            "cacheReadInputTokens": 100,
            "cacheWriteInputTokens": 3,
        }
    }
    assert usage_of(bedrock) == Tokens(13, 5)  # cache reads are given back to Bedrock's quota


def test_anthropic_profile_leaves_cache_reads_out_of_input() -> None:
    from governor.profiles import REGISTRY

    message = {
        "usage": {
            "input_tokens": 50,
            "output_tokens": 30,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 20,
        }
    }
    assert usage_of(message) == Tokens(1070, 30)
    assert REGISTRY["anthropic"].usage(message) == Tokens(70, 30)


def test_gemini_stream_usage_is_the_last_chunk_s() -> None:
    stream = StreamUsage()
    for sent in (8, 16):
        chunk = {
            "candidates": [{"content": {"parts": [{"text": "ok"}]}}],
            "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": sent},
        }
        stream.feed(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
    stream.finish()
    assert stream.usage == Tokens(7, 16)
