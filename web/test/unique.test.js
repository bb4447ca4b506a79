// Memoized answers are not device identifiers (issue 26, item 3), in the web client: the unique
// share of each mechanism as Python computes it (shared vectors), and a served mechanism whose
// memoized answer would single the device out is withheld, whatever the value.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as core from "../dist/index.js";
import * as all from "../dist/all.js";
import {collectorLike, declarations, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";
import {fracToString} from "../dist/fraction.js";
import {parseMechanism} from "../dist/kinds.js";
import {identifying, uniqueShare} from "../dist/unique.js";

test("unique share vectors: every mechanism's share and decision, as Python's", () => {
  assert.ok(vectors.unique_share.length > 100);
  assert.ok(vectors.unique_share.some((v) => v.identifying) &&
            vectors.unique_share.some((v) => !v.identifying));
  for (const v of vectors.unique_share) {
    const m = parseMechanism(v.mechanism);
    const share = uniqueShare(m);
    // Floats summed in another order: agree to 1e-9 relative (or 1e-300 absolute near 0).
    assert.ok(Math.abs(share - v.share) <= 1e-9 * v.share + 1e-300, `${v.mechanism}: ${share}`);
    assert.equal(identifying(m) !== undefined, v.identifying, v.mechanism);
  }
});

test("all: a served identifying mechanism is withheld for every value; fresh is not", async (t) => {
  const oue = vectors.unique_share.find((v) => v.mechanism.startsWith("oue:64:") && v.identifying);
  const ok = vectors.unique_share.find((v) => v.mechanism.startsWith("ss:64:2:") && !v.identifying);
  const labels = Array.from({length: 64}, (_, i) => `c${i}`);
  const tag = all.domainTag(labels);
  const entry = (name, vectorId) => {
    const id = vectorId.replace(/:[0-9a-f]{8}$/, `:${tag}`);  // the share ignores the tag
    const m = parseMechanism(id);
    return {name, description: "", kind: "categorical", categories: labels, mechanism: id,
            p1: fracToString(m.p1), q: fracToString(m.q), epsilon: m.epsilon,
            memoization: "memoized", instantaneous: null, period: "day"};
  };
  // The app declares each metric under the non-identifying mechanism; the collector serves
  // "wide" under OUE, the same question at a smaller epsilon (0.4999999994 < 0.4999999999),
  // which the declaration lets it choose (as Python's test): then withheld, as identifying.
  const declared = {wide: entry("wide", ok.mechanism), narrow: entry("narrow", ok.mechanism),
                    fresh_wide: entry("fresh_wide", oue.mechanism)};
  const c = collectorLike({metrics: [entry("wide", oue.mechanism), entry("narrow", ok.mechanism),
                                     entry("fresh_wide", oue.mechanism)]});
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const lines = [];
  const r = new all.Reporter(server.url, {store: new core.MemoryStore(), log: (l) => lines.push(l),
                                          metrics: declarations({metrics: Object.values(declared)}),
                                          fresh: ["fresh_wide"]});
  assert.equal(await r.waitReady(5000), true);
  const names = Object.keys(r.metrics ?? {});
  assert.ok(!names.includes("wide") && names.includes("narrow") && names.includes("fresh_wide"),
            `${names} ${lines.join("\n")}`);
  assert.equal(r.stats().mechanismMismatch.wide.using, entry("wide", oue.mechanism).mechanism);
  for (const value of ["c0", "c5", "c63"]) r.report("wide", value);  // counted, never sent
  r.report("narrow", "c5");
  assert.equal(await r.close(5000), true);
  assert.equal(r.stats().withheld, 3);
  assert.match(r.stats().withheldMetrics.wide, /single this device out/);
  assert.deepEqual(c.counted().map((x) => x.metric), ["narrow"]);
});
