"""How host jobs reach the hosts: worker processes fed through Redis, or threads.

A *worker* (``python -m bench worker --redis-url URL``) is a host
process that takes jobs from a Redis list, runs each with
:func:`~bench.host.run_host` (a Node host's job with
:func:`~bench.host.run_node_host`) and pushes the result back. The swarm
driver starts H of them on this machine, or uses workers already running
elsewhere (``--workers external``: one container per host in a compose
file, all on the same Redis and namespace). Keys, all under the namespace
(default ``governor-sim``) and apart from any governor's keys:

=============================  =====  ==========================================
``{ns}:jobs``                  list   host jobs and ``stop`` messages (JSON)
``{ns}:results:{run}``         list   host results of run ``run`` (JSON)
``{ns}:workers``               zset   worker id -> last time it was idle (ms)
=============================  =====  ==========================================

When the only Redis is an in-process fakeredis, hosts are threads of the
driver's process instead (:class:`ThreadHosts`): one interpreter, one GIL,
so the figures are less faithful; the driver says so.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import redis

from .host import HostJob, HostResult, run_host, run_node_host

DEFAULT_NAMESPACE = "governor-sim"
#: a worker not seen idle within this is not counted as ready (ms)
WORKER_FRESH_MS = 5000
#: how long a worker blocks on the job list before saying it is alive again (s)
IDLE_BLOCK = 1
#: results and jobs left behind expire after this (s)
LEFTOVER_TTL = 3600


def _keys(namespace: str) -> tuple[str, str]:
    return f"{namespace}:jobs", f"{namespace}:workers"


def results_key(namespace: str, run_id: str) -> str:
    return f"{namespace}:results:{run_id}"


class Hosts(Protocol):
    """Runs one strategy's host jobs and returns their results."""

    description: str

    async def start(self, count: int) -> None: ...

    async def ready(self) -> None:
        """Return once every host can take a job at once."""

    async def run(self, jobs: list[HostJob], timeout: float) -> list[HostResult]: ...

    async def stop(self) -> None: ...


# -- the worker side ----------------------------------------------------------------


def worker_main(redis_url: str, namespace: str = DEFAULT_NAMESPACE, max_jobs: int | None = None) -> int:
    """Serve host jobs until a ``stop`` message (or ``max_jobs``); returns jobs run."""
    import aiohttp  # noqa: F401 - loaded before saying ready, so a job starts on time

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints every thread's stack
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")

    client = redis.Redis.from_url(redis_url, socket_timeout=IDLE_BLOCK + 10)
    jobs_key, workers_key = _keys(namespace)
    me = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
    served = 0
    try:
        while max_jobs is None or served < max_jobs:
            client.zadd(workers_key, {me: _now_ms()})
            client.expire(workers_key, LEFTOVER_TTL)
            item = client.blpop([jobs_key], timeout=IDLE_BLOCK)
            if item is None:
                continue
            message = json.loads(item[1])
            if message.get("kind") == "stop":
                break
            client.zrem(workers_key, me)
            job = HostJob.from_json(message["job"])
            if job.runtime == "node":
                result = run_node_host(job, redis_url)
            else:
                result = asyncio.run(run_host(job, _async_client_factory(redis_url)))
            key = results_key(namespace, job.run_id)
            client.rpush(key, json.dumps(result.to_json()))
            client.expire(key, LEFTOVER_TTL)
            served += 1
    finally:
        client.zrem(workers_key, me)
        client.close()
    return served


def _async_client_factory(url: str) -> Callable[[], Any]:
    def make() -> Any:
        import redis.asyncio

        return redis.asyncio.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)

    return make


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the driver side --------------------------------------------------------------------


