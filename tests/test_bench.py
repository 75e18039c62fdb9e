"""The overhead benchmarks run, measure what they claim, and clean up.

Each runs for a fraction of a second on the session's private Redis. No
speed is asserted here: the targets are judged by ``governor bench``
itself; these tests check that each figure is produced, has the right
shape and comes from the operations it names.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from bench import bench, instructions, redis_server
from bench.cli import bench_command

ROOT = Path(__file__).resolve().parent.parent


def _keys_left(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return [k for k in client.scan_iter("*bench-*")]
    finally:
        client.close()


def _floor_left(url: str) -> bool:
    """Whether the floor library of the benchmarks is still loaded."""
    client = redis.Redis.from_url(url)
    try:
        return bool(client.function_list(library=bench.FLOOR_LIBRARY))
    finally:
        client.close()


def test_pairs_are_measured_side_by_side(redis_url: str) -> None:
    for result in (bench.bench_pairs_sync(redis_url, 0.1),):
        assert result["governor_pairs_s"] > 0 and result["raw_pairs_s"] > 0
        assert result["ratio"] == pytest.approx(result["raw_pairs_s"] / result["governor_pairs_s"])
        assert result["empty_function_ratio"] == pytest.approx(result["raw_pairs_s"] / result["empty_function_pairs_s"])
        assert result["empty_script_ratio"] == pytest.approx(result["raw_pairs_s"] / result["empty_script_pairs_s"])
    assert not _floor_left(redis_url)
    assert _keys_left(redis_url) == []


async def test_async_pairs_are_measured_side_by_side(redis_url: str) -> None:
    result = await bench.bench_pairs_async(redis_url, 0.1)
    assert result["governor_pairs_s"] > 0 and result["raw_pairs_s"] > 0
    assert _keys_left(redis_url) == []


async def test_wake_latency_counts_every_hand_over(redis_url: str) -> None:
    result = await bench.bench_wake_async(redis_url, 20)
    assert result["count"] == 20
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    sync = bench.bench_wake_sync(redis_url, 10)
    assert sync["count"] == 10 and 0 < sync["p50_ms"] <= sync["max_ms"]
    assert _keys_left(redis_url) == []


def test_queue_depth_keeps_the_deep_queue_deep(redis_url: str) -> None:
    result = bench.bench_queue_depth(redis_url, 0.2, deep=300)
    assert result["deep"] == 300
    assert result["shallow_hand_overs_s"] > 0 and result["deep_hand_overs_s"] > 0
    assert _keys_left(redis_url) == []


def test_script_time_comes_from_command_statistics(redis_url: str) -> None:
    result = bench.bench_script_time(redis_url, count=50)
    for op in ("acquire", "report", "release", "status", "empty FCALL", "empty EVALSHA", "INCR"):
        assert result[op] > 0, op
    # every operation is an FCALL that does its own work on top of the call itself
    for op in ("acquire", "report", "release", "status"):
        assert result[op] > result["empty FCALL"], op
    assert _keys_left(redis_url) == [] and not _floor_left(redis_url)


def test_verdicts_compare_each_figure_with_its_target() -> None:
    result = {
        "pairs_sync": {"ratio": 1.2},
        "pairs_async": {"ratio": 1.5},
        "wake_async": {"p50_ms": 0.5, "p99_ms": 6.0},
        "wake_sync": {"p50_ms": 0.9, "p99_ms": 2.0},
        "queue": {"ratio": 1.0},
        "script_usec": {"acquire": 14.0, "report": 16.0, "release": 10.0},
    }
    verdicts = bench.verdicts(result)
    assert verdicts["pair_ratio (sync)"]["met"] and not verdicts["pair_ratio (asyncio)"]["met"]
    assert not verdicts["wake p99 ms (asyncio)"]["met"] and verdicts["wake p99 ms (sync)"]["met"]
    assert verdicts["Redis usec per acquire"]["met"] and not verdicts["Redis usec per report"]["met"]


def test_the_bench_command_prints_and_writes_every_figure(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        bench_command,
        [
            "--redis-url",
            redis_url,
            "--seconds",
            "0.2",
            "--wakes",
            "20",
            "--queued",
            "100",
            "--script-calls",
            "50",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["verdicts"]) >= {"pair_ratio (sync)", "wake p50 ms (asyncio)", "deep queue ratio"}
    assert data["command"].startswith("bench --redis-url")
    for label in data["verdicts"]:
        assert label in result.output
    assert _keys_left(redis_url) == []


def test_the_bench_command_needs_a_reachable_redis() -> None:
    result = CliRunner().invoke(bench_command, ["--redis-url", "redis://127.0.0.1:1/0", "--seconds", "0.1"])
    assert result.exit_code == 1
    assert "cannot reach Redis" in result.output


@pytest.mark.skipif(instructions.missing_tools() is not None, reason=f"{instructions.missing_tools()}")
@pytest.mark.timeout(300)  # callgrind runs Redis ~50x slower: 40-90 s here while the other worker runs
def test_the_instructions_measurement_counts_every_phase(redis_url: str, tmp_path: Path) -> None:
    """A tiny run of ``bench --instructions``: the shape of its figures, not their size."""
    out, markdown = tmp_path / "instructions.json", tmp_path / "instructions.md"
    result = CliRunner().invoke(
        bench_command,
        ["--instructions", "--redis-url", redis_url, "--calls", "3", "--queued", "20", "--seconds", "0.1",
         "--out", str(out), "--markdown", str(markdown)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    counted = data["instructions"]
    assert (counted["calls"], counted["shallow"], counted["deep"]) == (3, instructions.SHALLOW, 20)
    assert [row["phase"] for row in counted["rows"]] == list(instructions.PHASES)
    for row in counted["rows"]:
        assert row["shallow"] > 0 and row["deep"] > 0, row
        assert row["depth_ratio"] == pytest.approx(row["deep"] / row["shallow"])
    scale = counted["rows"][0]
    assert scale["phase"] == "incr_decr" and scale["pair_ratio"] == pytest.approx(1.0)
    by_phase = {row["phase"]: row for row in counted["rows"]}
    # the queue across tenants: 20 waiters taking turns among 20 tenants, against 10 of one tenant
    assert counted["tenants"] == 20
    for phase in ("join_queue", "grant_head", "hand_over"):
        assert by_phase[f"{phase}_tenants"]["deep"] > 0 and by_phase[f"{phase}_tenants"]["shallow"] > 0
    assert "across tenants" in markdown.read_text()
    # the floor: two empty calls cost less than two calls that do the work
    assert by_phase["empty_fcall"]["shallow"] < by_phase["acquire_release"]["shallow"]
    assert by_phase["empty_evalsha"]["shallow"] < by_phase["acquire_release"]["shallow"]
    assert set(data["client"]) == {f"{api}/{parser}" for api in ("sync", "asyncio") for parser in bench.parsers()}
    for row in data["client"].values():
        assert row["ratio"] == pytest.approx(row["raw_pairs_s"] / row["governor_pairs_s"])
        # the client's own CPU per pair: a governed pair's work includes building and parsing two calls
        assert 0 < row["raw_cpu_us"] < row["governor_cpu_us"], row
    page = markdown.read_text()
    assert page.startswith("# ") and data["command"] in page and "--instructions" in data["command"].split()
    for label in instructions.PHASES.values():
        assert label in page
    assert _keys_left(redis_url) == []


def test_the_instructions_measurement_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = redis_server.shutil.which
    # (a redis-server as found, also where there is none: only valgrind is missing here)
    monkeypatch.setattr(
        redis_server.shutil, "which", lambda name: None if name == "valgrind" else real(name) or f"/usr/bin/{name}"
    )
    assert instructions.missing_tools() == "valgrind not found: apt-get install valgrind"
    result = CliRunner().invoke(bench_command, ["--instructions"])
    assert result.exit_code == 1
    assert "--instructions needs valgrind" in result.output and "apt-get install valgrind" in result.output
    with pytest.raises(instructions.InstructionsUnavailable, match="valgrind"):
        instructions.measure_instructions(calls=1)


def test_the_pure_python_parser_can_be_forced() -> None:
    assert bench.parsers()[-1] == "python"
    assert "parser_class" in bench.parser_options("python", asyncio=False)
    assert bench.parser_options(None, asyncio=True) == {}
    with pytest.raises(ValueError, match="not available"):
        bench.parser_options("nonesuch", asyncio=False)


def test_the_function_breakdown_reads_names_across_dumps_and_running_calls(tmp_path: Path) -> None:
    """scripts/callgrind_functions.py: a function named in an earlier dump
    of the run is named in the phase's; a call still running at the dump
    (calls=0) is inclusive cost, not the caller's own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("callgrind_functions", ROOT / "scripts" / "callgrind_functions.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    (tmp_path / "callgrind.7.1").write_text(
        "desc: Trigger: Client Request: dump warm\nevents: Ir\nfn=(1) main\ncfn=(2) luaV_execute\ncalls=1 5\n3 40\n"
        "fn=(2)\n5 40\n"
    )
    (tmp_path / "callgrind.7.2").write_text(
        "desc: Trigger: Client Request: dump phase\nevents: Ir\nfn=(1)\ncfn=(2)\ncalls=0 5\n3 900\n"
        "fn=(2)\n5 300\n+1 300\ncfn=(3) scriptCall\ncalls=3 9\n6 200\nfn=(3)\n9 200\n"
    )
    dump = tool.dump_of(tmp_path, "phase")
    assert dump.name == "callgrind.7.2"
    own, callees, calls = tool.costs(dump, tool.names(tmp_path))
    assert own == {"luaV_execute": 600, "scriptCall": 200}
    assert callees["main"] == {"luaV_execute": 900} and callees["luaV_execute"] == {"scriptCall": 200}
    assert calls[("luaV_execute", "scriptCall")] == 3
    with pytest.raises(SystemExit, match="no dump labelled 'other'"):
        tool.dump_of(tmp_path, "other")


@pytest.mark.parametrize("operation", ["pair", "call"])
def test_the_client_cost_tool_runs_each_way_and_leaves_no_key(redis_url: str, operation: str) -> None:
    """scripts/client_cost.py: both facades, both operations; canned replies
    take Redis out (the round trips gone: a fraction of the whole call's
    client CPU), the functions sent alone run (their resent arguments pass
    the functions' checks), and the governor's keys and the counter are
    gone after (the direct calls release or report-and-release their
    leases). Whether the functions alone cost less than the whole call is
    the tool's figure, not a test's: the governor's Python is a few percent
    of the call, within a busy machine's noise over 30 calls."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("client_cost", ROOT / "scripts" / "client_cost.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    client = redis.Redis.from_url(redis_url)
    before = set(client.scan_iter("*client-cost-*"))
    try:
        for figures in (
            tool.measure_sync(redis_url, operation, 30),
            asyncio.run(tool.measure_async(redis_url, operation, 30)),
        ):
            assert set(figures) == {"redis", "canned", "direct", "raw"}
            assert all(value > 0 for value in figures.values())
            assert figures["canned"] < figures["redis"]
        assert set(client.scan_iter("*client-cost-*")) == before
    finally:
        client.close()
