/**
 * What one governed request costs, attempt by attempt (the Python
 * transport's governor._exchange.Charge): the most it can cost is reserved
 * before it is sent, and each answer adds its charge: a response's usage
 * (its cached tokens apart) at the tier that served it (the tier asked for
 * when it does not say); a refusal or an error answer what the provider
 * bills it (nothing, for OpenAI and Anthropic); an answer whose usage cannot
 * be read, or an attempt that broke off after it was sent, its reservation
 * (it may have been billed); a stream's usage at the tier asked for. The
 * conformance vectors (tests/conformance/charges.json, written by the Python
 * transport) hold this client to the Python one.
 */
import type { Tokens } from "./core.js";
import { ConfigError } from "./errors.js";
import { UnknownPrice, tierName, type PriceBook, type Tier, type Usage } from "./prices.js";
import { field, isCount } from "./streams.js";

/** The provider shapes this client prices: OpenAI's endpoints, and Anthropic's messages. */
export type Provider = "openai" | "anthropic";

const MAX_TOKENS = 2 ** 53;
const MODEL_IN_PATH = /\/models?\/([^/:]+)/;

/** The provider a path's request goes to, as the Python transport tells them without a profile. */
export function providerOf(path: string): Provider {
  return path.replace(/\/+$/, "").endsWith("messages") ? "anthropic" : "openai";
}

function decoded(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

/** The model a request names: its JSON body's `model`, else the path's (`/models/<model>:...`); undefined when none. */
export function requestModel(body: string, path: string): string | undefined {
  const model = field(decoded(body), "model");
  if (typeof model === "string" && model.trim() !== "") return model;
  return MODEL_IN_PATH.exec(path)?.[1];
}

/** The service tier a request asks for: OpenAI's `service_tier`; Anthropic's `speed: "fast"` (else standard). */
export function requestedTier(provider: Provider, body: string): Tier {
  const request = decoded(body);
  if (provider === "anthropic") return tierName(field(request, "speed")) === "fast" ? "fast" : "standard";
  return tierName(field(request, "service_tier")) ?? "standard";
}

/** The service tier a response says served it (OpenAI: its `service_tier`; Anthropic: its usage's `speed`, then `service_tier`). */
export function servedTier(provider: Provider, response: unknown): Tier | null {
  if (provider === "openai") return tierName(field(response, "service_tier"));
  const usage = field(response, "usage");
  if (usage === undefined) return null;
  const speed = tierName(field(usage, "speed"));
  if (speed === "fast") return "fast";
  return tierName(field(usage, "service_tier")) ?? speed;
}

function priced(total: unknown, output: unknown, read?: unknown, write?: unknown): Usage | undefined {
  const figures = [total, output, read, write].map((value) => value ?? 0);
  if (!figures.every((value) => isCount(value) && value <= MAX_TOKENS)) return undefined;
  const [inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens] = figures as [number, number, number, number];
  if (cacheReadTokens + cacheWriteTokens > inputTokens) return undefined;
  return { inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens };
}

/**
 * The usage a response's price is computed from (Profile.priced_usage): OpenAI's chat
 * (`prompt_tokens_details.cached_tokens`) and Responses (`input_tokens_details.cached_tokens`)
 * shapes, Anthropic's (cache reads and writes apart from `input_tokens`); undefined when it does not say.
 */
export function pricedUsage(response: unknown): Usage | undefined {
  let usage = field(response, "usage");
  if (usage === undefined && (field(response, "prompt_tokens") !== undefined || field(response, "input_tokens") !== undefined)) usage = response;
  if (usage === undefined || typeof usage === "string" || typeof usage === "number" || typeof usage === "boolean") return undefined;
  const prompt = field(usage, "prompt_tokens");
  if (prompt !== undefined) return priced(prompt, field(usage, "completion_tokens"), field(field(usage, "prompt_tokens_details"), "cached_tokens"));
  const given = field(usage, "input_tokens");
  const output = field(usage, "output_tokens");
  const read = field(usage, "cache_read_input_tokens");
  const write = field(usage, "cache_creation_input_tokens");
  if (read !== undefined || write !== undefined) {
    const parts = [given, read || 0, write || 0];
    if (!parts.every(isCount)) return undefined;
    const [a, b, c] = parts as [number, number, number];
    return priced(a + b + c, output, read, write);
  }
  return priced(given, output, field(field(usage, "input_tokens_details"), "cached_tokens"));
}

/** What one governed request costs: reserve `most`, settle `charged` (micro-dollars) and `tokens`. */
export class Charge {
  /** the most the request can cost at the tier it asks for: what is reserved */
  readonly most: number;
  /** the tokens it reserves (its estimate's total) */
  readonly estimate: number;
  /** micro-dollars its answers were charged so far */
  charged = 0;
  /** the tokens its answers used (the estimate's for an answer that does not say) */
  tokens = 0;
  /** a stream took the charge over: it settles when it ends */
  handedOver = false;

  constructor(
    private readonly book: PriceBook,
    readonly provider: Provider,
    readonly model: string,
    readonly tier: Tier,
    estimate: Tokens,
  ) {
    this.most = book.most(provider, model, estimate.input, estimate.output, tier);
    this.estimate = estimate.input + estimate.output;
  }

  private cost(usage: Usage, tier: Tier | null): number {
    return this.book.cost(this.provider, this.model, usage, tier ?? this.tier);
  }

  private reserved(): void {
    this.charged += this.most;
    this.tokens += this.estimate;
  }

  /** An answer read whole: its status and body text (undefined: unreadable). */
  answered(status: number, body: string | undefined): void {
    if (status >= 400) return; // a refusal or an error answer: not billed by OpenAI or Anthropic
    const response = body === undefined || body === "" ? undefined : decoded(body);
    const usage = response === undefined || response === null ? undefined : pricedUsage(response);
    if (usage === undefined) return this.reserved();
    let cost: number;
    try {
      cost = this.cost(usage, servedTier(this.provider, response));
    } catch (error) {
      // a tier served that has no price: the call was billed, so it is charged its reservation
      if (error instanceof UnknownPrice) return this.reserved();
      throw error;
    }
    this.charged += cost;
    this.tokens += usage.inputTokens! + usage.outputTokens!;
  }

  /**
   * A stream that ended: the usage it reported, priced as a response read whole (`reported`, what
   * StreamUsage read it from: its cached tokens apart, at the tier that served it), else its tokens
   * at the input and output prices, else its reservation.
   */
  streamed(usage: Tokens | undefined, reported?: Record<string, unknown>): void {
    if (usage === undefined) return this.reserved();
    const priced = reported === undefined ? undefined : pricedUsage(reported);
    if (priced !== undefined) {
      this.charged += this.cost(priced, servedTier(this.provider, reported));
      this.tokens += priced.inputTokens! + priced.outputTokens!;
      return;
    }
    this.charged += this.cost({ inputTokens: usage.input, outputTokens: usage.output }, null);
    this.tokens += usage.input + usage.output;
  }

  /** An attempt that failed after it may have been sent. */
  brokeOff(): void {
    this.reserved();
  }
}

/** The charge of a request to `path` with body `body`, priced by `book` (a ConfigError when it names no model). */
export function chargeOf(book: PriceBook, governor: string, body: string, path: string, estimate: Tokens): Charge {
  const provider = providerOf(path);
  const model = requestModel(body, path);
  if (model === undefined) {
    throw new ConfigError(`governor ${JSON.stringify(governor)} has spend budgets but the request to ${path} names no model: its price is unknown`, governor);
  }
  return new Charge(book, provider, model, requestedTier(provider, body), estimate);
}
