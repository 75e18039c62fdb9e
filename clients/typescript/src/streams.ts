/**
 * The usage of a streamed response, and any error inside it, read from its
 * server-sent events as they pass (governor/streams.py's StreamUsage, for
 * the OpenAI and Anthropic shapes): OpenAI's chunk with `usage` (the
 * include_usage one), the Responses API's `response.completed` /
 * `response.incomplete`, Anthropic's `message_start` (input and cache
 * tokens) and `message_delta` (cumulative output, and input when it says),
 * and the first error event, classified as classifyHttp says. Nothing here
 * throws on bad input: an event that is not JSON is skipped.
 */
import type { Tokens } from "./core.js";
import { classifyHttp, type Classification } from "./retry.js";

/** an event whose data grows beyond this many characters is dropped */
export const MAX_EVENT_CHARS = 16 * 1024 * 1024;
const MAX_TOKENS = 2 ** 53;
/** event names (or data "type"s) that carry usage or an error */
const USAGE_EVENTS = new Set(["message_start", "message_delta", "response.completed", "response.incomplete"]);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A field of a decoded JSON value (undefined for anything but an object; null counts as absent). */
export function field(obj: unknown, name: string): unknown {
  if (!isRecord(obj)) return undefined;
  const value = obj[name];
  return value === null ? undefined : value;
}

export function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

function tokens(input: unknown, output: unknown): Tokens | undefined {
  if (!isCount(input) || !isCount(output) || input > MAX_TOKENS || output > MAX_TOKENS) return undefined;
  return { input, output };
}

/**
 * The tokens a response (or its usage part, or a stream's chunk) says it used
 * (governor.profiles.usage_of, for the OpenAI and Anthropic shapes): Anthropic's
 * cache reads and writes counted in the input; undefined when it does not say.
 */
export function usageTokens(obj: unknown): Tokens | undefined {
  if (!isRecord(obj)) return undefined;
  let usage = field(obj, "usage");
  if (usage === undefined && (field(obj, "prompt_tokens") !== undefined || field(obj, "input_tokens") !== undefined)) usage = obj;
  if (usage === undefined || typeof usage === "string" || typeof usage === "number" || typeof usage === "boolean") return undefined;
  const prompt = field(usage, "prompt_tokens");
  if (prompt !== undefined) return tokens(prompt, field(usage, "completion_tokens") ?? 0);
  if (field(usage, "input_tokens") === undefined) return undefined;
  const parts = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"].map((name) => field(usage, name));
  if (parts.some((part) => part !== undefined && !isCount(part))) return undefined;
  const total = parts.reduce<number>((sum, part) => sum + ((part as number | undefined) ?? 0), 0);
  return tokens(total, field(usage, "output_tokens") ?? 0);
}

/** Usage and errors read from a server-sent-events stream as it passes: feed() its text, finish() at its end. */
export class StreamUsage {
  /** the usage the stream reported so far, if any */
  usage: Tokens | undefined;
  /**
   * what `usage` was read from, in the shape of a whole response (an OpenAI chunk, a Responses
   * `response`; Anthropic's `{usage}` of message_start updated by each message_delta): its price is
   * read from it, cached tokens apart, as a response read whole
   */
  reported: Record<string, unknown> | undefined;
  /** the first error event, classified */
  error: Classification | undefined;
  /** the stream said it was complete ([DONE], message_stop, response.completed) */
  done = false;
  private buffer = "";
  private pendingCr = false;
  private event: string | undefined;
  private data: string[] = [];
  private size = 0;
  private oversized = false;

  /** Read the next piece of the stream's text (any split, even mid-line). */
  feed(chunk: string): void {
    if (chunk === "") return;
    if (this.pendingCr) {
      this.pendingCr = false;
      if (chunk.startsWith("\n")) chunk = chunk.slice(1);
    }
    const text = this.buffer + chunk;
    let start = 0;
    const line = /\r\n|\r|\n/g;
    for (let found = line.exec(text); found !== null; found = line.exec(text)) {
      if (found[0] === "\r" && found.index === text.length - 1) this.pendingCr = true; // a LF may start the next chunk
      this.line(text.slice(start, found.index));
      start = found.index + found[0].length;
    }
    const rest = text.slice(start);
    if (rest.length > MAX_EVENT_CHARS) {
      this.oversized = true;
      this.buffer = "";
    } else {
      this.buffer = rest;
    }
  }

