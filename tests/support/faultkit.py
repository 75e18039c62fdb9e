"""What the fault test modules share (test_faults, test_faults_process,
test_faults_recovery): spawned worker processes, the events workers push to
the control Redis, and the figures the tests print. Their fixtures
(``processes``, ``control``, ``events``) are in conftest.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

import redis

SPAWN = multiprocessing.get_context("spawn")
#: short times so each fault plays out in seconds
FAST: dict[str, Any] = {"lease_ttl": 1.0, "poll": 0.2, "queue_ttl": 1.0, "redis_timeout": 1.0}


def figure(what: str, value: float, unit: str = "s") -> None:
    """Print one measured figure (visible with ``pytest -s``)."""
    print(f"\nFIGURE {what}: {value:.3f} {unit}")


class Processes:
    """Spawned worker processes (and the pids of children they forked), all
    ended at teardown: SIGCONT (a stopped one), then SIGKILL."""

    def __init__(self) -> None:
        self.started: list[BaseProcess] = []
        #: processes the workers forked themselves, by pid
        self.pids: list[int] = []

    def start(self, target: Callable[..., Any], *args: Any, daemon: bool = True) -> BaseProcess:
        """``daemon=False`` for a worker that forks children of its own."""
        process = SPAWN.Process(target=target, args=args, daemon=daemon)
        process.start()
        self.started.append(process)
        return process

    def signal(self, sig: signal.Signals, *targets: BaseProcess) -> None:
        for process in targets:
            assert process.pid is not None
            os.kill(process.pid, sig)

    def end_all(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for process in self.started:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGKILL)
            process.join(10)


def next_event(control: redis.Redis, events: str, kind: str, timeout: float = 30) -> dict[str, Any]:
    """The next event of ``kind`` from a worker (earlier ones of other kinds are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {kind!r} event within {timeout} s")
        popped = control.blpop([events], timeout=max(0.1, min(left, 1.0)))
        if popped is not None:
            event: dict[str, Any] = json.loads(popped[1])
            if event["kind"] == kind:
                return event
