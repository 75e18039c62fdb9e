"""Classification of provider failures: throttle, billing, or neither.

The SDK exceptions are the SDKs' own classes, built the way the SDKs build
them, and (at the end) raised by the real clients talking HTTP to the
scripted provider.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import aiohttp
import anthropic
import httpx
import httpx2
import openai
import pytest
from anthropic._error_classes import make_status_error

from governor import Outcome, QuotaExhausted
from governor.classify import (
    Classification,
    classify_anthropic,
    classify_http,
    classify_httpx,
    classify_openai,
    classify_response,
    default_classifier,
)
from governor.errors import ConfigError

from .support import scripted_provider as sp

RATE, QUOTA, ERROR = Outcome.RATE_LIMITED, Outcome.QUOTA_EXHAUSTED, Outcome.ERROR
REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def response(status: int, headers: dict[str, str] | None = None, body: Any = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers or {}, json=body, request=REQUEST)


def openai_error(status: int, error: dict[str, Any] | None, headers: dict[str, str] | None = None) -> Exception:
    """An openai APIStatusError as the client makes it (body unwrapped to ``error``)."""
    client = openai.OpenAI(api_key="test", base_url="http://127.0.0.1:9/v1")
    try:
        body = {"error": error} if error is not None else None
        return client._make_status_error(f"Error code: {status}", body=error, response=response(status, headers, body))
    finally:
        client.close()


def anthropic_error(status: int, body: Any, headers: dict[str, str] | None = None) -> Exception:
    """An anthropic APIStatusError as the client makes it (the SDK's own factory)."""
    return make_status_error(f"Error code: {status}", body=body, response=response(status, headers, body))


def a_body(error_type: str, message: str, error_code: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code:
        error["details"] = {"error_code": error_code}
    return {"type": "error", "error": error}


OPENAI_CASES = [
    pytest.param(
        429,
        {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
        {"retry-after-ms": "250", "retry-after": "1"},
        RATE,
        0.25,
        id="429-throttle-retry-after-ms",
    ),
    pytest.param(
        429,
        {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"},
        {"retry-after": "3"},
        RATE,
        3.0,
        id="429-throttle-retry-after",
    ),
    pytest.param(429, None, None, RATE, None, id="429-no-body"),
    pytest.param(
        429,
        {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"},
        {"retry-after": "20"},
        QUOTA,
        None,
        id="429-insufficient-quota",
    ),
    pytest.param(
        400,
        {
            "message": "Billing hard limit has been reached",
            "type": "invalid_request_error",
            "code": "billing_hard_limit_reached",
        },
        None,
        QUOTA,
        None,
        id="400-billing-hard-limit",
    ),
    pytest.param(
        503, {"message": "The engine is currently overloaded", "type": "server_error"}, None, RATE, None, id="503"
    ),
    pytest.param(500, {"message": "The server had an error", "type": "server_error"}, None, ERROR, None, id="500"),
    pytest.param(502, None, None, ERROR, None, id="502"),
    pytest.param(400, {"message": "bad", "type": "invalid_request_error"}, None, ERROR, None, id="400"),
    pytest.param(401, {"message": "Incorrect API key", "type": "invalid_request_error"}, None, ERROR, None, id="401"),
]


@pytest.mark.parametrize(("status", "error", "headers", "kind", "retry_after"), OPENAI_CASES)
def test_openai_status_errors(
    status: int, error: dict[str, Any] | None, headers: dict[str, str] | None, kind: Outcome, retry_after: float | None
) -> None:
    exc = openai_error(status, error, headers)
    assert isinstance(exc, openai.APIStatusError) and exc.status_code == status
    verdict = classify_openai(exc)
    assert (verdict.kind, verdict.retry_after) == (kind, retry_after)
    assert default_classifier(exc) == verdict
    assert verdict.description.startswith(f"HTTP {status}")


def test_openai_stream_errors_have_a_body_but_no_status() -> None:
    throttled = openai.APIError("Rate limit", REQUEST, body={"message": "Rate limit", "code": "rate_limit_exceeded"})
    assert default_classifier(throttled).kind is RATE
    broken = openai.APIError("oops", REQUEST, body={"message": "oops", "type": "server_error"})
    assert default_classifier(broken).kind is ERROR


@pytest.mark.parametrize(
    "exc",
    [openai.APIConnectionError(request=REQUEST), openai.APITimeoutError(request=REQUEST)],
    ids=["connection", "timeout"],
)
def test_openai_errors_without_an_answer_are_other(exc: Exception) -> None:
    verdict = default_classifier(exc)
    assert verdict.kind is ERROR and type(exc).__name__ in verdict.description


ANTHROPIC_CASES = [
    pytest.param(
        429, a_body("rate_limit_error", "Number of requests exceeded"), {"retry-after": "7"}, RATE, 7.0, id="429"
    ),
    pytest.param(
        429,
        a_body("rate_limit_error", "Ramp limit", "ramp_limit_exceeded"),
        {"retry-after": "2"},
        RATE,
        2.0,
        id="429-ramp-limit",
    ),
    pytest.param(529, a_body("overloaded_error", "Overloaded"), None, RATE, None, id="529-overloaded"),
    pytest.param(503, a_body("api_error", "Service unavailable"), {"retry-after": "1"}, RATE, 1.0, id="503"),
    pytest.param(
        503,
        a_body("api_error", "The customer-managed key cannot be reached", "cmek_key_unreachable"),
        None,
        ERROR,
        None,
        id="503-named-cause",
    ),
    pytest.param(
        400,
        a_body("invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
        None,
        QUOTA,
        None,
        id="400-credit-balance",
    ),
    pytest.param(
        400,
        a_body("invalid_request_error", "You have reached your specified API usage limits. You will regain access"),
        None,
        QUOTA,
        None,
        id="400-spend-limit",
    ),
    pytest.param(
        429,
        a_body("rate_limit_error", "Monthly threshold crossed", "enforced_spend_limit_reached"),
        {"retry-after": "30"},
        QUOTA,
        None,
        id="429-enforced-spend-limit",
    ),
    pytest.param(
        429,
        a_body("rate_limit_error", "Contract limit", "contract_spend_limit_reached"),
        None,
        QUOTA,
        None,
        id="429-contract-spend-limit",
    ),
    pytest.param(
        402,
        a_body("billing_error", "Linked organization", "linked_organization_spend_limit_reached"),
        None,
        QUOTA,
        None,
        id="402-linked-org",
    ),
    pytest.param(400, a_body("billing_error", "Billing problem"), None, QUOTA, None, id="billing-error-type"),
    pytest.param(
        429,
        a_body("rate_limit_error", "Extra usage is required for long context requests."),
        None,
        QUOTA,
        None,
        id="429-extra-usage-gate",
    ),
    pytest.param(500, a_body("api_error", "Internal server error"), None, ERROR, None, id="500"),
    pytest.param(400, a_body("invalid_request_error", "max_tokens: too large"), None, ERROR, None, id="400"),
    # An error event inside a streamed 200: the SDK raises APIStatusError with status 200.
    pytest.param(200, a_body("overloaded_error", "Overloaded"), None, RATE, None, id="stream-overloaded"),
    pytest.param(200, a_body("rate_limit_error", "Rate limited"), None, RATE, None, id="stream-rate-limited"),
    pytest.param(200, a_body("api_error", "Internal server error"), None, ERROR, None, id="stream-api-error"),
]


@pytest.mark.parametrize(("status", "body", "headers", "kind", "retry_after"), ANTHROPIC_CASES)
def test_anthropic_status_errors(
    status: int, body: dict[str, Any], headers: dict[str, str] | None, kind: Outcome, retry_after: float | None
) -> None:
    exc = anthropic_error(status, body, headers)
    assert isinstance(exc, anthropic.APIStatusError)
    verdict = classify_anthropic(exc)
    assert (verdict.kind, verdict.retry_after) == (kind, retry_after)
    assert default_classifier(exc) == verdict


def test_anthropic_specific_classes_are_matched_by_code_not_class() -> None:
    exc = anthropic_error(429, a_body("rate_limit_error", "x", "enforced_spend_limit_reached"))
    assert type(exc).__name__ == "EnforcedSpendLimitReachedError"
    assert isinstance(exc, anthropic.RateLimitError)  # a RateLimitError by class, billing by meaning
    assert default_classifier(exc).kind is QUOTA
    assert default_classifier(anthropic_error(529, a_body("overloaded_error", "x"))).kind is RATE


def test_anthropic_errors_without_an_answer_are_other() -> None:
    assert default_classifier(anthropic.APIConnectionError(request=REQUEST)).kind is ERROR
    assert default_classifier(anthropic.APITimeoutError(request=REQUEST)).kind is ERROR


# -- httpx and any other client ----------------------------------------------------


def test_httpx_status_errors() -> None:
    def status_error(status: int, headers: dict[str, str], body: Any = None) -> httpx.HTTPStatusError:
        request = httpx.Request("POST", "http://127.0.0.1/v1/messages")
        reply = httpx.Response(status, headers=headers, json=body, request=request)
        return httpx.HTTPStatusError("failed", request=request, response=reply)

    throttled = classify_httpx(status_error(429, {"Retry-After": "4"}))
    assert (throttled.kind, throttled.retry_after) == (RATE, 4.0)
    assert default_classifier(status_error(503, {})).kind is RATE
    assert default_classifier(status_error(500, {})).kind is ERROR
    quota = status_error(429, {}, {"error": {"code": "insufficient_quota", "message": "quota"}})
    assert default_classifier(quota).kind is QUOTA
    assert classify_httpx(httpx.ConnectError("refused")).kind is ERROR


def test_httpx_response_with_an_unread_stream_is_classified_by_status() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/")
    reply = httpx.Response(429, headers={"retry-after-ms": "80"}, stream=httpx.ByteStream(b"{}"), request=request)
    with pytest.raises(httpx.ResponseNotRead):
        _ = reply.text
    verdict = classify_response(reply)
    assert (verdict.kind, verdict.retry_after) == (RATE, 0.08)


def test_httpx2_response() -> None:
    verdict = classify_response(response(529, {"retry-after": "5"}, a_body("overloaded_error", "Overloaded")))
    assert (verdict.kind, verdict.retry_after) == (RATE, 5.0)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, None, RATE),
        (529, None, RATE),
        (503, None, RATE),
        (503, "Service Unavailable", RATE),
        (500, None, ERROR),
        (504, None, ERROR),
        (404, None, ERROR),
        (402, None, QUOTA),
        (429, {"error": {"code": "insufficient_quota"}}, QUOTA),
        (429, '{"error": {"code": "insufficient_quota"}}', QUOTA),  # raw JSON text
        (429, b'{"error": {"code": "insufficient_quota"}}', QUOTA),  # raw bytes
        (429, {"code": "insufficient_quota"}, QUOTA),  # already unwrapped, as the OpenAI SDK keeps it
        (400, {"error": "Your credit balance is too low"}, QUOTA),  # a gateway's string error
        (429, "<html>Too Many Requests</html>", RATE),
        (200, {"type": "error", "error": {"type": "overloaded_error"}}, RATE),
        (None, {"error": {"type": "rate_limit_error"}}, RATE),
        (None, {"error": {"code": 42}}, ERROR),
        (None, None, ERROR),
        (400, "{not json", ERROR),
        (400, ["a", "list"], ERROR),
        (400, {"error": ["odd"]}, ERROR),
    ],
)
def test_classify_http_triples(status: int | None, body: Any, kind: Outcome) -> None:
    assert classify_http(status, {"Retry-After": "1"}, body).kind is kind


def test_retry_after_is_given_only_for_throttles() -> None:
    assert classify_http(429, {"Retry-After": "9"}).retry_after == 9.0
    assert classify_http(500, {"Retry-After": "9"}).retry_after is None
    assert classify_http(429, {"Retry-After": "9"}, {"error": {"code": "insufficient_quota"}}).retry_after is None
    assert classify_http(429, {"Retry-After": "-3"}).retry_after is None  # garbage: fall back to the backoff


def test_aiohttp_client_response_error_by_duck_typing() -> None:
    exc = aiohttp.ClientResponseError(None, (), status=429, message="Too Many Requests", headers={"Retry-After": "2"})  # type: ignore[arg-type]
    verdict = default_classifier(exc)
    assert (verdict.kind, verdict.retry_after) == (RATE, 2.0)


def test_any_exception_with_a_status_and_response() -> None:
    class Reply:
        status_code = 529
        headers: ClassVar[dict[str, str]] = {"retry-after-ms": "1200"}
        text = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'

    class ClientError(Exception):
        response = Reply()

    verdict = default_classifier(ClientError("overloaded"))
    assert (verdict.kind, verdict.retry_after) == (RATE, 1.2)
    assert "overloaded_error" in verdict.description


def test_a_wrapped_provider_error_is_found_through_its_cause() -> None:
    throttle = openai_error(429, {"message": "slow down", "code": "rate_limit_exceeded"}, {"retry-after": "2"})
    try:
        try:
            raise throttle
        except openai.RateLimitError as error:
            raise RuntimeError("the agent step failed") from error
    except RuntimeError as wrapped:
        verdict = default_classifier(wrapped)
    assert (verdict.kind, verdict.retry_after) == (RATE, 2.0)
    # Context without an explicit cause is not followed: only a deliberate wrap is.
    plain = ValueError("unrelated")
    plain.__context__ = throttle
    assert default_classifier(plain).kind is ERROR


def test_governor_errors_and_plain_exceptions_are_other() -> None:
    quota = QuotaExhausted("used up", name="x")
    quota.__cause__ = openai_error(429, {"code": "insufficient_quota"})
    assert default_classifier(quota).kind is ERROR  # a nested call's verdict is not taken twice
    verdict = default_classifier(KeyError("answer"))
    assert verdict == Classification(ERROR, None, "KeyError: 'answer'")


def test_an_exception_whose_attributes_raise_is_other() -> None:
    class Weird(Exception):
        @property
        def status_code(self) -> int:
            raise RuntimeError("no")

    assert default_classifier(Weird("x")).kind is ERROR


def test_descriptions_are_short_and_one_line() -> None:
    verdict = classify_http(429, None, {"error": {"type": "rate_limit_error", "message": "x\n" * 1000}})
    assert len(verdict.description) <= 200 and "\n" not in verdict.description
    assert classify_http(200, None, a_body("overloaded_error", "Overloaded")).description == (
        "stream error event overloaded_error: Overloaded"
    )


def test_classification_is_validated() -> None:
    for not_an_outcome in ("rate_limited", "r", None):
        with pytest.raises(ConfigError, match="must be Outcome"):
            Classification(not_an_outcome)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="describes a failure"):
        Classification(Outcome.SUCCESS)
    for bad in (-1.0, float("nan"), float("inf"), True, "3"):
        with pytest.raises(ConfigError):
            Classification(RATE, bad)  # type: ignore[arg-type]
    assert Classification(RATE, 0).retry_after == 0


def test_importing_governor_does_not_import_the_sdks() -> None:
    code = (
        "import sys, governor, governor.classify, governor.providers, governor.backoff\n"
        "loaded = [m for m in ('openai', 'anthropic', 'httpx', 'httpx2') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the real SDKs over HTTP ----------------------------------------------------------


@pytest.fixture(scope="module")
def provider() -> Iterator[sp.ScriptedProvider]:
    server = sp.ScriptedProvider().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sdk_clients(provider: sp.ScriptedProvider) -> Iterator[tuple[openai.OpenAI, anthropic.Anthropic]]:
    with (
        openai.OpenAI(base_url=provider.openai_base_url, api_key="test", max_retries=0) as oc,
        anthropic.Anthropic(base_url=provider.url, api_key="test", max_retries=0) as ac,
    ):
        yield oc, ac


@pytest.fixture
def clients(
    provider: sp.ScriptedProvider, sdk_clients: tuple[openai.OpenAI, anthropic.Anthropic]
) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    provider.reset()
    return sdk_clients


def _openai_call(oc: openai.OpenAI, ac: anthropic.Anthropic) -> Any:
    return oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def _anthropic_call(oc: openai.OpenAI, ac: anthropic.Anthropic) -> Any:
    return ac.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def _anthropic_stream(oc: openai.OpenAI, ac: anthropic.Anthropic) -> Any:
    with ac.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True) as s:
        return list(s)


Call = Callable[[openai.OpenAI, anthropic.Anthropic], Any]
SDK_CASES = [
    pytest.param(_openai_call, sp.openai_rate_limited(**{"retry-after-ms": "1500"}), RATE, 1.5, id="openai-429-ms"),
    pytest.param(_openai_call, sp.openai_rate_limited(**{"Retry-After": "2"}), RATE, 2.0, id="openai-429-seconds"),
    pytest.param(_openai_call, sp.openai_rate_limited(), RATE, None, id="openai-429-bare"),
    pytest.param(_openai_call, sp.openai_insufficient_quota(), QUOTA, None, id="openai-insufficient-quota"),
    pytest.param(_openai_call, sp.openai_overloaded(), RATE, None, id="openai-503"),
    pytest.param(_openai_call, sp.openai_server_error(), ERROR, None, id="openai-500"),
    pytest.param(_openai_call, sp.openai_bad_request(), ERROR, None, id="openai-400"),
    pytest.param(_anthropic_call, sp.anthropic_rate_limited(**{"retry-after": "3"}), RATE, 3.0, id="anthropic-429"),
    pytest.param(_anthropic_call, sp.anthropic_overloaded(), RATE, None, id="anthropic-529"),
    pytest.param(_anthropic_call, sp.anthropic_unavailable(), RATE, None, id="anthropic-503"),
    pytest.param(_anthropic_call, sp.anthropic_credit_too_low(), QUOTA, None, id="anthropic-credit"),
    pytest.param(_anthropic_call, sp.anthropic_spend_limit(), QUOTA, None, id="anthropic-spend-limit"),
    pytest.param(_anthropic_call, sp.anthropic_enforced_spend_limit(), QUOTA, None, id="anthropic-enforced-spend"),
    pytest.param(_anthropic_stream, sp.anthropic_stream_overloaded(), RATE, None, id="anthropic-stream-overloaded"),
]


@pytest.mark.parametrize(("call", "reply", "kind", "retry_after"), SDK_CASES)
def test_real_sdk_errors(
    provider: sp.ScriptedProvider,
    clients: tuple[openai.OpenAI, anthropic.Anthropic],
    call: Call,
    reply: sp.Reply,
    kind: Outcome,
    retry_after: float | None,
) -> None:
    provider.script(reply)
    with pytest.raises(Exception) as caught:
        call(*clients)
    verdict = default_classifier(caught.value)
    assert (verdict.kind, verdict.retry_after) == (kind, retry_after), verdict
    assert len(provider.requests) == 1  # max_retries=0: the SDK did not retry on its own


def test_real_sdk_http_date_retry_after(
    provider: sp.ScriptedProvider, clients: tuple[openai.OpenAI, anthropic.Anthropic]
) -> None:
    provider.script(sp.openai_rate_limited(**{"Retry-After": sp.http_date(30)}))
    with pytest.raises(openai.RateLimitError) as caught:
        _openai_call(*clients)
    verdict = default_classifier(caught.value)
    # Measured against the response's Date header; both have one-second resolution.
    assert verdict.kind is RATE and verdict.retry_after is not None and 28.0 <= verdict.retry_after <= 31.0


# -- provider profiles: body retry hints, Google and AWS shapes, per-day quotas -------------------

from governor.profiles import REGISTRY, try_again_in  # noqa: E402
from governor.profiles.google import next_midnight, parse_google_duration  # noqa: E402

GOOGLE_429 = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ],
    }
}


