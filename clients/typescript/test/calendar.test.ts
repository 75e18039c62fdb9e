/**
 * Calendar spend windows in a named time zone: the boundaries this client
 * passes the spend function are the Python client's (zoneinfo) for the same
 * window and instant (tests/conformance/calendar.json, made by
 * tests/conformance/generate_calendar.py): days, ISO weeks and months
 * across daylight-saving changes.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ConfigError, windowArgs } from "../src/index.js";

interface Calendar {
  windows: { window: string; now: number; label: string; boundaries: [number, number, number, number] }[];
  invalid: string[];
}

const data = JSON.parse(readFileSync(new URL("../../../../tests/conformance/calendar.json", import.meta.url), "utf8")) as Calendar;

test("every calendar window has the Python client's label and boundaries", () => {
  assert.ok(data.windows.length > 500);
  const wrong: string[] = [];
  for (const row of data.windows) {
    const [label, spec] = windowArgs(row.window, row.now);
    const want = `c:${row.boundaries.join(":")}`;
    if (label !== row.label || spec !== want) wrong.push(`${row.window} at ${new Date(row.now).toISOString()}: ${label} ${spec}, the Python client's ${row.label} ${want}`);
  }
  assert.deepEqual(wrong, []);
});

test("a daylight-saving day is 23 or 25 hours long, as the zone has it", () => {
  const [, spring] = windowArgs("day@America/Los_Angeles", Date.UTC(2026, 2, 8, 12));
  const [, fall] = windowArgs("day@America/Los_Angeles", Date.UTC(2026, 10, 1, 12));
  const length = (spec: string): number => { const [, start, next] = spec.slice(2).split(":").map(Number); return (next! - start!) / 3_600_000; };
  assert.equal(length(spring), 23);
  assert.equal(length(fall), 25);
});

test("the windows both clients refuse: unknown zones", () => {
  assert.ok(data.invalid.length > 0);
  for (const window of data.invalid) assert.throws(() => windowArgs(window, 0), ConfigError, window);
});
