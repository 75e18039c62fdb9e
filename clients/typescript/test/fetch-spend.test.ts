/**
 * The governed fetch guards the spend budgets, end to end: a real HTTP
 * server answers each request of the charge conformance vectors
 * (tests/conformance/charges.json) with the vector's answers, a private
 * redis-server keeps the budget, and what the fetch reserved and settled,
 * and what the budget counts spent, are the Python transport's figures. An
 * unaffordable call never reaches the server; a stream keeps its lease and
 * its reservation to its last byte.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { ConfigError, Governor, SpendExhausted, governedFetch, type SpendBudget } from "../src/index.js";
import { bookOfVectors, cases, type Answer, type ChargeCase } from "./vectors.js";
import { privateRedis, uniqueName, until, type PrivateRedis } from "./support.js";

let redis: PrivateRedis;
let server: Server;
let base = "";
/** what the server answers next, in order */
let script: Answer[] = [];
/** the bodies of the requests the server received */
const received: string[] = [];
/** a stream waits here after its first half until the test opens it */
let gate: { open: () => void; reached: boolean } | null = null;

const NOON = Date.UTC(2026, 11, 7, 12) / 1000;
const STARTED = performance.now() / 1000;
/** the governor's clock: a Monday noon, then as time passes (a 429's hold ends) */
const clock = (): number => NOON + performance.now() / 1000 - STARTED;
const LIMIT = 1000; // dollars a day: no vector's call comes near it
const book = bookOfVectors();

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  let raw = "";
  for await (const chunk of req) raw += String(chunk);
  received.push(raw);
  const answer = script.shift();
  if (answer === undefined) {
    res.writeHead(500, { "content-type": "application/json" });
    res.end('{"error": {"message": "the test server has no answer scripted"}}');
    return;
  }
  if (answer.broke_off === true) {
    req.socket.destroy(); // no answer at all: the request may have been billed
    return;
  }
  if (answer.stream === undefined) {
    res.writeHead(answer.status!, { "content-type": "application/json", "retry-after-ms": "1" });
    res.end(answer.body);
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  const half = Math.floor(answer.stream.length / 2);
  const write = (text: string): Promise<void> => new Promise((resolve) => res.write(text, () => resolve()));
  await write(answer.stream.slice(0, half));
  if (gate !== null) {
    const waiting = gate;
    await new Promise<void>((resolve) => {
      waiting.open = resolve;
      waiting.reached = true;
    });
  }
  await write(answer.stream.slice(half));
  if (answer.failed === true) res.destroy(); // broke off before its end (what was written is sent)
  else res.end();
}

before(async () => {
  redis = await privateRedis();
  server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  base = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await redis.stop();
});

interface Spied {
  gov: Governor;
  budgets: SpendBudget[];
  /** [op, micros, tokens] of each reserve and settle */
  spend: [string, number, number | undefined][];
}

/** A governor with a daily budget of `limit` dollars, priced by the vectors' book; its reserves and settles recorded. */
function governor(limit = LIMIT): Spied {
  const budgets: SpendBudget[] = [{ name: "daily", window: "day", limit }];
  const gov = Governor.fromUrl(redis.url, uniqueName("spend"), { restartHold: false, clock, spend: budgets, prices: book });
  const spend: Spied["spend"] = [];
  const reserve = gov.reserveSpend.bind(gov);
  const settle = gov.settleSpend.bind(gov);
  gov.reserveSpend = (micros, b, options) => {
    spend.push(["reserve", micros, options?.tokens]);
    return reserve(micros, b, options);
  };
  gov.settleSpend = (reservation, micros, b, options) => {
    spend.push(["settle", micros, options?.tokens]);
    return settle(reservation, micros, b, options);
  };
  return { gov, budgets, spend };
}

/** The micro-dollars the budget counts spent (and reserved): a probe of the whole limit, given back. */
async function spent({ gov, budgets }: Spied, limit = LIMIT): Promise<number> {
  try {
    const probe = await gov.reserveSpend(limit * 1e6, budgets);
    await gov.settleSpend(probe, 0, budgets, { requests: 0 });
    return 0;
  } catch (error) {
    if (error instanceof SpendExhausted) return error.spent;
    throw error;
  }
}

function post(fetcher: typeof fetch, c: ChargeCase): Promise<Response> {
  return fetcher(`${base}${c.path}`, { method: "POST", headers: { "content-type": "application/json" }, body: c.body });
}

const priced = cases.filter((c) => c.refused === undefined && c.answers.every((a) => a.broke_off !== true));

test("every call reserves the Python transport's most and settles its charge", async () => {
  assert.ok(priced.length >= 15);
  for (const c of priced) {
    const spied = governor();
    try {
      script = [...c.answers];
      const response = await post(governedFetch(spied.gov, { retry: { maxAttempts: c.answers.length, base: 0.001 } }), c);
      if (c.answers.at(-1)!.failed === true) await assert.rejects(response.text(), c.about);
      else await response.text();
      await until(() => spied.spend.length === 2, 5, `${c.about}: settled`);
      assert.equal(script.length, 0, `${c.about}: every answer was asked for`);
      assert.deepEqual(spied.spend, [["reserve", c.most, c.estimate[0] + c.estimate[1]], ["settle", c.charged, c.tokens]], c.about);
      assert.equal(await spent(spied), c.charged, `${c.about}: the budget counts the charge`);
    } finally {
      await spied.gov.close();
    }
  }
});

