#!/usr/bin/env python3
"""What the Python client itself costs per governed call, apart from Redis.

    python scripts/client_cost.py [--url redis://127.0.0.1:6379/0] [--calls 20000]
                                  [--operation pair|call] [--asyncio] [--parser python|hiredis]
                                  [--profile 30]

Runs ``acquire()`` + ``release()`` (``pair``) or ``gov.call(fn)`` with a
trivial ``fn`` (``call``) on a fresh governor, twice: against Redis, and
with Redis's replies canned (the governor's client answers each function
with the reply Redis gave it once, so the round trips and Redis's work
drop out and the governor's own Python is left). Then the same functions
with the same arguments sent straight through the governor's redis-py
client (a fresh lease id each time, the fence its acquire answered): the
protocol's calls and replies through redis-py, the governor's Python
out. Prints the client process's CPU time (``time.process_time()``: its
threads, not its waits) per call each way, and the same for an ``INCR`` +
``DECR`` pair on the same client, the scale of the client-side pair rate
in docs/benchmarks/instructions.md. ``--parser``: redis-py's reply parser
(its default: hiredis when installed). ``--profile N``: the N functions with the
most own time over the canned run (cProfile; it inflates small functions,
and charges a system call that releases the GIL with what other threads
do meanwhile).

Expect the canned figure to be well under the difference between the
governed and the raw calls: run between real round trips, the same code
is slower (caches), and redis-py packs and parses longer commands and
replies than INCR's (the functions sent alone over INCR + DECR).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench import parser_options, parsers
from governor import AsyncGovernor, Governor, GovernorConfig

OPERATIONS = ("pair", "call")


def _config() -> GovernorConfig:
    """Room to spare and nothing due: every call is admitted at once."""
    return GovernorConfig(max_capacity=1_000_000, lease_ttl=3600.0, queue_ttl=3600.0, restart_hold=False)


@contextmanager
def _fcall(
    gov: Governor | AsyncGovernor, replies: dict[str, Any], record: bool, asyncio_: bool, calls: list[Any] | None = None
) -> Iterator[None]:
    """For the block, the governor's client answers each function with
    ``replies[name]``; ``record``: from Redis, kept there, and each call's
    arguments appended to ``calls`` (an instance attribute over redis-py's
    ``fcall``, removed after)."""
    client = gov._connection.client
    real = client.fcall
    sent = [] if calls is None else calls
    if asyncio_:

        async def answer(name: str, *args: Any) -> Any:
            if record:
                replies[name] = await real(name, *args)
                sent.append((name, args))
            return replies[name]

    else:

        def answer(name: str, *args: Any) -> Any:  # type: ignore[misc]
            if record:
                replies[name] = real(name, *args)
                sent.append((name, args))
            return replies[name]

    client.fcall = answer
    try:
        yield
    finally:
        del client.fcall


#: where a governed call's functions take the lease's id and fence: ARGV
#: positions (each function's header in lua/)
LEASE_ARGV = {"acquire": {3: "id"}, "release": {3: "id"}, "report": {5: "id", 6: "fence"}}


def _fresh(name: str, args: tuple[Any, ...], lease: str, fence: str) -> tuple[Any, ...]:
    """A recorded call's arguments (numkeys, the keys, ARGV) for another lease."""
    fresh, numkeys = list(args), int(args[0])
    for argv, what in LEASE_ARGV[name.rsplit("_", 1)[1]].items():
        fresh[numkeys + argv] = lease if what == "id" else fence
    return tuple(fresh)


