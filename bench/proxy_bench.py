"""What the governing proxy adds to a call: p50 and p90 latency, through it and direct.

Run from a checkout: ``python -m bench.proxy_bench [--calls 400]``. It
starts a private redis-server, the mock provider (``python -m bench
provider``, answering in about 1 ms) and ``governor proxy`` in processes
of their own, then makes the same chat completion with the openai SDK, one
at a time, three ways in turn (so drift on a busy machine hits each alike):

- ``direct``: the SDK straight to the mock, ungoverned;
- ``governed``: the SDK's governed client (``openai_client(governor=)``),
  straight to the mock: the governor's own cost;
- ``proxy``: the SDK at the proxy's ``/openai/v1``, which governs.

The proxy's own cost is ``proxy - governed`` (the hop and its HTTP
server), its whole cost to a tool ``proxy - direct``. Goal: the proxy adds
at most 2 ms p50 over the same call governed direct. It also prints the
proxy process's CPU time per call (from /proc, where there is one): on a
machine whose cores are shared, the figure that moves least from run to
run. ``--profile FILE`` runs the proxy under cProfile timing CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from bench.kit import percentile
from bench.redis_server import RedisServer, free_port

GOAL_MS = 2.0
HI = [{"role": "user", "content": "hello there"}]


def _serve(args: list[str], url: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return process
        except OSError as error:
            if process.poll() is not None:
                said = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"{args[:3]} exited: {said}") from error
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{args[:3]} did not answer {url} within 30 s")


def _cpu_ms(process: subprocess.Popen[bytes]) -> float | None:
    """CPU milliseconds (user + system) ``process`` has used so far; None where /proc is not."""
    try:
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _caller(client: Any) -> Callable[[], Any]:
    return lambda: client.chat.completions.create(model="gpt-4o-mini", messages=HI)


def run(calls: int, profile: str | None = None) -> dict[str, Any]:
    import openai

    from governor import Governor, GovernorConfig
    from governor.providers import openai_client

    redis = RedisServer().start()
    cpu_before = cpu_after = None
    children: list[subprocess.Popen[bytes]] = []
    try:
        mock_port, proxy_port = free_port(), free_port()
        mock = f"http://127.0.0.1:{mock_port}"
        children.append(
            _serve(
                [sys.executable, "-m", "bench", "provider", "--port", str(mock_port), "--latency", "0.001",
                 "--sigma", "0", "--limit", "1000", "--rpm", "100000000", "--tpm", "1000000000"],
                f"{mock}/healthz",
            )
        )  # fmt: skip
        redis.wait_older_than(GovernorConfig().lease_ttl)  # a new Redis holds admissions for one TTL
        config = GovernorConfig(max_capacity=64)
        gov = Governor.from_url(redis.url, "bench-proxy", config)
        gov.status()
        governor_cli = os.path.join(os.path.dirname(sys.executable), "governor")
        profiler = [] if profile is None else [sys.executable, "-m", "bench.proxy_bench", "--serve-profiled", profile]
        proxy = _serve(
            [*([governor_cli] if profile is None else profiler), "--url", redis.url, "proxy", "--openai", "bench-proxy",
             "--openai-upstream", mock, "--port", str(proxy_port)],
            f"http://127.0.0.1:{proxy_port}/healthz",
        )  # fmt: skip
        children.append(proxy)
        clients: dict[str, Any] = {
            "direct": openai.OpenAI(base_url=f"{mock}/v1", api_key="k", max_retries=0),
            "governed": openai_client(governor=gov, base_url=f"{mock}/v1", api_key="k"),
            "proxy": openai.OpenAI(base_url=f"http://127.0.0.1:{proxy_port}/openai/v1", api_key="k", max_retries=0),
        }
        times: dict[str, list[float]] = {way: [] for way in clients}
        calls_of: dict[str, Callable[[], Any]] = {way: _caller(client) for way, client in clients.items()}
        for _ in range(20):  # warm the connections
            for call in calls_of.values():
                call()
        cpu_before = _cpu_ms(proxy)
        for _ in range(calls):
            for way, call in calls_of.items():
                start = time.perf_counter()
                call()
                times[way].append((time.perf_counter() - start) * 1000)
        cpu_after = _cpu_ms(proxy)
        for client in clients.values():
            client.close()
        gov.close()
    finally:
        for child in children:
            child.terminate()
            child.wait(10)
        redis.cleanup()
    result: dict[str, Any] = {}
    for way, values in times.items():
        result[way] = {"p50": percentile(values, 50), "p90": percentile(values, 90)}
    if cpu_before is not None and cpu_after is not None:
        result["proxy"]["cpu"] = (cpu_after - cpu_before) / calls
    return result


def _serve_profiled(out: str, args: list[str]) -> int:
    """``governor *args`` under cProfile timing CPU (not wall: a process
    preempted in a system call would charge the call for it), its stats
    written to ``out`` when it stops."""
    import cProfile

    from governor.cli import main as governor

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        governor(args, standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-profiled"]:  # the proxy's process under --profile
        return _serve_profiled(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls each way (default 400)")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="run the proxy under cProfile (CPU time), its stats written to FILE "
        "(read them with python -m pstats FILE)",
    )
    options = parser.parse_args(argv)
    result = run(options.calls, options.profile)
    print(f"{'way':<10} {'p50 ms':>8} {'p90 ms':>8}")
    for way, q in result.items():
        print(f"{way:<10} {q['p50']:>8.2f} {q['p90']:>8.2f}")
    added = result["proxy"]["p50"] - result["governed"]["p50"]
    whole = result["proxy"]["p50"] - result["direct"]["p50"]
    if "cpu" in result["proxy"]:
        print(f"the proxy's own CPU: {result['proxy']['cpu']:.2f} ms a call")
    print(f"the proxy adds {added:.2f} ms p50 over the call governed direct ({whole:.2f} ms over ungoverned)")
    met = added <= GOAL_MS
    print(f"{'MET' if met else 'MISS'}: the proxy adds <= {GOAL_MS:g} ms p50")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
