"""What the benchmarks share: host processes, statistics, figures as text,
tables and charts. Each benchmark keeps its scenarios, analysis and goals.

Host processes serve the benchmarks that drive several (``python -m bench
budgets``, ``python -m bench shares``): started once for a whole run, fed one
job per cell or scenario as a JSON line on stdin, each answering with one
JSON line. A benchmark module ``M`` with hosts defines ``HostJob`` (with
``from_json``) and ``run_host(job)``; its driver makes
``HostPool("M", M.HostResult.from_json)``, whose processes run
:func:`serve_module` on ``M``.

Charts need matplotlib (the ``bench`` extra); it is imported when a chart is drawn.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import sys
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar


class _Job(Protocol):
    def to_json(self) -> dict[str, Any]: ...


J = TypeVar("J")
R = TypeVar("R")


def serve(parse: Callable[[Any], J], run: Callable[[J], Coroutine[Any, Any, Any]]) -> None:
    """A host process: print ``ready``, then run each job read from stdin (one JSON
    line each) and print its result (one JSON line), until stdin closes."""
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        result: Any = asyncio.run(run(parse(json.loads(line))))  # type: ignore[arg-type]
        print(json.dumps(result.to_json()), flush=True)


@dataclass(kw_only=True)
class HostErrors:
    """What a host's result carries besides its figures: the errors its agents
    met (how many, and the first few), and the JSON it travels as."""

    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def note(self, error: BaseException) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(f"{type(error).__name__}: {error}"[:300])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def agents_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """A host job's JSON with its ``agents`` as (group or class name, number) pairs again."""
    return {**data, "agents": [(str(name), int(number)) for name, number in data["agents"]]}


def serve_module(module: str) -> None:
    """A host process of benchmark ``module``: :func:`serve` with its ``HostJob`` and ``run_host``,
    once the modules its hosts need (its ``HOST_IMPORTS``) are imported, so that the first job's
    agents start on time."""
    benchmark = importlib.import_module(module)
    for name in getattr(benchmark, "HOST_IMPORTS", ()):
        importlib.import_module(name)
    serve(benchmark.HostJob.from_json, benchmark.run_host)


class HostPool(Generic[R]):
    """Host processes of benchmark ``module`` (:func:`serve_module`), fed one job each per call of :meth:`run`."""

    def __init__(self, module: str, parse_result: Callable[[Any], R]) -> None:
        self._module = module
        self._parse_result = parse_result
        self._processes: list[asyncio.subprocess.Process] = []

    async def start(self, count: int) -> None:
        command = [sys.executable, "-c", f"from bench.kit import serve_module; serve_module({self._module!r})"]
        for _ in range(count):
            process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024
            )
            self._processes.append(process)
        for process in self._processes:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 60.0)
            if line.strip() != b"ready":
                raise RuntimeError(f"a host process did not start (it said {line[:200]!r})")

    async def run(self, jobs: Sequence[_Job], timeout: float) -> list[R]:
        for process, job in zip(self._processes, jobs, strict=True):
            assert process.stdin is not None
            process.stdin.write((json.dumps(job.to_json()) + "\n").encode())
            await process.stdin.drain()

        async def read(process: asyncio.subprocess.Process) -> R:
            assert process.stdout is not None
            line = await process.stdout.readline()
            if not line:
                raise RuntimeError(f"a host process ended without a result (exit status {await process.wait()})")
            return self._parse_result(json.loads(line))

        return list(await asyncio.wait_for(asyncio.gather(*(read(p) for p in self._processes)), timeout))

    async def stop(self) -> None:
        for process in self._processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self._processes:
            try:
                await asyncio.wait_for(process.wait(), 10.0)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
        self._processes = []


# -- statistics -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def quantiles(values: Sequence[float]) -> list[float]:
    """Percentiles 0, 1, ..., 100 (nearest rank): a CDF in 101 points; [] when empty."""
    if not values:
        return []
    ordered = sorted(values)
    return [ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))] for q in range(101)]


# -- figures as text ------------------------------------------------------------------------------


def num(x: float | None, digits: int = 3) -> str:
    """A number with ``digits`` decimals; "-" for none."""
    return "-" if x is None else f"{x:.{digits}f}"


def pct(x: float | None, digits: int = 1) -> str:
    """A share as a percentage; "-" for none."""
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def ms(x: float | None, digits: int | None = None) -> str:
    """Seconds as milliseconds with ``digits`` decimals (None: one below 10 ms, else none); "-" for none."""
    if x is None:
        return "-"
    if digits is None:
        digits = 0 if x >= 0.01 else 1
    return f"{1000 * x:.{digits}f}"


def aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A text table: the first column left-aligned, the others right-aligned, a rule below the headers."""
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def goal_lines(goals: Iterable[tuple[str, str, bool | None]]) -> str:
    """MET / MISS per goal (``-`` where it could not be judged), with the figure that judged it."""
    return "\n".join(
        f"{'-   ' if met is None else ('MET ' if met else 'MISS')}  {goal}: {measured}" for goal, measured, met in goals
    )


# -- charts ---------------------------------------------------------------------------------------


@contextmanager
def chart(path: Path, rows: int, columns: int, size: tuple[float, float], dpi: int = 100) -> Iterator[Any]:
    """A grid of ``rows`` x ``columns`` panels (matplotlib axes, always 2-D) of a
    figure of ``size`` inches, written to ``path`` as a PNG when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False)
    try:
        yield axes
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
