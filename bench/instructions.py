"""Redis server instructions per governed operation, counted by callgrind:
``python -m bench bench --instructions``.

A private ``redis-server`` runs under ``valgrind --tool=callgrind`` (the
launcher, :mod:`bench.redis_server`): each phase is ``calls`` repetitions
of one operation between callgrind's ``zero`` and ``dump`` (sent by vgdb).
Instruction counts do not depend on how busy the machine is, so they
compare across runs and machines of one Redis build (what runs by time,
reclaim once a second and the expiry push, is kept from falling due while
counting: its share of a call would depend on the calls per second); ``--hz 1`` keeps the
server's own timer work out of the counts.

Each operation is measured twice, on a governor with ``shallow`` (10) and
with ``deep`` (10,000) live leases besides the measured ones, and, for the
queue operations, as many waiters; the goal is that no operation costs more
than 1.2x its cost at 10. Every figure is per repetition and also a ratio
to an ``INCR`` + ``DECR`` pair on the same client.

- *scale*: an ``INCR`` + ``DECR`` pair; two empty ``FCALL``s, of a
  function of a tiny library of its own (``governor_bench_floor``) that
  returns 0, with the governor's 10 keys and as many arguments as acquire
  takes (the floor of any gate built from two calls of Redis functions, as
  the governor is); and for comparison two ``EVALSHA`` of ``return 0`` with
  the same keys and arguments;
- *public API, leases only* (capacity to spare, no waiters: a waiter would
  queue the caller): ``acquire().release()``; a governed call,
  ``gov.call(fn)`` with a trivial ``fn``, and the same as ``acquire()`` +
  ``report(..., release=True)``; then each operation on its own:
  ``acquire()``, ``report()`` of a success on a held lease, ``renew()`` of
  the one lease the object holds, ``release()``;
- *queue* (capacity full with the live leases, the waiters queued behind
  them), driven through the sans-IO core as the waiters are parked
  callers that cost no client work: an ``acquire`` that joins the queue's
  tail, a ``release`` that grants the queue's head, and both (the
  hand-over a saturated fleet does at each completion), one ``FCALL`` of
  the governor's library each; and the hand-over as a governed call does
  it, ``report(SUCCESS, release=True)`` with the lease's fence granting the
  head, then a newcomer queued (counted in rounds of at most as many calls
  as leases: the fences of the holders reporting next are read between
  rounds, uncounted);
- *queue across tenants*: the same three, with the waiters (and newcomers)
  taking turns among ``TENANTS`` (100) tenants of equal weight at the deep
  state (the fair queue's tags and the ``shares`` zset at work), against 10
  waiters of one tenant at the shallow one: the cost of fair shares at depth.

- *features*: a governed call, acquire() + release() and a hand-over on a
  plain governor (one priority class, no aging, no budgets, tenants, caps
  or reserve: :data:`PLAIN`), then with each feature switched on alone
  (:data:`FEATURES`), at the shallow state: what each feature costs when
  it is used, and that a feature switched off costs nothing.

Not isolated: the pub/sub wake-up and the waiters' refresh (the worker
does them in the background, by time), and ``cancel`` (a waiter's timeout).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from governor import Governor, GovernorConfig, Outcome
from governor.core import GovernorCore, Granted, Queued

from .bench import Floor, _config, _Driver, bench_client_rates
from .redis_server import RedisServer, callgrind, valgrind_missing

SHALLOW = 10
DEPTH_TARGET = 1.2  # an operation's cost with the deep state / its cost with the shallow one
TENANTS = 100  # the tenants the deep state's waiters take turns among in the queue-across-tenants phases

#: phase key -> what the report calls it
PHASES = {
    "incr_decr": "INCR + DECR (the scale)",
    "empty_fcall": "two empty FCALLs, the state key and acquire's arguments (floor)",
    "empty_evalsha": "two EVALSHA of `return 0`, the same keys and arguments",
    "acquire_release": "acquire() + release()",
    "call": "gov.call(fn), trivial fn",
    "acquire_report": "acquire() + report(SUCCESS, lease, release=True)",
    "acquire": "acquire() alone",
    "report": "report(SUCCESS, lease) alone",
    "renew": "renew() of the one lease held",
    "release": "release() alone",
    "join_queue": "acquire joining the queue's tail (core)",
    "grant_head": "release granting the queue's head (core)",
    "hand_over": "hand-over: release + a newcomer queued (core)",
    "report_hand_over": "hand-over by a governed call: report(SUCCESS, release=True) + a newcomer queued (core)",
    "join_queue_tenants": "acquire joining the queue, waiters of 1 tenant vs across 100 tenants (core)",
    "grant_head_tenants": "release granting the queue's head, waiters of 1 tenant vs across 100 tenants (core)",
    "hand_over_tenants": "hand-over, waiters of 1 tenant vs across 100 tenants (core)",
}


#: a plain governor: one priority class, no aging, no budgets, tenants, caps or reserve
PLAIN: dict[str, Any] = {"priorities": ("default",), "default_priority": "default", "aging": None}
#: each feature switched on alone, over PLAIN
FEATURES: dict[str, dict[str, Any]] = {
    "plain": {},
    "budgets (requests per minute)": {"requests_per_minute": 10**6},
    "classes (3, aging)": {"priorities": ("interactive", "default", "batch"), "aging": 30.0},
    "tenants (weights)": {"tenant_weights": {"other": 2}},
    "caps (the caller's tenant)": {"tenant_caps": {"default": 10**6}},
    "reserve (3 classes, 1 slot)": {"priorities": ("interactive", "default", "batch"), "reserve": 1},
}
#: phase key -> what the features table calls it
FEATURE_PHASES = {"call": "gov.call(fn)", "acquire_release": "acquire() + release()", "hand_over": "hand-over"}


class InstructionsUnavailable(RuntimeError):
    """valgrind or redis-server is not installed."""


def missing_tools() -> str | None:
    """Why the measurement cannot run here, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server not found: apt-get install redis-server"
    return valgrind_missing()


