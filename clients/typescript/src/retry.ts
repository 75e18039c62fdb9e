/**
 * call(): acquire, call, classify, report (releasing in the same round
 * trip), and retry throttled calls after the provider's Retry-After or the
 * full-jitter backoff; the Python package's governor/_async/retry.py,
 * governor/backoff.py and governor/classify.py, with their tables.
 */
import {
  OVERLOAD_NAMES, OVERLOAD_STATUSES, QUOTA_CODES, QUOTA_PHRASES, RATE_LIMIT_CODES, RETRY_AFTER_HEADERS, RETRY_AFTER_LIMIT, RETRY_DEFAULTS,
} from "./generated.js";
import { AcquireTimeout, GovernorError, GovernorUnavailable, LeaseLost, QuotaExhausted } from "./errors.js";
import type { Outcome, Tokens } from "./core.js";
import { readLimits, type Governor, type Lease, type ReportOptions } from "./governor.js";

export interface RetryPolicy {
  maxAttempts?: number;
  /** seconds from the first try after which no retry starts (null: none) */
  deadline?: number | null;
  base?: number;
  cap?: number;
  maxRetryAfter?: number;
}

export interface Classification {
  readonly outcome: Outcome;
  /** seconds the provider asked to wait */
  readonly retryAfter: number | undefined;
  readonly description: string;
  /**
   * (rate_limited only) whether the refusal is a load signal: this fleet's
   * traffic over a limit (default true). false: an overload (503, 529, an
   * overloaded error) or headers showing requests and tokens remaining; the
   * adaptive policy neither cuts for it nor holds the fleet
   */
  readonly load?: boolean;
}

/** What became of a call that returned: reported as `outcome` (rate_limited is retried). */
export interface Verdict {
  readonly outcome: Outcome;
  readonly retryAfter?: number;
  readonly usage?: Tokens;
  readonly headers?: ReportOptions["headers"];
  readonly description?: string;
  /** (rate_limited only) whether the refusal is a load signal (Classification.load) */
  readonly load?: boolean;
}

export interface CallOptions<T> {
  timeout?: number;
  holder?: string;
  tokens?: Tokens | number;
  priority?: string;
  tenant?: string;
  signal?: AbortSignal;
  retry?: RetryPolicy;
  /** an error's classification (default: the HTTP status, headers and body an SDK error carries) */
  classify?: (error: unknown) => Classification;
  /** a result's verdict; null: the result took the lease over (a stream reports and releases when it ends) */
  judge?: (result: T, lease: Lease) => Verdict | null;
}

/** Seconds before retry number `attempt`: the provider's Retry-After, else full jitter. */
export function retryWait(attempt: number, retryAfter: number | undefined, policy: Required<RetryPolicy>): number {
  if (retryAfter !== undefined) return Math.min(retryAfter, policy.maxRetryAfter);
  const ceiling = Math.min(policy.cap, policy.base * 2 ** Math.min(attempt - 1, 1000));
  return Math.random() * ceiling;
}

type HeaderBag = Headers | Record<string, unknown> | undefined | null;

function header(headers: HeaderBag, name: string): string | undefined {
  if (headers === undefined || headers === null) return undefined;
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? String(v[0]) : v === undefined || v === null ? undefined : String(v);
  }
  return undefined;
}

/** Seconds the provider asks to wait, from response headers; undefined if it did not say. */
export function parseRetryAfter(headers: HeaderBag, now: number = Date.now() / 1000): number | undefined {
  for (const [name, unit] of RETRY_AFTER_HEADERS) {
    const raw = header(headers, name)?.trim();
    if (raw === undefined || raw === "") continue;
    let seconds: number | undefined;
    if (/^\d+(\.\d+)?$/.test(raw)) seconds = Number(raw) * (unit ?? 1);
    else if (unit === null) {
      const date = Date.parse(raw);
      if (!Number.isNaN(date)) seconds = Math.max(0, date / 1000 - now);
    }
    if (seconds !== undefined && Number.isFinite(seconds)) return Math.min(seconds, RETRY_AFTER_LIMIT);
  }
  return undefined;
}

interface ErrorFields { type?: string; code?: string; detail?: string; message?: string }

