// The kinds beyond boolean (deniable-client/all): each mechanism's output frequencies against
// its exact channel, and the Reporter of every kind against real HTTP servers on loopback.
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {test} from "node:test";

import {BitMean, InvalidParameterError, KaryRandomizedResponse, MemoryStore, MetricSpec, QueueError, Reporter, SubsetSelection, UnaryEncoding, UnknownMetricError, domainTag, frac} from "../dist/all.js";
import {Reporter as BooleanReporter} from "../dist/index.js";
import {collectorLike, declarations, sleep, startServer} from "./helpers.js";
import {parseFraction} from "../dist/fraction.js";
import {memoValue, parseAllCatalogue} from "../dist/kinds.js";
import {importSecret} from "../dist/memo.js";

const vectors = JSON.parse(readFileSync(new URL("../../tests/vectors/vectors.json", import.meta.url)));
// These tests send many reports of one metric: the period gate (tested in period.test.js) is off.
const quiet = {log: () => undefined, onePerPeriod: false};
const OS = ["android", "ios", "windows", "macos", "linux", "other"];
const TAG6 = domainTag(OS);
const num = (f) => Number(f.num) / Number(f.den);

// -- output frequencies ---------------------------------------------------------------------
//
// Each check compares one count c of N independent reports with its exact expectation N P:
// |c - N P| <= Z sqrt(N P (1 - P)). With Z = 6, one check fails by chance with probability
// 2 (1 - Phi(6)) = 1.97e-9 (normal approximation; N P (1 - P) >= 900 in every check here, so
// the binomial is close to normal far enough out, and 6 leaves room). The checks below number
// CHECKS = 54 (GRR 6 + 5, OUE 6 + 9, SS 8 + 6 + 5, 1BitMean 3 x 3); Bonferroni: all of them
// pass together but for a chance failure with probability <= 54 x 1.97e-9 = 1.1e-7 < 1e-6.
const Z = 6;
const CHECKS = 54;
let checks = 0;

function within(count, n, p, what) {
  checks++;
  const sd = Math.sqrt(n * p * (1 - p));
  assert.ok(n * p * (1 - p) >= 900, `${what}: too few reports for the normal approximation`);
  assert.ok(Math.abs(count - n * p) <= Z * sd,
            `${what}: ${count} of ${n}, expected ${(n * p).toFixed(1)} +- ${Z} x ${sd.toFixed(1)}`);
}

/** Reports of `truth` under `m` (system source): how often each category was reported / set. */
function tally(m, truth, n) {
  const counts = new Array(m.d).fill(0);
  for (let i = 0; i < n; i++) {
    const out = m.perturb(truth);
    if (typeof out === "number") {
      counts[out]++;
      continue;
    }
    let bits = BigInt(`0x${out}`);
    let set = 0;
    for (let c = 0; bits > 0n; c++, bits >>= 1n) {
      if (bits & 1n) {
        counts[c]++;
        set++;
      }
    }
    if (m instanceof SubsetSelection) assert.equal(set, m.k, "a subset has exactly k members");
  }
  return counts;
}

test("GRR, OUE and subset selection report each category with probability exactly P1 or Q", () => {
  const cases = [
    [new KaryRandomizedResponse(6, frac(1280797909n, 2147483648n), TAG6), 2, 20_000],
    [new KaryRandomizedResponse(5, frac(1n, 3n), domainTag(OS.slice(0, 5))), 4, 30_000],
    [new UnaryEncoding(6, frac(1n, 4n), TAG6), 0, 20_000],
    [new UnaryEncoding(9, frac(1n, 3n), domainTag([..."abcdefghi"])), 8, 20_000],
    [new SubsetSelection(8, 3, frac(3n, 2n), domainTag([..."abcdefgh"])), 5, 20_000],
    [new SubsetSelection(6, 2, frac(5n, 1n), TAG6), 0, 20_000],
    [new SubsetSelection(5, 1, frac(2n, 1n), domainTag(OS.slice(0, 5))), 3, 30_000],
  ];
  for (const [m, truth, n] of cases) {
    const counts = tally(m, truth, n);
    counts.forEach((c, i) => within(c, n, num(i === truth ? m.p1 : m.q), `${m.id} slot ${i}`));
  }
});

