#!/usr/bin/env python3
"""Where one counted phase's server instructions go, by C function.

    python scripts/callgrind_functions.py FOLDER LABEL [--calls 200] [--top 40] [--callees FUNCTION ...]

FOLDER holds the callgrind dumps of one counted server
(``bench.instructions.counted_server``: copy ``counter.folder`` inside
its block, it is removed after), LABEL the phase (``counter.count``'s
label). Prints each function's own instructions per call, the most first,
and for each ``--callees`` function what it calls and from where (for
example ``luaRedisGenericCommand``: every ``redis.call``). Needs a
``redis-server`` with symbols (docs/development.md); callgrind names a
function once per run, in the dump that first meets it, so all the
folder's dumps are read for the names.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

NAME = re.compile(r"^c?fn=\((\d+)\) (.+)$")
ID = re.compile(r"^(c?fn)=(?:\((\d+)\))? ?(.*)$")


def names(folder: Path) -> dict[str, str]:
    """Function id -> name, over every dump of the run."""
    out: dict[str, str] = {}
    for dump in folder.glob("callgrind.*"):
        for line in dump.read_text(errors="replace").splitlines():
            match = NAME.match(line)
            if match:
                out[match.group(1)] = match.group(2)
    return out


def dump_of(folder: Path, label: str) -> Path:
    for dump in sorted(folder.glob("callgrind.*")):
        head = dump.read_text(errors="replace")[:4000]
        if re.search(rf"^desc: Trigger: .*dump {re.escape(label)}\s*$", head, re.M):
            return dump
    raise SystemExit(f"no dump labelled {label!r} in {folder}")


def costs(dump: Path, named: dict[str, str]) -> tuple[Counter[str], dict[str, Counter[str]], Counter[tuple[str, str]]]:
    """(own instructions by function, callee -> inclusive instructions by
    caller, (caller, callee) -> calls) of one dump."""
    own: Counter[str] = Counter()
    callees: dict[str, Counter[str]] = defaultdict(Counter)
    calls: Counter[tuple[str, str]] = Counter()
    function = callee = ""
    pending = None  # the calls made when the next cost line is a call's (inclusive; 0: one still running)
    for line in dump.read_text(errors="replace").splitlines():
        match = ID.match(line)
        if match:
            name = match.group(3) or named.get(match.group(2), match.group(2))
            if match.group(1) == "fn":
                function = name
            else:
                callee = name
            continue
        if line.startswith("calls="):
            pending = int(line[6:].split()[0])
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) < 2:
                continue
            if pending is not None:
                callees[function][callee] += int(parts[1])
                calls[(function, callee)] += pending
                pending = None
            else:
                own[function] += int(parts[1])
    return own, callees, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("label")
    parser.add_argument("--calls", type=int, default=200, help="repetitions the phase counted")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--callees", nargs="*", default=[], metavar="FUNCTION")
    options = parser.parse_args()
    own, callees, calls = costs(dump_of(options.folder, options.label), names(options.folder))
    per = options.calls
    print(f"{options.label}: {sum(own.values()) / per:,.0f} instructions a call; each function's own:")
    for function, count in own.most_common(options.top):
        print(f"  {count / per:12,.0f}  {function}")
    for function in options.callees:
        print(f"{function}: its own {own[function] / per:,.0f}; what it calls (inclusive, times a call):")
        for callee, count in callees[function].most_common(options.top):
            print(f"  {count / per:12,.0f}  {callee} (x{calls[(function, callee)] / per:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
