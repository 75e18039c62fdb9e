"""The swarm benchmark, small and fast: orderings that must always hold.

A short scenario (2 hosts x 5 agents, a hidden limit of 3, 0.1 s calls, a
1 s window) runs through the real CLI with host *processes* on the
session's Redis, and its JSON output is checked for orderings, never for
speeds: the fleet governor gets fewer 429s than no coordination, and it
never lets the fleet push above the hidden limit for longer than one
detection (a refusal plus one service time). The figures themselves are
checked on synthetic records where the right answer is known.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from click.testing import CliRunner

from bench import analysis, kit
from bench import console as console_module
from bench import host as host_module
from bench.cli import swarm_command
from bench.console import Console
from bench.embedded import Backend
from bench.host import HostJob, HostResult, config_from_json, config_to_json
from bench.provider import LIMITED, OK, MockProvider, ProviderConfig, RunRecord
from bench.report import draw_chart, legend, table, write_chart, write_json
from bench.scenario import (
    Scenario,
    governor_config,
    governor_names,
    parse_option,
    parse_ungoverned,
    strategy_pattern,
    strategy_reports,
    strategy_runtime,
    ungoverned_at,
)
from bench.swarm import run_swarm
from governor import AsyncGovernor, Governor, Outcome
from governor.errors import ConfigError
from governor.policies import AdaptivePolicy, FixedPolicy, SeedPolicy

from .conftest import FakeClock

LATENCY = 0.1
REJECT = 0.005
SMALL = [
    "--hosts", "2", "--agents", "5", "--calls", "6", "--limit", "3", "--latency", str(LATENCY),
    "--reject-latency", str(REJECT), "--max-capacity", "6", "--window", "1", "--poll", "0.25",
    "--backoff-base", "0.05", "--schedule", "", "--max-time", "40", "--settle-windows", "1", "--quiet",
]  # fmt: skip


@pytest.fixture(scope="module")
def small_run(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("swarm")
    result = CliRunner().invoke(
        swarm_command, ["--redis-url", redis_url, "--strategies", "none,fleet", "--out", str(out), *SMALL]
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((out / "swarm.json").read_text())
    data["_out"] = out
    data["_stdout"] = result.output
    return data


def metrics(run: dict[str, Any], strategy: str) -> dict[str, Any]:
    return run["strategies"][strategy]["metrics"]  # type: ignore[no-any-return]


def test_every_strategy_finishes_its_workload(small_run: dict[str, Any]) -> None:
    for strategy in ("none", "fleet"):
        m = metrics(small_run, strategy)
        assert m["done"] == 1.0 and m["finish"] is not None, m["error_samples"]
        assert m["ok"] == 2 * 5 * 6
        assert m["errors"] == 0 and m["lost"] == 0, m["error_samples"]


def test_fleet_gets_fewer_429s_than_no_coordination(small_run: dict[str, Any]) -> None:
    assert metrics(small_run, "fleet")["limited"] < metrics(small_run, "none")["limited"]


def test_fleet_never_stays_above_the_hidden_limit_longer_than_one_detection(small_run: dict[str, Any]) -> None:
    fleet, none = metrics(small_run, "fleet"), metrics(small_run, "none")
    assert fleet["peak_served"] <= 3  # the provider itself never serves more than its limit
    assert fleet["longest_over"] <= REJECT + LATENCY
    assert fleet["time_over"] < none["time_over"]


def test_figures_are_consistent(small_run: dict[str, Any]) -> None:
    none, fleet = metrics(small_run, "none"), metrics(small_run, "fleet")
    assert none["wait_p50"] is None  # nothing to wait for without a governor
    assert fleet["wait_p50"] is not None and fleet["wait_p50"] <= fleet["wait_p95"]
    for m in (none, fleet):
        assert m["attempts"] == m["ok"] + m["limited"] + m["quota"]
        assert 0 < m["goodput"] <= 1.5
        assert 0.5 <= m["jain"] <= 1.0  # two hosts: 1/n = 0.5 at worst
        assert m["call_p50"] <= m["call_p95"]
    trace = small_run["strategies"]["fleet"]["trace"]
    assert trace["governor"]["rows"], "the driver sampled the governor's capacity"
    assert max(row[1] for row in trace["governor"]["rows"]) <= 6  # never above max_capacity
    assert small_run["environment"]["hosts"] == "host processes on this machine"


def test_outputs_are_written(small_run: dict[str, Any]) -> None:
    out: Path = small_run["_out"]
    assert (out / "swarm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert small_run["command"].startswith("swarm --redis-url")
    assert "--hosts 2 --agents 5" in small_run["command"] and "--quiet" in small_run["command"]
    assert "none" in small_run["_stdout"] and "fleet" in small_run["_stdout"]
    assert small_run["scenario"]["strategies"] == ["none", "fleet"]


def test_the_swarm_leaves_no_keys_behind(small_run: dict[str, Any], redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        left = [k for k in client.scan_iter("*") if b"sim-" in k or k.startswith(b"governor-sim")]
    finally:
        client.close()
    assert left == []


async def test_hosts_are_threads_on_an_in_process_fakeredis() -> None:
    backend = Backend("fakeredis", None, fake_server=fakeredis.FakeServer())
    scenario = Scenario(
        hosts=2, agents=3, calls=3, strategies=("fixed", "fleet"), max_capacity=4, window=1.0, poll=0.25,
        backoff_base=0.05, max_time=30, lead=0.2,
    )  # fmt: skip
    provider = ProviderConfig(limit=2, latency_mean=0.05, latency_sigma=0.0)
    result = await run_swarm(scenario, provider, backend)
    assert "threads" in result.environment["hosts"]
    assert "fakeredis" in result.environment["redis"]
    for run in result.runs.values():
        assert run.metrics.done == 1.0, run.metrics.error_samples
    assert "fleet" in table(result)


def test_external_provider_and_workers(redis_url: str, tmp_path: Path) -> None:
    """What docker-compose runs: a provider and a worker in their own processes."""
    python = [sys.executable, "-m", "bench"]
    provider_cmd = [*python, "provider", "--port", "0", "--limit", "2", "--latency", "0.05"]
    worker_cmd = [*python, "worker", "--redis-url", redis_url, "--namespace", "governor-sim-test"]
    with (
        subprocess.Popen(provider_cmd, stdout=subprocess.PIPE, text=True) as provider,
        subprocess.Popen(worker_cmd) as worker,
    ):
        try:
            assert provider.stdout is not None
            url = provider.stdout.readline().split()[3].removesuffix("/v1")
            result = CliRunner().invoke(
                swarm_command,
                [
                    "--redis-url", redis_url, "--provider-url", url, "--workers", "external",
                    "--namespace", "governor-sim-test", "--hosts", "1", "--agents", "3", "--calls", "3",
                    "--strategies", "fleet", "--max-capacity", "4", "--window", "1", "--poll", "0.25",
                    "--out", str(tmp_path), "--quiet",
                ],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            data = json.loads((tmp_path / "swarm.json").read_text())
            assert data["provider"]["limit"] == 2  # read from the provider, not the driver's defaults
            assert data["strategies"]["fleet"]["metrics"]["done"] == 1.0
            assert "external workers" in data["environment"]["hosts"]
        finally:
            provider.terminate()
            worker.terminate()
            provider.wait(10)
            worker.wait(10)


@pytest.mark.timeout(300)  # two proxy processes and two hosts start: slow on a busy machine
def test_fleet_proxy_governs_the_hosts_through_two_proxies(redis_url: str, tmp_path: Path) -> None:
    """The hosts call the governing proxies, not the provider: the fleet's
    limit holds (the provider never serves above its own), the workload is
    done, and the proxies' governor leaves no key behind."""
    result = CliRunner().invoke(
        swarm_command, ["--redis-url", redis_url, "--strategies", "fleet-proxy", "--out", str(tmp_path), *SMALL]
    )
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "swarm.json").read_text())["strategies"]["fleet-proxy"]
    m = run["metrics"]
    assert m["done"] == 1.0 and m["ok"] == 2 * 5 * 6, m["error_samples"]
    assert m["errors"] == 0, m["error_samples"]
    assert m["wait_p50"] is None  # the agents wait in the proxies, not in a governor of their own
    in_flight = [row[2] for row in run["trace"]["governor"]["rows"]]
    assert 0 < max(in_flight) <= 6  # the proxies held the fleet governor's leases, never above max_capacity
    client = redis.Redis.from_url(redis_url)
    try:
        assert [k for k in client.scan_iter("*") if b"fleet-proxy" in k] == []
    finally:
        client.close()


