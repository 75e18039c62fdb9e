#!/usr/bin/env python3
"""Write tests/conformance/prices.json: what the Python client charges, for the other clients to match.

    python tests/conformance/generate_prices.py          write the vectors
    python tests/conformance/generate_prices.py --check  exit 1 if the file differs

A client that prices calls must charge, for the same usage at the same
price, the micro-dollars the Python client charges (governor.prices:
exact decimal arithmetic, one rounding up). The vectors are:

- ``prices``: a user's own price map (invented figures chosen for their
  digits: long fractions, exponents, whole numbers), as
  ``governor.prices.Price`` takes it;
- ``charges``: a usage, a model and a tier, and the micro-dollars charged
  (seeded random usages up to 2^40 tokens, and hand-picked edges);
- ``most``: the most a call of so many tokens in and out can cost (what a
  reservation takes);
- ``unknown``: lookups the book refuses (UnknownPrice): a model or tier it
  has no price for;
- ``invalid_prices`` and ``invalid_usages``: what both refuse as a config error;
- ``tier_names``: a provider's name of a tier -> the tier (null: none).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from governor.errors import ConfigError  # noqa: E402
from governor.prices import TIERS, Price, PriceBook, UnknownPrice, Usage  # noqa: E402
from governor.profiles import tier_name  # noqa: E402

OUT = Path(__file__).resolve().parent / "prices.json"

#: invented prices (USD per million tokens), none of them a provider's
PRICES: list[dict[str, Any]] = [
    {"provider": "openai", "model": "house-model", "input": "1.25", "output": "10", "cache_read": "0.125"},
    {"provider": "openai", "model": "house-model", "tier": "flex", "input": "0.625", "output": "5"},
    {"provider": "openai", "model": "house-model", "tier": "priority", "input": "2.5", "output": "20"},
    {"provider": "openai", "model": "house-model", "tier": "ultrafast", "input": "7.3333333333", "output": "41.7"},
    {
        "provider": "anthropic",
        "model": "house-opus",
        "input": 5,
        "output": 25,
        "cache_read": "0.5",
        "cache_write": "6.25",
    },
    {"provider": "anthropic", "model": "house-opus", "tier": "fast", "input": 30, "output": 150},
    {"provider": "anthropic", "model": "house-opus", "tier": "batch", "input": "2.5", "output": "12.5"},
    {"provider": "gemini", "model": "house-flash", "input": "0.0375", "output": "0.15", "cache_read": "0.009375"},
    {"provider": "gemini", "model": "house-flash", "tier": "priority", "input": "1e-1", "output": "6E-1"},
    {"provider": "bedrock", "model": "house.titan-v1:0", "input": "0.000001", "output": "0.0000003"},
    {"provider": "bedrock", "model": "house.free-v1:0", "input": 0, "output": 0},
]

UNKNOWN = [
    {"provider": "openai", "model": "house-model", "tier": "batch"},
    {"provider": "openai", "model": "another-model", "tier": "standard"},
    {"provider": "anthropic", "model": "house-opus", "tier": "priority"},
    {"provider": "azure", "model": "house-model", "tier": "standard"},
]

INVALID_PRICES: list[dict[str, Any]] = [
    {"provider": "openai", "model": "m", "input": -1, "output": 1},
    {"provider": "openai", "model": "m", "input": "-0.5", "output": 1},
    {"provider": "openai", "model": "m", "input": "abc", "output": 1},
    {"provider": "openai", "model": "m", "input": "NaN", "output": 1},
    {"provider": "openai", "model": "m", "input": "Infinity", "output": 1},
    {"provider": "openai", "model": "m", "input": 1, "output": True},
    {"provider": "openai", "model": "m", "input": 1, "output": 1, "cache_write": "-2"},
    {"provider": "openai", "model": "m", "input": 1, "output": 1, "tier": "turbo"},
    {"provider": "", "model": "m", "input": 1, "output": 1},
    {"provider": "openai", "model": " ", "input": 1, "output": 1},
]

INVALID_USAGES: list[dict[str, Any]] = [
    {"input_tokens": -1},
    {"output_tokens": 1.5},
    {"cache_read_tokens": True},
    {"input_tokens": 2**54},
    {"input_tokens": 10, "cache_read_tokens": 6, "cache_write_tokens": 5},
]

TIER_NAMES = [
    "default", "auto", "standard", "standard_only", "on_demand", "STANDARD", "flex", "priority", "fast",
    "ultrafast", "batch", "SERVICE_TIER_FLEX", "service_tier_priority", " Priority ", "scale", "reserved", "", None, 3,
]  # fmt: skip


def _usage(rng: random.Random, top: int) -> dict[str, int]:
    total = rng.randint(0, top)
    read = rng.randint(0, total)
    write = rng.randint(0, total - read)
    return {
        "input_tokens": total,
        "output_tokens": rng.randint(0, top),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
    }


def charges(book: PriceBook) -> list[dict[str, Any]]:
    rng = random.Random(41)
    edges = [
        {},
        {"input_tokens": 1},
        {"output_tokens": 1},
        {"input_tokens": 3, "cache_read_tokens": 3},
        {"input_tokens": 3, "cache_write_tokens": 3},
        {"input_tokens": 999_999, "output_tokens": 1},
        {"input_tokens": 1_000_001},
        {"input_tokens": 2**40, "output_tokens": 2**40, "cache_read_tokens": 2**39, "cache_write_tokens": 2**38},
    ]
    out = []
    for figures in PRICES:
        tier = figures.get("tier", "standard")
        usages = edges + [_usage(rng, 10 ** rng.randint(1, 12)) for _ in range(12)]
        for usage in usages:
            micros = book.cost(figures["provider"], figures["model"], Usage(**usage), tier)
            out.append(
                {
                    "provider": figures["provider"],
                    "model": figures["model"],
                    "tier": tier,
                    "usage": usage,
                    "micros": micros,
                }
            )
    return out


def vectors() -> dict[str, Any]:
    book = PriceBook([Price(**figures) for figures in PRICES], table=False)
    for lookup in UNKNOWN:
        try:
            book.check(lookup["provider"], lookup["model"], lookup["tier"])
        except UnknownPrice:
            continue
        raise AssertionError(f"{lookup} was priced")
    for figures in INVALID_PRICES:
        try:
            Price(**figures)
        except ConfigError:
            continue
        raise AssertionError(f"{figures} was taken")
    for fields in INVALID_USAGES:
        try:
            Usage(**fields)
        except ConfigError:
            continue
        raise AssertionError(f"{fields} was taken")
    rng = random.Random(42)
    most = [
        {
            "provider": figures["provider"],
            "model": figures["model"],
            "tier": figures.get("tier", "standard"),
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "micros": book.most(figures["provider"], figures["model"], *tokens, figures.get("tier", "standard")),
        }
        for figures in PRICES
        for tokens in ((0, 0), (1, 0), (rng.randint(0, 10**6), rng.randint(0, 10**5)))
    ]
    return {
        "about": "governor.prices: micro-dollars charged for a usage at a price (tests/conformance/generate_prices.py)",
        "tiers": list(TIERS),
        "tier_names": [[name, tier_name(name)] for name in TIER_NAMES],
        "prices": PRICES,
        "charges": charges(book),
        "most": most,
        "unknown": UNKNOWN,
        "invalid_prices": INVALID_PRICES,
        "invalid_usages": INVALID_USAGES,
    }


def text() -> str:
    data = vectors()
    lines = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
            rows = [f"  {json.dumps(row, separators=(',', ':'))}" for row in value]
            lines.append(f" {json.dumps(key)}: [\n" + ",\n".join(rows) + f"\n ]{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what would be written")
    args = parser.parse_args()
    fresh = text()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != fresh:
            print(f"{OUT} is stale: run python tests/conformance/generate_prices.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