@dataclass
class _Callgrind:
    """The server under callgrind, and the phases counted so far."""

    server: RedisServer
    folder: Path

    def _monitor(self, command: str) -> None:
        """A callgrind monitor command (``zero``, ``dump <label>``), sent
        with vgdb as ``callgrind_control`` does, without its listing of
        processes first, and with the server woken after 1 ms rather than
        100 (an idle server sleeps up to a second): 0.1 s a command, not 0.25."""
        command_line = ["vgdb", f"--pid={self.server.pid}", "--max-invoke-ms=1", command]
        subprocess.run(command_line, check=True, capture_output=True, timeout=120)

    def count(self, label: str, run: Callable[[], object], calls: int) -> None:
        """Count the server's instructions over ``calls`` runs of ``run``,
        dumped as ``label``. (Instrumentation stays on: each switch makes
        callgrind drop its translations, and each command costs about 0.1 s,
        so two per phase rather than four.)"""
        self._monitor("zero")
        for _ in range(calls):
            run()
        self._monitor(f"dump {label}")

    def totals(self) -> dict[str, int]:
        """Instructions of each dumped phase, by label; a phase counted in
        rounds (labels ``<label>#<round>``) as the sum of its rounds."""
        out: dict[str, int] = {}
        for dump in sorted(self.folder.glob("callgrind.*.*")):
            text = dump.read_text(errors="replace")
            label = re.search(r"^desc: Trigger: .*?dump (\S+)", text, re.M)
            total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
            if label and total:
                phase = label.group(1).strip().split("#", 1)[0]
                out[phase] = out.get(phase, 0) + int(total.group(1))
        return out


@contextmanager
def counted_server(prefix: str = "governor-callgrind-") -> Iterator[tuple[_Callgrind, redis.Redis]]:
    """A private redis-server under callgrind (``--hz 1``: its own timer work
    stays out of the counts), its counter and a client; all removed after.
    Read the counter's totals inside the block. Raises
    InstructionsUnavailable where the tools are missing."""
    why = missing_tools()
    if why is not None:
        raise InstructionsUnavailable(why)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    server = RedisServer(None, "--hz", "1", wrapper=callgrind(folder))
    try:
        server.start()
        client = redis.Redis(port=server.port, socket_timeout=120)
        try:
            yield _Callgrind(server, folder), client
        finally:
            client.close()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def _tenant(i: int) -> str:
    return f"t{i:03d}"


def _no_maintenance(client: redis.Redis, state_key: str) -> None:
    """Keep what runs by time (reclaim, once a second; the expiry push,
    every idle time / 8) from falling due while a governor is counted: its
    share of a call depends on the calls per second, which callgrind and
    the machine's load slow down, so counting it would make the figures
    depend on the load. A call never moves these due times unless it runs them."""
    client.hset(state_key, mapping={"reclaim_due": 2**52, "touch_due": 2**52})


