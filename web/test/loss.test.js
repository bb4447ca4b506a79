// privacyLoss (issue 27's gap): what a metric's reports reveal, as Python's PrivacyLoss, checked
// against the shared vectors for every kind, memoized and fresh; then through the Reporter.
import assert from "node:assert/strict";
import {test} from "node:test";

import {MemoryStore, PrivacyLoss, Reporter, UnknownMetricError} from "../dist/all.js";
import {CATALOGUE, collectorLike, declarations, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";
import {fracToString} from "../dist/fraction.js";
import {parseMechanism} from "../dist/kinds.js";

const close = (a, b) => (a === null || b === null ? a === b
  : Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(b)));

test("privacy_loss vectors: every kind, memoized and fresh, as Python states them", () => {
  const families = new Set();
  for (const v of vectors.privacy_loss) {
    if (v.instantaneous) continue;  // with an instantaneous layer: irr.test.js
    const m = parseMechanism(v.mechanism);
    families.add(v.mechanism.split(":")[0]);
    const loss = new PrivacyLoss("m", m, v.memoized);
    assert.ok(close(loss.oneReportEpsilon, v.one_report_epsilon), v.mechanism);
    assert.ok(close(loss.longRunEpsilon, v.long_run_epsilon), v.mechanism);
    assert.ok(close(loss.costPerNewValue, v.cost_per_new_value), v.mechanism);
    assert.equal(loss.pAnswersDiffer === null ? null : fracToString(loss.pAnswersDiffer),
                 v.p_answers_differ, v.mechanism);
    v.after.forEach((x, n) => assert.ok(close(loss.after(n), x), `${v.mechanism} after ${n}`));
    if (v.memoized) assert.match(loss.valueChange, /No epsilon bounds this/);
    else assert.equal(loss.valueChange, v.value_change);
  }
  assert.deepEqual([...families].sort(), ["bm", "grr", "oue", "rr", "ss"]);
});

test("Reporter.privacyLoss follows the declared mechanism, then the served one, and fresh", async (t) => {
  // dark_mode is declared under rr:3/4:1/2 (ln 7); the collector serves rr:1/2:1/2 (ln 3): the
  // same question at a smaller epsilon, which the Reporter takes once served.
  const served = {metrics: CATALOGUE.metrics.map((e) => (e.name !== "dark_mode" ? e
    : {...e, mechanism: "rr:1/2:1/2", p_yes_given_yes: "3/4", p_yes_given_no: "1/4",
       epsilon: Math.log(3)}))};
  const c = collectorLike(served);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {log: () => undefined, store: new MemoryStore(),
                                      metrics: declarations(CATALOGUE),
                                      fresh: ["feature_x_enabled"]});
  const declared = r.privacyLoss("dark_mode");       // at once: rr:3/4:1/2, P1 7/8, Q 1/8, ln 7
  assert.equal(fracToString(declared.pAnswersDiffer), "25/32");
  assert.ok(close(declared.longRunEpsilon, Math.log(7)) && declared.after(5) === declared.longRunEpsilon);
  assert.equal(await r.waitReady(5000), true);
  const dark = r.privacyLoss("dark_mode");           // served rr:1/2:1/2: P1 3/4, Q 1/4, ln 3
  assert.equal(fracToString(dark.pAnswersDiffer), "5/8");
  assert.ok(close(dark.longRunEpsilon, Math.log(3)) && dark.after(5) === dark.longRunEpsilon);
  const x = r.privacyLoss("feature_x_enabled");       // fresh: n reports, n times ln 3
  assert.equal(x.pAnswersDiffer, null);
  assert.ok(close(x.after(3), 3 * Math.log(3)));
  assert.throws(() => r.privacyLoss("no_such_metric"), UnknownMetricError);
  await r.close(1000);
  assert.equal(CATALOGUE.metrics.length, 2);
});
