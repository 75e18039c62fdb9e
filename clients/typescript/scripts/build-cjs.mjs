// The CommonJS build (dist/cjs): the ESM sources bundled by esbuild into one
// CommonJS file, ioredis left a dependency, beside the declarations tsc
// wrote for the ESM build (under a package.json of type commonjs, so
// TypeScript reads them as CommonJS). Run by `npm run build`, after tsc.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { URL } from "node:url";

const out = new URL("../dist/cjs/", import.meta.url);
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [new URL("../src/index.ts", import.meta.url).pathname],
  outfile: new URL("index.js", out).pathname,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  packages: "external",
  // library() finds library.lua beside dist/ from its own file's URL
  define: { "import.meta.url": "__fleetGovernorUrl" },
  banner: { js: 'const __fleetGovernorUrl = require("node:url").pathToFileURL(__filename).href;' },
  logLevel: "warning",
});
const types = new URL("../dist/src/", import.meta.url);
for (const name of readdirSync(types)) if (name.endsWith(".d.ts")) copyFileSync(new URL(name, types), new URL(name, out));
writeFileSync(new URL("package.json", out), '{ "type": "commonjs" }\n');
