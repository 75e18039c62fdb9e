"""A mock LLM provider: a real HTTP server in the OpenAI and Anthropic shapes.

It serves ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic) and ``GET /v1/models``, so the real ``openai`` and ``anthropic``
SDKs, or any HTTP client, can call it, streamed or not, and behaves like a
throttled provider account:

- a *hidden* concurrency limit: a request that arrives while ``limit``
  requests are being served is refused with 429;
- rate limits per ``rate_period`` (60 s by default, shorter in tests):
  requests (``rpm``), tokens (``tpm``: input + output, OpenAI's and older
  Anthropic models' limit), input tokens and output tokens apart
  (``input_tpm``, ``output_tpm``: Anthropic's). Token limits are token
  buckets refilled continuously at ``limit / rate_period`` that hold only
  ``burst`` of a period's worth, so a fleet cannot spend a minute's budget
  in one second. ``rpm`` is the same kind of bucket with ``rpm_bucket``,
  else a strict sliding window (a request counts for ``rate_period`` after
  it arrived). Refused requests may count against ``rpm`` too
  (``rpm_counts_refused``), as OpenAI documents: a retry storm uses up the
  budget of the calls that would succeed;
- token costs as the providers count them: a request is charged, when it
  arrives, its prompt and its ``max_tokens`` (OpenAI counts ``max_tokens``
  against the tokens limit; Anthropic estimates output tokens from
  ``max_tokens`` at the start), and the estimate is corrected to the real
  completion when the answer ends;
- rate-limit headers on every answer, 429s included: OpenAI's
  ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (resets as Go
  durations: ``12ms``, ``1s``, ``6m0s``) on chat completions, Anthropic's
  ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
  {limit,remaining,reset}`` (resets in RFC 3339, token remainders rounded
  to the nearest thousand) on messages. ``limit`` is the per-period figure,
  ``remaining`` what the bucket holds now, ``reset`` when it is full again;
- prompt sizes read from the request (:func:`prompt_tokens`), completion
  sizes lognormal with a long tail (or fixed) capped by ``max_tokens``, and
  a service time that grows with the completion (a lognormal base, the
  time to the first token, plus ``per_token_latency`` per token);
- streaming in both formats (OpenAI chunks with ``data: [DONE]`` and the
  final usage chunk with ``stream_options.include_usage``; Anthropic's
  ``message_start`` ... ``message_stop`` events), with an optional overload
  error inside a stream (``stream_error_rate``);
- a Retry-After on each throttling 429: ``"auto"`` (when the request would
  fit: a slot frees or the bucket holds its cost), a fixed number of
  seconds, or ``"none"`` (some providers send nothing);
- quota exhaustion: after ``quota`` accepted requests every request gets
  429 ``insufficient_quota`` (OpenAI) or 400 "credit balance is too low"
  (Anthropic): billing, not a throttle;
- a schedule that changes the hidden limit mid-run (``((t1, 20), (t2, 40))``:
  seconds after the start of the run, new limit).

It records what really happened: every response (time and kind), the
refusals by reason, the tokens served and when (so a benchmark can compare
token goodput with the ideal, the token refill rate), the buckets' levels,
and the *offered* concurrency (requests inside the server, served or being
turned away) against the limit, so a benchmark can say how far and how long
a fleet pushed above the hidden limit.

Besides the API it has a small control surface under ``/sim/`` for a
benchmark driver in another process: ``GET /sim/config``, ``POST /sim/reset``
(start a new run: counters cleared, buckets full, schedule restarted),
``GET /sim/stats`` (everything recorded since the reset) and ``GET /sim/live``.

aiohttp is imported here, so this module needs the ``bench`` extra.
"""

from __future__ import annotations

import asyncio
import binascii
import itertools
import json
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from governor.errors import ConfigError

#: what a response was, as recorded in the log: served; refused for concurrency, for the
#: requests limit, for a token limit, for the quota; an overload error inside a stream;
#: a stream the client closed before its end
OK, LIMITED, RATE, QUOTA, TOKENS, OVERLOADED, ABANDONED = (
    "ok", "limited", "rpm", "quota", "tpm", "overloaded", "abandoned",
)  # fmt: skip

#: the rate limits, by the names the governor gives its budgets
REQUESTS, TOTAL, INPUT, OUTPUT = "requests", "tokens", "input_tokens", "output_tokens"
KINDS = (REQUESTS, TOTAL, INPUT, OUTPUT)
#: why a request was refused: the concurrency limit or the rate limit that had no room
#: ... or at random (``noise``), whatever the load
NOISE = "noise"
REASONS = ("concurrency", *KINDS, NOISE)

#: the API shapes served
OPENAI, ANTHROPIC, GEMINI, BEDROCK, AZURE = "openai", "anthropic", "gemini", "bedrock", "azure"
#: the shapes that send no rate-limit headers (the provider's own behaviour)
HEADERLESS = (GEMINI, BEDROCK)

#: a request header a benchmark may set to an opaque tag of its own: the arrival of
#: each accepted request so tagged is recorded (the admission wait of that call)
CALL_TAG = "x-sim-call"

#: the prompt-size rule (see :func:`prompt_tokens`)
CHARS_PER_TOKEN = 4
MESSAGE_TOKENS = 4


