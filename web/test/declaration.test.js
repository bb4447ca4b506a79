// The app's declaration is the privacy contract (issue 26 items 1, 2, 4), in both entries: the
// metrics file's tables as JSON are checked as the metrics file is; a served catalogue may only
// choose a mechanism asking the same question at no larger epsilon; everything else it says is
// ignored, counted in stats().ignoredServed and said once per metric, without any value.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as core from "../dist/index.js";
import * as all from "../dist/all.js";
import {collectorLike, sleep, startServer} from "./helpers.js";
import {fracToString} from "../dist/fraction.js";
import {parseMechanism} from "../dist/kinds.js";

const {InvalidParameterError, MemoryStore, UnknownMetricError} = core;
const OS = ["android", "ios", "windows", "macos", "linux", "other"];
const TAG6 = all.domainTag(OS);
const URL_ = "http://127.0.0.1:9";

/** A served boolean entry, as describe_metric writes it. */
function served(name, mechanism, extra = {}) {
  const m = core.RandomizedResponse.fromId(mechanism);
  const [p1, q] = [fracToString(m.pYesGivenYes), fracToString(m.pYesGivenNo)];
  return {name, description: "", kind: "boolean", mechanism, p_yes_given_yes: p1,
          p_yes_given_no: q, p1, q, epsilon: m.epsilon, memoization: "memoized",
          instantaneous: null, period: "day", ...extra};
}

/** A collector whose catalogue the test sets, counting each batch id once. */
async function collector(t, doc) {
  const c = collectorLike(doc);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  return {url: server.url, counted: c.counted, server};
}

