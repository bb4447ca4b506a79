// Public dimensions in deniable-client/all: the Reporter against real HTTP servers on loopback.
// The catalogue served is the vectors' (tests/vectors/generate.py, dims_catalogue), and the app
// declares its parsed metrics as served (DECLARED): dark_mode declares app_version (2.3, 2.4, 2.5, other), platform (android, ios, web) and
// channel (beta, stable), with the combination app_version x platform; os declares platform;
// startup_ms app_version; crashes_per_week none; bad_dims, bad_combo and bad_both declare
// malformed ones (served only).
import assert from "node:assert/strict";
import {mkdtempSync, readFileSync, writeFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {
  DimensionError, InvalidParameterError, MemoryStore, Reporter, UnknownMetricError,
} from "../dist/all.js";
import {Reporter as BooleanReporter} from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";
import {collectorLike, declarations, startServer} from "./helpers.js";
import {vectors} from "./vectors.js";

const DOC = vectors.dims_catalogue.doc;
const DECLARED = declarations(DOC, vectors.dims_catalogue.parsed);
// These tests send many reports of one metric: the period gate (tested in period.test.js) is off.
const quiet = {onePerPeriod: false, log: () => undefined, metrics: DECLARED};
const DEVICE = {app_version: "2.9", platform: "web", country: "fr"};

/** A collector-like server serving DOC; its posts' raw bodies are in server.posts. */
async function collector(t, answer) {
  const c = collectorLike(DOC);
  const server = await startServer(answer ?? c.answer);
  t.after(() => server.close());
  return {c, server};
}

const dimsOf = (reports, metric) => reports.filter((x) => x.metric === metric)
  .map((x) => JSON.stringify(x.dims ?? null)).sort();

test("device-wide and per-call dims travel with the metrics that declare them, as counted",
     async (t) => {
  const {c, server} = await collector(t);
  const r = new Reporter(server.url, {...quiet, store: new MemoryStore(), dimensions: DEVICE});
  r.report("dark_mode", true);                      // before the catalogue: held, then sent
  r.report("os", "ios", {platform: "ios"});
  assert.equal(await r.waitReady(5000), true);
  r.report("dark_mode", false);
  r.report("dark_mode", true, {platform: "android", channel: "beta"});
  r.report("dark_mode", true, {app_version: "2.4"});
  r.report("dark_mode", true, {});                  // an empty dims: the device's
  r.report("os", "linux");
  r.report("startup_ms", 812.5);
  r.report("crashes_per_week", 3);                  // declares none: the device's not sent
  assert.equal(await r.flush(5000), true);
  await r.close();
  const sent = c.counted();
  assert.equal(sent.length, 9);
  assert.deepEqual(dimsOf(sent, "dark_mode"), [
    '{"app_version":"2.4","platform":"web"}',
    '{"app_version":"other","channel":"beta","platform":"android"}',
    '{"app_version":"other","platform":"web"}', '{"app_version":"other","platform":"web"}',
    '{"app_version":"other","platform":"web"}'].sort());
  assert.deepEqual(dimsOf(sent, "os"), ['{"platform":"ios"}', '{"platform":"web"}']);
  assert.deepEqual(dimsOf(sent, "startup_ms"), ['{"app_version":"other"}']);
  assert.deepEqual(dimsOf(sent, "crashes_per_week"), ["null"]);
  // On the wire: dims after the payload, names sorted, as the Python client writes them.
  assert.ok(server.posts.some((p) => /"bit":[01],"dims":\{"app_version":"other","channel":"beta","platform":"android"\}\}/
    .test(p.body)));
  assert.ok(!server.posts.some((p) => p.body.includes("country") || p.body.includes("2.9")));
  assert.deepEqual(Object.keys(r.dimensions).sort(), ["dark_mode", "os", "startup_ms"]);
  assert.deepEqual(r.dimensions.dark_mode.names, ["app_version", "platform", "channel"]);
});

