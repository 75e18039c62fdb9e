"""Anthropic: its profile (the usage's cache reads, 529 overloads)."""

from __future__ import annotations

from typing import Any

from ..budgets import Tokens
from ..estimate import _field
from . import Profile, register, usage_of


@register
class Anthropic(Profile):
    """Anthropic: ``anthropic-ratelimit-*`` headers, 529 ``overloaded_error``
    (an overload, retried, but no limit of the account), cache reads apart
    from ``input_tokens`` in the usage."""

    name = "anthropic"
    modules = ("anthropic",)
    model_paths = ("messages",)
    stream_end = "event: message_stop"
    tiers = "service_tier priority / standard_only: one governor per tier"

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
