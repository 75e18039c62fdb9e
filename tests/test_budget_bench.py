"""The budgets benchmark, small and bounded: the harness computes its figures.

The figures are checked on synthetic records where the right answer is
known; a run of a few seconds (agents as asyncio tasks of the test's own
process, on the session's Redis) and one of the CLI check that every cell
gets its figures and that the outputs are written. Speeds are never
asserted: they are the benchmark's business, not the test suite's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import budget_bench
from bench.budget_bench import (
    STRATEGIES,
    AgentClass,
    BudgetScenario,
    HostJob,
    HostResult,
    Settings,
    analyse_cell,
    goals,
    markdown,
    merge,
    missing_strategy,
    run_budgets,
    scenarios,
    table,
)
from bench.cli import budgets_command
from bench.kit import percentile
from bench.provider import LIMITED, OK, TOKENS, ProviderConfig, RunRecord
from governor.errors import ConfigError

#: tokens bind quickly: 1,000 tokens a second, a bucket of 6,000; four agents ask for far more
SMALL = BudgetScenario(
    "small-tokens",
    "a small account where tokens bind",
    "tokens",
    ProviderConfig(
        limit=64,
        rpm=60_000,
        rpm_bucket=True,
        tpm=60_000,
        burst=0.1,
        latency_mean=0.05,
        latency_sigma=0.0,
        completion_mean=40,
        reject_latency=0.002,
    ),
    (AgentClass("small", 3, prompt_mean=200, max_tokens=100), AgentClass("huge", 1, prompt_mean=800, max_tokens=100)),
)


def available() -> list[str]:
    return [s for s in STRATEGIES if missing_strategy(s) is None]


def test_the_figures_of_a_cell_from_known_records() -> None:
    scenario = BudgetScenario(
        "known", "known", "tokens", ProviderConfig(tpm=600, burst=0.5, rate_period=60.0), (AgentClass("a", 2, 10),)
    )
    settings = Settings(seconds=10.0, settle=4.0)
    # 600 a minute: 10 tokens a second, a bucket of 300 (full at the start, 60 left at 4 s).
    record = RunRecord(
        started_wall=1000.0,
        responses=[(0.0, 1.0, OK), (0.5, 0.6, TOKENS), (3.0, 5.0, OK), (5.0, 5.1, LIMITED), (6.0, 9.0, OK)],
        served=[(1.0, 200, 40), (5.0, 50, 10), (9.0, 30, 10)],
        accepted=3,
        refused={"tokens": 1, "concurrency": 1},
        tagged=[("a/0/0", 0.0), ("a/1/0", 3.0), ("a/0/1", 6.0)],
        levels=[(2.0, 100.0), (4.0, 60.0), (6.0, 0.0)],
        level_kinds=("tokens",),
    )
    host = HostResult(
        host=0,
        calls=[
            ("a/0/0", "a", 0, 1000.0, 1001.0, True),
            ("a/1/0", "a", 1, 1001.0, 1005.0, True),
            ("a/0/1", "a", 0, 1005.5, 1009.0, True),
            ("a/1/1", "a", 1, 1005.0, 1010.0, False),
        ],
        round_trips=12,
    )
    samples = [
        (0.5, []),
        (1.5, [["tokens", 600, 300, 10.0, 0, "header"]]),
        (2.0, [["tokens", 600, 300, 0.0, 0, "header"]]),
    ]
    cell = analyse_cell(scenario, "fleet-budgets", settings, record, [host], samples)
    assert cell["ideal_rate"] == 10.0
    assert cell["goodput"] == pytest.approx(340 / (300 + 10 * 10))  # every token served, over burst + refill
    assert cell["steady_goodput"] == pytest.approx(100 / (60 + 10 * 6))  # served from 4 s on, over stock + refill
    assert cell["share_429"] == pytest.approx(2 / 5)
    assert cell["steady_share_429"] == pytest.approx(1 / 3)
    assert cell["learned_at"] == 1.5
    waits = cell["classes"]["a"]
    assert waits["calls"] == 3
    assert (waits["wait_p50"], waits["wait_p99"]) == (pytest.approx(0.5), pytest.approx(2.0))  # 0, 2 and 0.5 s
    assert waits["worst_agent_p99_over_p50"] == pytest.approx(4.0)  # agent 1: 2 s over the class's 0.5 s
    assert cell["redis_per_request"] == pytest.approx(12 / 5) and cell["redis_per_call"] == pytest.approx(4.0)
    assert cell["throughput"][:2] == [0, 240]


def test_where_concurrency_binds_the_ideal_is_the_limit_over_the_service_time() -> None:
    scenario = BudgetScenario(
        "c", "c", "concurrency", ProviderConfig(limit=2, rpm=600), (AgentClass("a", 4, 10),)
    )  # fmt: skip
    record = RunRecord(started_wall=0.0, responses=[(0.0, 0.5, OK), (0.5, 1.5, OK)], served=[(0.5, 5, 5), (1.5, 5, 5)])
    cell = analyse_cell(scenario, "none", Settings(seconds=2.0, settle=1.0), record, [HostResult(host=0)])
    assert cell["ideal_rate"] == pytest.approx(2 / 0.75)
    assert cell["goodput"] == pytest.approx(2 / (2 / 0.75 * 2))
    assert cell["learned_at"] is None and cell["redis_per_request"] == 0


def test_percentile_and_validation() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 99) == 4.0
    with pytest.raises(ConfigError, match="binds"):
        BudgetScenario("x", "x", "time", ProviderConfig(), (AgentClass("a", 1, 10),))
    with pytest.raises(ConfigError, match="no such limit"):
        BudgetScenario("x", "x", "tokens", ProviderConfig(rpm=10), (AgentClass("a", 1, 10),))
    with pytest.raises(ConfigError):
        AgentClass("a", 0, 10)
    with pytest.raises(ConfigError):
        Settings(seconds=5.0, settle=5.0)
    assert missing_strategy("every") is not None and missing_strategy("none") is None
    for scenario in scenarios(1).values():
        assert BudgetScenario.from_json(json.loads(json.dumps(scenario.to_json()))) == scenario
        assert scenario.provider.rate_period == 60.0  # the governor's budgets are per minute
    cls = AgentClass("h", 1, prompt_mean=20_000, prompt_sigma=1.0, prompt_cap=30_000)
    import random

    sizes = [cls.prompt(random.Random(i)) for i in range(200)]
    assert max(sizes) == 30_000 and min(sizes) >= 8


async def test_a_short_run_computes_every_figure(redis_url: str) -> None:
    strategies = available()
    settings = Settings(seconds=3.0, settle=1.0, in_process=True, seed=5, sample_interval=0.05)
    result = await run_budgets([SMALL], strategies, settings, redis_url)
    cells = result["cells"]["small-tokens"]
    assert list(cells) == strategies
    for strategy, cell in cells.items():
        assert 0 < cell["goodput"] < 2, (strategy, cell)
        assert cell["steady_goodput"] is not None
        assert 0 <= cell["share_429"] <= 1
        assert cell["answers"] > 0 and cell["errors"] == 0, cell["error_samples"]
        small = cell["classes"]["small"]
        assert small["calls"] > 0 and small["wait_p50"] <= small["wait_p99"]
        assert len(cell["throughput"]) == 3
        if strategy == "none":
            assert cell["redis_round_trips"] == 0 and cell["budgets"] == []
        else:
            assert cell["redis_per_request"] >= 1  # at least one round trip per provider request
    if "fleet-budgets" in cells:
        learned = cells["fleet-budgets"]["learned_at"]
        assert learned is not None and learned < 3.0  # the limit came with the first answers' headers
    text = markdown(result, ["python -m bench budgets"])
    assert "## small-tokens" in text and "| none |" in text and "python -m bench budgets" in text
    assert "small-tokens" in table(result)


async def test_agents_on_host_processes(redis_url: str) -> None:
    settings = Settings(seconds=2.0, settle=0.5, hosts=2, seed=9)
    result = await run_budgets([SMALL], ["fleet-concurrency"], settings, redis_url)
    cell = result["cells"]["small-tokens"]["fleet-concurrency"]
    assert cell["errors"] == 0, cell["error_samples"]
    assert cell["classes"]["small"]["calls"] > 0 and cell["classes"]["huge"]["calls"] >= 0
    assert cell["redis_per_request"] >= 1  # counted in the host processes, sent back with their results
    assert result["environment"]["hosts"] == "2 host processes on this machine"


def test_the_budgets_command_writes_its_outputs(redis_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["--redis-url", redis_url, "--scenarios", "uncontended", "--strategies", "none,fleet-concurrency",
            "--seconds", "2", "--settle", "0.5", "--in-process", "--seed", "3", "--out", str(tmp_path)]  # fmt: skip
    done = runner.invoke(budgets_command, args)
    assert done.exit_code == 0, done.output
    data = json.loads((tmp_path / "budgets.json").read_text())
    assert set(data["cells"]["uncontended"]) == {"none", "fleet-concurrency"}
    assert data["cells"]["uncontended"]["fleet-concurrency"]["redis_per_request"] >= 1
    assert "--scenarios uncontended" in data["commands"]["uncontended"]
    assert (tmp_path / "budgets.png").stat().st_size > 0
    report = (tmp_path / "budgets.md").read_text()
    assert "## uncontended" in report and "--in-process" in report
    # --update keeps the scenarios it did not run again
    old = {**data, "cells": {**data["cells"], "other": {}}, "scenarios": {**data["scenarios"], "other": {}}}
    merged = merge(old, data)
    assert set(merged["cells"]) == {"uncontended", "other"}
    bad = runner.invoke(budgets_command, ["--scenarios", "tokens", "--redis-url", redis_url])
    assert bad.exit_code == 2 and "unknown scenario" in bad.output
    bad = runner.invoke(budgets_command, ["--strategies", "fleet-everything", "--redis-url", redis_url])
    assert bad.exit_code == 2 and "unknown strategy" in bad.output


def test_host_jobs_and_results_travel_as_json() -> None:
    job = HostJob(SMALL.to_json(), "none", 1, [("small", 0), ("huge", 0)], "http://127.0.0.1:1", None, None, 1.0,
                  2.0, {"seconds": 3.0})  # fmt: skip
    assert HostJob.from_json(json.loads(json.dumps(job.to_json()))) == job
    result = HostResult(host=1, calls=[("t", "small", 0, 1.0, 2.0, True)], gave_up=2, round_trips=7)
    assert HostResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_budget_bench_is_documented_in_the_module() -> None:
    doc: Any = budget_bench.__doc__
    for name in (*scenarios(), *STRATEGIES):
        assert f"``{name}``" in doc


def test_the_goals_are_judged_from_the_cells() -> None:
    def cell(goodput: float, share: float, **extra: Any) -> dict[str, Any]:
        return {"goodput": goodput, "steady_goodput": goodput, "share_429": share, "steady_share_429": share,
                "learned_at": 0.5, "redis_per_request": 2.0, "classes": {}, **extra}  # fmt: skip

    result: dict[str, Any] = {
        "cells": {
            "tokens-bind": {"none": cell(0.9, 0.5), "fleet-budgets": cell(0.97, 0.0)},
            "requests-bind": {"none": cell(0.99, 0.5), "fleet-budgets": cell(0.97, 0.0)},
            "mixed": {"fleet-budgets": cell(0.9, 0.0, classes={"small": {"worst_agent_p99_over_p50": 2.0},
                                                               "huge": {"worst_agent_p99_over_p50": 3.5}})},
            "uncontended": {"fleet-concurrency": cell(1, 0), "fleet-budgets": cell(1, 0, redis_per_request=3.5)},
        }
    }  # fmt: skip
    verdicts = {goal.split(":")[0] + (" ahead" if "ahead" in goal else ""): met for goal, _, met in goals(result)}
    assert verdicts == {
        "tokens-bind": True, "tokens-bind ahead": True, "requests-bind": True,
        "requests-bind ahead": False,  # none served more
        "mixed": False,  # a huge agent waited 3.5x its class's median
        "uncontended": False,  # 1.5 round trips more than call()
    }  # fmt: skip