test("a refused dimension throws DimensionError at the call, naming it; nothing is sent",
     async (t) => {
  const {server} = await collector(t);
  const r = new Reporter(server.url, {...quiet, store: new MemoryStore(),
                                      dimensions: {platform: "web"}});
  assert.equal(await r.waitReady(5000), true);
  const bad = [
    ["dark_mode", true, {platform: "windows"}, "platform"],        // off the list, no other
    ["dark_mode", true, {country: "fr"}, "country"],               // not declared
    ["dark_mode", true, {app_version: 2.4}, "app_version"],        // not a string
    ["dark_mode", "yes", {channel: "nightly"}, "channel"],         // dims are checked first
    ["os", "ios", {app_version: "2.4"}, "app_version"],
    ["crashes_per_week", 3, {platform: "web"}, "platform"],        // declares none
  ];
  for (const [metric, value, dims, field] of bad) {
    assert.throws(() => r.report(metric, value, dims), (error) => {
      assert.ok(error instanceof DimensionError && error instanceof InvalidParameterError);
      assert.equal(error.field, field, error.message);
      assert.match(error.message, new RegExp(`metric '${metric}'`));
      return true;
    });
  }
  assert.throws(() => r.report("dark_mode", true, "platform=web"), InvalidParameterError);
  assert.throws(() => r.report("dark_mode", true, ["web"]), InvalidParameterError);
  assert.equal(r.stats().queued, 0);
  assert.equal(await r.flush(3000), true);
  assert.equal(server.posts.length, 0);
  await r.close();
});

test("a device-wide value a list refuses: said once, in stats, and that metric's calls throw " +
     "unless they give their own", async (t) => {
  const {c, server} = await collector(t);
  const logged = [];
  const r = new Reporter(server.url, {...quiet, log: (m) => logged.push(m), store: new MemoryStore(),
                                      dimensions: {platform: "windows", app_version: "2.3"}});
  assert.equal(await r.waitReady(5000), true);
  assert.deepEqual(Object.keys(r.stats().dimensionProblems).sort(), ["dark_mode", "os"]);
  for (const metric of ["dark_mode", "os"]) {
    assert.equal(logged.filter((m) => m.includes(`metric '${metric}': the device-wide value of ` +
                                                  "dimension 'platform'")).length, 1);
  }
  assert.throws(() => r.report("dark_mode", true),
                (e) => e instanceof DimensionError && e.field === "platform");
  assert.throws(() => r.report("dark_mode", true, {channel: "beta"}),
                (e) => e instanceof DimensionError && e.field === "platform" &&
                  /device-wide/.test(e.message));
  r.report("dark_mode", true, {platform: "ios"});    // the call's own value: fine
  r.report("startup_ms", 10);                        // not affected
  assert.equal(await r.flush(5000), true);
  await r.close();
  assert.deepEqual(dimsOf(c.counted(), "dark_mode"), ['{"app_version":"2.3","platform":"ios"}']);
  assert.deepEqual(dimsOf(c.counted(), "startup_ms"), ['{"app_version":"2.3"}']);
});

test("the dimensions option is checked at construction", () => {
  const url = "http://127.0.0.1:9";
  for (const [dimensions, field] of [[{Platform: "web"}, "Platform"], [{platform: 3}, "platform"],
                                     [{"": "web"}, ""], [{platform: null}, "platform"]]) {
    assert.throws(() => new Reporter(url, {...quiet, dimensions}),
                  (e) => e instanceof DimensionError && e.field === field, JSON.stringify(dimensions));
  }
  assert.throws(() => new Reporter(url, {...quiet, dimensions: "platform=web"}),
                InvalidParameterError);
  assert.throws(() => new Reporter(url, {...quiet, metrics: {m: {
    mechanism: "rr:1/2:1/2", dimensions: {platform: {values: ["web", "web"]}}}}}),
                /metric 'm': dimensions: dimension 'platform' lists a value twice/);
  assert.throws(() => new Reporter(url, {...quiet, metrics: {m: {
    mechanism: "rr:1/2:1/2", combinations: [["a", "b"]]}}}), /metric 'm': dimensions: /);
});

test("declared dimensions apply, with or without a catalogue", async (t) => {
  const stalled = await startServer(() => null);
  t.after(() => stalled.close());
  const r = new Reporter(stalled.url, {...quiet, store: new MemoryStore(), timeout: 200,
                                       dimensions: {platform: "web"}, fresh: ["m"], metrics: {
    m: {mechanism: "rr:1/2:1/2", dimensions: {platform: {values: ["web", "ios"]}}},
    n: "rr:1/2:1/2"}});
  r.report("m", true);
  assert.throws(() => r.report("m", true, {platform: "android"}), DimensionError);
  assert.throws(() => r.report("n", true, {platform: "web"}), DimensionError);
  r.report("n", true);
  assert.deepEqual(Object.keys(r.dimensions), ["m"]);
  await r.close(300);
});