test("1BitMean sends 1 with probability exactly a + (1 - 2a) s", () => {
  const m = BitMean.fromId("bm:1/4:0:10000");
  const odd = BitMean.fromId("bm:1/3:-5/2:7");
  const n = 20_000;
  for (const [mech, value] of [[m, frac(0n)], [m, frac(10000n)], [m, parseFraction("1625/2")],
                               [odd, frac(-5n, 2n)], [odd, frac(7n)], [odd, frac(1n, 10n)],
                               [m, frac(3333n)], [odd, frac(3n)], [m, frac(9999n)]]) {
    let ones = 0;
    for (let i = 0; i < n; i++) ones += mech.perturb(value);
    const s = (num(value) - num(mech.lower)) / (num(mech.upper) - num(mech.lower));
    const a = num(mech.a);
    within(ones, n, a + (1 - 2 * a) * s, `${mech.id} at ${num(value)}`);
  }
  assert.equal(checks, CHECKS, "the Bonferroni factor counts every check");
});

// -- the Reporter of every kind ---------------------------------------------------------------

const KIND_DOC = vectors.kind_catalogue.good;  // written by describe_metric from MetricSpecs
const entry = (name) => KIND_DOC.metrics.find((e) => e.name === name);
const KIND_DECLARED = declarations(KIND_DOC);
const specOf = (name) => parseAllCatalogue({metrics: [entry(name)]}).get(name);
const SECRET = new Uint8Array(32).map((_, i) => 7 * i + 1);
const fixedSecret = () => ({load: () => importSecret(SECRET)});

test("every kind is reported memoized, under its mechanism's payload field", async (t) => {
  const c = collectorLike(KIND_DOC);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: KIND_DECLARED, store: new MemoryStore(), secret: fixedSecret()});
  // Before the local state has loaded: held in memory, reported once it has.
  r.report("os", "ios");
  r.report("startup_ms", 812.5);
  assert.equal(await r.waitReady(5000), true);
  r.report("os", "ios");
  r.report("os_oue", "linux");
  r.report("locale", "l17");
  r.report("crashes_per_week", 3);
  r.report("crashes_per_week", 1e6);          // clamp: the last bucket
  r.report("load_ms", -0.5);
  r.report("startup_ms", 812.5);
  r.report("startup_ms", -20);                // clamp: lower
  r.report("temperature", 0.1);
  r.report("dark_mode", true);
  assert.equal(await r.flush(5000), true);
  await r.close();
  const sent = c.counted();
  assert.equal(sent.length, 12);
  const key = await importSecret(SECRET);
  const expected = [["os", "ios"], ["startup_ms", 812.5], ["os", "ios"], ["os_oue", "linux"],
                    ["locale", "l17"], ["crashes_per_week", 3], ["crashes_per_week", 1e6],
                    ["load_ms", -0.5], ["startup_ms", 812.5], ["startup_ms", -20],
                    ["temperature", 0.1]];
  const want = [];
  for (const [metric, value] of expected) {
    const spec = specOf(metric);
    const field = spec.id.startsWith("grr") ? "index" : spec.kind === "numeric" ? "bit" : "bits";
    want.push({metric, mechanism: spec.id,
               [field]: await memoValue(key, metric, spec, spec.encode(value))});
  }
  const sortKey = (x) => JSON.stringify(x);
  assert.deepEqual(sent.filter((x) => x.metric !== "dark_mode").map(sortKey).sort(),
                   want.map(sortKey).sort());
  assert.equal(sent.find((x) => x.metric === "dark_mode").mechanism, "rr:1/2:1/2");
  for (const x of sent) assert.equal(Object.keys(x).length, 3, JSON.stringify(x));
});

test("a value the metric does not take throws at the call, never shows it, queues nothing",
     async (t) => {
  const c = collectorLike(KIND_DOC);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: KIND_DECLARED, store: new MemoryStore()});
  assert.equal(await r.waitReady(5000), true);
  const bad = [["os", "Android"], ["os", 3], ["os", null], ["os", true], ["os", ["ios"]],
               ["crashes_per_week", "3"], ["crashes_per_week", NaN], ["crashes_per_week", true],
               ["load_ms", 1000.5], ["load_ms", -0.75], ["temperature", 7.25],
               ["temperature", -Infinity], ["startup_ms", NaN], ["startup_ms", {}],
               ["dark_mode", "yes"], ["dark_mode", 0.5]];
  for (const [metric, value] of bad) {
    assert.throws(() => r.report(metric, value), (error) => {
      assert.ok(error instanceof InvalidParameterError, `${metric} ${String(value)}: ${error}`);
      if (typeof value === "number" && Number.isFinite(value)) {
        assert.ok(!error.message.includes(String(value)), error.message);
      }
      return true;
    });
  }
  assert.throws(() => r.report("no_such_metric", "ios"), UnknownMetricError);
  assert.equal(r.stats().queued, 0);
  assert.equal(await r.flush(3000), true);
  assert.equal(server.posts.length, 0);
  await r.close();
  assert.throws(() => r.report("os", "ios"), QueueError);
});

