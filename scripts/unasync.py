#!/usr/bin/env python3
"""Generate the sync facade from the asyncio one (the source of truth).

    python scripts/unasync.py          write governor/_sync/ from governor/_async/ (GENERATED: the facade,
                                       connection, lease, background, retry, transport, spend)
    python scripts/unasync.py --check  exit 1 if a checked-in file drifted

Every module of governor/_async/ is generated, except the hand-kept ones
(``HAND_KEPT``: each facade's own primitives); ``--check`` also fails on a
module that is neither, so a new one cannot be forgotten.

Token substitutions in the manner of encode/httpcore's unasync, plus one
pragma: a comment line ``# sync: <code>`` makes the sync file carry
``<code>`` (same indentation) instead of the line after the comment, for
the few places where the two differ in shape rather than in spelling.
The generated file is not run through the formatter.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASYNC, SYNC = ROOT / "governor/_async", ROOT / "governor/_sync"
#: the modules generated from their asyncio source
GENERATED = ("governor.py", "connection.py", "lease.py", "background.py", "retry.py", "transport.py", "spend.py")
#: the modules each facade keeps by hand
HAND_KEPT = ("__init__.py", "_compat.py")
PAIRS = [(ASYNC / name, SYNC / name) for name in GENERATED]

SUBS = [
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait ", ""),
    (r"\bAsyncGovernor\b", "Governor"),
    (r"\bAsyncLease\b", "Lease"),
    (r"\bAsyncSpend\b", "Spend"),
    (r"\bAsyncGovernedTransport\b", "GovernedTransport"),
    (r"\bAsyncHTTPTransport\b", "HTTPTransport"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\bhandle_async_request\b", "handle_request"),
    (r"\baread\b", "read"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\basyncio code\b", "threaded code"),
    (r"\bevent loop\b", "process"),
    (
        r"\(a task here, a thread in the\s*\n(\s*)sync facade\)",
        r"(a daemon thread here, a task in the\n\1asyncio facade)",
    ),
]
PRAGMA = re.compile(r"^(\s*)# sync: (.*)$")
HEADER = '''"""GENERATED from governor/_async/{name} by scripts/unasync.py; do not edit.

Change the asyncio source and run ``python scripts/unasync.py``.
"""
'''


def unasync(source: str, name: str) -> str:
    lines: list[str] = []
    swap: str | None = None
    for line in source.splitlines():
        match = PRAGMA.match(line)
        if match:
            swap = match.group(1) + match.group(2)
        elif swap is not None:
            lines.append(swap)
            swap = None
        else:
            lines.append(line)
    text = "\n".join(lines) + "\n"
    for pattern, replacement in SUBS:
        text = re.sub(pattern, replacement, text)
    # The module docstring is the sync file's own.
    if text.startswith('"""'):
        end = text.index('"""', 3) + 3
        text = HEADER.format(name=name) + "\n" + text[end:].lstrip("\n")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if a generated file is out of date")
    args = parser.parse_args()
    stale = []
    for folder in (ASYNC, SYNC):
        unlisted = sorted({path.name for path in folder.glob("*.py")} - {*GENERATED, *HAND_KEPT})
        if unlisted:
            where = folder.relative_to(ROOT)
            print(f"{where}: {', '.join(unlisted)} not in GENERATED or HAND_KEPT (scripts/unasync.py)", file=sys.stderr)
            return 1
    for source, target in PAIRS:
        expected = unasync(source.read_text(encoding="utf-8"), source.name)
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if args.check:
            if current != expected:
                stale.append(target)
                sys.stdout.writelines(
                    difflib.unified_diff(current.splitlines(True), expected.splitlines(True), str(target), "expected")
                )
        elif current != expected:
            target.write_text(expected, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(f"\n{len(stale)} generated file(s) out of date: run python scripts/unasync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
