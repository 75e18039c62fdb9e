/** The Node client on a private redis-server: admission, cancel-safety, heartbeat, reports, call(). */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { AbortError, AcquireTimeout, ConfigError, Governor, LeaseLost, Outcome, QuotaExhausted, type GovernorConfig } from "../src/index.js";
import { privateRedis, uniqueName, until, type PrivateRedis } from "./support.js";

let redis: PrivateRedis;
const open: Governor[] = [];

before(async () => {
  redis = await privateRedis();
});

after(async () => {
  for (const gov of open) await gov.close();
  await redis.stop();
});

function governor(config: GovernorConfig = {}, name = uniqueName()): Governor {
  const gov = Governor.fromUrl(redis.url, name, { policy: "fixed", restartHold: false, maxCapacity: 1, ...config });
  open.push(gov);
  return gov;
}

test("grants in FIFO order with growing fences, through pub/sub wakes", async () => {
  const gov = governor({ poll: 30 }); // a wake, not the refresh, must deliver the grants
  const first = await gov.acquire();
  const order: string[] = [];
  const waiting = ["a", "b", "c"].map(async (who, i) => {
    await new Promise((r) => setTimeout(r, 20 * i));
    const lease = await gov.acquire({ holder: who, timeout: 10 });
    order.push(who);
    const fence = lease.fence;
    await lease.release();
    return fence;
  });
  await until(async () => (await gov.status()).queued === 3, 5, "three waiters queued");
  await first.release();
  const fences = await Promise.all(waiting);
  assert.deepEqual(order, ["a", "b", "c"]);
  assert.ok(fences[0]! > first.fence && fences[1]! > fences[0]! && fences[2]! > fences[1]!);
});

test("a higher class goes first", async () => {
  const gov = governor({ poll: 30 });
  const first = await gov.acquire();
  const order: string[] = [];
  const low = gov.acquire({ priority: "batch", timeout: 10 }).then(async (l) => { order.push("batch"); await l.release(); });
  await until(async () => (await gov.status()).queued === 1);
  const high = gov.acquire({ priority: "interactive", timeout: 10 }).then(async (l) => { order.push("interactive"); await l.release(); });
  await until(async () => (await gov.status()).queued === 2);
  await first.release();
  await Promise.all([low, high]);
  assert.deepEqual(order, ["interactive", "batch"]);
});

test("an abort while queued gives the place back; nothing is held", async () => {
  const gov = governor({ queueTtl: 60 }); // the place would outlive the test unless given back
  const holder = await gov.acquire();
  const controller = new AbortController();
  const waiting = gov.acquire({ signal: controller.signal });
  await until(async () => (await gov.status()).queued === 1, 5, "the waiter queued");
  controller.abort(new Error("the user went away"));
  await assert.rejects(waiting, AbortError);
  assert.equal((await gov.status()).queued, 0, "the place given back by the time the abort is seen");
  await holder.release();
  const status = await gov.status();
  assert.equal(status.inFlight, 0);
});

test("an abort racing a grant never leaks the slot", async () => {
  const gov = governor({ queueTtl: 60, leaseTtl: 60 });
  for (let round = 0; round < 20; round += 1) {
    const holder = await gov.acquire();
    const controller = new AbortController();
    const waiting = gov.acquire({ signal: controller.signal }).then((l) => l.release(), (e: unknown) => {
      assert.ok(e instanceof AbortError);
    });
    await until(async () => (await gov.status()).queued === 1);
    const release = holder.release();
    setTimeout(() => controller.abort(), round % 4); // before, at, or after the grant
    await release;
    await waiting;
    await until(async () => {
      const s = await gov.status();
      return s.inFlight === 0 && s.queued === 0;
    }, 5, `round ${round}: the slot back`);
  }
});

test("an acquire timeout gives the place back", async () => {
  const gov = governor({ queueTtl: 60 });
  const holder = await gov.acquire();
  await assert.rejects(gov.acquire({ timeout: 0.2 }), AcquireTimeout);
  assert.equal((await gov.status()).queued, 0);
  await holder.release();
});

