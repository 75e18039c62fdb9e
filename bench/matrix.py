"""The robustness matrix: the swarm benchmark over a grid of provider limits,
latencies, host counts and refusal costs, judged against the policy's goals.

One *cell* is one swarm run (:func:`bench.swarm.run_swarm`) of the
strategies ``fleet`` (the default adaptive policy), ``none`` (SDK-style
retries) and ``fixed`` (a fleet semaphore at ``max_capacity``) on one
provider: a hidden concurrency limit, a lognormal latency, H host processes,
refusals free or counted against a requests-per-window rate (a retry storm
then uses up the budget). Every cell is sized from its latency:

- the window is matched to the latency (8 latencies, 4 for latencies of a
  second or more, at least 0.5 s), and the adaptive policy's time
  constants follow it (nothing else is set);
- the fleet is ``2 x limit + 8`` agents (the limit is always the bottleneck)
  and ``max_capacity`` is the fleet's size (what an operator who does not
  know the limit would set);
- the workload lasts about ``windows`` windows at the ideal rate; in cells of
  at least 8 windows the hidden limit halves at 40 % of the run and comes
  back at 70 %, so recovery is measured both ways.

The goals (issue 13), each printed with its worst cell:

- steady goodput >= 0.97 of the ideal with <= 1 % 429s;
- over the whole run, start included: >= 0.93 of the ideal and ahead of
  ``none`` and ``fixed``;
- after the limit halves or doubles: the fleet's capacity within 5 % of the
  new limit in <= 2 windows (the goodput's recovery is printed beside it).

Cells whose ideal rate is above what this machine can drive (``--machine-rps``)
are run and marked: their figures measure the machine, not the policy.

    python -m bench matrix --out docs/benchmarks            # every cell
    python -m bench matrix --limits 37 --latencies 0.25     # a subset
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from .kit import chart, markdown_table
from .provider import ProviderConfig
from .scenario import Scenario

#: the strategies of every cell
CELL_STRATEGIES: tuple[str, ...] = ("fleet", "none", "fixed")
#: goal thresholds
STEADY_GOODPUT, STEADY_429, WHOLE_GOODPUT, RECOVERY_WINDOWS = 0.97, 0.01, 0.93, 2


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    limit: int
    latency: float
    hosts: int
    #: refusals count against the requests-per-window rate
    counted: bool
    #: windows of work at the ideal rate
    windows: float = 12.0

    @property
    def name(self) -> str:
        return f"L{self.limit}-lat{self.latency:g}-h{self.hosts}-{'counted' if self.counted else 'free'}"

    @property
    def window(self) -> float:
        return max(0.5, self.latency * (8 if self.latency < 1 else 4))

    @property
    def agents_total(self) -> int:
        return 2 * self.limit + 8

    @property
    def changes(self) -> bool:
        return self.windows >= 8

    @property
    def ideal_rps(self) -> float:
        return self.limit / self.latency

    def duration(self) -> float:
        return self.windows * self.window

    def provider(self, seed: int | None = None) -> ProviderConfig:
        duration = self.duration()
        schedule: tuple[tuple[float, int], ...] = ()
        if self.changes:
            schedule = ((round(0.4 * duration, 3), max(1, self.limit // 2)), (round(0.7 * duration, 3), self.limit))
        rpm = None
        if self.counted:  # a budget 25 % above the ideal rate per window: a storm of refusals uses it up
            rpm = math.ceil(1.25 * self.ideal_rps * self.window)
        return ProviderConfig(
            limit=self.limit,
            latency_mean=self.latency,
            schedule=schedule,
            rpm=rpm,
            rate_period=self.window,
            rpm_counts_refused=self.counted,
            seed=seed,
        )

    def scenario(self) -> Scenario:
        per_host = math.ceil(self.agents_total / self.hosts)
        total = per_host * self.hosts
        duration = self.duration()
        # the ideal work of the run, the halved stretch included
        ideal = self.ideal_rps * duration * (0.85 if self.changes else 1.0)
        calls = max(1, math.ceil(ideal / total))
        return Scenario(
            hosts=self.hosts,
            agents=per_host,
            calls=calls,
            strategies=CELL_STRATEGIES,
            max_capacity=total,
            window=self.window,
            poll=min(1.0, self.window / 2),
            backoff_base=min(0.25, self.latency),
            max_time=2 * duration + 10,
            settle_windows=2.0,
            sample_interval=min(0.1, self.window / 20),
            lead=1.0 + 0.1 * self.hosts,
            notes=(f"matrix cell {self.name}",),
        )


@dataclass
class CellResult:
    """The figures of one cell that the goals read, and the fleet's trace."""

    cell: Cell
    machine_bound: bool
    #: strategy -> figures (goodput, steady_goodput, steady_limited_share, limited_share, finish, done)
    strategies: dict[str, dict[str, Any]]
    #: the fleet's recoveries: (old, new, capacity windows, goodput windows)
    recoveries: list[tuple[int, int, int | None, int | None]] = field(default_factory=list)
    #: the fleet's trace: (t, capacity, in flight) and the provider's (t, limit, served)
    capacity: list[tuple[float, int, int]] = field(default_factory=list)
    served: list[tuple[float, int, int]] = field(default_factory=list)
    seconds: float = 0.0

    def fleet(self, key: str) -> Any:
        return self.strategies["fleet"].get(key)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": {**asdict(self.cell), "name": self.cell.name, "window": self.cell.window},
            "machine_bound": self.machine_bound,
            "strategies": self.strategies,
            "recoveries": [list(r) for r in self.recoveries],
            "trace": {"capacity": [list(r) for r in self.capacity], "served": [list(r) for r in self.served]},
            "seconds": round(self.seconds, 1),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        c = dict(data["cell"])
        c.pop("name", None)
        c.pop("window", None)
        trace = data.get("trace", {})
        return cls(
            Cell(**c), bool(data["machine_bound"]), dict(data["strategies"]),
            [tuple(r) for r in data.get("recoveries", [])],  # type: ignore[misc]
            [tuple(r) for r in trace.get("capacity", [])],  # type: ignore[misc]
            [tuple(r) for r in trace.get("served", [])],  # type: ignore[misc]
            float(data.get("seconds", 0.0)),
        )  # fmt: skip