@dataclass(frozen=True)
class ProviderConfig:
    """How the mock provider behaves. Times are in seconds."""

    #: the hidden concurrency limit (requests served at once)
    limit: int = 40
    #: mean of the lognormal base service time (a stream's time to its first token)
    latency_mean: float = 0.2
    #: shape (sigma of the underlying normal) of the base service time; 0: constant
    latency_sigma: float = 0.5
    #: service time added per completion token (a long answer takes longer)
    per_token_latency: float = 0.0
    #: how long a refusal takes (a real 429 is quick, not instant)
    reject_latency: float = 0.005
    #: Retry-After sent with a throttling 429: "auto", "none" or seconds
    retry_after: str | float = "auto"
    #: requests accepted per ``rate_period`` (None: no requests limit)
    rpm: int | None = None
    #: the period of every rate limit (providers: a minute)
    rate_period: float = 60.0
    #: refused requests count against ``rpm`` too ("unsuccessful requests contribute to your
    #: per-minute limit", as OpenAI documents), so a retry storm uses up the budget
    rpm_counts_refused: bool = False
    #: ``rpm`` is a token bucket like the token limits (False: a strict sliding window)
    rpm_bucket: bool = False
    #: tokens (input + output) per ``rate_period`` (None: no such limit)
    tpm: int | None = None
    #: input tokens per ``rate_period`` (Anthropic's ITPM; None: no such limit)
    input_tpm: int | None = None
    #: output tokens per ``rate_period`` (Anthropic's OTPM; None: no such limit)
    output_tpm: int | None = None
    #: the share of a period's worth a bucket holds when full (0 < burst <= 1)
    burst: float = 0.25
    #: Anthropic answers round the token remainders to the nearest thousand, as Anthropic does
    round_remaining: bool = True
    #: Anthropic answers carry anthropic-ratelimit-tokens-*: the ``tpm`` bucket when there is
    #: one, else the most restrictive of the input and output buckets, as Anthropic documents
    anthropic_tokens_header: bool = True
    #: requests accepted in all before every answer is a billing error (None: unlimited)
    quota: int | None = None
    #: requests accepted per day before every answer is a per-day quota error (Gemini's requests per
    #: day, reset at midnight Pacific time; None: unlimited)
    daily_quota: int | None = None
    #: Azure answers put -1 and 0 in some rate-limit headers, as some Azure APIs do
    azure_odd_headers: bool = True
    #: share of calls refused at random whatever the load (a shared-capacity 429: another
    #: tenant's traffic, an overload burst), before any limit is looked at (0: none)
    noise: float = 0.0
    #: Retry-After of a random refusal, seconds (None: the refusal names no delay)
    noise_retry_after: float | None = None
    #: ((seconds after the run's start, new hidden limit), ...)
    schedule: tuple[tuple[float, int], ...] = ()
    #: completion tokens of each answer when ``completion_mean`` is None (capped by max_tokens)
    completion_tokens: int = 16
    #: mean of the lognormal completion size in tokens (None: ``completion_tokens`` each)
    completion_mean: float | None = None
    #: shape of the lognormal completion size (1.0: a long tail)
    completion_sigma: float = 1.0
    #: the output cap, and OpenAI's output estimate, of a request without max_tokens
    default_max_tokens: int = 4096
    #: tokens per streamed delta
    stream_chunk_tokens: int = 8
    #: share of streams cut by an overload error after part of the answer
    stream_error_rate: float = 0.0
    #: trace sampling period
    sample_interval: float = 0.05
    #: seed of the latency and size generator (None: random)
    seed: int | None = None

    def __post_init__(self) -> None:
        _int_at_least("limit", self.limit, 0)
        _number_at_least("latency_mean", self.latency_mean, 0.0, strict=True)
        _number_at_least("latency_sigma", self.latency_sigma, 0.0)
        _number_at_least("per_token_latency", self.per_token_latency, 0.0)
        _number_at_least("reject_latency", self.reject_latency, 0.0)
        if isinstance(self.retry_after, str):
            if self.retry_after not in ("auto", "none"):
                raise ConfigError(f"retry_after must be 'auto', 'none' or seconds >= 0, got {self.retry_after!r}")
        else:
            _number_at_least("retry_after", self.retry_after, 0.0)
        for name in ("rpm", "tpm", "input_tpm", "output_tpm"):
            if getattr(self, name) is not None:
                _int_at_least(name, getattr(self, name), 1)
        _number_at_least("rate_period", self.rate_period, 0.0, strict=True)
        for name in ("rpm_counts_refused", "rpm_bucket", "round_remaining", "anthropic_tokens_header"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        _number_at_least("burst", self.burst, 0.0, strict=True)
        if self.burst > 1:
            raise ConfigError(
                f"burst is the share of a period's worth a bucket holds: 0 < burst <= 1, got {self.burst!r}"
            )
        if self.quota is not None:
            _int_at_least("quota", self.quota, 0)
        if self.daily_quota is not None:
            _int_at_least("daily_quota", self.daily_quota, 0)
        if not isinstance(self.azure_odd_headers, bool):
            raise ConfigError(f"azure_odd_headers must be true or false, got {self.azure_odd_headers!r}")
        last = -1.0
        for entry in self.schedule:
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(f"schedule entries must be (seconds, limit) pairs, got {entry!r}")
            at, limit = entry
            _number_at_least("schedule time", at, 0.0)
            _int_at_least("schedule limit", limit, 0)
            if at <= last:
                raise ConfigError(f"schedule times must increase, got {at!r} after {last!r}")
            last = at
        _int_at_least("completion_tokens", self.completion_tokens, 1)
        if self.completion_mean is not None:
            _number_at_least("completion_mean", self.completion_mean, 1.0)
        _number_at_least("completion_sigma", self.completion_sigma, 0.0)
        _int_at_least("default_max_tokens", self.default_max_tokens, 1)
        _int_at_least("stream_chunk_tokens", self.stream_chunk_tokens, 1)
        _number_at_least("stream_error_rate", self.stream_error_rate, 0.0)
        if self.stream_error_rate > 1:
            raise ConfigError(f"stream_error_rate is a probability (0 to 1), got {self.stream_error_rate!r}")
        _number_at_least("noise", self.noise, 0.0)
        if self.noise >= 1:
            raise ConfigError(f"noise is the share of calls refused at random: 0 <= noise < 1, got {self.noise!r}")
        if self.noise_retry_after is not None:
            _number_at_least("noise_retry_after", self.noise_retry_after, 0.0)
        _number_at_least("sample_interval", self.sample_interval, 0.001)
        if self.seed is not None:
            _int_at_least("seed", self.seed, 0)

    def limit_at(self, t: float) -> int:
        """The hidden limit ``t`` seconds after the run's start."""
        limit = self.limit
        for at, new in self.schedule:
            if t >= at:
                limit = new
        return limit

    def rate_limits(self) -> dict[str, int]:
        """The configured rate limits per period, by kind (``requests``, ``tokens``, ...)."""
        values = {REQUESTS: self.rpm, TOTAL: self.tpm, INPUT: self.input_tpm, OUTPUT: self.output_tpm}
        return {kind: value for kind, value in values.items() if value is not None}

    def refill_rate(self, kind: str) -> float | None:
        """The refill rate of one rate limit, per second (None: no such limit): the ideal
        throughput of a fleet bound by it."""
        value = self.rate_limits().get(kind)
        return None if value is None else value / self.rate_period

    def capacity(self, kind: str) -> float | None:
        """What the bucket of one rate limit holds when full (None: no such limit)."""
        value = self.rate_limits().get(kind)
        return None if value is None else max(1.0, value * self.burst)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schedule"] = [list(entry) for entry in self.schedule]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProviderConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown provider setting(s): {', '.join(sorted(unknown))}")
        values = dict(data)
        if "schedule" in values:
            values["schedule"] = tuple((float(at), int(limit)) for at, limit in values["schedule"])
        return cls(**values)