test("served dimensions, malformed or other, are ignored (said once); the declared ones apply",
     async (t) => {
  const {c, server} = await collector(t);
  const logged = [];
  // The app declares the served entries with malformed dimensions as plain booleans, and
  // dark_mode with platform only: whatever the collector lists, only that is ever attached.
  const metrics = {...DECLARED, bad_dims: "rr:1/2:1/2", bad_combo: {mechanism: "rr:1/2:1/2"},
                   bad_both: {mechanism: "rr:1/2:1/2"},
                   dark_mode: {mechanism: "rr:1/2:1/2",
                               dimensions: {platform: {values: ["web", "ios"]}}}};
  const r = new Reporter(server.url, {onePerPeriod: false, log: (m) => logged.push(m), store: new MemoryStore(),
                                      metrics, dimensions: DEVICE});
  assert.equal(await r.waitReady(5000), true);
  const stats = r.stats();
  // Entries with malformed dimensions do not parse: nothing of them is taken (or counted).
  assert.deepEqual(stats.ignoredServed, {dark_mode: 1});
  assert.equal(logged.filter((m) => m.includes("metric 'dark_mode'")).length, 1);
  for (const metric of [...vectors.dims_catalogue.withheld, "dark_mode"]) r.report(metric, true);
  assert.ok(logged.every((m) => !m.includes("2.3") && !m.includes("android")), logged.join("\n"));
  assert.throws(() => r.report("dark_mode", true, {app_version: "2.4"}), DimensionError);
  assert.throws(() => r.report("undeclared", true), UnknownMetricError);
  assert.equal(await r.close(5000), true);
  assert.deepEqual(dimsOf(c.counted(), "dark_mode"), ['{"platform":"web"}']);
  assert.deepEqual(dimsOf(c.counted(), "bad_dims"), ["null"]);
});

test("the default entry sends no dims, whatever the catalogue declares", async (t) => {
  const {c, server} = await collector(t);
  const r = new BooleanReporter(server.url, {...quiet, store: new MemoryStore(),
                                             dimensions: DEVICE});
  assert.equal(r.stats().ignoredServed.dark_mode, undefined);
  assert.equal(await r.waitReady(5000), true);
  r.report("dark_mode", true, {platform: "ios"});
  assert.equal(await r.close(5000), true);
  assert.deepEqual(dimsOf(c.counted(), "dark_mode"), ["null"]);
});

test("the Node queue file keeps each report's dims; older items without dims still send",
     async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "deniable-dims-"));
  const refused = await startServer((req) => req.method === "GET" ?
    [200, {}, JSON.stringify(DOC)] : [401, {}, '{"title": "Unauthorized"}']);
  t.after(() => refused.close());
  const r = new Reporter(refused.url, {...quiet, dimensions: {platform: "ios"},
                                       ...nodeStorage(dir)});
  assert.equal(await r.waitReady(5000), true);
  r.report("dark_mode", true, {app_version: "2.5"});
  r.report("os", "ios");
  assert.equal(await r.close(500), false);
  // An older client's queue: a pending report without dims (four fields), beside these.
  const path = join(dir, "queue.json");
  const file = JSON.parse(readFileSync(path, "utf8"));
  assert.equal(file.queue.batches.length, 1);
  file.queue.pending.push(["dark_mode", "rr:1/2:1/2", 1, Date.now()]);
  writeFileSync(path, JSON.stringify(file));
  const {c, server} = await collector(t);
  const again = new Reporter(server.url, {...quiet, ...nodeStorage(dir)});
  assert.equal(await again.close(5000), true);
  assert.deepEqual(dimsOf(c.counted(), "dark_mode"),
                   ['{"app_version":"2.5","platform":"ios"}', "null"].sort());
  assert.deepEqual(dimsOf(c.counted(), "os"), ['{"platform":"ios"}']);
});
