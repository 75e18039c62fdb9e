"""Provider profiles: what the governor knows of each provider, one unit each.

A profile says, for one provider's API, everything the governed clients,
``call()``, the classifiers and the budgets need to know of it:

- which requests are model calls (:meth:`Profile.is_model_request`);
- how its errors are classified (:meth:`Profile.classify`): throttled
  (retried, capacity learnt), quota exhausted (never retried; a per-day
  quota with the moment it resets), or an error;
- where its retry hint is (:meth:`Profile.retry_hint`): a header in any
  unit, or the body (Google's ``RetryInfo.retryDelay``, OpenAI's "Please
  try again in 424ms");
- what its headers say (:meth:`Profile.rate_limits`), or that it sends none
  (:attr:`Profile.headers`);
- how a request's cost is estimated before the call (:meth:`Profile.estimate`)
  and what its usage says after it (:meth:`Profile.usage`), in the units
  the provider's quota counts;
- how a stream ends (:attr:`Profile.stream_end`) and how its usage is read;
- whether refused requests count against its limits (:attr:`Profile.refusals_count`).

:data:`REGISTRY` holds one instance per provider; adding a provider is one
subclass here and its tests. Nothing here imports a provider SDK.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, NamedTuple

from .backoff import parse_retry_after
from .budgets import MAX_TOKENS, Tokens
from .core import Outcome
from .errors import ConfigError
from .headers import EMPTY, RateLimits, parse, parse_duration

#: a body larger than this is not parsed: error bodies are small
MAX_BODY = 65536


@dataclass(frozen=True)
class ErrorBody:
    """The stable fields of an error body, in any provider's shape."""

    type: str | None = None  #: OpenAI error.type, Anthropic error.type, AWS __type / x-amzn-ErrorType
    code: str | None = None  #: OpenAI error.code (Google's numeric code as text)
    detail: str | None = None  #: Anthropic error.details.error_code
    status: str | None = None  #: Google error.status (RESOURCE_EXHAUSTED, UNAVAILABLE)
    message: str | None = None
    #: seconds of Google's google.rpc.RetryInfo.retryDelay, when it is there
    retry_delay: float | None = None
    #: Google's google.rpc.QuotaFailure violations' quotaId (and ErrorInfo quota_limit)
    quotas: tuple[str, ...] = ()

    def names(self) -> set[str]:
        return {name for name in (self.type, self.code, self.detail, self.status) if name}


class Reading(NamedTuple):
    """A profile's verdict on one failed exchange."""

    kind: Outcome  #: RATE_LIMITED, QUOTA_EXHAUSTED or ERROR
    retry_after: float | None  #: seconds the provider asked to wait (RATE_LIMITED)
    description: str
    until: float | None = None  #: Unix seconds a used-up quota comes back (QUOTA_EXHAUSTED)


def read_error(body: Any, headers: Any = None) -> ErrorBody:
    """The fields of an error body: decoded JSON, text or bytes (bodies over
    :data:`MAX_BODY` are read as text only). AWS names the error in the
    ``x-amzn-ErrorType`` header as well as (or instead of) the body."""
    aws_type = _aws_type(headers)
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body[:MAX_BODY]).decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        if not text.startswith(("{", "[")) or len(text) > MAX_BODY:
            return ErrorBody(type=aws_type, message=text[:500] or None)
        try:
            body = json.loads(text)
        except ValueError:
            return ErrorBody(type=aws_type, message=text[:500])
    if isinstance(body, list) and body and isinstance(body[0], Mapping):  # Vertex AI's REST: a list of one
        body = body[0]
    if not isinstance(body, Mapping):
        return ErrorBody(type=aws_type)
    if aws_type is None and isinstance(body.get("__type"), str):
        aws_type = body["__type"].rpartition("#")[2]
    error: Any = body.get("error", body)
    if isinstance(error, str):  # {"error": "Too many requests"}, as some gateways answer
        return ErrorBody(type=aws_type, message=error)
    if not isinstance(error, Mapping):
        return ErrorBody(type=aws_type)
    details = error.get("details")
    detail = details.get("error_code") if isinstance(details, Mapping) else None
    retry_delay, quotas = _google_details(details) if isinstance(details, list) else (None, ())
    message = _text(error.get("message"))
    if message is None:
        message = _text(body.get("message")) or _text(body.get("Message"))
    return ErrorBody(
        type=aws_type or _text(error.get("type")),
        code=_text(error.get("code")),
        detail=_text(detail),
        status=_text(error.get("status")),
        message=message,
        retry_delay=retry_delay,
        quotas=quotas,
    )


