"""Every request of an SDK client under the governor, with no change at the call site.

:class:`GovernedTransport` (and :class:`AsyncGovernedTransport`) wraps an
httpx transport. The official SDKs take one through their ``http_client``::

    import httpx2, openai
    from governor.transport import GovernedTransport

    transport = GovernedTransport(gov, httpx2.HTTPTransport())
    client = openai.OpenAI(http_client=httpx2.Client(transport=transport), max_retries=0)

(:mod:`governor.providers` builds these clients in one call.) Each POST to
a model endpoint (a path ending in ``chat/completions``, ``completions``,
``responses``, ``messages`` or ``embeddings``) goes through the one retry
loop of ``Governor.call`` (governor/_async/retry.py ``retry_call``):

1. a lease is acquired with a token estimate made from the request body
   (:func:`governor.estimate.estimate_request`, or the ``estimate`` given);
2. the request is sent through the wrapped transport;
3. a response that is not a stream is read whole and judged: a 4xx or 5xx
   by :func:`governor.classify.classify_http` (429 and overloads are
   rate-limited, billing errors quota-exhausted, the rest errors) and
   reported with no usage spent (a refused request spends no tokens; the
   request itself counts against the requests budget); a success with the
   usage of its JSON (:func:`governor.profiles.usage_of`). Every report
   carries the response's headers, which calibrate the budgets;
4. a rate-limited answer is retried after the provider's Retry-After or
   the backoff, by the same loop; when the attempts run out, the last
   answer is returned to the SDK, which raises its own error for it.

A streamed response (``content-type: text/event-stream``, or a request
with ``"stream": true`` answered with anything but JSON) is returned at
once, its body wrapped so that :class:`governor.streams.StreamUsage`
reads the usage and any error event as the bytes pass. The lease is held
until the stream ends, and reported and released exactly once: when the
stream is exhausted, when it is closed (``response.close()``, leaving the
SDK's ``with`` block, ``stream.close()``), or, as a last resort, when it is
garbage-collected unclosed (best effort: the report then runs on a thread
of its own, or as a task of the event loop the stream was opened on if that
loop still runs; without either, the lease's TTL frees the slot). The
outcome is a success, or rate-limited (an ``overloaded_error`` event inside
the 200) or an error as the event says; the usage is what the stream
reported (OpenAI's ``include_usage`` chunk; Anthropic's ``message_start``
and ``message_delta``), nothing spent for a stream refused by an error
event before any usage, and unknown otherwise (the reservation then stands
as spent, governor/budgets.py). A spend budget charges it as the same
response read whole: cached tokens at their own prices, at the tier that
served it.

Anything else (GETs such as ``/models``, file uploads, batch endpoints)
passes through ungoverned.

The leases wait in the transport's ``priority`` class for its ``tenant``
(``Governor.acquire``); one request may name others in the headers
``X-Governor-Priority`` and ``X-Governor-Tenant`` (the SDKs'
``extra_headers``), which are taken off before it is sent.

The transports are governor/_async/transport.py (the source) and
governor/_sync/transport.py (generated from it by scripts/unasync.py);
what they share (which requests are governed, how a response is judged)
is governor/_exchange.py.

httpx and httpx2: the transport serves clients of either library (the
SDKs moved to httpx2, which refuses httpx objects), so it derives from
neither's ``BaseTransport``; it has their methods. The wrapped transport
must be of the client's library; when none is given, one
``HTTPTransport()`` of the library of the first request is made. A type
checker that wants a ``BaseTransport`` is told with ``typing.cast``.
"""

from __future__ import annotations

from ._async.transport import AsyncGovernedTransport
from ._exchange import (
    LIBRARIES,
    MODEL_PATHS,
    PRIORITY_HEADER,
    TENANT_HEADER,
    Estimator,
    asks_for_stream,
    is_model_request,
    is_stream,
    judge_response,
    sdk_twin,
    stream_outcome,
)
from ._sync.transport import GovernedTransport

__all__ = [
    "LIBRARIES",
    "MODEL_PATHS",
    "PRIORITY_HEADER",
    "TENANT_HEADER",
    "AsyncGovernedTransport",
    "Estimator",
    "GovernedTransport",
    "asks_for_stream",
    "is_model_request",
    "is_stream",
    "judge_response",
    "sdk_twin",
    "stream_outcome",
]
