// Open metrics (kind "open", od:) through deniable-client/all's Reporter against a loopback
// collector: always fresh (no memo: a declared memoization is refused), the wire field "cell",
// refusals, past the budget every value dropped alike, and the declaration's max_bytes.
import assert from "node:assert/strict";
import {test} from "node:test";

import {InvalidParameterError, MemoryStore, OpenDomainSketch, Reporter} from "../dist/all.js";
import {collectorLike, startServer} from "./helpers.js";
import {importSecret} from "../dist/memo.js";
import {normalise} from "../dist/open.js";
import {encodeBatch} from "../dist/wire.js";

const quiet = {log: () => undefined, onePerPeriod: false};
const ID = "od:8:1:64:3:1/2";  // epsilon = ln 2, under the default ceiling ln 9
const sketch = OpenDomainSketch.fromId(ID);
const DOC = {metrics: [{name: "crash_sig", description: "", kind: "open", mechanism: ID,
                        max_bytes: 8, p1: "1/2", q: "1/4", epsilon: sketch.epsilon,
                        memoization: "fresh", instantaneous: null, period: "day"}]};
const DECLARED = {crash_sig: {kind: "open", mechanism: ID, max_bytes: 8}};
const SECRET = new Uint8Array(32).map((_, i) => 3 * i + 5);
const fixedSecret = () => ({load: () => importSecret(SECRET)});

async function run(options, calls) {
  const c = collectorLike(DOC);
  const server = await startServer(c.answer);
  const store = new MemoryStore();
  try {
    const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store,
                                        secret: fixedSecret(), ...options});
    assert.equal(await r.waitReady(5000), true);
    for (const value of calls) r.report("crash_sig", value);
    assert.equal(await r.flush(5000), true);
    const stats = r.stats();
    await r.close();
    return {sent: c.counted(), stats, ledger: JSON.stringify(await store.get("ledger") ?? {})};
  } finally {
    await server.close();
  }
}

test("an open metric is always fresh: one string's reports are independent draws", async () => {
  // No fresh option, no declared policy: fresh all the same.
  const {sent, ledger} = await run({}, Array(40).fill("crash:m1"));
  assert.equal(sent.length, 40);
  for (const x of sent) {
    assert.deepEqual(Object.keys(x), ["metric", "mechanism", "cell"]);
    assert.equal(x.mechanism, ID);
    assert.ok(Number.isInteger(x.cell) && x.cell >= 0 && x.cell < sketch.cells);
  }
  // A memo would repeat one cell 40 times. Fresh: two draws agree with probability
  // (p^2 + 2 q^2) / (levels seeds) = 3/4096, so all 40 equal has probability < 1e-100.
  assert.ok(new Set(sent.map((x) => x.cell)).size > 1);
  assert.ok(!ledger.includes("crash"), ledger);  // nothing per string in the ledger
  assert.equal(encodeBatch("0".repeat(32), [["crash_sig", ID, 7]]),
               `{"batch_id":"${"0".repeat(32)}","reports":[{"metric":"crash_sig",` +
               `"mechanism":"${ID}","cell":7}]}`);
});

test("a table declaring a memoized or layered open metric is refused, naming the field", () => {
  for (const [extra, field] of [[{memoization: "memoized"}, "memoization"],
                                [{memoization: "instantaneous", instantaneous: "rr:3/4:1/4"},
                                 "memoization"],
                                [{instantaneous: "rr:3/4:1/4"}, "instantaneous"]]) {
    assert.throws(() => new Reporter("http://127.0.0.1:9", {
      ...quiet, metrics: {crash_sig: {...DECLARED.crash_sig, ...extra}}}),
                  (e) => e instanceof InvalidParameterError &&
                    e.message.includes(`${field}: an open metric always draws fresh coins`),
                  JSON.stringify(extra));
  }
  const ok = new Reporter("http://127.0.0.1:9", {
    ...quiet, store: new MemoryStore(),
    metrics: {crash_sig: {...DECLARED.crash_sig, memoization: "fresh"}}});
  assert.equal(ok.privacyLoss("crash_sig").pAnswersDiffer, null);
  return ok.close();
});

