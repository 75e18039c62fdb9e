/**
 * Every ```js example (an ES module) and ```cjs example (CommonJS) of
 * docs/clients/typescript.md, README.md and this package's README.md runs, as written,
 * against a private redis-server and (for the SDK example) a local HTTP
 * server in the OpenAI shape that the real openai SDK calls
 * (OPENAI_BASE_URL). Each runs as a module inside this package, so
 * `import ... from "fleet-governor"` is this package.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import { Governor } from "../src/index.js";
import { privateRedis } from "./support.js";

const page = ["docs/clients/typescript.md", "README.md", "clients/typescript/README.md"]
  .map((path) => readFileSync(new URL(`../../../../${path}`, import.meta.url), "utf8"))
  .join("\n");
const examples = [...page.matchAll(/```(js|cjs)\n([\s\S]*?)```/g)].map((m) => ({ code: m[2]!, ext: m[1] === "cjs" ? "cjs" : "mjs" }));

async function openaiShape(req: IncomingMessage, res: ServerResponse): Promise<void> {
  let raw = "";
  for await (const chunk of req) raw += String(chunk);
  const body = JSON.parse(raw) as Record<string, unknown>;
  const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };
  if (body["stream"] === true) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const word of ["one ", "two ", "three"]) {
      res.write(`data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: word }, finish_reason: null }] })}\n\n`);
    }
    res.write(`data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage })}\n\ndata: [DONE]\n\n`);
    res.end();
    return;
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage }));
}

function run(file: string, env: Record<string, string>): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile("node", [file], { env: { ...process.env, ...env }, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, out: stdout + stderr });
    });
  });
}

test("the page has examples", () => {
  assert.ok(examples.length >= 4, `${examples.length} examples`);
});

test("every example of the Node client's page runs", async (t) => {
  const redis = await privateRedis();
  const server = createServer((req, res) => void openaiShape(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  try {
    // A redis-server younger than a lease TTL holds a new governor's
    // admissions for the rest of that TTL (its holders before a restart may
    // still believe): create the examples' governors first, as a client
    // that knows this server is new.
    for (const [, name] of page.matchAll(/fromUrl\([^,]+, "([^"]+)"/g)) {
      const gov = Governor.fromUrl(redis.url, name!, { restartHold: false });
      await gov.status();
      await gov.close();
    }
    for (const [i, { code, ext }] of examples.entries()) {
      await t.test(`example ${i + 1} (${ext})`, async () => {
        const file = fileURLToPath(new URL(`../docs-example-${i + 1}.${ext}`, import.meta.url));
        writeFileSync(file, code);
        try {
          const result = await run(file, { REDIS_URL: redis.url, OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, OPENAI_API_KEY: "test" });
          assert.equal(result.code, 0, result.out);
        } finally {
          rmSync(file, { force: true });
        }
      });
    }
  } finally {
    server.closeAllConnections();
    server.close();
    await redis.stop();
  }
});
