/** The Node client stores a config, and estimates a request, exactly as the Python client does. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { resolveConfig, scriptFields, type GovernorConfig } from "../src/config.js";
import { CONFIG_SAMPLES, ESTIMATE_SAMPLES } from "../src/generated.js";
import { estimateRequest } from "../src/fetch.js";

for (const [i, sample] of CONFIG_SAMPLES.entries()) {
  test(`sample ${i + 1}: init's config pairs are the Python client's`, () => {
    const options = JSON.parse(JSON.stringify(sample.options)) as GovernorConfig;
    assert.deepEqual(scriptFields(resolveConfig(options)), [...sample.pairs]);
  });
}

for (const [i, sample] of ESTIMATE_SAMPLES.entries()) {
  test(`estimate ${i + 1} (${sample.path}): the tokens the Python client reserves`, () => {
    const got = estimateRequest(sample.body, sample.path);
    assert.deepEqual([got.input, got.output], [...sample.tokens]);
  });
}