function errorFields(body: unknown): ErrorFields {
  let value: unknown = body;
  if (typeof value === "string") {
    try {
      value = JSON.parse(value);
    } catch {
      return { message: value as string };
    }
  }
  if (typeof value !== "object" || value === null) return {};
  const top = value as Record<string, unknown>;
  const inner = (typeof top["error"] === "object" && top["error"] !== null ? top["error"] : top) as Record<string, unknown>;
  const str = (x: unknown): string | undefined => (typeof x === "string" ? x : undefined);
  const details = inner["details"] as Record<string, unknown> | undefined;
  const out: ErrorFields = {};
  const type = str(inner["type"]);
  const code = str(inner["code"]);
  const detail = typeof details === "object" && details !== null ? str(details["error_code"]) : undefined;
  const message = str(inner["message"]);
  if (type !== undefined) out.type = type;
  if (code !== undefined) out.code = code;
  if (detail !== undefined) out.detail = detail;
  if (message !== undefined) out.message = message;
  return out;
}

/**
 * Whether a throttle is a load signal (Profile.load_signal): not an overload,
 * and not a refusal whose headers show requests and tokens (or input tokens)
 * remaining, both announced and above zero.
 */
export function loadSignal(status: number | undefined, names: ReadonlySet<string>, headers?: HeaderBag): boolean {
  if ((status !== undefined && (OVERLOAD_STATUSES as readonly number[]).includes(status)) || [...names].some((n) => (OVERLOAD_NAMES as readonly string[]).includes(n))) return false;
  const limits = headers === undefined || headers === null ? undefined : readLimits(headers as ReportOptions["headers"]);
  const requests = limits?.requests?.[1] ?? null;
  const tokens = limits?.tokens?.[1] ?? limits?.input_tokens?.[1] ?? null;
  return !(requests !== null && requests > 0 && tokens !== null && tokens > 0);
}

/** Classify a failed HTTP exchange: status, headers, body (governor.classify.classify_http). */
export function classifyHttp(status: number | undefined, headers?: HeaderBag, body?: unknown): Classification {
  const fields = errorFields(body);
  const names = new Set([fields.type, fields.code, fields.detail].filter((x): x is string => x !== undefined));
  const description = `${status === undefined ? "an error" : `HTTP ${status}`}${fields.message ? `: ${fields.message.slice(0, 200)}` : ""}`;
  const message = (fields.message ?? "").toLowerCase();
  const quota = [...names].some((n) => (QUOTA_CODES as readonly string[]).includes(n)) || status === 402 || QUOTA_PHRASES.some((p) => message.includes(p));
  if (quota) return { outcome: "quota_exhausted", retryAfter: undefined, description };
  let throttled = status === 429 || status === 529 || [...names].some((n) => (RATE_LIMIT_CODES as readonly string[]).includes(n));
  if (status === 503 && (fields.detail === undefined || (RATE_LIMIT_CODES as readonly string[]).includes(fields.detail))) throttled = true;
  if (throttled) return { outcome: "rate_limited", retryAfter: parseRetryAfter(headers), description, load: loadSignal(status, names, headers) };
  return { outcome: "error", retryAfter: undefined, description };
}

/** An error thrown by the called function: the openai and anthropic SDKs' APIError carry status, headers and error. */
export function defaultClassifier(error: unknown): Classification {
  if (typeof error === "object" && error !== null) {
    const e = error as Record<string, unknown>;
    const status = typeof e["status"] === "number" ? e["status"] : undefined;
    if (status !== undefined || e["error"] !== undefined) {
      return classifyHttp(status, e["headers"] as HeaderBag, e["error"] ?? e["body"]);
    }
  }
  return { outcome: "error", retryAfter: undefined, description: error instanceof Error ? error.message : String(error) };
}

