#!/usr/bin/env python3
"""Write tests/conformance/charges.json: what the governed transport charges a call, for the other clients to match.

    python tests/conformance/generate_charges.py          write the vectors
    python tests/conformance/generate_charges.py --check  exit 1 if the file differs

A client whose governed fetch (or transport) guards the spend budgets must
reserve, for the same request, the micro-dollars the Python transport
reserves, and settle, for the same answers, the micro-dollars it settles
(governor._exchange.Charge): the usage read from the response body (its
cached tokens apart), priced at the tier that served it (the tier asked
for when the body does not say; its reservation when that tier has no
price), a refusal as the provider bills it, an
answer without usage or an attempt that broke off at the reservation, a
stream's usage (read from its events, governor.streams.StreamUsage)
priced as a response read whole. Each vector is a request (its path and JSON body,
priced with the prices of tests/conformance/prices.json) and the answers
its attempts got, in order (``body``: the request's JSON text, as sent):

- ``{"status", "body"}``: an answer read whole (``body`` its text);
- ``{"stream", "failed"}``: a streamed answer's bytes (as text), and
  whether it broke off before its end;
- ``{"broke_off": true}``: an attempt that raised after it may have been sent;

and what the transport computes: the request's token estimate, the tier
asked for, ``most`` (what it reserves), ``charged`` (what it settles, in
micro-dollars) and ``tokens`` (the tokens it settles, for token budgets);
or ``refused``: the error class raised before anything is sent (a tier
or model without a price).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_prices import PRICES  # noqa: E402

from governor._exchange import Charge, request_model, stream_outcome  # noqa: E402
from governor.errors import ConfigError  # noqa: E402
from governor.estimate import estimate_request  # noqa: E402
from governor.prices import Price, PriceBook  # noqa: E402
from governor.profiles import profile  # noqa: E402
from governor.streams import StreamUsage  # noqa: E402

OUT = Path(__file__).resolve().parent / "charges.json"

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "house-model", "messages": [{"role": "user", "content": "Say hello " * 40}], **fields}


def _message(**fields: Any) -> dict[str, Any]:
    return {"model": "house-opus", "max_tokens": 300, "messages": [{"role": "user", "content": "Hi " * 90}], **fields}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _ok(usage: Any = None, **fields: Any) -> dict[str, Any]:
    body = {"id": "x", **fields} if usage is None else {"id": "x", "usage": usage, **fields}
    return {"status": 200, "body": _json(body)}


def _events(*events: tuple[str | None, Any], newline: str = "\n") -> str:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else _json(data)
        lines = ([] if name is None else [f"event: {name}"]) + [f"data: {text}"]
        out.append(newline.join(lines) + newline + newline)
    return "".join(out)


def _openai_stream(usage: Any, *, done: bool = True, newline: str = "\n") -> str:
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "Hel"}}]}
    events: list[tuple[str | None, Any]] = [(None, chunk), (None, {**chunk, "choices": [{"delta": {"content": "lo"}}]})]
    if usage is not None:
        events.append((None, {"object": "chat.completion.chunk", "choices": [], "usage": usage}))
    if done:
        events.append((None, "[DONE]"))
    return _events(*events, newline=newline)


def _anthropic_stream(start: Any, delta: Any, *, stop: bool = True) -> str:
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": {"id": "m", "usage": start}}),
        ("content_block_delta", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}}),
    ]
    if delta is not None:
        end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta}
        events.append(("message_delta", end))
    if stop:
        events.append(("message_stop", {"type": "message_stop"}))
    return _events(*events)


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
RATE_LIMITED = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}

#: (what it shows, path, request body, answers)
CASES: list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]] = [
    (
        "chat: cached tokens at their own price, the default tier served as standard",
        CHAT,
        _chat(max_tokens=200),
        [
            _ok(
                {"prompt_tokens": 1000, "completion_tokens": 150, "prompt_tokens_details": {"cached_tokens": 400}},
                service_tier="default",
            )
        ],
    ),
    (
        "chat: flex asked for and served",
        CHAT,
        _chat(service_tier="flex"),
        [_ok({"prompt_tokens": 70, "completion_tokens": 9}, service_tier="flex")],
    ),
    (
        "chat: priority asked for, the standard tier served: charged at the tier served",
        CHAT,
        _chat(service_tier="priority", max_completion_tokens=64),
        [_ok({"prompt_tokens": 70, "completion_tokens": 64}, service_tier="default")],
    ),
    (
        "chat: auto asked for (standard reserved), priority served",
        CHAT,
        _chat(service_tier="auto", n=2),
        [_ok({"prompt_tokens": 123456, "completion_tokens": 7890}, service_tier="priority")],
    ),
    (
        "chat: the body names no tier served: the tier asked for",
        CHAT,
        _chat(service_tier="ultrafast"),
        [_ok({"prompt_tokens": 33, "completion_tokens": 3})],
    ),
    (
        "responses: input_tokens_details.cached_tokens",
        "/v1/responses",
        {"model": "house-model", "input": "Summarise " * 60, "max_output_tokens": 500},
        [
            _ok(
                {
                    "input_tokens": 2048,
                    "output_tokens": 300,
                    "input_tokens_details": {"cached_tokens": 1024},
                    "output_tokens_details": {"reasoning_tokens": 100},
                    "total_tokens": 2348,
                }
            )
        ],
    ),
    (
        "embeddings: prompt tokens only",
        "/v1/embeddings",
        {"model": "house-model", "input": ["one", "two", "three"]},
        [_ok({"prompt_tokens": 3, "total_tokens": 3})],
    ),
    (
        "chat: a tier served that has no price: its reservation",
        CHAT,
        _chat(max_tokens=100),
        [_ok({"prompt_tokens": 70, "completion_tokens": 9}, service_tier="batch")],
    ),
    (
        "a 429 charged nothing, then a success",
        CHAT,
        _chat(),
        [{"status": 429, "body": _json(RATE_LIMITED)}, _ok({"prompt_tokens": 80, "completion_tokens": 20})],
    ),
    (
        "a 500 charged nothing",
        CHAT,
        _chat(),
        [{"status": 500, "body": _json({"error": {"message": "boom", "type": "server_error"}})}],
    ),
    (
        "a success without usage: its reservation",
        CHAT,
        _chat(),
        [_ok(None, choices=[])],
    ),
    (
        "a success whose body is no JSON: its reservation",
        CHAT,
        _chat(),
        [{"status": 200, "body": "<html>ok</html>"}],
    ),
    (
        "cached tokens beyond the prompt: the usage is unread, its reservation",
        CHAT,
        _chat(),
        [_ok({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 11}})],
    ),
    (
        "an empty usage reads as no tokens: nothing",
        CHAT,
        _chat(),
        [_ok({})],
    ),
    (
        "an attempt that broke off, then a success: the reservation and the usage",
        CHAT,
        _chat(max_tokens=50),
        [{"broke_off": True}, _ok({"prompt_tokens": 80, "completion_tokens": 20})],
    ),
    (
        "messages: cache reads and writes apart from input_tokens",
        MESSAGES,
        _message(),
        [
            _ok(
                {
                    "input_tokens": 40,
                    "cache_read_input_tokens": 2000,
                    "cache_creation_input_tokens": 500,
                    "output_tokens": 120,
                    "service_tier": "standard",
                }
            )
        ],
    ),
    (
        "messages: fast mode asked for and served",
        MESSAGES,
        _message(speed="fast"),
        [_ok({"input_tokens": 95, "output_tokens": 300, "speed": "fast"})],
    ),
    (
        "messages: fast mode asked for, the standard speed served",
        MESSAGES,
        _message(speed="fast"),
        [_ok({"input_tokens": 95, "output_tokens": 300, "speed": "standard", "service_tier": "standard"})],
    ),
    (
        "messages: a service_tier is asked for at the standard price; batch served",
        MESSAGES,
        _message(service_tier="standard_only"),
        [_ok({"input_tokens": 95, "output_tokens": 30, "service_tier": "batch"})],
    ),
    (
        "messages: a 529 overload charged nothing",
        MESSAGES,
        _message(),
        [{"status": 529, "body": _json(OVERLOADED)}],
    ),
    (
        "chat stream: the include_usage chunk, priced as a whole response (it names no tier: the one asked for)",
        CHAT,
        _chat(stream=True, stream_options={"include_usage": True}, service_tier="flex"),
        [
            {
                "stream": _openai_stream(
                    {"prompt_tokens": 500, "completion_tokens": 42, "prompt_tokens_details": {"cached_tokens": 400}}
                ),
                "failed": False,
            }
        ],
    ),
    (
        "chat stream with CRLF line ends",
        CHAT,
        _chat(stream=True, stream_options={"include_usage": True}),
        [{"stream": _openai_stream({"prompt_tokens": 17, "completion_tokens": 5}, newline="\r\n"), "failed": False}],
    ),
    (
        "chat stream without usage: its reservation",
        CHAT,
        _chat(stream=True),
        [{"stream": _openai_stream(None), "failed": False}],
    ),
    (
        "messages stream: message_start's input and cache tokens, message_delta's output",
        MESSAGES,
        _message(stream=True),
        [
            {
                "stream": _anthropic_stream(
                    {"input_tokens": 30, "cache_read_input_tokens": 100, "output_tokens": 1}, {"output_tokens": 77}
                ),
                "failed": False,
            }
        ],
    ),
    (
        "messages stream: a message_delta with its input figures",
        MESSAGES,
        _message(stream=True, speed="fast"),
        [
            {
                "stream": _anthropic_stream(
                    {"input_tokens": 30, "output_tokens": 1},
                    {"input_tokens": 31, "cache_creation_input_tokens": 9, "output_tokens": 60},
                ),
                "failed": False,
            }
        ],
    ),
    (
        "messages stream that broke off after message_start: the usage so far",
        MESSAGES,
        _message(stream=True),
        [{"stream": _anthropic_stream({"input_tokens": 30, "output_tokens": 1}, None, stop=False), "failed": True}],
    ),
    (
        "messages stream overloaded before any usage: nothing",
        MESSAGES,
        _message(stream=True),
        [{"stream": _events(("error", OVERLOADED)), "failed": False}],
    ),
    (
        "chat stream with a server error before any usage: its reservation",
        CHAT,
        _chat(stream=True),
        [{"stream": _events((None, {"error": {"message": "boom", "type": "server_error"}})), "failed": False}],
    ),
    (
        "messages stream that broke off before any usage: its reservation",
        MESSAGES,
        _message(stream=True),
        [{"stream": 'event: ping\ndata: {"type": "ping"}\n\n', "failed": True}],
    ),
    (
        "a tier without a price is refused before it is sent",
        CHAT,
        _chat(service_tier="batch"),
        [],
    ),
    (
        "a model without a price is refused before it is sent",
        MESSAGES,
        {**_message(), "model": "another-model"},
        [],
    ),
]


def _run(book: PriceBook, path: str, body: bytes, answers: list[dict[str, Any]]) -> dict[str, Any]:
    chosen = profile("anthropic" if path.rstrip("/").endswith("messages") else "openai")
    estimate = estimate_request(body, path)
    model = request_model(body, path)
    assert model is not None
    tier = chosen.requested_tier(body)
    out: dict[str, Any] = {"estimate": [estimate.input, estimate.output], "tier": tier}
    try:
        charge = Charge(book, chosen, model, tier, estimate)
    except ConfigError as error:
        return {**out, "refused": type(error).__name__}
    for answer in answers:
        if answer.get("broke_off"):
            charge.broke_off()
        elif "stream" in answer:
            usage = StreamUsage()
            usage.feed(answer["stream"].encode())
            usage.finish()
            _, spent, _ = stream_outcome(usage, answer["failed"])
            charge.streamed(spent, answer["failed"], usage.reported)
        else:
            charge.answered(answer["status"], {}, answer["body"].encode())
    return {**out, "most": charge.most, "charged": charge.charged, "tokens": charge.tokens}


def vectors() -> dict[str, Any]:
    book = PriceBook([Price(**figures) for figures in PRICES], table=False)
    cases = []
    for about, path, request, answers in CASES:
        body = json.dumps(request)
        found = _run(book, path, body.encode(), answers)
        cases.append({"about": about, "path": path, "body": body, "answers": answers, **found})
    return {
        "about": "governor._exchange.Charge: what a governed call reserves and settles "
        "(tests/conformance/generate_charges.py)",
        "prices": "tests/conformance/prices.json",
        "cases": cases,
    }


def text() -> str:
    data = vectors()
    rows = [f"  {json.dumps(case, separators=(',', ':'))}" for case in data.pop("cases")]
    head = [f" {json.dumps(key)}: {json.dumps(value)}," for key, value in data.items()]
    return "{\n" + "\n".join(head) + '\n "cases": [\n' + ",\n".join(rows) + "\n ]\n}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what would be written")
    args = parser.parse_args()
    fresh = text()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != fresh:
            print(f"{OUT} is stale: run python tests/conformance/generate_charges.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
