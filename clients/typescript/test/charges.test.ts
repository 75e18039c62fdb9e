/**
 * The charge conformance vectors (tests/conformance/charges.json, written by
 * the Python transport's governor._exchange.Charge): for the same request and
 * the same answers, this client reserves the same most, settles the same
 * micro-dollars and the same tokens, and refuses what it refuses.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { chargeOf } from "../src/charge.js";
import { estimateRequest } from "../src/fetch.js";
import { PriceBook, UnknownPrice } from "../src/prices.js";
import { StreamUsage, streamOutcome } from "../src/streams.js";
import { bookOfVectors, cases } from "./vectors.js";

/** A stream's usage read from its text cut into pieces of `size` characters (lines and CRLFs split across them). */
function streamUsage(text: string, size: number): StreamUsage {
  const usage = new StreamUsage();
  for (let i = 0; i < text.length; i += size) usage.feed(text.slice(i, i + size));
  usage.finish();
  return usage;
}

const book: PriceBook = bookOfVectors();

test("there are vectors of every kind", () => {
  assert.ok(cases.length >= 20);
  for (const kind of ["stream", "broke_off", "status"] as const) assert.ok(cases.some((c) => c.answers.some((a) => a[kind] !== undefined)), kind);
  assert.ok(cases.some((c) => c.refused !== undefined));
});

test("every call reserves and settles what the Python transport does", () => {
  for (const size of [1, 7, 1 << 20]) {
    for (const c of cases) {
      const estimate = estimateRequest(c.body, c.path);
      assert.deepEqual([estimate.input, estimate.output], c.estimate, c.about);
      if (c.refused !== undefined) {
        assert.throws(() => chargeOf(book, "g", c.body, c.path, estimate), (error: unknown) => error instanceof UnknownPrice && error.constructor.name === c.refused, c.about);
        continue;
      }
      const charge = chargeOf(book, "g", c.body, c.path, estimate);
      assert.equal(charge.tier, c.tier, c.about);
      assert.equal(charge.most, c.most, c.about);
      for (const answer of c.answers) {
        if (answer.broke_off === true) charge.brokeOff();
        else if (answer.stream !== undefined) {
          const read = streamUsage(answer.stream, size);
          charge.streamed(streamOutcome(read, answer.failed === true).spent, read.reported);
        }
        else charge.answered(answer.status!, answer.body);
      }
      assert.deepEqual([charge.charged, charge.tokens], [c.charged, c.tokens], `${c.about} (pieces of ${size})`);
    }
  }
});
