"""The benchmarks' shared kit (bench/kit.py): statistics, figures as text, tables and charts."""

from __future__ import annotations

from pathlib import Path

from bench.kit import aligned, chart, goal_lines, markdown_table, ms, num, pct, percentile, quantiles


def test_statistics() -> None:
    assert percentile([], 50) is None and quantiles([]) == []
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    cdf = quantiles(values)
    assert len(cdf) == 101 and cdf[0] == 1.0 and cdf[50] == percentile(values, 50) and cdf[-1] == 100.0


def test_figures_as_text() -> None:
    assert [num(None), num(0.12345), num(2, 1)] == ["-", "0.123", "2.0"]
    assert [pct(None), pct(0.0123), pct(0.5, 0)] == ["-", "1.2%", "50%"]
    assert [ms(None), ms(0.25), ms(0.0042), ms(0.25, 1)] == ["-", "250", "4.2", "250.0"]


def test_tables() -> None:
    assert aligned(["name", "n"], [["a", "1"], ["bb", "22"]]).splitlines() == [
        "name   n",
        "----  --",
        "a      1",
        "bb    22",
    ]
    assert markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    assert goal_lines([("fast", "3 ms", True), ("fair", "0.4", False), ("late", "-", None)]).splitlines() == [
        "MET   fast: 3 ms",
        "MISS  fair: 0.4",
        "-     late: -",
    ]


def test_a_chart_is_written(tmp_path: Path) -> None:
    path = tmp_path / "c.png"
    with chart(path, 1, 2, (4, 2)) as axes:
        assert axes.shape == (1, 2)
        axes[0][0].plot([0, 1], [1, 0])
    assert path.read_bytes().startswith(b"\x89PNG")
