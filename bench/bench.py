"""The overhead benchmarks of ``python -m bench bench``, each side by side on one Redis.

1. *Uncontended pairs*: acquire + release pairs per second against raw
   ``INCR`` + ``DECR`` pairs on the same client, sync and asyncio. Both are
   two round trips; the ratio is what the scripts and the client add. For
   scale, sync pairs of two empty calls with the governor's keys and
   acquire's arguments: ``FCALL`` of a function that returns 0 (the floor
   of any gate built from Redis functions, as the governor is) and, for
   comparison, ``EVALSHA`` of ``return 0``.
2. *Wake latency*: from a holder calling ``release()`` to the next waiter
   (another client, same process) returning from ``acquire()``, over the
   pub/sub push; p50 and p99.
3. *Queue depth*: hand-overs per second with 10 and with 10,000 callers
   queued. One hand-over is what a saturated fleet does at each completion:
   a release that grants the head of the queue, and a new caller joining
   the tail. It drives the library's functions through the sans-IO core
   (:class:`governor.core.GovernorCore`, one ``FCALL`` per operation) so
   that 10,000 parked waiters cost no client work.
4. *Redis time per script call*: ``usec_per_call`` of FCALL from
   ``INFO commandstats`` over a batch of each operation, read before and
   after (a delta, so nothing is reset on a shared server), beside the
   empty FCALL and EVALSHA of (1) and ``INCR``. (There is no "prelude" to
   measure apart any more: the library's shared definitions are built once,
   when ``FUNCTION LOAD`` runs its top level, and a call pays only for
   binding its keys and arguments and for its own work.)

Rounds of the compared cases are interleaved (A, B, A, B, ...) and the
median round is reported, so a machine that is busy for a moment skews
both sides alike.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio

from governor import AsyncGovernor, Governor, GovernorConfig, Outcome
from governor.core import GovernorCore, Granted, Queued
from governor.protocol import governor_keys
from governor.scripts import function_name, library

#: the targets of the overhead goals
TARGETS = {
    "pair_ratio": 1.3,  # acquire+release cost / INCR+DECR cost
    "wake_p50_ms": 1.0,
    "wake_p99_ms": 5.0,
    "deep_ratio": 1.2,  # cost with the deep queue / cost with 10 queued
    "script_usec": 15.0,  # Redis time per script call
}
ROUNDS = 5
SHALLOW = 10
#: the library of the floor: one function that does nothing (returns 0)
FLOOR_LIBRARY = "governor_bench_floor"
FLOOR_FUNCTION = "governor_bench_floor_noop"
FLOOR_SOURCE = (
    f"#!lua name={FLOOR_LIBRARY}\nredis.register_function('{FLOOR_FUNCTION}', function(keys, args) return 0 end)\n"
)

Echo = Callable[[str], Any]


def _name(what: str) -> str:
    return f"bench-{what}-{uuid.uuid4().hex[:8]}"


def _config(**overrides: Any) -> GovernorConfig:
    # Long TTLs: nothing expires while it is measured.
    # New names each time: nobody held their leases before a restart (no restart hold).
    # The resume level at the ceiling: the adaptive policy's slow start begins at max_capacity.
    values: dict[str, Any] = {
        "max_capacity": 1_000, "lease_ttl": 3600.0, "poll": 1.0, "queue_ttl": 3600.0, "restart_hold": False,
        "resume_fraction": 1.0,
    }  # fmt: skip
    values.update(overrides)
    return GovernorConfig(**values)


def parsers() -> tuple[str, ...]:
    """The reply parsers redis-py can use here: ``"hiredis"`` when installed
    (redis-py then picks it by itself), and always ``"python"``."""
    from redis.utils import HIREDIS_AVAILABLE

    return ("hiredis", "python") if HIREDIS_AVAILABLE else ("python",)


def parser_options(parser: str | None, asyncio: bool) -> dict[str, Any]:
    """Client options that select ``parser``: None or ``"hiredis"`` keep
    redis-py's default (hiredis when installed); ``"python"`` forces the
    pure-Python parser (redis-py swaps in its RESP3 twin on a RESP3
    connection). The governor's own pool keeps the choice."""
    if parser is None:
        return {}
    if parser not in parsers():
        raise ValueError(f"reply parser {parser!r} is not available here (one of {', '.join(parsers())})")
    if parser == "hiredis":
        return {}
    from redis._parsers import _AsyncRESP2Parser, _RESP2Parser

    return {"parser_class": _AsyncRESP2Parser if asyncio else _RESP2Parser}


