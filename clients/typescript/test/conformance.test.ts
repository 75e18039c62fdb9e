/**
 * The conformance vectors (tests/conformance/vectors.json, from the
 * project's reference model) on a real Redis, through this package: its
 * library text, its key names, and its parser of every reply.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Redis } from "ioredis";
import { Core, functionName, governorKeys, type Call, type Operation, type Outcome } from "../src/core.js";
import { resolveConfig } from "../src/config.js";
import { library } from "../src/governor.js";
import { CostTooLarge } from "../src/errors.js";
import { KEYS, LIBRARY_NAME } from "../src/generated.js";
import { privateRedis, uniqueName, until } from "./support.js";

interface Described {
  id?: string; holder?: string; mode?: "wait" | "again" | "try"; tokens?: [number, number] | null;
  priority?: string | null; tenant?: string | null; leases?: [string, string, string][]; ids?: string[];
  outcome?: Outcome; retry_after?: number | null; lease?: string | null; fence?: number | null; release?: boolean;
  usage?: [number, number] | null; limits?: Record<string, [number | null, number | null]>;
  reason?: string; duration?: number | null; n?: number; load?: boolean;
  tenant_weights?: Record<string, number> | null; default_weight?: number | null; aging?: number | null | "unchanged";
  tenant_caps?: Record<string, number> | null; reserve?: number | null; with_config?: boolean;
}
interface Step {
  op: Operation | "lose_state";
  call?: Described | null;
  argv?: string[];
  reply?: unknown[];
  published?: string[];
  after: Record<string, Record<string, string | number>>;
}
interface Vectors {
  library: string;
  compared_keys: string[];
  vectors: { name: string; about: string; client: { lease_ttl: number; queue_ttl: number }; steps: Step[] }[];
}

const data = JSON.parse(readFileSync(new URL("../../../../tests/conformance/vectors.json", import.meta.url), "utf8")) as Vectors;
const TYPES = new Map<string, string>(KEYS.map(([k, t]) => [k, t]));

/** init's name, value pairs from the 5th element on (after the epoch and ttl_max) compare as a map. */
function comparable(op: string, reply: unknown[]): unknown {
  if (op !== "init" || reply.length <= 4) return reply;
  const pairs: Record<string, unknown> = {};
  for (let i = 4; i + 1 < reply.length; i += 2) pairs[String(reply[i])] = reply[i + 1];
  return [...reply.slice(0, 4), pairs];
}

function strings(value: unknown): unknown {
  return Array.isArray(value) ? value.map(strings) : String(value);
}

/** The call this package builds from a step's description (null: none described). */
function build(core: Core, op: Operation, d: Described): Call<unknown> | null {
  const u = <T>(x: T | null | undefined): T | undefined => (x === null ? undefined : x);
  const tokens = (t: [number, number] | null | undefined) => (t === null || t === undefined ? undefined : { input: t[0], output: t[1] });
  switch (op) {
    case "acquire":
      return core.acquire(d.id!, d.holder!, d.mode!, tokens(d.tokens) ?? { input: 0, output: 0 }, core.place(u(d.priority), u(d.tenant)));
    case "release":
      return core.release(d.id!);
    case "cancel":
      return core.cancel(d.id!);
    case "renew":
      return core.renew(d.leases!.map(([id, epoch, holder]) => ({ id, epoch, holder })));
    case "refresh":
      return core.refresh(d.ids!);
    case "report":
      return core.report(d.outcome!, u(d.retry_after), u(d.lease), u(d.fence), d.release ?? false, tokens(d.usage), d.limits as never, true, d.load ?? true);
    case "status":
    case "probe":
      return core.status(op);
    case "resume":
      return core.resume(false);
    case "pause":
      return core.pause(d.reason!, u(d.duration));
    case "set_max":
      return core.setMax(d.n!);
    case "set_shares":
      return core.setShares({
        ...(u(d.tenant_weights) === undefined ? {} : { tenantWeights: d.tenant_weights! }),
        ...(u(d.default_weight) === undefined ? {} : { defaultWeight: d.default_weight! }),
        ...(d.aging === "unchanged" ? {} : { aging: d.aging ?? null }),
        ...(u(d.tenant_caps) === undefined ? {} : { tenantCaps: d.tenant_caps! }),
        ...(u(d.reserve) === undefined ? {} : { reserve: d.reserve! }),
      });
    case "reset":
      return core.reset(d.with_config ?? false);
    default:
      return null;
  }
}