def google_429(quota: str, delay: str | None = "37s") -> dict[str, object]:
    details: list[object] = [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": quota}]}
    ]
    if delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay})
    return {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED", "details": details}}


def test_google_retry_delay_in_the_body_is_the_retry_hint() -> None:
    verdict = classify_http(429, {}, GOOGLE_429)
    assert verdict.kind is RATE and verdict.retry_after == 37.0 and verdict.until is None
    assert "RESOURCE_EXHAUSTED" in verdict.description


def test_a_header_wins_over_the_body_hint() -> None:
    assert classify_http(429, {"retry-after": "2"}, GOOGLE_429).retry_after == 2.0


def test_google_durations() -> None:
    assert parse_google_duration("0.5s") == 0.5
    assert parse_google_duration("37s") == 37.0
    assert parse_google_duration("37") is None and parse_google_duration("-1s") is None
    assert parse_google_duration(None) is None


def test_openai_try_again_in_the_message_is_the_retry_hint() -> None:
    body = {
        "error": {
            "message": "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29800, "
            "Requested 500. Please try again in 424ms. Visit https://platform.openai.com/account/rate-limits",
            "type": "tokens",
            "code": "rate_limit_exceeded",
        }
    }
    verdict = classify_http(429, {}, body)
    assert verdict.kind is RATE and verdict.retry_after == pytest.approx(0.424)
    assert try_again_in("Please try again in 6m0s.") == 360.0
    assert try_again_in("Please try again in 1.5s.") == 1.5
    assert try_again_in("Please try again later.") is None


def test_a_per_day_quota_is_quota_exhaustion_until_midnight_pacific() -> None:
    now = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC: 07:13:20 in Los Angeles (PDT, UTC-7)
    reading = REGISTRY["gemini"].classify(
        429, {}, google_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier"), now=now
    )
    assert reading.kind is QUOTA
    assert reading.until == next_midnight(now) == 1_790_060_400.0  # 2026-09-22 07:00 UTC = midnight PDT
    verdict = classify_http(429, {}, google_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier"))
    assert verdict.kind is QUOTA and verdict.until is not None


def test_a_per_minute_google_quota_is_a_throttle() -> None:
    verdict = classify_http(429, {}, google_429("GenerateContentInputTokensPerModelPerMinute", None))
    assert verdict.kind is RATE and verdict.retry_after is None


def test_vertex_rest_errors_come_as_a_list_of_one() -> None:
    body = [
        {
            "error": {
                "code": 429,
                "message": "Resource exhausted. Please try again later.",
                "status": "RESOURCE_EXHAUSTED",
            }
        }
    ]
    assert classify_http(429, {}, body).kind is RATE


def test_bedrock_throttling_is_named_in_the_header_or_the_body() -> None:
    header = {"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    verdict = classify_http(429, header, {"message": "Too many tokens, please wait before trying again."})
    assert verdict.kind is RATE and verdict.retry_after is None
    assert "ThrottlingException" in verdict.description
    assert classify_http(503, {}, {"__type": "ServiceUnavailableException", "message": "x"}).kind is RATE
    assert classify_http(400, {}, {"__type": "ValidationException", "message": "x"}).kind is ERROR


def test_botocore_client_errors_are_classified_by_the_bedrock_profile() -> None:
    from botocore.exceptions import ClientError

    response = {
        "Error": {"Code": "ThrottlingException", "Message": "Too many requests, please wait before trying again."},
        "ResponseMetadata": {"HTTPStatusCode": 429, "HTTPHeaders": {}},
    }
    assert default_classifier(ClientError(response, "Converse")).kind is RATE  # type: ignore[arg-type]
    response["Error"] = {"Code": "ValidationException", "Message": "bad"}
    response["ResponseMetadata"] = {"HTTPStatusCode": 400, "HTTPHeaders": {}}
    assert default_classifier(ClientError(response, "Converse")).kind is ERROR  # type: ignore[arg-type]


def test_google_genai_errors_are_classified_by_the_gemini_profile() -> None:
    from google.genai import errors

    verdict = default_classifier(errors.ClientError(429, GOOGLE_429))
    assert verdict.kind is RATE and verdict.retry_after == 37.0


def test_azure_zero_limits_are_no_figure() -> None:
    limits = REGISTRY["azure"].rate_limits(
        {
            "x-ratelimit-limit-requests": "0",
            "x-ratelimit-remaining-requests": "-1",
            "x-ratelimit-limit-tokens": "1000",
            "x-ratelimit-remaining-tokens": "900",
        }
    )
    assert "requests" not in limits.budgets
    assert limits.budgets["tokens"].limit == 1000
    assert "x-ratelimit-remaining-requests" in limits.malformed


def test_every_profile_names_its_facts() -> None:
    for name, profile in REGISTRY.items():
        assert profile.name == name and profile.stream_end and profile.tiers
    assert not REGISTRY["gemini"].headers and not REGISTRY["bedrock"].headers and REGISTRY["azure"].headers
    assert REGISTRY["openai"].refusals_count


def test_a_litellm_error_with_a_bare_response_keeps_the_providers_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LiteLLM 1.105 (the one CrewAI's litellm extra pins) raises with a response
    that has no headers and keeps the provider's on ``litellm_response_headers``."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM reads its bundled price list, offline
    litellm = pytest.importorskip("litellm")

    bare = httpx.Response(429, request=httpx.Request("POST", "https://api.openai.com/v1/chat/completions"))
    error = litellm.RateLimitError("OpenAIException - Rate limit reached", "openai", "gpt-4o", response=bare)
    error.litellm_response_headers = httpx.Headers({"retry-after": "20"})
    verdict = default_classifier(error)
    assert (verdict.kind, verdict.retry_after) == (Outcome.RATE_LIMITED, 20.0)
