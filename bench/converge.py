"""How a fleet's governors came down to a hidden limit, read from a swarm's results.

    python -m bench.converge OUT/swarm.json [--to 8]

For each strategy with a governor trace: the seconds from the provider's
first call until the governors' capacity was first at or below the target
(``--to``, default: the hidden limit at the start) and then stayed within
one of it for a window, and the provider's refusals (429s) up to that
moment. Samples come from the swarm's trace (``--sample-interval`` apart).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _rows(trace: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    part = trace.get(name) or {}
    columns = part.get("columns") or []
    return [dict(zip(columns, row, strict=True)) for row in part.get("rows") or []]


def convergence(trace: Mapping[str, Any], target: int, window: float) -> dict[str, Any] | None:
    """When capacity came down to ``target`` (from the first call), and the
    refusals before it; None when the trace has no governor or no call."""
    provider, governor = _rows(trace, "provider"), _rows(trace, "governor")
    first = next((row["t"] for row in provider if row["ok"] + row["limited"] > 0 or row["offered"] > 0), None)
    if first is None or not governor:
        return None
    out: dict[str, Any] = {"first_call": first, "seconds": None, "refusals": None, "held": False}
    for i, row in enumerate(governor):
        if row["capacity"] > target:
            continue
        later = [r["capacity"] for r in governor[i:] if r["t"] <= row["t"] + window]
        if all(abs(c - target) <= 1 for c in later):
            out["seconds"] = round(max(0.0, row["t"] - first), 2)
            out["refusals"] = max((r["limited"] for r in provider if r["t"] <= row["t"]), default=0)
            out["held"] = governor[-1]["t"] >= row["t"] + window
            return out
    return out


def report(data: Mapping[str, Any], target: int | None) -> list[str]:
    scenario = data.get("scenario") or {}
    window = float(scenario.get("window") or 1.0)
    limit = target if target is not None else int((data.get("provider") or {}).get("limit") or 0)
    lines = [f"target: capacity {limit}, held within one for a window ({window:g} s)"]
    for name, run in (data.get("strategies") or {}).items():
        found = convergence(run.get("trace") or {}, limit, window)
        if found is None:
            lines.append(f"{name}: no governor trace")
        elif found["seconds"] is None:
            lines.append(f"{name}: never at {limit} within the run")
        else:
            lines.append(
                f"{name}: {found['seconds']} s from the first call, {found['refusals']} 429s before it"
                + ("" if found["held"] else " (the run ended within a window of it)")
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.converge", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a swarm's swarm.json (its --out directory holds it)")
    parser.add_argument("--to", type=int, default=None, help="the capacity to come down to (default: the limit)")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"cannot read {args.results}: {error}; give the swarm.json of a `python -m bench swarm --out` run")
        return 2
    print("\n".join(report(data, args.to)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
