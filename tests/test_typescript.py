"""The Node client ships what the Python package owns: the very same
Functions library text (same bytes, same content hash) and the protocol's
facts (src/generated.ts), both written by scripts/ts_sync.py."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from governor import scripts

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"


def test_the_node_package_ships_the_same_library_bytes() -> None:
    shipped = (PACKAGE / "library.lua").read_bytes()
    ours = scripts.library().encode("utf-8")
    assert hashlib.sha256(shipped).hexdigest() == hashlib.sha256(ours).hexdigest(), (
        "clients/typescript/library.lua differs from governor.scripts.library(): run `python scripts/ts_sync.py`"
    )
    assert shipped.startswith(f"#!lua name={scripts.library_name()}\n".encode())


def test_the_generated_facts_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ts_sync.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert f'LIBRARY_NAME = "{scripts.library_name()}"' in (PACKAGE / "src" / "generated.ts").read_text()
