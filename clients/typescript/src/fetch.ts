/**
 * A governed fetch for the openai and anthropic JS SDKs (their `fetch`
 * option): each model POST runs through the same call loop as
 * Governor.call: a lease reserving the request's estimated tokens, the
 * response judged (a 429, 503 or 529 reported and retried after its
 * Retry-After; a quota error reported), the usage and rate-limit headers
 * reported; a stream (text/event-stream) keeps its lease until the body
 * ends, is cancelled or fails, then reports and releases.
 *
 * With spend budgets (the governor's config.spend), each model call is
 * priced as the Python transport prices it (src/charge.ts): the most it can
 * cost at the tier it asks for is reserved before anything is sent
 * (SpendExhausted at once when a budget cannot afford it: the request is
 * never sent), and its charge settled once it is answered: the usage at the
 * tier that served it, a refusal nothing, a stream at its end, a call that
 * failed or was aborted after it was sent its reservation.
 */
import { ESTIMATE } from "./generated.js";
import type { Tokens } from "./core.js";
import { priceBook } from "./config.js";
import { ConfigError, GovernorError } from "./errors.js";
import type { Governor, Lease, SpendReservation } from "./governor.js";
import type { PriceBook } from "./prices.js";
import { chargeOf, type Charge } from "./charge.js";
import { StreamUsage, streamOutcome } from "./streams.js";
import { classifyHttp, usageOf, type RetryPolicy, type Verdict } from "./retry.js";

export interface GovernedFetchOptions {
  /** the fetch to govern (default: globalThis.fetch) */
  fetch?: typeof fetch;
  holder?: string;
  priority?: string;
  tenant?: string;
  timeout?: number;
  retry?: RetryPolicy;
  /**
   * what prices each call for the governor's spend budgets (config.spend;
   * default config.prices): the most a request can cost is reserved before
   * it is sent, its charge settled when it is answered (a stream's when it
   * ends); a request no budget can afford throws SpendExhausted at once
   */
  prices?: PriceBook;
}

const E = ESTIMATE;
const MEDIA = new Set<string>(E.mediaKeys);
const UNCOUNTED = new Set<string>(E.uncountedKeys);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/** Characters of text, messages, media parts and token ids in a request (governor/estimate.py's _Count). */
class Count {
  chars = 0;
  messages = 0;
  media = 0;
  tokenIds = 0;

  walk(value: unknown, depth = 0): void {
    if (depth > 64) return; // a body nested this deep is no model request
    if (typeof value === "string") this.chars += [...value].length;
    else if (Array.isArray(value)) {
      for (const item of value) {
        if (Number.isInteger(item)) this.tokenIds += 1; // a prompt as token ids
        else this.walk(item, depth + 1);
      }
    } else if (isRecord(value)) {
      if (Object.keys(value).some((k) => MEDIA.has(k))) this.media += 1;
      for (const [k, item] of Object.entries(value)) if (!MEDIA.has(k) && !UNCOUNTED.has(k)) this.walk(item, depth + 1);
    }
  }
}

/**
 * The tokens a request reserves, by the Python client's rule (governor/estimate.py):
 * its text at CHARS_PER_TOKEN, message and request overheads, media parts,
 * token ids; the most output it asks for, times its choices.
 */