test("the heartbeat keeps a lease alive past its TTL", async () => {
  const gov = governor({ leaseTtl: 0.3 });
  const lease = await gov.acquire();
  const client = gov.redis();
  const first = Number(await client.zscore(gov.keys.byName["leases"]!, lease.id));
  await until(async () => Number(await client.zscore(gov.keys.byName["leases"]!, lease.id)) > first + 600, 5, "three renewals");
  assert.equal(lease.lost, false);
  assert.equal((await gov.status()).inFlight, 1);
  await lease.release();
});

test("renew with an injected clock: a renewed lease outlives its TTL, an unrenewed one is lost", async () => {
  let now = 1_000_000;
  const gov = governor({ leaseTtl: 30, clock: () => now, maxCapacity: 2 });
  const kept = await gov.acquire();
  const dropped = await gov.acquire();
  await dropped.release();
  now += 20;
  await gov.renew();
  now += 20; // 40 s after the grant: alive only through the renewal
  assert.equal(kept.lost, false);
  assert.equal((await gov.status()).inFlight, 1);
  now += 31;
  assert.equal(kept.lost, true);
  await assert.rejects(gov.report("success", { lease: kept }), LeaseLost);
});

test("a rate-limited report with retryAfter holds the fleet", async () => {
  let now = 2_000_000;
  const gov = governor({ clock: () => now, maxCapacity: 2 });
  const lease = await gov.acquire();
  await gov.report("rate_limited", { lease, retryAfter: 5, release: true });
  assert.equal(await gov.tryAcquire(), null);
  now += 5.5;
  const again = await gov.tryAcquire();
  assert.ok(again !== null);
  await again.release();
});

test("call() reports an overloaded provider (a 529) as no load signal: the adaptive policy does not count it against the fleet", async () => {
  const gov = governor({ policy: "adaptive", maxCapacity: 8 });
  let calls = 0;
  await gov.call(async () => {
    calls += 1;
    if (calls < 2) throw Object.assign(new Error("529 Overloaded"), { status: 529, headers: { "retry-after-ms": "20" }, error: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } });
    return {};
  }, { retry: { maxAttempts: 3 } });
  const status = await gov.status();
  assert.deepEqual([calls, status.windowAttempts, status.windowRateLimited, status.notBefore], [2, 2, 0, null]);
});

test("call() retries a throttled call after its Retry-After and reports each outcome", async () => {
  const gov = governor({ maxCapacity: 2 });
  let calls = 0;
  const result = await gov.call(async () => {
    calls += 1;
    if (calls < 3) throw Object.assign(new Error("429 Too Many Requests"), { status: 429, headers: { "retry-after-ms": "20" } });
    return { usage: { prompt_tokens: 3, completion_tokens: 4 } };
  }, { retry: { maxAttempts: 5 } });
  assert.equal(calls, 3);
  assert.deepEqual(result.usage, { prompt_tokens: 3, completion_tokens: 4 });
  const status = await gov.status();
  assert.equal(status.windowAttempts, 3);
  assert.equal(status.windowRateLimited, 2);
  assert.equal(status.inFlight, 0);
});

test("call() stops at once on a quota error, and passes other errors through", async () => {
  const gov = governor();
  await assert.rejects(gov.call(async () => {
    throw Object.assign(new Error("quota"), { status: 429, error: { error: { code: "insufficient_quota", message: "You exceeded your current quota" } } });
  }), QuotaExhausted);
  await assert.rejects(gov.call(async () => {
    throw new TypeError("a bug");
  }), TypeError);
  const status = await gov.status();
  assert.equal(status.quotaExhausted, 1);
  assert.equal(status.inFlight, 0);
});

test("a state lost while a lease is held: the lease is adopted with a higher fence", async () => {
  const gov = governor({ leaseTtl: 30, maxCapacity: 2 });
  const lease = await gov.acquire();
  const fence = lease.fence;
  await gov.redis().del(...gov.keys.keys);
  await gov.renew();
  assert.ok(lease.fence > fence, `${lease.fence} > ${fence}`);
  assert.equal(lease.lost, false);
  assert.equal((await gov.status()).inFlight, 1);
  await lease.release();
});