  /** The stream ended: read what is left (a last line, an event not closed by a blank line). */
  finish(): void {
    if (this.buffer !== "") {
      this.line(this.buffer);
      this.buffer = "";
    }
    this.dispatch();
  }

  private line(line: string): void {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return; // a comment (keep-alive)
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") {
      this.size += value.length + 1;
      if (this.size > MAX_EVENT_CHARS) {
        this.oversized = true;
        this.data = [];
      } else if (!this.oversized) {
        this.data.push(value);
      }
    } else if (name === "event") {
      this.event = value;
    }
  }

  private dispatch(): void {
    const { event, data, oversized } = this;
    this.event = undefined;
    this.data = [];
    this.size = 0;
    this.oversized = false;
    if (oversized || data.length === 0) return;
    const text = data.join("\n");
    if (text.startsWith("[DONE]")) {
      this.done = true;
      return;
    }
    if ((event === undefined || !USAGE_EVENTS.has(event)) && event !== "error" && !text.includes('"usage') && !text.includes('"error"')) {
      if (event === "message_stop") this.done = true;
      return; // a content chunk: nothing to read
    }
    let payload: unknown;
    try {
      payload = JSON.parse(text);
    } catch {
      return;
    }
    if (isRecord(payload)) this.read(event, payload);
  }

  private read(event: string | undefined, payload: Record<string, unknown>): void {
    const kind = event ?? payload["type"];
    const response = payload["response"];
    if (kind === "message_start") {
      const message = payload["message"];
      const usage = isRecord(message) ? field(message, "usage") : undefined;
      const found = usageTokens(usage);
      if (found !== undefined && isRecord(usage)) {
        this.usage = found;
        this.reported = { usage: { ...usage } };
      }
    } else if (kind === "message_delta") {
      this.delta(payload["usage"]);
    } else if (typeof kind === "string" && kind.startsWith("response.") && isRecord(response)) {
      const found = usageTokens(field(response, "usage"));
      if (found !== undefined) {
        this.usage = found;
        this.reported = response;
      }
      if (kind === "response.completed" || kind === "response.incomplete") this.done = true;
      if (kind === "response.failed") this.fail({ error: response["error"] });
    } else if (kind === "error" || isRecord(payload["error"])) {
      this.fail(payload);
    } else {
      const found = usageTokens(payload);
      if (found !== undefined) {
        this.usage = found;
        this.reported = payload;
      }
    }
  }

  /** Anthropic's message_delta: cumulative counts, output always, input when it says. */
  private delta(usage: unknown): void {
    if (!isRecord(usage)) return;
    const output = usage["output_tokens"];
    if (!isCount(output)) return;
    const current = this.usage ?? { input: 0, output: 0 };
    // the figures so far, each replaced by the delta's when it gives one (cache reads and writes too)
    const before = this.reported === undefined ? undefined : this.reported["usage"];
    const given = Object.fromEntries(Object.entries(usage).filter(([, v]) => v !== null && v !== undefined));
    this.reported = { usage: { ...(isRecord(before) ? before : {}), ...given } };
    if (field(usage, "input_tokens") !== undefined) {
      const found = usageTokens(usage);
      if (found !== undefined) {
        this.usage = found;
        return;
      }
    }
    this.usage = tokens(current.input, output) ?? current;
  }

  private fail(body: Record<string, unknown>): void {
    this.error ??= classifyHttp(200, undefined, body);
  }
}

/**
 * What a finished stream reports and is charged (governor._exchange.stream_outcome):
 * its error's outcome (nothing spent when refused before it said any usage), an
 * error when it broke off, else success; with the usage it reported.
 */
export function streamOutcome(usage: StreamUsage, failed: boolean): { outcome: Classification["outcome"]; spent: Tokens | undefined; error: Classification | undefined } {
  const error = usage.error;
  if (error !== undefined) {
    const spent = usage.usage ?? (error.outcome !== "error" ? { input: 0, output: 0 } : undefined);
    return { outcome: error.outcome, spent, error };
  }
  return { outcome: failed ? "error" : "success", spent: usage.usage, error: undefined };
}
