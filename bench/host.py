"""One host of the swarm: A agents (asyncio tasks) running one strategy.

A :class:`HostJob` says what to run; :func:`run_host` runs it and returns a
:class:`HostResult`. Both are plain JSON so a job can travel to a worker
process on another machine (see :mod:`bench.workers`).

Each agent makes ``calls`` successful calls, one after another, through
the public API only:

- governed strategies that report (``per-host``, ``fleet-seed``, ``fleet``)
  make each call with ``AsyncGovernor.call``: it acquires a lease, calls
  the provider, classifies the outcome, reports it with the provider's
  Retry-After and releases, and retries a 429 after the Retry-After (else
  the full-jitter backoff) until the run's deadline. The agent counts what
  happened from its own side of that call: the attempts its function
  made, the verdicts of the classifier it passes (the default one), the
  admission waits from :mod:`governor.events`;
- ``fleet-lease`` writes each call as the README's first example: ``async
  with acquire() as lease``, the call, ``report(outcome, retry_after,
  lease=lease)``; a 429 is retried after its Retry-After (else the backoff)
  under a new lease;
- ``fleet-mixed`` is ``fleet-lease`` on a fleet whose odd-numbered hosts
  are Node processes (:func:`run_node_host`: the same loop, written with
  the Node client, in ``clients/typescript/interop/swarm.ts``);
- ``fixed`` (a semaphore, which never hears of outcomes) takes a lease
  with ``acquire()`` around each attempt and releases it, with the
  retries of ``none``;
- ``none`` calls the provider and retries a 429 after its Retry-After,
  else the backoff (what SDK retries do).

A quota-exhausted answer is never retried: the agent stops. Any other
error is counted and the call made again after the backoff.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from governor import AsyncGovernor, GovernorConfig, Outcome, events
from governor.backoff import retry_wait
from governor.classify import Classification, default_classifier
from governor.config import RetryPolicy
from governor.errors import AcquireTimeout, GovernorError, LeaseLost, QuotaExhausted
from governor.policies import REGISTRY, Policy

#: error messages kept per host, so a failing run says why without a flood
MAX_ERROR_SAMPLES = 5
#: seconds agents get after the deadline to stop by themselves (give back their
#: places and leases) before they are cancelled
STOP_GRACE = 5.0
#: seconds (one cancellation each) given to agents that did not stop by themselves
STOP_TRIES = 10
#: retries of one call are bounded by the run's deadline, not by a count
UNBOUNDED_ATTEMPTS = 1_000_000
#: the Node client's package, and the compiled Node host of the swarm
NODE_PACKAGE = Path(__file__).resolve().parent.parent / "clients" / "typescript"
NODE_HOST = NODE_PACKAGE / "dist" / "interop" / "swarm.js"
#: seconds a Node host may take beyond its deadline before it is killed
NODE_GRACE = STOP_GRACE + 30.0
#: the GovernorConfig fields the Node client takes (camel-cased)
NODE_FIELDS = (
    "max_capacity", "window", "resume_fraction", "retry_after_cap", "lease_ttl", "poll", "queue_ttl",
    "idle_expiry", "log_length", "redis_timeout", "restart_hold", "key_prefix", "requests_per_minute",
    "tokens_per_minute", "input_tokens_per_minute", "output_tokens_per_minute", "priorities",
    "default_priority", "aging", "tenant_weights", "default_weight", "tenant_caps", "reserve",
)  # fmt: skip


def config_to_json(config: GovernorConfig) -> dict[str, Any]:
    """A GovernorConfig as plain JSON: its fields, the policy as its name and numbers."""
    assert isinstance(config.policy, Policy)
    data = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "policy"}
    data["policy"] = {"name": config.policy.name, **asdict(config.policy)}
    return data


def config_from_json(data: dict[str, Any]) -> GovernorConfig:
    """The inverse of :func:`config_to_json`."""
    values = dict(data)
    policy = dict(values.pop("policy"))
    return GovernorConfig(policy=REGISTRY[policy.pop("name")](**policy), **values)


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
    #: the governor this host uses (None: no governor) and its config (config_to_json)
    governor: str | None = None
    config: dict[str, Any] | None = None
    #: calls go through AsyncGovernor.call (False: a bare semaphore, acquire and release)
    report: bool = True
    #: with ``report``: "call" (AsyncGovernor.call) or "lease" (the README's pattern:
    #: ``async with acquire() as lease``, the call, ``report(..., lease=lease)``)
    pattern: str = "call"
    #: the provider's Retry-After reaches call() (False: the agents' classifier drops it)
    report_retry_after: bool = True
    backoff_base: float = 0.25
    backoff_cap: float = 30.0
    client: str = "aiohttp"
    model: str = "sim-1"
    #: what runs the host's agents: "python" (:func:`run_host`) or "node" (:func:`run_node_host`)
    runtime: str = "python"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostJob:
        return cls(**data)

    def governor_config(self) -> GovernorConfig | None:
        return None if self.config is None else config_from_json(self.config)


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
    #: seconds spent in each step, summed: where the time goes. ``acquire``: admission
    #: waits; ``call``: the provider's answers; ``backoff``: the agents' own retry
    #: waits (``none``, ``fixed``, and after an error); ``other``: the rest, for
    #: ``AsyncGovernor.call`` its report and release round trips and its retry waits
    phases: dict[str, float] = field(
        default_factory=lambda: {"acquire": 0.0, "call": 0.0, "backoff": 0.0, "other": 0.0}
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


class ProviderError(Exception):
    """A provider's answer other than 200, raised as an HTTP client raises
    one: the default classifier reads its ``status``, ``headers`` and ``body``."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.body = body


