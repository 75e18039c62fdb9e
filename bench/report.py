"""The swarm benchmark's outputs: a terminal table, a JSON file, a PNG chart.

The terminal table is compact by default (the main figures, at most 80
columns, for an 80-column terminal); ``wide=True`` (``--wide``) adds the
admission waits, fairness, time above the limit and the recovery on the
governors' capacity. The Markdown table has every column.

The chart has one column per strategy (shared y axes, and each column's
time axis ends when its own run did): on top the hidden limit, the
governor's capacity and the requests the provider served at once; below,
on a log scale, successful calls per second against the ideal, and 429s
per second. matplotlib is imported (Agg backend) only when a chart is drawn.
"""

from __future__ import annotations

import itertools
import json
import math
import textwrap
from pathlib import Path
from typing import Any

from .analysis import Recovery, StrategyMetrics
from .kit import aligned, markdown_table, ms, pct
from .swarm import StrategyRun, SwarmResult

#: the widest line of the compact table and of the wrapped legend
COMPACT_WIDTH = 80
#: what the recovery column says when the run ended before a window after the change
NOT_MEASURED = "not measured (run ended)"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _finish(m: StrategyMetrics, max_time: float, compact: bool = False) -> str:
    if m.finish is not None:
        return f"{m.finish:.1f} s"
    done = math.floor(100 * m.done)
    return f">{max_time:.0f} s ({done}%)" if compact else f">{max_time:.0f} s ({done}% done)"


def _windows(r: Recovery, compact: bool = False) -> str:
    if r.windows is not None:
        return str(r.windows)
    if not r.measured:
        return "-" if compact else NOT_MEASURED
    return "never"


def _recovery(m: StrategyMetrics) -> str:
    if not m.recoveries:
        return "-"
    parts = []
    for r in m.recoveries:
        text = f"{r.old}->{r.new}: {_windows(r)}"
        if r.capacity_windows is not None:
            text += f" (cap {r.capacity_windows})"
        parts.append(text)
    return ", ".join(parts)


def _recovery_compact(m: StrategyMetrics) -> str:
    return " / ".join(_windows(r, compact=True) for r in m.recoveries) or "-"


COLUMNS = (
    "strategy",
    "goodput",
    "steady",
    "429s",
    "429 share",
    "steady 429",
    "wait p50/p95 ms",
    "finish",
    "Jain",
    "over limit",
    "recovery (windows)",
)
COMPACT_COLUMNS = ("strategy", "goodput", "429s", "429 share", "steady 429", "finish", "recovery")


def rows(result: SwarmResult) -> list[list[str]]:
    """Every column of the wide table, per strategy."""
    out = []
    for name, run in result.runs.items():
        m = run.metrics
        rounds = [r.goodput or 0.0 for r in result.rounds.get(name, [])]
        goodput = _ratio(m.goodput)
        if len(rounds) > 1:
            goodput += f" ({min(rounds):.2f}-{max(rounds):.2f})"
        waits = "-" if m.wait_p50 is None else f"{ms(m.wait_p50)} / {ms(m.wait_p95)}"
        over = f"+{m.peak_over} for {m.time_over:.1f} s" if m.peak_over else "never"
        out.append(
            [
                name,
                goodput,
                _ratio(m.steady_goodput),
                str(m.limited),
                pct(m.limited_share),
                pct(m.steady_limited_share, 2),
                waits,
                _finish(m, result.scenario.max_time),
                _ratio(m.jain),
                over,
                _recovery(m),
            ]
        )
    return out


def compact_rows(result: SwarmResult) -> list[list[str]]:
    """The columns of the compact table, per strategy (the median round only)."""
    return [
        [
            name,
            _ratio(run.metrics.goodput),
            str(run.metrics.limited),
            pct(run.metrics.limited_share),
            pct(run.metrics.steady_limited_share, 2),
            _finish(run.metrics, result.scenario.max_time, compact=True),
            _recovery_compact(run.metrics),
        ]
        for name, run in result.runs.items()
    ]


