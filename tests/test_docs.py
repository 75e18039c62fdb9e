"""The README and the documentation site: every Python example runs as printed,
the site builds, and what the pages list is what the code has.

Every ```python block of README.md and of docs/**/*.md runs in an
interpreter of its own against the session's Redis (the examples'
``redis://localhost:6379/0`` is replaced with its URL) and must exit 0 and
print something. Where an example stands for the user's own code
(``call_the_provider``, ``do_one_llm_call``, ``ProviderThrottled``) the test
defines it; the SDK examples run the real ``openai`` and ``anthropic``
clients, through their own base-URL environment variables, against the
scripted provider (a loopback server that speaks both APIs), whose first
answer is a throttle, so each SDK example also shows the governor's retry.

A block that cannot run here (it needs a real provider key, say) is marked
by an HTML comment on the line just before its fence::

    <!-- no-run: the reason -->
    ```python
    ...
    ```

The comment does not show on GitHub or in the site. Keep such blocks rare
(at most a third of the examples), and run what they show in another test.
Blocks that are not Python (shell commands, output) are fenced with another
language or indented, and are not run. A page may include a section of the
README (``--8<-- "README.md:NAME"``, pymdownx.snippets): the example then
runs once, from the README.

The site is built with ``mkdocs build --strict`` (a broken link, anchor or
snippet, or a page missing from the nav, fails); the test is skipped only
where mkdocs is not installed (the ``test`` extra installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import redis

from governor.cli import main as governor_cli
from governor.protocol import SCHEMA_VERSION

from .support.scripted_provider import OK, ScriptedProvider, openai_rate_limited

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
EXAMPLE_URL = "redis://localhost:6379/0"
FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
SHELLS = ("sh", "bash", "shell", "console")
NO_RUN = re.compile(r"<!--\s*no-run\b[^>]*-->[ \t]*\n$")

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


def python_blocks(page: Path) -> list[tuple[int, str, bool]]:
    """(line of the opening fence, code, marked no-run) of every python block of a page."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(2), bool(NO_RUN.search(text[: match.start()][-200:])))
        for match in FENCE.finditer(text)
        if match.group(1).lower() in ("python", "py", "python3")
    ]


def examples() -> list[tuple[str, int, str]]:
    """(page, line, code) of every example that runs."""
    return [
        (str(page.relative_to(ROOT)), line, code)
        for page in PAGES
        for line, code, no_run in python_blocks(page)
        if not no_run
    ]


def governor_names(code: str) -> set[str]:
    """The governors an example creates (from_url(URL, NAME, ...))."""
    return set(re.findall(r"from_url\(\s*\"[^\"]*\",\s*\"([^\"]+)\"", code))


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    server = ScriptedProvider().start()
    yield server
    server.stop()


def test_the_examples_are_found() -> None:
    """The README shows a lease, gov.call and the transport; the usage page
    the asyncio facade; a no-run mark stays rare and says why."""
    readme = [code for _, code, _ in python_blocks(ROOT / "README.md")]
    assert any("gov.acquire(" in code for code in readme)
    assert any("gov.call(" in code for code in readme)
    assert any("openai_client(governor=gov)" in code for code in readme)
    assert any("asyncio.run(" in code and "AsyncGovernor" in code for _, _, code in examples())
    marked = [(page, line) for page in PAGES for line, _, no_run in python_blocks(page) if no_run]
    assert len(marked) * 3 <= len(marked) + len(examples()), f"more than a third of the examples do not run: {marked}"
    for page in PAGES:
        for reason in re.findall(r"<!--\s*no-run\b([^>]*)-->", page.read_text(encoding="utf-8")):
            assert reason.strip(" :-"), f"{page.relative_to(ROOT)}: a no-run mark says why: <!-- no-run: why -->"