class _Stopped(BaseException):
    """The run's deadline came during a provider call, which is abandoned.
    Like a cancellation it is no Exception: ``call()`` neither classifies
    nor reports it, it releases the lease and lets it through."""


class _Caller:
    """One provider call: returns on a 200, raises what the client raises otherwise."""

    def __init__(self, job: HostJob) -> None:
        self.job = job
        self.url = job.provider_url.rstrip("/") + "/v1/chat/completions"
        self.payload = {"model": job.model, "messages": [{"role": "user", "content": "Summarise the plan."}]}
        self._session: Any = None
        self._openai: Any = None
        self._gemini: Any = None
        self._httpx: Any = None
        self._bedrock: Any = None
        self._threads: Any = None

    async def open(self) -> None:
        if self.job.client == "gemini":  # google-genai's asyncio client; its retries off (its default)
            import httpx

            from governor.providers import gemini_client

            # over httpx, as gemini_client(governor=...) is (the SDK's aiohttp session warns on import)
            self._httpx = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=None))
            options = {"base_url": self.job.provider_url.rstrip("/"), "httpx_async_client": self._httpx}
            self._gemini = gemini_client(api_key="sim", http_options=options)
        elif self.job.client == "bedrock":  # boto3 is synchronous: each agent's call in a thread of its own
            from concurrent.futures import ThreadPoolExecutor

            from botocore.config import Config

            from governor.providers.bedrock import bedrock_client

            self._threads = ThreadPoolExecutor(max_workers=max(1, self.job.agents))
            self._bedrock = bedrock_client(
                endpoint_url=self.job.provider_url.rstrip("/"),
                region_name="us-east-1",
                aws_access_key_id="sim",
                aws_secret_access_key="sim",
                config=Config(max_pool_connections=max(10, self.job.agents), read_timeout=60),
            )
        elif self.job.client == "openai":
            from governor.providers import async_openai_client

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
        if self._gemini is not None:
            await self._gemini.aio.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()
        if self._bedrock is not None:
            self._bedrock.close()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def __call__(self) -> None:
        if self._gemini is not None:
            await self._gemini.aio.models.generate_content(model="gemini-2.5-flash", contents="Summarise the plan.")
            return
        if self._bedrock is not None:
            messages = [{"role": "user", "content": [{"text": "Summarise the plan."}]}]
            call = functools.partial(self._bedrock.converse, modelId="amazon.nova-lite-v1:0", messages=messages)
            await asyncio.get_running_loop().run_in_executor(self._threads, call)
            return
        if self._openai is not None:
            await self._openai.chat.completions.create(model=self.job.model, messages=self.payload["messages"])
            return
        async with self._session.post(self.url, json=self.payload) as response:
            body = await response.read()
            if response.status != 200:
                raise ProviderError(response.status, response.headers, body)


