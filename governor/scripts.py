"""The script registry: the Lua of lua/, as one Redis Functions library.

The library is, in order: the field table generated from
:mod:`governor.protocol` and :mod:`governor.policies` (every stored field's
kind), ``lua/lib/common.lua``, the fragments of ``lua/lib/`` (FRAGMENTS),
then each operation ``lua/<name>.lua`` as a function registered under
:func:`function_name`. Each fragment and each operation is a scope of its
own (:func:`parts`): its names stay out of the main chunk, which Lua 5.1
allows 200 locals, and it sees another fragment's names only when its
"Uses" line names that fragment (:func:`imports`). Redis runs a library's top level once, when it is
loaded, so the tables and helper functions every operation shares are
built once, not on every call (as an ``EVALSHA`` script's would be); a
call pays for its own work only. The files ship inside the wheel
(``governor/lua``) and are read once per process.

The library's name carries a hash of its source, so clients of another
version keep their own library beside this one. A facade loads it
(``FUNCTION LOAD REPLACE``) when Redis answers that a function is missing
(a Redis that never had it, a restart without persistence, a ``FUNCTION
FLUSH``, a new cluster node), then calls again, as ``register_script``
does on ``NOSCRIPT``; a process whose Redis has it loads nothing (a load
costs Redis a compile of the whole library).

The read-only operations are registered with ``flags={'no-writes'}``; the
others without, so a Redis out of memory refuses them before they run
instead of failing them at their first write.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from . import policies, protocol
from .budgets import KIND_TIER, TIERS_APART, Tokens
from .budgets import KINDS as BUDGET_KINDS

OPERATIONS: tuple[str, ...] = (
    "acquire",
    "cancel",
    "init",
    "pause",
    "probe",
    "refresh",
    "release",
    "renew",
    "report",
    "reset",
    "resume",
    "set_max",
    "set_shares",
    "spend",
    "status",
)
#: operations that never write: Redis runs them when out of memory, and on replicas
READ_ONLY: frozenset[str] = frozenset({"status"})
COMMON = "common"
#: the fragments of lua/lib/, one per concern and each a scope of its own, in the order the library
#: includes them: each after common and the fragments its "Uses" line names (tests/test_protocol.py checks both)
FRAGMENTS: tuple[str, ...] = (
    "numbers",
    "args",
    "call",
    "fields",
    "decisions",
    "records",
    "budgets",
    "shares",
    "capacity",
    "origin",
    "plans",
    "upkeep",
    "admission",
    "queue",
    "policy",
    "adaptive",
    "admin",
    "config",
    "spending",
)
#: a Redis error reply that means the library is not loaded on that server
MISSING_FUNCTION = "Function not found"
#: the library's answer to a call that passed the state key alone to a Redis Cluster node (nothing ran):
#: the client sends it again with every key
EVERY_KEY = "GOVERNOR_KEYS"


def _lua_dir() -> Path:
    """governor/lua inside an installed wheel, else lua/ of a source checkout."""
    packaged = resources.files("governor") / "lua"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "lua"


def _lua(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() else repr(value)


def _kind(kind: protocol.Kind) -> str:
    if kind.type == "str":
        values = ", ".join(f"[{value!r}] = true" for value in kind.values)
        return f"{{'str', {{{values}}}}}" if kind.values else "{'str'}"
    fresh = "" if kind.recurs else ", fresh = true"
    return f"{{'{kind.type}', {_lua(kind.low)}, {_lua(kind.high)}{fresh}}}"


def _strings(names: Iterable[str]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


def _cost(kind: str) -> str:
    """A budget kind's cost as Lua {per lease, per input token, per output
    token, tier}, from governor.budgets.Tokens.cost (linear in the tokens):
    the tokens count only for a lease of that tier ('' the standard one,
    governor.budgets.KIND_TIER); the per-lease cost counts for every lease."""
    tier = KIND_TIER.get(kind, "")
    own = tier or None
    base = Tokens().cost(kind)
    per_input, per_output = Tokens(input=1, tier=own).cost(kind) - base, Tokens(output=1, tier=own).cost(kind) - base
    if Tokens(input=7, output=11, tier=own).cost(kind) != base + 7 * per_input + 11 * per_output:
        raise AssertionError(f"the cost of budget kind {kind} is not linear in the tokens")
    for other in ("", *TIERS_APART):
        if other != tier and Tokens(input=7, output=11, tier=other or None).cost(kind) != base:
            raise AssertionError(f"budget kind {kind} counts the tokens of a tier not its own ({other or 'standard'})")
    return f"{{{base}, {per_input}, {per_output}, '{tier}'}}"


def field_table() -> str:
    """The Lua that declares the blueprint, from governor.protocol,
    governor.budgets and governor.policies: SCHEMA, MAX_INT, the queue's
    constants, the keys' names and types in the order every function
    receives them, each class's virtual time field, the budget kinds and
    their costs, the base config fields, the status reply's fields, FIELDS
    (the kind of every stored field, the kind tables declared with it), ARGS
    (the kind of each ranged argument, governor.protocol.ARGUMENTS), ABSENT
    (what each field a later version added reads as when absent,
    governor.protocol.ADDED) and REQUIRED (the fields every governor's hashes
    hold, whatever its policy)."""
    every = policies.all_fields()
    kinds = sorted({kind.name: kind for kind in (*every.values(), *protocol.ARGUMENTS.values())}.items())
    lines = [
        "-- generated by governor/scripts.py from governor/protocol.py, governor/budgets.py and governor/policies.py",
        f"local SCHEMA = {protocol.SCHEMA_VERSION}",
        f"local LAYOUT = {protocol.LAYOUT}",
        f"local MIN_LAYOUT = {protocol.MIN_LAYOUT}",
        f"local TIERS_LAYOUT = {protocol.TIERS_LAYOUT}",
        f"local DEFAULT_TTL_MS = {protocol.ms(protocol.DEFAULT_LEASE_TTL)}",
        f"local MAX_INT = {protocol.MAX_INT}",
        f"local QUEUE_BAND = {protocol.QUEUE_BAND}",
        f"local QUANTUM = {protocol.QUANTUM}",
        f"local MAX_CLASSES = {protocol.MAX_CLASSES}",
        f"local MAX_WEIGHT = {protocol.MAX_WEIGHT}",
        f"local DEFAULT_TENANT = {protocol.DEFAULT_TENANT!r}",
        f"local PARK_SLOT = {protocol.PARK_SLOT}",
        f"local MAX_CAPPED = {protocol.MAX_CAPPED}",
        f"local MAX_CAP = {protocol.MAX_CAP}",
        f"local LOWER_HELD = {protocol.LOWER_HELD!r}",
        f"local MAX_CAPACITY = {protocol.MAX_CAPACITY}",
        f"local KEY_NAMES = {_strings(protocol.KEY_NAMES)}",
        f"local TYPES = {_strings(kind for _, kind in protocol.KEYS)}",
        f"local VTIMES = {_strings(f'vtime_{rank}' for rank in range(protocol.MAX_CLASSES))}",
        f"local BUDGET_KINDS = {_strings(BUDGET_KINDS)}",
        "-- what a lease of {input = i, output = o, tier = t} takes from each kind: [1], plus [2] * i + [3] * o"
        " when t is [4] ('' the standard tier)",
        f"local BUDGET_COST = {{{', '.join(f'{kind} = {_cost(kind)}' for kind in BUDGET_KINDS)}}}",
        f"local BASE_CONFIG = {_strings(protocol.CONFIG)}",
        f"local STATUS_FIELDS = {_strings(protocol.STATUS_FIELDS)}",
        "-- the fields a new hash stores first: the hot paths' (governor.protocol.HOT)",
        f"local HOT = {{{', '.join(f'{h} = {_strings(names)}' for h, names in protocol.HOT.items())}}}",
    ]
    # (the kind tables are FIELDS' alone: declared in a block of their own, they
    # take none of the 200 locals Lua allows the library's main chunk)
    entries = ",\n    ".join(f"{field} = {kind.name}" for field, kind in sorted(every.items()))
    arguments = ", ".join(f"{name} = {kind.name}" for name, kind in protocol.ARGUMENTS.items())
    lines += ["local FIELDS, ARGS, ABSENT", "do"]
    lines += [f"  local {name} = {_kind(kind)}" for name, kind in kinds]
    lines.append(f"  FIELDS = {{\n    {entries},\n  }}")
    lines.append(f"  ARGS = {{{arguments}}}  -- the ranged arguments' kinds (governor.protocol.ARGUMENTS)")
    absent = ", ".join(f"{field} = {value!r}" for field, value in protocol.ADDED.items())
    lines.append(f"  ABSENT = {{{absent}}}  -- what a field a later version added reads as when absent (ADDED)")
    lines.append("end")
    required = ", ".join(
        f"{hash_name} = {{{', '.join(repr(n) for n in names)}}}" for hash_name, names in protocol.required().items()
    )
    lines.append(f"local REQUIRED = {{{required}}}")
    return "\n".join(lines)


def lua_code(text: str) -> str:
    """Lua source without its comments and with every string literal
    emptied: what its names are read from."""
    text = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S)
    text = re.sub(r"--[^\n]*", "", text)
    return re.sub(r"'(?:[^'\\\n]|\\.)*'", "''", text)


def defined(text: str) -> tuple[str, ...]:
    """The names a fragment defines at its top level (its scope's), in order."""
    code = lua_code(text)
    names: dict[str, None] = {}
    for match in re.finditer(r"^local (?:function (\w+)|([\w, ]+?)(?: =|$))", code, re.M):
        for name in (match.group(1) or match.group(2)).split(","):
            names[name.strip()] = None
    return tuple(names)


def used(text: str) -> set[str]:
    """Every name a Lua source reads or writes (not a field: after a dot)."""
    return set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\b", lua_code(text)))


def uses_line(text: str) -> tuple[str, ...]:
    """The fragments a file's header says it uses (its "Uses" line)."""
    lines = re.findall(r"^Uses +((?:[^\n]*,\n)*[^\n]*)", text, re.M)
    if len(lines) != 1:
        raise ValueError(
            'a Lua file\'s header names the fragments it uses on one "Uses" line (a line that ends '
            "with a comma goes on on the next)"
        )
    return tuple(re.findall(r"lib/(\w+)\.lua", lines[0]))


def defines_line(text: str) -> tuple[str, ...]:
    """The names a fragment's header says it defines for other files (its
    "Defines:" line: names separated by commas, ended by a full stop; a line
    that ends with a comma goes on on the next; "Defines: nothing." for none)."""
    lines = re.findall(r"^Defines: ((?:[^\n]*,\n)*[^\n]*?)\.(?:\s|$)", text, re.M)
    if len(lines) != 1:
        raise ValueError(
            'a fragment\'s header names what it defines on one "Defines:" line (names separated by commas, '
            "ended by a full stop; a line that ends with a comma goes on on the next)"
        )
    names = tuple(name.strip() for name in lines[0].split(","))
    if names == ("nothing",):
        return ()
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z_]\w*", name)]
    if bad:
        raise ValueError(f'a "Defines:" line names Lua names only, separated by commas: not {bad}')
    return names