@pytest.mark.parametrize(("page", "line", "code"), examples(), ids=[f"{page}:{line}" for page, line, _ in examples()])
def test_an_example_runs_as_printed(
    page: str, line: int, code: str, redis_url: str, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.reset()
    # a throttle first (the governor's retry is part of what the SDK examples show), then answers
    provider.script(openai_rate_limited(**{"retry-after-ms": "50"}), *([OK] * 10))
    uses_sdk = any(
        mark in code for mark in ("governor.providers import", "governor.frameworks.", "governor.proxy import")
    )
    if not uses_sdk:
        provider.reset()
    if "from_url(" in code:
        assert EXAMPLE_URL in code, "an example connects to the URL the readers use"
    script = tmp_path / "example.py"
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
    where = f"{page} line {line}"
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{where}: the example ran but printed nothing"
    assert "Traceback" not in done.stderr, done.stderr
    if uses_sdk:
        assert provider.requests, "the SDK example called the provider"
        assert "ok" in done.stdout, done.stdout  # the scripted provider's answer, printed
        assert len(provider.requests) >= 2, "the first answer was a throttle: the governor retried"


def test_the_api_table_names_every_method() -> None:
    """The README's API table names every public method of the governor."""
    from governor import Governor

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| call | what it does |") :].split("\n\n")[0]
    methods = {name for name, value in vars(Governor).items() if not name.startswith("_") and callable(value)}
    methods |= {name for name in ("from_url",) if hasattr(Governor, name)}
    missing = {name for name in methods if not re.search(rf"\b{name}\(", table)}
    assert not missing, f"not in the README's API table: {sorted(missing)}"


def test_the_readme_names_every_error() -> None:
    """The README's error tree names every exception the package exports."""
    import governor

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tree = text[text.index("Errors form one tree") :].split("\n\n")[0]
    exported = {
        name
        for name in governor.__all__
        if isinstance(getattr(governor, name), type) and issubclass(getattr(governor, name), Exception)
    }
    missing = exported - set(re.findall(r"`(\w+)`", tree))
    assert not missing, f"not in the README's error tree: {sorted(missing)}"


#: paths the pages name that are not in the repository: where the wheel puts the Lua
NOT_IN_THE_TREE = {"governor/lua"}


def test_every_file_the_pages_name_exists() -> None:
    """A path in a code span (`governor/...`, `tests/...::test`, ...) names a
    file or folder of the repository: a move that leaves a page behind fails."""
    gone = []
    for page in PAGES:
        for match in re.finditer(
            r"`((?:governor|lua|tests|bench|scripts|docker|clients|docs)/[\w./-]*)", page.read_text(encoding="utf-8")
        ):
            path = match.group(1).rstrip(".")
            if path not in NOT_IN_THE_TREE and not (ROOT / path).exists():
                gone.append(f"{page.relative_to(ROOT)}: {path}")
    assert not gone, gone


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: every link, anchor and included README
    section resolves, and every page is in the nav."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    shutil.rmtree(tmp_path / "site")


def test_no_spec_references_in_the_tree() -> None:
    """The project's files speak of the project: no section numbers of an
    outside document."""
    found = []
    for folder in ("governor", "lua", "tests", "bench", "scripts", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".lua", ".md") and path != Path(__file__):
                for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if re.search(r"\bSPEC\b\s*§?\d", text):
                        found.append(f"{path.relative_to(ROOT)}:{number}")
    for name in ("README.md", "ARCHITECTURE.md"):
        if re.search(r"\bSPEC\b\s*§?\d", (ROOT / name).read_text(encoding="utf-8")):
            found.append(name)
    assert not found, f"SPEC references: {found}"


#: options every command takes (the group's, repeated after the command), not listed per command
GLOBAL_OPTIONS = {"--url", "--name", "--prefix", "--timeout", "--json", "--help"}


def cli_table() -> dict[str, set[str]]:
    """The commands of the CLI reference's table in docs/operating.md, each
    with the long options its code spans show (a cell may name several
    commands: `pause [--reason]`, `resume`)."""
    text = (DOCS / "operating.md").read_text(encoding="utf-8")
    table = text[text.index("| command | what it shows or does |") :].split("\n\n")[0]
    documented: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        for span in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            name, *rest = span.split()
            documented.setdefault(name, set()).update(re.findall(r"--[a-z][a-z-]*", " ".join(rest)))
    return documented


def test_the_cli_reference_lists_every_operator_command_and_option() -> None:
    documented = cli_table()
    commands = set(governor_cli.commands)
    assert set(documented) == commands, (
        f"not in docs/operating.md: {sorted(commands - set(documented))}; "
        f"gone from the CLI: {sorted(set(documented) - commands)}"
    )
    for name, command in governor_cli.commands.items():
        assert isinstance(command, click.Command)
        options = {
            option
            for param in command.params
            for option in (*param.opts, *param.secondary_opts)
            if option.startswith("--")
        }
        assert documented[name] - GLOBAL_OPTIONS == options - GLOBAL_OPTIONS, f"governor {name}"


def documented_commands() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The operator commands (`governor [options] COMMAND ...` in a code span,
    an indented line or a shell block) and the benchmark commands (`python -m bench
    COMMAND`) the pages name, each with the pages that name it."""
    operator: dict[str, set[str]] = {}
    benchmark: dict[str, set[str]] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        where = str(page.relative_to(ROOT))
        shell = "\n".join(fence.group(2) for fence in FENCE.finditer(text) if fence.group(1) in SHELLS)
        spans = [m.group(1) or m.group(2) for m in re.finditer(r"`governor ([^`]+)`|^ {4}governor (.+)$", text, re.M)]
        spans += re.findall(r"^(?:\$ )?governor (.+)$", shell, re.M)
        for span in spans:
            words = span.split()
            i = 0
            while i < len(words) and words[i].startswith("-"):  # the global options: --json, or one with a value
                i += 1 if words[i] == "--json" else 2
            if i < len(words):
                operator.setdefault(words[i], set()).add(where)
        for match in re.finditer(r"python -m bench ([a-z][a-z-]*)", text):
            benchmark.setdefault(match.group(1), set()).add(where)
    return operator, benchmark


def test_every_command_the_pages_name_exists() -> None:
    operator, benchmark = documented_commands()
    unknown = {name: pages for name, pages in operator.items() if name not in governor_cli.commands}
    assert not unknown, f"no such governor command: {unknown}"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^  ([a-z][a-z-]*)  ", done.stdout.split("Commands:", 1)[1], re.M))
    assert {"demo", "swarm", "bench"} <= listed, done.stdout
    unknown = {name: pages for name, pages in benchmark.items() if name not in listed}
    assert not unknown, f"no such command of python -m bench: {unknown}"


def table_after(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the markdown table whose header line is ``header``."""
    table = text[text.index(header) :].split("\n\n")[0]
    return [row.strip("|").split(" | ") for row in table.splitlines()[2:]]


def test_the_configuration_tables_list_every_field() -> None:
    """docs/usage.md lists every field of GovernorConfig and of each policy,
    and nothing else."""
    import dataclasses

    from governor import GovernorConfig
    from governor.policies import REGISTRY

    text = (DOCS / "usage.md").read_text(encoding="utf-8")
    documented = [
        name
        for cells in table_after(text, "| field | default | meaning |")
        for name in re.findall(r"`(\w+)`", cells[0])
    ]
    assert sorted(documented) == sorted(f.name for f in dataclasses.fields(GovernorConfig))
    by_policy: dict[str, set[str]] = {}
    current = ""
    for cells in table_after(text, "| policy | field | default | meaning |"):
        current = re.sub(r"\W", "", cells[0]) or current
        by_policy.setdefault(current, set()).update(re.findall(r"`(\w+)`", cells[1]))
    for policy in REGISTRY.values():
        names = {f.name for f in dataclasses.fields(policy)}
        assert by_policy[policy.__name__] == names, policy.__name__


def operating_fields(hash_name: str) -> list[str]:
    """The first column of docs/operating.md's table of the fields of
    ``hash_name`` (a row may name several fields: `a`, `b`)."""
    text = (DOCS / "operating.md").read_text(encoding="utf-8")
    start = text.index(f"The fields of the `{hash_name}` hash")
    table = text[start:].split("\n\n")[1]
    cells = [m.group(1) for m in re.finditer(r"^\| ((?:`[a-z0-9_]+`(?:, )?)+) \|", table, re.M)]
    return [name for cell in cells for name in re.findall(r"`([a-z0-9_]+)`", cell)]


def test_the_key_tables_list_every_field_of_the_three_hashes(redis_url: str, name: str) -> None:
    """HGETALL of a governor's state, config and policy hashes reads as
    docs/operating.md says, field by field, for every policy (each stores its own)."""
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
        documented = operating_fields(hash_name)
        assert len(documented) == len(set(documented)), f"a field of {hash_name} is listed twice"
        assert set(documented) == fields, (
            f"{hash_name}: not in docs/operating.md: {sorted(fields - set(documented))}; "
            f"gone: {sorted(set(documented) - fields)}"
        )
