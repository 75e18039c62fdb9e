"""The shares benchmark, small and bounded: the harness computes its figures.

The figures are checked on synthetic leases where the right answer is
known; runs of a second or two per scenario (governor objects in the
test's own process, and once on host processes, on the session's Redis)
and one of the CLI check that every figure and goal is computed and that
the outputs are written. Whether a goal is met is never asserted: timings
are the benchmark's business, not the test suite's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import shares_bench
from bench.cli import shares_command
from bench.shares_bench import (
    SCENARIO_NAMES,
    Group,
    HostJob,
    HostResult,
    Settings,
    ShareScenario,
    analyse,
    first_after,
    first_full,
    goals,
    goals_table,
    hand_over,
    ideal_waits,
    markdown,
    max_open,
    occupancy,
    redis_switch,
    run_shares,
    scenarios,
    shares_per_interval,
    table,
)
from governor.errors import ConfigError

#: a second or so per scenario, on a small fleet
TINY = Settings(seconds=1.2, settle=0.3, agents=24, capacity=4, hold_mean=0.02, hosts=2, in_process=True,
                share_interval=0.6, after_stop=0.5, aging=0.3, flood=2, batch=2, seed=7)  # fmt: skip


def test_hand_overs_and_occupancy() -> None:
    assert hand_over(0.05, 16) == pytest.approx(0.003125)
    assert hand_over(None, 16) is None and hand_over(0.0, 4) is None
    spans = [(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]
    assert occupancy(spans, 0.0, 4.0) == pytest.approx(3.5)
    assert occupancy(spans, 0.5, 1.0) == pytest.approx(1.0)  # two open over half a second
    assert occupancy(spans, 2.0, 3.0) == 0.0
    assert first_after([1.0, 2.0, 3.0], 2.0) == 3.0 and first_after([1.0], 1.0) is None


def test_max_open_counts_intervals_open_at_once() -> None:
    assert max_open([]) == 0
    assert max_open([(0.0, 1.0), (0.5, 2.0), (0.7, 0.8)]) == 3
    assert max_open([(0.0, 1.0), (1.0, 2.0)]) == 1  # one ends as the other starts


def test_first_full_finds_when_every_slot_is_held() -> None:
    spans = [(0.0, 1.0), (0.2, 0.8), (0.9, 2.0)]
    assert first_full(spans, 0.0, 2) == 0.2
    assert first_full(spans, 0.5, 2) == 0.5  # already two at 0.5
    assert first_full(spans, 0.85, 2) == 0.9  # one open at 0.85, the third opens at 0.9
    assert first_full(spans, 1.5, 2) is None
    # one ending when another starts: closed first, so never two at once
    assert first_full([(0.0, 1.0), (1.0, 2.0)], 0.0, 2) is None


def test_shares_per_interval_on_known_spans() -> None:
    by_tenant = {"a": [(0.0, 10.0), (0.0, 10.0), (0.0, 10.0)], "b": [(0.0, 5.0), (5.0, 10.0)]}
    periods = shares_per_interval(by_tenant, 0.0, 10.0, 5.0)
    assert [(p["start"], p["end"]) for p in periods] == [(0.0, 5.0), (5.0, 10.0)]
    for p in periods:
        assert p["shares"]["a"] == pytest.approx(0.75) and p["shares"]["b"] == pytest.approx(0.25)
    # shorter than a step: one interval of the whole span; nobody in flight: no share
    (whole,) = shares_per_interval({"a": [(0.0, 1.0)], "b": []}, 0.0, 2.0, 5.0)
    assert (whole["start"], whole["end"]) == (0.0, 2.0) and whole["shares"] == {"a": 1.0, "b": 0.0}
    (empty,) = shares_per_interval({"a": []}, 0.0, 1.0, 1.0)
    assert empty["shares"] == {"a": None}


def test_ideal_waits_against_the_next_release() -> None:
    releases = [1.0, 1.5, 3.0]
    floors, beyond = ideal_waits([(0.9, 1.2), (1.0, 1.5), (2.0, 3.5), (3.5, 4.0)], releases)
    assert floors == pytest.approx([0.1, 0.5, 1.0])  # the last asked after every release: left out
    assert beyond == pytest.approx([0.2, 0.0, 0.5])


def _lease(group: str, number: int, wanted: float, granted: float, released: float, fence: int,
           before: int | None = None, stopped: bool = False) -> Any:  # fmt: skip
    return (group, number, 1000 + wanted, 1000 + granted, 1000 + released, fence, before, stopped)


def test_the_figures_of_the_interactive_scenario_from_known_leases() -> None:
    settings = Settings(seconds=4.0, settle=0.0, agents=3, capacity=2, hold_mean=1.0, flood=1, batch=1)
    scenario = ShareScenario("interactive", "i", (Group("interactive", 1, "interactive", measured=True),
                                                   Group("sub-agents", 2, "default")))  # fmt: skip
    host = HostResult(
        host=0,
        leases=[
            _lease("sub-agents", 0, 0.0, 0.0, 1.0, 1),
            _lease("sub-agents", 1, 0.0, 0.0, 2.0, 2),
            _lease("interactive", 0, 0.0, 1.0, 3.0, 3, before=2),  # waited 1 s, for the first release
            _lease("sub-agents", 0, 1.0, 2.0, 4.0, 4),
            _lease("interactive", 0, 3.0, 3.5, 4.0, 6, before=4),  # one grant to another while it waited
        ],
    )
    r = analyse(scenario, settings, [host], 1000.0, samples=[(1.0, 2), (2.0, 1)])
    assert r["mean_hold"] == pytest.approx(1.5) and r["hand_over"] == pytest.approx(0.75)
    assert r["utilisation"] == pytest.approx(7.5 / 8)  # 7.5 lease-seconds of 2 x 4
    assert r["idle_per_grant"] == pytest.approx(0.5 / 5)
    assert r["redis_in_flight_mean"] == pytest.approx(0.75) and r["redis_in_flight_min"] == pytest.approx(0.5)
    i = r["groups"]["interactive"]
    assert (
        i["calls"] == 2 and i["wait_p50"] == pytest.approx(0.5) and i["wait_p99_handovers"] == pytest.approx(1 / 0.75)
    )
    assert (i["passed_p50"], i["passed_max"], i["passed_none"], i["passed_at_most_one"]) == (0, 1, 0.5, 1.0)
    assert r["groups"]["sub-agents"]["passed_p50"] is None  # not measured
    # the first release after each request: at 1 s (after asking at 0) and at 4 s (after asking at 3)
    assert r["first_free_p50_handovers"] == pytest.approx(1 / 0.75)
    assert r["beyond_first_free_p99_handovers"] == pytest.approx(0.0)
    assert len(r["series"]["interactive"]) == 40  # bins of 0.1 s


def test_the_figures_of_the_tenants_scenario_from_known_leases() -> None:
    settings = Settings(seconds=4.0, settle=0.0, agents=4, capacity=4, hold_mean=1.0, share_interval=2.0,
                        after_stop=1.0, flood=1, batch=1)  # fmt: skip
    scenario = scenarios(settings)["tenants"]
    a = [_lease("a", n, 0.0, 0.0, 4.0, n) for n in range(3)]
    b = [_lease("b", 0, 0.0, 0.0, 2.0, 3), _lease("b", 0, 2.0, 2.0, 4.2, 4)]
    late = _lease("a", 3, 3.9, 4.05, 4.1, 5)  # granted after its host stopped a: a lost cancellation
    b += [_lease("b", n, 3.9, 4.1 + n / 100, 5.0, 6 + n) for n in range(1, 4)]
    host = HostResult(host=0, leases=[*a, *b, late], stopped_at=1004.0)
    polls = [(3.9, {"a": 3, "b": 1}), (4.05, {"a": 1, "b": 3}), (4.1, {"b": 3}), (4.12, {"b": 4}), (4.2, {"b": 4})]
    r = analyse(scenario, settings, [host], 1000.0, polls=polls)
    assert [p["shares"]["a"] for p in r["intervals"]] == [pytest.approx(0.75), pytest.approx(0.75)]
    assert r["worst_share_off"] == pytest.approx(0.0)
    assert r["stop_at"] == pytest.approx(4.0) and r["a_gone_at"] == pytest.approx(4.1)
    assert r["b_full_at"] == pytest.approx(4.13)  # b's fourth lease in hand
    assert r["cancellations_ignored"] == 1
    unit = r["hand_over"]
    assert r["in_hand_switch_handovers"] == pytest.approx(0.03 / unit)
    # in Redis: a's last lease gone by the poll at 4.1, b holding all four at 4.12
    assert (r["redis_a_gone_at"], r["redis_b_full_at"]) == (4.1, 4.12)
    assert r["switch_from_a_gone_handovers"] == pytest.approx(0.02 / unit)
    assert r["switch_from_stop_handovers"] == pytest.approx(0.12 / unit)
    assert r["poll_interval"] == pytest.approx(0.15 / 3)  # the polls from the stop on: 4.05 to 4.2


def test_redis_switch_from_polls() -> None:
    polls = [(0.9, {"a": 2}), (1.0, {"a": 1, "b": 1}), (1.1, {"b": 1}), (1.2, {"b": 2, "c": 0})]
    assert redis_switch(polls, 1.0, "a", 2) == (1.1, 1.2)
    assert redis_switch(polls, 1.0, "a", 3) == (1.1, None)
    assert redis_switch(polls[:2], 0.0, "a", 2) == (None, None)
    assert redis_switch([], 0.0, "a", 1) == (None, None)


def test_the_figures_of_the_aging_scenario_from_known_leases() -> None:
    settings = Settings(seconds=5.0, settle=1.0, agents=6, capacity=2, hold_mean=0.5, aging=2.0, flood=1, batch=1)
    scenario = scenarios(settings)["aging"]
    host = HostResult(
        host=0,
        leases=[
            _lease("interactive", 0, 0.0, 0.0, 0.5, 1),
            _lease("default", 0, 0.0, 0.0, 0.5, 2),
            _lease("batch", 0, 0.2, 2.3, 2.8, 9, before=2),  # asked before the settle: counted still
            _lease("batch", 0, 2.8, 4.9, 5.4, 20, before=12),
        ],
    )
    r = analyse(scenario, settings, [host], 1000.0, aged=[(2.2, 1, "batch-0"), (2.25, 1, "default-3"),
                                                          (4.8, 1, "batch-0")])  # fmt: skip
    batch = r["groups"]["batch"]
    assert batch["calls"] == 2 and batch["wait_max"] == pytest.approx(2.1)
    assert r["aged"] == 3 and r["age_events"][0] == [2.2, 1, "batch-0"]
    # each batch wait split at its own age entry: aged 2 s after asking, in hand 0.1 s later
    assert r["aged_seen"] == 2 and r["aged_late_max"] == pytest.approx(0.0, abs=1e-9)
    assert r["after_aged_max"] == pytest.approx(0.1) and r["after_aged_p50"] == pytest.approx(0.1)
    assert r["bound"] == pytest.approx(2.0 + r["mean_hold"]) and r["batch_excess"] == pytest.approx(0.1)
    assert r["batch_waits"] == [[0.2, 2.1], [2.8, 2.1]]


def test_the_goals_are_judged_from_the_figures() -> None:
    def group(**values: Any) -> dict[str, Any]:
        return {"calls": 10, "wait_p99": 0.01, "passed_none": 0.9, "passed_at_most_one": 1.0, **values}

    result: dict[str, Any] = {
        "results": {
            "interactive": {"groups": {"interactive": group(wait_p99_handovers=1.5)}, "hand_over": 0.003,
                            "first_free_p99_handovers": 1.0, "beyond_first_free_p99_handovers": 2.5,
                            "utilisation": 0.98, "idle_per_grant": 0.001, "redis_in_flight_mean": 1.0},
            "tenants": {"worst_share_off": 0.06, "intervals": [{}], "switch_from_a_gone_handovers": 0.5,
                        "switch_from_stop_handovers": 3.0, "cancellations_ignored": 0, "poll_interval": 0.001},
            "aging": {"groups": {"batch": group(wait_max=2.04)}, "bound": 2.05, "aged": 3, "max_in_hand": 5,
                      "capacity": 4},
        }
    }  # fmt: skip
    verdicts = [met for _, _, met in goals(result)]
    assert verdicts == [True, False, True, False, True, False, True]  # the witness saw 5 leases in hand of 4
    text = goals_table(result)
    assert text.count("MET ") == 4 and text.count("MISS") == 3
    result["results"]["aging"]["groups"]["batch"] = group(calls=0, wait_max=None)
    assert goals(result)[-1][2] is None  # no batch wait: not judged


def test_validation_and_json() -> None:
    with pytest.raises(ConfigError, match="seconds"):
        Settings(seconds=0.1)
    with pytest.raises(ConfigError, match="flood"):
        Settings(agents=8, flood=4, batch=4)
    with pytest.raises(ConfigError, match="agents"):
        Group("g", 0, "default")
    with pytest.raises(ConfigError, match="stops"):
        ShareScenario("x", "x", (Group("g", 1, "default"),), stop="h")
    for scenario in scenarios(Settings()).values():
        assert ShareScenario.from_json(json.loads(json.dumps(scenario.to_json()))) == scenario
        assert scenario.agents == 128
    assert set(scenarios(Settings())) == set(SCENARIO_NAMES)
    job = HostJob(scenarios(TINY)["tenants"].to_json(), 1, [("a", 0), ("b", 3)], "redis://x", "g", {"max_capacity": 4},
                  1.0, 2.0, 1.5, {"seconds": 1.0})  # fmt: skip
    assert HostJob.from_json(json.loads(json.dumps(job.to_json()))) == job
    result = HostResult(host=1, leases=[("a", 0, 1.0, 1.5, 2.0, 7, None, False)], unfinished=2, stopped_at=1.8)
    assert HostResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_the_module_documents_every_scenario() -> None:
    doc: Any = shares_bench.__doc__
    for name in SCENARIO_NAMES:
        assert f"``{name}``" in doc


def _check_structure(result: dict[str, Any], names: list[str]) -> None:
    assert list(result["results"]) == names
    for name, r in result["results"].items():
        assert r["errors"] == 0, r["error_samples"]
        assert r["leases"] > 0 and r["hand_over"] > 0
        assert 0 < r["utilisation"] <= 1.0 + 1e-9
        assert r["max_in_hand"] <= r["capacity"]  # each lease in hand is inside its life in Redis
        for group, g in r["groups"].items():
            assert g["calls"] > 0, (name, group)
            assert g["wait_p50"] <= g["wait_p99"] <= g["wait_max"]
    for goal, measured, met in goals(result):
        assert goal and measured and met is not None, (goal, measured)


async def test_a_short_run_of_every_scenario_computes_every_figure(redis_url: str) -> None:
    result = await run_shares([scenarios(TINY)[n] for n in SCENARIO_NAMES], TINY, redis_url)
    _check_structure(result, list(SCENARIO_NAMES))
    interactive = result["results"]["interactive"]
    assert interactive["groups"]["interactive"]["passed_p99"] is not None  # the fence was read
    assert interactive["first_free_p50_handovers"] is not None
    tenants = result["results"]["tenants"]
    assert tenants["stop_at"] == pytest.approx(TINY.settle + TINY.seconds, abs=0.2)
    assert len(tenants["intervals"]) == 2 and tenants["redis_b_full_at"] is not None
    assert tenants["poll_interval"] is not None and tenants["switch_from_a_gone_handovers"] is not None
    aging = result["results"]["aging"]
    assert aging["groups"]["batch"]["calls"] > 0 and aging["aged"] > 0  # the decision log says who aged
    assert len(goals(result)) == 7
    text = markdown(result, ["python -m bench shares"])
    for name in SCENARIO_NAMES:
        assert f"## {name}" in text
    assert "python -m bench shares" in text and "interactive" in table(result)


async def test_agents_on_host_processes(redis_url: str) -> None:
    settings = Settings(**{**TINY.__dict__, "in_process": False})
    result = await run_shares([scenarios(settings)["interactive"]], settings, redis_url)
    _check_structure(result, ["interactive"])
    assert result["environment"]["hosts"].startswith("2 host processes")


def test_the_shares_command_writes_its_outputs(redis_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["--redis-url", redis_url, "--scenarios", "tenants", "--seconds", "1", "--settle", "0.2", "--agents", "16",
            "--capacity", "4", "--hold", "0.02", "--in-process", "--hosts", "2", "--share-interval", "0.5",
            "--after-stop", "0.4", "--seed", "3", "--out", str(tmp_path)]  # fmt: skip
    done = runner.invoke(shares_command, args)
    assert done.exit_code == 0, done.output
    data = json.loads((tmp_path / "shares.json").read_text())
    assert list(data["results"]) == ["tenants"] and "--scenarios tenants" in data["command"]
    assert (tmp_path / "shares.png").stat().st_size > 0
    report = (tmp_path / "shares.md").read_text()
    assert "## tenants" in report and data["command"] in report
    assert "MET" in done.output or "MISS" in done.output
    bad = runner.invoke(shares_command, ["--scenarios", "fifo", "--redis-url", redis_url])
    assert bad.exit_code == 2 and "unknown scenario" in bad.output
    bad = runner.invoke(shares_command, ["--agents", "8", "--flood", "4", "--batch", "4", "--redis-url", redis_url])
    assert bad.exit_code == 2 and "flood" in bad.output
