"""``keys``: a governor's Redis keys (governor.protocol.KEYS), with a ready
redis-cli command for each; ``library``: the functions library on this Redis."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import click

from .. import views
from ..core import text
from ..errors import map_errors
from ..protocol import KEY_NAMES, LOWER_HELD, SENTINEL
from ..scripts import library as library_source
from ..scripts import library_name
from .app import App, command, global_options, json_option, pass_app
from .render import emit_json, span

#: how redis-cli reads a key of each type ({key}: the key)
REDIS_CLI_READ = {
    "hash": ["HGETALL", "{key}"],
    "zset": ["ZRANGE", "{key}", "0", "-1", "WITHSCORES"],
    "stream": ["XREVRANGE", "{key}", "+", "-", "COUNT", "20"],
    "pubsub": ["SUBSCRIBE", "{key}"],
}
#: the zsets that grow with traffic: only their newest 20 entries
NEWEST_ONLY = ("attempts", "limited")
KEY_MEANING = {
    "state": "admission state: capacity, pause, hold, fences, counters",
    "config": "the stored config: base fields and the policy's own",
    "policy": "what the policy learnt (its own fields)",
    "leases": f"lease id -> expiry (ms); in-flight = live entries ({SENTINEL!r} keeps the key, not counted)",
    "holders": f"lease/waiter id -> fence|ttl_ms|since_ms|input|output|level|rank|tenant|holder ({SENTINEL!r} keeps "
    "the key, not counted)",
    "queue": "waiter id -> band * 2^50 + tag: a higher class first (band 0: aged), then the fair-queueing tag",
    "waiters": "waiter id -> deadline (ms) to refresh by",
    "attempts": "seq:outcome -> time (ms): the window",
    "limited": "the rate-limited subset of attempts",
    "events": "the decision log (capped stream)",
    "aging": "waiter id -> time (ms) it goes ahead of every class",
    "shares": "rank:tenant -> finish tag: where its next waiter's tag in that class starts (behind vtime: pruned)",
    "held": f"a capped tenant -> its leases in flight; {LOWER_HELD!r} -> the lower classes' (while a reserve is set)",
    "parked": "waiter id -> slot * 2^40 + seq: a waiter of a tenant at its cap, in its tenant's order",
    "spend": "b:budget:scope -> the window's micro-dollars per slot; d: definitions, a: approvals, "
    "r: reservations not yet settled (governor spend)",
    "channel": "pub/sub channel announcing grants (not a key)",
}
if set(KEY_MEANING) != {*KEY_NAMES, "channel"}:
    raise AssertionError("KEY_MEANING must describe every key of governor.protocol.KEYS")


def redis_cli_base(url: str) -> tuple[list[str], str | None]:
    """``redis-cli`` and the connection flags for ``url``; a note when a password is needed."""
    parsed = urlparse(url)
    args = ["redis-cli"]
    if parsed.scheme == "unix":
        args += ["-s", parsed.path]
        db = parse_qs(parsed.query).get("db", ["0"])[0]
    else:
        if parsed.scheme == "rediss":
            args.append("--tls")
        args += ["-h", parsed.hostname or "localhost", "-p", str(parsed.port or 6379)]
        db = parsed.path.lstrip("/") or parse_qs(parsed.query).get("db", ["0"])[0]
    if db and db != "0":
        args += ["-n", db]
    if parsed.username and parsed.username != "default":
        args += ["--user", unquote(parsed.username)]
    note = "export REDISCLI_AUTH=<password> first (the URL has one)" if parsed.password else None
    return args, note


def read_command(base: list[str], role: str, kind: str, key: str) -> str:
    """The redis-cli command that reads key ``key`` of type ``kind``."""
    words = [w.replace("{key}", key) for w in REDIS_CLI_READ[kind]]
    if role in NEWEST_ONLY:
        words[2:4] = ["-20", "-1"]
    return shlex.join([*base, *words])


@command()
@json_option
@global_options()
@pass_app
def keys(app: App, as_json: bool) -> None:
    """The Redis keys of a governor, with a ready redis-cli command for each."""
    gov_keys = app.keys()
    infos = views.read_keys(app.client(), gov_keys)
    base, note = redis_cli_base(app.url)
    entries: list[dict[str, Any]] = [
        {
            "role": i.role,
            "key": i.key,
            "type": i.type,
            "expected_type": i.expected,
            "size": i.size,
            "ttl": i.ttl,
            "meaning": KEY_MEANING[i.role],
            "redis_cli": read_command(base, i.role, i.expected, i.key),
        }
        for i in infos
    ]
    channel: dict[str, Any] = {
        "role": "channel",
        "key": gov_keys.channel,
        "type": "pubsub",
        "expected_type": "pubsub",
        "size": None,
        "ttl": None,
        "meaning": KEY_MEANING["channel"],
        "redis_cli": read_command(base, "channel", "pubsub", gov_keys.channel),
    }
    exists = any(i.type != "none" for i in infos)
    wrong = [i for i in infos if i.wrong_type]
    if as_json:
        emit_json(
            {
                "governor": gov_keys.name,
                "exists": exists,
                "keys": [*entries, channel],
                "wrong_type": [i.role for i in wrong],
                "auth_note": note,
            }
        )
        return
    for entry in [*entries, channel]:
        size = f", {entry['size']} entries" if entry["type"] == entry["expected_type"] != "pubsub" else ""
        ttl = f", expires in {span(entry['ttl'])} if idle" if entry["ttl"] is not None else ""
        odd = ""
        if entry["type"] not in ("none", entry["expected_type"]):
            odd = f"; WRONG TYPE, the scripts expect a {entry['expected_type']}"
        click.echo(f"{entry['role']:<9} {entry['key']}  ({entry['type']}{size}{ttl}{odd})")
        click.echo(f"          {entry['meaning']}")
        click.echo(f"          $ {entry['redis_cli']}")
    if note:
        click.echo(f"\n{note}")
    if not exists:
        click.echo(f"\nnote: none of these keys exists: there is no governor {gov_keys.name!r} here", err=True)
    for info in wrong:
        click.echo(
            f"note: {info.key} is a {info.type}, not a {info.expected}: another program wrote it "
            "(the scripts refuse to run on it); delete it or use another name",
            err=True,
        )


@command()
@click.option("--load", is_flag=True, help="load (or replace) this version's library (needs ACL +function|load)")
@json_option
@global_options()
@pass_app
def library(app: App, load: bool, as_json: bool) -> None:
    """The functions library of this client's version on this Redis: whether
    it is loaded, which other governor libraries are; --load loads it (the
    deploy step where workers may not FUNCTION LOAD, docs/operating.md: Security)."""
    client = app.client()
    name = library_name()
    with map_errors(None):
        if load:
            client.function_load(library_source(), replace=True)
        listed = client.function_list(library="governor_*")
    loaded = sorted(text(entry[1] if isinstance(entry, list) else entry["library_name"]) for entry in listed)
    if as_json:
        emit_json({"library": name, "loaded": name in loaded, "governor_libraries": loaded, "did_load": load})
        return
    state = "loaded" if name in loaded else "NOT loaded: workers without +function|load cannot run; use --load"
    click.echo(f"library {name}: {state}")
    others = [other for other in loaded if other != name]
    if others:
        click.echo(f"other governor libraries here (other versions): {', '.join(others)}")


COMMANDS = (keys, library)
