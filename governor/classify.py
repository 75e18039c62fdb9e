"""Which provider failures are throttles, which are billing, which are neither.

``Governor.call`` asks a :data:`Classifier` about every exception its
function raises and acts on the answer, an :class:`~governor.core.Outcome`
(the one reported to the governor):

- ``RATE_LIMITED``: a throttle (429, Google's ``RESOURCE_EXHAUSTED``, AWS's
  ``ThrottlingException``) or an overloaded provider (529, 503, an
  ``overloaded_error`` event inside a streamed 200): reported to the
  governor, which shrinks the fleet's capacity and holds it for the
  provider's retry hint (a header, or the body's: Google's
  ``RetryInfo.retryDelay``, OpenAI's "Please try again in 424ms"), then retried.
  A refusal the provider says is not about this fleet's load (an overload,
  a 529, a 503, a 429 whose headers show requests and tokens remaining:
  :attr:`Classification.load` False, its profile's ``load_signal``) is
  retried the same way, but the adaptive policy weighs it as the
  provider's background: no cut, and its retry hint holds only its caller.
- ``QUOTA_EXHAUSTED``: billing (OpenAI ``insufficient_quota``, Anthropic
  credit balance too low or a spend limit reached, HTTP 402), or a per-day
  quota used up (Google's ``QuotaFailure`` naming a ``PerDay`` quota, with
  the moment it resets in :attr:`Classification.until`): retrying cannot
  help, so it is never retried and never shrinks capacity; it is counted
  for operators and surfaces as ``QuotaExhausted``.
- ``ERROR``: everything else, reported as an attempt and propagated unchanged.

``SUCCESS`` is no verdict: a classification describes a failure.

What each provider's errors mean is its profile's (governor/profiles/);
this module finds the status, headers and body of an exception and asks
the profile of the SDK it comes from. The provider SDKs are optional.
Nothing here imports them: exceptions are matched by the module they come
from and read by duck typing (``status_code``, ``response.headers``,
``body``), so the same rules cover the SDKs, ``httpx`` (and ``httpx2``),
``requests``, ``aiohttp`` and any client that can hand over a status,
headers and body; a body in no known provider's shape is read by OpenAI's
rules (which cover Anthropic's too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .budgets import Tokens
from .core import Outcome
from .errors import ConfigError, GovernorError
from .profiles import BY_MODULE, Profile, detect, http_parts, http_status, read_error, response_body
from .profiles import profile as find_profile

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
    #: Unix seconds a used-up per-day quota comes back (QUOTA_EXHAUSTED only; None: unknown)
    until: float | None = None
    #: (RATE_LIMITED only) whether the refusal is a load signal: this fleet's traffic over
    #: a limit. False: the provider says it is about something else (an overload, a 529,
    #: headers showing requests and tokens remaining; its profile's ``load_signal``), and
    #: the adaptive policy weighs it as the provider's background
    load: bool = True

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
        until = self.until
        if until is not None and (
            isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until)
        ):
            raise ConfigError(f"Classification.until must be None or Unix seconds, got {until!r}")
        if not isinstance(self.load, bool):
            raise ConfigError(f"Classification.load must be a bool, got {self.load!r}")


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
    #: whether the provider counts a refused call against its limits (its profile's
    #: ``refusals_count``): a refusal that does not count gives its reservation back
    refusals_count: bool = True
    #: Unix seconds a used-up per-day quota comes back (QUOTA_EXHAUSTED only; None: unknown)
    until: float | None = None
    #: (RATE_LIMITED only) whether the refusal is a load signal (:attr:`Classification.load`)
    load: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.outcome, Outcome):
            raise ConfigError(f"Verdict.outcome must be an Outcome, got {self.outcome!r}")
        if self.until is not None and (
            isinstance(self.until, bool) or not isinstance(self.until, (int, float)) or not math.isfinite(self.until)
        ):
            raise ConfigError(f"Verdict.until must be None or Unix seconds, got {self.until!r}")
        if self.usage is not None and not isinstance(self.usage, Tokens):
            raise ConfigError(f"Verdict.usage must be a Tokens or None, got {self.usage!r}")
        ra = self.retry_after
        if ra is not None and (
            isinstance(ra, bool) or not isinstance(ra, (int, float)) or not math.isfinite(ra) or ra < 0
        ):
            raise ConfigError(f"Verdict.retry_after must be None or finite seconds >= 0, got {ra!r}")
        if not isinstance(self.load, bool):
            raise ConfigError(f"Verdict.load must be a bool, got {self.load!r}")


Classifier = Callable[[BaseException], Classification]
"""Turns an exception raised by the called function into a :class:`Classification`."""


def classify_http(
    status: int | None, headers: Any = None, body: Any = None, *, profile: Profile | str | None = None
) -> Classification:
    """Classify a failed HTTP exchange of any client: status, headers, body.

    ``body`` is the decoded JSON error (a dict, as the SDKs keep it), or the
    raw text or bytes, or None. ``status`` may be None when the error came
    without one (an error event in a stream). ``profile`` is the provider's
    (governor/profiles/); without one, the body's shape names it (Google's
    ``status``, AWS's ``__type``/``x-amzn-ErrorType``, else OpenAI's rules,
    which cover Anthropic's too).
    """
    fields = read_error(body, headers)
    chosen = detect(fields, headers) if profile is None else find_profile(profile)
    reading = chosen.classify(status, headers, fields)
    return Classification(reading.kind, reading.retry_after, reading.description, reading.until, reading.load)


def classify_response(response: Any) -> Classification:
    """Classify an HTTP response object (httpx, httpx2, requests) that is an error."""
    status = http_status(getattr(response, "status_code", None))
    if status is None:
        status = http_status(getattr(response, "status", None))
    return classify_http(status, getattr(response, "headers", None), response_body(response))


def classify_httpx(exc: BaseException) -> Classification:
    """Classify an ``httpx.HTTPStatusError`` (or httpx2's) by its response."""
    response = getattr(exc, "response", None)
    if response is None:  # connection errors, timeouts: no answer from the provider
        return Classification(Outcome.ERROR, None, _exception_text(exc))
    return classify_response(response)


def classify_exception(exc: BaseException, profile: Profile | str) -> Classification:
    """Classify an exception of a provider's SDK, read as its profile reads
    them (:meth:`~governor.profiles.Profile.exception_parts`): an exception
    without a status or a body (a connection error, a timeout, a client-side
    error) is ``ERROR``."""
    chosen = find_profile(profile)
    status, headers, body = chosen.exception_parts(exc)
    if status is None and body is None:
        return Classification(Outcome.ERROR, None, _exception_text(exc))
    return classify_http(status, headers, body, profile=None if chosen.by_shape else chosen)


def classify_openai(exc: BaseException) -> Classification:
    """Classify an exception of the ``openai`` SDK.

    ``APIStatusError`` and its subclasses carry ``status_code``, the httpx
    response (headers) and ``body``, already unwrapped to the ``error``
    object (``code``, ``type``, ``message``). An ``APIError`` raised for an
    error inside a stream has a body but no status.
    """
    return classify_exception(exc, "openai")


def classify_anthropic(exc: BaseException) -> Classification:
    """Classify an exception of the ``anthropic`` SDK.

    ``body`` is the whole error response, ``{"type": "error", "error":
    {"type": ..., "message": ..., "details": {"error_code": ...}}}``. An
    ``event: error`` inside a streamed 200 response (how an overload that
    starts mid-stream arrives) raises an ``APIStatusError`` with status 200
    and that body: its ``overloaded_error`` type makes it rate-limited.
    """
    return classify_exception(exc, "anthropic")


def classify_google(exc: BaseException) -> Classification:
    """Classify an exception of the ``google-genai`` SDK (Gemini API and Vertex
    AI; governor/profiles/google.py reads it). A 429 naming a per-day quota is
    quota exhausted until midnight Pacific time (:attr:`Classification.until`).
    """
    return classify_exception(exc, "gemini")


def classify_botocore(exc: BaseException) -> Classification:
    """Classify an exception of ``botocore`` (``boto3``'s Bedrock runtime;
    governor/profiles/bedrock.py reads it)."""
    return classify_exception(exc, "bedrock")


def default_classifier(exc: BaseException) -> Classification:
    """The classifier ``Governor.call`` uses unless given another.

    Dispatches on the exception's module (``openai``, ``anthropic``,
    ``google`` (google-genai), ``botocore``, ``litellm``, ``httpx``,
    ``httpx2``) to its provider profile (governor/profiles/); any other exception that carries an HTTP status
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
    found = BY_MODULE.get(root)
    if found is not None:
        return classify_exception(exc, found)
    if root in ("httpx", "httpx2"):
        return classify_httpx(exc)
    status, headers, body = http_parts(exc)
    if status is None and body is None:
        return None
    return classify_http(status, headers, body)


def _exception_text(exc: BaseException) -> str:
    return _clip(f"{type(exc).__name__}: {exc}")


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