test("fresh metrics draw fresh coins; memoized ones repeat one answer per value", async (t) => {
  const c = collectorLike(KIND_DOC);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: KIND_DECLARED, store: new MemoryStore(), fresh: ["os_oue"],
                                      batchSize: 1000});
  assert.equal(await r.waitReady(5000), true);
  for (let i = 0; i < 200; i++) {
    r.report("os_oue", "ios");
    r.report("locale", "l3");
    r.report("startup_ms", 1000);
  }
  assert.equal(await r.flush(5000), true);
  await r.close();
  const answers = (metric) => new Set(c.counted().filter((x) => x.metric === metric)
    .map((x) => x.bits ?? x.bit));
  // OUE over 6 categories: 200 fresh reports all alike has probability < 0.75**200 (the
  // likeliest bitset is drawn with probability below 3/4 per report).
  assert.ok(answers("os_oue").size > 1);
  assert.equal(answers("locale").size, 1);
  assert.equal(answers("startup_ms").size, 1);
  assert.equal(c.counted().length, 600);
});

test("declared metrics of every kind are a privacy floor", async (t) => {
  const os = entry("os");
  const weaker = {...os, mechanism: `grr:6:3/4:${TAG6}`, p1: "3/4", q: "1/20"};
  const stronger = {...os, mechanism: `grr:6:1/3:${TAG6}`, p1: "1/3", q: "2/15"};
  for (const [served, using] of [[weaker, os.mechanism], [stronger, stronger.mechanism]]) {
    const c = collectorLike({metrics: [served, entry("startup_ms")]});
    const server = await startServer(c.answer);
    const r = new Reporter(server.url, {
      ...quiet, store: new MemoryStore(),
      metrics: {os: {kind: "categorical", mechanism: os.mechanism, categories: OS},
                startup_ms: entry("startup_ms").mechanism}});
    r.report("os", "macos");  // declared: reported at once under the declared mechanism
    await sleep(300);         // the catalogue comes in the background
    r.report("os", "macos");
    assert.equal(await r.flush(5000), true);
    await r.close();
    await server.close();
    const ids = c.counted().map((x) => x.mechanism);
    assert.equal(ids[ids.length - 1], using);
    if (using !== os.mechanism) assert.deepEqual(r.stats().mechanismMismatch.os.using, using);
  }
  // A bare grr: id does not name its categories; a wrong declaration throws at construction.
  assert.throws(() => new Reporter("http://127.0.0.1:9", {...quiet, metrics: {os: os.mechanism}}),
                InvalidParameterError);
  assert.throws(() => new Reporter("http://127.0.0.1:9", {
    ...quiet, metrics: {os: {kind: "categorical", mechanism: os.mechanism, categories: OS.slice(1)}}}),
                InvalidParameterError);
});

test("without deniable-client/all, declared metrics of other kinds throw and say how to opt in",
     async (t) => {
  const c = collectorLike(KIND_DOC);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new BooleanReporter(server.url, {...quiet, metrics: KIND_DECLARED,
                                             store: new MemoryStore()});
  assert.throws(() => r.report("os", "ios"), (e) => e instanceof UnknownMetricError &&
                /boolean metrics only.*deniable-client\/all/.test(e.message));
  r.report("dark_mode", true);
  assert.equal(await r.waitReady(5000), true);
  assert.throws(() => r.report("os", "ios"), /deniable-client\/all/);
  // An unknown kind: the default entry never reports it; deniable-client/all refuses it.
  const odd = new BooleanReporter(server.url, {...quiet, metrics: {os: {kind: "nominal"}}});
  assert.throws(() => odd.report("os", "x"), /is nominal: boolean metrics only/);
  await odd.close(10);
  assert.throws(() => new Reporter(server.url, {...quiet, metrics: {os: {kind: "nominal", mechanism: `grr:6:1/4:${TAG6}`}}}),
                /metric 'os': kind must be one of/);
  assert.equal(await r.flush(5000), true);
  await r.close();
  assert.deepEqual(c.counted().map((x) => x.metric), ["dark_mode"]);
});

test("a spec encodes as Python's MetricSpec (spot checks beside the vectors)", () => {
  const h = specOf("crashes_per_week");
  assert.ok(h instanceof MetricSpec);
  assert.deepEqual([0, 0.999, 1, 4.5, 10, 100, 1e9, -3].map((v) => h.encode(v)),
                   [0, 0, 1, 2, 4, 4, 4, 0]);
  const n = specOf("startup_ms");
  assert.equal(num(n.encode(812.5)), 812.5);
  assert.equal(num(n.encode(1e12)), 10_000);
  assert.equal(num(n.encode(-1e-300)), 0);
});
