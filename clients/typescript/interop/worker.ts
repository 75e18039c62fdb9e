/**
 * A Node worker process of the interop tests (tests/test_interop.py): it
 * shares one governor with Python workers and records every hold for the
 * project's witness (tests/support/witness.py) in the control Redis, in
 * the Python workers' event format: `entered` as acquire returns, `left`
 * just before it releases or as soon as it sees `lease.lost` (looked at
 * every 10 ms). Times are CLOCK_MONOTONIC seconds, the clock of Python's
 * time.monotonic(), so events of both languages sort on one time line.
 *
 *   node dist/interop/worker.js '<json: { url, name, config, control, events, mode, ... }>'
 *
 * Modes: contend (callers acquire, hold, release until the stop key is
 * set), hold (one lease, held until the process is killed), once (one
 * acquire in a given class, released at once), budget (tryAcquire as fast
 * as it can for `seconds`; says how many were admitted).
 */
import { Redis } from "ioredis";
import { AcquireTimeout, Governor, GovernorError, type GovernorConfig, type Lease } from "../src/index.js";

interface Args {
  url: string;
  name: string;
  config: GovernorConfig;
  control: string;
  events: string;
  mode: "contend" | "hold" | "once" | "budget";
  role?: string;
  callers?: number;
  hold?: number;
  acquireTimeout?: number;
  stopKey?: string;
  goKey?: string;
  priority?: string;
  tenant?: string;
  holder?: string;
  seconds?: number;
  /** seconds between two tries (budget) */
  pause?: number;
  report?: boolean;
}

const LIFETIME = 90;
const args = JSON.parse(process.argv[2] ?? "{}") as Args;
const control = new Redis(args.control);
const role = args.role ?? "node";

function monotonic(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

async function emit(event: Record<string, unknown>): Promise<void> {
  await control.rpush(args.events, JSON.stringify({ pid: process.pid, role, t: monotonic(), ...event }));
}

function key(lease: Lease): string {
  return `${process.pid}/${lease.id}`;
}

async function stopRequested(name: string | undefined): Promise<boolean> {
  if (name === undefined || name === "") return false;
  return (await control.exists(name)) === 1;
}

/** Hold `lease` for `seconds`, or until it is seen lost; records the hold. */
async function holdFor(lease: Lease, seconds: number): Promise<boolean> {
  await emit({ kind: "entered", key: key(lease), fence: lease.fence, epoch: lease.epoch, holder: lease.holder });
  let lastLive = monotonic();
  let fence = lease.fence;
  const until = monotonic() + seconds;
  while (monotonic() < until) {
    if (lease.lost) {
      await emit({ kind: "left", key: key(lease), how: "lost", held_until: lastLive });
      return false;
    }
    if (lease.fence !== fence) {
      fence = lease.fence;
      await emit({ kind: "fence", key: key(lease), fence, epoch: lease.epoch });
    }
    lastLive = monotonic();
    await new Promise((r) => setTimeout(r, Math.min(10, Math.max(0, (until - monotonic()) * 1000))));
  }
  const now = monotonic();
  await emit({ kind: "left", key: key(lease), how: "released", held_until: now });
  return true;
}

async function main(): Promise<void> {
  const gov = Governor.fromUrl(args.url, args.name, args.config);
  const deadline = monotonic() + LIFETIME;
  if (args.mode === "budget") await gov.status(); // connected, the stored config learnt: ready to take at once
  await emit({ kind: "ready" });
  while (args.goKey && !(await stopRequested(args.goKey)) && monotonic() < deadline) await new Promise((r) => setTimeout(r, 2));
  const holder = args.holder ?? `${role}/${process.pid}`;
  try {
    if (args.mode === "hold") {
      const lease = await gov.acquire({ timeout: 10, holder });
      await emit({ kind: "entered", key: key(lease), fence: lease.fence, epoch: lease.epoch, holder });
      await emit({ kind: "holding", fence: lease.fence });
      while (monotonic() < deadline) await new Promise((r) => setTimeout(r, 50));
    } else if (args.mode === "once") {
      const lease = await gov.acquire({
        timeout: 30, holder,
        ...(args.priority === undefined ? {} : { priority: args.priority }),
        ...(args.tenant === undefined ? {} : { tenant: args.tenant }),
      });
      await holdFor(lease, args.hold ?? 0);
      await lease.release();
    } else if (args.mode === "budget") {
      let admitted = 0;
      const until = monotonic() + (args.seconds ?? 1);
      while (monotonic() < until) {
        const lease = await gov.tryAcquire({ holder });
        if (lease !== null) {
          admitted += 1;
          await lease.release();
        }
        await new Promise((r) => setTimeout(r, (args.pause ?? 0) * 1000));
      }
      await emit({ kind: "done", admitted });
    } else {
      let admitted = 0;
      const errors: Record<string, number> = {};
      const caller = async (): Promise<void> => {
        while (monotonic() < deadline && !(await stopRequested(args.stopKey))) {
          let lease: Lease;
          try {
            lease = await gov.acquire({ timeout: args.acquireTimeout ?? 5, holder });
          } catch (error) {
            if (error instanceof AcquireTimeout) continue;
            if (error instanceof GovernorError) {
              errors[error.name] = (errors[error.name] ?? 0) + 1;
              await new Promise((r) => setTimeout(r, 50));
              continue;
            }
            throw error;
          }
          admitted += 1;
          const hold = (args.hold ?? 0.05) * (0.5 + Math.random());
          const kept = await holdFor(lease, hold);
          try {
            if (args.report === true && kept) await gov.report("success", { lease, release: true });
            else await lease.release();
          } catch {
            // a lost lease's report: nothing to give back
          }
        }
      };
      await Promise.all(Array.from({ length: args.callers ?? 1 }, caller));
      await emit({ kind: "done", admitted, errors });
    }
  } finally {
    await gov.close();
    control.disconnect();
  }
}

main().catch(async (error: unknown) => {
  await emit({ kind: "error", error: String(error) }).catch(() => undefined);
  control.disconnect();
  process.exitCode = 1;
});
