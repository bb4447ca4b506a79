// Numeric silence under drift (issue 26, item 7): a start-up time drifting +150 ms a "day" on
// [0, 10000] at epsilon 1 reaches a new grid point every ~2 days, and the cap (ln 81) pays for
// four. A refused new point is sent as the nearest paid one, so every report is sent, whatever
// the value; before, reports stopped once the cap was reached.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as core from "../dist/index.js";
import * as all from "../dist/all.js";
import {collectorLike, declarations, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";
import {fracToString} from "../dist/fraction.js";
import {parseMechanism} from "../dist/kinds.js";

test("all: a drifting number keeps being reported after the cap, as paid points", async (t) => {
  const startup = vectors.ceiling.doc.metrics.find((m) => m.name === "startup_ms");
  const c = collectorLike({metrics: [startup]});
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const devices = 12, days = 30;
  for (let device = 0; device < devices; device++) {
    const r = new all.Reporter(server.url, {store: new core.MemoryStore(), log: () => {},
                                            metrics: declarations({metrics: [startup]}), onePerPeriod: false});
    assert.equal(await r.waitReady(5000), true);
    const start = c.counted().length;
    for (let day = 0; day < days; day++) r.report("startup_ms", 400 * device + 150 * day);
    assert.equal(await r.close(5000), true);
    const sent = c.counted().slice(start);
    assert.equal(sent.length, days, `device ${device}: every day sent, none silent`);
    assert.ok(r.stats().capRefused > 0, "the cap was reached: the case is tested");
    // Only answers of paid points: at most four distinct grid points' bits, all 0 or 1.
    assert.ok(sent.every((x) => x.metric === "startup_ms" && (x.bit === 0 || x.bit === 1)));
  }
});

test("all: a drifting histogram value keeps being reported after the cap", async (t) => {
  const edges = Array.from({length: 21}, (_, i) => String(500 * i));
  const id = `ss:20:3:5837465777/2147483648:${all.domainTag(edges)}`;  // Python's choice at eps 1
  const m = parseMechanism(id);
  const entry = {name: "startup_h", description: "", kind: "histogram", edges, mechanism: id,
                 p1: fracToString(m.p1), q: fracToString(m.q), epsilon: m.epsilon,
                 memoization: "memoized", instantaneous: null, period: "day"};
  const c = collectorLike({metrics: [entry]});
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new all.Reporter(server.url, {store: new core.MemoryStore(), log: () => {},
                                          metrics: declarations({metrics: [entry]}), onePerPeriod: false});
  assert.equal(await r.waitReady(5000), true, JSON.stringify(r.stats()));
  for (let day = 0; day < 30; day++) r.report("startup_h", 1000 + 200 * day);  // 12 buckets
  assert.equal(await r.close(5000), true);
  assert.equal(c.counted().length, 30);  // every day, none silent
  assert.ok(r.stats().capRefused > 0, "the cap was reached: the case is tested");
});
