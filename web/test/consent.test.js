// Consent (issue 30, the web side): setEnabled(false) stops collection, drops what is queued and
// deletes the device's local state (secret, ledger, period gate, queue, cached catalogue),
// leaving a marker that keeps later Reporters on the same store off; setEnabled(true) resumes
// as a new device.
import assert from "node:assert/strict";
import {existsSync, mkdtempSync, readFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {InvalidParameterError, Reporter} from "../dist/index.js";
import {Reporter as AllReporter} from "../dist/all.js";
import {nodeStorage} from "../dist/node.js";
import {CATALOGUE, collectorLike, declarations, startServer} from "./helpers.js";

for (const [entry, R] of [["default", Reporter], ["all", AllReporter]]) {
  test(`${entry}: setEnabled(false) drops the queue, deletes local state, stays off`, async (t) => {
    const c = collectorLike();
    let open = false;  // the collector refuses (503) until opened: reports stay queued
    const server = await startServer((req, body) => (req.method === "GET" || open ?
      c.answer(req, body) : [503, {}, "{}"]));
    t.after(() => server.close());
    const dir = mkdtempSync(join(tmpdir(), "deniable-consent-"));
    const secretPath = join(dir, "privacy", "secret");
    const opts = {log: () => undefined, metrics: declarations(CATALOGUE), ...nodeStorage(dir), retry: {backoff: 20, maxBackoff: 50}};
    const r = new R(server.url, opts);
    assert.equal(await r.waitReady(5000), true);
    r.report("dark_mode", true);
    r.report("feature_x_enabled", false);
    assert.equal(await r.flush(300), false);       // queued, sealed, refused for now
    const before = readFileSync(secretPath);
    const state = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8"));
    assert.deepEqual(Object.keys(state).sort(), ["catalogue", "ledger", "periods", "queue"]);
    await assert.rejects(r.setEnabled("no"), InvalidParameterError);
    await r.setEnabled(false);
    assert.equal(r.stats().queued, 0);
    assert.deepEqual(JSON.parse(readFileSync(join(dir, "queue.json"), "utf8")), {enabled: false});
    assert.equal(existsSync(secretPath), false);
    open = true;
    r.report("dark_mode", false);                  // a no-op
    assert.equal(await r.close(2000), true);
    assert.equal(c.counted().length, 0);
    // A restart on the same directory stays off and creates no secret.
    const again = new R(server.url, opts);
    assert.equal(await again.waitReady(5000), true);
    again.report("dark_mode", true);
    assert.equal(await again.flush(2000), true);
    assert.equal(c.counted().length, 0);
    assert.equal(existsSync(secretPath), false);
    // Consent given again: a new device (a new secret), reporting.
    await again.setEnabled(true);
    again.report("dark_mode", true);
    assert.equal(await again.close(5000), true);
    assert.deepEqual(c.counted().map((x) => x.metric), ["dark_mode"]);
    assert.notDeepEqual(readFileSync(secretPath), before);
    const after = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8"));
    assert.equal(after.enabled, undefined);
  });
}
