/**
 * The price conformance vectors (tests/conformance/prices.json, written by
 * the Python client's governor.prices): this client charges the same
 * micro-dollars for the same usage at the same price, refuses what it
 * refuses, and names the tiers as it does.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ConfigError, SpendExhausted } from "../src/errors.js";
import { Price, PriceBook, TIERS, UnknownPrice, tierName, type PriceInit, type Usage } from "../src/prices.js";

interface Figures {
  provider: string; model: string; tier?: string; input: number | string; output: number | string;
  cache_read?: number | string; cache_write?: number | string;
}
interface Tokens { input_tokens?: number; output_tokens?: number; cache_read_tokens?: number; cache_write_tokens?: number }
interface Vectors {
  tiers: string[];
  tier_names: [unknown, string | null][];
  prices: Figures[];
  charges: { provider: string; model: string; tier: string; usage: Tokens; micros: number }[];
  most: { provider: string; model: string; tier: string; input_tokens: number; output_tokens: number; micros: number }[];
  unknown: { provider: string; model: string; tier: string }[];
  invalid_prices: Figures[];
  invalid_usages: Tokens[];
}

const data = JSON.parse(readFileSync(new URL("../../../../tests/conformance/prices.json", import.meta.url), "utf8")) as Vectors;

function init(figures: Figures): PriceInit {
  const out: PriceInit = { provider: figures.provider, model: figures.model, input: figures.input, output: figures.output };
  if (figures.tier !== undefined) out.tier = figures.tier;
  if (figures.cache_read !== undefined) out.cacheRead = figures.cache_read;
  if (figures.cache_write !== undefined) out.cacheWrite = figures.cache_write;
  return out;
}

function usage(tokens: Tokens): Usage {
  const out: Usage = {};
  if (tokens.input_tokens !== undefined) out.inputTokens = tokens.input_tokens;
  if (tokens.output_tokens !== undefined) out.outputTokens = tokens.output_tokens;
  if (tokens.cache_read_tokens !== undefined) out.cacheReadTokens = tokens.cache_read_tokens;
  if (tokens.cache_write_tokens !== undefined) out.cacheWriteTokens = tokens.cache_write_tokens;
  return out;
}

const book = new PriceBook(data.prices.map(init));

test("the tiers are the Python client's", () => {
  assert.deepEqual([...TIERS], data.tiers);
  for (const [name, tier] of data.tier_names) assert.equal(tierName(name), tier, JSON.stringify(name));
});

test("every charge is the Python client's, to the micro-dollar", () => {
  assert.ok(data.charges.length > 100);
  for (const charge of data.charges) {
    assert.equal(book.cost(charge.provider, charge.model, usage(charge.usage), charge.tier), charge.micros, JSON.stringify(charge));
  }
});

test("the most a call can cost is the Python client's", () => {
  assert.ok(data.most.length > 10);
  for (const most of data.most) {
    assert.equal(book.most(most.provider, most.model, most.input_tokens, most.output_tokens, most.tier), most.micros, JSON.stringify(most));
  }
});

test("what the Python client cannot price, this one refuses, naming it and how to price it", () => {
  for (const lookup of data.unknown) {
    assert.throws(() => book.check(lookup.provider, lookup.model, lookup.tier), (error: unknown) => {
      assert.ok(error instanceof UnknownPrice && error instanceof ConfigError);
      assert.match(error.message, new RegExp(`no price for model "${lookup.model}" of "${lookup.provider}" at tier "${lookup.tier}": give its price`));
      return true;
    });
  }
  assert.throws(() => book.check("openai", "house-model", "turbo"), /unknown service tier "turbo": use one of standard, flex/);
});

test("the prices and usages the Python client refuses are refused", () => {
  for (const figures of data.invalid_prices) {
    assert.throws(() => new Price(init(figures)), ConfigError, JSON.stringify(figures));
  }
  const price = new Price({ provider: "openai", model: "m", input: 1, output: 1 });
  for (const tokens of data.invalid_usages) {
    assert.throws(() => price.micros(usage(tokens)), ConfigError, JSON.stringify(tokens));
  }
});

test("a price is frozen and rounds up once", () => {
  const tiny = new Price({ provider: "openai", model: "m", input: "0.000001", output: 0 });
  assert.equal(tiny.micros({ inputTokens: 1 }), 1);
  assert.equal(tiny.micros({ inputTokens: 1_000_000 }), 1);
  assert.equal(tiny.micros({ inputTokens: 1_000_001 }), 2);
  assert.ok(Object.isFrozen(tiny));
  assert.throws(() => new PriceBook([{ provider: "openai", model: "m", input: 1, output: 1 }, { provider: "OpenAI", model: "M", input: 2, output: 2 }]), /priced twice/);
});

test("SpendExhausted carries its budget's figures", () => {
  const error = new SpendExhausted("spent", { budget: "fleet", spent: 10_000_000, limit: 10_000_000, resetsAt: 1_000 }, "g");
  assert.equal(SpendExhausted.code, "spend_exhausted");
  assert.equal(error.name, "SpendExhausted");
  assert.deepEqual([error.budget, error.spent, error.limit, error.resetsAt, error.governor], ["fleet", 10_000_000, 10_000_000, 1_000, "g"]);
});
