"""One host of the swarm: A agents (asyncio tasks) running one strategy.

A :class:`HostJob` says what to run; :func:`run_host` runs it and returns a
:class:`HostResult`. Both are plain JSON so a job can travel to a worker
process on another machine (see :mod:`governor.sim.workers`).

Each agent makes ``calls`` successful calls, one after another. A governed
agent does per attempt what ``Governor.call`` does: acquire a lease, call
the provider, report the outcome with the lease and the provider's
Retry-After, release; after a 429 it waits the Retry-After, else the
project's full-jitter backoff, before the next attempt. A quota-exhausted
answer is never retried: the agent stops.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import AsyncGovernor, GovernorConfig, Outcome
from ..backoff import retry_wait
from ..classify import Classification, classify_http, default_classifier
from ..errors import AcquireTimeout, GovernorError, LeaseLost

#: what one attempt came to
OK, LIMITED, QUOTA, ERROR = "ok", "limited", "quota", "error"
_KINDS = {Outcome.RATE_LIMITED: LIMITED, Outcome.QUOTA_EXHAUSTED: QUOTA, Outcome.ERROR: ERROR}
_OUTCOMES = {OK: Outcome.SUCCESS, LIMITED: Outcome.RATE_LIMITED, QUOTA: Outcome.QUOTA_EXHAUSTED, ERROR: Outcome.ERROR}
#: error messages kept per host, so a failing run says why without a flood
MAX_ERROR_SAMPLES = 5
#: seconds agents get after the deadline to stop by themselves (give back their
#: places and leases) before they are cancelled
STOP_GRACE = 5.0
#: seconds (one cancellation each) given to agents that did not stop by themselves
STOP_TRIES = 10


@dataclass(frozen=True)
class HostJob:
    """What one host runs for one strategy."""

    run_id: str
    strategy: str
    host: int
    agents: int
    calls: int
    #: Unix time at which every host starts, and after which agents stop
    start_at: float
    deadline: float
    #: base URL of the provider (``http://host:port``)
    provider_url: str
    #: the governor this host uses (None: no governor) and its config
    governor: str | None = None
    config: dict[str, Any] | None = None
    #: report outcomes to the governor (False: a bare semaphore)
    report: bool = True
    report_retry_after: bool = True
    backoff_base: float = 0.25
    backoff_cap: float = 30.0
    client: str = "aiohttp"
    model: str = "sim-1"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostJob:
        return cls(**data)

    def governor_config(self) -> GovernorConfig | None:
        return None if self.config is None else GovernorConfig(**self.config)


@dataclass
class HostResult:
    """What one host saw. Times: durations in seconds, instants in Unix time."""

    host: int
    strategy: str
    agents: int
    attempts: int = 0
    ok: int = 0
    limited: int = 0
    quota: int = 0
    errors: int = 0
    lost: int = 0
    #: admission waits of every acquire (governed strategies)
    waits: list[float] = field(default_factory=list)
    #: per successful call: from wanting it to its answer, retries included
    call_times: list[float] = field(default_factory=list)
    #: when each success came back
    success_at: list[float] = field(default_factory=list)
    #: when each agent finished its workload (None: it did not)
    finished_at: list[float | None] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    #: seconds spent in each step of an attempt, summed: where the time goes
    phases: dict[str, float] = field(
        default_factory=lambda: {"acquire": 0.0, "call": 0.0, "report": 0.0, "release": 0.0, "backoff": 0.0}
    )

    def note_error(self, text: str) -> None:
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(text)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("waits", "call_times"):
            data[key] = [round(x, 6) for x in data[key]]
        data["success_at"] = [round(x, 5) for x in self.success_at]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostResult:
        return cls(**data)


class _Caller:
    """One provider call, classified: (kind, retry_after seconds or None)."""

    def __init__(self, job: HostJob) -> None:
        self.job = job
        self.url = job.provider_url.rstrip("/") + "/v1/chat/completions"
        self.payload = {"model": job.model, "messages": [{"role": "user", "content": "Summarise the plan."}]}
        self._session: Any = None
        self._openai: Any = None

    async def open(self) -> None:
        if self.job.client == "openai":
            from ..providers import async_openai_client

            self._openai = async_openai_client(
                base_url=self.job.provider_url.rstrip("/") + "/v1", api_key="sk-sim", timeout=60.0
            )
        else:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=60.0),
                headers={"Authorization": "Bearer sk-sim"},
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._openai is not None:
            await self._openai.close()

    async def __call__(self) -> tuple[str, float | None, str]:
        if self._openai is not None:
            return await self._call_openai()
        import aiohttp

        try:
            async with self._session.post(self.url, json=self.payload) as response:
                body = await response.read()
                if response.status == 200:
                    return OK, None, ""
                return _verdict(classify_http(response.status, response.headers, body))
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            return ERROR, None, f"{type(error).__name__}: {error}"

    async def _call_openai(self) -> tuple[str, float | None, str]:
        import openai

        try:
            await self._openai.chat.completions.create(model=self.job.model, messages=self.payload["messages"])
            return OK, None, ""
        except openai.APIError as error:
            return _verdict(default_classifier(error))


def _verdict(verdict: Classification) -> tuple[str, float | None, str]:
    """The project's classification of a failed call: (kind, retry_after, description)."""
    return _KINDS[verdict.kind], verdict.retry_after, verdict.description


