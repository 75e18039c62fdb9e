"""Official provider SDK clients with their own retries off.

The ``openai`` and ``anthropic`` SDKs retry 429s and 5xx by themselves
(twice by default, on their own backoff). Under ``Governor.call`` that
stacks two retry loops: each SDK retry is an attempt the governor never
sees (no report, no lease), so the fleet's capacity is not cut, the
provider's Retry-After does not hold the other hosts, and every worker
retries on the same schedule as its neighbours. Build the clients with
``max_retries=0`` and let ``call()`` do the retrying, once, with the
fleet's knowledge::

    from governor import Governor
    from governor.providers import openai_client

    gov = Governor.from_url("redis://localhost:6379/0", "openai")
    client = openai_client()  # OpenAI(max_retries=0), other options as usual
    reply = gov.call(client.chat.completions.create, model="gpt-4o-mini", messages=[...])

The same by hand: ``OpenAI(max_retries=0)``, ``Anthropic(max_retries=0)``
(and their Async twins), or ``client.with_options(max_retries=0)`` for a
client made elsewhere, which is what :func:`without_retries` does.

The SDKs are imported when one of these functions is called, never on
``import governor``; they come with the ``providers`` extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError

if TYPE_CHECKING:
    from anthropic import Anthropic, AsyncAnthropic
    from openai import AsyncOpenAI, OpenAI

C = TypeVar("C")


def without_retries(client: C) -> C:
    """A copy of an SDK client (openai or anthropic, sync or async) that
    never retries by itself; the original is left as it was."""
    with_options = getattr(client, "with_options", None)
    if not callable(with_options) or not hasattr(client, "max_retries"):
        raise ConfigError(
            f"without_retries() needs an openai or anthropic client (with max_retries and with_options), got {client!r}"
        )
    copy: C = with_options(max_retries=0)
    return copy


def openai_client(**options: Any) -> OpenAI:
    """``openai.OpenAI(**options)`` with ``max_retries=0``."""
    return _build("openai", "OpenAI", options)  # type: ignore[no-any-return]


def async_openai_client(**options: Any) -> AsyncOpenAI:
    """``openai.AsyncOpenAI(**options)`` with ``max_retries=0``."""
    return _build("openai", "AsyncOpenAI", options)  # type: ignore[no-any-return]


def anthropic_client(**options: Any) -> Anthropic:
    """``anthropic.Anthropic(**options)`` with ``max_retries=0``."""
    return _build("anthropic", "Anthropic", options)  # type: ignore[no-any-return]


def async_anthropic_client(**options: Any) -> AsyncAnthropic:
    """``anthropic.AsyncAnthropic(**options)`` with ``max_retries=0``."""
    return _build("anthropic", "AsyncAnthropic", options)  # type: ignore[no-any-return]


def _build(module_name: str, class_name: str, options: dict[str, Any]) -> Any:
    retries = options.pop("max_retries", 0)
    if retries != 0:
        raise ConfigError(
            f"max_retries={retries!r}: Governor.call does the retrying; SDK retries on top would be "
            "attempts the governor never sees. Build the client yourself if you really want them."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"the {module_name!r} package is not installed: pip install 'fleet-governor[providers]'"
        ) from error
    return getattr(module, class_name)(max_retries=0, **options)
