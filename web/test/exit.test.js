// Node's exit hook (issue 27): a script that reports and never calls close() still sends its
// reports when its event loop empties (beforeExit), and exits within exitTimeout when the
// collector does not answer, as the Python client's atexit hook does.
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {mkdtempSync, readFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";

import {collectorLike, startServer} from "./helpers.js";

const DIST = new URL("../dist/", import.meta.url).href;

/** Run a module in a child Node; resolves with its exit code and how long it took (ms). */
function run(source) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn(process.execPath, ["--input-type=module", "-e", source],
                        {stdio: ["ignore", "ignore", "pipe"]});
    let stderr = "";
    child.stderr.on("data", (d) => { stderr += d; });
    child.on("error", reject);
    child.on("exit", (code) => resolve({code, took: Date.now() - started, stderr}));
  });
}

const script = (url, dir, exitTimeout, timeout = 10000) => `
  import {Reporter} from "${DIST}index.js";
  import {nodeStorage} from "${DIST}node.js";
  const r = new Reporter(${JSON.stringify(url)}, {log: () => undefined, exitTimeout: ${exitTimeout}, timeout: ${timeout},
    metrics: {dark_mode: "rr:3/4:1/2"}, retry: {backoff: 50}, ...nodeStorage(${JSON.stringify(dir)})});
  r.report("dark_mode", true);   // and no close(): the exit hook sends it
`;

test("a script that never calls close() sends its reports at exit", async (t) => {
  const c = collectorLike();
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const dir = mkdtempSync(join(tmpdir(), "deniable-exit-"));
  const done = await run(script(server.url, dir, 5000));
  assert.equal(done.code, 0, done.stderr);
  assert.equal(c.counted().length, 1);
  const state = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8"));
  assert.equal(state.queue.counters.sent, 1);
});

test("the exit hook waits at most exitTimeout for a collector that does not answer", async (t) => {
  const stalled = await startServer(() => null);
  t.after(() => stalled.close());
  const dir = mkdtempSync(join(tmpdir(), "deniable-exit-"));
  // A request in flight keeps Node's event loop busy until its timeout (500 ms here), then the
  // hook waits 300 ms more: with Node's start, about 1 s, far below closeTimeout's 10 s.
  const done = await run(script(stalled.url, dir, 300, 500));
  assert.equal(done.code, 0, done.stderr);
  assert.ok(done.took < 5000, `took ${done.took} ms`);
  const state = JSON.parse(readFileSync(join(dir, "queue.json"), "utf8"));
  assert.equal(state.queue.batches.length, 1);  // kept, sealed, for the next run
});