def _fill(driver: _Driver, leases: int, waiters: int, tenants: int = 0) -> tuple[deque[str], deque[str]]:
    """``leases`` live leases, then ``waiters`` queued callers, by pipelines of
    script calls: of the default tenant, or (``tenants`` > 0) taking turns
    among that many tenants, with ids in the order they were sent (a tie of
    the fair queue's tags goes to the lower id, so the queue stays in that order)."""
    holders = deque(f"h{i:08d}{uuid.uuid4().hex[:16]}" if tenants else f"h{uuid.uuid4().hex}" for i in range(leases))
    queue = deque(f"w{i:08d}{uuid.uuid4().hex[:16]}" if tenants else f"w{uuid.uuid4().hex}" for i in range(waiters))
    asks = [driver.core.ask("bench", tenant=_tenant(i)) for i in range(tenants)] or [driver.core.ask("bench")]
    for ids, wait, kind in ((list(holders), False, Granted), (list(queue), True, Queued)):
        for start in range(0, len(ids), 500):
            pipe = driver.client.pipeline(transaction=False)
            calls = [
                driver.core.acquire(lease_id, asks[i % len(asks)], wait=wait)
                for i, lease_id in enumerate(ids[start : start + 500], start)
            ]
            for call in calls:
                driver.run(call, pipe)
            for call, reply in zip(calls, pipe.execute(), strict=True):
                parsed = call.parse(reply)
                if not isinstance(parsed, kind):
                    raise RuntimeError(f"filling the state: expected {kind.__name__}, got {parsed!r}")
    return holders, queue


def _depth(counter: _Callgrind, client: redis.Redis, depth: int, calls: int) -> None:
    """Every phase, with ``depth`` live leases (and waiters, for the queue phases)."""
    tag = uuid.uuid4().hex[:8]
    # -- leases only: the public API, capacity to spare -------------------------------------
    config = _config(max_capacity=depth + calls + 16)
    name = f"bench-instr{depth}-{tag}"
    gov = Governor(client, name, config)
    try:
        for _ in range(5):  # the state created, the scripts loaded, the worker listening
            gov.acquire().release()
        gov.call(lambda: None)
        _fill(_Driver(client, name, config), depth, 0)
        _no_maintenance(client, gov.keys.state)
        if gov.status().in_flight != depth:
            raise RuntimeError(f"expected {depth} live leases before measuring")
        counter_key = f"{name}:raw"
        floor = Floor(client, GovernorCore(name, config))
        floor.fcall()
        floor.evalsha()

        def incr_decr() -> None:
            client.incr(counter_key)
            client.decr(counter_key)

        def acquire_report() -> None:
            gov.report(Outcome.SUCCESS, lease=gov.acquire(), release=True)

        counter.count(f"d{depth}:incr_decr", incr_decr, calls)
        counter.count(f"d{depth}:empty_fcall", floor.two_fcalls, calls)
        counter.count(f"d{depth}:empty_evalsha", floor.two_evalshas, calls)
        floor.close()
        counter.count(f"d{depth}:acquire_release", lambda: gov.acquire().release(), calls)
        counter.count(f"d{depth}:call", lambda: gov.call(lambda: None), calls)
        counter.count(f"d{depth}:acquire_report", acquire_report, calls)
        one = gov.acquire()
        counter.count(f"d{depth}:renew", gov.renew, calls)
        one.release()
        held: list[Any] = []
        counter.count(f"d{depth}:acquire", lambda: held.append(gov.acquire()), calls)
        reports = iter(held)
        counter.count(f"d{depth}:report", lambda: gov.report(Outcome.SUCCESS, lease=next(reports)), calls)
        releases = iter(held)
        counter.count(f"d{depth}:release", lambda: next(releases).release(), calls)
        client.delete(counter_key)
    finally:
        gov.close()
        client.delete(*gov.keys.keys)
    # -- the queue: capacity full, as many waiters as leases, through the core ----------------
    _queue(counter, client, depth, calls, f"bench-instrq{depth}-{tag}", 0, "")
    # -- the same across tenants: one at the shallow state, TENANTS at the deep one ------------
    tenants = 1 if depth <= SHALLOW else min(TENANTS, depth)
    _queue(counter, client, depth, calls, f"bench-instrt{depth}-{tag}", tenants, "_tenants")


