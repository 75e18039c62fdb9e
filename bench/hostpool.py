"""Host processes for the benchmarks that drive several (``python -m bench budgets``,
``python -m bench shares``): started once for a whole run, fed one job per cell
or scenario as a JSON line on stdin, each answering with one JSON line.

A benchmark module ``M`` gives :func:`serve` its job parser and its runner
in ``M.host_main()``, and its driver makes ``HostPool("M", M.HostResult.from_json)``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
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


class HostPool(Generic[R]):
    """Host processes running ``module.host_main()``, fed one job each per call of :meth:`run`."""

    def __init__(self, module: str, parse_result: Callable[[Any], R]) -> None:
        self._module = module
        self._parse_result = parse_result
        self._processes: list[asyncio.subprocess.Process] = []

    async def start(self, count: int) -> None:
        command = [sys.executable, "-c", f"from {self._module} import host_main; host_main()"]
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
