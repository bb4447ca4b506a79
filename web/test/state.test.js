// No silent in-memory state (issue 27): without a durable store (Node without nodeStorage, a
// browser without IndexedDB: the same default, defaultStore()), reports that need state
// lasting across restarts (memoized answers, the cap's ledger, the period gate) are refused and
// counted, with a warning; an app that asks for memory by name (store: new MemoryStore()) gets
// it, with a warning; nodeStorage warns of nothing.
import assert from "node:assert/strict";
import {mkdtempSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {MemoryStore, Reporter} from "../dist/index.js";
import {Reporter as AllReporter} from "../dist/all.js";
import {nodeStorage} from "../dist/node.js";
import {CATALOGUE, collectorLike, declarations, startServer} from "./helpers.js";

const metrics = declarations(CATALOGUE);

async function collector(t) {
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  return {url: server.url, counted: c.counted};
}

for (const [entry, R] of [["default", Reporter], ["all", AllReporter]]) {
  test(`${entry}: no durable store refuses memoized and gated reports, says so once`, async (t) => {
    assert.equal(globalThis.indexedDB, undefined);
    const {url, counted} = await collector(t);
    const lines = [];
    const r = new R(url, {log: (l) => lines.push(l), metrics});
    assert.equal(await r.waitReady(5000), true);
    for (let i = 0; i < 5; i++) r.report("dark_mode", true);
    assert.equal(await r.close(5000), true);
    assert.equal(counted().length, 0);
    assert.equal(r.stats().droppedNoState, 5);
    const said = lines.filter((l) => l.includes("no durable store"));
    assert.equal(said.length, 1, lines.join("\n"));
    assert.match(said[0], /nodeStorage\(dir\)/);
    // Fresh coins without the period gate need no state: sent.
    const fresh = new R(url, {log: () => undefined, metrics, fresh: ["feature_x_enabled"],
                              onePerPeriod: false});
    assert.equal(await fresh.waitReady(5000), true);
    fresh.report("feature_x_enabled", true);
    fresh.report("dark_mode", true);
    assert.equal(await fresh.close(5000), true);
    assert.deepEqual(counted().map((x) => x.metric), ["feature_x_enabled"]);
    assert.equal(fresh.stats().droppedNoState, 1);
  });

  test(`${entry}: state in memory when the app asks for it by name, with a warning`, async (t) => {
    const {url, counted} = await collector(t);
    const lines = [];
    const r = new R(url, {log: (l) => lines.push(l), metrics, store: new MemoryStore()});
    assert.equal(await r.waitReady(5000), true);
    r.report("dark_mode", true);
    assert.equal(await r.close(5000), true);
    assert.equal(counted().length, 1);
    assert.equal(r.stats().droppedNoState, 0);
    assert.equal(lines.filter((l) => /last one process/.test(l)).length, 1, lines.join("\n"));
    const dir = mkdtempSync(join(tmpdir(), "deniable-state-"));
    const quiet = [];
    const durable = new R(url, {log: (l) => quiet.push(l), metrics, ...nodeStorage(dir)});
    assert.equal(await durable.waitReady(5000), true);
    durable.report("dark_mode", true);
    assert.equal(await durable.close(5000), true);
    assert.equal(counted().length, 2);
    assert.deepEqual(quiet, []);
  });
}
