"""The mock provider and the governing proxy, each on an event loop of its own thread.

The framework and proxy tests call them with the real SDKs over loopback
HTTP, sync and async alike: :class:`ServedMock` is the benchmark's
MockProvider (bench/provider.py), :class:`ServedProxy` a
:class:`governor.proxy.GoverningProxy`. ``record()`` is what the mock saw
(its accepted and refused requests: every attempt that reached it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from bench.provider import MockProvider, ProviderConfig

T = TypeVar("T")

#: a mock that answers at once, the same every time
QUICK = {"latency_mean": 0.01, "latency_sigma": 0.0, "completion_tokens": 12, "reject_latency": 0.0}


class _Loop:
    """An event loop running on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class ServedMock(_Loop):
    """The benchmark's MockProvider; ``url`` its base (OpenAI clients add ``/v1``)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        self.provider = MockProvider(ProviderConfig(**{**QUICK, **settings}))
        self.url = self.run(self.provider.start())

    def reset(self, **settings: Any) -> None:
        config = ProviderConfig(**{**QUICK, **settings})
        self.loop.call_soon_threadsafe(self.provider.reset, config)
        deadline = time.monotonic() + 5
        while self.provider.config is not config and time.monotonic() < deadline:
            time.sleep(0.001)

    def record(self) -> dict[str, Any]:
        async def snapshot() -> dict[str, Any]:
            return self.provider.snapshot()["record"]  # type: ignore[no-any-return]

        return self.run(snapshot())

    def attempts(self) -> int:
        """Every request that reached the mock: accepted, refused, and turned away for the quota."""
        record = self.record()
        return int(record["accepted"]) + sum(record["refused"].values()) + int(record["counts"].get("quota", 0))

    def stop(self) -> None:
        self.run(self.provider.stop())
        self.close()


class ServedProxy(_Loop):
    """A GoverningProxy serving ``config`` against the Redis at ``redis_url``."""

    def __init__(self, config: Any, redis_url: str) -> None:
        from governor.proxy import GoverningProxy

        super().__init__()
        self.proxy = GoverningProxy(config, redis_url)
        try:
            self.url = self.run(self.proxy.start())
        except BaseException:
            self.close()
            raise

    def stop(self) -> None:
        self.run(self.proxy.stop())
        self.close()


def run_agents(
    framework: str, redis_url: str, name: str, mock_url: str, agents: int, calls: int, capacity: int, processes: int = 2
) -> list[dict[str, Any]]:
    """``agents`` framework agents in each of ``processes`` worker processes
    (tests/support/framework_workers.py), all at once; their JSON results."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    args = [framework, redis_url, name, mock_url, str(agents), str(calls), str(capacity)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.framework_workers", *args],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        if worker.returncode != 0:
            raise AssertionError(f"a {framework} worker failed ({worker.returncode}): {err.decode()[-2000:]}")
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results
