// The epsilon ceiling (maxEpsilon) and the cap over versions (maxMetricEpsilon) of issue 19, in
// both entries: the shared vectors (Python's decisions), then Reporters against a loopback
// collector that serves a huge epsilon and then publishes version after version.
import assert from "node:assert/strict";
import {mkdirSync, mkdtempSync, readFileSync, writeFileSync} from "node:fs";
import {createServer} from "node:http";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import * as core from "../dist/index.js";
import * as all from "../dist/all.js";
import {nodeStorage} from "../dist/node.js";
import {collectorLike, declarations, sleep, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";
import {declareCatalogue, parseCatalogue} from "../dist/catalogue.js";
import {fracToString} from "../dist/fraction.js";
import {parseMechanism} from "../dist/kinds.js";
import {importSecret} from "../dist/memo.js";
import {aboveCeiling, spend} from "../dist/privacy.js";
import {ledgerTag} from "../dist/tags.js";

const {InvalidParameterError, MemoryStore} = core;
const number = (x) => (x === "inf" ? Infinity : x);

test("ceiling vectors: every kind, every max_epsilon, as Python decides", () => {
  assert.ok(vectors.ceiling.decisions.length > 100);
  assert.ok(vectors.ceiling.decisions.some((v) => v.above) &&
            vectors.ceiling.decisions.some((v) => !v.above));
  for (const v of vectors.ceiling.decisions) {
    const m = parseMechanism(v.mechanism);
    assert.equal(aboveCeiling(m.likelihoodRatio, number(v.max_epsilon)), v.above,
                 `${v.mechanism} at ${v.max_epsilon}`);
  }
});

test("cap vectors: charges and refusals, as the Python ledger decides", () => {
  for (const sequence of vectors.cap) {
    const ledger = {};
    const cap = number(sequence.max_metric_epsilon);
    for (const c of sequence.charges) {
      const s = spend(ledger, c.metric, c.tag, c.epsilon, cap, true);
      const expected = c.charged === "refused" ? 2 : c.charged === 0 ? 0 : 1;
      assert.equal(s, expected, `${JSON.stringify(c)} under ${cap}`);
    }
  }
});

test("cap substitution vectors: past the cap, the payloads Python's guard sends (issue 26)", async (t) => {
  // Each case: a device secret, a cap, and reports of one memoized metric; a value refused a
  // new answer is sent as a paid one (the other boolean value, the lowest paid category), or
  // nothing for every value while none is paid. Both entries for a boolean; all for a category.
  assert.ok(vectors.cap_substitute.some((c) => c.reports.some((r) => r.sent === null)));
  for (const c of vectors.cap_substitute) {
    const boolean = c.metric.mechanism.startsWith("rr:");
    for (const lib of boolean ? [core, all] : [all]) {
      const doc = {metrics: [c.metric]};
      const {server, counted} = await collector(doc);
      t.after(() => server.close());
      const dir = mkdtempSync(join(tmpdir(), "deniable-subst-"));
      mkdirSync(join(dir, "privacy"), {mode: 0o700});
      writeFileSync(join(dir, "privacy", "secret"), Buffer.from(c.secret, "hex"), {mode: 0o600});
      const r = new lib.Reporter(server.url, {onePerPeriod: false, log: () => undefined, ...nodeStorage(dir),
                                              maxMetricEpsilon: c.max_metric_epsilon,
                                              metrics: declarations(doc)});
      for (const report of c.reports) r.report(c.metric.name, report.value);
      assert.equal(await r.close(5000), true);
      const sent = counted().map((x) => (boolean ? x.bit : x.index));
      const what = `${c.metric.mechanism} at ${c.max_metric_epsilon}`;
      assert.deepEqual(sent, c.reports.filter((x) => x.sent !== null).map((x) => x.sent), what);
      assert.equal(r.stats().capRefused, c.cap_refused, what);
    }
  }
});

/** A collector whose catalogue the test replaces (`serve`), counting each batch id once. */
async function collector(doc) {
  let current = doc;
  const c = collectorLike();
  const server = await startServer((req, body) =>
    req.method === "GET" ? [200, {}, JSON.stringify(current)] : c.answer(req, body));
  return {server, counted: c.counted, serve: (next) => { current = next; }};
}

const booleanDoc = (name, mechanism) => {
  const m = core.RandomizedResponse.fromId(mechanism);
  return {metrics: [{name, description: "", mechanism, p_yes_given_yes: fracToString(m.pYesGivenYes),
                     p_yes_given_no: fracToString(m.pYesGivenNo), epsilon: m.epsilon}]};
};

async function until(condition, what) {
  for (let i = 0; i < 500 && !condition(); i++) await sleep(10);
  assert.ok(condition(), what);
}

for (const [entry, lib] of [["default", core], ["all", all]]) {
  test(`${entry}: a served catalogue above the ceiling is ignored: the declared mechanisms report`,
       async (t) => {
    const doc = entry === "all" ? vectors.ceiling.doc : {metrics: vectors.ceiling.doc.metrics
      .filter((m) => m.kind === "boolean")};
    const {server, counted} = await collector(doc);
    t.after(() => server.close());
    const lines = [];
    const served = Object.fromEntries(doc.metrics.map((m) => [m.name, m]));
    // The app declares each metric at an epsilon of its own (the same question); the usable
    // ones as served, exactly at the ceiling (ln 9) included.
    const metrics = {...declarations(doc, vectors.ceiling.usable), huge: "rr:1/2:1/2"};
    if (entry === "all") {
      metrics.os_huge = {...metrics.os};
      metrics.crashes_huge = {kind: "histogram", edges: served.crashes_huge.edges,
                              mechanism: "grr:5:1/2:b780497b"};
      metrics.startup_huge = {...metrics.startup_ms};
    }
    const r = new lib.Reporter(server.url, {onePerPeriod: false, log: (l) => lines.push(l), store: new MemoryStore(),
                                            refreshInterval: 20, metrics});
    const declared = r.metrics;
    assert.equal(await r.waitReady(5000), true);
    const values = {huge: true, at_ceiling: true, dark_mode: false, os_huge: "ios", os: "ios",
                    crashes_huge: 3, startup_huge: 812.5, startup_ms: 812.5};
    const names = doc.metrics.map((m) => m.name);
    for (let i = 0; i < 10; i++) for (const name of names) r.report(name, values[name]);
    await sleep(100);  // several refreshes: each ignored metric is still said once
    assert.equal(await r.close(5000), true);
    const huge = vectors.ceiling.withheld.filter((n) => names.includes(n));
    assert.deepEqual(r.metrics, declared);
    assert.equal(r.stats().withheld, 0);
    assert.deepEqual(r.stats().ignoredServed, Object.fromEntries(huge.map((n) => [n, 1])));
    const sent = counted();
    assert.equal(sent.length, 10 * names.length);
    for (const x of sent) assert.equal(x.mechanism, declared[x.metric], x.metric);
    for (const name of huge) {
      assert.equal(lines.filter((l) => l.includes(`'${name}'`)).length, 1, name);
      assert.ok(lines.some((l) => l.includes(`'${name}'`) && /in mechanism;/.test(l)), name);
    }
  });

  test(`${entry}: a declared metric above the ceiling throws; at it, it does not`, async () => {
    const opts = {log: () => undefined, onePerPeriod: false, store: new MemoryStore(), flushOnHide: false};
    const url = "http://127.0.0.1:9";
    assert.throws(() => new lib.Reporter(url, {...opts, metrics: {m: "rr:999999999/1000000000:1/2"}}),
                  (e) => e instanceof InvalidParameterError && /above maxEpsilon/.test(e.message));
    assert.throws(() => new lib.Reporter(url, {...opts, metrics: {m: "rr:1/2:1/2"},
                                               maxEpsilon: Math.log(2.9)}), InvalidParameterError);
    for (const bad of [0, -1, NaN, "2"]) {
      assert.throws(() => new lib.Reporter(url, {...opts, maxEpsilon: bad}), InvalidParameterError);
      assert.throws(() => new lib.Reporter(url, {...opts, maxMetricEpsilon: bad}), InvalidParameterError);
    }
    const ok = [new lib.Reporter(url, {...opts, metrics: {m: "rr:4/5:1/2"}}),
                new lib.Reporter(url, {...opts, metrics: {m: "rr:1/2:1/2"}, maxEpsilon: Math.log(3)}),
                new lib.Reporter(url, {...opts, metrics: {m: "rr:999999999/1000000000:1/2"},
                                       maxEpsilon: Infinity})];
    if (entry === "all") {
      const served = vectors.ceiling.doc.metrics.find((m) => m.name === "os_huge");
      const spec = {kind: "categorical", categories: served.categories, mechanism: served.mechanism};
      assert.throws(() => new lib.Reporter(url, {...opts, metrics: {c: spec}}),
                    (e) => e instanceof InvalidParameterError && /above maxEpsilon/.test(e.message));
      ok.push(new lib.Reporter(url, {...opts, metrics: {c: spec}, maxEpsilon: served.epsilon}));
    }
    for (const r of ok) await r.close(10);
  });

  test(`${entry}: the cap over versions stops new answers, keeps paid ones, persists`, async (t) => {
    // Versions at ln 3 (ratio 3): v1 and v2 both answers = 4 ln 3 = ln 81, the default cap.
    const [v1, v2, v3] = ["rr:1/2:1/2", "rr:1/3:1/4", "rr:1/3:1/2"];
    const {server, counted, serve} = await collector(booleanDoc("m", v1));
    t.after(() => server.close());
    const dir = mkdtempSync(join(tmpdir(), "deniable-cap-"));
    const lines = [];
    const opts = {onePerPeriod: false, log: (l) => lines.push(l), refreshInterval: 20, ...nodeStorage(dir),
                  metrics: {m: v1}};
    const r = new lib.Reporter(server.url, opts);
    const version = async (reporter, id) => {
      serve(booleanDoc("m", id));
      await until(() => reporter.metrics?.m === id, `serving ${id}`);
    };
    await version(r, v1);
    for (const v of [true, false, true]) r.report("m", v);   // two new answers
    assert.equal(await r.flush(5000), true);
    await version(r, v2);
    for (const v of [true, false]) r.report("m", v);          // two more: the cap, exactly
    assert.equal(await r.flush(5000), true);
    await version(r, v3);
    for (const v of [true, false, true]) r.report("m", v);   // refused: past the cap
    assert.equal(await r.flush(5000), true);
    assert.equal(r.stats().capRefused, 3);
    await version(r, v1);
    for (const v of [false, true]) r.report("m", v);          // paid for: still sent
    assert.equal(await r.close(5000), true);
    assert.deepEqual(counted().map((x) => x.mechanism), [v1, v1, v1, v2, v2, v1, v1]);
    assert.equal(lines.filter((l) => l.includes("is past its cap")).length, 1, lines.join("\n"));
    const ledger = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8")).ledger;
    assert.deepEqual(ledger.m.paid.length, 4);
    // A restart (a new Reporter on the same directory) keeps the ledger.
    serve(booleanDoc("m", v3));
    const again = new lib.Reporter(server.url, opts);
    await version(again, v3);
    again.report("m", true);
    await version(again, v2);
    again.report("m", false);
    assert.equal(await again.close(5000), true);
    assert.equal(again.stats().capRefused, 1);
    assert.deepEqual(counted().map((x) => x.mechanism), [v1, v1, v1, v2, v2, v1, v1, v2]);
  });

  test(`${entry}: two reporters sharing one store never double-spend`, async (t) => {
    const [v1, v2] = ["rr:1/2:1/2", "rr:1/3:1/4"];
    const {server, counted, serve} = await collector(booleanDoc("m", v1));
    t.after(() => server.close());
    const store = new MemoryStore();
    // A cap of ln 9 = 2 ln 3: both answers of v1 once. Were each reporter to pay for its own,
    // the second pair would take the sum to 4 ln 3 and be refused.
    // One store, one device secret (as tabs of one origin share IndexedDB's).
    const opts = {onePerPeriod: false, log: () => undefined, store, secret: new core.StoreSecret(store),
                  refreshInterval: 20, maxMetricEpsilon: Math.log(9), metrics: {m: v1}};
    const [a, b] = [new lib.Reporter(server.url, opts), new lib.Reporter(server.url, opts)];
    for (const r of [a, b]) await until(() => r.metrics?.m === v1, "v1");
    a.report("m", true);
    b.report("m", true);
    a.report("m", false);
    b.report("m", false);
    for (const r of [a, b]) assert.equal(await r.flush(5000), true);
    assert.equal(counted().length, 4);
    const ledger = await store.get("ledger");
    assert.equal(ledger.m.paid.length, 2);
    assert.equal(BigInt(ledger.m.spent), 2n * units(Math.log(3)));
    serve(booleanDoc("m", v2));
    for (const r of [a, b]) await until(() => r.metrics?.m === v2, "v2");
    a.report("m", true);
    b.report("m", false);
    for (const r of [a, b]) assert.equal(await r.close(5000), true);
    assert.equal(counted().length, 4);
    assert.equal(a.stats().capRefused + b.stats().capRefused, 2);
  });

  test(`${entry}: a flush seals the rows another reporter on the store committed meanwhile`,
       async (t) => {
    // The race behind "never double-spend" failing under load: while a's flush had its batch in
    // flight, b's commit timer put b's row in the shared store unsealed; a's flush counted it
    // queued but sealed only its own buffer, so it waited for maxBatchAge (15 s) and timed out.
    // Ordered, not timed: the collector answers a's batch only once b's row is in the store.
    const v1 = "rr:1/2:1/2";
    const store = new MemoryStore();
    const c = collectorLike(booleanDoc("m", v1));
    const stored = async () => (await store.get("queue"))?.pending.length ?? 0;
    const server = createServer((req, res) => {
      const chunks = [];
      req.on("data", (x) => chunks.push(x));
      req.on("end", async () => {
        if (req.method === "POST" && c.seen.size === 0) {
          for (let i = 0; i < 500 && await stored() === 0; i++) await sleep(10);
        }
        const [status, headers, text] = c.answer(req, Buffer.concat(chunks).toString());
        res.writeHead(status, {"Content-Type": "application/json", ...headers}).end(text);
      });
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => { server.closeAllConnections(); server.close(); });
    const url = `http://127.0.0.1:${server.address().port}`;
    const opts = {onePerPeriod: false, log: () => undefined, store, secret: new core.StoreSecret(store),
                  metrics: {m: v1}};
    const [a, b] = [new lib.Reporter(url, opts), new lib.Reporter(url, opts)];
    for (const r of [a, b]) await until(() => r.metrics?.m === v1, "v1");
    a.report("m", true);
    const flushed = a.flush(3000);
    b.report("m", false);
    assert.equal(await flushed, true);
    assert.equal(c.counted().length, 2);
    assert.equal(await stored(), 0);
    for (const r of [a, b]) assert.equal(await r.close(3000), true);
    assert.equal(c.counted().length, 2);
  });

  test(`${entry}: past the cap a boolean value is sent as the other value's paid answer`, async (t) => {
    // Issue 26: were a refused value silent, "silence = the value changed". A cap of ln 3
    // holds one answer: true's. false is then sent as true's answer, free, on the early
    // (asynchronous) path and the synchronous one, and by a second reporter of the store.
    const v1 = "rr:1/2:1/2";
    const {server, counted} = await collector(booleanDoc("m", v1));
    t.after(() => server.close());
    const store = new MemoryStore();
    const opts = {onePerPeriod: false, log: () => undefined, store, secret: new core.StoreSecret(store),
                  maxMetricEpsilon: Math.log(3), metrics: {m: v1}};
    const r = new lib.Reporter(server.url, opts);
    r.report("m", true);
    r.report("m", false);  // before the state loaded: decided in drainOne
    assert.equal(await r.flush(5000), true);
    for (const v of [false, true, false]) r.report("m", v);  // decided at the call
    assert.equal(await r.close(5000), true);
    assert.equal(r.stats().capRefused, 3);
    const again = new lib.Reporter(server.url, opts);
    again.report("m", false);
    await until(() => !again.waiting, "drained");
    again.report("m", false);
    assert.equal(await again.close(5000), true);
    assert.equal(again.stats().capRefused, 2);
    const bits = counted().map((x) => x.bit);
    assert.equal(bits.length, 7);
    assert.deepEqual(bits, Array(7).fill(bits[0]));
    const ledger = await store.get("ledger");
    assert.equal(ledger.m.paid.length, 1);  // never past the cap
    assert.equal(BigInt(ledger.m.spent), units(Math.log(3)));
  });

  test(`${entry}: a catalogue served while the state loads loses no paid answer (no report lost)`,
       async (t) => {
    // The flake behind "past the cap ... the other value's paid answer" (7 reports, 6 counted):
    // a catalogue served while an answer was being derived set a new map of paid answers over
    // the one the early report's answer went into, so a later value the cap refused had no paid
    // answer to stand in for it and was sent as nothing. Paid answers are now one map the
    // reporter keeps, whatever is served meanwhile. Ordered, not timed: the early report's
    // HMACs are held until the catalogue has been served.
    const gate = holdSigns();
    t.after(gate.restore);
    const v1 = "rr:1/2:1/2";
    const {server, counted} = await collector(booleanDoc("m", v1));
    t.after(() => server.close());
    const store = new MemoryStore();
    const r = new lib.Reporter(server.url, {
      onePerPeriod: false, log: () => undefined, store, secret: new core.StoreSecret(store),
      maxMetricEpsilon: Math.log(3), metrics: {m: v1}});
    r.report("m", true);                  // early: derived and paid in drainOne
    await gate.arrived(1);                // its answer's HMAC, held
    await until(() => r.stats().catalogueKnown, "the catalogue served");
    gate.open();                          // derived and paid after the catalogue came
    await until(() => !r.waiting, "drained");
    assert.equal(await r.waitReady(5000), true);
    r.report("m", false);                 // past the cap: sent as true's paid answer
    assert.equal(await r.close(5000), true);
    assert.equal(r.stats().capRefused, 1);
    const bits = counted().map((x) => x.bit);
    assert.equal(bits.length, 2);
    assert.deepEqual(bits, [bits[0], bits[0]]);
  });
}

/**
 * Hold every crypto.subtle.sign (each HMAC: ledger tags, memoized answers) until released, in
 * the order they were asked: `arrived(n)` waits for the n-th; `release(i, next)` lets the i-th
 * finish and waits for the `next`-th to be asked; `open()` lets every one through from then on.
 */
function holdSigns() {
  const subtle = globalThis.crypto.subtle;
  const sign = subtle.sign;
  const calls = [];
  let open = false;
  subtle.sign = function (...args) {
    const done = sign.apply(subtle, args);
    if (open) return done;
    let go;
    calls.push(new Promise((resolve) => { go = resolve; }));
    calls[calls.length - 1].go = go;
    return Promise.all([done, calls[calls.length - 1]]).then(([mac]) => mac);
  };
  const arrived = (n) => until(() => calls.length >= n, `HMAC ${n} asked`);
  return {
    arrived,
    release: async (i, next) => {
      calls[i - 1].go();
      if (next !== undefined) await arrived(next);
      else await sleep(20);
    },
    open: () => {
      open = true;
      for (const c of calls) c.go();
    },
    restore: () => {
      open = true;
      for (const c of calls) c.go();
      subtle.sign = sign;
    },
  };
}

/** x * 2**1074, exactly (as the ledger stores sums). */
function units(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  return ((bits & 0xfffffffffffffn) | 1n << 52n) << ((bits >> 52n) - 1n);
}

test("all: the cap counts each category's memoized answer", async (t) => {
  const os = vectors.ceiling.doc.metrics.find((m) => m.name === "os");  // epsilon 2 (rounded down)
  const {server, counted} = await collector({metrics: [os]});
  t.after(() => server.close());
  const store = new MemoryStore();
  const r = new all.Reporter(server.url, {onePerPeriod: false, log: () => undefined, store,
                                          metrics: declarations({metrics: [os]})});
  // ln 81 ~ 4.39 holds two answers of epsilon ~2: ios and android; linux is refused a new
  // one, so it is sent as the lowest paid category's answer (android, index 0), free: never
  // silent for one value (issue 26). Reports keep call order.
  for (const v of ["ios", "android", "ios", "linux", "android", "linux"]) r.report("os", v);
  assert.equal(await r.close(5000), true);
  const sent = counted().map((x) => x.index);
  assert.equal(sent.length, 6);
  assert.deepEqual([sent[2], sent[3], sent[4], sent[5]], [sent[0], sent[1], sent[1], sent[1]]);
  assert.equal(r.stats().capRefused, 2);
  assert.equal((await store.get("ledger")).os.paid.length, 2);  // never past the cap
});

test("the catalogue parsers give RandomizedResponse when asked, with its estimator", () => {
  const {RandomizedResponse} = core;
  const parsed = parseCatalogue(booleanDoc("m", "rr:1/2:1/2"), undefined, RandomizedResponse).get("m");
  assert.ok(parsed instanceof core.RandomizedResponse);
  assert.equal(parsed.estimate(50, 100).value, 0.5);
  assert.ok(declareCatalogue({m: "rr:1/2:1/2"}, RandomizedResponse).get("m") instanceof RandomizedResponse);
});

test("ledger tags are HMACs under the device secret; a clear-tag ledger is re-tagged on load", async (t) => {
  const {server, counted} = await collector(booleanDoc("m", "rr:1/2:1/2"));
  t.after(() => server.close());
  const dir = mkdtempSync(join(tmpdir(), "deniable-tags-"));
  const secret = new Uint8Array(32).map((_, i) => 7 * i + 1);
  mkdirSync(join(dir, "privacy"), {mode: 0o700});
  writeFileSync(join(dir, "privacy", "secret"), secret, {mode: 0o600});
  // A ledger as earlier versions wrote it: the true values in clear (m: true; os: index 2;
  // a grid point; a malformed tag, which cannot be re-tagged and is dropped).
  const spent = `${3n * units(Math.log(3))}`;
  const clear = {m: {paid: ["rr:1/2:1/2\u00001"], spent},
                 os: {paid: ["grr:3:1/2:0a1b2c3d\u00002", "x\u0000y"], spent},
                 t: {paid: ["bm:1/4:0:1000\u000017"], spent}};
  writeFileSync(join(dir, "queue.json"), JSON.stringify({ledger: clear}), {mode: 0o600});
  const r = new core.Reporter(server.url, {log: () => undefined, onePerPeriod: false,
                                           metrics: {m: "rr:1/2:1/2"}, ...nodeStorage(dir)});
  assert.equal(await r.waitReady(5000), true);
  const key = await importSecret(secret);
  const tag = (metric, id, k) => ledgerTag(key, metric, id, k);
  const text = readFileSync(join(dir, "queue.json"), "utf8");
  assert.ok(!text.includes("\\u0000"), text);
  assert.deepEqual(JSON.parse(text).ledger, {
    m: {paid: [await tag("m", "rr:1/2:1/2", 1)], spent},
    os: {paid: [await tag("os", "grr:3:1/2:0a1b2c3d", 2)], spent},
    t: {paid: [await tag("t", "bm:1/4:0:1000", 17)], spent}});
  // The re-tagged answer is still paid for (free); the other is charged under its HMAC tag.
  r.report("m", true);
  r.report("m", true);
  assert.equal(await r.flush(5000), true);
  r.report("m", false);
  assert.equal(await r.close(5000), true);
  assert.equal(counted().length, 3);
  const ledger = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8")).ledger;
  assert.deepEqual(ledger.m.paid, [await tag("m", "rr:1/2:1/2", 1), await tag("m", "rr:1/2:1/2", 0)]);
  assert.equal(BigInt(ledger.m.spent), 4n * units(Math.log(3)));
  for (const t of [...ledger.m.paid, ...ledger.os.paid]) assert.match(t, /^[0-9a-f]{32}$/);
});
