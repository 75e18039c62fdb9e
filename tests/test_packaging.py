"""The wheel carries the Lua scripts and they load from it; the checked-in
layout keeps its promises (script headers, generated sync facade)."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from governor.scripts import COMMON, FRAGMENTS, OPERATIONS, source, uses

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


def test_the_installed_wheel_loads_its_scripts_and_runs_them(wheel: Path, tmp_path: Path, redis_url: str) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    program = (
        "import governor, governor.scripts as s, sys;"
        f"assert governor.__file__.startswith({str(target)!r}), governor.__file__;"
        f"assert str(s._lua_dir()).startswith({str(target)!r}), s._lua_dir();"
        f"g = governor.Governor.from_url({redis_url!r}, 'wheel-check');"
        "print(g.status().schema); g.close()"
    )
    # -S (no .pth files) and another cwd: the source tree stays out of the way.
    site_packages = sysconfig.get_paths()["purelib"]
    result = subprocess.run(
        [sys.executable, "-S", "-c", program],
        env={"PYTHONPATH": f"{target}:{site_packages}", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


@pytest.mark.parametrize("path", sorted(LUA.glob("*.lua")), ids=lambda p: p.name)
def test_each_script_opens_with_its_contract(path: Path) -> None:
    text = path.read_text()
    head = "\n".join(text.splitlines()[:40])
    assert "KEYS" in "\n".join(text.splitlines()[:15]), "the header must name the KEYS"
    assert "ARGV[1]" in head and ("Reply" in head or "Replies" in head)
    code = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S)
    assert not re.search(r"redis\.call\(\s*['\"](KEYS|SCAN|FLUSHALL|FLUSHDB)['\"]", code)
    assert not re.search(r"\.\.\s*['\"]:(state|leases|queue)", code), "scripts never build key names"


def test_every_operation_has_a_file_and_loads_only_its_fragments() -> None:
    assert {p.stem for p in LUA.glob("*.lua")} == set(OPERATIONS)
    assert {p.stem for p in (LUA / "lib").glob("*.lua")} == {COMMON, *FRAGMENTS}
    assert source("acquire").startswith("#!lua\n--[[ lib/common.lua")  # flags first: Redis reads them
    assert source("status").startswith("#!lua flags=no-writes\n")
    assert source("acquire", flagged=False).startswith("--[[ lib/common.lua")  # for fakeredis
    assert uses((LUA / "report.lua").read_text()) == ("admission", "policy")
    assert "local function record(" in source("report") and "local function record(" not in source("acquire")


def _code(lua: str) -> str:
    """Lua without its comments."""
    lua = re.sub(r"--\[\[.*?\]\]", "", lua, flags=re.S)
    return re.sub(r"--[^\n]*", "", lua)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_state_field_a_script_mentions_is_loaded(operation: str) -> None:
    """load_state reads only the fields a script wants: one it mentions but
    does not want would be nil, and fail after the script's first write."""
    code = _code(source(operation, flagged=False))
    if "want_all()" in code:
        return
    wanted = {name for call in re.findall(r"\bwant\(([^)]*)\)", code) for name in re.findall(r"'(\w+)'", call)}
    mentioned = set(re.findall(r"\bS\.(\w+)", code)) | set(re.findall(r"\bset\('(\w+)'", code))
    assert mentioned <= wanted, f"{operation}.lua mentions {sorted(mentioned - wanted)} without want()"


@pytest.mark.parametrize("path", sorted((LUA / "lib").glob("*.lua")), ids=lambda p: p.name)
def test_each_fragment_says_what_it_is_for(path: Path) -> None:
    assert path.read_text().startswith(f"--[[ lib/{path.name}: ")


def test_the_sync_facade_is_generated_from_the_async_one() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
