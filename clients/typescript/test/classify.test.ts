/** classifyHttp's load signal: which refusals the adaptive policy cuts for (governor/profiles' load_signal). */
import { test } from "node:test";
import assert from "node:assert/strict";
import { classifyHttp } from "../src/retry.js";

const headroom = { "x-ratelimit-remaining-requests": "40", "x-ratelimit-remaining-tokens": "9000" };

test("an overload (529, 503, an overloaded error) is rate-limited but no load signal", () => {
  for (const [status, body] of [[529, ""], [503, ""], [429, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }]] as const) {
    const c = classifyHttp(status, undefined, body);
    assert.equal(c.outcome, "rate_limited", `HTTP ${status}`);
    assert.equal(c.load, false, `HTTP ${status}: no load signal`);
  }
});

test("a 429 is a load signal unless its headers show requests and tokens remaining", () => {
  assert.equal(classifyHttp(429, undefined, "").load, true);
  assert.equal(classifyHttp(429, new Headers({ "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "9000" }), "").load, true);
  assert.equal(classifyHttp(429, new Headers({ "x-ratelimit-remaining-requests": "40" }), "").load, true, "tokens not announced");
  assert.equal(classifyHttp(429, new Headers(headroom), "").load, false);
  assert.equal(classifyHttp(429, headroom, "").load, false, "a plain object of headers too");
});