test("the library is loaded again after FUNCTION FLUSH", async () => {
  const gov = governor();
  await (await gov.acquire()).release();
  await gov.redis().call("FUNCTION", "FLUSH");
  const lease = await gov.acquire();
  await lease.release();
});

test("an operator's change is learnt on the !config wake", async () => {
  const name = uniqueName();
  const worker = governor({ maxCapacity: 4 }, name);
  await (await worker.acquire()).release(); // its worker listens from here on
  const operator = governor({ maxCapacity: 4 }, name);
  await operator.setMaxCapacity(9);
  await until(() => worker.core.storedConfig?.["max_capacity"] === "9", 5, "the stored config learnt anew");
});

test("after its subscriber reconnects, the heartbeat renews at once", async () => {
  const gov = governor({ leaseTtl: 30 }); // next renewal due in 10 s
  const lease = await gov.acquire();
  const leases = gov.keys.byName["leases"]!;
  const first = Number(await gov.redis().zscore(leases, lease.id));
  await new Promise((r) => setTimeout(r, 20)); // the renewal's expiry lands later than the grant's
  await gov.redis().call("CLIENT", "KILL", "TYPE", "pubsub");
  await until(async () => Number(await gov.redis().zscore(leases, lease.id)) > first, 5, "a renewal on reconnecting");
  await lease.release();
});

test("report takes an outcome by name, as Python spells it or lower-cased; anything else names the valid ones", async () => {
  const gov = governor({ maxCapacity: 2 });
  await gov.report("SUCCESS");
  await gov.report(Outcome.RATE_LIMITED);
  await gov.report("rate_limited");
  const lease = await gov.acquire();
  for (const bad of ["s", "ok", "", 429] as unknown[]) {
    await assert.rejects(gov.report(bad as Outcome, { lease, release: true }), (e: unknown) =>
      e instanceof ConfigError && e.message.includes('is not one of "success", "rate_limited", "error", "quota_exhausted"'),
    );
  }
  assert.equal(lease.released, false, "a refused report leaves the lease held");
  assert.equal((await gov.status()).inFlight, 1);
  await gov.report("Error" as Outcome, { lease, release: true }); // any case, at run time (JavaScript callers)
  const status = await gov.status();
  assert.equal(status.inFlight, 0);
  assert.equal(status.windowAttempts, 4);
  assert.equal(status.windowRateLimited, 2);
});

test("a refusal that is no load signal (load: false) neither cuts capacity nor holds the fleet; a plain one does", async () => {
  const clock = { now: 1_000_000 };
  const gov = governor({ policy: "adaptive", maxCapacity: 8, clock: () => clock.now });
  const start = (await gov.status()).capacity;
  assert.ok(start >= 2, `the adaptive policy starts at ${start}`);
  const [a, b] = [await gov.acquire(), await gov.acquire()];
  await gov.report(Outcome.RATE_LIMITED, { lease: a, release: true, retryAfter: 4, load: false });
  const quiet = await gov.status();
  assert.equal(quiet.capacity, start, "no cut for a refusal that is no load signal");
  assert.equal(quiet.notBefore, null, "no fleet hold for it");
  assert.equal(quiet.windowRateLimited, 0, "not a refusal of the window");
  await gov.report(Outcome.RATE_LIMITED, { lease: b, release: true, retryAfter: 4 });
  const cut = await gov.status();
  assert.ok(cut.capacity < start, `a load signal cuts (${start} -> ${cut.capacity})`);
  assert.equal(cut.notBefore, clock.now + 4, "and holds the fleet for its retry-after");
});

test("report's load is validated: a boolean", async () => {
  const gov = governor();
  const lease = await gov.acquire();
  await assert.rejects(gov.report(Outcome.RATE_LIMITED, { lease, load: "no" as unknown as boolean }), (e: unknown) => e instanceof ConfigError && /load must be true or false/.test(e.message));
  assert.equal(lease.released, false, "a bad load throws with the lease still held");
  await gov.report(Outcome.SUCCESS, { lease, release: true, load: false }); // only a refusal has a load signal
  assert.equal((await gov.status()).windowAttempts, 1);
});
