/**
 * The conformance vectors the charge tests read: the price book of
 * tests/conformance/prices.json (invented prices), and the calls of
 * tests/conformance/charges.json.
 */
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

export interface Answer { status?: number; body?: string; stream?: string; failed?: boolean; broke_off?: boolean }
export interface ChargeCase {
  about: string; path: string; body: string; answers: Answer[]; estimate: [number, number]; tier: string;
  most?: number; charged?: number; tokens?: number; refused?: string;
}

export const cases = (JSON.parse(readFileSync(new URL("../../../../tests/conformance/charges.json", import.meta.url), "utf8")) as { cases: ChargeCase[] }).cases;
