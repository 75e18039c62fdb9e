"""governor.providers: SDK clients with their retries off, governed through the transport or not.

With ``governor=`` each builder gives the SDK's own default HTTP client
(its timeout, limits, redirects) over the governed transport of the SDK's
HTTP library; without it, the SDK's client as it always was, with
``max_retries=0``. The round trips run the real SDKs against the test
provider of tests/test_transport.py and read the reports back from Redis.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from governor import AsyncGovernor, ConfigError, Governor, GovernorConfig
from governor.config import RetryPolicy
from governor.providers import (
    _governed_http_client,
    _governing,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    openai_client,
    without_retries,
)
from governor.transport import AsyncGovernedTransport, GovernedTransport

from .conftest import FakeClock
from .test_transport import MESSAGES, Provider, chat_ok, chat_stream, counts, holders, levels, message_ok

MakeGov = Callable[..., Governor]
MakeAGov = Callable[..., AsyncGovernor]
FAST = RetryPolicy(max_attempts=3, deadline=20.0, base=0.005, cap=0.02, max_retry_after=0.05)


@pytest.fixture(
    params=[pytest.param(("redis", False), id="redis"), pytest.param(("fakeredis", True), id="fakeredis-decoded")]
)
def backend(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server() -> Iterator[Provider]:
    provider = Provider().start()
    yield provider
    provider.stop()


@pytest.fixture
def provider(server: Provider) -> Provider:
    server.reset()
    return server


@pytest.fixture
def gov(make_gov: MakeGov) -> Governor:
    return make_gov(GovernorConfig(), clock=FakeClock())


@pytest.fixture
def agov(make_agov: MakeAGov) -> AsyncGovernor:
    return make_agov(GovernorConfig(), clock=FakeClock())


def http_client(client: Any) -> Any:
    return client._client


# -- what is built ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "sdk_client", "default_client", "transport_type"),
    [
        (openai_client, openai.OpenAI, openai.DefaultHttpxClient, GovernedTransport),
        (anthropic_client, anthropic.Anthropic, anthropic.DefaultHttpxClient, GovernedTransport),
    ],
)
def test_sync_builders_with_a_governor(
    gov: Governor, build: Callable[..., Any], sdk_client: type, default_client: type, transport_type: type
) -> None:
    with build(governor=gov, api_key="test", base_url="http://127.0.0.1:9") as client:
        assert isinstance(client, sdk_client)
        assert client.max_retries == 0
        inner = http_client(client)
        assert isinstance(inner, default_client) and isinstance(inner, httpx2.Client)
        assert inner.timeout == httpx2.Timeout(client.timeout)  # the SDK's own default timeout
        transport = inner._transport
        assert isinstance(transport, transport_type)
        assert transport.governor is gov
        assert isinstance(transport._transport, httpx2.HTTPTransport)


@pytest.mark.parametrize(
    ("build", "sdk_client"),
    [(async_openai_client, openai.AsyncOpenAI), (async_anthropic_client, anthropic.AsyncAnthropic)],
)
async def test_async_builders_with_a_governor(agov: AsyncGovernor, build: Callable[..., Any], sdk_client: type) -> None:
    async with build(governor=agov, api_key="test", base_url="http://127.0.0.1:9") as client:
        assert isinstance(client, sdk_client)
        assert client.max_retries == 0
        inner = http_client(client)
        assert isinstance(inner, httpx2.AsyncClient)
        assert isinstance(inner._transport, AsyncGovernedTransport)
        assert inner._transport.governor is agov
        assert isinstance(inner._transport._transport, httpx2.AsyncHTTPTransport)


def test_without_a_governor_exactly_as_before() -> None:
    for build in (openai_client, anthropic_client):
        with build(api_key="test", base_url="http://127.0.0.1:9") as client:
            assert client.max_retries == 0
            assert not isinstance(http_client(client)._transport, GovernedTransport)
    mine = httpx2.Client()
    with openai_client(api_key="test", http_client=mine) as client:
        assert http_client(client) is mine
    made_elsewhere = openai.OpenAI(api_key="test")
    quiet = without_retries(made_elsewhere)
    assert (made_elsewhere.max_retries, quiet.max_retries) == (2, 0)
    made_elsewhere.close()


def test_misuse_is_a_config_error(gov: Governor, agov: AsyncGovernor) -> None:
    with pytest.raises(ConfigError, match="max_retries"):
        openai_client(governor=gov, api_key="test", max_retries=2)
    with pytest.raises(ConfigError, match="builds its own http_client"):
        openai_client(governor=gov, api_key="test", http_client=httpx2.Client())
    with pytest.raises(ConfigError, match="builds its own http_client"):
        async_anthropic_client(governor=agov, api_key="test", http_client=httpx2.AsyncClient())
    with pytest.raises(ConfigError, match="pass governor= too"):
        anthropic_client(api_key="test", retry=FAST)
    with pytest.raises(ConfigError, match="pass governor= too"):
        openai_client(api_key="test", holder="me")
    with pytest.raises(ConfigError, match="needs a Governor"):
        openai_client(governor=agov, api_key="test")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a AsyncGovernor"):
        async_openai_client(governor=gov, api_key="test")  # type: ignore[arg-type]


def test_an_sdk_on_httpx_gets_an_httpx_transport(gov: Governor, agov: AsyncGovernor) -> None:
    """SDK versions before httpx2 (the providers extra allows them) are built on httpx."""
    limits = httpx.Limits(max_connections=7)
    sdk = types.SimpleNamespace(
        DefaultHttpxClient=httpx.Client, DefaultAsyncHttpxClient=httpx.AsyncClient, DEFAULT_CONNECTION_LIMITS=limits
    )
    with _governed_http_client(sdk, False, _governing(gov, FAST, "h", None, None), {}) as client:
        assert isinstance(client, httpx.Client)
        assert isinstance(client._transport, GovernedTransport)
        assert isinstance(client._transport._transport, httpx.HTTPTransport)
        assert client._transport._transport._pool._max_connections == 7
    client = _governed_http_client(sdk, True, _governing(agov, None, None, None, None), {})
    assert isinstance(client._transport, AsyncGovernedTransport)
    assert isinstance(client._transport._transport, httpx.AsyncHTTPTransport)
    with pytest.raises(ConfigError, match="no httpx or httpx2 client"):
        _governed_http_client(
            types.SimpleNamespace(DefaultHttpxClient=dict), False, _governing(gov, None, None, None, None), {}
        )


# -- round trips ------------------------------------------------------------------------------


def test_openai_client_round_trip(gov: Governor, provider: Provider, sync_client: Any, name: str) -> None:
    provider.script(chat_ok(13, 7), chat_stream(hold=True))
    with openai_client(
        governor=gov, retry=FAST, holder="agent-7", base_url=f"{provider.url}/v1", api_key="t"
    ) as client:
        reply = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        assert reply.usage is not None and reply.usage.total_tokens == 20
        status = gov.status()
        assert counts(status) == (1, 0, 0, 0)
        assert levels(status)["tokens"][:2] == (200000, 190000)  # the headers reached Redis
        with client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True) as stream:
            next(iter(stream))
            [record] = holders(sync_client, name)
            assert record.holder == "agent-7"  # the leases carry the holder given to the builder
    assert gov.status().in_flight == 0


def test_anthropic_client_round_trip(gov: Governor, provider: Provider) -> None:
    provider.script(message_ok(21, 9))
    with anthropic_client(governor=gov, retry=FAST, base_url=provider.url, api_key="t") as client:
        reply = client.messages.create(model="claude-test", max_tokens=32, messages=MESSAGES)
    assert reply.usage.output_tokens == 9
    status = gov.status()
    assert counts(status) == (1, 0, 0, 0)
    assert {b.kind for b in status.budgets} == {"requests", "input_tokens", "output_tokens"}


async def test_async_clients_round_trip(agov: AsyncGovernor, provider: Provider) -> None:
    provider.script(chat_ok(13, 7), message_ok(21, 9))
    async with (
        async_openai_client(governor=agov, retry=FAST, base_url=f"{provider.url}/v1", api_key="t") as oc,
        async_anthropic_client(governor=agov, retry=FAST, base_url=provider.url, api_key="t") as ac,
    ):
        chat = await oc.chat.completions.create(model="gpt-test", messages=MESSAGES)
        message = await ac.messages.create(model="claude-test", max_tokens=32, messages=MESSAGES)
    assert chat.usage is not None and message.usage.input_tokens == 21
    status = await agov.status()
    assert counts(status) == (2, 0, 0, 0)
    assert [seen.path for seen in provider.requests] == ["/v1/chat/completions", "/v1/messages"]