# -- what each agent saw, also when call() is what saw it ---------------------------------------


@dataclass
class _Tally:
    """One agent's counts; the listeners below find it through :data:`_AGENT`."""

    result: HostResult
    #: the kind of the last failure the agent's classifier judged
    verdict: Outcome | None = None
    #: this agent's own admission waits and provider calls, seconds (the
    #: result's phases sum those of every agent of the host)
    waited: float = 0.0
    called: float = 0.0

    def admitted(self, waited: float) -> None:
        self.result.waits.append(waited)
        self.result.phases["acquire"] += waited
        self.waited += waited

    def calling(self, seconds: float) -> None:
        self.result.phases["call"] += seconds
        self.called += seconds

    def judged(self, verdict: Classification) -> None:
        self.verdict = verdict.kind
        if verdict.kind is Outcome.RATE_LIMITED:
            self.result.limited += 1
        elif verdict.kind is Outcome.QUOTA_EXHAUSTED:
            self.result.quota += 1
        else:
            self.result.errors += 1
            self.result.note_error(verdict.description)


#: the agent whose task is running (each agent sets it in its own task's context)
_AGENT: contextvars.ContextVar[_Tally | None] = contextvars.ContextVar("governor_sim_agent", default=None)


def _on_event(event: events.Event) -> None:
    """Admission waits, from the facade's Admitted events (emitted in the caller's task)."""
    tally = _AGENT.get()
    if tally is not None and isinstance(event, events.Admitted):
        tally.admitted(event.waited_seconds)


