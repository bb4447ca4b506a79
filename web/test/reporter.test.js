// The Reporter against real HTTP servers on loopback: the client rules of issue 17 (never
// block, never throw for the network, deadlines, refused keys keep data) and exactly once.
import assert from "node:assert/strict";
import {mkdtempSync, readFileSync, statSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {InvalidParameterError, MemoryStore, QueueError, Reporter, UnknownMetricError} from "../dist/index.js";
import {nodeStorage} from "../dist/node.js";
import {CATALOGUE, collectorLike, sleep, startServer} from "./helpers.js";
import {DEFAULT_RETRY, backoffDelay, parseRetryAfter} from "../dist/sender.js";

// These tests send many reports of one metric: the period gate (tested in period.test.js) is off.
const quiet = {log: () => undefined, onePerPeriod: false};
const DECLARED = {feature_x_enabled: "rr:1/2:1/2", dark_mode: "rr:3/4:1/2"};
// What a Reporter on a MemoryStore says once (no silent in-memory state, state.test.js).
const STATE_IN_MEMORY = "deniable: state in memory: memoized answers, ledger and period gate " +
  "last one process";

test("bad input throws at the call and sends nothing", async (t) => {
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store: new MemoryStore()});
  assert.throws(() => r.report("no_such_metric", true), UnknownMetricError);
  assert.throws(() => r.report("dark_mode", "yes"), InvalidParameterError);
  assert.throws(() => r.report("dark_mode", 2), InvalidParameterError);
  assert.throws(() => r.report("dark_mode", null), InvalidParameterError);
  assert.throws(() => r.report(7, true), InvalidParameterError);
  assert.equal(await r.flush(5000), true);
  assert.equal(server.posts.length, 0);
  assert.equal(await r.close(), true);
  assert.throws(() => r.report("dark_mode", true), QueueError);
  assert.throws(() => new Reporter("ftp://x", quiet), InvalidParameterError);
  assert.throws(() => new Reporter(server.url, {...quiet, batchSize: 0}), InvalidParameterError);
  assert.throws(() => new Reporter(server.url, {...quiet, metrics: {"Bad-Name": "rr:1/2:1/2"}}),
                InvalidParameterError);
});

test("a served catalogue of every kind: declared metrics work, the rest is never used",
     async (t) => {
  const mixed = JSON.parse(readFileSync(
    new URL("../../tests/vectors/vectors.json", import.meta.url))).catalogue_kinds;
  const c = collectorLike(mixed.doc);
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const lines = [];
  const r = new Reporter(server.url, {onePerPeriod: false, log: (line) => lines.push(line), refreshInterval: 20,
                                      store: new MemoryStore(), metrics: mixed.boolean});
  assert.equal(await r.waitReady(5000), true);
  assert.deepEqual(r.metrics, mixed.boolean);
  for (let i = 0; i < 30; i++) r.report(i % 2 ? "dark_mode" : "notifications_on", i % 3 === 0);
  for (const [metric, value] of [["os", "android"], ["startup_ms", 812.5], ["os", true]]) {
    assert.throws(() => r.report(metric, value), (e) => e instanceof UnknownMetricError &&
                  /is not declared/.test(e.message) && !e.message.includes("android"));
  }
  await sleep(100);  // several catalogue refreshes
  assert.equal(await r.close(5000), true);
  assert.equal(c.counted().length, 30);
  assert.ok(c.counted().every((x) => x.mechanism.startsWith("rr:") && (x.bit === 0 || x.bit === 1)));
  assert.ok(server.gets.length >= 3, `${server.gets.length} catalogue fetches`);
  // Served as declared: nothing ignored, nothing said (but that state lasts one process, as
  // asked: store: new MemoryStore()); the undeclared ones are never used.
  assert.deepEqual(r.stats().ignoredServed, {});
  assert.deepEqual(lines, [STATE_IN_MEMORY]);
});

test("a Reporter without declarations reports nothing: every metric throws, nothing is sent",
     async (t) => {
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const lines = [];
  const r = new Reporter(server.url, {log: (line) => lines.push(line), store: new MemoryStore()});
  assert.equal(lines.length, 2);
  assert.match(lines[0], /no metrics declared/);
  assert.equal(lines[1], STATE_IN_MEMORY);
  for (const value of [true, false, "yes", 7]) {
    assert.throws(() => r.report("dark_mode", value), UnknownMetricError);  // whatever the value
  }
  assert.equal(await r.waitReady(5000), true);
  assert.throws(() => r.report("dark_mode", true), UnknownMetricError);
  assert.deepEqual(r.metrics, {});
  assert.deepEqual(r.stats().ignoredServed, {});
  assert.equal(r.stats().catalogueKnown, true);
  assert.equal(await r.close(5000), true);
  assert.equal(server.posts.length, 0);
});