def grid(
    limits: Sequence[int],
    latencies: Sequence[float],
    hosts: Sequence[int],
    refusals: Sequence[str],
    windows: float,
    slow_windows: float,
) -> list[Cell]:
    """Every cell of the grid; latencies of a second or more run ``slow_windows``."""
    return [
        Cell(limit, latency, h, mode == "counted", windows if latency < 1 else slow_windows)
        for limit in limits
        for latency in latencies
        for h in hosts
        for mode in refusals
    ]


async def run_cell(cell: Cell, backend: Any, machine_rps: float, echo: Any = None) -> CellResult:
    """One swarm run of the cell's strategies; its figures."""
    from .swarm import run_swarm

    started = time.monotonic()
    result = await run_swarm(cell.scenario(), cell.provider(), backend, echo=echo)
    figures: dict[str, dict[str, Any]] = {}
    for name, run in result.runs.items():
        m = run.metrics
        figures[name] = {
            "goodput": m.goodput,
            "steady_goodput": m.steady_goodput,
            "steady_limited_share": m.steady_limited_share,
            "limited_share": m.limited_share,
            "limited": m.limited,
            "finish": m.finish,
            "done": m.done,
        }
    fleet = result.runs["fleet"]
    recoveries = [(r.old, r.new, r.capacity_windows, r.windows) for r in fleet.metrics.recoveries]
    capacity = [(round(t, 3), c, f) for t, c, f, _q, _p in fleet.capacity]
    served = [(round(r[0], 3), int(r[1]), int(r[2])) for r in fleet.record.trace]
    return CellResult(
        cell, cell.ideal_rps > machine_rps, figures, recoveries, capacity, served, time.monotonic() - started
    )


# -- the goals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worst:
    """The worst cell of one goal."""

    goal: str
    value: float | None
    cell: str | None
    met: bool
    text: str


def _num(x: Any, default: float) -> float:
    return default if x is None else float(x)


def worst_cases(results: Sequence[CellResult], include_machine_bound: bool = False) -> list[Worst]:
    """The worst cell of each goal (machine-bound cells left out unless asked)."""
    cells = [r for r in results if include_machine_bound or not r.machine_bound]
    out: list[Worst] = []
    if not cells:
        return out

    def worst(goal: str, key: Any, high_is_bad: bool, threshold: float, fmt: str) -> None:
        values = [(key(r), r) for r in cells]
        value, r = (max if high_is_bad else min)(values, key=lambda v: v[0])
        met = value <= threshold if high_is_bad else value >= threshold
        shown = "never" if math.isinf(value) else format(value, fmt)
        out.append(Worst(goal, None if math.isinf(value) else value, r.cell.name, met, shown))

    worst("steady goodput >= 0.97", lambda r: _num(r.fleet("steady_goodput"), 0.0), False, STEADY_GOODPUT, ".3f")
    worst("steady 429 share <= 1 %", lambda r: _num(r.fleet("steady_limited_share"), 0.0), True, STEADY_429, ".2%")
    worst("whole-run goodput >= 0.93", lambda r: _num(r.fleet("goodput"), 0.0), False, WHOLE_GOODPUT, ".3f")

    def margin(r: CellResult) -> float:
        others = [_num(r.strategies[s].get("goodput"), 0.0) for s in ("none", "fixed") if s in r.strategies]
        return _num(r.fleet("goodput"), 0.0) - max(others, default=0.0)

    worst("whole run ahead of none and fixed", margin, False, 0.0, "+.3f")
    changed = [r for r in cells if r.recoveries]
    if changed:

        def slowest(r: CellResult, index: int) -> float:
            values = [rec[index] for rec in r.recoveries]
            return max((math.inf if v is None else float(v) for v in values), default=0.0)

        keep = cells
        cells = changed
        worst("capacity back within 5 % in <= 2 windows", lambda r: slowest(r, 2), True, RECOVERY_WINDOWS, ".0f")
        worst("goodput back to 95 % (windows)", lambda r: slowest(r, 3), True, RECOVERY_WINDOWS, ".0f")
        cells = keep
    return out