async def test_fleet_proxy_needs_a_shared_redis() -> None:
    backend = Backend("fakeredis", None, fake_server=fakeredis.FakeServer())
    scenario = Scenario(hosts=1, agents=1, calls=1, strategies=("fleet-proxy",))
    with pytest.raises(ValueError, match="Redis they can reach"):
        await run_swarm(scenario, ProviderConfig(), backend)


def test_external_workers_need_a_shared_redis() -> None:
    result = CliRunner().invoke(swarm_command, ["--workers", "external", "--quiet"])
    assert result.exit_code == 2
    assert "--redis-url" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--strategies", "none,magic"], "unknown strategy"),
        (["--strategies", "fleet,fleet"], "once"),
        (["--set", "cut_factor=2"], "cut_factor"),
        (["--set", "nonsense=1"], "unknown governor setting"),
        (["--set", "policy=seed"], "own option"),
        (["--schedule", "later"], "SECONDS:LIMIT"),
        (["--retry-after", "soon"], "retry-after"),
        (["--ungoverned", "soon:8"], "SECONDS:CALLERS"),
    ],
)
def test_bad_swarm_options_are_refused_before_anything_runs(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(swarm_command, [*args, "--quiet"])
    assert result.exit_code == 2
    assert needle in result.output


# -- strategies -------------------------------------------------------------------------


def test_the_fixed_semaphore_never_adapts(redis_url: str, name: str) -> None:
    config = governor_config(Scenario(max_capacity=5), "fixed")
    assert config is not None and isinstance(config.policy, FixedPolicy)
    client = redis.Redis.from_url(redis_url)
    gov = Governor(client, name, config, clock=FakeClock())
    try:
        for _ in range(50):
            gov.report(Outcome.RATE_LIMITED)
        status = gov.status()
    finally:
        gov.close()
        client.close()
    assert status.capacity == 5 and not status.paused and status.policy == "fixed"
    assert status.window_rate_limited == 50  # recorded, but nothing is learnt from them
    assert not strategy_reports("fixed")  # and its agents never report anyway: a bare semaphore


def test_each_strategy_gets_its_governors() -> None:
    scenario = Scenario(hosts=3, max_capacity=10, window=8.0)
    assert governor_config(scenario, "none") is None
    assert governor_names("p", "none", 3) == []
    assert governor_names("p", "fleet", 3) == ["p-fleet"] * 3
    assert governor_names("p", "per-host", 3) == ["p-per-host-0", "p-per-host-1", "p-per-host-2"]
    per_host = governor_config(scenario, "per-host")
    assert per_host is not None and per_host.max_capacity == 4 and per_host.policy == SeedPolicy()
    adaptive_hosts = governor_config(Scenario(hosts=3, window=8.0, per_host_policy="adaptive"), "per-host")
    assert adaptive_hosts is not None and adaptive_hosts.policy == AdaptivePolicy()
    assert adaptive_hosts.policy.resolved(adaptive_hosts.window).probe_interval == 2.0  # a quarter of the window
    seed = governor_config(scenario, "fleet-seed")
    assert seed is not None and seed.policy == SeedPolicy() and seed.max_capacity == 10
    fleet = governor_config(Scenario(window=8.0, fleet_options=(("cut_factor", 0.8), ("poll", 0.5))), "fleet")
    assert fleet is not None and isinstance(fleet.policy, AdaptivePolicy)
    assert fleet.policy.cut_factor == 0.8 and fleet.poll == 0.5
    assert fleet.policy.probe_interval is None  # follows the window: a quarter of it, as 15 s is of 60 s
    assert fleet.policy.resolved(fleet.window).probe_interval == 2.0
    assert fleet.window == 8.0
    probing = governor_config(Scenario(window=8.0, probe_interval=1.0), "fleet")
    assert probing is not None and probing.policy == AdaptivePolicy(probe_interval=1.0)


def test_a_host_job_carries_its_governor_config_as_json() -> None:
    for strategy in ("fixed", "per-host", "fleet-seed", "fleet"):
        config = governor_config(Scenario(fleet_options=(("cut_factor", 0.8),)), strategy)
        assert config is not None
        data = json.loads(json.dumps(config_to_json(config)))
        assert config_from_json(data) == config, strategy


@pytest.mark.parametrize(
    "settings",
    [{"hosts": 0}, {"strategies": ()}, {"window": 0}, {"client": "curl"}, {"per_host_policy": "greedy"}],
)
def test_bad_scenarios_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Scenario(**settings)


def test_governor_settings_are_typed() -> None:
    assert parse_option("cut_factor=0.85") == ("cut_factor", 0.85)
    assert parse_option("pause-count=9") == ("pause_count", 9)
    assert parse_option("probe_interval=5") == ("probe_interval", 5.0)
    assert parse_option("poll=0.5") == ("poll", 0.5)
    with pytest.raises(ConfigError, match="needs a int"):
        parse_option("pause_count=lots")
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        parse_option("cut_factor")


# -- the figures, on records where the answer is known ----------------------------------------------


def test_ideal_and_saturation() -> None:
    config = ProviderConfig(limit=10, latency_mean=0.5, schedule=((10.0, 5), (20.0, 10)))
    assert analysis.limit_integral(config, 0, 30) == 10 * 10 + 5 * 10 + 10 * 10
    assert analysis.ideal_calls(config, 5, 15) == (10 * 5 + 5 * 5) / 0.5
    assert analysis.ideal_finish(config, 200) == pytest.approx(10.0)
    assert analysis.ideal_finish(config, 300) == pytest.approx(20.0)
    assert analysis.ideal_finish(ProviderConfig(limit=0, latency_mean=1), 1) == float("inf")
    # 12 agents, limit 10: saturated until the third agent finishes
    assert analysis.saturated_until(config, 12, [4.0, 6.0, 8.0, 9.0], 30.0) == 8.0
    # ... and a limit that drops to 5 ends it when it drops
    assert analysis.saturated_until(config, 12, [], 30.0) == 30.0
    assert analysis.saturated_until(config, 8, [], 30.0) == 0.0


def test_small_statistics() -> None:
    assert analysis.jain([1, 1, 1, 1]) == 1.0
    assert analysis.jain([1, 0, 0, 0]) == 0.25
    assert analysis.jain([0, 0]) is None
    assert kit.percentile([], 50) is None
    assert kit.percentile([3, 1, 2, 4], 50) == 2
    assert kit.percentile([3, 1, 2, 4], 95) == 4


def _record(ok_times: list[float], limited_times: list[float]) -> RunRecord:
    responses = [(t, t, OK) for t in ok_times] + [(t, t, LIMITED) for t in limited_times]
    return RunRecord(started_wall=1000.0, responses=sorted(responses, key=lambda r: r[1]))


def test_goodput_steady_state_and_recovery_on_a_known_record() -> None:
    # Limit 10, latency 1 s: ideal 10 calls/s, halved at 20 s. The fleet does
    # 10/s, then 3/s for one window after the change, then 5/s.
    config = ProviderConfig(limit=10, latency_mean=1.0, schedule=((20.0, 5),))
    ok = [i / 10 for i in range(200)] + [20 + i / 3 for i in range(12)] + [24 + i / 5 for i in range(80)]
    limited = [20.5, 21.0, 30.0]
    host = HostResult(host=0, strategy="fleet", agents=40, attempts=len(ok) + 3, ok=len(ok))
    host.success_at = [1000.0 + t for t in ok]
    host.finished_at = [1040.0] * 40
    m = analysis.analyse(
        "fleet", config, _record(ok, limited), [host], window=4.0, settle_windows=1.0, workload=len(ok), max_time=60
    )
    assert m.finish == 40.0
    assert m.limited == 3 and m.limited_share == pytest.approx(3 / (len(ok) + 3))
    # steady state: [4, 20) and [24, 40): 160 + 80 successes of an ideal 160 + 80
    assert m.steady_goodput == pytest.approx(1.0)
    assert m.steady_limited_share == pytest.approx(1 / 241)
    (recovery,) = m.recoveries
    assert (recovery.old, recovery.new) == (10, 5)
    assert recovery.windows == 2  # [20, 24) reaches 12/20, [24, 28) reaches 20/20
    assert recovery.window_goodput[:2] == [pytest.approx(0.6), pytest.approx(1.0)]
    assert recovery.window_429s[0] == 2
    assert m.jain is None  # one host


def test_an_unfinished_run_says_how_much_was_done() -> None:
    config = ProviderConfig(limit=2, latency_mean=1.0)
    host = HostResult(host=0, strategy="none", agents=4, attempts=5, ok=5)
    host.finished_at = [None] * 4
    m = analysis.analyse(
        "none", config, _record([1, 2, 3, 4, 5], []), [host], window=1.0, settle_windows=0, workload=20, max_time=10
    )
    assert m.finish is None and m.done == 0.25
    assert m.saturated_until == 10
    assert m.goodput == pytest.approx(5 / 20)


def test_json_and_chart_of_a_result(tmp_path: Path) -> None:
    from bench.swarm import StrategyRun, SwarmResult

    config = ProviderConfig(limit=2, latency_mean=1.0)
    record = _record([1, 2, 3], [1.5])
    record.trace = [(0.1 * i, 2, 1, 2, 2, i // 10, 0) for i in range(40)]
    host = HostResult(host=0, strategy="fleet", agents=2, attempts=4, ok=3)
    host.finished_at = [3.0 + 1000, 3.0 + 1000]
    m = analysis.analyse("fleet", config, record, [host], window=1.0, settle_windows=0, workload=3, max_time=10)
    result = SwarmResult(
        Scenario(hosts=1, agents=2, calls=1, strategies=("fleet",)),
        config,
        {"fleet": StrategyRun(m, record, [(0.5, 2, 1, 0, False)])},
        {"hosts": "test"},
    )
    write_json(result, tmp_path / "r.json", "python -m bench swarm")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["command"] == "python -m bench swarm"
    assert data["strategies"]["fleet"]["trace"]["governor"]["rows"] == [[0.5, 2, 1, 0, 0]]
    write_chart(result, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert "| fleet |" in table(result, markdown=True)
    again = SwarmResult.from_json(data)  # a result read back draws and tabulates the same
    assert table(again) == table(result)
    assert again.runs["fleet"].metrics.to_json() == result.runs["fleet"].metrics.to_json()


# -- shutting down, and what the terminal shows ------------------------------------------------

PROGRESS = re.compile(r"\[\d+/\d+\] ")
WARNING = re.compile(r"warning|cancel of|failed|unreachable", re.IGNORECASE)
#: a run stopped at its deadline with agents still queued, in calls and backing off
STOPPED = [
    "--hosts", "2", "--agents", "6", "--calls", "1000", "--limit", "3", "--latency", "0.05",
    "--reject-latency", "0.005", "--max-capacity", "4", "--window", "1", "--poll", "0.25",
    "--backoff-base", "0.05", "--schedule", "", "--max-time", "2", "--settle-windows", "0",
]  # fmt: skip


def mixed_lines(output: str) -> list[str]:
    """Lines that hold both progress text and a warning (split on newlines only:
    a carriage return does not end a line for this purpose)."""
    return [line for line in output.split("\n") if PROGRESS.search(line) and WARNING.search(line)]


def test_the_console_never_prints_a_message_into_a_progress_line(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", screen)  # one terminal shows both
    console = Console(live=True)
    with console.showing_logs():
        console.progress("[1/2] fixed  5.1 s  ok 37/768")
        logging.getLogger("governor.test").warning("governor 'x': cancel of abc failed")
        console.progress("[1/2] fixed  5.2 s  ok 38/768")
        console.message("host process 3: WARNING: something")
        console.progress("[1/2] fixed  5.3 s  ok 39/768")
        console.line("[1/2] fixed      done: 39/768 calls in 5.3 s")
        console.progress("[2/2] fleet  0.1 s  ok 0/768")
    output = screen.getvalue()
    assert mixed_lines(output) == []
    assert "warning: governor 'x': cancel of abc failed\n" in output
    assert "\rhost process 3" not in output and "done: 39/768" in output
    assert output.endswith("\n")  # the live line is ended when the run is over
    assert all(len(part) <= console.width for line in output.split("\n") for part in line.split("\r"))


def test_a_stopped_run_shuts_down_cleanly_and_prints_no_warning_into_progress(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host processes stop their agents at the deadline (queued, calling, backing off),
    let them give back places and leases, and only then close their governors; what a
    host process prints is relayed by the driver, never into the live progress line."""
    monkeypatch.setattr(console_module, "_is_tty", lambda: True)
    result = CliRunner().invoke(
        swarm_command, ["--redis-url", redis_url, "--strategies", "fixed,fleet", "--out", str(tmp_path), *STOPPED]
    )
    assert result.exit_code == 0, result.output
    assert "\r[1/2] fixed" in result.output  # the live progress line was drawn
    assert mixed_lines(result.output) == []
    assert "cancel of" not in result.output and "unreachable" not in result.output, result.output
    data = json.loads((tmp_path / "swarm.json").read_text())
    for strategy in ("fixed", "fleet"):
        m = metrics(data, strategy)
        assert m["finish"] is None and m["errors"] == 0, m["error_samples"]  # stopped, not failed
        assert not any("did not stop" in e for e in m["error_samples"])


async def test_hosts_as_threads_close_their_governors_after_their_agents(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when giving a place back is slow (a busy Redis), it is done before the
    governor is closed: no "cancel of ... failed" on a clean shutdown."""
    real = AsyncGovernor._abandon
    given_back: list[bool] = []  # per place given back: was its governor still open?

    async def slow_abandon(self: AsyncGovernor, lease_id: str) -> str:
        await asyncio.sleep(1.5)
        try:
            return await real(self, lease_id)
        finally:
            given_back.append(not self._closed)

    monkeypatch.setattr(AsyncGovernor, "_abandon", slow_abandon)
    backend = Backend("fakeredis", None, fake_server=fakeredis.FakeServer())
    scenario = Scenario(
        hosts=2, agents=6, calls=1000, strategies=("fixed",), max_capacity=4, window=1.0, poll=0.25,
        backoff_base=0.05, max_time=2, lead=0.2,
    )  # fmt: skip
    provider = ProviderConfig(limit=3, latency_mean=0.05, latency_sigma=0.0)
    with caplog.at_level(logging.WARNING, logger="governor"):
        result = await run_swarm(scenario, provider, backend)
    m = result.runs["fixed"].metrics
    assert m.finish is None and not any("did not stop" in e for e in m.error_samples)
    assert given_back and all(given_back), given_back  # agents stopped at the deadline, queued
    assert [r.getMessage() for r in caplog.records if r.name.startswith("governor")] == []


# -- the tables and the chart --------------------------------------------------------------------


def _demo_like_result() -> Any:
    """Two strategies on a limit halved at 4 s and restored at 8 s: one stopped at
    12 s, one finished at 9 s, before a whole 2 s window after the restore."""
    from bench.swarm import StrategyRun, SwarmResult

    config = ProviderConfig(limit=32, latency_mean=0.25, schedule=((4.0, 16), (8.0, 32)))
    runs = {}
    for name, end, done in (("fixed", None, 0.04), ("fleet", 9.05, 1.0)):
        stop = end or 12.0
        ok_times = [i * 0.01 for i in range(int(stop * 100 * done))]
        record = _record(ok_times, [1.0, 2.0])
        record.trace = [(0.1 * i, config.limit_at(0.1 * i), 10, 10, 10, i, 0) for i in range(int(stop * 10) + 5)]
        host = HostResult(host=0, strategy=name, agents=128, attempts=len(ok_times) + 2, ok=len(ok_times))
        host.finished_at = [1000.0 + end if end else None] * 128
        host.success_at = [1000.0 + t for t in ok_times]
        m = analysis.analyse(
            name, config, record, [host], window=2.0, settle_windows=1.0, workload=len(ok_times) if end else 768,
            max_time=12.0,
        )  # fmt: skip
        runs[name] = StrategyRun(m, record, [(0.5, 32, 10, 0, False)] if name == "fleet" else [])
    scenario = Scenario(hosts=8, agents=16, calls=6, strategies=("fixed", "fleet"), window=2.0, max_time=12.0)
    return SwarmResult(scenario, config, runs, {"cpus": 2}, {})


def test_a_recovery_the_run_ended_before_is_not_measured_not_never() -> None:
    result = _demo_like_result()
    fleet = result.runs["fleet"].metrics
    halving, restore = fleet.recoveries
    assert restore.at == 8.0 and restore.windows is None and not restore.measured  # ended at 9.05 s
    assert halving.measured
    wide = table(result)
    assert next(line for line in wide.splitlines() if line.startswith("fleet")).endswith(
        "32->16: 1, 16->32: not measured (run ended)"
    )
    assert next(line for line in wide.splitlines() if line.startswith("fixed")).endswith("never, 16->32: never")
    assert "not measured (run ended)" in legend(result)
    compact = table(result, wide=False)
    assert next(line for line in compact.splitlines() if line.startswith("fleet")).endswith(" / -")
    assert "-: not measured" in legend(result, wide=False)


def test_the_default_table_fits_an_80_column_terminal() -> None:
    from bench.swarm import StrategyRun

    result = _demo_like_result()
    fixed = result.runs["fixed"]
    widest = dataclasses.replace(fixed.metrics, strategy="fleet-seed", limited=172_180, done=0.81)
    result.runs["fleet-seed"] = StrategyRun(widest, fixed.record, [])
    result.scenario = dataclasses.replace(result.scenario, max_time=120.0)
    assert ">120 s (81%)" in table(result, wide=False)
    for text in (table(result, wide=False), legend(result, wide=False)):
        assert max(len(line) for line in text.splitlines()) <= 80, text
    assert max(len(line) for line in table(result).splitlines()) > 80  # the wide one has every column
    compact_header = table(result, wide=False).splitlines()[0].split()
    assert "Jain" not in compact_header and "Jain" in table(result).splitlines()[0]


def test_demo_and_swarm_take_wide() -> None:
    from bench.cli import demo_command

    for command in (demo_command, swarm_command):
        assert "--wide" in CliRunner().invoke(command, ["--help"]).output


def test_the_chart_tells_the_limit_from_the_ideal_and_ends_each_run_where_it_ended() -> None:
    import matplotlib.pyplot as plt

    result = _demo_like_result()
    fig = draw_chart(result)
    try:
        axes = fig.axes
        lines = {line.get_label(): line for ax in axes for line in ax.get_lines()}
        limit, ideal = lines["hidden limit"], lines["ideal"]
        assert (limit.get_linestyle(), limit.get_color()) != (ideal.get_linestyle(), ideal.get_color())
        assert limit.get_linestyle() != ideal.get_linestyle() and limit.get_color() != ideal.get_color()
        legend_labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "hidden limit" in legend_labels and "ideal" in legend_labels
        top = [ax for ax in axes if ax.get_title()]
        assert [ax.get_title().split("\n")[0] for ax in top] == ["fixed", "fleet"]
        ends = {ax.get_title().split("\n")[0]: ax.get_xlim() for ax in top}
        assert ends["fixed"] == pytest.approx((0, 12.0))  # stopped at max_time
        assert ends["fleet"] == pytest.approx((0, 9.05))  # its own end, not the timeout
        bottoms = [ax for ax in axes if ax.get_xlabel() == "seconds"]
        assert [ax.get_xlim()[1] for ax in bottoms] == pytest.approx([12.0, 9.05])
    finally:
        plt.close(fig)


def test_a_shared_account_counts_the_fleet_against_what_the_others_leave() -> None:
    # Limit 10, latency 1 s, for 40 s. Ungoverned callers hold 4 slots all along
    # (four 1 s calls a second) and get 10 429s; the fleet does 6/s: all of what is left.
    config = ProviderConfig(limit=10, latency_mean=1.0)
    theirs = [(i / 4, i / 4 + 1.0, OK) for i in range(156)] + [(t, t + 0.01, LIMITED) for t in range(10)]
    fleet_ok = [i / 6 for i in range(240)]
    provider_ok = sorted(fleet_ok + [b for _, b, _ in theirs[:156]])
    provider_limited = [b for _, b, _ in theirs[156:]]
    host = HostResult(host=0, strategy="fleet", agents=40, attempts=240, ok=240)
    host.success_at = [1000.0 + t for t in fleet_ok]
    host.finished_at = [1040.0] * 40
    m = analysis.analyse(
        "fleet", config, _record(provider_ok, provider_limited), [host], window=4.0, settle_windows=1.0,
        workload=240, max_time=60, background=theirs,
    )  # fmt: skip
    assert (m.ok, m.limited, m.attempts) == (240, 0, 240)  # the others' answers are not the fleet's
    assert m.steady_goodput == pytest.approx(1.0, abs=0.03)  # 6/s of the 6/s they leave
    assert analysis.occupancy(theirs, 2.0, 10.0) == pytest.approx(4 * 8)  # four slots held for 8 s


def test_the_swarm_cli_shares_the_account_with_ungoverned_callers(redis_url: str, tmp_path: Path) -> None:
    """--ungoverned 0:2: two callers outside the fleet take their share of the
    hidden limit of 3; the provider serves them too (its own count), the
    fleet's figures count the fleet alone."""
    result = CliRunner().invoke(
        swarm_command,
        ["--redis-url", redis_url, "--strategies", "fleet", "--ungoverned", "0:2", "--out", str(tmp_path), *SMALL],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "swarm.json").read_text())
    assert data["scenario"]["ungoverned"] == [[0.0, 2]]
    fleet = data["strategies"]["fleet"]
    trace = fleet["trace"]["provider"]
    served_ok = trace["rows"][-1][trace["columns"].index("ok")]  # every success the provider served
    m = fleet["metrics"]
    assert m["ok"] == 2 * 5 * 6  # the fleet's workload, its own successes only
    assert served_ok >= m["ok"] + 20, (served_ok, m["ok"])  # the two others called all along: at 0.1 s a call


def test_ungoverned_callers_follow_their_schedule() -> None:
    scenario = Scenario(ungoverned=parse_ungoverned("0:8, 10:16,20:4"))
    assert scenario.ungoverned == ((0.0, 8), (10.0, 16), (20.0, 4))
    assert [ungoverned_at(scenario, t) for t in (0, 9.9, 10, 25)] == [8, 8, 16, 4]
    assert Scenario.from_json(scenario.to_json()) == scenario
    with pytest.raises(ConfigError, match="SECONDS:CALLERS"):
        parse_ungoverned("soon:8")
    with pytest.raises(ConfigError, match="in time order"):
        Scenario(ungoverned=((5.0, 1), (2.0, 3)))


# -- a fleet of two languages ---------------------------------------------------------------------

needs_node_host = pytest.mark.skipif(
    host_module.node_host_missing() is not None, reason=f"{host_module.node_host_missing()}"
)


def test_fleet_mixed_puts_the_odd_hosts_on_node() -> None:
    assert [strategy_runtime("fleet-mixed", h) for h in range(4)] == ["python", "node", "python", "node"]
    assert [strategy_runtime("fleet-lease", h) for h in range(2)] == ["python", "python"]
    assert strategy_pattern("fleet-mixed") == strategy_pattern("fleet-lease") == "lease"
    assert governor_config(Scenario(strategies=("fleet-mixed",)), "fleet-mixed") == governor_config(
        Scenario(strategies=("fleet-lease",)), "fleet-lease"
    )


async def test_fleet_mixed_needs_a_redis_node_can_reach() -> None:
    backend = Backend("fakeredis", None, fake_server=fakeredis.FakeServer())
    with pytest.raises(ValueError, match="Node hosts, which need a Redis they can reach"):
        await run_swarm(Scenario(hosts=2, agents=1, calls=1, strategies=("fleet-mixed",)), None, backend)


@needs_node_host
async def test_a_node_host_counts_what_the_provider_saw(redis_url: str) -> None:
    """The Node host alone against the provider: its counts are the provider's."""
    provider = MockProvider(ProviderConfig(limit=2, latency_mean=0.05, latency_sigma=0.0, reject_latency=0.005))
    url = await provider.start("127.0.0.1", 0)
    scenario = Scenario(hosts=1, agents=4, calls=3, strategies=("fleet-mixed",), max_capacity=4, window=1.0,
                        poll=0.25, backoff_base=0.05)  # fmt: skip
    config = governor_config(scenario, "fleet-mixed")
    assert config is not None
    name = f"node-host-{uuid.uuid4().hex[:6]}"
    gov = AsyncGovernor(redis.asyncio.Redis.from_url(redis_url), name, config)
    await gov.configure()
    start_at = time.time() + 1.0
    provider.reset(start_at=start_at)
    job = HostJob(
        run_id="t", strategy="fleet-mixed", host=1, agents=4, calls=3, start_at=start_at, deadline=start_at + 30,
        provider_url=url, governor=name, config=config_to_json(config), pattern="lease", backoff_base=0.05,
        runtime="node",
    )  # fmt: skip
    try:
        result = await asyncio.to_thread(host_module.run_node_host, job, redis_url)
        seen = provider.live()
    finally:
        await provider.stop()
        await gov.aclose()
        await gov.client.delete(*gov.keys.keys)
        await gov.client.aclose()
    assert result.error_samples == []
    assert (result.host, result.strategy, result.agents) == (1, "fleet-mixed", 4)
    assert result.ok == 12 and all(t is not None for t in result.finished_at)
    assert (result.ok, result.limited) == (int(seen["ok"]), int(seen["limited"]))
    assert result.attempts == result.ok + result.limited + result.errors
    assert len(result.waits) == result.attempts and len(result.call_times) == len(result.success_at) == 12
    assert all(start_at <= t <= start_at + 30 for t in result.success_at)


@needs_node_host
def test_the_mixed_fleet_runs_and_its_figures_are_computed(redis_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        swarm_command, ["--redis-url", redis_url, "--strategies", "fleet-mixed", "--out", str(tmp_path), *SMALL]
    )
    assert result.exit_code == 0, result.output
    figures = metrics(json.loads((tmp_path / "swarm.json").read_text()), "fleet-mixed")
    assert figures["done"] == 1.0, figures["error_samples"]
    assert figures["ok"] == 2 * 5 * 6 and figures["attempts"] >= figures["ok"]
    assert figures["goodput"] is not None and 0 < figures["goodput"]
    assert 0 <= figures["limited_share"] < 1 and figures["jain"] is not None