@functools.cache
def scopes() -> dict[str, tuple[str, ...]]:
    """Each fragment's names (its scope's table), by fragment."""
    folder = _lua_dir()
    return {name: defined((folder / "lib" / f"{name}.lua").read_text(encoding="utf-8")) for name in FRAGMENTS}


def imports(text: str) -> str:
    """The locals that bind, in a file's scope, each name it uses of the
    fragments its Uses line names (one statement; '' for none)."""
    words, kept = used(text), scopes()
    pairs = [(name, f"{scope}.{name}") for scope in uses_line(text) if scope != COMMON
             for name in kept[scope] if name in words]  # fmt: skip
    if not pairs:
        return ""
    return f"local {', '.join(n for n, _ in pairs)} = {', '.join(v for _, v in pairs)} "


@functools.cache
def parts() -> tuple[tuple[str, str], ...]:
    """The library's pieces, in order, each with the file it comes from.
    A fragment is a scope, a function run once at load: its first line
    binds what it uses of the fragments above it, its last line returns
    its names, kept in the table named after it; both on the file's own
    first and last lines, so a fragment's lines keep their numbers. Its
    locals are the scope's, none the main chunk's (Lua 5.1 allows a
    function 200). An operation is a function of a scope of its own,
    bound likewise."""
    folder = _lua_dir()
    pieces = [("(generated)", field_table())]
    pieces.append((f"lua/lib/{COMMON}.lua", (folder / "lib" / f"{COMMON}.lua").read_text(encoding="utf-8")))
    for name in FRAGMENTS:
        text = (folder / "lib" / f"{name}.lua").read_text(encoding="utf-8")
        lines = text.split("\n")
        lines[0] = f"local {name} = (function() {imports(text)}{lines[0]}"
        kept = ", ".join(f"{n} = {n}" for n in scopes()[name])
        lines[-1] = f"{lines[-1]} return {{{kept}}} end)()"
        pieces.append((f"lua/lib/{name}.lua", "\n".join(lines)))
    for op in OPERATIONS:
        body = (folder / f"{op}.lua").read_text(encoding="utf-8")
        pieces.append((f"lua/{op}.lua", f"{opening(op, imports(body))}\n{body}\n{CLOSING}"))
    return tuple(pieces)


