"""Provider profiles: what the governor knows of each provider, one unit each.

A profile says, for one provider's API, everything the governed clients,
``call()``, the classifiers, the streams and the budgets need to know of it:

- which requests are model calls (:meth:`Profile.is_model_request`);
- how its errors are classified (:meth:`Profile.classify`): throttled
  (retried, capacity learnt), quota exhausted (never retried; a per-day
  quota with the moment it resets), or an error; how its SDK's exceptions
  are read (:meth:`Profile.exception_parts`), and the error body's details
  in its own shape (:meth:`Profile.error_details`, :meth:`Profile.claims`);
- where its retry hint is (:meth:`Profile.retry_hint`): a header in any
  unit, or the body (Google's ``RetryInfo.retryDelay``, OpenAI's "Please
  try again in 424ms");
- what its headers say (:meth:`Profile.rate_limits`), or that it sends none
  (:attr:`Profile.headers`);
- how a request's cost is estimated before the call (:meth:`Profile.estimate`)
  and what its usage says after it (:meth:`Profile.usage`), in the units
  the provider's quota counts; a usage in a shape of its own, in a response
  or in a stream's chunk (:meth:`Profile.usage_part`, :meth:`Profile.usage_from`),
  which :func:`usage_of` reads whatever the provider;
- how a stream ends (:attr:`Profile.stream_end`);
- whether refused requests count against its limits (:attr:`Profile.refusals_count`);
- which of its refusals are load signals (:meth:`Profile.load_signal`): a
  throttle of this fleet's own traffic, which the adaptive policy cuts
  for, or a refusal the provider says is about something else (an
  overload, a 529, a 503, a 429 whose headers show requests and tokens
  remaining), which it weighs as the provider's background.

Each provider is one module of this package (``openai``, ``anthropic``,
``google``, ``bedrock``), whose profiles register themselves
(:func:`register`); every module of the package is imported with it, so
adding a provider is one module here (and its client in
governor/providers/) and its tests. Nothing here imports a provider SDK.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

from ..backoff import parse_retry_after
from ..budgets import MAX_TOKENS, Tokens
from ..core import Outcome
from ..errors import ConfigError
from ..estimate import _decoded, _field, _is_count, _tokens, estimate_request
from ..headers import EMPTY, RateLimits, parse, parse_duration
from ..prices import TIERS
from ..prices import Usage as PricedUsage

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
    #: (RATE_LIMITED) whether the refusal is a load signal (:meth:`Profile.load_signal`)
    load: bool = True


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
    retry_delay, quotas = _error_details(details) if isinstance(details, list) else (None, ())
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


def _error_details(details: list[Any]) -> tuple[float | None, tuple[str, ...]]:
    """The retry delay and quotas of an error's ``details`` list, as the provider whose shape it is reads them."""
    for shape in REGISTRY.values():
        found = shape.error_details(details)
        if found is not None:
            return found
    return None, ()


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
    #: error names (type, code, status, AWS error type) of a refusal that is no load signal:
    #: the provider is overloaded or short of capacity, whatever this fleet sends
    overload_names: ClassVar[frozenset[str]] = frozenset({"overloaded_error", "overloaded"})
    #: HTTP statuses of a refusal that is no load signal (an overload: 529, 503)
    overload_statuses: ClassVar[frozenset[int]] = frozenset({503, 529})
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

    #: its SDK is a gateway to many providers: an exception's body is read in whichever shape it is in
    by_shape: ClassVar[bool] = False

    def claims(self, fields: ErrorBody) -> bool:
        """Whether an error body of unknown origin is in this provider's own shape (:func:`detect`)."""
        return False

    def error_details(self, details: list[Any]) -> tuple[float | None, tuple[str, ...]] | None:
        """The retry delay (seconds) and the quotas an error body's ``details``
        list names, when it is in this provider's shape (None: it is not)."""
        return None

    def exception_parts(self, exc: BaseException) -> tuple[int | None, Any, Any]:
        """(HTTP status, headers, body) of an exception of its SDK (:attr:`modules`):
        read by duck typing (``status_code``, ``response``, ``body``), as the
        OpenAI-shaped SDKs carry them."""
        return http_parts(exc)

    def usage_part(self, obj: Any) -> Any:
        """The part of a response (or of a stream's chunk) that holds its usage in
        a shape of this provider's own; None when it is not in one (the
        OpenAI and Anthropic shapes are every profile's, :func:`usage_of`)."""
        return None

    def usage_from(self, part: Any) -> Tokens | None:
        """The tokens of a :meth:`usage_part`; None when its figures are not counts."""
        return None

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
            hint = self.retry_hint(headers, fields, now=now)
            return Reading(Outcome.RATE_LIMITED, hint, description, load=self.load_signal(status, headers, fields))
        return Reading(Outcome.ERROR, None, description)

    def load_signal(self, status: int | None, headers: Any, fields: ErrorBody) -> bool:
        """Whether a throttle is a load signal: this fleet's own traffic over a
        limit, which the adaptive policy cuts for. Not one (the policy weighs
        it as the provider's background: no cut, and its retry delay holds
        only its caller): an overload or a capacity error (:attr:`overload_names`,
        :attr:`overload_statuses`), and a refusal whose headers show requests
        and tokens remaining (the account's limits were not what refused it)."""
        if status in self.overload_statuses or fields.names() & self.overload_names:
            return False
        return not self.headroom(headers)

    def headroom(self, headers: Any) -> bool:
        """Whether a refusal's headers show requests and tokens (or input
        tokens) remaining: both announced, both above zero."""
        if headers is None or not self.headers:
            return False
        budgets = self.rate_limits(headers).budgets
        requests = budgets.get("requests")
        tokens = budgets.get("tokens") or budgets.get("input_tokens")
        return all(found is not None and (found.remaining or 0) > 0 for found in (requests, tokens))

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
        return estimate_request(body, path)

    def usage(self, obj: Any, path: str = "") -> Tokens | None:
        """The tokens a response says it used, in the provider quota's units."""
        return usage_of(obj)

    # -- service tiers and what a call is billed (the spend budgets' prices: governor.prices) --

    #: how a refused call (a 429, a 529, an error answer) is billed, for the docs and the spend budgets
    refusals_billed: ClassVar[str] = "nothing: a refused or failed request is not billed"
    #: whether a refused call (an error answer) is charged to the spend budgets, as the provider bills it
    refusals_charged: ClassVar[bool] = False
    #: the request body's field that names the tier asked for (OpenAI's shape)
    tier_field: ClassVar[str] = "service_tier"
    #: the tiers the provider limits apart from the standard one, each a budget of its own
    #: (governor.budgets.KIND_TIER): a request of such a tier reserves there, not in the standard budgets
    tiers_apart: ClassVar[frozenset[str]] = frozenset()

    def requested_tier(self, body: Any) -> str:
        """The service tier a request asks for (one of governor.prices.TIERS),
        read from its body (decoded JSON, a mapping); ``standard`` when it
        names none or one the prices do not know (``auto``, ``default``)."""
        request = request_body(body)
        return tier_name(_field(request, self.tier_field) if request is not None else None) or "standard"

    def served_tier(self, obj: Any, headers: Any = None) -> str | None:
        """The service tier a response says served it (one of
        governor.prices.TIERS); None when it does not say, and the tier
        asked for is charged. OpenAI's shape: the body's ``service_tier``."""
        return tier_name(_field(obj, "service_tier")) if obj is not None else None

    def priced_usage(self, obj: Any) -> PricedUsage | None:
        """The usage a response's price is computed from (its cached tokens
        apart, input counting them); None when it does not say. OpenAI's chat
        (``prompt_tokens_details.cached_tokens``) and Responses
        (``input_tokens_details.cached_tokens``) shapes, and Anthropic's (cache
        reads and writes apart from ``input_tokens``)."""
        usage = _field(obj, "usage") if obj is not None else None
        if usage is None and any(_field(obj, name) is not None for name in ("prompt_tokens", "input_tokens")):
            usage = obj
        if usage is None or isinstance(usage, (str, bytes, int, float)):
            return None
        prompt = _field(usage, "prompt_tokens")
        if prompt is not None:  # chat completions, embeddings
            cached = _field(_field(usage, "prompt_tokens_details"), "cached_tokens")
            return priced(prompt, _field(usage, "completion_tokens"), cached)
        given = _field(usage, "input_tokens")
        output = _field(usage, "output_tokens")
        read, write = _field(usage, "cache_read_input_tokens"), _field(usage, "cache_creation_input_tokens")
        if read is not None or write is not None:  # Anthropic: the cached tokens are apart from input_tokens
            if not all(_is_count(part) for part in (given, read or 0, write or 0)):
                return None
            return priced(given + (read or 0) + (write or 0), output, read, write)
        return priced(given, output, _field(_field(usage, "input_tokens_details"), "cached_tokens"))

    def __repr__(self) -> str:
        return f"<profile {self.name}>"