export function estimateRequest(body: string, path = ""): Tokens {
  const bounded = (n: number): number => Math.min(n, E.maxTokens);
  if (body.trim() === "") return { input: 0, output: 0 };
  let request: unknown;
  try {
    request = JSON.parse(body);
  } catch {
    request = undefined;
  }
  if (!isRecord(request)) return { input: bounded(Math.ceil(Buffer.byteLength(body) / E.charsPerToken)), output: E.defaultOutputTokens };
  const trimmed = path.replace(/\/+$/, "");
  const endpoint = trimmed.endsWith("embeddings") ? "embeddings" : trimmed.endsWith("completions") && !trimmed.endsWith("chat/completions") ? "legacy" : "other";
  const count = new Count();
  for (const name of E.textFields) {
    const value = request[name];
    if (value === undefined || value === null) continue;
    if ((name === "messages" || name === "input") && Array.isArray(value)) count.messages += value.filter(isRecord).length;
    count.walk(value);
  }
  for (const name of E.schemaFields) {
    const value = request[name];
    if (value === undefined || value === null || (name === "text" && !isRecord(value))) continue;
    count.chars += [...JSON.stringify(value)].length;
  }
  const input = E.requestOverhead + Math.ceil(count.chars / E.charsPerToken) + E.messageOverhead * count.messages + E.mediaTokens * count.media + count.tokenIds;
  let output = 0;
  if (endpoint !== "embeddings") {
    let maximum: number = endpoint === "legacy" ? E.legacyCompletionsDefault : E.defaultOutputTokens;
    for (const name of E.outputFields) {
      if (isCount(request[name])) {
        maximum = request[name];
        break;
      }
    }
    let choices = 1;
    for (const name of endpoint === "legacy" ? ["best_of", "n"] : ["n"]) {
      const value = request[name];
      if (isCount(value) && value >= 1 && value <= E.maxChoices) {
        choices = value;
        break;
      }
    }
    output = maximum * choices;
  }
  return { input: bounded(input), output: bounded(output) };
}

function bodyText(init: RequestInit | undefined): string | undefined {
  const body = init?.body;
  if (typeof body === "string") return body;
  if (body instanceof Uint8Array) return Buffer.from(body).toString("utf8");
  return undefined;
}

/** Whether a JSON request body sets `"stream": true`. */
function asksForStream(text: string | undefined): boolean {
  if (text === undefined || !text.includes('"stream"')) return false;
  try {
    const decoded: unknown = JSON.parse(text);
    return isRecord(decoded) && decoded["stream"] === true;
  } catch {
    return /"stream"\s*:\s*true/.test(text);
  }
}

/** What a governed call settles its spend through: the governor, its budgets, the charge, the reservation. */
interface Spend {
  readonly gov: Governor;
  readonly charge: Charge;
  reservation: SpendReservation | undefined;
}

/** Settle a call's charge; a failure is dropped (the reservation is then kept as spent when it expires). */
async function settle(spend: Spend): Promise<void> {
  const { gov, charge, reservation } = spend;
  if (reservation === undefined) return;
  spend.reservation = undefined; // once
  try {
    await gov.settleSpend(reservation, charge.charged, gov.config.spend, { tokens: charge.tokens });
  } catch (error) {
    if (!(error instanceof GovernorError)) throw error;
  }
}

/** A fetch whose model calls (POST) are governed; other requests pass through. */
export function governedFetch(gov: Governor, options: GovernedFetchOptions = {}): typeof fetch {
  const base = options.fetch ?? globalThis.fetch;
  const budgets = gov.config.spend;
  const book = budgets.length === 0 ? undefined : priceBook("governedFetch's prices", options.prices) ?? gov.config.prices;
  if (budgets.length > 0 && book === undefined) {
    throw new ConfigError(`governor ${JSON.stringify(gov.name)} has spend budgets: give its config's prices or governedFetch's prices (a PriceBook) to price each call`, gov.name);
  }
  const governed = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    if (method !== "POST") return base(input, init);
    const text = bodyText(init);
    const url = input instanceof Request ? input.url : String(input);
    const path = new URL(url, "http://localhost").pathname;
    const tokens = text === undefined ? undefined : estimateRequest(text, path);
    const spend: Spend | undefined = book === undefined ? undefined : { gov, charge: chargeOf(book, gov.name, text ?? "", path, tokens ?? { input: 0, output: 0 }), reservation: undefined };
    const asked = asksForStream(text);
    const send = async (lease: Lease): Promise<Response> => {
      let response: Response;
      try {
        response = await base(input, init);
      } catch (error) {
        spend?.charge.brokeOff(); // it may have been sent, and billed
        throw error;
      }
      return track(gov, lease, response, asked, spend);
    };
    try {
      if (spend !== undefined) {
        const keep = gov.config.leaseTtl + (options.timeout || gov.config.queueTtl) + 60;
        spend.reservation = await gov.reserveSpend(spend.charge.most, budgets, {
          ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
          keep,
          tokens: spend.charge.estimate,
        });
      }
      return await gov.call<Response>(send, {
        ...(options.holder === undefined ? {} : { holder: options.holder }),
        ...(options.priority === undefined ? {} : { priority: options.priority }),
        ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
        ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
        ...(options.retry === undefined ? {} : { retry: options.retry }),
        ...(tokens === undefined ? {} : { tokens }),
        ...(init?.signal ? { signal: init.signal } : {}),
        judge: (response) => judged.get(response) ?? null,
      });
    } finally {
      if (spend !== undefined && !spend.charge.handedOver) await settle(spend);
    }
  };
  return governed as typeof fetch;
}