def _cpu(run: Callable[[], None], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        run()
    return (time.process_time() - start) / calls * 1e6


async def _acpu(run: Callable[[], Awaitable[None]], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        await run()
    return (time.process_time() - start) / calls * 1e6


def measure_sync(url: str, operation: str, calls: int, profile: int = 0, parser: str | None = None) -> dict[str, float]:
    """Client CPU per call in microseconds: ``redis`` (real round trips),
    ``canned`` (replies canned), ``direct`` (its functions sent alone),
    ``raw`` (INCR + DECR); the governor's keys deleted after."""
    client = redis.Redis.from_url(url, **parser_options(parser, asyncio=False))
    gov = Governor(client, f"client-cost-{uuid.uuid4().hex[:8]}", _config())
    counter = f"{gov.keys.state}:raw"

    def nothing() -> None:
        return None

    def pair() -> None:
        gov.acquire().release()

    def call() -> None:
        gov.call(nothing)

    def raw() -> None:
        client.incr(counter)
        client.decr(counter)

    run = pair if operation == "pair" else call
    replies: dict[str, Any] = {}
    sent: list[Any] = []
    own = gov._connection.client

    def direct() -> None:
        lease, fence = uuid.uuid4().hex, ""
        for name, args in sent:
            reply = own.fcall(name, *_fresh(name, args, lease, fence))
            if name.endswith("_acquire"):
                fence = str(int(reply[2]))

    try:
        run()  # (the governor's first call stores its config: not recorded)
        with _fcall(gov, replies, record=True, asyncio_=False, calls=sent):
            run()
        figures = {"redis": _cpu(run, calls)}
        with _fcall(gov, replies, record=False, asyncio_=False):
            figures["canned"] = _cpu(run, calls)
            if profile:
                _profile(run, calls, profile)
        figures["direct"] = _cpu(direct, calls)
        figures["raw"] = _cpu(raw, calls)
    finally:
        gov.close()
        client.delete(counter, *gov.keys.keys)
        client.close()
    return figures


async def measure_async(url: str, operation: str, calls: int, parser: str | None = None) -> dict[str, float]:
    """measure_sync() with the asyncio facade."""
    client = redis.asyncio.Redis.from_url(url, **parser_options(parser, asyncio=True))
    gov = AsyncGovernor(client, f"client-cost-{uuid.uuid4().hex[:8]}", _config())
    counter = f"{gov.keys.state}:raw"

    async def pair() -> None:
        await (await gov.acquire()).release()

    async def nothing() -> None:
        return None

    async def call() -> None:
        await gov.call(nothing)

    async def raw() -> None:
        await client.incr(counter)
        await client.decr(counter)

    run = pair if operation == "pair" else call
    replies: dict[str, Any] = {}
    sent: list[Any] = []
    own = gov._connection.client

    async def direct() -> None:
        lease, fence = uuid.uuid4().hex, ""
        for name, args in sent:
            reply = await own.fcall(name, *_fresh(name, args, lease, fence))
            if name.endswith("_acquire"):
                fence = str(int(reply[2]))

    try:
        await run()  # (the governor's first call stores its config: not recorded)
        with _fcall(gov, replies, record=True, asyncio_=True, calls=sent):
            await run()
        figures = {"redis": await _acpu(run, calls)}
        with _fcall(gov, replies, record=False, asyncio_=True):
            figures["canned"] = await _acpu(run, calls)
        figures["direct"] = await _acpu(direct, calls)
        figures["raw"] = await _acpu(raw, calls)
    finally:
        await gov.aclose()
        await client.delete(counter, *gov.keys.keys)
        await client.aclose()
    return figures


def _profile(run: Callable[[], None], calls: int, top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        run()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--operation", choices=OPERATIONS, default="pair")
    parser.add_argument("--asyncio", action="store_true", help="the asyncio facade")
    parser.add_argument("--parser", choices=parsers(), help="redis-py's reply parser (default: its own choice)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile's top N (sync)")
    args = parser.parse_args(argv)
    if args.asyncio:
        figures = asyncio.run(measure_async(args.url, args.operation, args.calls, args.parser))
    else:
        figures = measure_sync(args.url, args.operation, args.calls, args.profile, args.parser)
    what = "acquire() + release()" if args.operation == "pair" else "gov.call(fn)"
    facade = "asyncio" if args.asyncio else "sync"
    print(f"client CPU per call, {facade} {what}, {args.calls} calls, reply parser: {args.parser or 'default'}:")
    print(f"  against Redis            {figures['redis']:7.1f} us")
    print(f"  Redis's replies canned   {figures['canned']:7.1f} us   (the governor's own Python)")
    print(f"  its functions sent alone {figures['direct']:7.1f} us   (the same calls through redis-py)")
    print(f"  INCR + DECR              {figures['raw']:7.1f} us   (the scale)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
