"""Uncontended acquire+release pairs per second from one Python (sync) client,
and what Redis spent (INFO commandstats): the counterpart of interop/bench.ts.

    python clients/typescript/interop/pairs.py <redis-url> [seconds]
"""

from __future__ import annotations

import json
import os
import sys
import time

import redis

from governor import Governor, GovernorConfig

url, seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
client = redis.Redis.from_url(url)
name = f"bench-python-{os.getpid()}"
gov = Governor(client, name, GovernorConfig(max_capacity=128, restart_hold=False))


def stats():
    s = client.info("commandstats").get("cmdstat_fcall", {})
    return s.get("calls", 0), s.get("usec", 0)


gov.acquire().release()
c0, u0 = stats()
start = time.perf_counter()
pairs = 0
while time.perf_counter() - start < seconds:
    gov.acquire().release()
    pairs += 1
elapsed = time.perf_counter() - start
c1, u1 = stats()
print(
    json.dumps(
        {
            "client": "python",
            "governor_pairs_s": round(pairs / elapsed),
            "fcalls_per_pair": round((c1 - c0) / pairs, 3),
            "fcall_usec_per_call": round((u1 - u0) / max(1, c1 - c0), 2),
        }
    )
)
gov.close()
client.close()