class QueueHosts:
    """Hosts that are worker processes fed through Redis; with ``spawn`` the
    driver starts them on this machine, else it waits for external ones.

    With ``echo`` the output of the spawned processes (their warnings, a
    traceback) is read line by line and handed to it, prefixed with the
    host process's number, instead of going straight to the terminal,
    where it would land in the middle of the driver's progress line.
    """

    def __init__(self, redis_url: str, namespace: str, spawn: bool, echo: Callable[[str], None] | None = None) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.spawn = spawn
        self.description = "host processes on this machine" if spawn else f"external workers on namespace {namespace!r}"
        self._client = redis.Redis.from_url(redis_url, socket_timeout=30)
        self._processes: list[subprocess.Popen[str]] = []
        self._readers: list[threading.Thread] = []
        self._echo = echo
        self._count = 0

    async def start(self, count: int) -> None:
        self._count = count
        if self.spawn:
            command = [sys.executable, "-m", "bench", "worker", "--redis-url", self.redis_url]
            command += ["--namespace", self.namespace]
            if self._echo is None:
                self._processes = [subprocess.Popen(command, text=True) for _ in range(count)]
                return
            for i in range(count):
                process = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
                )
                reader = threading.Thread(target=self._relay, args=(i, process), daemon=True)
                reader.start()
                self._processes.append(process)
                self._readers.append(reader)

    def _relay(self, index: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None and self._echo is not None
        with process.stdout:
            for line in process.stdout:
                self._echo(f"host process {index}: {line.rstrip()}")

    async def ready(self) -> None:
        await self._wait_ready(60.0 if self.spawn else 300.0)

    async def _wait_ready(self, timeout: float) -> None:
        _, workers_key = _keys(self.namespace)
        deadline = time.monotonic() + timeout
        while True:
            fresh = await asyncio.to_thread(self._client.zcount, workers_key, _now_ms() - WORKER_FRESH_MS, "+inf")
            if fresh >= self._count:
                return
            dead = [p.returncode for p in self._processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a worker process exited with status {dead[0]} before the run")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {fresh} of {self._count} workers are ready on namespace {self.namespace!r} "
                    f"after {timeout:.0f} s; start them with: python -m bench worker "
                    f"--redis-url URL --namespace {self.namespace}"
                )
            await asyncio.sleep(0.1)

    async def run(self, jobs: list[HostJob], timeout: float) -> list[HostResult]:
        jobs_key, _ = _keys(self.namespace)
        payloads = [json.dumps({"kind": "job", "job": job.to_json()}) for job in jobs]
        await asyncio.to_thread(self._client.rpush, jobs_key, *payloads)
        key = results_key(self.namespace, jobs[0].run_id)
        results: list[HostResult] = []
        deadline = time.monotonic() + timeout
        while len(results) < len(jobs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(jobs) - len(results)} host results missing after {timeout:.0f} s")
            item = await asyncio.to_thread(self._client.blpop, [key], min(5, max(1, int(left))))
            if item is not None:
                results.append(HostResult.from_json(json.loads(item[1])))
            elif any(p.poll() is not None for p in self._processes):
                raise RuntimeError("a worker process exited during the run; see its output above")
        await asyncio.to_thread(self._client.delete, key)
        return sorted(results, key=lambda r: r.host)

    async def stop(self) -> None:
        jobs_key, _ = _keys(self.namespace)
        if self.spawn and self._processes:
            stops = [json.dumps({"kind": "stop"})] * len(self._processes)
            await asyncio.to_thread(self._client.rpush, jobs_key, *stops)
            for process in self._processes:
                try:
                    await asyncio.to_thread(process.wait, IDLE_BLOCK + 10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            for reader in self._readers:
                await asyncio.to_thread(reader.join, 5)  # the last lines of each process
            self._processes, self._readers = [], []
            await asyncio.to_thread(self._client.delete, jobs_key)
        self._client.close()


class ThreadHosts:
    """Hosts as threads of this process, each with its own event loop and
    Redis client (for an in-process fakeredis, which other processes cannot reach)."""

    description = "threads of one process (in-process fakeredis: one GIL, figures less faithful)"

    def __init__(self, make_client: Callable[[], Any]) -> None:
        self._make_client = make_client

    async def start(self, count: int) -> None:
        return None

    async def ready(self) -> None:
        return None

    async def run(self, jobs: list[HostJob], timeout: float) -> list[HostResult]:
        results: list[HostResult | None] = [None] * len(jobs)
        errors: list[BaseException] = []

        def host(i: int, job: HostJob) -> None:
            try:
                results[i] = asyncio.run(run_host(job, self._make_client))
            except BaseException as error:  # noqa: BLE001 - reported to the driver below
                errors.append(error)

        threads = [threading.Thread(target=host, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in threads:
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
        if errors:
            raise RuntimeError(f"a host thread failed: {type(errors[0]).__name__}: {errors[0]}") from errors[0]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise TimeoutError(f"hosts {missing} did not finish within {timeout:.0f} s")
        return [r for r in results if r is not None]

    async def stop(self) -> None:
        return None
