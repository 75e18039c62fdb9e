#!/usr/bin/env python3
"""Fill the generated sections of docs/protocol.md from the sources.

    python scripts/protocol_doc.py          rewrite every generated section
    python scripts/protocol_doc.py --check  exit 1 if one differs from the sources

The page's prose is kept by hand; each section between
``<!-- BEGIN generated:NAME -->`` and ``<!-- END generated:NAME -->`` is
written here from the module that owns the fact: governor/protocol.py
(keys, stored fields and their kinds, the holder record, replies, status
fields, wake words, outcomes), governor/scripts.py (the library's name,
its functions and their flags), governor/config.py (the client's timing
defaults) and the header comment of each Lua file (lua/<op>.lua: its
ARGV and replies; lua/lib/common.lua: the KEYS, the common ARGV and the
error replies). A change to any of them changes the page on the next run;
``tests/test_protocol_doc.py`` fails while the committed page differs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from governor import policies, protocol, scripts  # noqa: E402
from governor.config import GovernorConfig  # noqa: E402

DOC = ROOT / "docs" / "protocol.md"
LUA = ROOT / "lua"
BEGIN = "<!-- BEGIN generated:{} -->"
END = "<!-- END generated:{} -->"
SECTION = re.compile(r"<!-- BEGIN generated:(?P<name>[a-z_]+) -->\n.*?<!-- END generated:(?P=name) -->", re.S)


def header(path: Path) -> str:
    """The leading ``--[[ ... ]]`` comment of a Lua file."""
    text = path.read_text(encoding="utf-8")
    match = re.match(r"\s*--\[\[(.*?)\]\]", text, re.S)
    if match is None:
        raise SystemExit(f"{path.relative_to(ROOT)} has no --[[ header ]]: the protocol page is written from it")
    return match.group(1).strip("\n")


def blocks(text: str) -> dict[str, str]:
    """A header's labelled blocks: a line starting with KEYS, ARGV, Reply,
    Replies, Uses or Error replies opens one; indented lines continue it;
    any other line ends it."""
    out: dict[str, str] = {}
    label: str | None = None
    body: list[str] = []
    for line in [*text.splitlines(), ""]:
        word = re.match(r"^(KEYS|ARGV|Reply|Replies|Uses|Error replies)\b", line)
        if label is not None and line.startswith(" ") and not word:
            body.append(line)
            continue
        if label is not None:
            out[label] = "\n".join(body).rstrip()
        label, body = (word.group(1), [line]) if word else (None, [])
    return out


def prose(text: str) -> str:
    """A header's first paragraph after its title line, unwrapped."""
    lines = text.splitlines()
    title = lines[0].split(":", 1)[1].strip() if ":" in lines[0] else lines[0].strip()
    title = title.rstrip(".")
    return title[:1].upper() + title[1:]


def fence(text: str) -> str:
    return f"```text\n{text}\n```"


def _kind(kind: protocol.Kind) -> str:
    if kind.type == "str":
        if kind.values:
            shown = ", ".join(f"`{v}`" if v else "`''`" for v in kind.values[:6])
            more = f" (and {len(kind.values) - 6} more)" if len(kind.values) > 6 else ""
            return f"string, one of {shown}{more}"
        return "string"
    low = int(kind.low) if float(kind.low).is_integer() else kind.low
    high = int(kind.high) if float(kind.high).is_integer() else kind.high
    names = {protocol.MAX_INT: "2^53", -protocol.MAX_INT: "-2^53"}
    return f"{'integer' if kind.type == 'int' else 'number'} in [{names.get(low, low)}, {names.get(high, high)}]"


def _comments(source: str) -> dict[str, str]:
    """`"name": KIND,  #: comment` lines of governor/protocol.py: field -> comment."""
    out = {}
    for match in re.finditer(r'^\s+"([a-z_]+)": [^\n]*?#: ([^\n]+)$', source, re.M):
        out[match.group(1)] = match.group(2).strip()
    return out


def section_keys() -> str:
    described = {}
    for line in (protocol.__doc__ or "").splitlines():
        match = re.match(r"\s+\S+:v\d+:\{N\}:(\w+)\s+(\w+)\s+(.+)$", line)
        if match:
            described[match.group(1)] = match.group(3).strip()
    rows = ["| key | Redis type | holds |", "|---|---|---|"]
    sample = protocol.governor_keys("N")
    for name, kind in protocol.KEYS:
        rows.append(f"| `{getattr(sample, name)}` | {kind} | {described.get(name, '')} |")
    rows.append("")
    rows.append(
        f"The pub/sub channel (not a key): `{sample.channel}`. `N` is the governor's name "
        f"(1-200 of `A-Za-z0-9_.:-/@`, no braces); `{protocol.DEFAULT_PREFIX}` is the default key "
        f"prefix (GovernorConfig.key_prefix); `v{protocol.SCHEMA_VERSION}` is the schema version. "
        f"On a standalone Redis a function takes one key, the state key (`{sample.state}`), and the "
        "library derives the others from it: each is the state key with `state` replaced by its name. "
        f"On a Redis Cluster it takes all {len(protocol.KEYS)}, in this order, so that a call on a migrating "
        "slot is refused (`TRYAGAIN`, `ASK`) before it runs; given the state key alone there, the library "
        f"answers `{scripts.EVERY_KEY}` and nothing runs: send the call again with every key."
    )
    return "\n".join(rows)