def table(result: SwarmResult, markdown: bool = False, wide: bool = True) -> str:
    """The per-strategy figures as an aligned text table (or Markdown, always wide).

    ``wide=False``: the compact table, at most about 80 columns."""
    if markdown:
        return "\n".join(markdown_table(COLUMNS, rows(result)))
    if not wide:
        return aligned(COMPACT_COLUMNS, compact_rows(result))
    return aligned(COLUMNS, rows(result))


def legend(result: SwarmResult, wide: bool = True) -> str:
    """What the columns mean, with this run's ideal; wrapped to 80 columns unless ``wide``."""
    p, s = result.provider, result.scenario
    schedule = ", ".join(f"{new} at {at:g} s" for at, new in p.schedule) or "none"
    changes = ", ".join(f"{old}->{new}" for old, new in _changes(result)) or "none"
    finish = f"about {result.ideal_finish:.1f} s" if result.ideal_finish != float("inf") else "never (no capacity)"
    rounds = f"each strategy ran {s.repeat} times: its median round by goodput is shown" if s.repeat > 1 else ""
    if wide:
        recovery = (
            "recovery: windows after a limit change until one reaches 95 % of the new ideal (never: not within "
            f"the run; {NOT_MEASURED}: the run ended before a whole window after the change; cap: until the "
            "governors' mean capacity in one is within 5 % of the new limit)"
        )
        rounds += ", with the range" if rounds else ""
    else:
        recovery = (
            f"recovery: windows after each limit change ({changes}) until one reaches 95% of the new ideal "
            "(never: not within the run; -: not measured, the run ended before a whole window after the "
            "change); --wide adds steady goodput, waits, fairness, time over the limit"
        )
    paragraphs = [
        f"ideal: hidden limit {p.limit} / mean latency {p.latency_mean:g} s = {result.ideal_rps:.0f} calls/s "
        f"(limit changes: {schedule}); a perfect gate finishes {s.workload} calls in {finish}",
        "goodput: successful calls as a share of the ideal while the fleet has more work than the limit; "
        f"steady: the same without {s.settle_windows:g} window{'' if s.settle_windows == 1 else 's'} "
        f"({s.settle_windows * s.window:g} s) "
        "after the start and after each limit change" + ("" if wide else " (steady 429: the share of 429s there)"),
        "429 share: throttled answers / all answers"
        + (
            "; wait: admission wait; Jain: fairness of goodput across hosts (1 = equal)"
            if wide
            else f"; finish: time to do the workload (>{s.max_time:g} s (N%): stopped with N% done)"
        )
        + (f"; {rounds}" if rounds else ""),
        *(
            ["over limit: largest excess of requests at the provider over the hidden limit, and total time above it"]
            if wide
            else []
        ),
        recovery,
        _load_line(result),
    ]
    if wide:
        return "\n".join(paragraphs)
    return "\n".join(
        textwrap.fill(x, COMPACT_WIDTH - 1, subsequent_indent="  ", break_on_hyphens=False) for x in paragraphs
    )


def _changes(result: SwarmResult) -> list[tuple[int, int]]:
    """(old, new) of each change of the hidden limit, in order."""
    out, limit = [], result.provider.limit
    for _, new in result.provider.schedule:
        out.append((limit, new))
        limit = new
    return out


def _load_line(result: SwarmResult) -> str:
    loads = [x for run in result.runs.values() for x in run.load]
    cpus = result.environment.get("cpus", "?")
    if not loads:
        return f"machine: {cpus} CPUs"
    return (
        f"machine: {cpus} CPUs, 1-minute load average {min(loads):.1f}-{max(loads):.1f} during the shown runs "
        "(the hosts, the provider and Redis share them; a busy machine lowers every strategy's goodput)"
    )


