/**
 * What a call costs in dollars: the user's own price map, charged as the
 * Python client charges (governor.prices), micro-dollar for micro-dollar.
 *
 * A price is USD per million tokens; USD per million tokens times tokens is
 * micro-dollars (1e-6 USD), so a charge is an exact decimal sum rounded up
 * once, computed here with BigInt: the conformance vectors
 * (tests/conformance/prices.json) hold this client to the Python one.
 *
 * The Python client also prices from the genai-prices table; its npm
 * package has no service-tier prices and computes in floating point, so this
 * client takes the prices it charges from the user (the same figures a
 * Python worker of the fleet would be given).
 */
import { ConfigError } from "./errors.js";

/** The service tiers, as governor.prices.TIERS names them. */
export const TIERS = ["standard", "flex", "priority", "fast", "ultrafast", "batch"] as const;
export type Tier = (typeof TIERS)[number];

/** A token count above this is refused (2^53 keeps Lua's doubles exact). */
export const MAX_TOKENS = 2 ** 53;

/** The profile names whose prices are one provider's (as the Python client maps them). */
const PROVIDER_IDS: Readonly<Record<string, string>> = { gemini: "google", vertex: "google", bedrock: "aws" };
const STANDARD_NAMES = new Set(["auto", "default", "standard", "standard_only", "on_demand"]);

/** A model (or one of its service tiers) has no known price. */
export class UnknownPrice extends ConfigError {}

/** The tokens of one call: input counts every input token, the cached ones included. */
export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}

/** A model's price at one tier, in USD per million tokens (a number or a decimal string). */
export interface PriceInit {
  provider: string;
  model: string;
  tier?: Tier | string;
  input: number | string;
  output: number | string;
  /** cache reads (default: the input price) */
  cacheRead?: number | string | null;
  /** cache writes (default: the input price) */
  cacheWrite?: number | string | null;
}

/** A decimal as digits and a scale: value = digits / 10^scale. */
interface Exact {
  digits: bigint;
  scale: number;
}

const DECIMAL = /^(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?$/;

function exact(name: string, value: unknown): Exact {
  if (typeof value !== "number" && typeof value !== "string") {
    throw new ConfigError(`Price.${name} must be USD per million tokens (a number or a decimal string), got ${String(value)}`);
  }
  const text = typeof value === "number" ? String(value) : value.trim();
  const match = DECIMAL.exec(text);
  if (match === null || (typeof value === "number" && !Number.isFinite(value))) {
    throw new ConfigError(`Price.${name} must be a finite, non-negative USD per million tokens, got ${JSON.stringify(value)}`);
  }
  const [whole = "", fraction = ""] = match[1]!.split(".");
  const exponent = Number(match[2] ?? "0");
  const scale = fraction.length - exponent;
  const digits = BigInt((whole + fraction).replace(/^0+(?=\d)/, "") || "0");
  return scale >= 0 ? { digits, scale } : { digits: digits * 10n ** BigInt(-scale), scale: 0 };
}

function count(name: string, value: unknown): bigint {
  if (value === undefined) return 0n;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > MAX_TOKENS) {
    throw new ConfigError(`Usage.${name} must be an integer number of tokens in [0, 2^53], got ${String(value)}`);
  }
  return BigInt(value);
}

function checkTier(tier: unknown): Tier {
  if (typeof tier !== "string" || !(TIERS as readonly string[]).includes(tier)) {
    throw new ConfigError(`unknown service tier ${JSON.stringify(tier)}: use one of ${TIERS.join(", ")}`);
  }
  return tier as Tier;
}

/** The price table's id of a provider profile's name (gemini -> google, bedrock -> aws). */
export function providerId(provider: string): string {
  const name = provider.trim().toLowerCase();
  return PROVIDER_IDS[name] ?? name;
}

/** A provider's name of a service tier as TIERS names it (default and auto are standard); null when none. */
export function tierName(value: unknown): Tier | null {
  if (typeof value !== "string") return null;
  let name = value.trim().toLowerCase();
  if (name.startsWith("service_tier_")) name = name.slice("service_tier_".length);
  if (STANDARD_NAMES.has(name)) return "standard";
  return (TIERS as readonly string[]).includes(name) ? (name as Tier) : null;
}

/** A validated price, ready to charge. */
export class Price {
  readonly provider: string;
  readonly model: string;
  readonly tier: Tier;
  private readonly rates: readonly [Exact, Exact, Exact, Exact]; // input, output, cache read, cache write

