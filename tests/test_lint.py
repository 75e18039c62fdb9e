"""The code keeps its own rules: ruff (lint and format) and mypy --strict."""

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


def test_mypy_strict_finds_nothing() -> None:
    result = run(tool("mypy"))
    assert result.returncode == 0, result.stdout + result.stderr
