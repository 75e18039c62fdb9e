"""The wheel carries the library and its Lua only, and installed in a clean
virtual environment it governs a call and runs `governor status`; the
checked-in layout keeps its promises (script headers, one library whose
functions are registered with the right flags, every stored field the Lua
names is a field of governor.protocol, generated sync facade)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import redis
import tomllib

from governor import policies, protocol
from governor.scripts import (
    CLOSING,
    COMMON,
    FRAGMENTS,
    OPERATIONS,
    READ_ONLY,
    field_table,
    function_name,
    imports,
    library,
    library_name,
    opening,
    parts,
)

from .conftest import load_library

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("fleet_governor-*.whl")
    return built


def test_the_wheel_ships_every_script(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for operation in OPERATIONS:
        assert f"governor/lua/{operation}.lua" in names
    for fragment in (COMMON, *FRAGMENTS):
        assert f"governor/lua/lib/{fragment}.lua" in names
    assert "governor/py.typed" in names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "governor = governor.cli:main" in entry


def test_the_wheel_holds_the_library_and_its_lua_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not n.startswith(("governor/", "fleet_governor-"))]
    assert not outside, f"the wheel carries more than the library: {outside}"
    library_files = [n for n in names if n.startswith("governor/")]
    assert all(n.endswith((".py", ".lua", "py.typed")) for n in library_files), library_files
    assert not [n for n in library_files if "/sim/" in n or "__pycache__" in n]
    assert sum(n.endswith(".lua") for n in names) == len(OPERATIONS) + len((COMMON, *FRAGMENTS))


@pytest.fixture(scope="module")
def clean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment outside the repository with the wheel and its two
    dependencies (the versions of this environment, so pip's cache serves them)."""
    venv = tmp_path_factory.mktemp("venv")
    assert ROOT not in venv.parents
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    deps = [f"{name}=={importlib.metadata.version(name)}" for name in ("redis", "click")]
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", str(wheel), *deps], check=True, capture_output=True, timeout=300
    )
    return venv