def _cleanup(client: redis.Redis, *names: str) -> None:
    for name in names:
        client.delete(*governor_keys(name).keys)


class Floor:
    """Empty calls with a governor's script keys and the arguments acquire takes:
    ``FCALL`` of the floor library's function that returns 0, and, to compare,
    ``EVALSHA`` of ``return 0``. The floor library is loaded here and deleted
    by :meth:`close`."""

    def __init__(self, client: redis.Redis, core: GovernorCore) -> None:
        self.client = client
        self.keys = list(core.keys.script_keys)
        self.args = list(core.acquire("floor", core.ask("bench"), wait=True).args)
        client.function_load(FLOOR_SOURCE, replace=True)
        self._script = client.register_script("return 0")

    def fcall(self) -> Any:
        return self.client.fcall(FLOOR_FUNCTION, len(self.keys), *self.keys, *self.args)

    def evalsha(self) -> Any:
        return self._script(keys=self.keys, args=self.args)

    def two_fcalls(self) -> None:
        """The floor of an operation made of two calls (acquire + release)."""
        self.fcall()
        self.fcall()

    def two_evalshas(self) -> None:
        self.evalsha()
        self.evalsha()

    def close(self) -> None:
        try:
            self.client.function_delete(FLOOR_LIBRARY)
        except redis.ResponseError:
            pass  # deleted already (another bench on the same server)


def _rate(operation: Callable[[], Any], seconds: float) -> float:
    """Operations per second of ``operation`` run back to back for ``seconds``."""
    count = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            operation()
        count += 50
        now = time.perf_counter()
        if now >= end:
            return count / (now - start)


async def _arate(operation: Callable[[], Awaitable[Any]], seconds: float) -> float:
    count = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            await operation()
        count += 50
        now = time.perf_counter()
        if now >= end:
            return count / (now - start)


#: calls per client-CPU measurement (``_cpu_us``)
CPU_CALLS = 500


def _cpu_us(operation: Callable[[], Any], calls: int = CPU_CALLS) -> float:
    """The client process's CPU time (its threads included, waits on Redis
    not) per call of ``operation``, in microseconds."""
    start = time.process_time()
    for _ in range(calls):
        operation()
    return (time.process_time() - start) / calls * 1e6


async def _acpu_us(operation: Callable[[], Awaitable[Any]], calls: int = CPU_CALLS) -> float:
    start = time.process_time()
    for _ in range(calls):
        await operation()
    return (time.process_time() - start) / calls * 1e6


