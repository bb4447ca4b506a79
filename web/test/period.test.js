// The period gate (issue 27): at most one report per metric per UTC period, the first, kept in
// the store across restarts and shared by reporters (tabs) of one store. The shared vectors
// (Python's PeriodGate) first, then Reporters on a loopback collector with a simulated clock.
import assert from "node:assert/strict";
import {mkdtempSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {MemoryStore, Reporter, StoreSecret} from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";
import {CATALOGUE, collectorLike, declarations, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";
import {PeriodGate, periodIndex} from "../dist/period.js";

const DAY = 86_400_000;

test("period vectors: indexes of hours, days and ISO weeks, as Python counts them", () => {
  assert.ok(vectors.periods.indexes.length > 60);
  for (const v of vectors.periods.indexes) {
    assert.equal(periodIndex(v.period, v.ms), v.index, `${v.period} of ${v.ms}`);
  }
});

test("period vectors: which call of a period is sent, across restarts, as Python's gate", async () => {
  const store = new MemoryStore();
  let now = 0;
  let gate = new PeriodGate(store, () => now);
  const admitted = [];
  for (const v of vectors.periods.sequence) {
    if (v.restart) {
      gate = new PeriodGate(store, () => now);
      await gate.load();
    }
    now = v.ms;
    gate.periods.set(v.metric, v.period);  // as the Reporter sets each declared period
    const claim = gate.admit(v.metric);
    admitted.push(claim === false ? false : await claim);
  }
  assert.deepEqual(admitted, vectors.periods.sequence.map((v) => v.admitted));
  assert.ok(admitted.some((a) => a) && admitted.some((a) => !a));
  assert.equal(gate.skipped + admitted.filter((a) => a).length > 0, true);
});

async function collector(doc = CATALOGUE) {
  const c = collectorLike(doc);
  const server = await startServer(c.answer);
  return {server, counted: c.counted};
}

test("a Reporter sends the first call of each day; restarts and a second tab do not reset it",
     async (t) => {
  const {server, counted} = await collector();
  t.after(() => server.close());
  const dir = mkdtempSync(join(tmpdir(), "deniable-period-"));
  let now = Date.UTC(2026, 10, 26, 9);  // a Thursday, 09:00 UTC
  const opts = {log: () => undefined, metrics: declarations(CATALOGUE), clock: () => now,
                ...nodeStorage(dir)};
  const run = async () => {
    const r = new Reporter(server.url, opts);
    assert.equal(await r.waitReady(5000), true);
    for (let i = 0; i < 3; i++) r.report("dark_mode", i % 2 === 0);
    assert.equal(await r.close(5000), true);
    return r.stats().periodSkipped;
  };
  assert.equal(await run(), 2);
  now += 6 * 3_600_000;               // 15:00, same day: a restart sends nothing
  assert.equal(await run(), 3);
  assert.equal(counted().length, 1);
  now += 9 * 3_600_000;               // 00:00 UTC the next day: one more
  assert.equal(await run(), 2);
  assert.equal(counted().length, 2);
  // Two reporters (tabs) on one store: the first claim wins, the other is skipped.
  const store = new MemoryStore();
  const tab = {log: () => undefined, metrics: declarations(CATALOGUE), clock: () => now, store,
               secret: new StoreSecret(store)};
  const [a, b] = [new Reporter(server.url, tab), new Reporter(server.url, tab)];
  for (const r of [a, b]) assert.equal(await r.waitReady(5000), true);
  a.report("feature_x_enabled", true);
  b.report("feature_x_enabled", false);
  for (const r of [a, b]) assert.equal(await r.close(5000), true);
  assert.equal(counted().filter((x) => x.metric === "feature_x_enabled").length, 1);
  assert.equal(a.stats().periodSkipped + b.stats().periodSkipped, 1);
});

test("the period is the declared one: an hourly metric sends once an hour, whatever is served",
     async (t) => {
  const declared = structuredClone(CATALOGUE);
  declared.metrics[0].period = "hour";     // feature_x_enabled hourly, dark_mode weekly
  declared.metrics[1].period = "week";
  const served = structuredClone(CATALOGUE);
  served.metrics[0].period = "week";       // the collector says otherwise: ignored
  served.metrics[1].period = "hour";
  const {server, counted} = await collector(served);
  t.after(() => server.close());
  let now = Date.UTC(2026, 10, 22, 23, 30);  // Sunday 23:30 UTC
  const r = new Reporter(server.url, {log: () => undefined, clock: () => now,
                                      metrics: declarations(declared), store: new MemoryStore()});
  assert.equal(await r.waitReady(5000), true);
  assert.deepEqual(r.stats().ignoredServed, {feature_x_enabled: 1, dark_mode: 1});
  for (let step = 0; step < 6; step++) {   // 23:30, 00:00 (Monday: a new ISO week), 00:30, ...
    for (let i = 0; i < 4; i++) {
      r.report("feature_x_enabled", true);
      r.report("dark_mode", true);
    }
    assert.equal(await r.flush(5000), true);
    now += 1_800_000;
  }
  const sent = (m) => counted().filter((x) => x.metric === m).length;
  assert.equal(sent("feature_x_enabled"), 4);  // hours 23, 0, 1, 2
  assert.equal(sent("dark_mode"), 2);          // weeks of Sunday and of Monday
  assert.equal(r.stats().periodSkipped, 6 * 8 - 6);
  await r.close(1000);
});
