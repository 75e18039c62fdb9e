"""OpenAI, Azure OpenAI and LiteLLM: the OpenAI-shaped providers (their
errors, usage and streams are the base profile's shapes)."""

from __future__ import annotations

from typing import Any

from ..headers import RateLimits, parse
from . import Profile, http_parts, register


@register
class OpenAI(Profile):
    """OpenAI: ``x-ratelimit-*`` headers, ``retry-after-ms``, "Please try
    again in 424ms" in a 429's message; refused requests count against the
    requests limit; ``insufficient_quota`` is billing.

    Load signals: a 429 ``rate_limit_exceeded`` whose ``x-ratelimit-*``
    headers do not show requests and tokens remaining. Not load signals: a
    503 or an ``overloaded`` error (the engine short of capacity), and a 429
    whose headers show requests and tokens remaining (a shared capacity
    refusal, not the account's limits)."""

    name = "openai"
    modules = ("openai",)
    model_paths = ("chat/completions", "completions", "responses", "embeddings")
    stream_end = "data: [DONE] (Responses API: response.completed)"
    refusals_count = True
    tiers = "service_tier flex / priority: one governor (or budget) per tier"
    refusals_billed = "nothing: a 429 or an error answer is not billed (a 429 counts against the requests limit)"


@register
class Azure(OpenAI):
    """Azure OpenAI: OpenAI's shapes on deployment paths; some APIs send
    ``-1`` or ``0`` in the rate-limit headers (read as no figure, never as a
    limit of zero); ``x-ms-retry-after-ms``; requests per minute enforced
    over 1-10 s windows, so a fleet's burst is refused below the minute's
    figure (the adaptive concurrency limit and a requests budget with a
    small burst absorb it)."""

    name = "azure"
    tiers = "deployment types (standard, provisioned, batch): one governor per deployment"

    def rate_limits(self, headers: Any, *, now: float | None = None) -> RateLimits:
        limits = parse(headers, now=now)
        budgets = {kind: figures for kind, figures in limits.budgets.items() if figures.limit != 0}
        if len(budgets) == len(limits.budgets):
            return limits
        return RateLimits(budgets, limits.retry_after, limits.malformed)


@register
class LiteLLM(Profile):
    """LiteLLM: every provider's errors mapped onto OpenAI's exception
    classes (``litellm.RateLimitError`` is a 429), usage in OpenAI's shape."""

    name = "litellm"
    modules = ("litellm",)
    model_paths = ("chat/completions", "completions", "responses", "embeddings", "messages")
    stream_end = "the wrapper's last chunk (usage with stream_options include_usage)"
    tiers = "as the provider behind it"
    refusals_billed = "as the provider behind it"
    by_shape = True  # the body's shape names the provider behind LiteLLM

    def exception_parts(self, exc: BaseException) -> tuple[int | None, Any, Any]:
        status, headers, body = http_parts(exc)
        if not headers:  # LiteLLM 1.105 (CrewAI's) leaves the response bare and keeps the provider's headers here
            headers = getattr(exc, "litellm_response_headers", None) or headers
        if body is None:
            body = getattr(exc, "message", None)  # the provider's own message, its "try again in" included
        return status, headers, body