test("reports arrive exactly once, in batches of the wire format, with the key", async (t) => {
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, token: "k1", batchSize: 40, metrics: DECLARED,
                                      store: new MemoryStore()});
  assert.equal(await r.waitReady(5000), true);
  for (let i = 0; i < 250; i++) r.report(i % 2 ? "dark_mode" : "feature_x_enabled", i % 3 === 0);
  assert.equal(await r.close(5000), true);
  const reports = c.counted();
  assert.equal(reports.length, 250);
  assert.equal(reports.filter((x) => x.metric === "dark_mode").length, 125);
  assert.ok(reports.every((x) => x.mechanism === (x.metric === "dark_mode" ? "rr:3/4:1/2"
                                                                           : "rr:1/2:1/2")));
  assert.ok(server.posts.every((p) => p.headers.authorization === "Bearer k1"));
  assert.ok(server.posts.every((p) => p.headers.cookie === undefined));
  assert.equal(r.stats().sent, 250);
  // Memoized: a device gives one answer per (metric, value) however often it reports it.
  const answers = new Set(reports.filter((x) => x.metric === "dark_mode").map((x) => x.bit));
  assert.ok(answers.size <= 2);
});

test("construction never waits on a stalled collector; declared metrics need no catalogue",
     async (t) => {
  const server = await startServer(() => null);
  t.after(() => server.close());
  const started = performance.now();
  const r = new Reporter(server.url, {...quiet, timeout: 300, store: new MemoryStore(),
                                      metrics: DECLARED});
  r.report("feature_x_enabled", true);  // no catalogue: queued all the same
  assert.ok(performance.now() - started < 100);
  assert.equal(await r.waitReady(2000), false);
  r.report("dark_mode", false);
  assert.throws(() => r.report("anything_at_all", true), UnknownMetricError);
  await sleep(50);
  const stats = r.stats();
  assert.equal(stats.catalogueKnown, false);
  assert.equal(stats.droppedNoCatalogue, 0);
  assert.equal(stats.queued, 2);
  assert.deepEqual(r.metrics, DECLARED);
  const closing = performance.now();
  await r.close(500);
  assert.ok(performance.now() - closing < 500 + 250);
});

test("close(timeout) returns by its deadline against a stalled collector; the batch keeps its id",
     async (t) => {
  const stalled = await startServer((req) => req.method === "POST" ? null
                                     : [200, {}, JSON.stringify(CATALOGUE)]);
  t.after(() => stalled.close());
  const store = new MemoryStore();
  const r = new Reporter(stalled.url, {...quiet, metrics: DECLARED, store, batchSize: 10});
  for (let i = 0; i < 25; i++) r.report("feature_x_enabled", true);
  await r.waitReady(2000);
  const started = performance.now();
  assert.equal(await r.close(1000), false);
  const took = performance.now() - started;
  assert.ok(took < 1000 + 250, `close took ${took} ms`);
  const sentIds = new Set(stalled.posts.map((p) => JSON.parse(p.body).batch_id));
  assert.ok(sentIds.size >= 1);
  // A later reporter on the same store re-sends the same ids: exactly once at the collector.
  const c = collectorLike();
  const good = await startServer(c.answer);
  t.after(() => good.close());
  const again = new Reporter(good.url, {...quiet, metrics: DECLARED, store});
  assert.equal(await again.close(5000), true);
  assert.equal(c.counted().length, 25);
  for (const id of sentIds) assert.ok(c.seen.has(id), "the stalled batch went again under its id");
});

test("a refused key (401) keeps the data; a valid key later sends it exactly once", async (t) => {
  const refusing = await startServer((req) => req.method === "GET"
    ? [200, {}, JSON.stringify(CATALOGUE)] : [401, {}, JSON.stringify({detail: "bad key"})]);
  t.after(() => refusing.close());
  const store = new MemoryStore();
  const r = new Reporter(refusing.url, {...quiet, token: "revoked", metrics: DECLARED, store,
                                        retry: {backoff: 10}});
  for (let i = 0; i < 30; i++) r.report("dark_mode", i % 2 === 0);
  assert.equal(await r.flush(700), false);
  assert.equal(r.stats().keyRefused, true);
  assert.equal(r.stats().deadLettered, 0);
  assert.equal(r.stats().queued, 30);
  assert.match(r.lastError, /401/);
  await r.close(100);
  const c = collectorLike();
  const good = await startServer(c.answer);
  t.after(() => good.close());
  const fixed = new Reporter(good.url, {...quiet, token: "valid", metrics: DECLARED, store});
  assert.equal(await fixed.close(5000), true);
  assert.equal(c.counted().length, 30);
});

