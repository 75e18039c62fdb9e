/**
 * A governed fetch for the openai and anthropic JS SDKs (their `fetch`
 * option): each model POST runs through the same call loop as
 * Governor.call: a lease reserving the request's estimated tokens, the
 * response judged (a 429, 503 or 529 reported and retried after its
 * Retry-After; a quota error reported), the usage and rate-limit headers
 * reported; a stream (text/event-stream) keeps its lease until the body
 * ends, is cancelled or fails, then reports and releases.
 */
import { ESTIMATE } from "./generated.js";
import type { Tokens } from "./core.js";
import type { Governor, Lease } from "./governor.js";
import { classifyHttp, usageOf, type RetryPolicy, type Verdict } from "./retry.js";

export interface GovernedFetchOptions {
  /** the fetch to govern (default: globalThis.fetch) */
  fetch?: typeof fetch;
  holder?: string;
  priority?: string;
  tenant?: string;
  timeout?: number;
  retry?: RetryPolicy;
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

/** A fetch whose model calls (POST) are governed; other requests pass through. */
export function governedFetch(gov: Governor, options: GovernedFetchOptions = {}): typeof fetch {
  const base = options.fetch ?? globalThis.fetch;
  const governed = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    if (method !== "POST") return base(input, init);
    const text = bodyText(init);
    const url = input instanceof Request ? input.url : String(input);
    const tokens = text === undefined ? undefined : estimateRequest(text, new URL(url, "http://localhost").pathname);
    return gov.call<Response>((lease) => base(input, { ...init, ...(init?.signal ? {} : {}) }).then((response) => track(gov, lease, response)), {
      ...(options.holder === undefined ? {} : { holder: options.holder }),
      ...(options.priority === undefined ? {} : { priority: options.priority }),
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
      ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
      ...(options.retry === undefined ? {} : { retry: options.retry }),
      ...(tokens === undefined ? {} : { tokens }),
      ...(init?.signal ? { signal: init.signal } : {}),
      judge: (response) => judged.get(response) ?? null,
    });
  };
  return governed as typeof fetch;
}

const judged = new WeakMap<Response, Verdict>();

/** Judge a response: a verdict to report now, or (a successful stream) none: the stream reports when it ends. */
async function track(gov: Governor, lease: Lease, response: Response): Promise<Response> {
  if (!response.ok) {
    const body = await response.clone().text().catch(() => "");
    const c = classifyHttp(response.status, response.headers, body);
    judged.set(response, {
      outcome: c.outcome,
      ...(c.retryAfter === undefined ? {} : { retryAfter: c.retryAfter }),
      headers: response.headers,
      description: c.description,
      ...(c.load === false ? { load: false } : {}),
    });
    return response;
  }
  const type = response.headers.get("content-type") ?? "";
  if (type.includes("text/event-stream") && response.body !== null) return streamed(gov, lease, response);
  let usage: Tokens | undefined;
  if (type.includes("json")) {
    usage = usageOf(await response.clone().json().catch(() => undefined));
  }
  judged.set(response, { outcome: "success", headers: response.headers, ...(usage === undefined ? {} : { usage }) });
  return response;
}

/** A stream holds its lease until it ends: then it reports (with the usage its events carried) and releases. */
function streamed(gov: Governor, lease: Lease, response: Response): Response {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let input = 0;
  let output = 0;
  let seen = false;
  let pending = "";
  let done = false;
  const finish = async (outcome: "success" | "error"): Promise<void> => {
    if (done) return;
    done = true;
    try {
      await gov.report(outcome, { lease, release: true, headers: response.headers, ...(seen ? { usage: { input, output } } : {}) });
    } catch {
      await lease.release().catch(() => undefined);
    }
  };
  const scan = (chunk: string): void => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) {
      if (!line.startsWith("data:")) continue;
      try {
        const event = JSON.parse(line.slice(5).trim()) as Record<string, unknown>;
        const message = event["message"] as Record<string, unknown> | undefined;
        const usage = usageOf(event) ?? usageOf(message);
        if (usage !== undefined) {
          seen = true;
          input = Math.max(input, usage.input);
          output = Math.max(output, usage.output);
        }
        const partial = event["usage"] as Record<string, unknown> | undefined;
        if (partial !== undefined && typeof partial["output_tokens"] === "number") {
          seen = true;
          output = Math.max(output, partial["output_tokens"]);
        }
      } catch {
        // not JSON ([DONE], comments)
      }
    }
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: ended } = await reader.read();
        if (ended) {
          await finish("success");
          controller.close();
          return;
        }
        scan(decoder.decode(value, { stream: true }));
        controller.enqueue(value);
      } catch (error) {
        await finish("error");
        controller.error(error);
      }
    },
    async cancel(reason) {
      await finish("success");
      await reader.cancel(reason);
    },
  });
  const wrapped = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  judged.delete(wrapped); // no verdict: the stream took the lease over
  return wrapped;
}