def takeaway(result: SwarmResult, wide: bool = True) -> str:
    """One sentence comparing the fleet governor with no coordination, when both ran."""
    fleet, none = result.runs.get("fleet"), result.runs.get("none")
    if fleet is None or none is None:
        return ""
    f, n = fleet.metrics, none.metrics
    fewer = f"{n.limited / f.limited:.0f}x fewer" if f.limited else "no"
    text = (
        f"The fleet governor got {f.limited} 429s where no coordination got {n.limited} ({fewer} 429s), "
        f"at {_ratio(f.goodput)} of the ideal goodput against {_ratio(n.goodput)}."
    )
    return text if wide else textwrap.fill(text, COMPACT_WIDTH - 1)


def write_json(result: SwarmResult, path: Path, command: str | None = None) -> None:
    data: dict[str, Any] = result.to_json()
    if command:
        data["command"] = command
    # Compact: the traces and decision logs are long (read it with `python -m json.tool`).
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")


#: how the two reference lines are drawn: the provider's hidden limit (top
#: panels) and the ideal rate it allows (bottom panels), told apart at a glance
HIDDEN_LIMIT_STYLE: dict[str, Any] = {"color": "black", "ls": "--", "lw": 1.2}
IDEAL_STYLE: dict[str, Any] = {"color": "tab:purple", "ls": ":", "lw": 1.6}


def run_end(run: StrategyRun, max_time: float) -> float:
    """When a strategy's run ended: when it finished its workload, else when it was stopped."""
    return run.metrics.finish if run.metrics.finish is not None else max_time


def draw_chart(result: SwarmResult) -> Any:
    """The chart as a matplotlib Figure: a column per strategy, each column's
    time axis ending with its own run (the caller closes the figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(result.runs.items())
    fig, axes = plt.subplots(2, len(runs), figsize=(4.2 * len(runs), 6.4), sharex="col", sharey="row", squeeze=False)
    mean = result.provider.latency_mean
    for col, (name, run) in enumerate(runs):
        top, bottom = axes[0][col], axes[1][col]
        trace = run.record.trace
        t = [r[0] for r in trace]
        top.step(t, [r[1] for r in trace], where="post", label="hidden limit", **HIDDEN_LIMIT_STYLE)
        top.plot(t, [r[2] for r in trace], color="tab:blue", lw=0.9, label="served at once")
        if run.capacity:
            top.plot(
                [c[0] for c in run.capacity], [c[1] for c in run.capacity], color="tab:orange", lw=1.2,
                label="governor capacity",
            )  # fmt: skip
        m = run.metrics
        top.set_title(f"{name}\ngoodput {_ratio(m.goodput)}, 429s {pct(m.limited_share)}", fontsize=10)
        ok_rate, limited_rate, mid = [], [], []
        for a, b in itertools.pairwise(trace):
            dt = b[0] - a[0]
            if dt <= 0:
                continue
            mid.append(b[0])
            ok_rate.append((b[5] - a[5]) / dt)
            limited_rate.append((b[6] - a[6]) / dt)
        bottom.plot(mid, _smooth(ok_rate, 5), color="tab:green", lw=1.0, label="successes/s")
        bottom.step(t, [r[1] / mean for r in trace], where="post", label="ideal", **IDEAL_STYLE)
        bottom.plot(mid, _smooth(limited_rate, 5), color="tab:red", lw=0.9, label="429s/s")
        bottom.set_xlabel("seconds")
        bottom.set_xlim(0, run_end(run, result.scenario.max_time))
    axes[0][0].set_ylabel("requests in flight")
    axes[1][0].set_ylabel("per second (log scale)")
    axes[1][0].set_yscale("symlog", linthresh=10)
    axes[1][0].set_ylim(bottom=0)  # rates are never negative
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    s = result.scenario
    fig.suptitle(
        f"swarm: {s.hosts} hosts x {s.agents} agents, {s.calls} calls each; hidden limit {result.provider.limit}, "
        f"mean latency {mean:g} s, window {s.window:g} s",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def write_chart(result: SwarmResult, path: Path) -> None:
    """A PNG of each strategy's traces, side by side."""
    fig = draw_chart(result)  # selects the Agg backend before pyplot is imported
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def _smooth(values: list[float], n: int) -> list[float]:
    """A trailing moving average over ``n`` samples (the raw rates are noisy)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out
