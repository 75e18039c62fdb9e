"""What a model request will cost.

A lease reserves an estimate of its tokens before the call and its report
settles the actual usage after it. This module makes the estimate from the
request body, for the request shapes of OpenAI (chat completions, the
Responses API, legacy completions, embeddings) and Anthropic (messages):
:func:`estimate_request`; and it holds the counting rule and helpers a
provider of another shape estimates with (governor/profiles/: Gemini's and
Bedrock's). The usage a response reports is read by
:func:`governor.profiles.usage_of`.

The estimate is deliberately simple and stated here so it can be checked:

- input: ``REQUEST_OVERHEAD`` + ``ceil(chars / CHARS_PER_TOKEN)`` +
  ``MESSAGE_OVERHEAD`` per message + ``MEDIA_TOKENS`` per image, audio or
  file part + one per token of a prompt sent as token ids. ``chars`` counts
  the text of the messages (OpenAI ``messages``, Anthropic ``messages`` and
  ``system``, the Responses API's ``input`` and ``instructions``, legacy
  ``prompt``, embeddings ``input``) and the JSON of ``tools``,
  ``functions``, ``response_format`` and the Responses API's ``text``
  format (the provider puts those in the prompt too). Base64 media is never
  counted as text.
- output: ``max_completion_tokens``, else ``max_output_tokens``, else
  ``max_tokens`` (the first that is a non-negative integer), times ``n``
  choices (``best_of`` for legacy completions); when none is given:
  ``DEFAULT_OUTPUT_TOKENS``, except legacy completions (the API's own
  default, ``LEGACY_COMPLETIONS_DEFAULT``) and embeddings (no output).
- a body that is not JSON (or not a JSON object): ``ceil(len(body) /
  CHARS_PER_TOKEN)`` input tokens, ``DEFAULT_OUTPUT_TOKENS`` output. No
  body at all estimates nothing.

Four characters a token is the providers' own rule of thumb for English;
code and other languages run denser, which the report's settlement corrects
(and the provider's headers clamp). Usage is what the provider says it
billed: OpenAI's ``prompt_tokens`` (cached ones included) and
``completion_tokens``; Anthropic's ``input_tokens`` plus
``cache_creation_input_tokens`` and ``cache_read_input_tokens`` (Anthropic
counts them apart; they were all read as input), and ``output_tokens``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from .budgets import MAX_TOKENS, Tokens

#: characters of text per token (the providers' rule of thumb for English)
CHARS_PER_TOKEN = 4
#: tokens a message costs besides its text (role, separators), as OpenAI's cookbook counts them
MESSAGE_OVERHEAD = 4
#: tokens every request costs besides its messages (the reply's priming)
REQUEST_OVERHEAD = 3
#: tokens one image, audio or file part is taken to cost
MEDIA_TOKENS = 1000
#: output tokens reserved when the request sets no maximum
DEFAULT_OUTPUT_TOKENS = 1024
#: legacy completions' own default max_tokens
LEGACY_COMPLETIONS_DEFAULT = 16
#: the fields read as a maximum of output tokens, in order of preference
OUTPUT_FIELDS = ("max_completion_tokens", "max_output_tokens", "max_tokens")
#: request fields whose text is the prompt
TEXT_FIELDS = ("messages", "system", "input", "instructions", "prompt")
#: request fields sent as JSON inside the prompt (tool and output schemas)
SCHEMA_FIELDS = ("tools", "functions", "response_format", "text")
#: keys of a content part that hold media (an image, audio, a file), never counted as text
MEDIA_KEYS = frozenset(
    {"image_url", "input_audio", "file", "file_data", "file_id", "file_url", "source", "image",
     "inlineData", "inline_data", "fileData", "document", "video"}
)  # fmt: skip
#: keys whose values are no prompt text (their cost is in MESSAGE_OVERHEAD)
UNCOUNTED_KEYS = frozenset({"role", "type", "cache_control"})
#: the most choices multiplied in (a larger n is an error the provider answers)
MAX_CHOICES = 128


def estimate_request(body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
    """The tokens a request will take: see the module docstring for the rule.

    ``body`` is the request body as sent (bytes or text of JSON) or already
    decoded; ``path`` the URL path, which tells legacy completions and
    embeddings apart (``/v1/completions``, ``/v1/embeddings``).
    """
    if body is None:
        return Tokens()
    if isinstance(body, Mapping):
        request: Any = body
        size = None
    else:
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
        if not raw.strip():
            return Tokens()
        size = len(raw)
        try:
            request = json.loads(raw)
        except (ValueError, RecursionError):
            request = None
    if not isinstance(request, Mapping):
        return Tokens(_bounded(math.ceil((size or 0) / CHARS_PER_TOKEN)), DEFAULT_OUTPUT_TOKENS)
    endpoint = _endpoint(path)
    return Tokens(_bounded(_input_tokens(request)), _bounded(_output_tokens(request, endpoint)))


def _decoded(body: bytes | str | Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, int]:
    """(the JSON object, None when it is not one; the body's size)."""
    if body is None:
        return None, 0
    if isinstance(body, Mapping):
        return body, 1
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    if not raw.strip():
        return None, 0
    try:
        request = json.loads(raw)
    except (ValueError, RecursionError):
        return None, len(raw)
    return (request, len(raw)) if isinstance(request, Mapping) else (None, len(raw))


def _json_size(value: Any, count: _Count) -> int:
    try:
        return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        count.walk(value)
        return 0


def _sum(count: _Count) -> int:
    return (
        REQUEST_OVERHEAD
        + math.ceil(count.chars / CHARS_PER_TOKEN)
        + MESSAGE_OVERHEAD * count.messages
        + MEDIA_TOKENS * count.media
        + count.token_ids
    )


def _endpoint(path: str) -> str:
    path = path.rstrip("/")
    if path.endswith("embeddings"):
        return "embeddings"
    if path.endswith("completions") and not path.endswith("chat/completions"):
        return "legacy"
    return "other"


def _input_tokens(request: Mapping[str, Any]) -> int:
    count = _Count()
    for name in TEXT_FIELDS:
        value = request.get(name)
        if value is None:
            continue
        if name in ("messages", "input") and isinstance(value, list):
            count.messages += sum(1 for item in value if isinstance(item, Mapping))
        count.walk(value)
    for name in SCHEMA_FIELDS:
        value = request.get(name)
        if value is None or (name == "text" and not isinstance(value, Mapping)):
            continue
        try:
            count.chars += len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):  # not JSON (a dict made by hand): its text
            count.walk(value)
    return (
        REQUEST_OVERHEAD
        + math.ceil(count.chars / CHARS_PER_TOKEN)
        + MESSAGE_OVERHEAD * count.messages
        + MEDIA_TOKENS * count.media
        + count.token_ids
    )


