"""Google's Gemini API and Vertex AI (``google-genai``): their profiles, the
``google.rpc`` details of an error body (``RetryInfo``, ``QuotaFailure``),
the daily quota's reset at midnight Pacific time, the estimate of a
``generateContent`` request and the ``usageMetadata`` of a response or a
streamed chunk.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ..budgets import Tokens
from ..estimate import (
    CHARS_PER_TOKEN,
    DEFAULT_OUTPUT_TOKENS,
    MAX_CHOICES,
    _bounded,
    _Count,
    _decoded,
    _field,
    _is_count,
    _json_size,
    _sum,
    _tokens,
)
from ..prices import Usage as PricedUsage
from . import ErrorBody, Profile, http_status, priced, register, request_body, tier_name

#: the time zone of Google's daily quota resets (midnight Pacific time)
try:
    from zoneinfo import ZoneInfo

    PACIFIC: Any = ZoneInfo("America/Los_Angeles")
except Exception:  # noqa: BLE001 - no tz database: Pacific standard time, an hour late in summer at worst
    PACIFIC = timezone(timedelta(hours=-8), "PST")


def next_midnight(now: float, zone: Any = None) -> float:
    """Unix seconds of the next midnight in ``zone`` (default Pacific time) after ``now``."""
    local = datetime.fromtimestamp(now, zone or PACIFIC)
    tomorrow = (local + timedelta(days=1)).date()
    midnight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=zone or PACIFIC)
    return midnight.timestamp()


@register
class Gemini(Profile):
    """The Gemini API (``google-genai``): no rate-limit headers; a 429
    ``RESOURCE_EXHAUSTED`` carries ``google.rpc.QuotaFailure`` (which quota:
    per minute or per day, per project and model) and
    ``google.rpc.RetryInfo.retryDelay`` in the body; per-day quotas reset at
    midnight Pacific time; tokens per minute count input tokens.

    Load signals: a 429 ``RESOURCE_EXHAUSTED`` (a quota of the project, or
    the dynamic shared quota the fleet takes part of). Not load signals: a
    503 ``UNAVAILABLE`` ("The model is overloaded"), the model's capacity
    whatever this fleet sends."""

    name = "gemini"
    modules = ("google",)
    model_paths = ("generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents")
    headers = False
    throttle_names = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE"})
    overload_names = frozenset({"UNAVAILABLE"})
    quota_names = frozenset()
    quota_phrases = ()
    stream_end = "the connection closes after the last chunk (alt=sse; the last carries usageMetadata)"
    tiers = "priority / flex: one governor (or budget) per tier"

    def is_model_request(self, method: str, path: str) -> bool:
        if method.upper() != "POST":
            return False
        _, colon, verb = path.rstrip("/").rpartition(":")
        return bool(colon) and verb in self.model_paths and verb != "countTokens"

    def quota_reset(self, fields: ErrorBody, now: float | None) -> float | None:
        if not any("perday" in quota.lower() for quota in fields.quotas):
            return None
        return next_midnight(time.time() if now is None else now)

    def estimate(self, body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
        return estimate_gemini(body)

    def claims(self, fields: ErrorBody) -> bool:
        return fields.status is not None or fields.retry_delay is not None or bool(fields.quotas)

    def error_details(self, details: list[Any]) -> tuple[float | None, tuple[str, ...]] | None:
        return _google_details(details)

    def exception_parts(self, exc: BaseException) -> tuple[int | None, Any, Any]:
        """``errors.APIError`` carries ``code`` (the HTTP status), ``details`` (the
        decoded error body: ``status`` such as ``RESOURCE_EXHAUSTED``, and
        ``details`` with ``google.rpc.RetryInfo`` and ``google.rpc.QuotaFailure``)
        and the httpx ``response``."""
        response = getattr(exc, "response", None)
        return (
            http_status(getattr(exc, "code", None)),
            getattr(response, "headers", None),
            getattr(exc, "details", None),
        )

    def usage_part(self, obj: Any) -> Any:
        """``usageMetadata`` (or the SDK's ``usage_metadata``), or the usage itself."""
        found = _field(obj, "usageMetadata")
        if found is None:
            found = _field(obj, "usage_metadata")
        if found is None and _field(obj, "promptTokenCount") is not None:
            found = obj
        return found

    def usage_from(self, part: Any) -> Tokens | None:
        return _google_usage(part)

    # -- service tiers and billing (governor.prices) --

    refusals_billed = "nothing: a 429 RESOURCE_EXHAUSTED or an error answer is not billed"

    def requested_tier(self, body: Any) -> str:
        """``service_tier`` (or the REST ``serviceTier``) of the body or of its
        ``generationConfig``: ``flex``, ``priority``, ``SERVICE_TIER_FLEX``."""
        request = request_body(body)
        for part in (request, _field(request, "generationConfig") if request is not None else None):
            for name in ("service_tier", "serviceTier"):
                found = tier_name(_field(part, name)) if part is not None else None
                if found is not None:
                    return found
        return "standard"

    def served_tier(self, obj: Any, headers: Any = None) -> str | None:
        """The ``x-gemini-service-tier`` response header (a priority request
        past its limit is served, and billed, at the standard tier)."""
        if headers is None:
            return None
        try:
            value = headers.get("x-gemini-service-tier") or headers.get("X-Gemini-Service-Tier")
        except Exception:  # noqa: BLE001 - headers that cannot be read say nothing
            return None
        return tier_name(value)

    def priced_usage(self, obj: Any) -> PricedUsage | None:
        """``usageMetadata``: the prompt (cached content and tool-use prompt
        included) as input, ``cachedContentTokenCount`` as cache reads,
        candidates and thoughts as output."""
        part = self.usage_part(obj) if obj is not None else None
        if part is None:
            return None
        figures = []
        for camel, snake in (
            ("promptTokenCount", "prompt_token_count"),
            ("toolUsePromptTokenCount", "tool_use_prompt_token_count"),
            ("candidatesTokenCount", "candidates_token_count"),
            ("thoughtsTokenCount", "thoughts_token_count"),
            ("cachedContentTokenCount", "cached_content_token_count"),
        ):
            value = _field(part, camel)
            figures.append(_field(part, snake) if value is None else value)
        prompt, tool, candidates, thoughts, cached = (0 if value is None else value for value in figures)
        if not all(_is_count(value) for value in (prompt, tool, candidates, thoughts)):
            return None
        return priced(prompt + tool, candidates + thoughts, cached)


@register
class Vertex(Gemini):
    """Vertex AI (``google-genai`` with ``vertexai=True``): the Gemini
    shapes under ``/projects/.../publishers/google/models/...``; a 429
    "Resource exhausted" with no headers (shared capacity, Provisioned
    Throughput has its own)."""

    name = "vertex"
    tiers = "Provisioned Throughput vs pay-as-you-go (X-Vertex-AI-LLM-Request-Type): one governor per kind"


def _google_details(details: list[Any]) -> tuple[float | None, tuple[str, ...]]:
    delay: float | None = None
    quotas: list[str] = []
    for item in details[:16]:
        if not isinstance(item, Mapping):
            continue
        kind = str(item.get("@type", ""))
        if kind.endswith("google.rpc.RetryInfo"):
            delay = parse_google_duration(item.get("retryDelay"))
        elif kind.endswith("google.rpc.QuotaFailure"):
            for violation in item.get("violations") or ():
                if isinstance(violation, Mapping):
                    quota = violation.get("quotaId") or violation.get("quotaMetric")
                    if isinstance(quota, str):
                        quotas.append(quota)
        elif kind.endswith("google.rpc.ErrorInfo"):
            metadata = item.get("metadata")
            if isinstance(metadata, Mapping) and isinstance(metadata.get("quota_limit"), str):
                quotas.append(metadata["quota_limit"])
    return delay, tuple(quotas)


def parse_google_duration(value: Any) -> float | None:
    """Seconds of a protobuf Duration in its JSON form (``"37s"``, ``"0.5s"``); None if it is not one."""
    if not isinstance(value, str) or not value.endswith("s") or len(value) > 32:
        return None
    try:
        seconds = float(value[:-1])
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def estimate_gemini(body: bytes | str | Mapping[str, Any] | None) -> Tokens:
    """A Gemini (or Vertex AI) ``generateContent`` request's tokens, by the
    same rule as :func:`estimate_request`: the text of ``contents`` and
    ``systemInstruction``, the JSON of ``tools`` and the response schema as
    input; ``generationConfig.maxOutputTokens`` (else
    ``DEFAULT_OUTPUT_TOKENS``) times ``candidateCount`` as output."""
    request, size = _decoded(body)
    if request is None:
        return Tokens() if size == 0 else Tokens(_bounded(math.ceil(size / CHARS_PER_TOKEN)), DEFAULT_OUTPUT_TOKENS)
    count = _Count()
    for name in ("contents", "systemInstruction", "system_instruction"):
        value = request.get(name)
        if isinstance(value, list):
            count.messages += sum(1 for item in value if isinstance(item, Mapping))
        elif isinstance(value, Mapping):
            count.messages += 1
        if value is not None:
            count.walk(value)
    config = request.get("generationConfig") or request.get("generation_config") or {}
    config = config if isinstance(config, Mapping) else {}
    for value in (request.get("tools"), config.get("responseSchema"), config.get("responseJsonSchema")):
        if value is not None:
            count.chars += _json_size(value, count)
    maximum = config.get("maxOutputTokens", config.get("max_output_tokens"))
    output = maximum if _is_count(maximum) else DEFAULT_OUTPUT_TOKENS
    choices = config.get("candidateCount", config.get("candidate_count"))
    if _is_count(choices) and 1 <= choices <= MAX_CHOICES:
        output *= choices
    return Tokens(_bounded(_sum(count)), _bounded(output))


def _google_usage(usage: Any) -> Tokens | None:
    """Gemini's usageMetadata: the prompt (cached content included) and tool-use
    prompt as input; candidates and thoughts as output."""
    prompt = _field(usage, "promptTokenCount")
    if prompt is None:
        prompt = _field(usage, "prompt_token_count")
    if not _is_count(prompt):
        return None
    parts = []
    for camel, snake in (
        ("toolUsePromptTokenCount", "tool_use_prompt_token_count"),
        ("candidatesTokenCount", "candidates_token_count"),
        ("thoughtsTokenCount", "thoughts_token_count"),
    ):
        value = _field(usage, camel)
        if value is None:
            value = _field(usage, snake)
        if value is not None and not _is_count(value):
            return None
        parts.append(value or 0)
    tool, candidates, thoughts = parts
    return _tokens(prompt + tool, candidates + thoughts)


__all__ = ["PACIFIC", "Gemini", "Vertex", "estimate_gemini", "next_midnight", "parse_google_duration"]