def _interleaved(cases: dict[str, Callable[[float], float]], seconds: float) -> dict[str, float]:
    """Median rate of each case over ROUNDS interleaved rounds of seconds / ROUNDS."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, measure in cases.items():
            rates[name].append(measure(seconds / ROUNDS))
    return {name: statistics.median(values) for name, values in rates.items()}


# -- 1. uncontended pairs ----------------------------------------------------------------------


def bench_pairs_sync(url: str, seconds: float, parser: str | None = None) -> dict[str, float]:
    client = redis.Redis.from_url(url, **parser_options(parser, asyncio=False))
    name = _name("pairs")
    gov = Governor(client, name, _config())
    counter = f"{name}:raw"
    try:

        def governed() -> None:
            gov.acquire().release()

        def raw() -> None:
            client.incr(counter)
            client.decr(counter)

        # For scale: the floor of any gate built from script calls, two empty
        # calls with the governor's keys and acquire's arguments.
        floor = Floor(client, GovernorCore(name, gov.config))

        governed()  # creates the governor and starts the listener
        rates = _interleaved(
            {
                "governor": lambda s: _rate(governed, s),
                "raw": lambda s: _rate(raw, s),
                "empty_function": lambda s: _rate(floor.two_fcalls, s),
                "empty_script": lambda s: _rate(floor.two_evalshas, s),
            },
            seconds,
        )
        cpu = {"governor": _cpu_us(governed), "raw": _cpu_us(raw)}
        floor.close()
    finally:
        gov.close()
        _cleanup(client, name)
        client.delete(counter)
        client.close()
    return {
        "governor_pairs_s": rates["governor"],
        "raw_pairs_s": rates["raw"],
        "ratio": rates["raw"] / rates["governor"],
        "governor_cpu_us": cpu["governor"],
        "raw_cpu_us": cpu["raw"],
        "empty_function_pairs_s": rates["empty_function"],
        "empty_function_ratio": rates["raw"] / rates["empty_function"],
        "empty_script_pairs_s": rates["empty_script"],
        "empty_script_ratio": rates["raw"] / rates["empty_script"],
    }


async def bench_pairs_async(url: str, seconds: float, parser: str | None = None) -> dict[str, float]:
    client = redis.asyncio.Redis.from_url(url, **parser_options(parser, asyncio=True))
    name = _name("apairs")
    gov = AsyncGovernor(client, name, _config())
    counter = f"{name}:raw"

    async def governed() -> None:
        lease = await gov.acquire()
        await lease.release()

    async def raw() -> None:
        await client.incr(counter)
        await client.decr(counter)

    try:
        await governed()
        rates: dict[str, list[float]] = {"governor": [], "raw": []}
        for _ in range(ROUNDS):
            rates["governor"].append(await _arate(governed, seconds / ROUNDS))
            rates["raw"].append(await _arate(raw, seconds / ROUNDS))
        cpu = {"governor": await _acpu_us(governed), "raw": await _acpu_us(raw)}
    finally:
        await gov.aclose()
        await client.delete(*governor_keys(name).keys, counter)
        await client.aclose()
    g, r = statistics.median(rates["governor"]), statistics.median(rates["raw"])
    return {"governor_pairs_s": g, "raw_pairs_s": r, "ratio": r / g, "governor_cpu_us": cpu["governor"],
            "raw_cpu_us": cpu["raw"]}  # fmt: skip


def bench_client_rates(url: str, seconds: float, repeats: int = 3) -> dict[str, dict[str, float]]:
    """Uncontended acquire+release vs INCR+DECR pairs per second, sync and
    asyncio, with each reply parser available (see :func:`parsers`), keyed
    ``"sync/hiredis"``, ``"asyncio/python"``, ... The parsers take turns,
    ``repeats`` times (the order reversed each time), and each figure is the
    median of its turns: a moment of load skews every parser alike. Each
    also says the client's own CPU time per pair (``*_cpu_us``: its process's,
    the governor's background thread included, the waits on Redis not)."""
    runs: dict[str, list[dict[str, float]]] = {}
    for turn in range(repeats):
        for parser in parsers()[:: -1 if turn % 2 else 1]:
            runs.setdefault(f"sync/{parser}", []).append(bench_pairs_sync(url, seconds / repeats, parser))
            runs.setdefault(f"asyncio/{parser}", []).append(
                asyncio.run(bench_pairs_async(url, seconds / repeats, parser))
            )
    out: dict[str, dict[str, float]] = {}
    for key in sorted(runs, key=lambda k: (not k.startswith("sync"), k)):
        governed = statistics.median(r["governor_pairs_s"] for r in runs[key])
        raw = statistics.median(r["raw_pairs_s"] for r in runs[key])
        out[key] = {"governor_pairs_s": governed, "raw_pairs_s": raw, "ratio": raw / governed}
        for cpu in ("governor_cpu_us", "raw_cpu_us"):
            out[key][cpu] = statistics.median(r[cpu] for r in runs[key])
    return out


# -- 2. wake latency ------------------------------------------------------------------------------


