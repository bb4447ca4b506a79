// The shared vectors' `declarations` section (tests/vectors/generate.py, written through the
// Python client's resolve): for a declaration and a served catalogue, the mechanism each
// declared metric reports under, the served parts ignored (their count is ignoredServed), the
// declared floor, the policy and dimensions followed, and the served metrics never reported.
// deniable-client/all gets the same from a loopback collector serving that catalogue.
import assert from "node:assert/strict";
import {test} from "node:test";

import {MemoryStore, Reporter, UnknownMetricError} from "../dist/all.js";
import {collectorLike, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";

const cases = vectors.declarations;

/** A Dimensions as Python's Dimensions.describe() writes it. */
function describe(dims) {
  if (dims === undefined) return {};
  const doc = {dimensions: Object.fromEntries(dims.dimensions.map((d) =>
    [d.name, {values: [...d.values], other: d.other}]))};
  if (dims.combinations.length > 0) doc.combinations = dims.combinations.map((c) => [...c]);
  return doc;
}

if (cases === undefined) {
  test("declaration vectors", {skip: "tests/vectors/vectors.json has no 'declarations' " +
                               "section yet (the Python client's resolution)"}, () => undefined);
} else {
  // The web client does not choose a mechanism from an epsilon: a table declared by epsilon
  // declares here the mechanism Python chose for it, read from the case nothing is served in.
  const chosen = new Map();
  for (const c of cases) {
    if (c.catalogue.metrics.length > 0) continue;
    for (const [name, table] of Object.entries(c.declared)) {
      chosen.set(JSON.stringify(table), c.expect[name].mechanism);
    }
  }
  const web = (table) => {
    if (!("epsilon" in table)) return table;
    const {epsilon, ...rest} = table;
    const mechanism = chosen.get(JSON.stringify(table));
    assert.ok(mechanism, `no case declares ${JSON.stringify(table)} with nothing served`);
    return {...rest, mechanism};
  };

  test("declaration vectors: every case is checked", () => {
    assert.ok(cases.length >= 10);
    assert.ok(cases.some((c) => Object.values(c.expect).some((e) => e.ignored.length > 0)));
    assert.ok(cases.some((c) => c.undeclared.length > 0));
  });

  for (const c of cases) {
    test(`declaration vectors: ${c.about}`, async (t) => {
      const collector = collectorLike(c.catalogue);
      const server = await startServer(collector.answer);
      t.after(() => server.close());
      const lines = [];
      const metrics = Object.fromEntries(Object.entries(c.declared)
        .map(([name, table]) => [name, web(table)]));
      const r = new Reporter(server.url, {log: (line) => lines.push(line),
                                          store: new MemoryStore(), metrics,
                                          maxEpsilon: c.max_epsilon});
      assert.equal(await r.waitReady(5000), true);
      const stats = r.stats();
      for (const [name, want] of Object.entries(c.expect)) {
        assert.equal(r.metrics[name], want.mechanism ?? undefined, name);
        assert.equal(stats.ignoredServed[name], want.ignored.length || undefined, name);
        if (want.ignored.length > 0) {
          assert.ok(lines.some((l) => l.includes(`metric '${name}'`) &&
                               l.includes(`in ${want.ignored.join(", ")};`)), lines.join("\n"));
        }
        const mismatch = stats.mechanismMismatch[name];
        assert.equal(mismatch !== undefined && mismatch.using === mismatch.declared, want.floored,
                     name);
        const policy = r.core.declared.policies.get(name);  // internal: what the gate and memo follow
        assert.deepEqual([policy.memoization, policy.irr ?? null, policy.period],
                         [want.memoization, want.instantaneous, want.period]);
        assert.deepEqual(describe(r.dimensions[name]), want.dimensions, name);
      }
      for (const name of c.undeclared) {
        assert.throws(() => r.report(name, true), UnknownMetricError, name);
      }
      await r.close(1000);
    });
  }
}
