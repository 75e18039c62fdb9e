"""The actual usage of a streamed response, and any error inside it.

:class:`StreamUsage` is fed a response's server-sent events chunk by chunk
as they pass (the governed transport does it), and reads the usage the
stream reports (with :func:`governor.profiles.usage_of`, in any provider's shape) and the first
error event (an overload that starts mid-stream), classified as
:func:`governor.classify.classify_http` says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .budgets import Tokens
from .classify import Classification, classify_http
from .estimate import _is_count, _tokens
from .profiles import usage_of

#: an event whose data grows beyond this is dropped (counted in StreamUsage.dropped)
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: event names (or data "type"s) that carry usage or an error, in either provider's stream
_USAGE_EVENTS = frozenset({"message_start", "message_delta", "response.completed", "response.incomplete"})


class StreamUsage:
    """Usage and errors read from a server-sent-events stream as it passes.

    Feed it the raw bytes of the response body in whatever chunks they
    arrive (:meth:`feed`); call :meth:`finish` when the stream ends, so a
    last event without its closing blank line is read too. It reads:

    - OpenAI chat and legacy completions: ``data: {...}`` chunks; the one
      whose ``usage`` is set (the last, with ``stream_options:
      {"include_usage": true}``) gives the usage; ``data: [DONE]`` ends it.
    - the Responses API: ``response.completed`` / ``response.incomplete``
      (``response.usage``); ``error`` and ``response.failed`` are errors.
    - Anthropic messages: ``message_start`` (``message.usage``: input and
      cache tokens, the first output count) and ``message_delta``
      (``usage.output_tokens``, cumulative, and the input figures when it
      carries them); ``message_stop`` ends it.
    - an ``error`` event (Anthropic's ``{"type": "error", "error":
      {"type": "overloaded_error", ...}}``) or a chunk with an ``error``
      object: :attr:`error` is its :class:`~governor.classify.Classification`
      (rate-limited for an overload or a throttle, as ``classify_http``
      says), the first one seen.

    Nothing here raises on bad input: an event that is not JSON is skipped.
    """

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.usage: Tokens | None = None  #: the usage the stream reported so far, if any
        #: what :attr:`usage` was read from, in the shape of a whole response (an OpenAI chunk, a
        #: Responses ``response``, Gemini's chunk; Anthropic's ``{"usage": ...}`` of message_start
        #: updated by each message_delta): its price is read from it, cached tokens apart
        #: (:meth:`governor.profiles.Profile.priced_usage`), as a response read whole
        self.reported: Mapping[str, Any] | None = None
        self.error: Classification | None = None  #: the first error event, classified
        self.done = False  #: the stream said it was complete ([DONE], message_stop, response.completed)
        self.events = 0  #: events dispatched
        self.dropped = 0  #: events skipped for their size
        self._max = max_event_bytes
        self._buffer = b""  # an incomplete line
        self._pending_cr = False  # the last chunk ended in CR: a LF that starts the next one belongs to it
        self._event: str | None = None
        self._data: list[bytes] = []
        self._size = 0
        self._oversized = False

    def feed(self, chunk: bytes) -> None:
        """Read the next piece of the stream (any split, even mid-line or mid-character)."""
        if not chunk:
            return
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        data = self._buffer + chunk if self._buffer else chunk
        start, length = 0, len(data)
        # The next CR and LF at or after start; -1 once there is none left (never searched again).
        cr, lf = data.find(b"\r"), data.find(b"\n")
        while start < length:
            if cr != -1 and cr < start:
                cr = data.find(b"\r", start)
            if lf != -1 and lf < start:
                lf = data.find(b"\n", start)
            if cr == -1 and lf == -1:
                break
            if lf == -1 or (cr != -1 and cr < lf):
                end, nxt = cr, cr + 1
                if nxt == length:
                    self._pending_cr = True
                elif data[nxt : nxt + 1] == b"\n":
                    nxt += 1
            else:
                end, nxt = lf, lf + 1
            self._line(data[start:end])
            start = nxt
        rest = data[start:]
        if len(rest) > self._max:  # a line that never ends: drop it, keep reading
            self._oversized = True
            rest = b""
        self._buffer = rest

    def finish(self) -> None:
        """The stream ended: read what is left (a last line, an event not closed by a blank line)."""
        if self._buffer:
            self._line(self._buffer)
            self._buffer = b""
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        if line[:1] == b":":  # a comment (keep-alive)
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self._max:
                self._oversized = True
                self._data.clear()
            elif not self._oversized:
                self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    def _dispatch(self) -> None:
        event, data, oversized = self._event, self._data, self._oversized
        self._event, self._data, self._size, self._oversized = None, [], 0, False
        if oversized:
            self.dropped += 1
            return
        if not data:
            return
        self.events += 1
        text = b"\n".join(data)
        if text.startswith(b"[DONE]"):
            self.done = True
            return
        if (
            event not in _USAGE_EVENTS
            and event != "error"
            and b'"usage' not in text  # usage, usageMetadata (Gemini)
            and b'"error"' not in text
        ):
            if event in ("message_stop",):
                self.done = True
            return  # a content chunk: nothing to read, and no need to decode it
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError):
            return
        if isinstance(payload, Mapping):
            self._read(event, payload)

    def _read(self, event: str | None, payload: Mapping[str, Any]) -> None:
        kind = event if event is not None else payload.get("type")
        if kind == "message_start":
            message = payload.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
            found = usage_of(usage)
            if found is not None and isinstance(usage, Mapping):
                self.usage, self.reported = found, {"usage": dict(usage)}
        elif kind == "message_delta":
            self._delta(payload.get("usage"))
        elif isinstance(kind, str) and kind.startswith("response.") and isinstance(payload.get("response"), Mapping):
            response = payload["response"]
            found = usage_of(response.get("usage"))
            if found is not None:
                self.usage, self.reported = found, response
            if kind in ("response.completed", "response.incomplete"):
                self.done = True
            if kind == "response.failed":
                self._error({"error": response.get("error")})
        elif kind == "error" or isinstance(payload.get("error"), Mapping):
            self._error(payload)
        else:  # a chunk with the figures so far (OpenAI's include_usage one; a provider's own shape, as Gemini's)
            found = usage_of(payload)
            if found is not None:
                self.usage, self.reported = found, payload

    def _delta(self, usage: Any) -> None:
        """Anthropic's message_delta: cumulative counts, output always, input when it says."""
        if not isinstance(usage, Mapping):
            return
        output = usage.get("output_tokens")
        if not _is_count(output):
            return
        current = self.usage if self.usage is not None else Tokens()
        # the figures so far, each replaced by the delta's when it gives one (cache reads and writes too)
        before = self.reported.get("usage") if self.reported is not None else None
        merged = {
            **(before if isinstance(before, Mapping) else {}),
            **{k: v for k, v in usage.items() if v is not None},
        }
        self.reported = {"usage": merged}
        if usage.get("input_tokens") is not None:
            found = usage_of(usage)
            if found is not None:
                self.usage = found
                return
        self.usage = _tokens(current.input, output) or current

    def _error(self, body: Mapping[str, Any]) -> None:
        if self.error is None:
            self.error = classify_http(200, None, dict(body))


__all__ = ["MAX_EVENT_BYTES", "StreamUsage"]