def parse_schedule(text: str) -> tuple[tuple[float, int], ...]:
    """``"15:20,30:40"`` -> ((15.0, 20), (30.0, 40)): at 15 s the limit becomes 20, ..."""
    entries: list[tuple[float, int]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        at, sep, limit = part.partition(":")
        try:
            if not sep:
                raise ValueError(part)
            entries.append((float(at), int(limit)))
        except ValueError:
            raise ConfigError(f"schedule entry {part!r} is not SECONDS:LIMIT (e.g. 15:20,30:40)") from None
    return tuple(entries)


def parse_retry_after(text: str) -> str | float:
    """The CLI's ``--retry-after``: 'auto', 'none' or seconds."""
    if text in ("auto", "none"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"retry-after must be auto, none or seconds, got {text!r}") from None


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")


def _number_at_least(name: str, value: object, low: float, strict: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < low or (strict and value == low):  # type: ignore[operator]
        raise ConfigError(f"{name} must be a number {'>' if strict else '>='} {low}, got {value!r}")


# -- formats ------------------------------------------------------------------------------------


def go_duration(seconds: float) -> str:
    """A duration as Go prints one, which is how OpenAI sends its resets: ``0s``,
    ``12ms``, ``1s``, ``1.5s``, ``6m0s``, ``1h2m3.5s`` (rounded up to the millisecond,
    so a client that waits that long finds the bucket full)."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = (f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".")) + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def rfc3339(wall: float) -> str:
    """Unix time as Anthropic sends its resets: RFC 3339 in UTC, whole seconds (rounded up)."""
    return datetime.fromtimestamp(math.ceil(wall), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def round_thousand(value: int) -> int:
    """To the nearest thousand (half up), as Anthropic rounds its token remainders."""
    return (value + 500) // 1000 * 1000


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's size in tokens, by one documented rule for both shapes:
    ``ceil(chars / 4) + 4`` per message (its text: a string content, or the
    ``text`` of its content blocks, other blocks by their JSON), the same for an
    Anthropic ``system`` prompt, and ``ceil(chars / 4)`` of the JSON of ``tools``.
    At least 1."""
    total = 0
    for message in body.get("messages") or ():
        if isinstance(message, Mapping):
            total += _text_tokens(message.get("content")) + MESSAGE_TOKENS
    if body.get("system"):
        total += _text_tokens(body["system"]) + MESSAGE_TOKENS
    if body.get("tools"):
        total += math.ceil(len(json.dumps(body["tools"])) / CHARS_PER_TOKEN)
    return max(1, total)


def _text_tokens(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):
        chars = 0
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                chars += len(block["text"])
            else:
                chars += len(json.dumps(block))
    else:
        chars = len(json.dumps(content))
    return math.ceil(chars / CHARS_PER_TOKEN)


# -- the rate limits ---------------------------------------------------------------------------------


class Bucket:
    """A token bucket: ``capacity`` at most, refilled continuously at ``limit / period``
    per second. Times are the run's clock (seconds). A forced charge (a refused request
    that counts) may take it below zero, to ``-capacity`` at most: a debt the refill
    pays back before anything fits again."""

    def __init__(self, kind: str, limit: int, period: float, burst: float, now: float) -> None:
        self.kind = kind
        self.limit = limit
        self.rate = limit / period
        self.capacity = max(1.0, limit * burst)
        self.level = self.capacity
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.level = min(self.capacity, self.level + (now - self._at) * self.rate)
            self._at = now

    def fits(self, amount: float, now: float) -> bool:
        self._refill(now)
        return self.level >= amount

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level = max(-self.capacity, self.level - amount)

    def give(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` fits (inf: never, it is above the capacity)."""
        self._refill(now)
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level) / self.rate)

    def full_in(self, now: float) -> float:
        """Seconds until the bucket is full again (what a reset header says)."""
        self._refill(now)
        return max(0.0, (self.capacity - self.level) / self.rate)

    def remaining(self, now: float) -> int:
        self._refill(now)
        return max(0, math.floor(self.level + 1e-9))

    def fraction(self, now: float) -> float:
        self._refill(now)
        return self.level / self.capacity


class Window:
    """The strict sliding window of requests: a request counts for ``period`` after it
    arrived, at most ``limit`` count at once. The same interface as :class:`Bucket`."""

    def __init__(self, limit: int, period: float) -> None:
        self.kind = REQUESTS
        self.limit = limit
        self.period = period
        self.capacity = float(limit)
        self._starts: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._starts and self._starts[0] <= now - self.period:
            self._starts.popleft()

    def fits(self, amount: float, now: float) -> bool:
        self._expire(now)
        return len(self._starts) < self.limit

    def take(self, amount: float, now: float) -> None:
        self._starts.append(now)

    def give(self, amount: float, now: float) -> None:
        """A request is never given back."""

    def wait(self, amount: float, now: float) -> float:
        """Seconds until a request fits: 0 with room, else when the oldest request
        counted leaves the window."""
        self._expire(now)
        if len(self._starts) < self.limit:
            return 0.0
        return max(0.0, self._starts[0] + self.period - now)

    def full_in(self, now: float) -> float:
        self._expire(now)
        return max(0.0, self._starts[-1] + self.period - now) if self._starts else 0.0

    def remaining(self, now: float) -> int:
        self._expire(now)
        return max(0, self.limit - len(self._starts))

    def fraction(self, now: float) -> float:
        return self.remaining(now) / self.limit

    @property
    def level(self) -> float:
        return float(self.limit - len(self._starts))


Limit = Bucket | Window


@dataclass(frozen=True)
class Cost:
    """What a request is charged when it arrives: its prompt and its output estimate."""

    input: int
    output: int

    def of(self, kind: str) -> int:
        if kind == REQUESTS:
            return 1
        if kind == TOTAL:
            return self.input + self.output
        return self.input if kind == INPUT else self.output


# -- the record -----------------------------------------------------------------------------------


@dataclass
class RunRecord:
    """Everything the provider saw since the last reset. Times are seconds
    since the run's start (``started_wall`` in Unix time)."""

    started_wall: float
    #: one (arrival, end, kind) per response, in order of completion
    responses: list[tuple[float, float, str]] = field(default_factory=list)
    #: (t, limit, served, offered, peak offered since the last sample, ok, limited)
    trace: list[tuple[float, int, int, int, int, int, int]] = field(default_factory=list)
    #: the largest excess of offered concurrency over the limit
    peak_over: int = 0
    #: total time with offered concurrency above the limit
    time_over: float = 0.0
    #: the longest single stretch of it
    longest_over: float = 0.0
    #: the largest number of requests served at once
    peak_served: int = 0
    #: requests accepted (served, or being served)
    accepted: int = 0
    #: requests refused, by reason: "concurrency", or the rate limit that had no room
    refused: dict[str, int] = field(default_factory=dict)
    #: one (end, prompt tokens, completion tokens) per answer served whole, in order of completion
    served: list[tuple[float, int, int]] = field(default_factory=list)
    #: tokens of answers cut short (overload inside a stream, a client gone): spent, not served
    wasted_tokens: int = 0
    #: one (tag, arrival) per accepted request that carried a ``x-sim-call`` tag
    tagged: list[tuple[str, float]] = field(default_factory=list)
    #: the rate limits' buckets sampled: (t, level of each kind in ``level_kinds``)
    levels: list[tuple[float, ...]] = field(default_factory=list)
    level_kinds: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        out = {OK: 0, LIMITED: 0, RATE: 0, QUOTA: 0, TOKENS: 0}
        for _, _, kind in self.responses:
            out[kind] = out.get(kind, 0) + 1
        return out

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of the answers served whole."""
        return sum(p for _, p, _ in self.served)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of the answers served whole."""
        return sum(c for _, _, c in self.served)

    def tokens_between(self, start: float, end: float, kind: str = TOTAL) -> int:
        """Tokens of the answers served whole that ended in [start, end): ``tokens``
        (prompt + completion), ``input_tokens`` or ``output_tokens``."""
        total = 0
        for t, p, c in self.served:
            if start <= t < end:
                total += p + c if kind == TOTAL else (p if kind == INPUT else c)
        return total

    def throughput(self, step: float = 1.0, kind: str = TOTAL, end: float | None = None) -> list[int]:
        """Tokens served whole per ``step`` seconds from the run's start (one figure
        per step, up to ``end`` or the last answer)."""
        last = end if end is not None else max((t for t, _, _ in self.served), default=0.0)
        steps = max(0, math.ceil(last / step - 1e-9))
        out = [0] * steps
        for t, p, c in self.served:
            k = math.floor(t / step)
            if 0 <= k < steps:
                out[k] += p + c if kind == TOTAL else (p if kind == INPUT else c)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "started_wall": self.started_wall,
            "responses": [[round(a, 5), round(b, 5), k] for a, b, k in self.responses],
            "trace": [[round(row[0], 4), *row[1:]] for row in self.trace],
            "peak_over": self.peak_over,
            "time_over": round(self.time_over, 5),
            "longest_over": round(self.longest_over, 5),
            "peak_served": self.peak_served,
            "counts": self.counts(),
            "accepted": self.accepted,
            "refused": dict(self.refused),
            "served": [[round(t, 5), p, c] for t, p, c in self.served],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "wasted_tokens": self.wasted_tokens,
            "tagged": [[tag, round(t, 5)] for tag, t in self.tagged],
            "levels": {
                "columns": ["t", *self.level_kinds],
                "rows": [[round(row[0], 4), *(round(x, 1) for x in row[1:])] for row in self.levels],
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        levels = data.get("levels") or {"columns": ["t"], "rows": []}
        return cls(
            started_wall=float(data["started_wall"]),
            responses=[(float(a), float(b), str(k)) for a, b, k in data["responses"]],
            trace=[tuple(row) for row in data["trace"]],  # type: ignore[misc]
            peak_over=int(data["peak_over"]),
            time_over=float(data["time_over"]),
            longest_over=float(data["longest_over"]),
            peak_served=int(data["peak_served"]),
            accepted=int(data.get("accepted", 0)),
            refused={str(k): int(v) for k, v in (data.get("refused") or {}).items()},
            served=[(float(t), int(p), int(c)) for t, p, c in data.get("served", [])],
            wasted_tokens=int(data.get("wasted_tokens", 0)),
            tagged=[(str(tag), float(t)) for tag, t in data.get("tagged", [])],
            levels=[tuple(float(x) for x in row) for row in levels["rows"]],
            level_kinds=tuple(levels["columns"][1:]),
        )


# -- one request ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """What one valid request asks for."""

    api: str
    model: str
    prompt: int
    #: the output cap: max_tokens (or max_completion_tokens), else the default
    max_tokens: int
    stream: bool
    include_usage: bool

    @property
    def cost(self) -> Cost:
        return Cost(input=self.prompt, output=self.max_tokens)


class MockProvider:
    """The mock provider: ``await start()``, point clients at :attr:`url`,
    ``reset()`` before each run, read :attr:`record`, ``await stop()``."""

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self.config = config or ProviderConfig()
        self._rng = random.Random(self.config.seed)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._url: str | None = None
        self._begin(time.time())

    # -- lifecycle ----------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL (``http://host:port``); OpenAI clients use ``url + "/v1"``,
        Anthropic clients ``url`` itself."""
        if self._url is None:
            raise RuntimeError("the provider is not started")
        return self._url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port); returns the base URL."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/chat/completions", self._chat),
                web.post("/v1/messages", self._messages),
                web.post("/openai/deployments/{deployment}/chat/completions", self._azure),
                web.post("/{version}/models/{call}", self._gemini),
                web.post("/{version}/publishers/google/models/{call}", self._gemini),
                web.post(
                    "/{version}/projects/{project}/locations/{location}/publishers/google/models/{call}", self._gemini
                ),
                web.post("/model/{model}/converse", self._converse),
                web.post("/model/{model}/converse-stream", self._converse),
                web.get("/v1/models", self._models),
                web.get("/sim/config", self._get_config),
                web.post("/sim/reset", self._post_reset),
                web.get("/sim/stats", self._get_stats),
                web.get("/sim/live", self._get_live),
                web.get("/healthz", self._health),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        bound = self._runner.addresses[0][1]  # the real port when port=0
        self._url = f"http://{host}:{bound}"
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())
        return self._url

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass
            self._sampler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> MockProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def reset(self, config: ProviderConfig | None = None, start_at: float | None = None) -> None:
        """Begin a new run at Unix time ``start_at`` (default now): counters
        cleared, buckets full and the schedule restarted; requests still being
        served finish but are not recorded. ``config`` replaces the settings."""
        if config is not None:
            self.config = config
            self._rng = random.Random(config.seed)
        self._begin(time.time() if start_at is None else start_at)

    def _begin(self, start_wall: float) -> None:
        self._run = object()  # requests of an earlier run carry another token
        config = self.config
        self._t0 = time.monotonic() + (start_wall - time.time())
        now = self.now()
        self._limits: dict[str, Limit] = {}
        for kind, value in config.rate_limits().items():
            if kind == REQUESTS and not config.rpm_bucket:
                self._limits[kind] = Window(value, config.rate_period)
            else:
                self._limits[kind] = Bucket(kind, value, config.rate_period, config.burst, now)
        self.record = RunRecord(started_wall=start_wall, level_kinds=tuple(self._limits))
        self._served = 0
        self._offered = 0
        self._accepted = 0
        self._ok = 0
        self._limited = 0
        self._ends: list[float] = []  # service end times of the requests being served
        self._limit = config.limit_at(0.0)
        self._last_change = 0.0
        self._over_since: float | None = None
        self._interval_peak = 0

    # -- time and accounting ------------------------------------------------------

    def now(self) -> float:
        """Seconds since the run's start."""
        return time.monotonic() - self._t0

    def _account(self, t: float) -> None:
        """Bring the over-limit bookkeeping up to ``t``, applying any limit
        change of the schedule at its own time; call before every change."""
        t = max(t, self._last_change)
        for at, new in self.config.schedule:
            if self._last_change < at <= t and new != self._limit:
                self._settle(at)
                self._limit = new
                self._mark(at)
        self._settle(t)

    def _settle(self, t: float) -> None:
        """Count [last change, t] as over the limit if it was."""
        if self._over_since is not None:
            self.record.time_over += t - self._last_change
            self.record.longest_over = max(self.record.longest_over, t - self._over_since)
        self._last_change = t

    def _mark(self, t: float) -> None:
        """After a change at ``t``: start or end a stretch above the limit."""
        if self._offered > self._limit:
            if self._over_since is None:
                self._over_since = t
            self.record.peak_over = max(self.record.peak_over, self._offered - self._limit)
        else:
            self._over_since = None

    def _offer(self, t: float, delta: int) -> None:
        self._account(t)
        self._offered += delta
        self._interval_peak = max(self._interval_peak, self._offered)
        self._mark(t)

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sample_interval)
            t = self.now()
            if t < 0:
                continue
            self._account(t)
            self.record.trace.append(
                (t, self._limit, self._served, self._offered, self._interval_peak, self._ok, self._limited)
            )
            self._interval_peak = self._offered
            if self._limits:
                for limit in self._limits.values():
                    limit.fits(0, t)  # brings a bucket's level up to t
                self.record.levels.append((t, *(limit.level for limit in self._limits.values())))

    # -- the API -------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, OPENAI)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, ANTHROPIC)

    async def _azure(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, AZURE)

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, GEMINI)

    async def _converse(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, BEDROCK)

    async def _handle(self, request: web.Request, api: str) -> web.StreamResponse:
        run = self._run
        arrival = self.now()
        self._offer(arrival, +1)
        try:
            return await self._answer(request, run, arrival, api)
        finally:
            if run is self._run:
                self._offer(self.now(), -1)

    async def _answer(self, request: web.Request, run: object, arrival: float, api: str) -> web.StreamResponse:
        call, problem = await _read_body(request, api, self.config)
        if problem is not None:
            return problem
        assert call is not None
        config = self.config
        now = arrival
        if config.quota is not None and self._accepted >= config.quota:
            return await self._refuse(run, arrival, call, QUOTA, None, None)
        if config.daily_quota is not None and self._accepted >= config.daily_quota:
            return await self._refuse(run, arrival, call, QUOTA, "day", None)
        if config.noise > 0 and self._rng.random() < config.noise:
            return await self._refuse(run, arrival, call, LIMITED, NOISE, config.noise_retry_after)
        cost = call.cost
        for kind, limit in self._limits.items():
            if not limit.fits(cost.of(kind), now):
                wait = max(lim.wait(cost.of(k), now) for k, lim in self._limits.items())
                self._count_refused(now)
                return await self._refuse(run, arrival, call, RATE if kind == REQUESTS else TOKENS, kind, wait)
        if self._served >= self._limit:
            self._count_refused(now)
            return await self._refuse(run, arrival, call, LIMITED, "concurrency", self._slot_free_in(now))
        for kind, limit in self._limits.items():
            limit.take(cost.of(kind), now)
        completion, truncated = self._completion_size(call.max_tokens)
        base = self._latency()
        self._served += 1
        self._accepted += 1
        if run is self._run:
            self.record.accepted += 1
            self.record.peak_served = max(self.record.peak_served, self._served)
            tag = request.headers.get(CALL_TAG)
            if tag is not None:
                self.record.tagged.append((tag, arrival))
        end = now + base + config.per_token_latency * completion
        self._ends.append(end)
        try:
            if call.stream:
                return await self._stream(request, run, arrival, call, completion, truncated, base)
            try:
                await asyncio.sleep(end - now)
            finally:
                if run is self._run:
                    self._settle_cost(call, completion)
            if run is self._run:
                self._ok += 1
                self.record.responses.append((arrival, self.now(), OK))
                self.record.served.append((self.now(), call.prompt, completion))
            n = next(self._ids)
            headers = self._headers(call.api, arrival)
            if call.api == ANTHROPIC:
                return web.json_response(_message(call, n, completion, truncated), headers=headers)
            if call.api == GEMINI:
                return web.json_response(_gemini_response(call, n, completion, truncated), headers=headers)
            if call.api == BEDROCK:
                latency = round((self.now() - arrival) * 1000)
                return web.json_response(_converse_response(call, completion, truncated, latency), headers=headers)
            return web.json_response(_chat_completion(call, n, completion, truncated), headers=headers)
        finally:
            if run is self._run:
                self._served -= 1
                self._ends.remove(end)

    def _count_refused(self, now: float) -> None:
        """A refused request still uses up the requests limit when refusals count."""
        limit = self._limits.get(REQUESTS)
        if limit is not None and self.config.rpm_counts_refused:
            limit.take(1, now)

    def _settle_cost(self, call: _Call, output: int) -> None:
        """Correct the output estimate charged at the start to the output produced."""
        now = self.now()
        unused = call.max_tokens - output
        for kind in (TOTAL, OUTPUT):
            limit = self._limits.get(kind)
            if limit is not None and unused > 0:
                limit.give(unused, now)

    def _completion_size(self, cap: int) -> tuple[int, bool]:
        """Completion tokens of one answer, and whether max_tokens cut it short."""
        config = self.config
        if config.completion_mean is None:
            size = config.completion_tokens
        else:
            sigma = config.completion_sigma
            mu = math.log(config.completion_mean) - sigma * sigma / 2
            size = max(1, round(self._rng.lognormvariate(mu, sigma)))
        return (cap, True) if size >= cap else (size, False)

    def _latency(self) -> float:
        mean, sigma = self.config.latency_mean, self.config.latency_sigma
        if sigma == 0:
            return mean
        return self._rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)

    def _slot_free_in(self, now: float) -> float:
        """Seconds until the number served drops below the limit."""
        excess = self._served - self._limit  # >= 0 here
        if excess >= len(self._ends):
            return self.config.latency_mean
        return max(0.0, sorted(self._ends)[excess] - now)

    # -- streaming -------------------------------------------------------------------------

    async def _stream(
        self,
        request: web.Request,
        run: object,
        arrival: float,
        call: _Call,
        completion: int,
        truncated: bool,
        base: float,
    ) -> web.StreamResponse:
        """Send the answer as server-sent events: headers at once, the first delta after
        the base latency, the rest paced by the per-token latency. The output charged is
        corrected when the stream ends, however it ends."""
        config = self.config
        n = next(self._ids)
        response = web.StreamResponse(status=200, headers=self._headers(call.api, arrival))
        if call.api == BEDROCK:
            response.content_type = "application/vnd.amazon.eventstream"
        else:
            response.content_type = "text/event-stream"
            response.headers["Cache-Control"] = "no-cache"
        cut_at: int | None = None
        if config.stream_error_rate > 0 and self._rng.random() < config.stream_error_rate:
            cut_at = self._rng.randint(0, max(0, completion - 1))
        sent = 0
        kind = ABANDONED
        events: Any
        if call.api == ANTHROPIC:
            events = _AnthropicEvents(call, n)
        elif call.api == GEMINI:
            events = _GeminiChunks(call, n)
        elif call.api == BEDROCK:
            events = _ConverseEvents(call, arrival, self.now)
        else:
            events = _OpenAIChunks(call, n)
        try:
            await response.prepare(request)
            await response.write(events.start())
            await asyncio.sleep(base)
            while sent < completion:
                k = min(config.stream_chunk_tokens, completion - sent)
                cut = cut_at is not None and sent + k > cut_at
                if cut:
                    assert cut_at is not None
                    k = cut_at - sent
                if k > 0:
                    if config.per_token_latency > 0:
                        await asyncio.sleep(config.per_token_latency * k)
                    await response.write(events.delta(k, first=sent == 0))
                    sent += k
                if cut:
                    await response.write(events.overloaded())
                    kind = OVERLOADED
                    break
            else:
                await response.write(events.end(completion, truncated))
                kind = OK
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away (RuntimeError: aiohttp's write on a closed transport)
        finally:
            if run is self._run:
                self._settle_cost(call, sent)
                end = self.now()
                self.record.responses.append((arrival, end, kind))
                if kind == OK:
                    self._ok += 1
                    self.record.served.append((end, call.prompt, sent))
                else:
                    self.record.wasted_tokens += call.prompt + sent
        return response

    # -- refusals --------------------------------------------------------------------------

    async def _refuse(
        self, run: object, arrival: float, call: _Call, kind: str, reason: str | None, wait: float | None
    ) -> web.Response:
        if self.config.reject_latency > 0:
            await asyncio.sleep(self.config.reject_latency)
        if run is self._run:
            if kind != QUOTA:
                self._limited += 1
            if reason is not None:
                self.record.refused[reason] = self.record.refused.get(reason, 0) + 1
            self.record.responses.append((arrival, self.now(), kind))
        headers = self._headers(call.api, arrival)
        if call.api == GEMINI:
            return _gemini_error(
                call,
                kind,
                reason,
                self._retry_after_value(wait, reason),
                "" if kind == QUOTA or reason is None else self._refusal_message(call, kind, reason, wait),
                headers,
            )
        if call.api == BEDROCK:
            return _bedrock_error(kind, reason, headers)
        if kind == QUOTA:
            if call.api == ANTHROPIC:
                return _anthropic_error(
                    400,
                    "invalid_request_error",
                    "Your credit balance is too low to access the Anthropic API. "
                    "Please go to Plans & Billing to upgrade or purchase credits.",
                    headers,
                )
            return _error(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                "insufficient_quota",
                headers,
            )
        assert reason is not None
        seconds = self._retry_after_value(wait, reason)
        if seconds is not None and math.isfinite(seconds):
            if call.api == OPENAI:
                headers["retry-after-ms"] = str(max(1, round(seconds * 1000)))
            if call.api == AZURE:
                headers["x-ms-retry-after-ms"] = str(max(1, round(seconds * 1000)))
            headers["retry-after"] = str(max(1, math.ceil(seconds)))
        message = self._refusal_message(call, kind, reason, wait)
        if call.api == ANTHROPIC:
            return _anthropic_error(429, "rate_limit_error", message, headers)
        return _error(429, message, "tokens" if kind == TOKENS else "requests", "rate_limit_exceeded", headers)

    def _refusal_message(self, call: _Call, kind: str, reason: str, wait: float | None) -> str:
        model = call.model
        if reason == NOISE:
            return f"The service is experiencing high demand for {model}. Please try again later."
        if kind == LIMITED:
            return (
                f"Rate limit reached for {model} on concurrent requests: Limit {self._limit}. Please try again later."
            )
        limit = self._limits[reason]
        asked = call.cost.of(reason)
        unit = {REQUESTS: "requests", TOTAL: "tokens", INPUT: "input tokens", OUTPUT: "output tokens"}[reason]
        if wait is None or not math.isfinite(wait):
            return (
                f"Request too large for {model} on {unit} per {self.config.rate_period:g} s: "
                f"Limit {limit.limit} (at most {limit.capacity:.0f} at once), Requested {asked}."
            )
        if call.api == ANTHROPIC:
            return (
                f"This request would exceed the rate limit for your organization of {limit.limit:,} {unit} "
                f"per {self.config.rate_period:g} s. Please try again in {wait:.2f}s."
            )
        used = max(0, round(limit.capacity - limit.level))
        return (
            f"Rate limit reached for {model} on {unit} per {self.config.rate_period:g} s: Limit {limit.limit}, "
            f"Used {used}, Requested {asked}. Please try again in {go_duration(wait)}."
        )

    def _retry_after_value(self, wait: float | None, reason: str | None = None) -> float | None:
        if reason == NOISE:  # a random refusal names its own delay, or none
            return wait
        setting = self.config.retry_after
        if setting == "none":
            return None
        if setting == "auto":
            return wait if wait is not None else self.config.latency_mean
        return float(setting)

    # -- headers -----------------------------------------------------------------------------

    def _headers(self, api: str, arrival: float) -> dict[str, str]:
        """The headers of an answer: an id, and the rate limits as they stand now."""
        now = self.now()
        request_id = f"req_{next(self._ids):012d}"
        if api == ANTHROPIC:
            headers = {"request-id": request_id, "x-request-id": request_id}
            headers.update(self._anthropic_limits(now))
            return headers
        if api == GEMINI:  # the Gemini API and Vertex AI send no rate-limit headers
            return {"x-goog-request-id": request_id, "server-timing": f"gfet4t7; dur={round((now - arrival) * 1000)}"}
        if api == BEDROCK:  # nor does Bedrock
            return {"x-amzn-RequestId": request_id}
        headers = {"x-request-id": request_id, "openai-processing-ms": str(max(0, round((now - arrival) * 1000)))}
        for kind, name in ((REQUESTS, "requests"), (TOTAL, "tokens")):
            limit = self._limits.get(kind)
            if limit is not None:
                headers[f"x-ratelimit-limit-{name}"] = str(limit.limit)
                headers[f"x-ratelimit-remaining-{name}"] = str(limit.remaining(now))
                headers[f"x-ratelimit-reset-{name}"] = go_duration(limit.full_in(now))
        if api == AZURE:
            headers["apim-request-id"] = request_id
            for name in ("requests", "tokens"):
                headers.pop(f"x-ratelimit-reset-{name}", None)  # Azure sends no resets
            if self.config.azure_odd_headers:  # what some Azure APIs send: a limit of 0, nothing remaining known
                headers.setdefault("x-ratelimit-limit-requests", "0")
                headers.setdefault("x-ratelimit-remaining-requests", "-1")
        return headers

    def _anthropic_limits(self, now: float) -> dict[str, str]:
        wall = time.time()
        headers: dict[str, str] = {}

        def put(name: str, limit: Limit, tokens: bool) -> None:
            remaining = limit.remaining(now)
            if tokens and self.config.round_remaining:
                remaining = round_thousand(remaining)
            headers[f"anthropic-ratelimit-{name}-limit"] = str(limit.limit)
            headers[f"anthropic-ratelimit-{name}-remaining"] = str(remaining)
            headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(wall + limit.full_in(now))

        if REQUESTS in self._limits:
            put("requests", self._limits[REQUESTS], tokens=False)
        for kind, name in ((INPUT, "input-tokens"), (OUTPUT, "output-tokens")):
            if kind in self._limits:
                put(name, self._limits[kind], tokens=True)
        if self.config.anthropic_tokens_header:
            total = self._limits.get(TOTAL)
            if total is None:
                parts = [self._limits[k] for k in (INPUT, OUTPUT) if k in self._limits]
                total = min(parts, key=lambda limit: limit.fraction(now)) if parts else None
            if total is not None:
                put("tokens", total, tokens=True)
        return headers

    async def _models(self, request: web.Request) -> web.Response:
        # Both SDKs' shapes at once (each ignores the other's fields).
        model = {
            "id": "sim-1", "object": "model", "owned_by": "sim", "created": 1_700_000_000,
            "type": "model", "display_name": "Sim 1", "created_at": "2023-11-14T22:13:20Z",
        }  # fmt: skip
        return web.json_response(
            {"object": "list", "data": [model], "has_more": False, "first_id": "sim-1", "last_id": "sim-1"}
        )

    # -- the control surface ------------------------------------------------------------

    async def _get_config(self, request: web.Request) -> web.Response:
        return web.json_response(self.config.to_json())

    async def _post_reset(self, request: web.Request) -> web.Response:
        try:
            data = await request.json() if request.can_read_body else {}
            if not isinstance(data, dict):
                raise ConfigError("the reset body must be a JSON object")
            config = ProviderConfig.from_json(data["config"]) if data.get("config") else None
            start_at = data.get("start_at")
            if start_at is not None and (isinstance(start_at, bool) or not isinstance(start_at, (int, float))):
                raise ConfigError(f"start_at must be Unix seconds, got {start_at!r}")
        except (ValueError, TypeError) as error:  # ConfigError and malformed JSON alike
            return _error(400, f"bad reset request: {error}", "invalid_request_error", None, {})
        self.reset(config, start_at)
        return web.json_response({"ok": True, "started_wall": self.record.started_wall})

    async def _get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def _get_live(self, request: web.Request) -> web.Response:
        return web.json_response(self.live())

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    # -- introspection for tests ----------------------------------------------------------

    @property
    def served(self) -> int:
        """Requests being served right now."""
        return self._served

    @property
    def limit(self) -> int:
        """The hidden limit in force now."""
        self._account(self.now())
        return self._limit

    def level(self, kind: str) -> float:
        """What the bucket (or window) of one rate limit holds now."""
        limit = self._limits[kind]
        limit.fits(0, self.now())
        return limit.level

    def live(self) -> dict[str, Any]:
        """The counters now (what ``GET /sim/live`` returns): cheap, for progress displays."""
        t = self.now()
        self._account(t)
        return {
            "t": t,
            "limit": self._limit,
            "served": self._served,
            "offered": self._offered,
            "ok": self._ok,
            "limited": self._limited,
            "accepted": self.record.accepted,
            "refused": dict(self.record.refused),
            "prompt_tokens": self.record.prompt_tokens,
            "completion_tokens": self.record.completion_tokens,
        }

    def snapshot(self) -> dict[str, Any]:
        """The record so far, as JSON (what ``GET /sim/stats`` returns)."""
        self._account(self.now())
        return {"config": self.config.to_json(), "record": self.record.to_json()}


# -- request bodies ------------------------------------------------------------------------------


async def _read_body(
    request: web.Request, api: str, config: ProviderConfig
) -> tuple[_Call | None, web.Response | None]:
    """What a request asks for, or a 4xx in its API's shape explaining what is wrong with it."""
    if api == ANTHROPIC:
        return await _read_messages_body(request, config)
    if api == GEMINI:
        return await _read_gemini_body(request, config)
    if api == BEDROCK:
        return await _read_converse_body(request, config)
    return await _read_chat_body(request, config, api)


async def _json_object(request: web.Request) -> dict[str, Any] | str:
    try:
        body = await request.json(loads=json.loads)
    except ValueError:
        return "The request body is not valid JSON."
    except ConnectionError:  # the client went away while sending (an agent cancelled): nobody reads the answer
        return "The request body did not arrive whole."
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    return body


def _max_tokens(body: Mapping[str, Any], names: Sequence[str]) -> int | str | None:
    """The output cap the body sets, None when it sets none, or what is wrong with it."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"'{name}' must be an integer >= 1, got {value!r}"
        return value
    return None


async def _read_chat_body(
    request: web.Request, config: ProviderConfig, api: str = OPENAI
) -> tuple[_Call | None, web.Response | None]:
    def bad(message: str, status: int = 400) -> tuple[None, web.Response]:
        return None, _error(status, message, "invalid_request_error", None, {})

    if api == AZURE:
        if not request.headers.get("api-key") and not request.headers.get("Authorization", "").startswith("Bearer "):
            return bad("Access denied due to missing subscription key.", 401)
        if not request.query.get("api-version"):
            return bad("Missing required query parameter: api-version")
    elif not request.headers.get("Authorization", "").startswith("Bearer "):
        return bad("Missing bearer authentication in header", 401)
    body = await _json_object(request)
    if isinstance(body, str):
        return bad(body)
    if api == AZURE:
        body.setdefault("model", request.match_info.get("deployment", ""))
    if not isinstance(body.get("model"), str) or not body["model"]:
        return bad("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return bad("'messages' must be a non-empty array of objects")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return bad(f"'stream' must be a boolean, got {stream!r}")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return bad(f"'stream_options' must be an object, got {options!r}")
    cap = _max_tokens(body, ("max_completion_tokens", "max_tokens"))
    if isinstance(cap, str):
        return bad(cap)
    call = _Call(
        api=api,
        model=body["model"] if api == OPENAI else request.match_info.get("deployment", body["model"]),
        prompt=prompt_tokens(body),
        max_tokens=cap if cap is not None else config.default_max_tokens,
        stream=bool(stream),
        include_usage=bool(stream and options and options.get("include_usage")),
    )
    return call, None


async def _read_messages_body(request: web.Request, config: ProviderConfig) -> tuple[_Call | None, web.Response | None]:
    def bad(message: str, status: int = 400, type_: str = "invalid_request_error") -> tuple[None, web.Response]:
        return None, _anthropic_error(status, type_, message, {})

    if not request.headers.get("x-api-key") and not request.headers.get("Authorization", "").startswith("Bearer "):
        return bad("x-api-key header is required", 401, "authentication_error")
    if not request.headers.get("anthropic-version"):
        return bad("anthropic-version: header is required")
    body = await _json_object(request)
    if isinstance(body, str):
        return bad(body)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return bad("model: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return bad("messages: must be a non-empty list of objects")
    cap = _max_tokens(body, ("max_tokens",))
    if cap is None:
        return bad("max_tokens: Field required")
    if isinstance(cap, str):
        return bad(cap)
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return bad("system: must be a string or a list of text blocks")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return bad(f"stream: must be a boolean, got {stream!r}")
    call = _Call(
        api=ANTHROPIC,
        model=body["model"],
        prompt=prompt_tokens(body),
        max_tokens=cap,
        stream=bool(stream),
        include_usage=True,
    )
    return call, None


async def _read_gemini_body(request: web.Request, config: ProviderConfig) -> tuple[_Call | None, web.Response | None]:
    """``POST .../models/{model}:generateContent`` or ``:streamGenerateContent`` (``?alt=sse``)."""

    def bad(message: str, status: int = 400, code: str = "INVALID_ARGUMENT") -> tuple[None, web.Response]:
        body = {"error": {"code": status, "message": message, "status": code}}
        return None, web.json_response(body, status=status)

    model, _, verb = request.match_info["call"].partition(":")
    if verb not in ("generateContent", "streamGenerateContent"):
        return bad(f"Method {verb!r} is not served by the mock provider.", 404, "NOT_FOUND")
    if not request.headers.get("x-goog-api-key") and not request.headers.get("Authorization", "").startswith("Bearer "):
        return bad(
            "Method doesn't allow unregistered callers. Please use API Key or other form of API consumer "
            "identity to call this API.",
            403,
            "PERMISSION_DENIED",
        )
    body = await _json_object(request)
    if isinstance(body, str):
        return bad(body)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents or not all(isinstance(c, dict) for c in contents):
        return bad("* GenerateContentRequest.contents: contents is not specified")
    generation = body.get("generationConfig") or {}
    if not isinstance(generation, dict):
        return bad("generationConfig must be an object")
    cap = _max_tokens(generation, ("maxOutputTokens",))
    if isinstance(cap, str):
        return bad(cap)
    call = _Call(
        api=GEMINI,
        model=model,
        prompt=gemini_prompt_tokens(body),
        max_tokens=cap if cap is not None else config.default_max_tokens,
        stream=verb == "streamGenerateContent",
        include_usage=True,
    )
    return call, None


def gemini_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt of a Gemini request by the rule of :func:`prompt_tokens`: each
    content's parts' text, the system instruction, the JSON of tools."""
    total = 0
    for content in body.get("contents") or ():
        if isinstance(content, Mapping):
            total += _text_tokens(content.get("parts")) + MESSAGE_TOKENS
    system = body.get("systemInstruction")
    if isinstance(system, Mapping):
        total += _text_tokens(system.get("parts")) + MESSAGE_TOKENS
    if body.get("tools"):
        total += math.ceil(len(json.dumps(body["tools"])) / CHARS_PER_TOKEN)
    return max(1, total)


async def _read_converse_body(request: web.Request, config: ProviderConfig) -> tuple[_Call | None, web.Response | None]:
    """Bedrock's ``POST /model/{modelId}/converse`` and ``/converse-stream``."""

    def bad(message: str, status: int = 400) -> tuple[None, web.Response]:
        return None, _bedrock_response(status, "ValidationException", message, {})

    if not request.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256"):
        return bad("Missing Authentication Token", 403)
    body = await _json_object(request)
    if isinstance(body, str):
        return bad(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return bad("A conversation must start with a user message.")
    inference = body.get("inferenceConfig") or {}
    if not isinstance(inference, dict):
        return bad("inferenceConfig must be an object")
    cap = _max_tokens(inference, ("maxTokens",))
    if isinstance(cap, str):
        return bad(cap)
    call = _Call(
        api=BEDROCK,
        model=request.match_info["model"],
        prompt=prompt_tokens({"messages": messages, "system": body.get("system")}),
        max_tokens=cap if cap is not None else config.default_max_tokens,
        stream=request.path.endswith("/converse-stream"),
        include_usage=True,
    )
    return call, None


# -- answers ---------------------------------------------------------------------------------------


def _text(tokens: int, first: bool = True) -> str:
    """``tokens`` words of answer (one token each), a leading space unless it is the first piece."""
    text = " ".join(["ok"] * tokens)
    return text if first else " " + text


def _chat_completion(call: _Call, n: int, completion: int, truncated: bool) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim{n:010d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": call.model,
        "system_fingerprint": "fp_sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _text(completion), "refusal": None},
                "logprobs": None,
                "finish_reason": "length" if truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": call.prompt,
            "completion_tokens": completion,
            "total_tokens": call.prompt + completion,
        },
    }


def _message(call: _Call, n: int, completion: int, truncated: bool) -> dict[str, Any]:
    return {
        "id": f"msg_sim{n:010d}",
        "type": "message",
        "role": "assistant",
        "model": call.model,
        "content": [{"type": "text", "text": _text(completion)}],
        "stop_reason": "max_tokens" if truncated else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(call.prompt, completion),
    }


def _gemini_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }


def _gemini_response(call: _Call, n: int, completion: int, truncated: bool) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": _text(completion)}], "role": "model"},
                "finishReason": "MAX_TOKENS" if truncated else "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _gemini_usage(call.prompt, completion),
        "modelVersion": call.model,
        "responseId": f"sim{n:010d}",
    }


def _converse_response(call: _Call, completion: int, truncated: bool, latency_ms: int) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": _text(completion)}]}},
        "stopReason": "max_tokens" if truncated else "end_turn",
        "usage": {"inputTokens": call.prompt, "outputTokens": completion, "totalTokens": call.prompt + completion},
        "metrics": {"latencyMs": max(0, latency_ms)},
    }


def _anthropic_usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {payload}\n\n".encode()


class _OpenAIChunks:
    """The chat-completions stream: a role chunk, content deltas, a finish chunk, the
    usage chunk when ``stream_options.include_usage`` (every other chunk then carries
    ``"usage": null``), and ``data: [DONE]``."""

    def __init__(self, call: _Call, n: int) -> None:
        self.call = call
        self.head = {
            "id": f"chatcmpl-sim{n:010d}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": call.model,
            "system_fingerprint": "fp_sim",
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> bytes:
        chunk: dict[str, Any] = {
            **self.head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.call.include_usage:
            chunk["usage"] = None
        return _sse(chunk)

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": "", "refusal": None}, None)

    def delta(self, tokens: int, first: bool) -> bytes:
        return self._chunk({"content": _text(tokens, first)}, None)

    def end(self, completion: int, truncated: bool) -> bytes:
        out = self._chunk({}, "length" if truncated else "stop")
        if self.call.include_usage:
            usage = {
                "prompt_tokens": self.call.prompt,
                "completion_tokens": completion,
                "total_tokens": self.call.prompt + completion,
            }
            out += _sse({**self.head, "choices": [], "usage": usage})
        return out + _sse("[DONE]")

    def overloaded(self) -> bytes:
        error = {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        return _sse({"error": error})


class _AnthropicEvents:
    """The Messages stream: ``message_start`` (with the input tokens), one text block
    (``content_block_start``, ``ping``, deltas, ``content_block_stop``),
    ``message_delta`` (with the output tokens) and ``message_stop``; or an
    ``error`` event (``overloaded_error``) that cuts it."""

    def __init__(self, call: _Call, n: int) -> None:
        self.call = call
        self.id = f"msg_sim{n:010d}"

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.call.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": _anthropic_usage(self.call.prompt, 1),
        }  # fmt: skip
        return (
            _sse({"type": "message_start", "message": message}, "message_start")
            + _sse(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            )
            + _sse({"type": "ping"}, "ping")
        )

    def delta(self, tokens: int, first: bool) -> bytes:
        delta = {"type": "text_delta", "text": _text(tokens, first)}
        return _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")

    def end(self, completion: int, truncated: bool) -> bytes:
        delta = {"stop_reason": "max_tokens" if truncated else "end_turn", "stop_sequence": None}
        return (
            _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            + _sse({"type": "message_delta", "delta": delta, "usage": {"output_tokens": completion}}, "message_delta")
            + _sse({"type": "message_stop"}, "message_stop")
        )

    def overloaded(self) -> bytes:
        return _sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")


class _GeminiChunks:
    """``streamGenerateContent?alt=sse``: one ``data:`` chunk per delta, each with
    the usage so far (the last with the whole of it); the stream ends when the
    connection closes, with no closing event. An overload cuts it with an error chunk."""

    def __init__(self, call: _Call, n: int) -> None:
        self.call = call
        self.id = f"sim{n:010d}"
        self.sent = 0

    def _chunk(self, text: str, finish: str | None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        chunk = {
            "candidates": [candidate],
            "usageMetadata": _gemini_usage(self.call.prompt, self.sent),
            "modelVersion": self.call.model,
            "responseId": self.id,
        }
        return _sse(chunk).replace(b"\n\n", b"\r\n\r\n")

    def start(self) -> bytes:
        return b""

    def delta(self, tokens: int, first: bool) -> bytes:
        self.sent += tokens
        return self._chunk(_text(tokens, first), None)

    def end(self, completion: int, truncated: bool) -> bytes:
        self.sent = completion
        return self._chunk("", "MAX_TOKENS" if truncated else "STOP")

    def overloaded(self) -> bytes:
        error = {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}
        return _sse({"error": error})


def event_frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message of AWS's event-stream framing (what boto3 reads from
    ``converse_stream``): prelude (total and headers length, CRC32), string
    headers, payload, CRC32 of the whole."""
    encoded = b""
    for name, value in headers.items():
        key, text = name.encode(), value.encode()
        encoded += bytes([len(key)]) + key + b"\x07" + len(text).to_bytes(2, "big") + text
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    prelude += binascii.crc32(prelude).to_bytes(4, "big")
    message = prelude + encoded + payload
    return message + binascii.crc32(message).to_bytes(4, "big")


def _event(kind: str, data: Mapping[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return event_frame(headers, json.dumps(data, separators=(",", ":")).encode())


class _ConverseEvents:
    """``converse-stream``: messageStart, contentBlockDelta..., contentBlockStop,
    messageStop, then metadata (usage and latency) as event-stream frames; an
    overload is a ``serviceUnavailableException`` exception frame."""

    def __init__(self, call: _Call, arrival: float, now: Callable[[], float]) -> None:
        self.call, self.arrival, self.now = call, arrival, now

    def start(self) -> bytes:
        return _event("messageStart", {"role": "assistant"})

    def delta(self, tokens: int, first: bool) -> bytes:
        return _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": _text(tokens, first)}})

    def end(self, completion: int, truncated: bool) -> bytes:
        usage = {
            "inputTokens": self.call.prompt,
            "outputTokens": completion,
            "totalTokens": self.call.prompt + completion,
        }
        latency = max(0, round((self.now() - self.arrival) * 1000))
        return (
            _event("contentBlockStop", {"contentBlockIndex": 0})
            + _event("messageStop", {"stopReason": "max_tokens" if truncated else "end_turn"})
            + _event("metadata", {"usage": usage, "metrics": {"latencyMs": latency}})
        )

    def overloaded(self) -> bytes:
        headers = {
            ":exception-type": "serviceUnavailableException",
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        return event_frame(headers, json.dumps({"message": "Bedrock is unable to process your request."}).encode())


#: Google's per-minute and per-day quota ids, as its QuotaFailure names them
GEMINI_QUOTAS = {
    REQUESTS: "GenerateRequestsPerMinutePerProjectPerModel",
    TOTAL: "GenerateContentInputTokensPerModelPerMinute",
    INPUT: "GenerateContentInputTokensPerModelPerMinute",
    OUTPUT: "GenerateContentOutputTokensPerModelPerMinute",
    "concurrency": "GenerateRequestsPerMinutePerProjectPerModel",
    "day": "GenerateRequestsPerDayPerProjectPerModel",
}


def _gemini_error(
    call: _Call, kind: str, reason: str | None, wait: float | None, message: str, headers: dict[str, str]
) -> web.Response:
    """A 429 ``RESOURCE_EXHAUSTED`` in Google's shape: QuotaFailure (which quota),
    Help, RetryInfo (``retryDelay`` when there is a wait to name); no rate-limit headers."""
    if kind == QUOTA and reason is None:  # billing: the free tier's "check your plan" error
        quota, text = (
            "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            ("You exceeded your current quota, please check your plan and billing details."),
        )
    else:
        quota = GEMINI_QUOTAS.get(reason or "concurrency", GEMINI_QUOTAS["concurrency"])
        text = f"You exceeded your current quota, please check your plan and billing details. {message}".strip()
    details: list[dict[str, Any]] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                    "quotaId": quota,
                    "quotaDimensions": {"location": "global", "model": call.model},
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [
                {
                    "description": "Learn more about Gemini API quotas",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                }
            ],
        },
    ]
    if wait is not None and math.isfinite(wait):
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{max(0.0, wait):.3f}s"})
    body = {"error": {"code": 429, "message": text, "status": "RESOURCE_EXHAUSTED", "details": details}}
    return web.json_response(body, status=429, headers=headers)


def _bedrock_error(kind: str, reason: str | None, headers: dict[str, str]) -> web.Response:
    """Bedrock's throttling answers: 429 ``ThrottlingException`` (its message names
    tokens or requests, or the day's tokens), named in ``x-amzn-ErrorType``."""
    if kind == QUOTA:
        return _bedrock_response(
            429, "ThrottlingException", "Too many tokens per day, please wait before trying again.", headers
        )
    what = "requests" if reason in (REQUESTS, "concurrency") else "tokens"
    return _bedrock_response(429, "ThrottlingException", f"Too many {what}, please wait before trying again.", headers)


def _bedrock_response(status: int, kind: str, message: str, headers: dict[str, str]) -> web.Response:
    headers = {**headers, "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    return web.json_response({"message": message}, status=status, headers=headers)


def _error(status: int, message: str, type_: str, code: str | None, headers: dict[str, str]) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def _anthropic_error(status: int, type_: str, message: str, headers: dict[str, str]) -> web.Response:
    body = {"type": "error", "error": {"type": type_, "message": message}}
    return web.json_response(body, status=status, headers=headers)


async def serve(config: ProviderConfig, host: str, port: int, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until cancelled (the ``provider`` command); ``on_ready`` gets the base URL."""
    provider = MockProvider(config)
    url = await provider.start(host, port)
    if on_ready is not None:
        on_ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await provider.stop()


__all__ = [
    "ABANDONED",
    "ANTHROPIC",
    "AZURE",
    "BEDROCK",
    "CALL_TAG",
    "GEMINI",
    "HEADERLESS",
    "INPUT",
    "KINDS",
    "LIMITED",
    "OK",
    "OPENAI",
    "OUTPUT",
    "OVERLOADED",
    "QUOTA",
    "RATE",
    "REASONS",
    "REQUESTS",
    "TOKENS",
    "TOTAL",
    "Bucket",
    "Cost",
    "MockProvider",
    "ProviderConfig",
    "RunRecord",
    "Window",
    "event_frame",
    "gemini_prompt_tokens",
    "go_duration",
    "parse_retry_after",
    "parse_schedule",
    "prompt_tokens",
    "rfc3339",
    "round_thousand",
    "serve",
]