def test_the_installed_wheel_governs_a_call_and_runs_status(
    clean_venv: Path, tmp_path: Path, scratch_redis_url: str
) -> None:
    """In the clean environment, from another folder (the checkout out of
    reach): the wheel's client loads its own Lua, governs a call, and
    `governor status` shows the governor."""
    python = clean_venv / "bin" / "python"
    program = (
        "import governor, governor.scripts as s, sys;"
        f"assert governor.__file__.startswith({str(clean_venv)!r}), governor.__file__;"
        f"assert str(s._lua_dir()).startswith({str(clean_venv)!r}), s._lua_dir();"
        f"g = governor.Governor.from_url({scratch_redis_url!r}, 'wheel-check');"
        "print(g.call(lambda: 42), g.status().schema, s.library_name()); g.close()"
    )
    env = {"PATH": f"{clean_venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    client = redis.Redis.from_url(scratch_redis_url, decode_responses=True)
    try:
        if client.function_list(library=library_name()):
            client.function_delete(library_name())  # the wheel's client must load the library itself
        done = subprocess.run([str(python), "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer, schema, name = done.stdout.split()
        assert answer == "42" and schema == str(protocol.SCHEMA_VERSION) and name == library_name()
        assert client.function_list(library=library_name()), "the wheel's client did not load the library"
        command = ["status", "--json"]
        status = subprocess.run(
            [str(clean_venv / "bin" / "governor"), "--url", scratch_redis_url, "--name", "wheel-check", *command],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["name"] == "wheel-check"
    finally:
        client.close()


@pytest.mark.parametrize("path", sorted(LUA.glob("*.lua")), ids=lambda p: p.name)
def test_each_script_opens_with_its_contract(path: Path) -> None:
    text = path.read_text()
    head = "\n".join(text.splitlines()[:40])
    assert "KEYS" in "\n".join(text.splitlines()[:15]), "the header must name the KEYS"
    assert "ARGV[1]" in head and ("Reply" in head or "Replies" in head)
    code = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S)
    assert not re.search(r"redis\.call\(\s*['\"](KEYS|SCAN|FLUSHALL|FLUSHDB)['\"]", code)
    assert not re.search(r"\.\.\s*['\"]:(state|leases|queue)", code), "scripts never build key names"


def test_every_operation_has_a_file_and_the_library_holds_them_all_in_order() -> None:
    assert {p.stem for p in LUA.glob("*.lua")} == set(OPERATIONS)
    assert {p.stem for p in (LUA / "lib").glob("*.lua")} == {COMMON, *FRAGMENTS}
    names = [name for name, _ in parts()]
    assert names == [
        "(generated)",
        *(f"lua/lib/{f}.lua" for f in (COMMON, *FRAGMENTS)),
        *(f"lua/{op}.lua" for op in OPERATIONS),
    ]
    for name, text in parts()[1:]:
        body = (ROOT / name).read_text(encoding="utf-8")
        stem = Path(name).stem
        if stem == COMMON:  # the main chunk's names, as they are
            assert text == body
        elif stem in FRAGMENTS:  # a scope of its own: the file's lines, the first and last wrapped
            lines, wrapped = body.split("\n"), text.split("\n")
            assert wrapped[1:-1] == lines[1:-1], name
            assert wrapped[0] == f"local {stem} = (function() {imports(body)}{lines[0]}", name
            assert re.fullmatch(rf"{re.escape(lines[-1])} return \{{.*\}} end\)\(\)", wrapped[-1]), name
        else:
            assert text == f"{opening(stem, imports(body))}\n{body}\n{CLOSING}", name
    source = library()
    assert source.startswith(f"#!lua name={library_name()}\n")  # the shebang line names the library
    assert "\n".join(text for _, text in parts()) in source
    # the name carries a hash of the source: another version's clients keep their own library
    digest = hashlib.sha1("\n".join(text for _, text in parts()).encode()).hexdigest()[:12]
    assert library_name() == f"governor_v{protocol.SCHEMA_VERSION}_{digest}"
    assert function_name("acquire") == f"{library_name()}_acquire"
    with pytest.raises(KeyError):
        function_name("eval")


REGISTRATION = re.compile(
    r"redis\.register_function\{function_name = '(\w+)', flags = \{([^}]*)\},\s*"
    r"callback = function\(keys, argv\) begin\(keys, argv\) return OPS\.(\w+)\(\) end\}"
)


def test_status_alone_is_registered_no_writes() -> None:
    """A read-only function runs on a Redis out of memory and on replicas; a
    writing one is refused by a Redis out of memory before it runs."""
    registered = {name: (flags.strip(), op) for name, flags, op in REGISTRATION.findall(library())}
    assert library().count("redis.register_function") == len(registered) == len(OPERATIONS)
    assert READ_ONLY == {"status"}
    for op in OPERATIONS:
        flags, called = registered[function_name(op)]
        assert called == op
        assert flags == ("'no-writes'" if op == "status" else ""), (op, flags)


def test_redis_sees_the_flags_of_every_function(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        load_library(client)
        (entry,) = [_pairs(e) for e in client.function_list(library=library_name())]
        flags = {_pairs(f)["name"]: set(_pairs(f)["flags"]) for f in entry["functions"]}
        assert flags == {function_name(op): ({"no-writes"} if op == "status" else set()) for op in OPERATIONS}
    finally:
        client.close()


def _pairs(reply: Any) -> dict[str, Any]:
    """A RESP2 flat list of name, value (or a RESP3 map) as a dict."""
    return dict(reply) if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))


def _code(lua: str) -> str:
    """Lua without its comments."""
    lua = re.sub(r"--\[\[.*?\]\]", "", lua, flags=re.S)
    return re.sub(r"--[^\n]*", "", lua)


def _quoted(text: str) -> list[str]:
    return re.findall(r"'(\w+)'", text)


def _lua_fields() -> dict[str, dict[str, set[str]]]:
    """Every stored field the Lua of lua/ names, by hash, with where."""
    found: dict[str, dict[str, set[str]]] = {"state": {}, "config": {}, "policy": {}}

    def add(hash_name: str, field: str, where: str) -> None:
        found[hash_name].setdefault(field, set()).add(where)

    (suffixes,) = re.findall(
        r"local function budget_fields\(kind\)\s*return ([^\n]*)", _code((LUA / "lib" / "budgets.lua").read_text())
    )
    sources = [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) for path in sorted(LUA.rglob("*.lua"))]
    for where, source in [*sources, ("(generated)", field_table())]:
        code = _code(source)
        for hash_name, field in re.findall(r"\bset\('(\w+)', '(\w+)'", code):
            add(hash_name, field, where)
        for hash_name, rest in re.findall(r"\bmore\('(\w+)'((?:,\s*'\w+')*)", code):
            for field in _quoted(rest):
                add(hash_name, field, where)
        for letter, hash_name in (("S", "state"), ("C", "config"), ("P", "policy")):
            for field in re.findall(rf"(?<![\w.]){letter}\.(\w+)", code):
                add(hash_name, field, where)
        # redis.call('HINCRBY', KEY.state, 'fence', 1); read()'s HGET of the state's schema
        for hash_name, field in re.findall(r"redis\.p?call\('H\w+', K\.(state|config|policy), '(\w+)'", code):
            add(hash_name, field, where)
        for field in re.findall(r"redis\.p?call\('HGET', key, '(\w+)'", code):
            add("state", field, where)
        for name, body in re.findall(r"local (ADMIT|WRITE|REPORT|PAUSE_FIELDS|STATUS_LOAD|VTIMES) = \{([^}]*)\}", code):
            for field in _quoted(body):
                add("state", field, f"{where} {name}")
        # each budget kind's fields: budget_fields(kind) of lib/budgets.lua, for every kind of BUDGET_KINDS
        for kinds in re.findall(r"local BUDGET_KINDS = \{([^}]*)\}", code):
            for kind in _quoted(kinds):
                for suffix in re.findall(r"kind \.\. '(_\w+)'", suffixes):
                    add("state", kind + suffix, f"{where} budget_fields")
        for body in re.findall(r"\bload\(\{([^}]*)\}", code):
            for field in _quoted(body):
                add("state", field, where)
        for body in re.findall(r"local BASE_CONFIG = \{([^}]*)\}", code):
            for field in _quoted(body):
                add("config", field, f"{where} BASE_CONFIG")
        for policy, entry in re.findall(r"POLICIES\.(\w+) = \{(.*?)\n {0,2}\}", code, flags=re.S):
            for hash_name, key in (("config", "config"), ("policy", "state"), ("policy", "later")):
                for body in re.findall(rf"^\s*{key} = \{{([^}}]*)\}}", entry, flags=re.M):
                    for field in _quoted(body):
                        add(hash_name, field, f"{where} POLICIES.{policy}.{key}")
    return found


def test_every_field_the_lua_names_is_a_protocol_field_of_that_hash() -> None:
    """One vocabulary: a field the Lua reads or writes is a field of that
    hash in governor.policies.fields() (with governor/policies.py's), and
    every protocol field is used by some Lua."""
    found = _lua_fields()
    known = policies.fields()
    assert set(found) == set(known)
    problems = []
    for hash_name, used in found.items():
        for field, places in sorted(used.items()):
            if field not in known[hash_name]:
                problems.append(f"{hash_name}.{field} (in {', '.join(sorted(places))}) is not a {hash_name} field")
        for field in known[hash_name]:
            if field not in used:
                problems.append(f"{hash_name}.{field} is a protocol field no Lua uses")
    assert not problems, "\n".join(problems)
    # each kind of mention was found
    assert any("BASE_CONFIG" in w for w in found["config"]["log_length"])
    assert any("PAUSE_FIELDS" in w for w in found["state"]["saved_capacity"])
    assert any("POLICIES.adaptive.config" in w for w in found["config"]["probe_ms"])
    assert any("POLICIES.adaptive.state" in w for w in found["policy"]["climbing"])
    assert any("POLICIES.seed.config" in w for w in found["config"]["decrease_ratio"])


@pytest.mark.parametrize("path", sorted((LUA / "lib").glob("*.lua")), ids=lambda p: p.name)
def test_each_fragment_says_what_it_is_for(path: Path) -> None:
    assert path.read_text().startswith(f"--[[ lib/{path.name}: ")


def test_the_sync_facade_is_generated_from_the_async_one() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_install_page_names_every_extra_with_what_it_installs() -> None:
    """docs/install.md's table of extras is pyproject's: each extra and the
    packages it installs (the test extra aside: it is the rest and the
    checkers); no extra installs what nothing it is for uses (the SDKs bring
    their own HTTP library)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = {
        name: {re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0] for req in reqs}
        for name, reqs in project["optional-dependencies"].items()
        if name != "test"
    }
    page = (ROOT / "docs/install.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| `([\w-]+)` \| ([^|]*) \|", page, re.M)
    rows = {extra: set(re.findall(r"`([\w.-]+)(?:\[\w+\])?`", installs)) for extra, installs in table}
    assert {name: rows.get(name) for name in extras} == extras
    assert extras["providers"] == {"openai", "anthropic"}
    assert "test" in rows
