"""The dashboard's panels from a real run, where Grafana cannot run, and a screenshot of ``governor top``.

A private redis-server, one governor shared by 24 worker threads calling a
provider stand-in with a hidden concurrency limit (12, then 6 from the
middle of the run: it answers beyond the limit with a rate-limit error and
a Retry-After of 0.5 s) under two classes and three tenants, with a tokens
budget. Every 0.5 s the exporter's collector (governor.metrics) is read,
as Prometheus would scrape it; the clients' waits come from the facades'
events. The panels of docker/grafana/dashboards/fleet-governor.json are
then drawn with matplotlib through the benchmarks' chart frame
(bench/kit.py), and ``governor top``'s screen is saved as SVG mid-run.

    python docker/grafana/panels.py --out docs/images      # from a checkout, ~45 s
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a folder of the checkout, not installed

import prometheus_client.core  # noqa: E402, F401  (imported before the threads: they observe the histogram)
import redis  # noqa: E402

from bench.kit import chart  # noqa: E402
from governor import AcquireTimeout, Classification, Governor, GovernorConfig, Outcome, RetryPolicy, events  # noqa: E402
from governor.cli.top import make_app, read_all  # noqa: E402
from governor.metrics import GovernorCollector  # noqa: E402

NAME = "chat"
CLASSES = ("interactive", "batch")
TENANTS = ("acme", "zeta", "umbra")


class RateLimited(Exception):
    pass


class Provider:
    """In-process stand-in for a provider: a hidden concurrency limit that changes at ``switch``."""

    def __init__(self, limits: tuple[int, int], switch: float) -> None:
        self.limits, self.switch, self.started = limits, switch, time.monotonic()
        self.lock, self.running = threading.Lock(), 0

    def __call__(self) -> str:
        limit = self.limits[time.monotonic() - self.started >= self.switch]
        with self.lock:
            self.running += 1
            over = self.running > limit
        try:
            time.sleep(random.uniform(0.05, 0.15))
            if over:
                raise RateLimited("429")
            return "ok"
        finally:
            with self.lock:
                self.running -= 1


def classify(error: BaseException) -> Classification:
    if isinstance(error, RateLimited):
        return Classification(Outcome.RATE_LIMITED, retry_after=0.5, description="429")
    return Classification(Outcome.ERROR)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(seconds: float, out: Path) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="panels-redis-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", folder],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        return _run(seconds, out, port)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _run(seconds: float, out: Path, port: int) -> dict[str, Any]:
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    config = GovernorConfig(
        max_capacity=24, priorities=CLASSES, default_priority="batch", tenant_weights={"acme": 2},
        tokens_per_minute=5_000_000,
    )  # fmt: skip
    gov = Governor(client, NAME, config)
    gov.resume(lift_recovery_hold=True)  # a new Redis: nobody from before to wait for
    provider = Provider((12, 6), seconds / 2)
    waits: list[tuple[float, str, float]] = []
    place: dict[int, str] = {}

    def listen(event: events.Event) -> None:
        if isinstance(event, events.AcquireStarted):
            place[threading.get_ident()] = event.priority
        elif isinstance(event, events.Admitted):
            waits.append((time.monotonic(), place.get(threading.get_ident(), ""), event.waited_seconds))

    events.subscribe(listen)
    stop = threading.Event()
    retry = RetryPolicy(max_attempts=20, base=0.05, cap=1.0)

    def worker(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            priority = "interactive" if rng.random() < 0.3 else "batch"
            tenant = rng.choice(TENANTS)
            try:
                gov.call(provider, classify=classify, retry=retry, tokens=rng.randint(200, 2000), timeout=5,
                         priority=priority, tenant=tenant)  # fmt: skip
            except (RateLimited, AcquireTimeout):
                pass

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(24)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    collector = GovernorCollector(client, [NAME])
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(list)
    shot = False
    while time.monotonic() - started < seconds:
        now = time.monotonic() - started
        for family in collector.collect():
            for sample in family.samples:
                series[sample.name, tuple(sorted(sample.labels.items()))].append((now, sample.value))
        if not shot and now > seconds * 0.7:
            shot = True
            asyncio.run(screenshot(client, out / "top.svg"))
        time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(max(0.1, started + seconds + 10 - time.monotonic()))
    events.unsubscribe(listen)
    gov.close()
    client.close()
    return {"series": series, "waits": [(t - started, p, w) for t, p, w in waits], "seconds": seconds}


async def screenshot(client: Any, path: Path) -> None:
    app = make_app(lambda: read_all(client, "governor"), interval=30)
    async with app.run_test(size=(132, 44)) as pilot:
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))


def pick(series: dict[Any, Any], metric: str, **labels: str) -> list[tuple[float, float]]:
    for (name, found), points in series.items():
        if name == metric and all(dict(found).get(k) == v for k, v in labels.items()):
            return points  # type: ignore[no-any-return]
    return []


def plot(result: dict[str, Any], path: Path) -> None:
    s = result["series"]
    with chart(path, 4, 2, (13, 13)) as axes:

        def line(ax: Any, points: list[tuple[float, float]], label: str, **style: Any) -> None:
            if points:
                ax.plot([t for t, _ in points], [v for _, v in points], label=label, **style)

        ax = axes[0][0]
        ax.set_title("Capacity, in flight and the learnt ceiling")
        for metric, label in (
            ("governor_capacity", "capacity"),
            ("governor_in_flight", "in flight"),
            ("governor_ceiling", "learnt ceiling"),
            ("governor_max_capacity", "configured max"),
        ):
            line(ax, pick(s, metric), label)  # fmt: skip
        ax = axes[0][1]
        ax.set_title("Admission wait p50 / p99 by class (clients), 2 s windows")
        for priority in CLASSES:
            windows: dict[int, list[float]] = defaultdict(list)
            for t, p, w in result["waits"]:
                if p == priority:
                    windows[int(t // 2)].append(w)
            for q in (0.5, 0.99):
                points = [(k * 2 + 1, sorted(v)[min(len(v) - 1, int(q * len(v)))]) for k, v in sorted(windows.items())]
                line(ax, points, f"{priority} p{int(q * 100)}", linestyle="-" if q == 0.5 else "--")
        ax.set_ylabel("s")
        ax = axes[1][0]
        ax.set_title("Longest wait now by class (Redis)")
        for priority in CLASSES:
            line(ax, pick(s, "governor_priority_oldest_wait_seconds", priority=priority), priority)
        ax.set_ylabel("s")
        ax = axes[1][1]
        ax.set_title("Queued by class")
        for priority in CLASSES:
            line(ax, pick(s, "governor_priority_queued", priority=priority), priority)
        ax = axes[2][0]
        ax.set_title("429s: rate-limited share of the window's attempts")
        limited, attempts = pick(s, "governor_window_rate_limited"), pick(s, "governor_window_attempts")
        line(ax, [(t, r / max(a, 1)) for (t, r), (_, a) in zip(limited, attempts, strict=True)], "rate-limited share")
        ax = axes[2][1]
        ax.set_title("Holds and pauses")
        line(ax, pick(s, "governor_holding"), "holding")
        line(ax, pick(s, "governor_paused"), "paused")
        ax = axes[3][0]
        ax.set_title("Budgets remaining (tokens bucket, share of its burst)")
        level = pick(s, "governor_budget_level", budget="tokens")
        burst = pick(s, "governor_budget_burst", budget="tokens")
        line(ax, [(t, v / max(b, 1)) for (t, v), (_, b) in zip(level, burst, strict=True)], "tokens")
        ax = axes[3][1]
        ax.set_title("Per-tenant share of the leases in flight")
        tenants = {t: pick(s, "governor_tenant_in_flight", tenant=t) for t in TENANTS}
        for tenant, points in tenants.items():
            totals = [sum(p[i][1] for p in tenants.values() if i < len(p)) for i in range(len(points))]
            line(ax, [(t, v / max(total, 1)) for (t, v), total in zip(points, totals, strict=True)], tenant)
        for row in axes:
            for ax in row:
                ax.set_xlabel("seconds into the run")
                ax.grid(alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=8, loc="upper left")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args.seconds, args.out)
    plot(result, args.out / "dashboard.png")
    waits = [w for _, _, w in result["waits"]]
    print(f"{len(waits)} admissions; wrote {args.out / 'dashboard.png'} and {args.out / 'top.svg'}")


if __name__ == "__main__":
    main()