def _governed_call(gov: Governor) -> None:
    gov.call(lambda: None)


def _acquire_release(gov: Governor) -> None:
    gov.acquire().release()


def _features(counter: _Callgrind, client: redis.Redis, calls: int) -> None:
    """The FEATURE_PHASES of each of FEATURES at the shallow state, counted as ``f<i>:<phase>``."""
    for i, overrides in enumerate(FEATURES.values()):
        tag = uuid.uuid4().hex[:8]
        config = _config(max_capacity=SHALLOW + calls + 16, **{**PLAIN, **overrides})
        gov = Governor(client, f"bench-feature{i}-{tag}", config)
        try:
            for _ in range(5):
                gov.acquire().release()
            gov.call(lambda: None)
            _fill(_Driver(client, gov.name, config), SHALLOW, 0)
            _no_maintenance(client, gov.keys.state)
            counter.count(f"f{i}:call", functools.partial(_governed_call, gov), calls)
            counter.count(f"f{i}:acquire_release", functools.partial(_acquire_release, gov), calls)
        finally:
            gov.close()
            client.delete(*gov.keys.keys)
        _queue(counter, client, SHALLOW, calls, f"bench-featureq{i}-{tag}", 0, "", config, f"f{i}:")


def _queue(counter: _Callgrind, client: redis.Redis, depth: int, calls: int, name: str, tenants: int,
           suffix: str, config: GovernorConfig | None = None, label: str = "") -> None:  # fmt: skip
    """The queue phases on a governor of their own: capacity full with
    ``depth`` leases, ``depth`` waiters behind them (of the default tenant, or
    taking turns among ``tenants``, newcomers too), counted as
    ``d<depth>:<phase><suffix>``."""
    # aging an hour: no waiter ages while counted (how many would depends on how long the fill took)
    queue_config = _config(max_capacity=depth, aging=3600.0)
    if config is not None:
        queue_config = dataclasses.replace(config, max_capacity=depth + config.reserve)  # the lower classes fill depth
        if config.aging is not None:
            queue_config = dataclasses.replace(queue_config, aging=3600.0)
    driver = _Driver(client, name, queue_config)
    try:
        driver.run(driver.core.init(holds_leases=False))
        holders, queue = _fill(driver, depth, depth, tenants)
        _no_maintenance(client, driver.core.keys.state)
        asks = [driver.core.ask("bench", tenant=_tenant(i)) for i in range(tenants)] or [driver.core.ask("bench")]
        joined = len(queue)

        def join() -> None:
            nonlocal joined
            newcomer = f"w{joined:08d}{uuid.uuid4().hex[:16]}" if tenants else f"w{uuid.uuid4().hex}"
            ask = asks[joined % len(asks)]
            joined += 1
            if not isinstance(driver.run(driver.core.acquire(newcomer, ask, wait=True)), Queued):
                raise RuntimeError(f"a newcomer behind {len(queue)} waiters was not queued")
            queue.append(newcomer)

        def grant() -> None:
            if not driver.run(driver.core.release(holders.popleft())):
                raise RuntimeError("a live lease was not released")
            holders.append(queue.popleft())  # the head was granted

        def hand_over() -> None:
            grant()
            join()

        if label:  # the features: the hand-over alone
            counter.count(f"{label}hand_over", hand_over, calls)
            return
        counter.count(f"d{depth}:join_queue{suffix}", join, calls)
        counter.count(f"d{depth}:grant_head{suffix}", grant, calls)
        counter.count(f"d{depth}:hand_over{suffix}", hand_over, calls)
        if not suffix:
            _report_hand_overs(counter, driver, holders, queue, calls, f"d{depth}:report_hand_over", join)
        status = driver.run(driver.core.status())
        if status.in_flight != depth or status.queued != depth:
            raise RuntimeError(f"the queue state drifted: {status.in_flight} leases, {status.queued} queued")
    finally:
        client.delete(*driver.core.keys.keys)


