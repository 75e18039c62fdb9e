/**
 * Spend budgets through the Node client on a private redis-server, with an
 * injected clock: a reservation is taken and settled by the library's spend
 * function, and a call no budget can afford throws SpendExhausted on the
 * `spend_exhausted` reply, with the figures the Python client reads.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, Governor, SpendExhausted, budgetsArgs, windowArgs, type SpendBudget } from "../src/index.js";
import { privateRedis, uniqueName, type PrivateRedis } from "./support.js";

let redis: PrivateRedis;
const open: Governor[] = [];
const NOON = Date.UTC(2026, 11, 7, 12) / 1000; // a Monday

before(async () => {
  redis = await privateRedis();
});

after(async () => {
  for (const gov of open) await gov.close();
  await redis.stop();
});

function governor(clock: { now: number }): Governor {
  const gov = Governor.fromUrl(redis.url, uniqueName(), { restartHold: false, clock: () => clock.now });
  open.push(gov);
  return gov;
}

test("calendar windows and rolling windows have the Python client's arguments", () => {
  const now = NOON * 1000;
  assert.deepEqual(windowArgs("day", now), ["day@UTC", `c:${Date.UTC(2026, 11, 6)}:${Date.UTC(2026, 11, 7)}:${Date.UTC(2026, 11, 8)}:${Date.UTC(2026, 11, 9)}`]);
  assert.equal(windowArgs("week", now)[1].split(":")[2], String(Date.UTC(2026, 11, 7)));
  assert.equal(windowArgs("month", Date.UTC(2026, 11, 31, 23))[1].split(":")[3], String(Date.UTC(2027, 0, 1)));
  assert.deepEqual(windowArgs("10m", now), ["rolling:600000:10", "r:60000:10"]);
  assert.equal(windowArgs("day@America/Los_Angeles", now)[0], "day@America/Los_Angeles");
  assert.throws(() => windowArgs("day@Mars/Olympus_Mons", now), (e: unknown) => e instanceof ConfigError && /time zone "Mars\/Olympus_Mons" is unknown/.test(e.message));
  assert.deepEqual(budgetsArgs([{ name: "daily", window: "day", limit: 1.5, tenants: { b: 0.25, a: 1 } }], now).slice(0, 4), ["1", "daily", "1500000", "a=1000000,b=250000"]);
});

test("a reservation is settled, and the budget's exhaustion throws SpendExhausted with its figures", async () => {
  const clock = { now: NOON };
  const gov = governor(clock);
  const budgets: SpendBudget[] = [{ name: "daily", window: "day", limit: 1, tenants: { acme: 0.5 } }];
  const first = await gov.reserveSpend(400_000, budgets, { tenant: "acme" });
  await gov.settleSpend(first, 100_000, budgets);
  await gov.reserveSpend(400_000, budgets, { tenant: "acme" });
  await assert.rejects(gov.reserveSpend(1, budgets, { tenant: "acme" }), (error: unknown) => {
    assert.ok(error instanceof SpendExhausted);
    assert.deepEqual([error.budget, error.scope, error.spent, error.limit, error.why], ["daily", "acme", 500_000, 500_000, "limit"]);
    assert.equal(error.resetsAt, Date.UTC(2026, 11, 8) / 1000);
    return true;
  });
  await gov.reserveSpend(500_000, budgets, { tenant: "other" }); // the fleet has 0.5 left
  clock.now = Date.UTC(2026, 11, 8, 0, 0, 1) / 1000; // a new day
  await gov.reserveSpend(500_000, budgets, { tenant: "acme" });
});