test("a batch the collector can never accept is dead-lettered, and can be retried", async (t) => {
  let refuse = true;
  const c = collectorLike();
  const server = await startServer((req, body) => req.method === "POST" && refuse
    ? [422, {}, JSON.stringify({detail: "not registered"})] : c.answer(req, body));
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store: new MemoryStore()});
  r.report("dark_mode", true);
  assert.equal(await r.flush(3000), true);
  assert.equal(r.stats().deadLettered, 1);
  assert.equal(r.deadLetters()[0].status, 422);
  refuse = false;
  assert.equal(await r.retryDeadLetters(), 1);
  assert.equal(await r.close(3000), true);
  assert.equal(c.counted().length, 1);
});

test("Retry-After is obeyed: the retry comes no sooner", async (t) => {
  let first = true;
  const c = collectorLike();
  const server = await startServer((req, body) => {
    if (req.method === "POST" && first) {
      first = false;
      return [503, {"Retry-After": "1"}, "{}"];
    }
    return c.answer(req, body);
  });
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store: new MemoryStore(),
                                      retry: {backoff: 1}});
  r.report("feature_x_enabled", false);
  assert.equal(await r.close(5000), true);
  assert.equal(server.posts.length, 2);
  assert.ok(server.posts[1].at - server.posts[0].at >= 950);
  assert.equal(c.counted().length, 1);
});

test("backoff: full jitter under a doubling cap, Retry-After a floor", () => {
  const retry = {...DEFAULT_RETRY, backoff: 100, maxBackoff: 1000, maxRetryAfter: 5000};
  assert.equal(backoffDelay(1, retry, retry.maxBackoff, undefined, () => 0.999), 99.9);
  assert.equal(backoffDelay(3, retry, retry.maxBackoff, undefined, () => 0.5), 200);
  assert.equal(backoffDelay(30, retry, retry.maxBackoff, undefined, () => 0.5), 500);
  assert.equal(backoffDelay(1, retry, retry.maxBackoff, 3000, () => 0.5), 3000);
  assert.equal(backoffDelay(1, retry, retry.maxBackoff, 10_000, () => 0.5), 5000);
  assert.equal(parseRetryAfter("7"), 7000);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(null), undefined);
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now), 30_000);
});

test("Node storage: queue and secret files are 0600 and survive a restart", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "deniable-node-"));
  const stalled = await startServer(() => null);
  t.after(() => stalled.close());
  const r = new Reporter(stalled.url, {...quiet, metrics: DECLARED, timeout: 200,
                                       ...nodeStorage(dir)});
  for (let i = 0; i < 7; i++) r.report("dark_mode", true);
  assert.equal(await r.close(400), false);
  assert.equal(statSync(join(dir, "queue.json")).mode & 0o777, 0o600);
  assert.equal(statSync(join(dir, "privacy", "secret")).mode & 0o777, 0o600);
  assert.equal(statSync(join(dir, "privacy", "secret")).size, 32);
  const queued = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8")).queue;
  assert.equal(queued.batches.length, 1);
  assert.ok(!readFileSync(join(dir, "queue.json"), "utf8").includes("true"));
  const c = collectorLike();
  const good = await startServer(c.answer);
  t.after(() => good.close());
  const again = new Reporter(good.url, {...quiet, metrics: DECLARED, ...nodeStorage(dir)});
  assert.equal(await again.close(5000), true);
  assert.deepEqual([...c.seen.keys()], [queued.batches[0].id]);
  assert.equal(c.counted().length, 7);
});

test("declared metrics are a privacy floor: never a registered mechanism with a larger epsilon",
     async (t) => {
  // The collector registers dark_mode as rr:3/4:1/2 (epsilon ln 7) and feature_x_enabled as
  // rr:1/2:1/2 (ln 3); the app declared rr:1/2:1/2 (ln 3) and rr:3/4:1/2 (ln 7).
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const logged = [];
  const r = new Reporter(server.url, {
    log: (m) => logged.push(m), onePerPeriod: false, store: new MemoryStore(),
    metrics: {dark_mode: "rr:1/2:1/2", feature_x_enabled: "rr:3/4:1/2"}});
  assert.equal(await r.waitReady(5000), true);
  for (let i = 0; i < 50 && Object.keys(r.stats().mechanismMismatch).length < 2; i++) {
    await sleep(20);  // the registry arrives in the background
  }
  assert.deepEqual(r.stats().mechanismMismatch, {
    dark_mode: {declared: "rr:1/2:1/2", registered: "rr:3/4:1/2", using: "rr:1/2:1/2"},
    feature_x_enabled: {declared: "rr:3/4:1/2", registered: "rr:1/2:1/2", using: "rr:1/2:1/2"},
  });
  assert.deepEqual(r.metrics, {dark_mode: "rr:1/2:1/2", feature_x_enabled: "rr:1/2:1/2"});
  assert.equal(logged.filter((m) => m.includes("dark_mode")).length, 1);  // said once
  r.report("dark_mode", true);
  r.report("feature_x_enabled", true);
  assert.equal(await r.close(5000), true);
  assert.ok(c.counted().every((x) => x.mechanism === "rr:1/2:1/2"));
});
