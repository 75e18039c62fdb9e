"""The conformance vectors (tests/conformance/vectors.json) against the Lua on
a real Redis: every reply, every published wake message and every key after
each step is what the reference model said. The Node client's tests run the
same file (clients/typescript/test/conformance.test.ts)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from governor.protocol import KEYS, governor_keys
from governor.scripts import function_name, library_name

from .conftest import load_library

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "conformance" / "vectors.json"
DATA: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
TYPES = dict(KEYS)


def norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def comparable(op: str, reply: list[Any]) -> list[Any]:
    """init's name, value pairs from the 5th element on (after the epoch and ttl_max) compare as a map."""
    if op == "init" and len(reply) > 4:
        return [*reply[:4], dict(zip(reply[4::2], reply[5::2], strict=True))]
    return reply


def read_key(client: redis.Redis, key: str, kind: str) -> dict[str, Any]:
    if kind == "hash":  # the state's origin names the Redis server that wrote it: no vector can
        return {norm(k): norm(v) for k, v in client.hgetall(key).items() if norm(k) != "origin"}
    return {norm(m): s for m, s in client.zrange(key, 0, -1, withscores=True)}


def same_hash(actual: dict[str, str], expected: dict[str, Any]) -> bool:
    if set(actual) != set(expected):
        return False
    for field, want in expected.items():
        got = actual[field]
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            if float(got) != float(want):
                return False
        elif got != want:
            return False
    return True


def test_the_vectors_are_what_the_model_generates() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "conformance" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert DATA["library"] == library_name()


def test_the_calendar_vectors_are_what_the_python_client_computes() -> None:
    """tests/conformance/calendar.json (the other clients' calendar spend
    windows) is what governor.spend.Window gives for its zones and instants."""
    script = ROOT / "tests" / "conformance" / "generate_calendar.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_charge_vectors_are_what_the_python_transport_charges() -> None:
    """tests/conformance/charges.json (what the other clients' governed
    fetch reserves and settles for a call) is what governor._exchange.Charge
    gives for its requests and answers."""
    script = ROOT / "tests" / "conformance" / "generate_charges.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_vectors_reach_every_function_and_reply() -> None:
    """Every function, and every reply kind but release's 'missing' (a lost
    state with callers queued: the queue is lost with it), is in a vector."""
    sys.path.insert(0, str(ROOT / "tests" / "conformance"))
    from generate import coverage

    from governor.protocol import REPLIES

    reached = coverage(DATA)
    kinds = {key.split(":")[1] for key in reached["replies"]}
    for op, replies in REPLIES.items():
        if op == "spend":  # not in the reference model: tests/test_spend.py and the Node client's spend tests run it
            continue
        assert op in reached["functions"], op
        for kind in replies:
            if (op, kind) != ("release", "missing") and op not in (
                "probe",
                "pause",
                "resume",
                "set_max",
                "set_shares",
                "reset",
            ):
                assert f"{op}:{kind}" in reached["replies"], (op, kind)
    assert {"ok", "adopted", "lost", "granted", "queued", "unknown"} <= kinds


@pytest.fixture(scope="module")
def client(redis_url: str) -> Any:
    c = redis.Redis.from_url(redis_url, socket_timeout=10)
    load_library(c)  # only when missing: REDIS_URL may be a Redis other clients use
    yield c
    c.close()


@pytest.mark.parametrize("vector", DATA["vectors"], ids=[v["name"] for v in DATA["vectors"]])
def test_the_lua_answers_as_the_vectors_say(client: redis.Redis, vector: dict[str, Any]) -> None:
    keys = governor_keys(f"conformance-{uuid.uuid4().hex[:12]}")
    pubsub = client.pubsub()
    pubsub.subscribe(keys.channel)
    confirmed = None
    deadline = time.monotonic() + 5
    while confirmed is None and time.monotonic() < deadline:
        confirmed = pubsub.get_message(ignore_subscribe_messages=False, timeout=0.1)
    assert confirmed is not None and confirmed["type"] == "subscribe"
    expected: dict[str, dict[str, Any]] = {name: {} for name in DATA["compared_keys"]}
    try:
        for n, step in enumerate(vector["steps"]):
            where = f"{vector['name']} step {n} ({step['op']})"
            if step["op"] == "lose_state":
                client.delete(*keys.keys)
            else:
                argv = [keys.channel if arg == "$channel" else arg for arg in step["argv"]]
                raw = client.fcall(function_name(step["op"]), len(keys.script_keys), *keys.script_keys, *argv)
                reply = norm(raw)
                assert comparable(step["op"], reply) == comparable(step["op"], step["reply"]), where
                published: list[str] = []
                until = time.monotonic() + 5
                while len(published) < len(step["published"]) and time.monotonic() < until:
                    message = pubsub.get_message(timeout=0.05)
                    if message is not None and message["type"] == "message":
                        published.append(norm(message["data"]))
                extra = pubsub.get_message(timeout=0.0)
                assert published == step["published"], where
                assert extra is None or extra["type"] != "message", f"{where}: an unexpected wake {extra}"
            expected.update(step["after"])
            for name, want in expected.items():
                got = read_key(client, getattr(keys, name), TYPES[name])
                if TYPES[name] == "hash":
                    assert same_hash(got, want), f"{where}: {name} is {got}, the vector says {want}"
                else:
                    assert got == {m: float(s) for m, s in want.items()}, f"{where}: {name}"
    finally:
        pubsub.close()
        client.delete(*keys.keys)