def _output_tokens(request: Mapping[str, Any], endpoint: str) -> int:
    if endpoint == "embeddings":
        return 0
    maximum = LEGACY_COMPLETIONS_DEFAULT if endpoint == "legacy" else DEFAULT_OUTPUT_TOKENS
    for name in OUTPUT_FIELDS:
        value = request.get(name)
        if _is_count(value):
            maximum = value
            break
    choices = 1
    for name in ("best_of", "n") if endpoint == "legacy" else ("n",):
        value = request.get(name)
        if _is_count(value) and 1 <= value <= MAX_CHOICES:
            choices = value
            break
    return maximum * choices


class _Count:
    """Characters of text, messages, media parts and token ids in a request."""

    def __init__(self) -> None:
        self.chars = 0
        self.messages = 0
        self.media = 0
        self.token_ids = 0

    def walk(self, value: Any, depth: int = 0) -> None:
        if depth > 64:  # a body nested this deep is no model request; what was counted stands
            return
        if isinstance(value, str):
            self.chars += len(value)
        elif isinstance(value, Mapping):
            if any(key in MEDIA_KEYS for key in value):
                self.media += 1
            for key, item in value.items():
                if key not in MEDIA_KEYS and key not in UNCOUNTED_KEYS:
                    self.walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, int) and not isinstance(item, bool):
                    self.token_ids += 1  # a prompt sent as token ids
                else:
                    self.walk(item, depth + 1)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bounded(value: int) -> int:
    return min(value, MAX_TOKENS)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a property that raises is a field that is not there
        return None


def _tokens(input_tokens: Any, output_tokens: Any) -> Tokens | None:
    if not (_is_count(input_tokens) and _is_count(output_tokens)):
        return None
    if input_tokens > MAX_TOKENS or output_tokens > MAX_TOKENS:
        return None
    return Tokens(int(input_tokens), int(output_tokens))


__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_OUTPUT_TOKENS",
    "MEDIA_TOKENS",
    "MESSAGE_OVERHEAD",
    "REQUEST_OVERHEAD",
    "estimate_request",
]
