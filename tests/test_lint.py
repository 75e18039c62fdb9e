"""The code keeps its own rules: ruff (lint and format), mypy --strict, the
library's layering (import-linter) and the size of its modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(found)


def test_ruff_finds_nothing() -> None:
    result = run(tool("ruff"), "check", "governor", "bench", "tests", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted() -> None:
    result = run(tool("ruff"), "format", "--check", "governor", "bench", "tests", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(300)  # a cold cache (a fresh clone) on a loaded host: as long as run() allows
def test_mypy_strict_finds_nothing() -> None:
    result = run(tool("mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_library_imports_only_downward() -> None:
    """pyproject.toml's import-linter contracts: each module of governor/
    imports only the layers below its own, and no package's modules import
    each other in a cycle."""
    result = run(tool("lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


#: the most lines a module of the library may have
MAX_MODULE_LINES = 700


def test_no_module_of_the_library_is_too_long() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "governor").rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules above {MAX_MODULE_LINES} lines (split them by concern): {long}"
