"""Which provider failures are throttles, which are billing, which are neither.

``Governor.call`` asks a :data:`Classifier` about every exception its
function raises and acts on the answer, an :class:`~governor.core.Outcome`
(the one reported to the governor):

- ``RATE_LIMITED``: a throttle (429) or an overloaded provider (529, 503, an
  ``overloaded_error`` event inside a streamed 200): reported to the
  governor, which shrinks the fleet's capacity and holds it for the
  provider's Retry-After, then retried.
- ``QUOTA_EXHAUSTED``: billing (OpenAI ``insufficient_quota``, Anthropic
  credit balance too low or a spend limit reached, HTTP 402): retrying
  cannot help, so it is never retried and never shrinks capacity; it is
  counted for operators and surfaces as ``QuotaExhausted``.
- ``ERROR``: everything else, reported as an attempt and propagated unchanged.

``SUCCESS`` is no verdict: a classification describes a failure.

The provider SDKs are optional. Nothing here imports them: exceptions are
matched by the module they come from and read by duck typing
(``status_code``, ``response.headers``, ``body``), so one set of rules covers
the ``openai`` and ``anthropic`` SDKs, ``httpx`` (and ``httpx2``, which the
SDKs use), ``requests``, ``aiohttp`` and any client that can hand over a
status, headers and body. The rules read the stable fields of an error body
(OpenAI's ``error.code`` / ``error.type``, Anthropic's ``error.type`` and
``error.details.error_code``) and, for the two billing errors Anthropic
sends only as prose, the message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .backoff import parse_retry_after
from .budgets import Tokens
from .core import Outcome
from .errors import ConfigError, GovernorError

#: the outcomes a classification may give: what a failure means for the fleet
FAILURES = (Outcome.RATE_LIMITED, Outcome.QUOTA_EXHAUSTED, Outcome.ERROR)


@dataclass(frozen=True)
class Classification:
    """A classifier's verdict on one exception."""

    #: what the failure means: RATE_LIMITED (back off and retry), QUOTA_EXHAUSTED
    #: (never retried, an operator must act) or ERROR (propagates unchanged)
    kind: Outcome
    retry_after: float | None = None  #: seconds the provider asked to wait (RATE_LIMITED only)
    description: str = ""  #: short, for logs and error messages

    def __post_init__(self) -> None:
        if self.kind not in FAILURES:
            raise ConfigError(
                "Classification.kind must be Outcome.RATE_LIMITED, Outcome.QUOTA_EXHAUSTED or Outcome.ERROR "
                f"(a classification describes a failure), got {self.kind!r}"
            )
        ra = self.retry_after
        if ra is not None and (
            isinstance(ra, bool) or not isinstance(ra, (int, float)) or not math.isfinite(ra) or ra < 0
        ):
            raise ConfigError(f"Classification.retry_after must be None or finite seconds >= 0, got {ra!r}")


@dataclass(frozen=True)
class Verdict:
    """A judge's verdict on one call's *result* (``retry_call(judge=...)``):
    what to report, and how to let the result go if it is retried.

    A result may be a failure too: an HTTP transport returns a 429 response
    instead of raising. ``usage`` settles the lease's reservation;
    ``headers`` calibrate the budgets (governor/budgets.py)."""

    outcome: Outcome
    retry_after: float | None = None  #: seconds the provider asked to wait (RATE_LIMITED only)
    usage: Tokens | None = None  #: the tokens the call used
    headers: Mapping[str, str] | None = None  #: the response's headers
    description: str = ""  #: short, for logs
    #: lets go of a result that is retried (closes a response); may return an awaitable
    discard: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.outcome, Outcome):
            raise ConfigError(f"Verdict.outcome must be an Outcome, got {self.outcome!r}")
        if self.usage is not None and not isinstance(self.usage, Tokens):
            raise ConfigError(f"Verdict.usage must be a Tokens or None, got {self.usage!r}")
        ra = self.retry_after
        if ra is not None and (
            isinstance(ra, bool) or not isinstance(ra, (int, float)) or not math.isfinite(ra) or ra < 0
        ):
            raise ConfigError(f"Verdict.retry_after must be None or finite seconds >= 0, got {ra!r}")


Classifier = Callable[[BaseException], Classification]
"""Turns an exception raised by the called function into a :class:`Classification`."""


