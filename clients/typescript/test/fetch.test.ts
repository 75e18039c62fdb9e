/**
 * The governed fetch under the real openai and anthropic SDKs (their
 * `fetch` option), against a real local HTTP server in their shapes: a 429
 * retried after its Retry-After, usage reported, a stream holding its
 * lease until it ends.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Governor, estimateRequest, governedFetch } from "../src/index.js";
import { privateRedis, uniqueName, until, type PrivateRedis } from "./support.js";

let redis: PrivateRedis;
let server: Server;
let base = "";
let throttleNext = 0;
let overloadNext = 0;
const seen: { path: string; body: Record<string, unknown> }[] = [];
let releaseStream: (() => void) | null = null;

function body(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let data = "";
    req.on("data", (chunk: Buffer) => (data += chunk.toString()));
    req.on("end", () => resolve(data));
  });
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const parsed = JSON.parse(await body(req)) as Record<string, unknown>;
  seen.push({ path: req.url ?? "", body: parsed });
  if (throttleNext > 0) {
    throttleNext -= 1;
    res.writeHead(429, { "content-type": "application/json", "retry-after-ms": "30" });
    res.end(JSON.stringify({ error: { type: "rate_limit_error", code: "rate_limit_exceeded", message: "slow down" } }));
    return;
  }
  if (overloadNext > 0) {
    overloadNext -= 1;
    res.writeHead(529, { "content-type": "application/json", "retry-after-ms": "30" });
    res.end(JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } }));
    return;
  }
  const anthropic = req.url?.includes("/messages") === true;
  const headers = { "x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499" };
  if (parsed["stream"] === true) {
    res.writeHead(200, { "content-type": "text/event-stream", ...headers });
    const events: Record<string, unknown>[] = anthropic
      ? [
          { type: "message_start", message: { id: "m", type: "message", role: "assistant", content: [], model: "x", usage: { input_tokens: 11, output_tokens: 1 } } },
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hi" } },
          { type: "content_block_stop", index: 0 },
          { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 7 } },
          { type: "message_stop" },
        ]
      : [
          { id: "c", object: "chat.completion.chunk", created: 1, model: "x", choices: [{ index: 0, delta: { content: "hi" }, finish_reason: null }] },
          { id: "c", object: "chat.completion.chunk", created: 1, model: "x", choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } },
        ];
    res.write(`${anthropic ? "event: x\n" : ""}data: ${JSON.stringify(events[0])}\n\n`);
    await new Promise<void>((resolve) => {
      releaseStream = resolve;
    });
    for (const event of events.slice(1)) res.write(`${anthropic ? `event: ${String(event.type)}\n` : ""}data: ${JSON.stringify(event)}\n\n`);
    if (!anthropic) res.write("data: [DONE]\n\n");
    res.end();
    return;
  }
  res.writeHead(200, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(anthropic
    ? { id: "m", type: "message", role: "assistant", model: "x", content: [{ type: "text", text: "hi" }], stop_reason: "end_turn", usage: { input_tokens: 11, output_tokens: 7 } }
    : { id: "c", object: "chat.completion", created: 1, model: "x", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } }));
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

function governor(tokensPerMinute = 100_000): Governor {
  return Governor.fromUrl(redis.url, uniqueName("fetch"), { policy: "fixed", restartHold: false, maxCapacity: 4, tokensPerMinute });
}

test("openai: a 429 is retried by the governed fetch after its Retry-After", async () => {
  const gov = governor();
  try {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/v1`, maxRetries: 0, fetch: governedFetch(gov) });
    throttleNext = 1;
    const completion = await client.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hello" }], max_tokens: 50 });
    assert.equal(completion.choices[0]?.message.content, "hi");
    const status = await gov.status();
    assert.equal(status.windowAttempts, 2);
    assert.equal(status.windowRateLimited, 1);
    assert.equal(status.inFlight, 0);
  } finally {
    await gov.close();
  }
});

test("anthropic: a 529 overload is retried, reported as no load signal: no cut, no refusal of the window", async () => {
  const gov = Governor.fromUrl(redis.url, uniqueName("fetch"), { policy: "adaptive", restartHold: false, maxCapacity: 8 });
  try {
    const start = (await gov.status()).capacity;
    const client = new Anthropic({ apiKey: "k", baseURL: base, maxRetries: 0, fetch: governedFetch(gov) });
    overloadNext = 1;
    const message = await client.messages.create({ model: "x", max_tokens: 50, messages: [{ role: "user", content: "hello" }] });
    assert.equal(message.content[0]?.type, "text");
    const status = await gov.status();
    assert.equal(status.windowAttempts, 2, "the overloaded call and its retry");
    assert.equal(status.windowRateLimited, 0, "an overload is no refusal of this fleet's window");
    assert.ok(status.capacity >= start, `and no cut (${start} -> ${status.capacity})`);
    assert.equal(status.notBefore, null, "nor a fleet hold");
  } finally {
    await gov.close();
  }
});

test("openai: the usage a response reports settles the request's reservation", async () => {
  const gov = governor(600); // 10 tokens a second come back: the settlement shows in the level
  try {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/v1`, maxRetries: 0, fetch: governedFetch(gov) });
    await client.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hello" }], max_tokens: 50 });
    const tokens = (await gov.status()).budgets.find((b) => b.kind === "tokens")!;
    const estimate = estimateRequest(JSON.stringify(seen.at(-1)!.body), "/v1/chat/completions");
    assert.equal(estimate.output, 50, "max_tokens is the output estimate");
    // Charged its usage (18 tokens), not its estimate; a little refilled since.
    assert.ok(tokens.level >= tokens.burst - 18 && tokens.level < tokens.burst - 18 + 5, `level ${tokens.level}, burst ${tokens.burst}, estimate ${estimate.input + estimate.output}`);
  } finally {
    await gov.close();
  }
});

test("openai: a stream holds its lease until it ends, then reports and releases", async () => {
  const gov = governor();
  try {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/v1`, maxRetries: 0, fetch: governedFetch(gov) });
    const stream = await client.chat.completions.create({ model: "x", messages: [{ role: "user", content: "hello" }], stream: true, stream_options: { include_usage: true } });
    assert.equal((await gov.status()).inFlight, 1, "the stream holds its lease");
    await until(() => releaseStream !== null);
    releaseStream!();
    releaseStream = null;
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    assert.equal(text, "hi");
    await until(async () => (await gov.status()).inFlight === 0, 5, "the lease released at the stream's end");
    assert.equal((await gov.status()).windowAttempts, 1);
  } finally {
    await gov.close();
  }
});

test("anthropic: a call and a stream through the governed fetch", async () => {
  const gov = governor();
  try {
    const client = new Anthropic({ apiKey: "k", baseURL: base, maxRetries: 0, fetch: governedFetch(gov) });
    throttleNext = 1;
    const message = await client.messages.create({ model: "x", max_tokens: 64, messages: [{ role: "user", content: "hello" }] });
    assert.equal(message.usage.output_tokens, 7);
    const stream = client.messages.stream({ model: "x", max_tokens: 64, messages: [{ role: "user", content: "hello" }] });
    await until(() => releaseStream !== null);
    assert.equal((await gov.status()).inFlight, 1, "the stream holds its lease");
    releaseStream!();
    releaseStream = null;
    const final = await stream.finalMessage();
    assert.equal(final.usage.output_tokens, 7);
    await until(async () => (await gov.status()).inFlight === 0, 5, "the lease released at the stream's end");
    const status = await gov.status();
    assert.equal(status.windowAttempts, 3);
    assert.equal(status.windowRateLimited, 1);
    const last = seen.at(-1)!;
    assert.equal(last.path, "/v1/messages");
  } finally {
    await gov.close();
  }
});
