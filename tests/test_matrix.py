"""The robustness matrix (bench/matrix.py): how cells are sized from
their latency, and how the worst cell of each goal is found. No swarm runs
here: the figures are made up where the answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.matrix import Cell, CellResult, grid, matrix_command, worst_cases, write_outputs


def test_the_grid_is_every_combination_and_slow_latencies_run_fewer_windows() -> None:
    cells = grid([5, 37, 200], [0.05, 0.25, 3.0], [2, 6, 16], ["free", "counted"], 12, 5)
    assert len(cells) == 54 and len({c.name for c in cells}) == 54
    assert {c.windows for c in cells if c.latency == 3.0} == {5}
    assert {c.windows for c in cells if c.latency < 1} == {12}


def test_a_cell_is_sized_from_its_latency() -> None:
    cell = Cell(limit=37, latency=0.25, hosts=6, counted=False)
    assert cell.window == 2.0  # eight latencies
    assert Cell(5, 3.0, 2, False, windows=5).window == 12.0  # four latencies for slow calls
    assert Cell(5, 0.05, 2, False).window == 0.5  # never below half a second
    scenario = cell.scenario()
    assert scenario.hosts * scenario.agents >= 2 * 37 + 8  # the limit is always the bottleneck
    assert scenario.max_capacity == scenario.hosts * scenario.agents  # the fleet's size, not the limit
    assert scenario.window == 2.0 and scenario.strategies == ("fleet", "none", "fixed")
    assert scenario.fleet_options == ()  # nothing but the window: the policy's constants follow it
    provider = cell.provider()
    assert provider.limit == 37 and provider.latency_mean == 0.25 and provider.rpm is None
    assert [limit for _, limit in provider.schedule] == [18, 37]  # halved, then back
    counted = Cell(37, 0.25, 6, True).provider()
    assert counted.rpm_counts_refused and counted.rpm == 370 and counted.rate_period == 2.0  # 1.25 x ideal
    assert Cell(5, 3.0, 2, False, windows=5).provider().schedule == ()  # too few windows for changes


def result(name_limit: int, fleet: float, steady: float, share: float, none: float, fixed: float,
           recoveries: list[tuple[int, int, int | None, int | None]] | None = None,
           machine_bound: bool = False) -> CellResult:  # fmt: skip
    def figures(goodput: float) -> dict[str, float]:
        return {"goodput": goodput, "steady_goodput": goodput, "steady_limited_share": 0.0, "limited_share": 0.0}

    strategies = {"fleet": {**figures(fleet), "steady_goodput": steady, "steady_limited_share": share},
                  "none": figures(none), "fixed": figures(fixed)}  # fmt: skip
    return CellResult(Cell(name_limit, 0.25, 6, False), machine_bound, strategies, recoveries or [])


def test_the_worst_cell_of_each_goal() -> None:
    results = [
        result(5, fleet=0.95, steady=0.99, share=0.002, none=0.90, fixed=0.97, recoveries=[(5, 2, 1, 1), (2, 5, 3, 2)]),
        result(37, fleet=0.97, steady=0.96, share=0.02, none=0.96, fixed=0.95, recoveries=[(37, 18, 1, None)]),
        result(200, fleet=0.50, steady=0.40, share=0.5, none=0.3, fixed=0.3, machine_bound=True),
    ]
    worst = {w.goal: w for w in worst_cases(results)}
    assert worst["steady goodput >= 0.97"].cell == "L37-lat0.25-h6-free"
    assert not worst["steady goodput >= 0.97"].met and worst["steady goodput >= 0.97"].value == 0.96
    assert worst["steady 429 share <= 1 %"].value == 0.02
    assert worst["whole-run goodput >= 0.93"].value == 0.95 and worst["whole-run goodput >= 0.93"].met
    ahead = worst["whole run ahead of none and fixed"]
    assert ahead.cell == "L5-lat0.25-h6-free" and ahead.value == pytest.approx(-0.02) and not ahead.met
    assert worst["capacity back within 5 % in <= 2 windows"].value == 3  # the doubling of the first cell
    assert worst["goodput back to 95 % (windows)"].value is None  # never: the second cell
    assert worst["goodput back to 95 % (windows)"].text == "never"
    with_machine = {w.goal: w for w in worst_cases(results, include_machine_bound=True)}
    assert with_machine["steady goodput >= 0.97"].cell == "L200-lat0.25-h6-free"


def test_outputs_read_back(tmp_path: Path) -> None:
    results = [result(5, 0.95, 0.99, 0.002, 0.9, 0.97, [(5, 2, 1, 1)])]
    results[0].capacity = [(0.0, 4, 3), (1.0, 5, 5)]
    results[0].served = [(0.0, 5, 3), (1.0, 5, 5)]
    json_path, md_path, png_path = write_outputs(results, tmp_path, "python -m bench matrix --limits 5")
    data = json.loads(json_path.read_text())
    again = CellResult.from_json(data["cells"][0])
    assert again.cell == results[0].cell and again.strategies == results[0].strategies
    assert again.capacity == results[0].capacity and again.recoveries == results[0].recoveries
    assert "L5-lat0.25-h6-free" in md_path.read_text() and png_path.stat().st_size > 0


def test_the_command_refuses_an_unknown_refusal_mode() -> None:
    outcome = CliRunner().invoke(matrix_command, ["--refusals", "cheap"])
    assert outcome.exit_code != 0 and "free or counted" in outcome.output