async def bench_wake_async(url: str, count: int) -> dict[str, float]:
    holder_client = redis.asyncio.Redis.from_url(url)
    waiter_client = redis.asyncio.Redis.from_url(url)
    name = _name("wake")
    holder = AsyncGovernor(holder_client, name, _config(max_capacity=1))
    waiter = AsyncGovernor(waiter_client, name, _config(max_capacity=1))
    samples: list[float] = []
    try:
        lease = await holder.acquire()

        async def wait_turn() -> tuple[Any, float]:
            granted = await waiter.acquire(timeout=30)
            return granted, time.perf_counter()

        for _ in range(count):
            task = asyncio.create_task(wait_turn())
            while (await holder.status()).queued < 1:  # the waiter is in the queue
                await asyncio.sleep(0)
            released = time.perf_counter()
            await lease.release()
            waiter_lease, admitted = await task
            samples.append(admitted - released)
            # Swap roles back: the holder queues nothing; it takes the slot again.
            await waiter_lease.release()
            lease = await holder.acquire()
        await lease.release()
    finally:
        await holder.aclose()
        await waiter.aclose()
        await holder_client.delete(*governor_keys(name).keys)
        await holder_client.aclose()
        await waiter_client.aclose()
    return _latency_summary(samples)


def bench_wake_sync(url: str, count: int) -> dict[str, float]:
    holder_client = redis.Redis.from_url(url)
    waiter_client = redis.Redis.from_url(url)
    name = _name("swake")
    holder = Governor(holder_client, name, _config(max_capacity=1))
    waiter = Governor(waiter_client, name, _config(max_capacity=1))
    samples: list[float] = []
    try:
        lease = holder.acquire()
        for _ in range(count):
            box: dict[str, Any] = {}

            def wait_turn(box: dict[str, Any] = box) -> None:
                box["lease"] = waiter.acquire(timeout=30)
                box["at"] = time.perf_counter()

            thread = threading.Thread(target=wait_turn)
            thread.start()
            while holder.status().queued < 1:
                time.sleep(0)
            released = time.perf_counter()
            lease.release()
            thread.join(30)
            samples.append(box["at"] - released)
            box["lease"].release()
            lease = holder.acquire()
        lease.release()
    finally:
        holder.close()
        waiter.close()
        _cleanup(holder_client, name)
        holder_client.close()
        waiter_client.close()
    return _latency_summary(samples)


def _latency_summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def q(p: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"count": len(ordered), "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": 1000 * ordered[-1]}


# -- 3. queue depth --------------------------------------------------------------------------------


class _Driver:
    """Runs the library's functions for one governor through the sans-IO
    core, one FCALL per operation, without waiting."""

    def __init__(self, client: redis.Redis, name: str, config: GovernorConfig) -> None:
        self.client = client
        self.core = GovernorCore(name, config)
        client.function_load(library(), replace=True)

    def run(self, call: Any, pipe: Any = None) -> Any:
        keys = self.core.keys.script_keys
        command = (function_name(call.script), len(keys), *keys, *call.args)
        if pipe is not None:
            pipe.fcall(*command)
            return None
        return call.parse(self.client.fcall(*command))

    def enqueue(self, ids: list[str]) -> None:
        """Queue many callers at once (pipelined)."""
        for start in range(0, len(ids), 1000):
            pipe = self.client.pipeline(transaction=False)
            for lease_id in ids[start : start + 1000]:
                self.run(self.core.acquire(lease_id, self.core.ask("bench"), wait=True), pipe)
            pipe.execute()


def bench_queue_depth(url: str, seconds: float, deep: int) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    drivers: dict[int, tuple[_Driver, deque[str], list[str]]] = {}
    names = []
    try:
        for depth in (SHALLOW, deep):
            name = _name(f"queue{depth}")
            names.append(name)
            driver = _Driver(client, name, _config(max_capacity=1))
            driver.run(driver.core.init(holds_leases=False))
            holder = f"h{uuid.uuid4().hex}"
            granted = driver.run(driver.core.acquire(holder, driver.core.ask("bench"), wait=True))
            if not isinstance(granted, Granted):
                raise RuntimeError(f"the first caller of an empty governor was not admitted: {granted!r}")
            queue = deque(f"w{uuid.uuid4().hex}" for _ in range(depth))
            driver.enqueue(list(queue))
            drivers[depth] = (driver, queue, [holder])

        def hand_over(depth: int) -> None:
            driver, queue, current = drivers[depth]
            driver.run(driver.core.release(current[0]))  # grants the head of the queue
            current[0] = queue.popleft()
            newcomer = f"w{uuid.uuid4().hex}"
            queued = driver.run(driver.core.acquire(newcomer, driver.core.ask("bench"), wait=True))
            if not isinstance(queued, Queued):
                raise RuntimeError(f"a newcomer behind {depth} waiters was not queued: {queued!r}")
            queue.append(newcomer)

        rates = _interleaved(
            {
                "shallow": lambda s: _rate(lambda: hand_over(SHALLOW), s),
                "deep": lambda s: _rate(lambda: hand_over(deep), s),
            },
            seconds,
        )
        status = drivers[deep][0].run(drivers[deep][0].core.status())
        if status.queued < deep - 1:
            raise RuntimeError(f"the deep queue shrank to {status.queued} while measured")
    finally:
        _cleanup(client, *names)
        client.close()
    return {
        "shallow_hand_overs_s": rates["shallow"],
        "deep_hand_overs_s": rates["deep"],
        "deep": deep,
        "ratio": rates["shallow"] / rates["deep"],
    }


