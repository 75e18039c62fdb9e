/**
 * A Node host of the swarm benchmark (bench/host.py runs it for the hosts
 * of `fleet-mixed` that are Node's): A agents on one governor, each making
 * its calls as the README writes them, the same loop as Python's
 * `fleet-lease` agents: acquire, call the provider, report the outcome
 * with the lease (and the provider's Retry-After), release; a 429 retried
 * after that Retry-After (else the full-jitter backoff) under a new lease;
 * a quota-exhausted answer stops the agent; any other error is retried
 * after the backoff. Agents stop at the run's deadline.
 *
 *   node dist/interop/swarm.js < '{ "job": <HostJob JSON>, "url": <redis url>, "config": <GovernorConfig> }'
 *
 * Prints the host's result as one line of JSON (bench.host.HostResult's fields).
 */
import { readFileSync } from "node:fs";
import { AcquireTimeout, Governor, LeaseLost, classifyHttp, retryWait, type GovernorConfig, type Lease } from "../src/index.js";
import { RETRY_DEFAULTS } from "../src/generated.js";

interface Job {
  run_id: string;
  strategy: string;
  host: number;
  agents: number;
  calls: number;
  start_at: number;
  deadline: number;
  provider_url: string;
  governor: string;
  report_retry_after: boolean;
  backoff_base: number;
  backoff_cap: number;
  model: string;
}

const MAX_ERROR_SAMPLES = 5;
/** seconds agents get after the deadline to give back their places and leases */
const STOP_GRACE = 5;

const input = JSON.parse(readFileSync(0, "utf8")) as { job: Job; url: string; config: GovernorConfig };
const job = input.job;
const url = `${job.provider_url.replace(/\/+$/, "")}/v1/chat/completions`;
const payload = JSON.stringify({ model: job.model, messages: [{ role: "user", content: "Summarise the plan." }] });
const retry = {
  maxAttempts: RETRY_DEFAULTS.max_attempts, deadline: null, base: job.backoff_base, cap: job.backoff_cap,
  maxRetryAfter: RETRY_DEFAULTS.max_retry_after,
};

const result = {
  host: job.host, strategy: job.strategy, agents: job.agents,
  attempts: 0, ok: 0, limited: 0, quota: 0, errors: 0, lost: 0,
  waits: [] as number[], call_times: [] as number[], success_at: [] as number[],
  finished_at: Array<number | null>(job.agents).fill(null),
  error_samples: [] as string[],
  phases: { acquire: 0, call: 0, backoff: 0, other: 0 },
};

const now = (): number => Date.now() / 1000;
const monotonic = (): number => Number(process.hrtime.bigint()) / 1e9;
const sleep = (seconds: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, seconds * 1000)));

function noteError(text: string): void {
  if (result.error_samples.length < MAX_ERROR_SAMPLES) result.error_samples.push(text);
}

type Answer = { status: number; headers: Headers; body: string } | "stopped";

/** One provider call, abandoned ("stopped") when the deadline comes first; throws on a network error. */
async function attempt(): Promise<Answer> {
  const left = job.deadline - now();
  if (left <= 0) return "stopped";
  const started = monotonic();
  try {
    const response = await fetch(url, {
      method: "POST", body: payload, signal: AbortSignal.timeout(Math.ceil(left * 1000)),
      headers: { "content-type": "application/json", authorization: "Bearer sk-sim" },
    });
    const body = await response.text();
    result.attempts += 1;
    return { status: response.status, headers: response.headers, body };
  } catch (error) {
    if (now() >= job.deadline) return "stopped";
    result.attempts += 1;
    throw error;
  } finally {
    result.phases.call += monotonic() - started;
  }
}

async function backoff(failures: number, retryAfter: number | undefined): Promise<void> {
  const wait = Math.min(retryWait(failures, retryAfter, retry), Math.max(0, job.deadline - now()));
  result.phases.backoff += wait;
  await sleep(wait);
}

/** Time spent in `fn` counted as "other" (the report and release round trips). */
async function other<T>(fn: () => Promise<T>): Promise<T> {
  const started = monotonic();
  try {
    return await fn();
  } finally {
    result.phases.other += monotonic() - started;
  }
}

/** One successful call as the README writes it; false: the agent stops. */
async function leaseCall(gov: Governor, holder: string): Promise<boolean> {
  let failures = 0;
  for (;;) {
    const left = job.deadline - now();
    if (left <= 0) return false;
    let retryAfter: number | undefined;
    let lease: Lease;
    const asked = monotonic();
    try {
      lease = await gov.acquire({ timeout: left, holder });
    } catch (error) {
      if (error instanceof AcquireTimeout) return false;
      throw error;
    }
    const waited = monotonic() - asked;
    result.waits.push(waited);
    result.phases.acquire += waited;
    try {
      let answer: Answer;
      try {
        answer = await attempt();
      } catch (error) {
        answer = { status: 0, headers: new Headers(), body: String(error) };
      }
      if (answer === "stopped") return false;
      if (answer.status === 200) {
        await other(() => gov.report("success", { lease }));
        return true;
      }
      const verdict = answer.status === 0
        ? { outcome: "error" as const, retryAfter: undefined, description: answer.body }
        : classifyHttp(answer.status, answer.headers, answer.body);
      if (verdict.outcome === "rate_limited") result.limited += 1;
      else if (verdict.outcome === "quota_exhausted") result.quota += 1;
      else {
        result.errors += 1;
        noteError(verdict.description);
      }
      retryAfter = job.report_retry_after ? verdict.retryAfter : undefined;
      await other(() => gov.report(verdict.outcome, retryAfter === undefined ? { lease } : { lease, retryAfter }));
      if (verdict.outcome === "quota_exhausted") return false; // billing, not a throttle: never retried
    } catch (error) {
      if (!(error instanceof LeaseLost)) throw error;
      result.lost += 1; // the lease expired under a stall: its outcome was not counted
    } finally {
      await other(() => lease.release());
    }
    failures += 1;
    await backoff(failures, retryAfter);
  }
}

async function agent(gov: Governor, index: number): Promise<void> {
  const holder = `host-${job.host}/agent-${index}`;
  for (let i = 0; i < job.calls; i++) {
    const wanted = monotonic();
    if (!(await leaseCall(gov, holder))) return;
    result.ok += 1;
    result.success_at.push(now());
    result.call_times.push(monotonic() - wanted);
  }
  result.finished_at[index] = now();
}

async function main(): Promise<void> {
  const gov = Governor.fromUrl(input.url, job.governor, input.config);
  try {
    await sleep(job.start_at - now());
    const agents = Array.from({ length: job.agents }, (_, i) =>
      agent(gov, i).catch((error: unknown) => noteError(`agent failed: ${String(error)}`)),
    );
    const stopped = sleep(job.deadline - now() + STOP_GRACE).then(() => "late" as const);
    if ((await Promise.race([Promise.all(agents), stopped])) === "late") {
      noteError("agents did not stop within the grace after the deadline");
    }
  } finally {
    await gov.close();
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().then(
  () => process.exit(0), // a straggler's timer must not keep the host alive
  (error: unknown) => {
    process.stderr.write(`swarm host failed: ${String(error)}\n`);
    process.exit(1);
  },
);