def section_common() -> str:
    common = blocks(header(LUA / "lib" / "common.lua"))
    return "\n\n".join(fence(common[label]) for label in ("ARGV", "Replies", "Error replies") if label in common)


def section_library() -> str:
    rows = [
        f"- Library name: `{scripts.library_name()}` (`governor_v<schema>_<first 12 hex of the source's sha1>`); "
        f"a function is called as `FCALL {scripts.library_name()}_<operation> 1 <state key> <argv...>` "
        f"(`GovernorKeys.script_keys`), on a cluster `FCALL ... {len(protocol.KEYS)} <every key> <argv...>`.",
        f"- Functions ({len(scripts.OPERATIONS)}): "
        + ", ".join(f"`{op}`" + (" (no-writes)" if op in scripts.READ_ONLY else "") for op in scripts.OPERATIONS)
        + ".",
        f"- A Redis without the library answers an error containing `{scripts.MISSING_FUNCTION}`: load it with "
        "`FUNCTION LOAD REPLACE <library text>` (on every primary of a cluster), then send the call again, once.",
        "- The library text is `governor.scripts.library()`; the Node package ships the same bytes "
        "(`clients/typescript/library.lua`).",
    ]
    return "\n".join(rows)


def section_functions() -> str:
    out = [
        f"Each function's header, as its Lua file states it. A reply written `{{SCHEMA, 'kind', ...}}` there is "
        f"the array `[{protocol.SCHEMA_VERSION}, 'kind', ...]`: its first element is the schema version "
        f"(`SCHEMA_VERSION`, {protocol.SCHEMA_VERSION}).\n"
    ]
    for op in scripts.OPERATIONS:
        text = header(LUA / f"{op}.lua")
        parts = blocks(text)
        flags = " (registered `no-writes`)" if op in scripts.READ_ONLY else ""
        replies = ", ".join(f"`{r}`" for r in protocol.REPLIES[op])
        out.append(f"### `{op}`{flags}\n")
        out.append(f"{prose(text)}. Reply kinds: {replies}.\n")
        if "ARGV" in parts:
            out.append(fence(parts["ARGV"]) + "\n")
        if "Reply" in parts:
            out.append(fence(parts["Reply"]) + "\n")
        rest = re.sub(r"^.*?\n", "", text, count=1)
        for label in ("Uses", "KEYS", "ARGV", "Reply"):
            if label in parts:
                rest = rest.replace(parts[label], "")
        rest = re.sub(r"\n{3,}", "\n\n", rest).strip()
        if rest:
            out.append("<details><summary>the header's notes</summary>\n\n" + fence(rest) + "\n\n</details>\n")
    return "\n".join(out).rstrip()


def section_replies() -> str:
    rows = ["| function | reply kinds (the second element) |", "|---|---|"]
    for op, kinds in protocol.REPLIES.items():
        rows.append(f"| `{op}` | {', '.join(f'`{k}`' for k in kinds)} |")
    rows.append("")
    rows.append(
        "A status reply (`status`, `probe`, `set_max`, `set_shares`, `pause`, `resume`, `reset`) is "
        "`[schema, 'status', name1, value1, ...]` with these names, in this order: "
        + ", ".join(f"`{f}`" for f in protocol.STATUS_FIELDS)
        + " (`budgets` is a nested array: one entry per active budget kind)."
    )
    return "\n".join(rows)


def section_fields() -> str:
    source = (ROOT / "governor" / "protocol.py").read_text(encoding="utf-8")
    notes = _comments(source)
    out = []
    for hash_name, fields in policies.fields().items():
        out.append(f"**`{hash_name}`** ({len(fields)} fields)\n")
        out.append("| field | kind | meaning |")
        out.append("|---|---|---|")
        for name, kind in fields.items():
            out.append(f"| `{name}` | {_kind(kind)} | {notes.get(name, '')} |")
        out.append("")
    return "\n".join(out).rstrip()


def section_holder() -> str:
    doc = " ".join((protocol.HolderRecord.__doc__ or "").split()).replace("``", "`")
    example = protocol.HolderRecord(1765000000123, 30000, 1765000000, 120, 400, 3, 1, "default", "host-1/4242")
    return f"{doc}\n\nExample: `{example.format()}`. A waiter's record has fence 0 and level 0."