def _aws_type(headers: Any) -> str | None:
    if headers is None:
        return None
    try:
        value = headers.get("x-amzn-errortype") or headers.get("x-amzn-ErrorType")
    except Exception:  # noqa: BLE001 - headers that cannot be read name nothing
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.partition(":")[0].strip() or None if isinstance(value, str) else None


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


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # Google's and some gateways' numeric codes
        return str(value)
    return None


#: "Please try again in 424ms" / "in 1.5s" / "in 6m0s" / "in 20s", as OpenAI (and the mock's Anthropic shape) say
_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?)(?:ms|s|m))*)")


def try_again_in(message: str | None) -> float | None:
    """Seconds named by a "try again in <duration>" in an error message, or None."""
    if not message:
        return None
    match = _TRY_AGAIN.search(message[:2000])
    return None if match is None else parse_duration(match.group(1))


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(status: int | None, fields: ErrorBody) -> str:
    label = "HTTP error" if status is None else f"HTTP {status}"
    if status == 200:
        label = "stream error event"
    name = fields.detail or fields.status or fields.code or fields.type
    text = " ".join([label] + ([name] if name else []))
    if fields.message:
        text += f": {fields.message}"
    return _clip(text)


# -- the profiles ---------------------------------------------------------------------


class Profile:
    """The base of every provider profile: the OpenAI-shaped defaults."""

    #: the profile's name (the registry's key)
    name: ClassVar[str] = ""
    #: top-level modules of the SDK whose exceptions this profile classifies
    modules: ClassVar[tuple[str, ...]] = ()
    #: path endings of the model endpoints (a POST to one is governed)
    model_paths: ClassVar[tuple[str, ...]] = ()
    #: whether the provider sends rate-limit headers the budgets can read
    headers: ClassVar[bool] = True
    #: error names (type, code, status, AWS error type) that mean throttled or overloaded whatever the status
    throttle_names: ClassVar[frozenset[str]] = frozenset(
        {"rate_limit_error", "overloaded_error", "rate_limit_exceeded", "overloaded"}
    )
    #: error names that mean the account cannot pay (never retried)
    quota_names: ClassVar[frozenset[str]] = frozenset(
        {
            "insufficient_quota",  # OpenAI 429: "You exceeded your current quota"
            "billing_hard_limit_reached",  # OpenAI: the account's hard spend limit
            "billing_not_active",  # OpenAI: no active billing
            "billing_error",  # Anthropic error type
            "contract_spend_limit_reached",  # Anthropic 429
            "enforced_spend_limit_reached",  # Anthropic 429: monthly threshold of the API tier
            "linked_organization_spend_limit_reached",  # Anthropic 402
            "linked_organization_billing_unavailable",  # Anthropic 402
        }
    )
    #: billing errors sent only as prose (lower-cased substrings of the message)
    quota_phrases: ClassVar[tuple[str, ...]] = (
        "credit balance is too low",  # Anthropic 400 invalid_request_error
        "reached your specified api usage limits",  # Anthropic 400: the spend limit set in the console
        "extra usage is required",  # Anthropic 429 rate_limit_error, a billing gate, not a throttle
        "usage credits are required",  # same gate, newer wording
    )
    #: how a stream ends, for the docs: the event that says it is complete
    stream_end: ClassVar[str] = ""
    #: whether refused requests count against the provider's request limit
    refusals_count: ClassVar[bool] = False
    #: service tiers, for the docs: how a fleet that mixes them governs each
    tiers: ClassVar[str] = ""

    def is_model_request(self, method: str, path: str) -> bool:
        """Whether a request is governed: a POST to one of :attr:`model_paths`."""
        if method.upper() != "POST":
            return False
        path = path.rstrip("/")
        return any(path == ending or path.endswith("/" + ending) for ending in self.model_paths)

    def classify(self, status: int | None, headers: Any, body: Any, *, now: float | None = None) -> Reading:
        """The verdict on a failed exchange: its status (None: an error without
        one, such as an event inside a stream), headers and body."""
        fields = body if isinstance(body, ErrorBody) else read_error(body, headers)
        names = fields.names()
        description = describe(status, fields)
        message = (fields.message or "").lower()
        if names & self.quota_names or status == 402 or any(phrase in message for phrase in self.quota_phrases):
            return Reading(Outcome.QUOTA_EXHAUSTED, None, description)
        until = self.quota_reset(fields, now)
        if until is not None:
            return Reading(Outcome.QUOTA_EXHAUSTED, None, description, until)
        if self.throttled(status, fields):
            return Reading(Outcome.RATE_LIMITED, self.retry_hint(headers, fields, now=now), description)
        return Reading(Outcome.ERROR, None, description)

    def throttled(self, status: int | None, fields: ErrorBody) -> bool:
        names = fields.names()
        if names & self.throttle_names or status in (429, 529):
            return True
        # A 503 is overload unless the body names another cause (Anthropic's
        # details.error_code, e.g. "cmek_key_unreachable"): those are not throttles.
        return status == 503 and (fields.detail is None or fields.detail in self.throttle_names)

    def retry_hint(self, headers: Any, fields: ErrorBody, *, now: float | None = None) -> float | None:
        """Seconds the provider asked to wait: a header (``retry-after-ms``,
        ``x-ms-retry-after-ms``, ``Retry-After``), else the body's hint."""
        seconds = parse_retry_after(headers, now=now)
        if seconds is not None:
            return seconds
        if fields.retry_delay is not None:
            return fields.retry_delay
        return try_again_in(fields.message)

    def quota_reset(self, fields: ErrorBody, now: float | None) -> float | None:
        """Unix seconds a per-day quota named by the error comes back; None
        when the error names none."""
        return None

    def rate_limits(self, headers: Any, *, now: float | None = None) -> RateLimits:
        """What the response's headers say about the account's limits."""
        return parse(headers, now=now) if self.headers else EMPTY

    def estimate(self, body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
        """The tokens a request will take, in the units the provider's quota counts."""
        from .estimate import estimate_request

        return estimate_request(body, path)

    def usage(self, obj: Any, path: str = "") -> Tokens | None:
        """The tokens a response says it used, in the provider quota's units."""
        from .estimate import usage_of

        return usage_of(obj)

    def __repr__(self) -> str:
        return f"<profile {self.name}>"


class OpenAI(Profile):
    """OpenAI: ``x-ratelimit-*`` headers, ``retry-after-ms``, "Please try
    again in 424ms" in a 429's message; refused requests count against the
    requests limit; ``insufficient_quota`` is billing."""

    name = "openai"
    modules = ("openai",)
    model_paths = ("chat/completions", "completions", "responses", "embeddings")
    stream_end = "data: [DONE] (Responses API: response.completed)"
    refusals_count = True
    tiers = "service_tier flex / priority: one governor (or budget) per tier"


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
        from .estimate import _field, usage_of

        found = usage_of(obj)
        usage = _field(obj, "usage") or obj
        read = _field(usage, "cache_read_input_tokens")
        if found is None or not isinstance(read, int) or isinstance(read, bool) or read <= 0:
            return found
        return Tokens(max(0, found.input - read), found.output)


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


class Gemini(Profile):
    """The Gemini API (``google-genai``): no rate-limit headers; a 429
    ``RESOURCE_EXHAUSTED`` carries ``google.rpc.QuotaFailure`` (which quota:
    per minute or per day, per project and model) and
    ``google.rpc.RetryInfo.retryDelay`` in the body; per-day quotas reset at
    midnight Pacific time; tokens per minute count input tokens."""

    name = "gemini"
    modules = ("google",)
    model_paths = ("generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents")
    headers = False
    throttle_names = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE"})
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
        import time

        return next_midnight(time.time() if now is None else now)

    def estimate(self, body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
        from .estimate import estimate_gemini

        return estimate_gemini(body)


class Vertex(Gemini):
    """Vertex AI (``google-genai`` with ``vertexai=True``): the Gemini
    shapes under ``/projects/.../publishers/google/models/...``; a 429
    "Resource exhausted" with no headers (shared capacity, Provisioned
    Throughput has its own)."""

    name = "vertex"
    tiers = "Provisioned Throughput vs pay-as-you-go (X-Vertex-AI-LLM-Request-Type): one governor per kind"


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


class Bedrock(Profile):
    """Amazon Bedrock (``boto3`` ``bedrock-runtime``): ``ThrottlingException``
    (429) and ``ServiceUnavailableException`` (503), no rate-limit headers;
    the tokens quota is taken at request start as input tokens plus
    ``maxTokens``, and output tokens of some models count several times
    (:data:`BURNDOWN`)."""

    name = "bedrock"
    modules = ("botocore", "boto3")
    model_paths = ("converse", "converse-stream", "invoke", "invoke-with-response-stream")
    headers = False
    throttle_names = frozenset({"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException"})
    quota_names = frozenset()
    quota_phrases = ()
    stream_end = "the metadata event (usage), after messageStop"
    tiers = "service tiers (default / priority / flex): one governor per tier"

    def estimate(self, body: bytes | str | Mapping[str, Any] | None, path: str = "") -> Tokens:
        from .estimate import estimate_bedrock

        found = estimate_bedrock(body)
        return Tokens(found.input, min(MAX_TOKENS, found.output * burndown(path)))

    def usage(self, obj: Any, path: str = "") -> Tokens | None:
        from .estimate import usage_of

        found = usage_of(obj)
        if found is None:
            return None
        return Tokens(found.input, min(MAX_TOKENS, found.output * burndown(path)))


class LiteLLM(Profile):
    """LiteLLM: every provider's errors mapped onto OpenAI's exception
    classes (``litellm.RateLimitError`` is a 429), usage in OpenAI's shape."""

    name = "litellm"
    modules = ("litellm",)
    model_paths = ("chat/completions", "completions", "responses", "embeddings", "messages")
    stream_end = "the wrapper's last chunk (usage with stream_options include_usage)"
    tiers = "as the provider behind it"


#: every profile, by name
REGISTRY: Mapping[str, Profile] = {
    profile.name: profile for profile in (OpenAI(), Azure(), Anthropic(), Gemini(), Vertex(), Bedrock(), LiteLLM())
}
#: the profile of an exception's top-level module
BY_MODULE: Mapping[str, Profile] = {
    module: REGISTRY[name]
    for name in ("openai", "anthropic", "gemini", "bedrock", "litellm")
    for module in REGISTRY[name].modules
}


def profile(name: str | Profile) -> Profile:
    """A profile by name (or the profile itself)."""
    if isinstance(name, Profile):
        return name
    found = REGISTRY.get(name)
    if found is None:
        raise ConfigError(f"unknown provider profile {name!r}: use one of {', '.join(REGISTRY)}")
    return found


def detect(fields: ErrorBody, headers: Any = None) -> Profile:
    """The profile whose error shape a body is in (OpenAI's when it names none)."""
    if fields.status is not None or fields.retry_delay is not None or fields.quotas:
        return REGISTRY["gemini"]
    if fields.type is not None and fields.type.endswith("Exception"):
        return REGISTRY["bedrock"]
    return REGISTRY["openai"]


__all__ = [
    "BURNDOWN",
    "REGISTRY",
    "ErrorBody",
    "Profile",
    "Reading",
    "burndown",
    "detect",
    "next_midnight",
    "parse_google_duration",
    "profile",
    "read_error",
    "try_again_in",
]
