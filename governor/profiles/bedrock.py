"""Amazon Bedrock (``boto3`` ``bedrock-runtime``): its profile, the burndown
of some models' output tokens, the estimate of a ``Converse`` request, the
usage of its answers and the reading of botocore's exceptions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..budgets import MAX_TOKENS, Tokens
from ..estimate import (
    CHARS_PER_TOKEN,
    DEFAULT_OUTPUT_TOKENS,
    _bounded,
    _Count,
    _decoded,
    _field,
    _is_count,
    _json_size,
    _sum,
    _tokens,
    estimate_request,
)
from ..prices import Usage as PricedUsage
from . import ErrorBody, Profile, http_status, priced, register, request_body, tier_name, usage_of

#: Bedrock models whose output tokens count several times against the tokens quota (the burndown rate)
BURNDOWN = (
    ("anthropic.claude-3-7", 5),
    ("anthropic.claude-sonnet-4", 5),
    ("anthropic.claude-opus-4", 5),
    ("anthropic.claude-haiku-4", 5),
)


def burndown(path: str) -> int:
    """The burndown rate of the model a Bedrock path names (1 for most models)."""
    for prefix, rate in BURNDOWN:
        if prefix in path:
            return rate
    return 1


@register
class Bedrock(Profile):
    """Amazon Bedrock (``boto3`` ``bedrock-runtime``): ``ThrottlingException``
    (429) and ``ServiceUnavailableException`` (503), no rate-limit headers;
    the tokens quota is taken at request start as input tokens plus
    ``maxTokens``, and output tokens of some models count several times
    (:data:`BURNDOWN`).

    Load signals: ``ThrottlingException`` (429, the account's quotas). Not
    load signals: ``ServiceUnavailableException`` (503, the service short of
    capacity) and ``ModelNotReadyException`` (the model is being loaded)."""

    name = "bedrock"
    modules = ("botocore", "boto3")
    model_paths = ("converse", "converse-stream", "invoke", "invoke-with-response-stream")
    headers = False
    throttle_names = frozenset({"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException"})
    overload_names = frozenset({"ServiceUnavailableException", "ModelNotReadyException"})
    quota_names = frozenset()
    quota_phrases = ()
    stream_end = "the metadata event (usage), after messageStop"
    tiers = "service tiers (default / priority / flex): one governor per tier"

    def estimate(self, body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
        found = estimate_bedrock(body)
        return Tokens(found.input, min(MAX_TOKENS, found.output * burndown(path)))

    def claims(self, fields: ErrorBody) -> bool:
        return fields.type is not None and fields.type.endswith("Exception")

    def exception_parts(self, exc: BaseException) -> tuple[int | None, Any, Any]:
        """A botocore ``ClientError``'s ``response`` is a dict: ``Error.Code``
        (``ThrottlingException``, ``ServiceUnavailableException``, ...),
        ``Error.Message`` and ``ResponseMetadata`` (``HTTPStatusCode``,
        ``HTTPHeaders``). An exception event inside ``converse_stream``
        (``EventStreamError``) has the same shape."""
        response = getattr(exc, "response", None)
        if not isinstance(response, Mapping):
            return None, None, None
        error = response.get("Error")
        metadata = response.get("ResponseMetadata")
        status = http_status(metadata.get("HTTPStatusCode")) if isinstance(metadata, Mapping) else None
        headers = metadata.get("HTTPHeaders") if isinstance(metadata, Mapping) else None
        body = {"__type": error.get("Code"), "message": error.get("Message")} if isinstance(error, Mapping) else None
        return status, headers, body

    def usage_part(self, obj: Any) -> Any:
        """Converse's ``usage`` (``inputTokens``, ``outputTokens``), or the usage itself."""
        usage = _field(obj, "usage")
        if usage is None:
            usage = obj
        if isinstance(usage, (str, bytes, int, float)) or _field(usage, "inputTokens") is None:
            return None
        return usage

    def usage_from(self, part: Any) -> Tokens | None:
        return _bedrock_usage(part)

    def usage(self, obj: Any, path: str = "") -> Tokens | None:
        found = usage_of(obj)
        if found is None:
            return None
        return Tokens(found.input, min(MAX_TOKENS, found.output * burndown(path)))

    # -- service tiers and billing (governor.prices) --

    refusals_billed = "nothing: a ThrottlingException or an error answer is not billed"

    def requested_tier(self, body: Any) -> str:
        """Converse's ``serviceTier: {"type": "priority" | "default" | "flex"}``."""
        return _service_tier(request_body(body)) or "standard"

    def served_tier(self, obj: Any, headers: Any = None) -> str | None:
        """The response's ``serviceTier.type``, when it says."""
        return _service_tier(obj)

    def priced_usage(self, obj: Any) -> PricedUsage | None:
        """Converse's usage: ``inputTokens`` without the cache reads and writes
        (``cacheReadInputTokens``, ``cacheWriteInputTokens``), which are added."""
        part = self.usage_part(obj) if obj is not None else None
        if part is None:
            return None
        given, read, write = (
            _field(part, name) for name in ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
        )
        if not all(_is_count(value) for value in (given, read or 0, write or 0)):
            return None
        return priced(given + (read or 0) + (write or 0), _field(part, "outputTokens"), read, write)


def _service_tier(obj: Any) -> str | None:
    """The tier named by ``serviceTier.type`` (Converse's shape) of a request or response."""
    found = _field(obj, "serviceTier") if obj is not None else None
    return tier_name(_field(found, "type") if found is not None else None)


def estimate_bedrock(body: bytes | str | Mapping[str, Any] | None) -> Tokens:
    """A Bedrock ``Converse`` (or Anthropic-shaped ``InvokeModel``) request's
    tokens: the text of ``messages`` and ``system``, the JSON of
    ``toolConfig`` as input; ``inferenceConfig.maxTokens`` (InvokeModel:
    ``max_tokens``; else ``DEFAULT_OUTPUT_TOKENS``) as output, which is what
    Bedrock takes from the quota at the start."""
    request, size = _decoded(body)
    if request is None:
        return Tokens() if size == 0 else Tokens(_bounded(math.ceil(size / CHARS_PER_TOKEN)), DEFAULT_OUTPUT_TOKENS)
    if "inferenceConfig" not in request and "toolConfig" not in request:
        return estimate_request(request)  # InvokeModel with the model's own body (Anthropic's messages)
    count = _Count()
    for name in ("messages", "system"):
        value = request.get(name)
        if isinstance(value, list) and name == "messages":
            count.messages += sum(1 for item in value if isinstance(item, Mapping))
        if value is not None:
            count.walk(value)
    if request.get("toolConfig") is not None:
        count.chars += _json_size(request["toolConfig"], count)
    config = request.get("inferenceConfig")
    maximum = config.get("maxTokens") if isinstance(config, Mapping) else None
    return Tokens(_bounded(_sum(count)), _bounded(maximum if _is_count(maximum) else DEFAULT_OUTPUT_TOKENS))


def _bedrock_usage(usage: Any) -> Tokens | None:
    """Bedrock's Converse usage: input tokens and cache writes as input (cache
    reads are given back to the quota when the request settles), output tokens."""
    values = [_field(usage, name) for name in ("inputTokens", "cacheWriteInputTokens", "outputTokens")]
    if any(value is not None and not _is_count(value) for value in values):
        return None
    inputs, writes, output = (value or 0 for value in values)
    return _tokens(inputs + writes, output)


__all__ = ["BURNDOWN", "Bedrock", "burndown", "estimate_bedrock"]
