"""What an operation's Lua does, step by step, read from its source: the
stored fields each step reads, the checks it makes (what may fail it) and
whether it writes; and the operations' declared plans (PLANS of
lua/lib/plans.lua), read from that file. tests/test_read_plans.py holds
the one against the other."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

LUA = Path(__file__).resolve().parent.parent.parent / "lua"
#: a step's marker: a top-level line of the operation (scripts/report_stages.py cuts there too)
MARKER = re.compile(r"^-- step: (.+)$", re.M)
#: the code before an operation's first marker
FIRST = "the arguments"
#: the calls that read stored fields, named by the field read (their arguments say which)
READERS = ("load", "read_more", "read_more_list")
#: the calls that may fail a call (an argument, a stored value, a key's type) and read what they need
CHECKS = frozenset({
    "fail", "arg_int", "arg_in", "arg_id", "arg_label", "arg_tokens", "arg_place", "parse_config",
    "load_all", "prepare", "the_policy", "check_all", "check_types", "check_type", "guard", "guard_grant",
    "keep_alive", "window", "caps_config", "active_budgets", "no_news", "read_all", "touch_all", "clock",
    "oversize", "spend_amounts", "spend_budgets", "spend_window",
})  # fmt: skip
#: the Redis commands that write
WRITING = frozenset({"HSET", "HSETNX", "HDEL", "HINCRBY", "ZADD", "ZREM", "ZREMRANGEBYSCORE", "XADD", "DEL",
                     "PUBLISH", "PEXPIRE"})  # fmt: skip
#: the library's calls that write (set() changes the call's copy, written by finish())
WRITES = frozenset({
    "reclaim", "grant", "save", "enqueue", "add_lease", "record", "settle", "calibrate", "refused", "log",
    "finish", "held_remove", "held_add", "recover", "pause", "resume", "apply_config", "clear_learnt", "recount",
    "set", "created", "lost", "reborn",
})  # fmt: skip
#: calls that may fail only on what an earlier check checked (status_reply: a status field load_all read)
NOTHING_NEW = frozenset({"status_reply"})


@dataclass
class Step:
    """One step as its code does it: ``events`` in order, each ("read",
    "<hash>.<field>" or "<hash>:<expression>"), ("check", name), ("write",
    name) or ("return", "")."""

    name: str
    events: list[tuple[str, str]] = field(default_factory=list)

    @property
    def reads(self) -> set[str]:
        return {what for kind, what in self.events if kind == "read"}

    @property
    def checks(self) -> set[str]:
        return {what for kind, what in self.events if kind == "check"}

    @property
    def writes(self) -> bool:
        return any(kind == "write" for kind, _ in self.events)


#: a top-level local function of an operation: run where it is called, not where it is defined
LOCAL_FUNCTION = re.compile(r"^local function (\w+)\([^)]*\)\n(.*?)^end\n", re.S | re.M)


def _code(text: str) -> str:
    """Lua without its comments."""
    text = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S)
    return re.sub(r"--[^\n]*", "", text)


def _arguments(text: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose "(" is at ``start``, and where it ends."""
    depth, parts, current, i = 0, [], "", start
    while i < len(text):
        c = text[i]
        if c == "'":
            end = text.index("'", i + 1)
            current += text[i : end + 1]
            i = end + 1
            continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                parts.append(current.strip())
                return [p for p in parts if p], i
        elif c == "," and depth == 1:
            parts.append(current.strip())
            current = ""
            i += 1
            continue
        current += c
        i += 1
    raise ValueError("unbalanced call")


def _field(hash_name: str, argument: str) -> str:
    literal = re.fullmatch(r"'(\w+)'", argument)
    if literal:
        return f"{hash_name}.{literal.group(1)}"
    expression = " ".join(argument.replace("'", "").split())  # (quotes dropped: the plan's is a Lua string)
    return f"{hash_name}:{expression}"