#: error codes and types (any of OpenAI's ``code``/``type``, Anthropic's
#: ``type``/``details.error_code``) that mean the account cannot pay
QUOTA_CODES = frozenset(
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
#: billing errors Anthropic sends only as prose (lower-cased substrings of the message)
QUOTA_PHRASES = (
    "credit balance is too low",  # 400 invalid_request_error
    "reached your specified api usage limits",  # 400: the spend limit set in the console
    "extra usage is required",  # 429 rate_limit_error, a billing gate, not a throttle
    "usage credits are required",  # same gate, newer wording
)
#: error codes and types that mean throttled or overloaded whatever the status
#: (a stream's error event arrives inside a 200 response)
RATE_LIMIT_CODES = frozenset({"rate_limit_error", "overloaded_error", "rate_limit_exceeded", "overloaded"})
#: a body larger than this is not parsed: error bodies are small
MAX_BODY = 65536


def classify_http(status: int | None, headers: Any = None, body: Any = None) -> Classification:
    """Classify a failed HTTP exchange of any client: status, headers, body.

    ``body`` is the decoded JSON error (a dict, as the SDKs keep it), or the
    raw text or bytes, or None. ``status`` may be None when the error came
    without one (an error event in a stream).
    """
    fields = _error_fields(body)
    names = {name for name in (fields.type, fields.code, fields.detail) if name}
    description = _describe(status, fields)
    message = (fields.message or "").lower()
    if names & QUOTA_CODES or status == 402 or any(phrase in message for phrase in QUOTA_PHRASES):
        return Classification(Outcome.QUOTA_EXHAUSTED, None, description)
    throttled = status in (429, 529) or bool(names & RATE_LIMIT_CODES)
    # A 503 is overload unless the body names another cause (Anthropic's
    # details.error_code, e.g. "cmek_key_unreachable"): those are not throttles.
    if status == 503 and (fields.detail is None or fields.detail in RATE_LIMIT_CODES):
        throttled = True
    if throttled:
        return Classification(Outcome.RATE_LIMITED, parse_retry_after(headers), description)
    return Classification(Outcome.ERROR, None, description)


def classify_response(response: Any) -> Classification:
    """Classify an HTTP response object (httpx, httpx2, requests) that is an error."""
    status = _status(getattr(response, "status_code", None))
    if status is None:
        status = _status(getattr(response, "status", None))
    return classify_http(status, getattr(response, "headers", None), _response_body(response))


def classify_httpx(exc: BaseException) -> Classification:
    """Classify an ``httpx.HTTPStatusError`` (or httpx2's) by its response."""
    response = getattr(exc, "response", None)
    if response is None:  # connection errors, timeouts: no answer from the provider
        return Classification(Outcome.ERROR, None, _exception_text(exc))
    return classify_response(response)


def classify_openai(exc: BaseException) -> Classification:
    """Classify an exception of the ``openai`` SDK.

    ``APIStatusError`` and its subclasses carry ``status_code``, the httpx
    response (headers) and ``body``, already unwrapped to the ``error``
    object (``code``, ``type``, ``message``). An ``APIError`` raised for an
    error inside a stream has a body but no status.
    """
    return _classify_sdk(exc)


def classify_anthropic(exc: BaseException) -> Classification:
    """Classify an exception of the ``anthropic`` SDK.

    ``body`` is the whole error response, ``{"type": "error", "error":
    {"type": ..., "message": ..., "details": {"error_code": ...}}}``. An
    ``event: error`` inside a streamed 200 response (how an overload that
    starts mid-stream arrives) raises an ``APIStatusError`` with status 200
    and that body: its ``overloaded_error`` type makes it rate-limited.
    """
    return _classify_sdk(exc)


def default_classifier(exc: BaseException) -> Classification:
    """The classifier ``Governor.call`` uses unless given another.

    Dispatches on the exception's module (``openai``, ``anthropic``,
    ``httpx``, ``httpx2``); any other exception that carries an HTTP status
    (``status_code`` or ``status``, on itself or its ``response``) goes
    through :func:`classify_http`. An exception without one is ``ERROR``,
    unless it was raised ``from`` a classifiable one (a wrapper's
    ``__cause__``), which is then classified instead. Errors of the
    governor itself are always ``ERROR``.
    """
    if isinstance(exc, GovernorError):
        return Classification(Outcome.ERROR, None, _exception_text(exc))
    verdict = _classify_one(exc)
    if verdict is not None and verdict.kind is not Outcome.ERROR:
        return verdict
    cause, depth = exc.__cause__, 0
    while cause is not None and depth < 8 and not isinstance(cause, GovernorError):
        found = _classify_one(cause)
        if found is not None and found.kind is not Outcome.ERROR:
            return found
        cause, depth = cause.__cause__, depth + 1
    return verdict or Classification(Outcome.ERROR, None, _exception_text(exc))


def _classify_one(exc: BaseException) -> Classification | None:
    """A verdict when ``exc`` is an HTTP failure of some known shape, else None."""
    root = type(exc).__module__.partition(".")[0]
    if root == "openai":
        return classify_openai(exc)
    if root == "anthropic":
        return classify_anthropic(exc)
    if root in ("httpx", "httpx2"):
        return classify_httpx(exc)
    status, headers, body = _http_parts(exc)
    if status is None and body is None:
        return None
    return classify_http(status, headers, body)


def _classify_sdk(exc: BaseException) -> Classification:
    status, headers, body = _http_parts(exc)
    if status is None and body is None:  # APIConnectionError, APITimeoutError, client-side errors
        return Classification(Outcome.ERROR, None, _exception_text(exc))
    return classify_http(status, headers, body)


def _http_parts(exc: BaseException) -> tuple[int | None, Any, Any]:
    """(status, headers, body) of an exception, read by duck typing."""
    try:
        response = getattr(exc, "response", None)
        status = _status(getattr(exc, "status_code", None))
        if status is None and response is not None:
            status = _status(getattr(response, "status_code", None)) or _status(getattr(response, "status", None))
        if status is None:
            status = _status(getattr(exc, "status", None))  # aiohttp.ClientResponseError
        headers = getattr(response, "headers", None) if response is not None else None
        if headers is None:
            headers = getattr(exc, "headers", None)
        body = getattr(exc, "body", None)
        if body is None and response is not None:
            body = _response_body(response)
    except Exception:  # noqa: BLE001 - a property that raises makes the error unclassifiable, not fatal
        return None, None, None
    return status, headers, body


def _status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
        return value
    return None


def _response_body(response: Any) -> Any:
    """The body of a response, if it was read; never reads a stream."""
    try:
        text = getattr(response, "text", None)  # httpx raises ResponseNotRead on an unread stream
    except Exception:  # noqa: BLE001
        return None
    return text if isinstance(text, (str, bytes)) else None


@dataclass(frozen=True)
class _Fields:
    type: str | None = None
    code: str | None = None
    detail: str | None = None  #: Anthropic error.details.error_code
    message: str | None = None


def _error_fields(body: Any) -> _Fields:
    """The stable fields of an error body in OpenAI's or Anthropic's shape."""
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body[:MAX_BODY]).decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        if not text.startswith("{") or len(text) > MAX_BODY:
            return _Fields(message=text[:500] or None)
        try:
            body = json.loads(text)
        except ValueError:
            return _Fields(message=text[:500])
    if not isinstance(body, Mapping):
        return _Fields()
    error: Any = body.get("error", body)
    if isinstance(error, str):  # {"error": "Too many requests"}, as some gateways answer
        return _Fields(message=error)
    if not isinstance(error, Mapping):
        return _Fields()
    details = error.get("details")
    detail = details.get("error_code") if isinstance(details, Mapping) else None
    return _Fields(_text(error.get("type")), _text(error.get("code")), _text(detail), _text(error.get("message")))


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # some gateways send numeric codes
        return str(value)
    return None


def _describe(status: int | None, fields: _Fields) -> str:
    label = "HTTP error" if status is None else f"HTTP {status}"
    if status == 200:
        label = "stream error event"
    name = fields.detail or fields.code or fields.type
    parts = [label] + ([name] if name else [])
    text = " ".join(parts)
    if fields.message:
        text += f": {fields.message}"
    return _clip(text)


def _exception_text(exc: BaseException) -> str:
    return _clip(f"{type(exc).__name__}: {exc}")


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