for (const [entry, lib] of [["default", core], ["all", all]]) {
  const make = (metrics, extra = {}) => new lib.Reporter(URL_, {
    log: () => undefined, store: new MemoryStore(), flushOnHide: false, metrics, ...extra});

  test(`${entry}: declarations are checked as the metrics file's tables, naming the field`,
       async () => {
    const bad = [
      [{mechanism: "rr:1/2:1/2", colour: "red"}, "colour"],
      // The default entry has no instantaneous layer; deniable-client/all checks it as Python.
      [{mechanism: "rr:1/2:1/2", memoization: "instantaneous"},
       entry === "all" ? "instantaneous" : "memoization"],
      [{mechanism: "rr:1/2:1/2", memoization: "instantaneous",
        instantaneous: entry === "all" ? "rr:1/2:1/2" : "rr:3/4:1/2"}, "instantaneous"],
      [{mechanism: "rr:1/2:1/2", instantaneous: "rr:3/4:1/2"}, "instantaneous"],
      ...entry === "all" ? [
        [{mechanism: "rr:1/2:1/2", memoization: "instantaneous", instantaneous: "rr:3/4"},
         "instantaneous"],
        [{kind: "categorical", categories: ["a", "b"], mechanism: "grr:2:3/4:0a1b2c3d",
          memoization: "instantaneous", instantaneous: "rr:3/4:1/2"}, "instantaneous"],
      ] : [],
      [{mechanism: "rr:1/2:1/2", memoization: "sometimes"}, "memoization"],
      [{mechanism: "rr:1/2:1/2", period: "month"}, "period"],
      [{mechanism: "rr:1/2:1/2", description: 3}, "description"],
      [{mechanism: "rr:1/2:1/2", retention_days: 0}, "retention_days"],
      [{epsilon: 1.0}, "epsilon"],
      [{mechanism: "rr:2/1:1/2"}, "mechanism"],
    ];
    for (const [table, field] of bad) {
      // (deniable-client/all says what is wrong with a mechanism as its kinds module does.)
      const named = entry === "all" && field === "mechanism" ? "" : field;
      assert.throws(() => make({m: table}), (e) => e instanceof InvalidParameterError &&
                    e.message.startsWith(`metric 'm': ${named}`), JSON.stringify(table));
    }
    const ok = make({m: {mechanism: "rr:1/2:1/2", description: "d", retention_days: 30,
                         memoization: "fresh", period: "week", instantaneous: null}});
    assert.deepEqual(ok.metrics, {m: "rr:1/2:1/2"});
    await ok.close(10);
    if (entry === "all") {  // kind-only fields, as the registry's _ONLY_FOR
      assert.throws(() => make({m: {mechanism: "rr:1/2:1/2", categories: ["a", "b"]}}),
                    /metric 'm': categories: only categorical/);
      assert.throws(() => make({h: {kind: "histogram", mechanism: `grr:6:1/4:${TAG6}`,
                                    edges: [0, 1, 2, 3, 4, 5, 6], categories: OS}}),
                    /metric 'h': categories: only categorical/);
    }
  });

  test(`${entry}: an undeclared metric throws whatever the value, and nothing is sent`,
       async (t) => {
    const {url, counted, server} = await collector(t, {metrics: [served("a", "rr:1/2:1/2"),
                                                                 served("b", "rr:1/2:1/2")]});
    const r = new lib.Reporter(url, {log: () => undefined, store: new MemoryStore(),
                                     metrics: {a: "rr:1/2:1/2"}});
    for (const value of [true, false, 0, "yes", null, 812.5]) {
      assert.throws(() => r.report("b", value), (e) => e instanceof UnknownMetricError &&
                    /"b" is not declared/.test(e.message));
    }
    r.report("a", true);  // before any catalogue: queued
    assert.equal(await r.waitReady(5000), true);
    assert.throws(() => r.report("b", true), UnknownMetricError);  // served, still undeclared
    assert.equal(await r.close(5000), true);
    assert.deepEqual(counted().map((x) => x.metric), ["a"]);
    assert.equal(server.posts.length, 1);
    assert.deepEqual(r.stats().ignoredServed, {});  // undeclared: nothing of it is used
  });

  test(`${entry}: served memoization, period and dimensions are ignored; one answer per value`,
       async (t) => {
    // The operator serves the declared metric with fresh coins, hourly, with a dimension, and
    // a version at ln 3 (no larger than declared: taken, memoized all the same).
    const wide = {dimensions: {app_version: {values: ["2.4.1177", "2.4.1178"], other: false}}};
    const doc = {metrics: [served("m", "rr:1/3:1/4",
                                  {memoization: "fresh", period: "hour", ...wide})]};
    const {url, counted} = await collector(t, doc);
    const lines = [];
    // One process standing for many periods: the gate is off (the served period is ignored
    // all the same: counted below; period.test.js reports by the declared one).
    const r = new lib.Reporter(url, {log: (l) => lines.push(l), store: new MemoryStore(),
                                     refreshInterval: 20, batchSize: 1000, onePerPeriod: false,
                                     metrics: {m: {mechanism: "rr:1/2:1/2"}},
                                     dimensions: {app_version: "2.4.1177"}});
    assert.equal(await r.waitReady(5000), true);
    assert.deepEqual(r.metrics, {m: "rr:1/3:1/4"});
    for (let i = 0; i < 200; i++) r.report("m", true);
    await sleep(100);  // several refreshes: said once
    assert.equal(await r.close(5000), true);
    const sent = counted();
    assert.equal(sent.length, 200);
    // 200 fresh reports all alike has probability (1/2)**199 (P1 = 1/2 under rr:1/3:1/4).
    assert.equal(new Set(sent.map((x) => x.bit)).size, 1);
    assert.ok(sent.every((x) => x.mechanism === "rr:1/3:1/4" && x.dims === undefined));
    assert.deepEqual(r.stats().ignoredServed, {m: 3});
    const said = lines.filter((l) => l.includes("'m'"));
    assert.equal(said.length, 1, lines.join("\n"));
    assert.match(said[0], /memoization, period, dimensions; ignored/);
    assert.ok(!said[0].includes("1177") && !said[0].includes("fresh") && !said[0].includes("hour"));
  });

  test(`${entry}: a declared fresh metric draws fresh coins without any catalogue`, async (t) => {
    const stalled = await startServer(() => null);
    t.after(() => stalled.close());
    const c = collectorLike();
    const good = await startServer(c.answer);
    t.after(() => good.close());
    const store = new MemoryStore();
    const r = new lib.Reporter(stalled.url, {log: () => undefined, store, timeout: 200,
                                             onePerPeriod: false,
                                             metrics: {m: {mechanism: "rr:1/2:1/2",
                                                           memoization: "fresh"}}});
    for (let i = 0; i < 200; i++) r.report("m", true);
    assert.equal(await r.close(300), false);
    const again = new lib.Reporter(good.url, {log: () => undefined, store, metrics: {}});
    assert.equal(await again.close(5000), true);
    // 200 reports at P1 = 3/4 all alike: probability (3/4)**200 < 1e-24.
    assert.equal(c.counted().length, 200);
    assert.equal(new Set(c.counted().map((x) => x.bit)).size, 2);
    assert.deepEqual(await store.get("ledger") ?? {}, {});  // fresh: not charged to the cap
  });
}