const judged = new WeakMap<Response, Verdict>();

/** Judge a response: a verdict to report now, or (a successful stream) none: the stream reports when it ends. */
async function track(gov: Governor, lease: Lease, response: Response, asked: boolean, spend: Spend | undefined): Promise<Response> {
  const type = (response.headers.get("content-type") ?? "").toLowerCase();
  const stream = response.status < 400 && response.body !== null && (type.includes("text/event-stream") || (asked && !type.includes("json")));
  if (stream) return streamed(gov, lease, response, spend);
  let text: string | undefined;
  if (spend !== undefined || !response.ok || type.includes("json")) {
    try {
      text = await response.clone().text();
    } catch {
      text = undefined; // unreadable: charged its reservation, judged by its status
    }
  }
  spend?.charge.answered(response.status, text);
  if (!response.ok) {
    const c = classifyHttp(response.status, response.headers, text ?? "");
    judged.set(response, {
      outcome: c.outcome,
      ...(c.retryAfter === undefined ? {} : { retryAfter: c.retryAfter }),
      headers: response.headers,
      description: c.description,
      ...(c.load === false ? { load: false } : {}),
    });
    return response;
  }
  let usage: Tokens | undefined;
  if (type.includes("json") && text !== undefined) {
    try {
      usage = usageOf(JSON.parse(text));
    } catch {
      usage = undefined;
    }
  }
  judged.set(response, { outcome: "success", headers: response.headers, ...(usage === undefined ? {} : { usage }) });
  return response;
}

/**
 * A stream holds its lease (and its spend reservation) until it ends, is
 * cancelled or fails: then it reports (with the usage and any error its
 * events carried), releases, and settles its charge.
 */
function streamed(gov: Governor, lease: Lease, response: Response, spend: Spend | undefined): Response {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const usage = new StreamUsage();
  if (spend !== undefined) spend.charge.handedOver = true;
  let done = false;
  const finish = async (failed: boolean): Promise<void> => {
    if (done) return;
    done = true;
    usage.feed(decoder.decode());
    usage.finish();
    const { outcome, spent, error } = streamOutcome(usage, failed);
    try {
      await gov.report(outcome, {
        lease,
        release: true,
        headers: response.headers,
        ...(spent === undefined ? {} : { usage: spent }),
        ...(error?.retryAfter === undefined ? {} : { retryAfter: error.retryAfter }),
        ...(error?.load === false ? { load: false } : {}),
      });
    } catch {
      await lease.release().catch(() => undefined);
    }
    if (spend !== undefined) {
      spend.charge.streamed(spent, usage.reported);
      await settle(spend);
    }
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: ended } = await reader.read();
        if (ended) {
          await finish(false);
          controller.close();
          return;
        }
        usage.feed(decoder.decode(value, { stream: true }));
        controller.enqueue(value);
      } catch (error) {
        await finish(true);
        controller.error(error);
      }
    },
    async cancel(reason) {
      await finish(false);
      await reader.cancel(reason);
    },
  });
  const wrapped = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  judged.delete(wrapped); // no verdict: the stream took the lease over
  return wrapped;
}