test("a value the metric does not take throws, never shows it, and queues nothing", async () => {
  const c = collectorLike(DOC);
  const server = await startServer(c.answer);
  try {
    const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store: new MemoryStore(),
                                        secret: fixedSecret()});
    assert.equal(await r.waitReady(5000), true);
    for (const bad of ["much-too-long-value", "", "a\u0000b", 42, null]) {
      assert.throws(() => r.report("crash_sig", bad), (e) => e instanceof InvalidParameterError &&
                    !e.message.includes("much-too-long"), JSON.stringify(bad));
    }
    assert.equal(await r.flush(5000), true);
    await r.close();
    assert.equal(c.counted().length, 0);
  } finally {
    await server.close();
  }
});

test("past the budget, a new and an already-reported string are dropped alike", async () => {
  // ln 2 a report, a budget of 2.5 reports: two sent, then every value refused the same way.
  const budgets = {crash_sig: {epsilon: 2.5 * sketch.epsilon, period: 1e9}};
  const {sent, stats} = await run({budgets}, ["first", "second", "first", "third", "second"]);
  assert.equal(sent.length, 2);
  assert.equal(stats.budgetRefused, 3);
});

test("max_bytes in a declaration must match the id's, and clamp declares a cut", () => {
  assert.throws(() => new Reporter("http://127.0.0.1:9", {
    ...quiet, metrics: {crash_sig: {kind: "open", mechanism: ID, max_bytes: 16}}}),
                InvalidParameterError);
  assert.throws(() => new Reporter("http://127.0.0.1:9", {
    ...quiet, metrics: {crash_sig: {kind: "open", mechanism: ID, categories: ["a", "b"]}}}),
                InvalidParameterError);
  const ok = new Reporter("http://127.0.0.1:9", {
    ...quiet, store: new MemoryStore(),
    metrics: {crash_sig: {kind: "open", mechanism: ID, max_bytes: 8, clamp: true},
              bare: ID}});
  return ok.close();
});

test("privacyLoss: P(two strings' answers differ) is at most the stated figure, reached " +
     "when no bucket collides", async () => {
  const {add, cmp, frac, mul, sub} = await import("../dist/fraction.js");
  const {PrivacyLoss} = await import("../dist/all.js");
  for (const id of [ID, "od:1:1:1:3:2/3", "od:2:1:2:4:1/2"]) {
    const m = OpenDomainSketch.fromId(id);
    const stated = new PrivacyLoss("s", m, true).pAnswersDiffer;
    const strings = ["a", "b", "c", "d", "e", "f", "g", "h"].map((s) => normalise(s, m.maxBytes));
    let reached = false;
    for (const a of strings) {
      for (const b of strings) {
        if (a === b) continue;
        let agree = frac(0n);
        for (let cell = 0; cell < m.cells; cell++) {
          agree = add(agree, mul(m.reportProbability(a, cell), m.reportProbability(b, cell)));
        }
        const differ = sub(frac(1n), agree);
        assert.ok(cmp(differ, stated) <= 0, `${id}: a pair differs more than stated`);
        reached ||= cmp(differ, stated) === 0;
      }
    }
    if (m.levels * m.seeds === 1) assert.ok(reached, `${id}: some pair of 8 reaches the figure`);
  }
});

test("an open metric declared weekly sends one report per week: the first, whatever the value", async () => {
  // Thursday 2026-11-26 12:00 UTC, then Sunday 23:00 (the same ISO week), then Monday 00:00.
  const thursday = Date.UTC(2026, 10, 26, 12);
  const times = [thursday, thursday, Date.UTC(2026, 10, 29, 23), Date.UTC(2026, 10, 30, 0)];
  let now = 0;
  const weekly = {crash_sig: {...DECLARED.crash_sig, period: "week"}};
  const c = collectorLike(DOC);
  const server = await startServer(c.answer);
  try {
    const r = new Reporter(server.url, {log: () => undefined, metrics: weekly, store: new MemoryStore(),
                                        secret: fixedSecret(), clock: () => times[now]});
    assert.equal(await r.waitReady(5000), true);
    for (const [i, value] of ["crash:m1", "other", "crash:m1", "crash:m2"].entries()) {
      now = i;
      r.report("crash_sig", value);
      await r.flush(5000);
    }
    assert.equal(r.stats().periodSkipped, 2);  // the Thursday and Sunday calls after the first
    await r.close();
    assert.equal(c.counted().length, 2);  // the week's first, and the next week's
  } finally {
    await server.close();
  }
});
