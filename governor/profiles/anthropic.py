"""Anthropic: its profile (the usage's cache reads, 529 overloads)."""

from __future__ import annotations

from typing import Any

from ..budgets import Tokens
from ..estimate import _field
from . import Profile, register, request_body, tier_name, usage_of


@register
class Anthropic(Profile):
    """Anthropic: ``anthropic-ratelimit-*`` headers, 529 ``overloaded_error``
    (an overload, retried, but no limit of the account), cache reads apart
    from ``input_tokens`` in the usage.

    Load signals: a 429 ``rate_limit_error`` whose headers do not show
    requests and tokens remaining. Not load signals: a 529 (or a stream's
    ``overloaded_error`` event), the API overloaded whatever this fleet
    sends, and a 429 whose ``anthropic-ratelimit-*`` headers show requests
    and input tokens remaining."""

    name = "anthropic"
    modules = ("anthropic",)
    model_paths = ("messages",)
    stream_end = "event: message_stop"
    tiers = "fast mode: budgets of its own (fast_*) in the one governor; service_tier priority: one governor per tier"

    def usage(self, obj: Any, path: str = "") -> Tokens | None:
        """Input counts what the input-tokens-per-minute limit counts: on
        current models cache reads do not count toward it, so they are left
        out; cache writes count."""
        found = usage_of(obj)
        usage = _field(obj, "usage") or obj
        read = _field(usage, "cache_read_input_tokens")
        if found is None or not isinstance(read, int) or isinstance(read, bool) or read <= 0:
            return found
        return Tokens(max(0, found.input - read), found.output)

    # -- service tiers and billing (governor.prices) --

    refusals_billed = "nothing: a 429, a 529 overload or an error answer is not billed"
    #: fast mode "has a dedicated rate limit that is separate from standard Opus rate limits"
    tiers_apart = frozenset({"fast"})

    def requested_tier(self, body: Any) -> str:
        """``speed: "fast"`` asks for fast mode; ``service_tier`` (``auto``,
        ``standard_only``) asks for no tier priced apart."""
        request = request_body(body)
        if request is not None and tier_name(_field(request, "speed")) == "fast":
            return "fast"
        return "standard"

    def served_tier(self, obj: Any, headers: Any = None) -> str | None:
        """The usage says it: ``usage.speed`` (``fast`` or ``standard``), then
        ``usage.service_tier`` (``standard``, ``priority``, ``batch``)."""
        usage = _field(obj, "usage") if obj is not None else None
        if usage is None:
            return None
        speed = tier_name(_field(usage, "speed"))
        if speed == "fast":
            return "fast"
        return tier_name(_field(usage, "service_tier")) or speed