/** Parse a reply with this package's parser of that function. */
function parse(core: Core, op: Operation, argv: string[], reply: unknown): void {
  const ids = argv.slice(3);
  const calls: Record<Operation, () => { parse: (r: unknown) => unknown }> = {
    acquire: () => core.acquire("x", "h", "wait", { input: 0, output: 0 }, core.place()),
    cancel: () => core.cancel("x"),
    init: () => core.init(false, false),
    release: () => core.release("x"),
    renew: () => core.renew(ids.filter((_, i) => i % 7 === 0).map((id) => ({ id, epoch: "", holder: "" }))),
    refresh: () => core.refresh(ids),
    report: () => core.report("success", undefined, undefined, undefined, false, undefined, undefined),
    status: () => core.status("status"),
    probe: () => core.status("probe"),
    resume: () => core.resume(),
    pause: () => core.status("status"),
    set_max: () => core.status("status"),
    set_shares: () => core.status("status"),
    reset: () => core.status("status"),
    spend: () => core.spend("settle", "x", "default", 0, "0", [], 0),
  };
  try {
    calls[op]().parse(reply);
  } catch (error) {
    if (!(error instanceof CostTooLarge)) throw error;
  }
}

test("the vectors were made for this package's library", () => {
  assert.equal(data.library, LIBRARY_NAME);
});

test("the Lua answers as the vectors say, and this package reads every reply", async (t) => {
  const redis = await privateRedis();
  const client = new Redis(redis.url);
  const sub = new Redis(redis.url);
  try {
    await client.call("FUNCTION", "LOAD", "REPLACE", library());
    for (const vector of data.vectors) {
      await t.test(vector.name, async () => {
        const keys = governorKeys(uniqueName("conformance"));
        const heard: string[] = [];
        const onMessage = (channel: string, message: string): void => {
          if (channel === keys.channel) heard.push(message);
        };
        sub.on("message", onMessage);
        await sub.subscribe(keys.channel);
        let now = 0;
        const core = new Core(keys.name, resolveConfig({ leaseTtl: vector.client.lease_ttl, queueTtl: vector.client.queue_ttl, clock: () => now }));
        let built = 0;
        const expected: Record<string, Record<string, string | number>> = {};
        for (const name of data.compared_keys) expected[name] = {};
        try {
          for (const [n, step] of vector.steps.entries()) {
            const where = `${vector.name} step ${n} (${step.op})`;
            if (step.op === "lose_state") {
              await client.del(...keys.keys);
            } else {
              if (step.call !== undefined && step.call !== null) {
                now = Number(step.argv![0]) / 1000;
                const call = build(core, step.op, step.call);
                if (call !== null) {
                  built += 1;
                  assert.deepEqual(call.args.map((a) => (a === keys.channel ? "$channel" : a)), step.argv, `${where}: the ARGV this package builds`);
                }
              }
              const argv = step.argv!.map((a) => (a === "$channel" ? keys.channel : a));
              const before = heard.length;
              const reply = await client.fcall(functionName(step.op), keys.scriptKeys.length, ...keys.scriptKeys, ...argv);
              assert.deepEqual(comparable(step.op, strings(reply) as unknown[]), comparable(step.op, step.reply!), where);
              parse(core, step.op, argv, reply);
              const want = step.published!;
              await until(() => heard.length >= before + want.length, 5, `${where}: the wake messages`);
              assert.deepEqual(heard.slice(before), want, where);
            }
            Object.assign(expected, step.after);
            for (const [name, want] of Object.entries(expected)) {
              const key = keys.byName[name]!;
              if (TYPES.get(name) === "hash") {
                const got = await client.hgetall(key);
                delete got["origin"]; // names the Redis server that wrote the state: no vector can
                assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), `${where}: ${name}'s fields`);
                for (const [field, value] of Object.entries(want)) {
                  if (typeof value === "number") assert.equal(Number(got[field]), value, `${where}: ${name}.${field}`);
                  else assert.equal(got[field], value, `${where}: ${name}.${field}`);
                }
              } else {
                const flat = await client.zrange(key, 0, -1, "WITHSCORES");
                const got: Record<string, number> = {};
                for (let i = 0; i + 1 < flat.length; i += 2) got[flat[i]!] = Number(flat[i + 1]);
                assert.deepEqual(got, Object.fromEntries(Object.entries(want).map(([m, s]) => [m, Number(s)])), `${where}: ${name}`);
              }
            }
          }
          assert.ok(built > 0 || vector.steps.every((st) => st.call === undefined || st.call === null), `${vector.name}: no ARGV built`);
        } finally {
          await sub.unsubscribe(keys.channel);
          sub.off("message", onMessage);
          await client.del(...keys.keys);
        }
      });
    }
  } finally {
    client.disconnect();
    sub.disconnect();
    await redis.stop();
  }
});