/** The usage an SDK result carries (openai: prompt/completion or input/output tokens; anthropic: input/output). */
export function usageOf(result: unknown): Tokens | undefined {
  if (typeof result !== "object" || result === null) return undefined;
  const usage = (result as Record<string, unknown>)["usage"];
  if (typeof usage !== "object" || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const input = u["input_tokens"] ?? u["prompt_tokens"];
  const output = u["output_tokens"] ?? u["completion_tokens"];
  if (typeof input === "number" && typeof output === "number" && Number.isSafeInteger(input) && Number.isSafeInteger(output) && input >= 0 && output >= 0) {
    return { input, output };
  }
  return undefined;
}

function policyOf(retry: RetryPolicy | undefined): Required<RetryPolicy> {
  return {
    maxAttempts: retry?.maxAttempts ?? RETRY_DEFAULTS.max_attempts,
    deadline: retry?.deadline === undefined ? RETRY_DEFAULTS.deadline : retry.deadline,
    base: retry?.base ?? RETRY_DEFAULTS.base,
    cap: retry?.cap ?? RETRY_DEFAULTS.cap,
    maxRetryAfter: retry?.maxRetryAfter ?? RETRY_DEFAULTS.max_retry_after,
  };
}

/** Report, never hiding the provider's answer: a report that fails is dropped (the TTL reclaims the slot). */
async function report(gov: Governor, lease: Lease, outcome: Outcome, extra: Omit<ReportOptions, "lease" | "release"> = {}): Promise<void> {
  try {
    await gov.report(outcome, { ...extra, lease, release: true });
  } catch (error) {
    if (!(error instanceof LeaseLost || error instanceof GovernorUnavailable)) throw error;
  }
}

export async function callWithRetry<T>(gov: Governor, fn: (lease: Lease) => Promise<T>, options: CallOptions<T>): Promise<T> {
  const policy = policyOf(options.retry);
  const classify = options.classify ?? defaultClassifier;
  const judge = options.judge ?? ((result: T): Verdict => {
    const usage = usageOf(result);
    return usage === undefined ? { outcome: "success" } : { outcome: "success", usage };
  });
  const started = performance.now() / 1000;
  const deadline = policy.deadline === null ? null : started + policy.deadline;
  let last: { error?: unknown; result?: T } | null = null;
  for (let attempt = 1; attempt <= policy.maxAttempts; attempt += 1) {
    const left = deadline === null ? undefined : Math.max(0, deadline - performance.now() / 1000);
    const timeout = options.timeout === undefined ? left : left === undefined ? options.timeout : Math.min(left, options.timeout);
    let lease: Lease;
    try {
      lease = await gov.acquire({
        ...(timeout === undefined ? {} : { timeout }),
        ...(options.holder === undefined ? {} : { holder: options.holder }),
        ...(options.tokens === undefined ? {} : { tokens: options.tokens }),
        ...(options.priority === undefined ? {} : { priority: options.priority }),
        ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      });
    } catch (error) {
      if (error instanceof AcquireTimeout && last !== null && (options.timeout === undefined || (left !== undefined && left < options.timeout))) {
        if ("error" in last) throw last.error;
        return last.result as T;
      }
      throw error;
    }
    let retryAfter: number | undefined;
    let handedOver = false;
    let again = false;
    try {
      let result: T;
      try {
        result = await fn(lease);
      } catch (error) {
        if (error instanceof GovernorError && !(error instanceof QuotaExhausted)) throw error;
        const verdict = classify(error);
        if (verdict.outcome === "quota_exhausted") {
          await report(gov, lease, "quota_exhausted");
          throw new QuotaExhausted(`governor ${JSON.stringify(gov.name)}: the provider says the quota or spend limit is used up (${verdict.description}); not retried, an operator must act`, gov.name, { cause: error });
        }
        if (verdict.outcome !== "rate_limited") {
          await report(gov, lease, "error");
          throw error;
        }
        retryAfter = verdict.retryAfter === undefined ? undefined : Math.min(verdict.retryAfter, policy.maxRetryAfter);
        await report(gov, lease, "rate_limited", { ...(retryAfter === undefined ? {} : { retryAfter }), ...(verdict.load === false ? { load: false } : {}) });
        last = { error };
        again = true;
        handedOver = true; // reported and released
        continue;
      }
      const verdict = judge(result, lease);
      if (verdict === null) {
        handedOver = true; // a stream: it reports and releases when it ends
        return result;
      }
      retryAfter = verdict.retryAfter === undefined ? undefined : Math.min(verdict.retryAfter, policy.maxRetryAfter);
      const extra: Omit<ReportOptions, "lease" | "release"> = {};
      if (retryAfter !== undefined) extra.retryAfter = retryAfter;
      if (verdict.usage !== undefined) extra.usage = verdict.usage;
      if (verdict.headers !== undefined) extra.headers = verdict.headers;
      if (verdict.load === false) extra.load = false;
      await report(gov, lease, verdict.outcome, extra);
      handedOver = true;
      if (verdict.outcome !== "rate_limited") return result;
      last = { result };
      again = true;
    } finally {
      if (!handedOver) await lease.release().catch(() => undefined);
      if (again && attempt < policy.maxAttempts) {
        const wait = retryWait(attempt, retryAfter, policy);
        if (deadline === null || performance.now() / 1000 + wait < deadline) await sleepFor(wait, options.signal);
        else attempt = policy.maxAttempts; // the deadline comes before the next try
      }
    }
  }
  if (last !== null && "error" in last) throw last.error;
  return last?.result as T;
}

function sleepFor(seconds: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, seconds * 1000);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