# -- output ----------------------------------------------------------------------------------------


def _f(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def table(results: Sequence[CellResult]) -> str:
    """A markdown table: one row per cell."""
    head = ("cell", "ideal rps", "fleet steady", "steady 429", "fleet whole", "none whole", "fixed whole",
            "fixed 429", "recovery (cap/goodput windows)")  # fmt: skip
    body = []
    for r in results:
        s = r.strategies
        rec = ", ".join(f"{o}->{n}: {_f(c, 'd')}/{_f(g, 'd')}" for o, n, c, g in r.recoveries) or "-"
        mark = " (machine-bound)" if r.machine_bound else ""
        row = (
            r.cell.name + mark, f"{r.cell.ideal_rps:.0f}", _f(r.fleet("steady_goodput")),
            _f(r.fleet("steady_limited_share"), ".2%"), _f(r.fleet("goodput")), _f(s.get("none", {}).get("goodput")),
            _f(s.get("fixed", {}).get("goodput")), _f(s.get("fixed", {}).get("limited_share"), ".1%"), rec,
        )  # fmt: skip
        body.append(row)
    return "\n".join(markdown_table(head, body))


def worst_text(worst: Sequence[Worst]) -> str:
    return "\n".join(f"{'met ' if w.met else 'MISS'}  {w.goal:<42} worst {w.text:>8}  in {w.cell}" for w in worst)


def write_chart(results: Sequence[CellResult], worst: Sequence[Worst], path: Path) -> None:
    """The fleet's capacity against the hidden limit in each goal's worst cell."""
    by_name = {r.cell.name: r for r in results}
    shown: list[tuple[str, CellResult]] = []
    for w in worst:
        if w.cell in by_name and all(w.cell != r.cell.name for _, r in shown):
            shown.append((w.goal, by_name[w.cell]))
        elif w.cell in by_name:  # one panel per cell, naming every goal it is the worst of
            shown = [(f"{goal}; {w.goal}", r) if r.cell.name == w.cell else (goal, r) for goal, r in shown]
    if not shown:
        return
    with chart(path, len(shown), 1, (9, 2.6 * len(shown)), dpi=90) as axes:
        for ax, (goal, r) in zip(axes[:, 0], shown, strict=True):
            if r.served:
                ax.step([t for t, _, _ in r.served], [lim for _, lim, _ in r.served], where="post", color="black",
                        label="hidden limit")  # fmt: skip
                ax.plot([t for t, _, _ in r.served], [s for _, _, s in r.served], color="tab:green", alpha=0.6,
                        label="served at the provider")  # fmt: skip
            if r.capacity:
                ax.plot([t for t, _, _ in r.capacity], [c for _, c, _ in r.capacity], color="tab:blue",
                        label="fleet capacity")  # fmt: skip
            ax.set_title(f"{r.cell.name} (worst: {goal}); window {r.cell.window:g} s", fontsize=9)
            ax.set_ylabel("leases")
            top = max([lim for _, lim, _ in r.served] or [r.cell.limit])
            ax.set_ylim(0, top * 1.6)
            ax.legend(fontsize=7, loc="upper right")
        axes[-1, 0].set_xlabel("seconds since the start")


def write_outputs(results: Sequence[CellResult], out: Path, command: str) -> tuple[Path, Path, Path]:
    """matrix.json, matrix.md and matrix.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    worst = worst_cases(results)
    paths = out / "matrix.json", out / "matrix.md", out / "matrix.png"
    data = {"command": command, "cells": [r.to_json() for r in results], "worst": [asdict(w) for w in worst]}
    paths[0].write_text(json.dumps(data, indent=1) + "\n")
    text = (
        f"# Robustness matrix\n\n`{command}`\n\n```\n{worst_text(worst)}\n```\n\n{table(results)}\n\n"
        "Cells marked machine-bound ask for more calls per second than this machine drives (`--machine-rps`); "
        "they are left out of the worst cases, or not run at all with `--skip-machine-bound`.\n"
    )
    paths[1].write_text(text)
    write_chart(results, worst, paths[2])
    return paths


# -- the command -------------------------------------------------------------------------------------


def _list(kind: Any) -> Any:
    def parse(_ctx: Any, _param: Any, value: str) -> list[Any]:
        try:
            return [kind(part) for part in value.split(",") if part.strip()]
        except ValueError:
            raise click.BadParameter(f"a comma-separated list, got {value!r}") from None

    return parse


@click.command("matrix")
@click.option("--limits", default="5,37,200", show_default=True, callback=_list(int), help="Hidden limits.")
@click.option("--latencies", default="0.05,0.25,3", show_default=True, callback=_list(float),
              help="Mean lognormal latencies, seconds.")  # fmt: skip
@click.option("--hosts", default="2,6,16", show_default=True, callback=_list(int), help="Host processes.")
@click.option("--refusals", default="free,counted", show_default=True, callback=_list(str),
              help="free: 429s cost nothing; counted: they count against a requests-per-window rate.")  # fmt: skip
@click.option("--windows", type=click.FloatRange(min=2), default=12.0, show_default=True,
              help="Windows of work per cell (latencies under a second).")  # fmt: skip
@click.option("--slow-windows", type=click.FloatRange(min=2), default=5.0, show_default=True,
              help="Windows of work per cell with a latency of a second or more.")  # fmt: skip
@click.option("--machine-rps", type=click.FloatRange(min=1), default=400.0, show_default=True,
              help="Cells whose ideal rate is above this are marked machine-bound.")  # fmt: skip
@click.option("--skip-machine-bound", is_flag=True, help="List the machine-bound cells but do not run them.")
@click.option("--redis-url", envvar="GOVERNOR_REDIS_URL", default=None,
              help="Redis shared by the hosts; default: a private redis-server.")  # fmt: skip
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Directory for matrix.json, matrix.md and matrix.png.")  # fmt: skip
def matrix_command(
    limits: list[int],
    latencies: list[float],
    hosts: list[int],
    refusals: list[str],
    windows: float,
    slow_windows: float,
    machine_rps: float,
    skip_machine_bound: bool,
    redis_url: str | None,
    out: Path,
) -> None:
    """Run the robustness matrix: the swarm (fleet, none, fixed) in every cell
    of limits x latencies x hosts x refusal costs; print the worst cell of
    each goal; write matrix.json, matrix.md and matrix.png (the worst runs)."""
    import sys

    from .embedded import open_backend

    for mode in refusals:
        if mode not in ("free", "counted"):
            raise click.BadParameter(f"refusals are free or counted, got {mode!r}", param_hint="--refusals")
    cells = grid(limits, latencies, hosts, refusals, windows, slow_windows)
    if skip_machine_bound:
        skipped = [c for c in cells if c.ideal_rps > machine_rps]
        cells = [c for c in cells if c.ideal_rps <= machine_rps]
        for cell in skipped:
            click.echo(f"skipped (machine-bound: {cell.ideal_rps:.0f} calls/s ideal): {cell.name}")
    given = sys.argv[2:] if sys.argv[1:2] == ["matrix"] else sys.argv[1:]
    command = " ".join(["python -m bench matrix", *given])
    results: list[CellResult] = []
    with open_backend(redis_url) as backend:
        for i, cell in enumerate(cells, 1):
            click.echo(f"[{i}/{len(cells)}] {cell.name}: window {cell.window:g} s, {cell.agents_total} agents ...",
                       nl=False)  # fmt: skip
            result = asyncio.run(run_cell(cell, backend, machine_rps, echo=lambda _line: None))
            results.append(result)
            click.echo(
                f" fleet steady {_f(result.fleet('steady_goodput'))}"
                f" at {_f(result.fleet('steady_limited_share'), '.2%')}"
                f" 429s, whole {_f(result.fleet('goodput'))} (none {_f(result.strategies['none']['goodput'])},"
                f" fixed {_f(result.strategies['fixed']['goodput'])}) in {result.seconds:.0f} s"
            )
    paths = write_outputs(results, out, command)
    click.echo("")
    click.echo(worst_text(worst_cases(results)))
    click.echo(f"\nresults: {paths[0]}\ntable:   {paths[1]}\nchart:   {paths[2]}")


__all__ = ["Cell", "CellResult", "Worst", "grid", "matrix_command", "run_cell", "worst_cases", "write_outputs"]
