"""docs/protocol.md: its generated sections are what scripts/protocol_doc.py
writes from governor/protocol.py, governor/scripts.py and the Lua headers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from governor import protocol, scripts

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import protocol_doc  # noqa: E402


def test_the_committed_page_is_what_the_sources_generate() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "protocol_doc.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_a_changed_source_changes_the_page() -> None:
    page = protocol_doc.DOC.read_text(encoding="utf-8")
    stale = page.replace("`refused`", "`refused-by-an-old-version`", 1)
    assert protocol_doc.render(stale) == page


def test_the_page_names_every_function_reply_key_and_status_field() -> None:
    page = protocol_doc.DOC.read_text(encoding="utf-8")
    for op in scripts.OPERATIONS:
        assert f"### `{op}`" in page
    for kinds in protocol.REPLIES.values():
        for kind in kinds:
            assert f"`{kind}`" in page
    for name, _ in protocol.KEYS:
        assert f"{{N}}:{name}`" in page
    for field in protocol.STATUS_FIELDS:
        assert f"`{field}`" in page
    assert scripts.library_name() in page
    assert protocol.WAKE_CONFIG in page


def test_every_function_header_has_its_argv_and_reply_blocks() -> None:
    """The page is written from each header's ARGV and Reply blocks: a header
    that loses one would silently drop it from the page."""
    for op in scripts.OPERATIONS:
        parts = protocol_doc.blocks(protocol_doc.header(protocol_doc.LUA / f"{op}.lua"))
        assert "ARGV" in parts and "ARGV[1]" in parts["ARGV"], op
        assert "Reply" in parts, op
