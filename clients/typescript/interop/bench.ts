/**
 * Uncontended acquire+release pairs per second from one Node client, the
 * raw INCR+DECR pairs of the same connection for scale, and what Redis
 * spent (INFO commandstats: FCALL calls and microseconds per call).
 *
 *   node dist/interop/bench.js <redis-url> [seconds]
 */
import { Redis } from "ioredis";
import { Governor } from "../src/index.js";

function fcallStats(info: string): { calls: number; usec: number } {
  const line = info.split("\n").find((l) => l.startsWith("cmdstat_fcall:")) ?? "";
  const calls = Number(/calls=(\d+)/.exec(line)?.[1] ?? 0);
  const usec = Number(/usec=(\d+)/.exec(line)?.[1] ?? 0);
  return { calls, usec };
}

async function rate(fn: () => Promise<void>, seconds: number): Promise<number> {
  const until = performance.now() + seconds * 1000;
  let n = 0;
  while (performance.now() < until) {
    await fn();
    n += 1;
  }
  return n / seconds;
}

async function main(): Promise<void> {
  const url = process.argv[2] ?? "redis://127.0.0.1:6379";
  const seconds = Number(process.argv[3] ?? "3");
  const name = `bench-node-${process.pid}`;
  const gov = Governor.fromUrl(url, name, { maxCapacity: 128, restartHold: false });
  const client = new Redis(url);
  const counter = `${name}:raw`;
  try {
    await (await gov.acquire()).release();
    const before = fcallStats(await client.info("commandstats"));
    const start = performance.now();
    let pairs = 0;
    const until = start + seconds * 1000;
    while (performance.now() < until) {
      const lease = await gov.acquire();
      await lease.release();
      pairs += 1;
    }
    const elapsed = (performance.now() - start) / 1000;
    const after = fcallStats(await client.info("commandstats"));
    const raw = await rate(async () => {
      await client.incr(counter);
      await client.decr(counter);
    }, seconds);
    const calls = after.calls - before.calls;
    console.log(JSON.stringify({
      client: "node",
      governor_pairs_s: Math.round(pairs / elapsed),
      raw_pairs_s: Math.round(raw),
      fcalls_per_pair: Number((calls / pairs).toFixed(3)),
      fcall_usec_per_call: Number(((after.usec - before.usec) / Math.max(1, calls)).toFixed(2)),
    }));
  } finally {
    await client.del(...gov.keys.keys, counter);
    client.disconnect();
    await gov.close();
  }
}

void main();