test("a call no budget can afford throws SpendExhausted and never reaches the server", async () => {
  const c = priced.find((each) => each.path.endsWith("chat/completions") && each.answers.length === 1)!;
  const limit = (c.most! - 1) / 1e6; // one micro-dollar short of the call's most
  const spied = governor(limit);
  try {
    const before = received.length;
    await assert.rejects(post(governedFetch(spied.gov), c), (error: unknown) => {
      assert.ok(error instanceof SpendExhausted, String(error));
      assert.deepEqual([error.budget, error.why], ["daily", "never"]);
      return true;
    });
    assert.equal(received.length, before, "nothing was sent");
    assert.equal((await spied.gov.status()).inFlight, 0, "and no lease taken");
    assert.equal(await spent(spied, limit), 0);
  } finally {
    await spied.gov.close();
  }
});

test("a 429 is charged nothing: only the retry's usage is", async () => {
  const c = priced.find((each) => each.answers[0]!.status === 429)!;
  assert.ok(c.answers.length === 2 && c.charged! > 0);
  const spied = governor();
  try {
    script = [c.answers[0]!]; // the 429 alone, not retried
    const response = await post(governedFetch(spied.gov, { retry: { maxAttempts: 1 } }), c);
    assert.equal(response.status, 429);
    assert.deepEqual(spied.spend, [["reserve", c.most, c.estimate[0] + c.estimate[1]], ["settle", 0, 0]]);
    assert.equal(await spent(spied), 0);
  } finally {
    await spied.gov.close();
  }
});

test("a call that broke off after it was sent is charged its reservation", async () => {
  const c = cases.find((each) => each.answers[0]!.broke_off === true)!;
  const spied = governor();
  try {
    script = [c.answers[0]!];
    await assert.rejects(post(governedFetch(spied.gov), c), TypeError);
    assert.deepEqual(spied.spend, [["reserve", c.most, c.estimate[0] + c.estimate[1]], ["settle", c.most, c.estimate[0] + c.estimate[1]]]);
    assert.equal(await spent(spied), c.most);
    assert.equal((await spied.gov.status()).inFlight, 0);
  } finally {
    await spied.gov.close();
  }
});

test("a stream keeps its lease and its reservation to its last byte, then settles its usage", async () => {
  const c = priced.find((each) => each.answers.length === 1 && each.answers[0]!.stream !== undefined && each.answers[0]!.failed !== true && each.charged! < each.most!)!;
  const spied = governor();
  try {
    script = [...c.answers];
    gate = { open: () => undefined, reached: false };
    const response = await post(governedFetch(spied.gov), c);
    await until(() => gate!.reached, 5, "the stream's first half sent");
    const reader = response.body!.getReader();
    await reader.read(); // the first half is read: the stream is not over
    assert.deepEqual(spied.spend, [["reserve", c.most, c.estimate[0] + c.estimate[1]]], "reserved, not settled yet");
    assert.equal(await spent(spied), c.most, "the budget holds the reservation");
    assert.equal((await spied.gov.status()).inFlight, 1, "the stream holds its lease");
    gate.open();
    while (!(await reader.read()).done);
    assert.deepEqual(spied.spend.at(-1), ["settle", c.charged, c.tokens]);
    assert.equal(await spent(spied), c.charged);
    assert.equal((await spied.gov.status()).inFlight, 0);
  } finally {
    gate = null;
    await spied.gov.close();
  }
});

test("an aborted stream settles what it read, conservatively its reservation when it said no usage", async () => {
  const c = priced.find((each) => each.about.startsWith("chat stream without usage"))!;
  const spied = governor();
  try {
    script = [...c.answers];
    gate = { open: () => undefined, reached: false };
    const controller = new AbortController();
    const response = await governedFetch(spied.gov)(`${base}${c.path}`, { method: "POST", body: c.body, signal: controller.signal });
    await until(() => gate!.reached, 5, "the stream's first half sent");
    const reader = response.body!.getReader();
    await reader.read();
    controller.abort();
    await assert.rejects(async () => {
      while (!(await reader.read()).done);
    });
    await until(() => spied.spend.length === 2, 5, "settled");
    assert.deepEqual(spied.spend.at(-1), ["settle", c.most, c.estimate[0] + c.estimate[1]]);
    assert.equal((await spied.gov.status()).inFlight, 0);
    gate.open();
  } finally {
    gate = null;
    await spied.gov.close();
  }
});

test("spend budgets without prices are refused when the fetch is made", async () => {
  const gov = Governor.fromUrl(redis.url, uniqueName("spend"), { restartHold: false, spend: [{ name: "daily", window: "day", limit: 1 }] });
  try {
    assert.throws(() => governedFetch(gov), (error: unknown) => error instanceof ConfigError && /has spend budgets: give its config's prices or governedFetch's prices/.test(error.message));
    assert.equal(typeof governedFetch(gov, { prices: book }), "function");
  } finally {
    await gov.close();
  }
});