# -- 4. Redis time per script call ----------------------------------------------------------------------


def _command(client: redis.Redis, command: str) -> tuple[int, int]:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def bench_script_time(url: str, count: int = 2000) -> dict[str, float]:
    """Redis microseconds per call of each operation (FCALL), of the empty
    FCALL and EVALSHA of the floor, and of INCR."""
    client = redis.Redis.from_url(url)
    name = _name("scripts")
    driver = _Driver(client, name, _config(max_capacity=count + 10))
    floor = Floor(client, driver.core)
    out: dict[str, float] = {}
    try:
        driver.run(driver.core.init(holds_leases=False))
        ids = [f"l{uuid.uuid4().hex}" for _ in range(count)]

        def measure(label: str, command: str, calls: Callable[[], object]) -> None:
            before = _command(client, command)
            calls()
            after = _command(client, command)
            out[label] = (after[1] - before[1]) / max(1, after[0] - before[0])

        measure(
            "acquire",
            "fcall",
            lambda: [driver.run(driver.core.acquire(i, driver.core.ask("bench"), wait=True)) for i in ids],
        )
        measure(
            "report",
            "fcall",
            lambda: [driver.run(driver.core.report(Outcome.SUCCESS, None, i)) for i in ids],
        )
        measure("release", "fcall", lambda: [driver.run(driver.core.release(i)) for i in ids])
        measure("status", "fcall", lambda: [driver.run(driver.core.status()) for _ in ids])
        measure("empty FCALL", "fcall", lambda: [floor.fcall() for _ in ids])
        measure("empty EVALSHA", "evalsha", lambda: [floor.evalsha() for _ in ids])
        counter = f"{name}:raw"
        # redis-py sends INCR as INCRBY
        measure("INCR", "incrby", lambda: [client.incr(counter) for _ in ids])
        client.delete(counter)
    finally:
        floor.close()
        _cleanup(client, name)
        client.close()
    return out


# -- all of them -------------------------------------------------------------------------------------------


