// Report order in a batch (issue 26, item 5): an answer already paid for used to be queued at
// once and a new one only after its asynchronous HMAC and ledger write, so "b before a" meant
// "a changed" (100 of 100 devices). Reports now leave in call order, new or not.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as core from "../dist/index.js";
import * as all from "../dist/all.js";
import {collectorLike, declarations, startServer} from "./helpers.js";

const rr = (name) => ({name, description: "", mechanism: "rr:1/2:1/2", p_yes_given_yes: "3/4",
                       p_yes_given_no: "1/4", epsilon: Math.log(3)});

for (const [entry, lib] of [["default", core], ["all", all]]) {
  test(`${entry}: reports leave in call order whether or not their answer is new`, async (t) => {
    const doc = {metrics: [rr("a"), rr("b"), rr("f")]};
    const c = collectorLike(doc);
    const server = await startServer(c.answer);
    t.after(() => server.close());
    const orders = {changed: new Set(), same: new Set()};
    for (let device = 0; device < 40; device++) {
      const r = new lib.Reporter(server.url, {store: new core.MemoryStore(), log: () => {},
                                              metrics: declarations(doc), onePerPeriod: false});
      assert.equal(await r.waitReady(5000), true);
      const before = device % 4 < 2;
      r.report("a", before);
      r.report("b", true);
      assert.equal(await r.flush(5000), true);       // both answers paid for now
      const changed = device % 2 === 0;
      const start = c.counted().length;
      r.report("a", changed ? !before : before);    // new answer iff changed
      r.report("b", true);                          // paid for
      r.report("f", device % 3 === 0);              // paid or not, after both
      r.report("b", true);
      assert.equal(await r.close(5000), true);
      const sent = c.counted().slice(start).map((x) => x.metric);
      (changed ? orders.changed : orders.same).add(sent.join(","));
    }
    // Exactly one order, the call order, for changed and unchanged devices alike: the order
    // says nothing of which answers were new (deterministic: no tolerance to state).
    assert.deepEqual([...orders.changed], ["a,b,f,b"]);
    assert.deepEqual([...orders.same], ["a,b,f,b"]);
  });
}

test("all: categorical and numeric reports keep their call order too", async (t) => {
  const {vectors} = await import("./vectors.js");
  const served = vectors.ceiling.doc.metrics.filter((m) => ["os", "startup_ms"].includes(m.name));
  const doc = {metrics: [...served, rr("b")]};
  const c = collectorLike(doc);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const orders = new Set();
  for (let device = 0; device < 24; device++) {
    const r = new all.Reporter(server.url, {store: new core.MemoryStore(), log: () => {},
                                            metrics: declarations(doc), onePerPeriod: false});
    assert.equal(await r.waitReady(5000), true);
    r.report("os", "ios");
    r.report("startup_ms", 500);
    r.report("b", true);
    assert.equal(await r.flush(5000), true);
    const start = c.counted().length;
    r.report("os", device % 2 === 0 ? "linux" : "ios");          // new answer or not
    r.report("startup_ms", device % 3 === 0 ? 9000 : 500);       // new grid point or not
    r.report("b", true);                                         // paid for
    assert.equal(await r.close(5000), true);
    orders.add(c.counted().slice(start).map((x) => x.metric).join(","));
  }
  assert.deepEqual([...orders], ["os,startup_ms,b"]);
});
