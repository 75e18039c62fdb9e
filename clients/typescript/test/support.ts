/** Test support: a private redis-server per test file, on a free loopback port. */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";

/** A loopback port nothing listens on (it was free a moment ago). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface PrivateRedis {
  url: string;
  stop(): Promise<void>;
}

/** REDIS_URL when set, else a redis-server of our own (it must be on PATH). */
export async function privateRedis(): Promise<PrivateRedis> {
  const given = process.env["REDIS_URL"];
  if (given !== undefined && given !== "") return { url: given, stop: async () => undefined };
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "governor-ts-redis-"));
  const child: ChildProcess = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on("error", () => undefined);
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch (error) {
      probe.disconnect();
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`redis-server did not start on port ${port}: ${String(error)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    stop: async () => {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Poll `condition` every 10 ms until it holds, at most `seconds`. */
export async function until(condition: () => Promise<boolean> | boolean, seconds = 5, what = "the condition"): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${seconds} s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let counter = 0;
export function uniqueName(prefix = "ts"): string {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now()}-${counter}`;
}