def section_wake() -> str:
    return "\n".join(
        [
            "A message is words separated by single spaces; the first is the epoch of the state that sent it.",
            "",
            "| message | meaning | a client does |",
            "|---|---|---|",
            "| `<epoch>` alone | a new state was created (init) | renew every lease it holds now: "
            "a lease of another epoch is adopted (new fence) |",
            "| `<epoch> <id>:<fence> ...` | each waiter `id` was granted, with that fence | wake the waiter: "
            "it holds the lease (its deadline: the time it last sent a request that found it queued + lease TTL) |",
            f"| `<epoch> {protocol.WAKE_RETRY}<ms>` | a hold or timed pause keeps queued callers out for ms | "
            "refresh its waiters after ms (+1) |",
            f"| `<epoch> {protocol.WAKE_CONFIG}` | an operator changed the stored config | read the `config` "
            "hash again (HGETALL): the classes, weights and the config a lost state is re-created from |",
            f"| `<epoch> {protocol.WAKE_TTL}<ms>` | a client announced a lease TTL longer than any before (ttl_max) "
            "| remember it: a lost state it re-creates holds that long |",
            "",
            "Words of one message may mix grants; a client ignores a word it does not know.",
        ]
    )


def section_outcomes() -> str:
    rows = ["| code | outcome |", "|---|---|"]
    for outcome in protocol.Outcome:
        rows.append(f"| `{outcome.value}` | {outcome.name.lower()} |")
    return "\n".join(rows)


def section_timing() -> str:
    c = GovernorConfig()
    return "\n".join(
        [
            "| duty | when | default |",
            "|---|---|---|",
            f"| heartbeat: `renew` every held lease (one call, batches of 500) | every `lease_ttl / 3` | "
            f"{c.lease_ttl / 3:g} s (`lease_ttl` {c.lease_ttl:g} s) |",
            f"| `refresh` this process's queued waiters (one call) | every `poll`, sooner on a `@ms` wake or a "
            f"refresh's `hint_ms` | {c.poll:g} s |",
            f"| a waiter's place lives unrefreshed | `queue_ttl` (ARGV `queue_ttl_ms`) | {c.queue_ttl:g} s |",
            "| `renew` at once | on (re)connecting to Redis, on a wake with a new epoch, after `init` answered "
            "`created` while holding leases | |",
            f"| a lease is assumed lost | no renewal got through for `lease_ttl` | {c.lease_ttl:g} s |",
        ]
    )


def section_config() -> str:
    from governor.policies import REGISTRY

    c = GovernorConfig()
    pairs = c.script_fields()
    rows = [
        "The pairs a client with the default config sends (`GovernorConfig().script_fields()`):",
        "",
        "```text",
        *(f"{k} {v!r}" if v == "" else f"{k} {v}" for k, v in zip(pairs[::2], pairs[1::2], strict=True)),
        "```",
        "",
        "| policy | its fields and defaults (window 60 s) | durations that follow the window |",
        "|---|---|---|",
    ]
    for name, cls in REGISTRY.items():
        fields = cls().script_fields(window=c.window)
        shown = ", ".join(f"`{k}={v}`" for k, v in fields.items()) or "none"
        follows = ", ".join(
            f"`{cls.stored[a][0]}` = {share:g} x `window_ms`" for a, share in cls.follows_window.items()
        )
        rows.append(f"| `{name}` | {shown} | {follows or 'none'} |")
    return "\n".join(rows)


SECTIONS = {
    "config": section_config,
    "keys": section_keys,
    "common": section_common,
    "library": section_library,
    "functions": section_functions,
    "replies": section_replies,
    "fields": section_fields,
    "holder": section_holder,
    "wake": section_wake,
    "outcomes": section_outcomes,
    "timing": section_timing,
}


def render(page: str) -> str:
    """``page`` with every generated section written anew."""
    found = {m.group("name") for m in SECTION.finditer(page)}
    missing = set(SECTIONS) - found
    if missing:
        raise SystemExit(f"docs/protocol.md lacks the generated sections {sorted(missing)}")

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SECTIONS:
            raise SystemExit(f"docs/protocol.md names an unknown generated section {name!r}")
        return f"{BEGIN.format(name)}\n{SECTIONS[name]()}\n{END.format(name)}"

    return SECTION.sub(fill, page)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from the sources")
    args = parser.parse_args()
    page = DOC.read_text(encoding="utf-8")
    fresh = render(page)
    if fresh == page:
        return 0
    if args.check:
        print("docs/protocol.md differs from the sources: run `python scripts/protocol_doc.py`", file=sys.stderr)
        return 1
    DOC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