def opening(operation: str, imports: str = "") -> str:
    """The line an operation's body starts after."""
    return f"OPS.{operation} = (function() {imports}return function()"


#: the line an operation's body ends before
CLOSING = "end end)()"


@functools.cache
def library_name() -> str:
    """The library's name: the schema and a hash of its source."""
    digest = hashlib.sha1("\n".join(text for _, text in parts()).encode()).hexdigest()[:12]
    return f"governor_v{protocol.SCHEMA_VERSION}_{digest}"


@functools.cache
def function_name(operation: str) -> str:
    """The name ``operation`` is registered under (FCALL's first argument)."""
    if operation not in OPERATIONS:
        raise KeyError(f"unknown governor script {operation!r}")
    return f"{library_name()}_{operation}"


@functools.cache
def library() -> str:
    """The whole library source, as FUNCTION LOAD takes it."""
    registrations = []
    for op in OPERATIONS:
        flags = "{'no-writes'}" if op in READ_ONLY else "{}"
        registrations.append(
            f"redis.register_function{{function_name = '{function_name(op)}', flags = {flags},\n"
            f"  callback = function(keys, argv) begin(keys, argv) return OPS.{op}() end}}"
        )
    body = "\n".join(text for _, text in parts())
    return f"#!lua name={library_name()}\n{body}\nlocal begin = call.begin\n" + "\n".join(registrations) + "\n"


def where(line: int) -> str:
    """The file and line a line of the library comes from, e.g.
    ``lua/lib/queue.lua:42`` (Redis names lines of the whole library;
    an operation's lines are off by one, for its wrapping line)."""
    first = 2  # line 1 is the "#!lua name=..." line
    for name, text in parts():
        count = text.count("\n") + 1
        if line < first + count:
            offset = 1 if name.startswith("lua/") and not name.startswith("lua/lib/") else 0
            return f"{name}:{line - first + 1 - offset}"
        first += count
    return f"library line {line}"


def locate(message: str) -> str:
    """A Redis error message with each ``user_function:N`` line named as the
    file and line it comes from."""
    return re.sub(r"user_function:(\d+)", lambda m: where(int(m.group(1))), message)
