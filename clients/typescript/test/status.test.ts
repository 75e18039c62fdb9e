/** status(): the Python client's Status, camel-cased, in seconds and booleans, read from a private redis-server. */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Governor, StateError, Status, type GovernorConfig } from "../src/index.js";
import { Core } from "../src/core.js";
import { resolveConfig } from "../src/config.js";
import { SCHEMA_VERSION, STATUS_FIELDS } from "../src/generated.js";
import { STATUS_READ } from "../src/status.js";
import { privateRedis, uniqueName, type PrivateRedis } from "./support.js";

let redis: PrivateRedis;
const open: Governor[] = [];

before(async () => {
  redis = await privateRedis();
});

after(async () => {
  for (const gov of open) await gov.close();
  await redis.stop();
});

const START = 1_000_000; // seconds, the injected clock's

function governor(config: GovernorConfig = {}): [Governor, { now: number }] {
  const clock = { now: START };
  const gov = Governor.fromUrl(redis.url, uniqueName("status"), { restartHold: false, maxCapacity: 4, clock: () => clock.now, ...config });
  open.push(gov);
  return [gov, clock];
}

test("a fresh governor's status: counts, seconds, Unix seconds, null for none, booleans", async () => {
  const [gov] = governor({ window: 12.5, leaseTtl: 45, tokensPerMinute: 6000 });
  const s = await gov.status();
  assert.ok(s instanceof Status);
  assert.equal(s.name, gov.name);
  assert.equal(s.maxCapacity, 4);
  assert.equal(s.inFlight, 0);
  assert.equal(s.queued, 0);
  assert.equal(s.paused, false);
  assert.equal(s.pauseKind, "");
  assert.equal(s.pausedUntil, null);
  assert.equal(s.notBefore, null);
  assert.equal(s.holdUntil, null);
  assert.equal(s.quotaAt, null);
  assert.equal(s.window, 12.5, "window_ms read as seconds");
  assert.equal(s.ttlMax, 45, "ttl_max read as seconds");
  assert.equal(s.created, START, "created: Unix seconds");
  assert.equal(s.now, START, "now: Unix seconds");
  assert.equal(s.policy, "adaptive");
  assert.equal(s.holding, false);
  assert.equal(s.rateLimitedShare, 0);
  assert.equal(s.budget("tokens")?.limit, 6000);
  assert.equal(s.budget("requests"), undefined);
  assert.ok(Object.isFrozen(s) && Object.isFrozen(s.budgets));
});

test("a pause with an end, a Retry-After hold and the window's counts, as a caller reads them", async () => {
  const [gov, clock] = governor();
  let s = await gov.pause("maintenance", 60);
  assert.equal(s.paused, true);
  assert.equal(s.pauseKind, "operator");
  assert.equal(s.pauseReason, "maintenance");
  assert.equal(s.pausedUntil, START + 60);
  await gov.resume();
  clock.now += 1;
  await (await gov.acquire()).release();
  await gov.report("rate_limited", { retryAfter: 5 });
  s = await gov.status();
  assert.equal(s.paused, false);
  assert.equal(s.notBefore, START + 1 + 5, "the hold's end in Unix seconds");
  assert.equal(s.holding, true);
  assert.equal(s.windowAttempts, 1);
  assert.equal(s.windowRateLimited, 1);
  assert.equal(s.rateLimitedShare, 1);
  clock.now += 6;
  assert.equal((await gov.status()).holding, false, "the hold over by the status's own clock");
});

test("every field of the protocol's status reply is read (STATUS_FIELDS, generated)", () => {
  const read = new Set([...Object.keys(STATUS_READ), "budgets"]);
  assert.deepEqual([...STATUS_FIELDS].filter((f) => !read.has(f)), []);
});

/** a status reply with every field, changed by `change` (null: left out) */
function reply(change: Record<string, string | null>): unknown[] {
  const fields: Record<string, string> = Object.fromEntries(Object.keys(STATUS_READ).map((f) => [f, "0"]));
  Object.assign(fields, { epoch: "e", policy: "fixed" }, ...["pause_kind", "pause_reason", "blocked", "held_back", "hold_reason"].map((f) => ({ [f]: "" })));
  for (const [k, v] of Object.entries(change)) {
    if (v === null) delete fields[k];
    else fields[k] = v;
  }
  return [SCHEMA_VERSION, "status", ...Object.entries(fields).flat(), "budgets", []];
}

test("an unreadable status reply is a StateError that names the field", () => {
  const core = new Core("n", resolveConfig({}));
  const parse = (change: Record<string, string | null>): unknown => {
    return core.parseStatus(reply(change), "status");
  };
  assert.ok(parse({}) instanceof Status);
  assert.throws(() => parse({ in_flight: null }), (e: unknown) => e instanceof StateError && /in_flight is missing/.test(e.message));
  assert.throws(() => parse({ paused: "yes" }), (e: unknown) => e instanceof StateError && /paused is "yes", not 0 or 1/.test(e.message));
  assert.throws(() => parse({ capacity: "" }), (e: unknown) => e instanceof StateError && /capacity is "", not a number/.test(e.message));
});