async def run_host(job: HostJob, make_client: Callable[[], Any]) -> HostResult:
    """Run one host's agents until their workload is done or the deadline passes.

    ``make_client`` returns a ``redis.asyncio`` client for the governor;
    it is closed here. Shutdown runs in order: the agents stop by themselves
    at the deadline (an acquire times out and gives its place back, a call
    under way is abandoned and its lease released), only then are stragglers
    cancelled, and the governor and its Redis client are closed last, so no
    cancel or release of an agent meets a closed connection.
    """
    result = HostResult(host=job.host, strategy=job.strategy, agents=job.agents)
    result.finished_at = [None] * job.agents
    config = job.governor_config()
    governor = AsyncGovernor(make_client(), job.governor, config) if job.governor and config else None
    caller = _Caller(job)
    await caller.open()
    try:
        await asyncio.sleep(max(0.0, job.start_at - time.time()))
        tasks = [asyncio.create_task(_agent(job, i, governor, caller, result)) for i in range(job.agents)]
        # Cancelling an agent while it gives its place back would orphan that
        # clean-up (it is shielded) and it would meet the closed client below.
        _done, pending = await asyncio.wait(tasks, timeout=max(0.0, job.deadline - time.time()) + STOP_GRACE)
        for _ in range(STOP_TRIES):
            if not pending:
                break
            # An HTTP client may swallow a cancellation (aiohttp issue 8174), so
            # cancel again; agents also stop by themselves at the deadline.
            for task in pending:
                task.cancel()
            _done, pending = await asyncio.wait(pending, timeout=1.0)
        if pending:
            result.note_error(f"{len(pending)} agents did not stop within {STOP_TRIES} s of the deadline")
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                error = task.exception()
                result.note_error(f"agent failed: {type(error).__name__}: {error}")
    finally:
        await caller.close()
        if governor is not None:
            client = governor.client
            await governor.aclose()
            await client.aclose()
    return result


async def _agent(job: HostJob, index: int, governor: AsyncGovernor | None, call: _Caller, result: HostResult) -> None:
    holder = f"host-{job.host}/agent-{index}"
    for _ in range(job.calls):
        wanted = time.monotonic()
        failures = 0
        while True:
            if time.time() >= job.deadline:
                return
            lease = None
            if governor is not None:
                started = time.monotonic()
                try:
                    lease = await governor.acquire(timeout=max(0.0, job.deadline - time.time()), holder=holder)
                except AcquireTimeout:
                    return
                result.waits.append(time.monotonic() - started)
                result.phases["acquire"] += result.waits[-1]
            try:
                t0 = time.monotonic()
                try:
                    # a call still under way at the deadline is abandoned (the agent stops)
                    kind, wait, problem = await asyncio.wait_for(call(), max(0.0, job.deadline - time.time()))
                except asyncio.TimeoutError:
                    return  # the lease is released below
                t1 = time.monotonic()
                result.phases["call"] += t1 - t0
                result.attempts += 1
                if governor is not None and lease is not None and job.report:
                    ra = wait if kind == LIMITED and job.report_retry_after else None
                    try:
                        await governor.report(_OUTCOMES[kind], retry_after=ra, lease=lease, release=True)
                    except LeaseLost:
                        result.lost += 1
                    result.phases["report"] += time.monotonic() - t1
            finally:
                if lease is not None:
                    t2 = time.monotonic()
                    try:
                        await lease.release()
                    except GovernorError as error:
                        result.note_error(f"release failed: {error}")
                    result.phases["release"] += time.monotonic() - t2
            if kind == OK:
                result.ok += 1
                result.success_at.append(time.time())
                result.call_times.append(time.monotonic() - wanted)
                break
            if kind == QUOTA:
                result.quota += 1
                return  # billing, not a throttle: never retried
            failures += 1
            if kind == LIMITED:
                result.limited += 1
            else:
                result.errors += 1
                result.note_error(problem)
            wait = min(
                retry_wait(failures, wait, base=job.backoff_base, cap=job.backoff_cap),
                max(0.0, job.deadline - time.time()),  # nothing to wait for after the deadline
            )
            result.phases["backoff"] += wait
            await asyncio.sleep(wait)
    result.finished_at[index] = time.time()