def run_bench(
    url: str,
    *,
    seconds: float = 3.0,
    wakes: int = 1000,
    deep: int = 10_000,
    script_calls: int = 2000,
    echo: Echo = print,
) -> dict[str, Any]:
    """Every overhead benchmark on the Redis at ``url``; the figures and the verdicts."""
    client = redis.Redis.from_url(url)
    try:
        server = client.info("server")
    finally:
        client.close()
    result: dict[str, Any] = {
        "redis_version": server.get("redis_version"),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg()[0],
    }
    echo("1/4 uncontended acquire+release vs INCR+DECR (sync) ...")
    result["pairs_sync"] = bench_pairs_sync(url, seconds)
    echo("1/4 uncontended acquire+release vs INCR+DECR (asyncio) ...")
    result["pairs_async"] = asyncio.run(bench_pairs_async(url, seconds))
    echo(f"2/4 wake latency, {wakes} hand-overs (asyncio, then sync) ...")
    result["wake_async"] = asyncio.run(bench_wake_async(url, wakes))
    result["wake_sync"] = bench_wake_sync(url, max(10, wakes // 2))
    echo(f"3/4 hand-overs with {SHALLOW} vs {deep} queued ...")
    result["queue"] = bench_queue_depth(url, seconds, deep)
    echo("4/4 Redis time per script call ...")
    result["script_usec"] = bench_script_time(url, script_calls)
    result["load_after"] = os.getloadavg()[0]
    result["targets"] = TARGETS
    result["verdicts"] = verdicts(result)
    return result


def verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target: the measured value, the target, met or not."""
    measured = {
        "pair_ratio (sync)": (result["pairs_sync"]["ratio"], TARGETS["pair_ratio"]),
        "pair_ratio (asyncio)": (result["pairs_async"]["ratio"], TARGETS["pair_ratio"]),
        "wake p50 ms (asyncio)": (result["wake_async"]["p50_ms"], TARGETS["wake_p50_ms"]),
        "wake p99 ms (asyncio)": (result["wake_async"]["p99_ms"], TARGETS["wake_p99_ms"]),
        "wake p50 ms (sync)": (result["wake_sync"]["p50_ms"], TARGETS["wake_p50_ms"]),
        "wake p99 ms (sync)": (result["wake_sync"]["p99_ms"], TARGETS["wake_p99_ms"]),
        "deep queue ratio": (result["queue"]["ratio"], TARGETS["deep_ratio"]),
    }
    for op in ("acquire", "report", "release"):
        measured[f"Redis usec per {op}"] = (result["script_usec"][op], TARGETS["script_usec"])
    return {k: {"measured": v, "target": t, "met": v <= t} for k, (v, t) in measured.items()}


def format_bench(result: dict[str, Any]) -> str:
    """The figures as text, each beside its target."""
    ps, pa, q = result["pairs_sync"], result["pairs_async"], result["queue"]
    ws, wa, su = result["wake_sync"], result["wake_async"], result["script_usec"]
    lines = [
        f"Redis {result['redis_version']}, {result['cpus']} CPUs, load average {result['load_before']:.2f} "
        f"before, {result['load_after']:.2f} after",
        "",
        "1. uncontended pairs per second          governor   INCR+DECR   cost ratio",
        f"   sync                                  {ps['governor_pairs_s']:8.0f}   {ps['raw_pairs_s']:9.0f}"
        f"   {ps['ratio']:6.2f}x",
        f"   asyncio                               {pa['governor_pairs_s']:8.0f}   {pa['raw_pairs_s']:9.0f}"
        f"   {pa['ratio']:6.2f}x",
        f"   for scale, sync, two empty FCALLs     {ps['empty_function_pairs_s']:8.0f}   {ps['raw_pairs_s']:9.0f}"
        f"   {ps['empty_function_ratio']:6.2f}x",
        f"   for scale, sync, two empty EVALSHAs   {ps['empty_script_pairs_s']:8.0f}   {ps['raw_pairs_s']:9.0f}"
        f"   {ps['empty_script_ratio']:6.2f}x",
        "2. wake latency, release -> admission     p50 ms    p99 ms    max ms",
        f"   asyncio ({wa['count']:.0f})                         {wa['p50_ms']:7.3f}   {wa['p99_ms']:7.3f}"
        f"   {wa['max_ms']:7.2f}",
        f"   sync ({ws['count']:.0f})                             {ws['p50_ms']:7.3f}   {ws['p99_ms']:7.3f}"
        f"   {ws['max_ms']:7.2f}",
        f"3. hand-overs per second                 {SHALLOW} queued: {q['shallow_hand_overs_s']:.0f}   "
        f"{q['deep']} queued: {q['deep_hand_overs_s']:.0f}   cost ratio {q['ratio']:.2f}x",
        "4. Redis time per call (usec)            "
        + "   ".join(f"{op} {su[op]:.1f}" for op in ("acquire", "report", "release", "status")),
        f"   for scale                             empty FCALL {su['empty FCALL']:.1f}   "
        f"empty EVALSHA {su['empty EVALSHA']:.1f}   INCR {su['INCR']:.1f}",
        "",
        "target                          measured    target   met",
    ]
    for label, v in result["verdicts"].items():
        lines.append(f"{label:<30} {v['measured']:9.2f} {v['target']:9.2f}   {'yes' if v['met'] else 'NO'}")
    return "\n".join(lines)
