"""A mock LLM provider: a real HTTP server in the OpenAI chat-completions shape.

It serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) so the real
``openai`` SDK, or any HTTP client, can call it, and behaves like a throttled
provider account:

- a *hidden* concurrency limit: a request that arrives while ``limit``
  requests are being served is refused with 429 ``rate_limit_exceeded``;
- an optional requests-per-period limit (``rpm`` per ``rate_period``),
  which may count refused requests too, as OpenAI's does;
- lognormal latency with a given mean and shape;
- a Retry-After on each 429: ``"auto"`` (when a slot frees, as the server
  knows its own schedule), a fixed number of seconds, or ``"none"`` (some
  providers send nothing);
- quota exhaustion: after ``quota`` accepted requests every request gets
  429 ``insufficient_quota`` (billing, not a throttle);
- a schedule that changes the hidden limit mid-run (``((t1, 20), (t2, 40))``:
  seconds after the start of the run, new limit).

It records what really happened: every response (time and kind), and the
*offered* concurrency (requests inside the server, served or being turned
away) against the limit, so a benchmark can say how far and how long a
fleet pushed above the hidden limit.

Besides the API it has a small control surface under ``/sim/`` for a
benchmark driver in another process: ``GET /sim/config``, ``POST /sim/reset``
(start a new run: counters cleared, schedule restarted) and
``GET /sim/stats`` (everything recorded since the reset).

aiohttp is imported here, so this module needs the ``sim`` extra.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aiohttp import web

from ..errors import ConfigError

#: what a response was, as recorded in the log
OK, LIMITED, QUOTA, RATE = "ok", "limited", "quota", "rpm"


@dataclass(frozen=True)
class ProviderConfig:
    """How the mock provider behaves. Times are in seconds."""

    #: the hidden concurrency limit (requests served at once)
    limit: int = 40
    #: mean of the lognormal service time
    latency_mean: float = 0.2
    #: shape (sigma of the underlying normal) of the service time; 0: constant
    latency_sigma: float = 0.5
    #: how long a refusal takes (a real 429 is quick, not instant)
    reject_latency: float = 0.005
    #: Retry-After sent with a throttling 429: "auto", "none" or seconds
    retry_after: str | float = "auto"
    #: requests accepted per ``rate_period`` (None: no rate limit)
    rpm: int | None = None
    rate_period: float = 60.0
    #: refused requests count against ``rpm`` too ("unsuccessful requests contribute to your
    #: per-minute limit", as OpenAI documents), so a retry storm uses up the budget
    rpm_counts_refused: bool = False
    #: requests accepted in all before 429 insufficient_quota (None: unlimited)
    quota: int | None = None
    #: ((seconds after the run's start, new hidden limit), ...)
    schedule: tuple[tuple[float, int], ...] = ()
    #: completion tokens in each answer (usage is reported like the real API)
    completion_tokens: int = 16
    #: trace sampling period
    sample_interval: float = 0.05
    #: seed of the latency generator (None: random)
    seed: int | None = None

    def __post_init__(self) -> None:
        _int_at_least("limit", self.limit, 0)
        _number_at_least("latency_mean", self.latency_mean, 0.0, strict=True)
        _number_at_least("latency_sigma", self.latency_sigma, 0.0)
        _number_at_least("reject_latency", self.reject_latency, 0.0)
        if isinstance(self.retry_after, str):
            if self.retry_after not in ("auto", "none"):
                raise ConfigError(f"retry_after must be 'auto', 'none' or seconds >= 0, got {self.retry_after!r}")
        else:
            _number_at_least("retry_after", self.retry_after, 0.0)
        if self.rpm is not None:
            _int_at_least("rpm", self.rpm, 1)
        _number_at_least("rate_period", self.rate_period, 0.0, strict=True)
        if not isinstance(self.rpm_counts_refused, bool):
            raise ConfigError(f"rpm_counts_refused must be true or false, got {self.rpm_counts_refused!r}")
        if self.quota is not None:
            _int_at_least("quota", self.quota, 0)
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

    def counts(self) -> dict[str, int]:
        out = {OK: 0, LIMITED: 0, RATE: 0, QUOTA: 0}
        for _, _, kind in self.responses:
            out[kind] = out.get(kind, 0) + 1
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
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(
            started_wall=float(data["started_wall"]),
            responses=[(float(a), float(b), str(k)) for a, b, k in data["responses"]],
            trace=[tuple(row) for row in data["trace"]],  # type: ignore[misc]
            peak_over=int(data["peak_over"]),
            time_over=float(data["time_over"]),
            longest_over=float(data["longest_over"]),
            peak_served=int(data["peak_served"]),
        )


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
        """The base URL (``http://host:port``); clients use ``url + "/v1"``."""
        if self._url is None:
            raise RuntimeError("the provider is not started")
        return self._url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port); returns the base URL."""
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/chat/completions", self._chat),
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
        cleared and the schedule restarted; requests still being served
        finish but are not recorded. ``config`` replaces the settings."""
        if config is not None:
            self.config = config
            self._rng = random.Random(config.seed)
        self._begin(time.time() if start_at is None else start_at)

    def _begin(self, start_wall: float) -> None:
        self._run = object()  # requests of an earlier run carry another token
        self.record = RunRecord(started_wall=start_wall)
        self._t0 = time.monotonic() + (start_wall - time.time())
        self._served = 0
        self._offered = 0
        self._accepted = 0
        self._ok = 0
        self._limited = 0
        self._ends: list[float] = []  # service end times of the requests being served
        self._starts: deque[float] = deque()  # counted arrivals within rate_period, for rpm
        self._limit = self.config.limit_at(0.0)
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

    # -- the API -------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        run = self._run
        arrival = self.now()
        self._offer(arrival, +1)
        try:
            return await self._answer(request, run, arrival)
        finally:
            if run is self._run:
                self._offer(self.now(), -1)

    async def _answer(self, request: web.Request, run: object, arrival: float) -> web.StreamResponse:
        body, problem = await _read_chat_body(request)
        if problem is not None:
            return problem
        config = self.config
        now = arrival
        if config.quota is not None and self._accepted >= config.quota:
            return await self._refuse(run, arrival, QUOTA, None, body)
        if config.rpm is not None:
            while self._starts and self._starts[0] <= now - config.rate_period:
                self._starts.popleft()
            full = len(self._starts) >= config.rpm
            if config.rpm_counts_refused:
                self._starts.append(now)  # every request counts, refused or not
            if full:
                wait = self._starts[0] + config.rate_period - now
                return await self._refuse(run, arrival, RATE, wait, body)
        if self._served >= self._limit:
            return await self._refuse(run, arrival, LIMITED, self._slot_free_in(now), body)
        latency = self._latency()
        self._served += 1
        self._accepted += 1
        self.record.peak_served = max(self.record.peak_served, self._served)
        if config.rpm is not None and not config.rpm_counts_refused:
            self._starts.append(now)
        end = now + latency
        self._ends.append(end)
        try:
            await asyncio.sleep(latency)
        finally:
            if run is self._run:
                self._served -= 1
                self._ends.remove(end)
        if run is self._run:
            self._ok += 1
            self.record.responses.append((arrival, self.now(), OK))
        return web.json_response(
            _completion(body, next(self._ids), config.completion_tokens),
            headers=self._limit_headers(),
        )

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

    async def _refuse(
        self, run: object, arrival: float, kind: str, wait: float | None, body: dict[str, Any]
    ) -> web.Response:
        if self.config.reject_latency > 0:
            await asyncio.sleep(self.config.reject_latency)
        if run is self._run:
            if kind != QUOTA:
                self._limited += 1
            self.record.responses.append((arrival, self.now(), kind))
        headers = self._limit_headers()
        if kind == QUOTA:
            return _error(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                "insufficient_quota",
                headers,
            )
        seconds = self._retry_after_value(wait)
        if seconds is not None:
            headers["retry-after-ms"] = str(max(1, round(seconds * 1000)))
            headers["retry-after"] = str(max(1, math.ceil(seconds)))
        what = "concurrent requests" if kind == LIMITED else f"requests per {self.config.rate_period:g} s"
        limit = self._limit if kind == LIMITED else self.config.rpm
        return _error(
            429,
            f"Rate limit reached for {body.get('model', 'the model')} on {what}: Limit {limit}. "
            "Please try again later.",
            "requests",
            "rate_limit_exceeded",
            headers,
        )

    def _retry_after_value(self, wait: float | None) -> float | None:
        setting = self.config.retry_after
        if setting == "none":
            return None
        if setting == "auto":
            return wait if wait is not None else self.config.latency_mean
        return float(setting)

    def _limit_headers(self) -> dict[str, str]:
        headers = {"x-request-id": f"req_{next(self._ids):012d}", "openai-processing-ms": "0"}
        if self.config.rpm is not None:
            headers["x-ratelimit-limit-requests"] = str(self.config.rpm)
            headers["x-ratelimit-remaining-requests"] = str(max(0, self.config.rpm - len(self._starts)))
        return headers

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "sim-1", "object": "model", "owned_by": "sim"}]})

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
        self._account(self.now())
        return web.json_response({"config": self.config.to_json(), "record": self.record.to_json()})

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
        }

    def snapshot(self) -> dict[str, Any]:
        """The record so far, as JSON (what ``GET /sim/stats`` returns)."""
        self._account(self.now())
        return {"config": self.config.to_json(), "record": self.record.to_json()}


