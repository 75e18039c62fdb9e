/** The price book of the conformance vectors (tests/conformance/prices.json's invented prices), for the charge tests. */
import { readFileSync } from "node:fs";
import { PriceBook, type PriceInit } from "../src/prices.js";

interface Figures {
  provider: string; model: string; tier?: string; input: number | string; output: number | string;
  cache_read?: number | string; cache_write?: number | string;
}

export function bookOfVectors(): PriceBook {
  const data = JSON.parse(readFileSync(new URL("../../../../tests/conformance/prices.json", import.meta.url), "utf8")) as { prices: Figures[] };
  return new PriceBook(data.prices.map((figures): PriceInit => ({
    provider: figures.provider,
    model: figures.model,
    input: figures.input,
    output: figures.output,
    ...(figures.tier === undefined ? {} : { tier: figures.tier }),
    ...(figures.cache_read === undefined ? {} : { cacheRead: figures.cache_read }),
    ...(figures.cache_write === undefined ? {} : { cacheWrite: figures.cache_write }),
  })));
}
