#!/usr/bin/env python3
"""Write tests/conformance/calendar.json: where the Python client puts calendar spend windows.

    python tests/conformance/generate_calendar.py          write the vectors
    python tests/conformance/generate_calendar.py --check  exit 1 if the file differs

A client that keeps a calendar spend window (a day, an ISO week, a month)
in a named time zone must pass the spend function the boundaries the
Python client passes for the same window at the same instant
(governor.spend.Window: zoneinfo), or two clients of one fleet would count
one budget in different windows. The vectors are:

- ``windows``: a window's text (``kind@zone``), an instant (ms), and its
  label and four boundaries (the previous window's start, the current
  one's, the next one's, the one after), as ``Window.label`` and
  ``Window.boundaries`` give them: instants around daylight-saving changes
  (America/Los_Angeles, Europe/Paris, Australia/Lord_Howe's half hour,
  America/Santiago's change at midnight, America/Havana's repeated
  midnight: its first occurrence), ISO weeks across a new year,
  months, and seeded random instants in 2020-2035;
- ``invalid``: windows both refuse as a config error (unknown zones, and
  a zone's name in another case: zoneinfo reads names only as spelled).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from governor.errors import ConfigError  # noqa: E402
from governor.spend import Window  # noqa: E402

OUT = Path(__file__).resolve().parent / "calendar.json"

ZONES = (
    "UTC",
    "America/Los_Angeles",
    "Europe/Paris",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "America/St_Johns",
    "America/Havana",
    "US/Pacific",  # names zoneinfo and Intl both know under another canonical name
    "Etc/GMT+5",
    "EST5EDT",
)
KINDS = ("day", "week", "month")

#: instants (UTC) next to daylight-saving changes, new years and month ends
EDGES = (
    "2026-03-08T09:59:59",  # America/Los_Angeles: 01:59:59 PST, the last second before the change
    "2026-03-08T10:00:00",  # 03:00 PDT
    "2026-03-09T06:59:59",  # the day after, just before its end (23:59:59 PDT)
    "2026-11-01T08:30:00",  # 01:30 PDT, the first time
    "2026-11-01T09:30:00",  # 01:30 PST, the second time
    "2026-11-02T07:59:59",  # 23:59:59 PST
    "2026-03-29T00:59:59",  # Europe/Paris: 01:59:59 CET
    "2026-03-29T01:00:00",  # 03:00 CEST
    "2026-03-31T21:59:59",  # the last second of March in Paris
    "2026-03-31T22:00:00",  # the first of April
    "2026-10-25T00:30:00",  # 02:30 CEST
    "2026-10-25T01:30:00",  # 02:30 CET
    "2026-10-31T22:59:59",  # the last second of October in Paris
    "2026-09-06T03:59:59",  # America/Santiago: the last second before its midnight change
    "2026-09-06T04:00:00",  # 01:00 on a day with no midnight
    "2026-04-05T02:30:00",  # America/Santiago: 23:30, the first time
    "2026-04-05T03:30:00",  # 23:30, the second time
    "2026-10-03T15:30:00",  # Australia/Lord_Howe: its half-hour change
    "2026-11-01T04:30:00",  # America/Havana: 00:30 CDT, the first time (its midnight is repeated)
    "2026-11-01T12:00:00",  # the same day after its repeated hour
    "2026-12-27T23:59:59",  # a Sunday: ISO week 52
    "2026-12-28T00:00:00",  # a Monday: ISO week 53 of 2026
    "2027-01-01T00:00:00",  # a Friday in ISO week 53 of 2026
    "2027-01-04T00:00:00",  # ISO week 1 of 2027
    "2028-02-29T12:00:00",  # a leap day
)

INVALID = (
    "day@Mars/Olympus_Mons",
    "week@+01:00",
    "month@Europe/Nowhere",
    "day@../etc/passwd",
    "day@europe/paris",
    "week@utc",
)


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


def _row(zone: str, kind: str, now_ms: int) -> dict[str, Any]:
    window = Window.parse(f"{kind}@{zone}")
    return {
        "window": f"{kind}@{zone}",
        "now": now_ms,
        "label": window.label,
        "boundaries": list(window.boundaries(now_ms)),
    }


def vectors() -> dict[str, Any]:
    rows = [_row(zone, kind, _ms(edge)) for zone in ZONES for kind in KINDS for edge in EDGES]
    rng = random.Random(20260308)
    low, high = _ms("2020-01-01T00:00:00"), _ms("2035-12-31T23:59:59")
    rows += [_row(rng.choice(ZONES), rng.choice(KINDS), rng.randrange(low, high)) for _ in range(200)]
    invalid = []
    for text in INVALID:
        try:
            Window.parse(text)
        except ConfigError:
            invalid.append(text)
        else:
            raise SystemExit(f"{text} was accepted: only windows both clients refuse belong in invalid")
    return {"windows": rows, "invalid": invalid}


def text() -> str:
    data = vectors()
    rows = [f"  {json.dumps(row, separators=(',', ':'))}" for row in data["windows"]]
    return '{\n "windows": [\n' + ",\n".join(rows) + f'\n ],\n "invalid": {json.dumps(data["invalid"])}\n}}\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what would be written")
    args = parser.parse_args()
    fresh = text()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != fresh:
            print(f"{OUT} is stale: run python tests/conformance/generate_calendar.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
