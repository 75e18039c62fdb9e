"""The README's Python examples run as printed, and show that they did something.

Every ```python block of README.md runs in an interpreter of its own
against the session's Redis (the examples' ``redis://localhost:6379/0`` is
replaced with its URL) and must exit 0 and print something. Where an
example stands for the user's own code (``call_the_provider``,
``do_one_llm_call``, ``ProviderThrottled``) the test defines it; the SDK
examples run the real ``openai`` and ``anthropic`` clients, through their
own base-URL environment variables, against ``tests/scripted_provider.py``.
Blocks that are not meant to run (shell commands, tables) are not fenced
as python.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from governor.protocol import SCHEMA_VERSION

from .support.scripted_provider import OK, ScriptedProvider, openai_rate_limited

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE_URL = "redis://localhost:6379/0"
FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

#: what the examples leave to the reader's own code
PLACEHOLDERS = """\
import asyncio as _asyncio


def call_the_provider() -> str:
    return "hello from the provider"


async def do_one_llm_call() -> str:
    await _asyncio.sleep(0.01)
    return "hello from the provider"


class ProviderThrottled(Exception):
    retry_after = None

"""


def python_blocks() -> list[tuple[int, str]]:
    """(line of the opening fence, code) of every python block of the README."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(2))
        for match in FENCE.finditer(text)
        if match.group(1).lower() in ("python", "py", "python3")
    ]


def governor_names(code: str) -> set[str]:
    """The governors an example creates (from_url(URL, NAME, ...))."""
    return set(re.findall(r"from_url\(\s*\"[^\"]*\",\s*\"([^\"]+)\"", code))


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    server = ScriptedProvider().start()
    yield server
    server.stop()


def test_the_readme_has_its_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4
    assert any("asyncio.run(" in code and "AsyncGovernor" in code for _, code in blocks[:2])


@pytest.mark.parametrize(("line", "code"), python_blocks(), ids=[f"line-{line}" for line, _ in python_blocks()])
def test_a_readme_example_runs_as_printed(
    line: int, code: str, redis_url: str, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.reset()
    # a throttle first (the governor's retry is part of what the SDK examples show), then answers
    provider.script(openai_rate_limited(**{"retry-after-ms": "50"}), *([OK] * 10))
    uses_sdk = "governor.providers import" in code
    if not uses_sdk:
        provider.reset()
    if "from_url(" in code:
        assert EXAMPLE_URL in code, "an example connects to the URL the README's readers use"
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(PLACEHOLDERS + code.replace(EXAMPLE_URL, redis_url), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENAI_BASE_URL": provider.openai_base_url,
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": provider.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }
    client = redis.Redis.from_url(redis_url)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
        )
    finally:
        for name in governor_names(code):  # leave the session's Redis as it was
            keys = list(client.scan_iter(match=f"governor:v{SCHEMA_VERSION}:{{{name}}}:*"))
            if keys:
                client.delete(*keys)
        client.close()
    assert done.returncode == 0, f"README line {line}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"README line {line}: the example ran but printed nothing"
    assert "Traceback" not in done.stderr, done.stderr
    if uses_sdk:
        assert provider.requests, "the SDK example called the provider"
        assert "ok" in done.stdout, done.stdout  # the scripted provider's answer, printed
        assert len(provider.requests) >= 2, "the first answer was a throttle: the governor retried"


def readme_fields(hash_name: str) -> list[str]:
    """The first column of the README's table of the fields of ``hash_name``
    (a row may name several fields: `a`, `b`)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"The fields of the `{hash_name}` hash")
    table = text[start:].split("\n\n")[1]
    cells = [m.group(1) for m in re.finditer(r"^\| ((?:`[a-z0-9_]+`(?:, )?)+) \|", table, re.M)]
    return [name for cell in cells for name in re.findall(r"`([a-z0-9_]+)`", cell)]


def test_the_key_tables_list_every_field_of_the_three_hashes(redis_url: str, name: str) -> None:
    """HGETALL of a governor's state, config and policy hashes reads as the
    README says, field by field, for every policy (each stores its own)."""
    from governor import Governor, GovernorConfig
    from governor.policies import REGISTRY

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stored: dict[str, set[str]] = {"state": set(), "config": set(), "policy": set()}
    for policy in REGISTRY:
        gov = Governor(client, f"{name}-{policy}", GovernorConfig(policy=policy))
        try:
            gov.status()  # creates the state: init writes every field
            for hash_name in stored:
                stored[hash_name] |= set(client.hgetall(getattr(gov.keys, hash_name)))
        finally:
            gov.close()
            client.delete(*gov.keys.keys)
    client.close()
    for hash_name, fields in stored.items():
        documented = readme_fields(hash_name)
        assert len(documented) == len(set(documented)), f"a field of {hash_name} is listed twice"
        assert set(documented) == fields, (
            f"{hash_name}: not in the README: {sorted(fields - set(documented))}; "
            f"gone: {sorted(set(documented) - fields)}"
        )