  constructor(init: PriceInit) {
    for (const name of ["provider", "model"] as const) {
      const value: unknown = init[name];
      if (typeof value !== "string" || value.trim() === "") {
        throw new ConfigError(`Price.${name} must be a non-empty string, got ${JSON.stringify(value)}`);
      }
    }
    this.provider = init.provider;
    this.model = init.model;
    this.tier = checkTier(init.tier ?? "standard");
    const input = exact("input", init.input);
    const output = exact("output", init.output);
    const read = init.cacheRead === undefined || init.cacheRead === null ? input : exact("cacheRead", init.cacheRead);
    const write = init.cacheWrite === undefined || init.cacheWrite === null ? input : exact("cacheWrite", init.cacheWrite);
    this.rates = [input, output, read, write];
    Object.freeze(this);
  }

  /** provider id, model and tier, as the book looks it up */
  get key(): string {
    return bookKey(this.provider, this.model, this.tier);
  }

  /** What `usage` costs at this price, in micro-dollars rounded up. */
  micros(usage: Usage): number {
    const total = count("inputTokens", usage.inputTokens);
    const output = count("outputTokens", usage.outputTokens);
    const read = count("cacheReadTokens", usage.cacheReadTokens);
    const write = count("cacheWriteTokens", usage.cacheWriteTokens);
    if (read + write > total) {
      throw new ConfigError(
        `Usage: ${read} cache reads and ${write} cache writes are more than the ${total} input tokens; ` +
          "inputTokens counts every input token, the cached ones included",
      );
    }
    const counts = [total - read - write, output, read, write];
    const scale = Math.max(...this.rates.map((rate) => rate.scale));
    let sum = 0n;
    this.rates.forEach((rate, i) => {
      sum += counts[i]! * rate.digits * 10n ** BigInt(scale - rate.scale);
    });
    const unit = 10n ** BigInt(scale);
    const micros = (sum + unit - 1n) / unit; // rounded up: the sum is never negative
    if (micros > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new ConfigError(`a charge of ${micros} micro-dollars is beyond any call's: check the usage`);
    }
    return Number(micros);
  }
}

function bookKey(provider: string, model: string, tier: string): string {
  return JSON.stringify([providerId(provider), model.trim().toLowerCase(), tier]);
}

/** Prices by provider, model and service tier: the user's own. */
export class PriceBook {
  private readonly prices = new Map<string, Price>();

  constructor(prices: Iterable<PriceInit | Price> = []) {
    for (const init of prices) {
      const price = init instanceof Price ? init : new Price(init);
      if (this.prices.has(price.key)) {
        throw new ConfigError(`PriceBook: ${JSON.stringify(price.model)} of ${JSON.stringify(price.provider)} at tier ${JSON.stringify(price.tier)} is priced twice`);
      }
      this.prices.set(price.key, price);
    }
  }

  /** Nothing when `model` of `provider` is priced at `tier`; UnknownPrice naming it and how to price it otherwise. */
  check(provider: string, model: string, tier: Tier | string = "standard"): void {
    this.find(provider, model, tier);
  }

  /** What `usage` costs at `tier`, in micro-dollars (1e-6 USD), rounded up. */
  cost(provider: string, model: string, usage: Usage, tier: Tier | string = "standard"): number {
    return this.find(provider, model, tier).micros(usage);
  }

  /**
   * The most a call of `inputTokens` in and `outputTokens` out can cost at `tier`, in micro-dollars (what a
   * reservation takes): its input uncached, all read from the cache or all written to it, whichever costs most.
   */
  most(provider: string, model: string, inputTokens: number, outputTokens: number, tier: Tier | string = "standard"): number {
    const price = this.find(provider, model, tier);
    const splits: Usage[] = [{}, { cacheReadTokens: inputTokens }, { cacheWriteTokens: inputTokens }];
    return Math.max(...splits.map((split) => price.micros({ inputTokens, outputTokens, ...split })));
  }

  private find(provider: string, model: string, tier: Tier | string): Price {
    const checked = checkTier(tier);
    const found = this.prices.get(bookKey(provider, model, checked));
    if (found === undefined) {
      throw new UnknownPrice(
        `no price for model ${JSON.stringify(model)} of ${JSON.stringify(provider)} at tier ${JSON.stringify(checked)}: ` +
          `give its price: new PriceBook([{ provider: ${JSON.stringify(provider)}, model: ${JSON.stringify(model)}, ` +
          `tier: ${JSON.stringify(checked)}, input: <USD per million tokens>, output: <USD per million tokens> }])`,
      );
    }
    return found;
  }
}
