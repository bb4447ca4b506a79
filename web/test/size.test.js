// The default entry's size budget (issue 27): what a page ships for
// `import {Reporter} from "deniable-client"`, bundled, minified and gzipped, stays within
// 12 KiB. Deterministic for a given esbuild (package-lock.json): no tolerance to state.
import assert from "node:assert/strict";
import {test} from "node:test";

import {BUDGET, bundleSize} from "../bench/size.mjs";

test("the default entry's Reporter stays within its 12 KiB gzipped budget", async () => {
  const {gzipped} = await bundleSize('export {Reporter} from "./src/index.ts";');
  assert.ok(gzipped <= BUDGET, `${gzipped} B gzipped > ${BUDGET} B`);
  // deniable-client/all carries every kind: far larger, and not under this budget.
  const all = await bundleSize('export {Reporter} from "./src/all.ts";');
  assert.ok(all.gzipped > gzipped);
});
