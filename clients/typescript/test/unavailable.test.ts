/** Redis out of reach: one GovernorUnavailable naming the cause, and no ioredis noise on the console. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Governor, GovernorUnavailable } from "../src/index.js";
import { freePort, privateRedis } from "./support.js";

/** what `fn` wrote with console.error and console.warn (where ioredis reports an unhandled error event) */
async function consoleOf(fn: () => Promise<void>): Promise<string> {
  const written: string[] = [];
  const { error, warn } = console;
  console.error = (...args: unknown[]) => void written.push(args.map(String).join(" "));
  console.warn = console.error;
  try {
    await fn();
    await new Promise((r) => setTimeout(r, 300)); // reconnection attempts meanwhile
  } finally {
    console.error = error;
    console.warn = warn;
  }
  return written.join("\n");
}

function unreachable(port: number): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof GovernorUnavailable, String(e));
    assert.match(e.message, new RegExp(`Redis at 127\\.0\\.0\\.1:${port} is unreachable \\(connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\); check the URL and that Redis is up`));
    assert.doesNotMatch(e.message, /maxRetriesPerRequest/);
    assert.equal((e.cause as { code?: string } | undefined)?.code, "ECONNREFUSED", "the connection's error is the cause");
    return true;
  };
}

test("no Redis: acquire, status and report each throw GovernorUnavailable naming the cause, and nothing is printed", { timeout: 30_000 }, async () => {
  const port = await freePort();
  const gov = Governor.fromUrl(`redis://127.0.0.1:${port}`, "down");
  const printed = await consoleOf(async () => {
    try {
      await assert.rejects(gov.acquire({ timeout: 5 }), unreachable(port));
      await assert.rejects(gov.status(), unreachable(port));
      await assert.rejects(gov.report("success"), unreachable(port));
    } finally {
      await gov.close();
    }
  });
  assert.equal(printed, "");
});

const own = process.env["REDIS_URL"] ? "needs a redis-server of its own to stop (REDIS_URL is set)" : false;

test("Redis gone while a lease is held: the next call says so once, quietly", { skip: own, timeout: 30_000 }, async () => {
  const redis = await privateRedis();
  const port = Number(new URL(redis.url).port);
  const gov = Governor.fromUrl(redis.url, "gone", { restartHold: false });
  const lease = await gov.acquire();
  const printed = await consoleOf(async () => {
    try {
      await redis.stop();
      await assert.rejects(gov.report("success", { lease, release: true }), unreachable(port));
    } finally {
      await gov.close();
    }
  });
  assert.equal(printed, "");
});