def _report_hand_overs(
    counter: _Callgrind,
    driver: _Driver,
    holders: deque[str],
    queue: deque[str],
    calls: int,
    label: str,
    join: Callable[[], None],
) -> None:
    """``calls`` hand-overs as a governed call does them (the oldest holder
    reports a success and gives its lease back, with its fence; the head it
    frees is granted; a newcomer queues), counted as ``label#<round>``."""
    done = 0
    while done < calls:
        count = min(len(holders), calls - done)
        reporting = list(holders)[:count]
        pipe = driver.client.pipeline(transaction=False)
        for holder in reporting:
            pipe.hget(driver.core.keys.holders, holder)
        fences = {
            holder: int(record.split(b"|", 1)[0]) for holder, record in zip(reporting, pipe.execute(), strict=True)
        }

        def report_hand_over(fences: dict[str, int] = fences) -> None:
            holder = holders.popleft()
            reported = driver.core.report(Outcome.SUCCESS, None, holder, fences[holder], release=True)
            if not driver.run(reported):
                raise RuntimeError("a live lease's report was fenced off")
            holders.append(queue.popleft())  # the head was granted
            join()

        counter.count(f"{label}#{done}", report_hand_over, count)
        done += count


def measure_instructions(
    calls: int = 200, deep: int = 10_000, shallow: int = SHALLOW, features: bool = True
) -> dict[str, Any]:
    """Server instructions per repetition of each phase (see the module), at
    ``shallow`` and ``deep``; raises InstructionsUnavailable without valgrind."""
    with counted_server() as (counter, client):
        version = str(client.info("server")["redis_version"])
        if features:
            _features(counter, client, calls)
        for depth in (shallow, deep):
            _depth(counter, client, depth, calls)
        totals = counter.totals()
    per: dict[str, dict[int, float]] = {key: {} for key in PHASES}
    feature_rows: dict[str, dict[str, float]] = {name: {} for name in FEATURES} if features else {}
    names = list(FEATURES)
    for label, total in totals.items():
        depth_text, key = label.split(":", 1)
        if depth_text.startswith("f"):
            feature_rows[names[int(depth_text[1:])]][key] = total / calls
        elif key in per:
            per[key][int(depth_text[1:])] = total / calls
    missing = [f"d{d}:{k}" for k in PHASES for d in (shallow, deep) if d not in per[k]]
    if missing:
        raise RuntimeError(f"callgrind wrote no dump for {', '.join(missing)}")
    rows = []
    for key, label in PHASES.items():
        at_shallow, at_deep = per[key][shallow], per[key][deep]
        rows.append(
            {
                "phase": key,
                "label": label,
                "shallow": at_shallow,
                "deep": at_deep,
                "pair_ratio": at_shallow / per["incr_decr"][shallow],
                "pair_ratio_deep": at_deep / per["incr_decr"][deep],
                "depth_ratio": at_deep / at_shallow,
            }
        )
    return {"redis_version": version, "calls": calls, "shallow": shallow, "deep": deep,
            "tenants": min(TENANTS, deep), "rows": rows, "features": feature_rows}  # fmt: skip