async def _read_chat_body(request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
    """The request body, or an OpenAI-shaped 4xx explaining what is wrong with it."""
    if not request.headers.get("Authorization", "").startswith("Bearer "):
        return {}, _error(401, "Missing bearer authentication in header", "invalid_request_error", None, {})
    try:
        body = await request.json(loads=json.loads)
    except ValueError:
        return {}, _error(400, "The request body is not valid JSON.", "invalid_request_error", None, {})
    if not isinstance(body, dict):
        return {}, _error(400, "The request body must be a JSON object.", "invalid_request_error", None, {})
    if not isinstance(body.get("model"), str) or not body["model"]:
        return body, _error(400, "you must provide a model parameter", "invalid_request_error", None, {})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return body, _error(400, "'messages' must be a non-empty array of objects", "invalid_request_error", None, {})
    if body.get("stream"):
        return body, _error(400, "this simulator does not stream; send stream=false", "invalid_request_error", None, {})
    return body, None


def _completion(body: dict[str, Any], n: int, completion_tokens: int) -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) + 4 for m in body["messages"])
    return {
        "id": f"chatcmpl-sim{n:010d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "system_fingerprint": "fp_sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": " ".join(["ok"] * completion_tokens), "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _error(status: int, message: str, type_: str, code: str | None, headers: dict[str, str]) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
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
    "LIMITED",
    "OK",
    "QUOTA",
    "RATE",
    "MockProvider",
    "ProviderConfig",
    "RunRecord",
    "parse_retry_after",
    "parse_schedule",
    "serve",
]
