// Per-metric acceptance (issue 30 item 1): batches go with `Prefer: handling=lenient`; the
// metrics the collector lists as `refused` are kept apart as dead letters of their own, with
// its reason, counted in stats() and retried by retryDeadLetters(); the rest counts as sent.
import assert from "node:assert/strict";
import {test} from "node:test";

import {MemoryStore, Reporter} from "../dist/index.js";
import {Reporter as AllReporter} from "../dist/all.js";
import {collectorLike, startServer} from "./helpers.js";

const quiet = {log: () => undefined, onePerPeriod: false};
const DECLARED = {feature_x_enabled: "rr:1/2:1/2", dark_mode: "rr:3/4:1/2"};
const WHY = "/reports/0/mechanism mechanism rr:3/4:1/2 is not registered for dark_mode";

/**
 * A collector-like server that, while `refusing.on`, refuses dark_mode's reports per metric
 * (202 with the others counted, or 422 when a batch holds nothing else).
 */
function lenientCollector() {
  const c = collectorLike();
  const refusing = {on: true};
  const answer = (req, body) => {
    if (req.method !== "POST" || !refusing.on) return c.answer(req, body);
    const doc = JSON.parse(body);
    const bad = doc.reports.filter((r) => r.metric === "dark_mode");
    const good = doc.reports.filter((r) => r.metric !== "dark_mode");
    const refused = bad.length ? [{metric: "dark_mode", reports: bad.length, problems: [
      {pointer: "/reports/0/mechanism", detail: "mechanism rr:3/4:1/2 is not registered for dark_mode"}]}] : [];
    if (!good.length) return [422, {}, JSON.stringify({detail: "every metric refused", refused})];
    c.seen.set(doc.batch_id, good);
    return [202, {}, JSON.stringify({accepted: good.length, refused})];
  };
  return {...c, refusing, answer};
}

for (const [entry, Make] of [["default", Reporter], ["all", AllReporter]]) {
  test(`${entry} entry: a refused metric's reports are kept apart, the rest counts as sent`, async (t) => {
    const c = lenientCollector();
    const server = await startServer(c.answer);
    t.after(() => server.close());
    const logged = [];
    const r = new Make(server.url, {...quiet, log: (m) => logged.push(m), metrics: DECLARED,
                                    store: new MemoryStore()});
    for (let i = 0; i < 5; i++) r.report("feature_x_enabled", i % 2 === 0);
    for (let i = 0; i < 3; i++) r.report("dark_mode", true);
    assert.equal(await r.flush(5000), true);
    assert.ok(server.posts.length >= 1);
    for (const post of server.posts) assert.equal(post.headers.prefer, "handling=lenient");
    assert.equal(c.counted().length, 5);
    const s = r.stats();
    assert.equal(s.sent, 5);
    assert.equal(s.refused, 3);
    assert.equal(s.deadLettered, 0);
    assert.deepEqual(s.refusedMetrics, {dark_mode: WHY});
    const dead = r.deadLetters();
    assert.equal(dead.length, 1);
    assert.equal(dead[0].metric, "dark_mode");
    assert.equal(dead[0].n, 3);
    assert.equal(dead[0].status, 202);
    assert.equal(dead[0].reason, WHY);
    const kept = JSON.parse(dead[0].body);
    assert.equal(kept.batch_id, dead[0].id);
    assert.ok(!server.posts.some((p) => JSON.parse(p.body).batch_id === dead[0].id));  // a new id
    assert.deepEqual(kept.reports.map((x) => x.metric), ["dark_mode", "dark_mode", "dark_mode"]);
    assert.equal(logged.filter((m) => m.includes("dark_mode")).length, 1);

    // A batch of dark_mode only: 422 with `refused`, kept per metric the same way.
    r.report("dark_mode", false);
    assert.equal(await r.flush(5000), true);
    assert.equal(r.stats().refused, 4);
    assert.equal(r.deadLetters().at(-1).status, 422);
    assert.equal(r.stats().sent, 5);

    // Once the collector registers the mechanism, the kept reports are counted, once each.
    c.refusing.on = false;
    assert.equal(await r.retryDeadLetters(), 2);
    assert.equal(await r.close(5000), true);
    const s2 = r.stats();
    assert.equal(s2.refused, 0);
    assert.deepEqual(s2.refusedMetrics, {});
    assert.equal(s2.sent, 9);
    assert.equal(c.counted().filter((x) => x.metric === "dark_mode").length, 4);
    assert.equal(c.counted().length, 9);
  });
}

test("a 422 without `refused` still dead-letters the whole batch", async (t) => {
  const c = collectorLike();
  const server = await startServer((req, body) => req.method === "POST"
    ? [422, {}, JSON.stringify({detail: "bad batch"})] : c.answer(req, body));
  t.after(() => server.close());
  const r = new Reporter(server.url, {...quiet, metrics: DECLARED, store: new MemoryStore()});
  r.report("dark_mode", true);
  r.report("feature_x_enabled", true);
  assert.equal(await r.flush(5000), true);
  const s = r.stats();
  assert.equal(s.deadLettered, 2);
  assert.equal(s.refused, 0);
  assert.equal(r.deadLetters()[0].metric, undefined);
  await r.close(1000);
});