class _GovernorWarnings(logging.Handler):
    """``call()`` logs, never raises, what goes wrong after the provider
    answered: an outcome not counted because the lease was lost (counted as
    ``lost``), a report or release that failed (kept as an error sample)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        tally = _AGENT.get()
        if tally is None:
            return
        message = record.getMessage()
        if "outcome not counted" in message:  # retry.py's _report on LeaseLost
            tally.result.lost += 1
        else:
            tally.result.note_error(message)


_listening_lock = threading.Lock()
_listening = 0
_warnings = _GovernorWarnings()


def _listen(on: bool) -> None:
    """Subscribe the listeners while any host of this process runs (hosts may be threads)."""
    global _listening
    with _listening_lock:
        _listening += 1 if on else -1
        if on and _listening == 1:
            events.subscribe(_on_event)
            logging.getLogger("governor").addHandler(_warnings)
        elif not on and _listening == 0:
            events.unsubscribe(_on_event)
            logging.getLogger("governor").removeHandler(_warnings)


# -- the host and its agents -------------------------------------------------------------------------


def node_host_missing() -> str | None:
    """Why a Node host cannot run here (None: it can), and what to do about it."""
    if shutil.which("node") is None:
        return "node is not on PATH: Node hosts need Node 20+"
    if not NODE_HOST.is_file():
        return f"{NODE_HOST} is missing: run `npm ci && npm run build` in {NODE_PACKAGE}"
    return None


def node_config(config: GovernorConfig) -> dict[str, Any]:
    """The Node client's config of a GovernorConfig: its fields camel-cased,
    the policy as its name and stored fields."""
    assert isinstance(config.policy, Policy)
    out: dict[str, Any] = {"policy": config.policy.name, "policyFields": config.policy.script_fields(config.window)}
    for name in NODE_FIELDS:
        value = getattr(config, name)
        if name in ("tenant_weights", "tenant_caps"):
            value = dict(value)
        elif name == "priorities":
            value = list(value)
        head, *rest = name.split("_")
        out[head + "".join(word.title() for word in rest)] = value
    return out


def run_node_host(job: HostJob, redis_url: str) -> HostResult:
    """Run one host's agents in a Node process (the Node client, same loop
    as ``fleet-lease``) on the governor at ``redis_url``; blocks until it ends."""
    missing = node_host_missing()
    if missing is not None:
        raise RuntimeError(f"cannot run Node host {job.host}: {missing}")
    config = job.governor_config()
    if job.governor is None or config is None:
        raise ValueError("a Node host needs a governor and its config")
    given = json.dumps({"job": job.to_json(), "url": redis_url, "config": node_config(config)})
    timeout = max(0.0, job.deadline - time.time()) + NODE_GRACE
    try:
        done = subprocess.run(
            ["node", str(NODE_HOST)], input=given, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Node host {job.host} did not end within {timeout:.0f} s; it was killed") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"Node host {job.host} exited with status {done.returncode}: {done.stderr.strip()[-2000:]}")
    return HostResult.from_json(json.loads(done.stdout.strip().splitlines()[-1]))


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
    _listen(True)
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
        _listen(False)
        await caller.close()
        if governor is not None:
            client = governor.client
            await governor.aclose()
            await client.aclose()
    return result


async def _agent(job: HostJob, index: int, governor: AsyncGovernor | None, call: _Caller, result: HostResult) -> None:
    tally = _Tally(result)
    _AGENT.set(tally)  # this task's own context: the listeners find this agent
    holder = f"host-{job.host}/agent-{index}"
    for _ in range(job.calls):
        wanted = time.monotonic()
        if governor is not None and job.report and job.pattern == "lease":
            done = await _lease_call(job, holder, governor, call, tally)
        elif governor is not None and job.report:
            done = await _governed_call(job, holder, governor, call, tally)
        else:
            done = await _sdk_call(job, holder, governor, call, tally)
        if not done:
            return
        result.ok += 1
        result.success_at.append(time.time())
        result.call_times.append(time.monotonic() - wanted)
    result.finished_at[index] = time.time()


async def _attempt(job: HostJob, call: _Caller, tally: _Tally) -> None:
    """One provider call, abandoned (``_Stopped``) when the deadline comes first."""
    left = job.deadline - time.time()
    if left <= 0:
        raise _Stopped
    started = time.monotonic()
    answered = True
    try:
        await asyncio.wait_for(call(), left)
    except asyncio.TimeoutError:
        if time.time() >= job.deadline:
            answered = False
            raise _Stopped from None
        raise
    finally:
        tally.calling(time.monotonic() - started)
        if answered:
            tally.result.attempts += 1


async def _governed_call(job: HostJob, holder: str, governor: AsyncGovernor, call: _Caller, tally: _Tally) -> bool:
    """One successful call through ``AsyncGovernor.call``; False: the agent stops."""
    result = tally.result

    def classify(error: BaseException) -> Classification:
        verdict = default_classifier(error)
        tally.judged(verdict)
        if verdict.retry_after is not None and not job.report_retry_after:
            return Classification(verdict.kind, None, verdict.description)
        return verdict

    async def attempt() -> None:
        await _attempt(job, call, tally)

    errors = 0
    while True:
        left = job.deadline - time.time()
        if left <= 0:
            return False
        # call() retries 429s until the run's deadline, with the scenario's backoff
        retry = RetryPolicy(max_attempts=UNBOUNDED_ATTEMPTS, deadline=left, base=job.backoff_base, cap=job.backoff_cap)
        started, waited, called = time.monotonic(), tally.waited, tally.called
        try:
            await governor.call(attempt, classify=classify, retry=retry, timeout=left, holder=holder)
            return True
        except (AcquireTimeout, QuotaExhausted, _Stopped):
            return False  # the deadline came in the queue or in a call; or billing, never retried
        except GovernorError:
            raise
        except Exception:  # noqa: BLE001 - the provider's error, as call() lets it through
            if tally.verdict is not Outcome.ERROR:
                return False  # a 429 call() gave up on: the deadline comes before its next try
        finally:
            spent = time.monotonic() - started
            result.phases["other"] += spent - (tally.waited - waited) - (tally.called - called)
        # call() propagates an error that is no throttle: call again after the backoff
        errors += 1
        await _backoff(job, result, errors, None)


async def _lease_call(job: HostJob, holder: str, governor: AsyncGovernor, call: _Caller, tally: _Tally) -> bool:
    """One successful call as the README writes it: a lease per attempt, the
    outcome reported with the lease (and the provider's Retry-After), a 429
    retried after that Retry-After (else the backoff); False: the agent stops."""
    result = tally.result
    failures = 0
    while True:
        left = job.deadline - time.time()
        if left <= 0:
            return False
        retry_after: float | None = None
        try:
            async with governor.acquire(timeout=left, holder=holder) as lease:
                try:
                    await _attempt(job, call, tally)
                except _Stopped:
                    raise
                except Exception as error:  # noqa: BLE001 - the provider's error, classified as the README says
                    verdict = default_classifier(error)
                    tally.judged(verdict)
                    retry_after = verdict.retry_after if job.report_retry_after else None
                    started = time.monotonic()
                    await governor.report(verdict.kind, retry_after=retry_after, lease=lease)
                    result.phases["other"] += time.monotonic() - started
                    if verdict.kind is Outcome.QUOTA_EXHAUSTED:
                        return False  # billing, not a throttle: never retried
                else:
                    started = time.monotonic()
                    await governor.report(Outcome.SUCCESS, lease=lease)
                    result.phases["other"] += time.monotonic() - started
                    return True
        except (AcquireTimeout, _Stopped):
            return False
        except LeaseLost:
            result.lost += 1  # the lease expired under a stall: its outcome was not counted
        failures += 1
        await _backoff(job, result, failures, retry_after)


async def _sdk_call(job: HostJob, holder: str, governor: AsyncGovernor | None, call: _Caller, tally: _Tally) -> bool:
    """One successful call with SDK-style retries, each attempt under a lease
    of the semaphore when there is one; False: the agent stops."""
    result = tally.result
    failures = 0
    while True:
        if time.time() >= job.deadline:
            return False
        try:
            if governor is None:
                await _attempt(job, call, tally)
            else:
                try:
                    lease = await governor.acquire(timeout=max(0.0, job.deadline - time.time()), holder=holder)
                except AcquireTimeout:
                    return False
                try:
                    await _attempt(job, call, tally)
                finally:
                    released = time.monotonic()
                    try:
                        await lease.release()
                    except GovernorError as error:
                        result.note_error(f"release failed: {error}")
                    result.phases["other"] += time.monotonic() - released
            return True
        except _Stopped:
            return False
        except Exception as error:  # noqa: BLE001 - the provider's error, classified as an SDK would
            verdict = default_classifier(error)
            tally.judged(verdict)
            if verdict.kind is Outcome.QUOTA_EXHAUSTED:
                return False  # billing, not a throttle: never retried
            failures += 1
            await _backoff(job, result, failures, verdict.retry_after)


async def _backoff(job: HostJob, result: HostResult, failures: int, retry_after: float | None) -> None:
    wait = min(
        retry_wait(failures, retry_after, base=job.backoff_base, cap=job.backoff_cap),
        max(0.0, job.deadline - time.time()),  # nothing to wait for after the deadline
    )
    result.phases["backoff"] += wait
    await asyncio.sleep(wait)
