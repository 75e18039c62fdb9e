#!/usr/bin/env python3
"""Redis server instructions per governed operation, counted by callgrind.

    python scripts/server_instructions.py [--calls 200]

Starts a private ``redis-server`` under ``valgrind --tool=callgrind``
(``apt-get install valgrind``), warms a governor up (state created, scripts
loaded, the worker listening), then counts the server's instructions over
``--calls`` repetitions of each phase, separated with ``callgrind_control
-z`` / ``--dump``: an INCR+DECR pair (the scale), acquire+release, and one
governed call (acquire, then report with release). Instruction counts do
not depend on how busy the machine is. Prints one line per phase: total
and per repetition, and the ratio to the INCR+DECR pair.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from governor import Governor, GovernorConfig, Outcome
from tests.servers import free_port, wait_until


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="repetitions of each phase")
    calls = parser.parse_args().calls
    if not (shutil.which("valgrind") and shutil.which("callgrind_control") and shutil.which("redis-server")):
        print("needs valgrind (apt-get install valgrind) and redis-server", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="governor-callgrind-"))
    port = free_port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/callgrind.%p",
         "redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_timeout=30)
    try:
        wait_until(lambda: _pings(client), 60, interval=0.2, what="redis-server under valgrind")
        config = GovernorConfig(  # a new server and name: nobody held leases here before (no restart hold)
            max_capacity=1000, lease_ttl=3600.0, queue_ttl=3600.0, redis_timeout=30.0, restart_hold=False
        )
        gov = Governor.from_url(f"redis://127.0.0.1:{port}/0", "callgrind", config)
        for _ in range(20):
            gov.acquire().release()
        time.sleep(0.5)

        def governed() -> None:
            gov.report(Outcome.SUCCESS, lease=gov.acquire(), release=True)

        phases: dict[str, Callable[[], object]] = {
            "incr+decr": lambda: (client.incr("x"), client.decr("x")),
            "acquire+release": lambda: gov.acquire().release(),
            "governed-call": governed,
        }
        for label, run in phases.items():
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
            for _ in range(calls):
                run()
            subprocess.run(["callgrind_control", f"--dump={label}", str(server.pid)], check=True, capture_output=True)
        gov.close()
    finally:
        try:
            client.shutdown(nosave=True)
        except redis.RedisError:
            pass
        client.close()
        server.wait(60)
    totals = {}
    for dump in sorted(folder.glob("callgrind.*.*")):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: dump (.*)$", text, re.M)
        total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if label and total:
            totals[label.group(1).strip()] = int(total.group(1))
    shutil.rmtree(folder, ignore_errors=True)
    scale = totals.get("incr+decr", 0) / calls
    for label in phases:
        if label in totals:
            each = totals[label] / calls
            ratio = f"{each / scale:5.1f}x" if scale else "?"
            print(f"{label:16s} {each:12,.0f} instructions each  {ratio} an INCR+DECR pair")
    return 0


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


if __name__ == "__main__":
    sys.exit(main())