def format_instructions(result: dict[str, Any]) -> str:
    """The counts as a markdown table."""
    s, d = result["shallow"], result["deep"]
    lines = [
        f"Redis {result['redis_version']} under callgrind, {result['calls']} repetitions of each phase; "
        f"instructions per repetition with {s} and with {d:,} live leases (and waiters, queue phases).",
        "",
        f"| operation | at {s} | x INCR+DECR | at {d:,} | x INCR+DECR | {d:,} / {s} (goal <= {DEPTH_TARGET}) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        met = "" if row["depth_ratio"] <= DEPTH_TARGET else " **over**"
        lines.append(
            f"| {row['label']} | {row['shallow']:,.0f} | {row['pair_ratio']:.1f}x | {row['deep']:,.0f} | "
            f"{row['pair_ratio_deep']:.1f}x | {row['depth_ratio']:.2f}x{met} |"
        )
    if result.get("features"):
        lines += ["", format_features(result)]
    if any(row["phase"].endswith("_tenants") for row in result["rows"]):
        lines += [
            "",
            f"The rows *across tenants*: at {s}, {s} waiters of one tenant; at {d:,}, {d:,} waiters (and each "
            f"newcomer) taking turns among {result.get('tenants', TENANTS)} tenants of equal weight: the fair "
            "queue's tags and its `shares` zset at depth, against one tenant's queue.",
        ]
    return "\n".join(lines)


def format_features(result: dict[str, Any]) -> str:
    """The features table: each phase on the plain governor, and what each feature switched on adds."""
    features: dict[str, dict[str, float]] = result["features"]
    plain = features["plain"]
    heads = " | ".join(f"{label} | + vs plain" for label in FEATURE_PHASES.values())
    lines = [
        f"Each feature switched on alone over a plain governor (one class, no aging, no budgets, tenants, caps or "
        f"reserve), {result['shallow']} live leases (the hand-over: {result['shallow']} waiters too):",
        "",
        f"| governor | {heads} |",
        "|---|" + "---:|---:|" * len(FEATURE_PHASES),
    ]
    for name, row in features.items():
        cells = []
        for key in FEATURE_PHASES:
            extra = row[key] - plain[key]
            cells.append(f"{row[key]:,.0f} | {'' if name == 'plain' else f'{extra:+,.0f}'}")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


# -- the whole measurement: client-side rates and server instructions, as markdown -------------------


def run_instructions(
    url: str, *, calls: int = 200, deep: int = 10_000, seconds: float = 3.0, echo: Callable[[str], Any] = print
) -> dict[str, Any]:
    """Client-side pair rates on the Redis at ``url`` (each reply parser
    available), then server instructions under callgrind (a server of its own)."""
    why = missing_tools()
    if why is not None:
        raise InstructionsUnavailable(why)
    result: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    echo("1/2 client side: uncontended acquire+release vs INCR+DECR pairs/s, sync and asyncio, per reply parser ...")
    result["client"] = bench_client_rates(url, seconds)
    echo(f"2/2 server instructions under callgrind, {calls} repetitions, {SHALLOW} vs {deep} live ...")
    result["instructions"] = measure_instructions(calls, deep)
    result["load_after"] = os.getloadavg()[0]
    return result


def format_client(client: dict[str, dict[str, float]]) -> str:
    """The client-side rates as a markdown table, and hiredis against pure Python when both ran."""
    lines = [
        "| client | reply parser | acquire+release /s | INCR+DECR /s | cost ratio "
        "| client CPU per pair, acquire+release | client CPU per pair, INCR+DECR |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, row in client.items():
        api, parser = key.split("/", 1)
        lines.append(
            f"| {api} | {parser} | {row['governor_pairs_s']:,.0f} | {row['raw_pairs_s']:,.0f} | {row['ratio']:.2f}x "
            f"| {row['governor_cpu_us']:,.0f} us | {row['raw_cpu_us']:,.0f} us |"
        )
    lines.append("")
    if "sync/hiredis" not in client:
        lines.append("- hiredis is not installed here: `pip install hiredis` to compare (redis-py picks it by itself)")
    else:
        for api in ("sync", "asyncio"):
            gain = client[f"{api}/hiredis"]["governor_pairs_s"] / client[f"{api}/python"]["governor_pairs_s"]
            lines.append(f"- {api}: acquire+release/s with hiredis = {gain:.2f}x the pure-Python parser's")
    return "\n".join(lines)


def format_report(result: dict[str, Any], command: str) -> str:
    """The whole run as a markdown page, opening with the command that reproduces it."""
    return "\n".join(
        [
            "# Server instructions and client-side rates",
            "",
            "Reproduce with:",
            "",
            "    " + command,
            "",
            f"{result['cpus']} CPUs, load average {result['load_before']:.2f} before, "
            f"{result['load_after']:.2f} after. Generated by `python -m bench bench --instructions` "
            "(`bench/instructions.py`, which says what each phase runs).",
            "",
            "## Client side, pairs per second on one client",
            "",
            "Uncontended `acquire()` + `release()` against raw `INCR` + `DECR` on the same client, "
            "interleaved rounds, medians; the cost ratio is INCR+DECR/s over acquire+release/s. "
            "Rates depend on the machine and its load; the ratios less so. The client CPU per pair is the "
            "client process's own time (`time.process_time()` over 500 pairs, the governor's background "
            "thread included, the waits on Redis not): what the client adds, apart from Redis.",
            "",
            format_client(result["client"]),
            "",
            "## Server instructions per operation (callgrind)",
            "",
            format_instructions(result["instructions"]),
            "",
            "Not isolated: the pub/sub wake-up and the waiters' refresh (the background worker does them, by "
            "time), and `cancel` (a waiter's timeout). The queue phases run through the sans-IO core "
            "(`GovernorCore`, one `FCALL` of the library per operation): parked waiters that cost no "
            "client work.",
            "",
        ]
    )
