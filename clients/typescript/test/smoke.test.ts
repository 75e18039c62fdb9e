import { test } from "node:test";
import assert from "node:assert/strict";
import { Governor } from "../src/index.js";
import { privateRedis, uniqueName } from "./support.js";

test("smoke", async () => {
  const redis = await privateRedis();
  const gov = Governor.fromUrl(redis.url, uniqueName(), { maxCapacity: 2, restartHold: false, policy: "fixed" });
  try {
    const a = await gov.acquire({ timeout: 5 });
    const b = await gov.acquire({ timeout: 5 });
    assert.ok(b.fence > a.fence);
    const waiting = gov.acquire({ timeout: 5 });
    await a.release();
    const c = await waiting;
    assert.ok(c.fence > b.fence);
    const status = await gov.status();
    assert.equal(status["in_flight"], 2);
    await b.release();
    await c.release();
  } finally {
    await gov.close();
    await redis.stop();
  }
});