def events(code: str, local: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """What ``code`` (an operation's step, comments dropped) does, in order;
    a call of one of ``local`` (the operation's own functions, by what each
    does: "write" or "check") as what it does."""
    local = local or {}
    out: list[tuple[str, str]] = []
    for match in re.finditer(r"redis\.p?call\(\s*'(\w+)'|(?<![.\w])(\w+)\s*\(|(?<![.\w])(return)\b", code):
        command, name = match.group(1), match.group(2)
        if match.group(3):
            out.append(("return", ""))
        elif command:
            if command.upper() in WRITING:
                out.append(("write", command.upper()))
        elif name in READERS:
            arguments, _ = _arguments(code, match.end() - 1)
            if name == "load" and re.fullmatch(r"\{\s*'\w+'(\s*,\s*'\w+')*\s*\}", arguments[0]):
                out += [("read", f"state.{f}") for f in re.findall(r"'(\w+)'", arguments[0])]  # a literal list
            elif name == "load":
                out.append(("read", _field("state", arguments[0])))
            elif name == "read_more_list":
                out.append(("read", _field(arguments[0].strip("'"), arguments[1])))
            else:
                out += [("read", _field(arguments[0].strip("'"), a)) for a in arguments[1:]]
        elif name in local:
            out.append((local[name], name))
        elif name in CHECKS:
            out.append(("check", name))
        elif name in WRITES:
            out.append(("write", name))
    return out


def steps(operation: str, text: str | None = None) -> list[Step]:
    """The steps of ``operation`` (or of ``text``, its source), as its code does them."""
    if text is None:
        text = (LUA / f"{operation}.lua").read_text(encoding="utf-8")
    body = re.sub(r"\A--\[\[.*?\]\]", "", text, flags=re.S)
    local: dict[str, str] = {}
    for name, inner in LOCAL_FUNCTION.findall(_code(body)):
        kinds = {kind for kind, _ in events(inner, local)}
        local[name] = "write" if "write" in kinds else "check" if kinds & {"check", "read"} else "none"
    body = LOCAL_FUNCTION.sub("", body)
    marks = list(MARKER.finditer(body))
    names = [FIRST] + [m.group(1) for m in marks]
    cuts = [0] + [m.start() for m in marks] + [len(body)]
    found = [Step(names[i], events(_code(body[cuts[i] : cuts[i + 1]]), local)) for i in range(len(names))]
    for step in found:
        step.events = [(kind, what) for kind, what in step.events if kind != "none"]
    return found


@dataclass
class Plan:
    """One step as PLANS declares it."""

    name: str
    reads: set[str]
    checks: set[str]
    writes: str  # "", "true", "ends" or "witnessed"
    again: set[str]


def _items(text: str) -> list[str]:
    return [a or b for a, b in re.findall(r"'([^']*)'|\"([^\"]*)\"", text)]


def _entries(text: str) -> list[str]:
    """The top-level {...} entries of a Lua table's body."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                out.append(text[start + 1 : i])
    return out


def plans(text: str | None = None) -> dict[str, list[Plan]]:
    """PLANS of lua/lib/plans.lua (or of ``text``, its source), by operation."""
    if text is None:
        text = (LUA / "lib" / "plans.lua").read_text(encoding="utf-8")
    body = re.search(r"^local PLANS = \{\n(.*?)^\}", text, re.S | re.M)
    if body is None:
        raise ValueError("lua/lib/plans.lua declares no PLANS table")
    out: dict[str, list[Plan]] = {}
    for operation, steps_text in re.findall(r"^  \['(\w+)'\] = \{\n(.*?)^  \},?$", body.group(1), re.S | re.M):
        declared = []
        for entry in _entries(steps_text):
            code = re.sub(r"--[^\n]*", "", entry)
            lists = {key: _items(value) for key, value in re.findall(r"(\w+) = \{([^{}]*)\}", code)}
            writes = re.search(r"writes = (true|'ends'|'witnessed')", code)
            declared.append(
                Plan(
                    name=_items(code)[0],
                    reads=set(lists.get("reads", [])),
                    checks=set(lists.get("checks", [])),
                    writes=writes.group(1).strip("'") if writes else "",
                    again=set(lists.get("again", [])),
                )
            )
        out[operation] = declared
    return out


def may_fail() -> set[str]:
    """The library's functions (lua/lib) that may fail a call: those that
    call fail(), and those that call one of them."""
    bodies: dict[str, str] = {}
    for path in sorted((LUA / "lib").glob("*.lua")):
        code = _code(path.read_text(encoding="utf-8"))
        for pattern in (r"^local function (\w+)\([^)]*\)\n(.*?)^end\b", r"^  (\w+) = function\([^)]*\)\n(.*?)^  end\b"):
            bodies.update(re.findall(pattern, code, re.S | re.M))
    failing, grown = {"fail"}, True
    while grown:
        grown = False
        for name, body in bodies.items():
            if name not in failing and set(re.findall(r"(?<![.\w])(\w+)\s*\(", body)) & failing:
                failing.add(name)
                grown = True
    return failing