#: a provider's names of the standard tier
_STANDARD_NAMES = frozenset({"auto", "default", "standard", "standard_only", "on_demand"})


def priced(total: Any, output: Any, read: Any = None, write: Any = None) -> PricedUsage | None:
    """A governor.prices.Usage of a response's figures (None counts as 0); None
    when one is no count, or the cached tokens are more than the input."""
    figures = [0 if value is None else value for value in (total, output, read, write)]
    if not all(_is_count(value) and value <= MAX_TOKENS for value in figures):
        return None
    total, output, read, write = figures
    if read + write > total:
        return None
    return PricedUsage(input_tokens=total, output_tokens=output, cache_read_tokens=read, cache_write_tokens=write)


def request_body(body: Any) -> Any:
    """A request's body as fields can be read from: JSON text or bytes decoded
    (None when it is not a JSON object), anything else as it is."""
    if isinstance(body, (str, bytes, bytearray)):
        return _decoded(bytes(body) if isinstance(body, bytearray) else body)[0]
    return body


def tier_name(value: Any) -> str | None:
    """A provider's name of a service tier as governor.prices.TIERS names it
    (``default`` and ``auto`` are ``standard``; Gemini's ``SERVICE_TIER_FLEX``
    is ``flex``); None for no name, or one the prices do not know."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    name = value.strip().lower().removeprefix("service_tier_")
    if name in _STANDARD_NAMES:
        return "standard"
    return name if name in TIERS else None


# -- the registry -----------------------------------------------------------------------

#: every profile, by name (each provider's module registers its own)
REGISTRY: dict[str, Profile] = {}
#: the profile of an exception's top-level module (the first registered for it)
BY_MODULE: dict[str, Profile] = {}

P = TypeVar("P", bound=type[Profile])


def register(cls: P) -> P:
    """Class decorator: one instance of the profile in :data:`REGISTRY` (and
    :data:`BY_MODULE` for the modules no profile claimed before)."""
    if cls.name in REGISTRY:
        raise ConfigError(f"a provider profile named {cls.name!r} is registered twice")
    REGISTRY[cls.name] = instance = cls()
    for module in cls.modules:
        BY_MODULE.setdefault(module, instance)
    return cls


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
    return next((found for found in REGISTRY.values() if found.claims(fields)), REGISTRY["openai"])


# -- exceptions ---------------------------------------------------------------------------


def http_parts(exc: BaseException) -> tuple[int | None, Any, Any]:
    """(status, headers, body) of an exception, read by duck typing."""
    try:
        response = getattr(exc, "response", None)
        status = http_status(getattr(exc, "status_code", None))
        if status is None and response is not None:
            status = http_status(getattr(response, "status_code", None)) or http_status(
                getattr(response, "status", None)
            )
        if status is None:
            status = http_status(getattr(exc, "status", None))  # aiohttp.ClientResponseError
        headers = getattr(response, "headers", None) if response is not None else None
        if headers is None:
            headers = getattr(exc, "headers", None)
        body = getattr(exc, "body", None)
        if body is None and response is not None:
            body = response_body(response)
    except Exception:  # noqa: BLE001 - a property that raises makes the error unclassifiable, not fatal
        return None, None, None
    return status, headers, body


def http_status(value: Any) -> int | None:
    """``value`` when it is an HTTP status code, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
        return value
    return None