test("all: a narrow served domain or a decoy at a tiny epsilon changes nothing", async (t) => {
  // The operator's versions of issue 26: os with categories [L, decoy], startup_ms on
  // [5000, 10000], each at epsilon ~0.01 (smaller: but another question, so ignored).
  const os = {kind: "categorical", categories: OS, mechanism: `grr:6:1/4:${TAG6}`};
  const startup = {kind: "numeric", lower: 0, upper: 10000, clamp: true,
                   mechanism: "bm:1/4:0:10000"};
  const decoy = parseMechanism(`grr:2:101/200:${all.domainTag(["ios", "decoy"])}`);
  const narrow = parseMechanism("bm:199/400:5000:10000");
  // Same bounds, a smaller epsilon, but no clamp: another question (a value out of range
  // would throw), so ignored too.
  const load = {kind: "numeric", lower: 0, upper: 1000, clamp: true, mechanism: "bm:1/4:0:1000"};
  const unclamped = parseMechanism("bm:1/3:0:1000");
  const entry = (name, m, fields) => ({name, description: "", ...fields, mechanism: m.id,
    p1: fracToString(m.p1), q: fracToString(m.q), epsilon: m.epsilon,
    memoization: "memoized", instantaneous: null, period: "day"});
  const doc = {metrics: [
    entry("os", decoy, {kind: "categorical", categories: ["ios", "decoy"]}),
    entry("startup_ms", narrow, {kind: "numeric", lower: "5000", upper: "10000"}),
    entry("load_ms", unclamped, {kind: "numeric", lower: "0", upper: "1000"})]};
  const {url, counted} = await collector(t, doc);
  const r = new all.Reporter(url, {log: () => undefined, store: new MemoryStore(),
                                   metrics: {os, startup_ms: startup, load_ms: load},
                                   onePerPeriod: false,
                                   maxMetricEpsilon: Infinity});
  assert.equal(await r.waitReady(5000), true);
  const declared = {os: os.mechanism, startup_ms: startup.mechanism, load_ms: load.mechanism};
  assert.deepEqual(r.metrics, declared);
  for (const v of OS) r.report("os", v);                    // every label, decoy's or not
  for (const v of [0, 812.5, 4999, 5000, 10000]) r.report("startup_ms", v);
  for (const v of [0, 5000]) r.report("load_ms", v);       // 5000: clamped, as declared
  assert.equal(await r.close(5000), true);
  const sent = counted();
  assert.equal(sent.length, OS.length + 5 + 2);
  assert.ok(sent.every((x) => x.mechanism === declared[x.metric]));
  assert.deepEqual(r.stats().ignoredServed, {os: 1, startup_ms: 1, load_ms: 1});
  assert.equal(r.stats().mechanismMismatch.os.using, os.mechanism);
});
