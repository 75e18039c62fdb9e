/** The Node client's config is stored exactly as the Python client stores the same config. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { resolveConfig, scriptFields, type GovernorConfig } from "../src/config.js";
import { CONFIG_SAMPLES } from "../src/generated.js";

for (const [i, sample] of CONFIG_SAMPLES.entries()) {
  test(`sample ${i + 1}: init's config pairs are the Python client's`, () => {
    const options = JSON.parse(JSON.stringify(sample.options)) as GovernorConfig;
    assert.deepEqual(scriptFields(resolveConfig(options)), [...sample.pairs]);
  });
}