def response_body(response: Any) -> Any:
    """The body of a response, if it was read; never reads a stream."""
    try:
        text = getattr(response, "text", None)  # httpx raises ResponseNotRead on an unread stream
    except Exception:  # noqa: BLE001
        return None
    return text if isinstance(text, (str, bytes)) else None


# -- usage ----------------------------------------------------------------------------


def usage_of(obj: Any) -> Tokens | None:
    """The tokens a response says it used; None when it does not say.

    ``obj`` is a decoded JSON response (a dict), an SDK object (openai's
    ``ChatCompletion``, ``Completion``, ``Response``,
    ``CreateEmbeddingResponse``; anthropic's ``Message``), a stream's chunk,
    or the ``usage`` part of either; a provider with a usage of its own
    shape (Gemini's ``usageMetadata``, Bedrock's ``inputTokens``) reads it
    (:meth:`Profile.usage_part`). Figures that are not non-negative integers
    make the usage unknown (None) rather than wrong.
    """
    if obj is None or isinstance(obj, (str, bytes, int, float)):
        return None  # a plain value says nothing of tokens (and asking it field by field costs every call)
    for shape in REGISTRY.values():
        part = shape.usage_part(obj)
        if part is not None:
            return shape.usage_from(part)
    usage = _field(obj, "usage")
    if usage is None and any(_field(obj, name) is not None for name in ("prompt_tokens", "input_tokens")):
        usage = obj  # the usage object itself
    if usage is None or isinstance(usage, (str, bytes, int, float)):
        return None
    prompt = _field(usage, "prompt_tokens")
    if prompt is not None:  # OpenAI chat completions, legacy completions, embeddings
        completion = _field(usage, "completion_tokens")
        if completion is None:
            completion = 0  # embeddings have no completion
        return _tokens(prompt, completion)
    if _field(usage, "input_tokens") is None:
        return None
    # Anthropic counts cache reads and writes apart from input_tokens; the Responses API
    # has none of these two (its cached tokens are inside input_tokens).
    parts = [_field(usage, name) for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    if any(part is not None and not _is_count(part) for part in parts):
        return None
    output = _field(usage, "output_tokens")
    return _tokens(sum(part for part in parts if part is not None), 0 if output is None else output)


__all__ = [
    "BY_MODULE",
    "REGISTRY",
    "ErrorBody",
    "Profile",
    "Reading",
    "describe",
    "detect",
    "http_parts",
    "http_status",
    "priced",
    "profile",
    "read_error",
    "register",
    "request_body",
    "response_body",
    "tier_name",
    "try_again_in",
    "usage_of",
]

# Every provider's module registers its profiles (alphabetical order; OpenAI's shape is the default).
for _found in sorted(pkgutil.iter_modules(__path__), key=lambda found: found.name):
    importlib.import_module(f"{__name__}.{_found.name}")
