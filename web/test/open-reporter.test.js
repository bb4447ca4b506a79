// Open metrics (kind "open", od:) through deniable-client/all's Reporter against a loopback
// collector: memoized answers keyed by the padded bytes, the wire field "cell", fresh reports,
// refusals, the cap's substitution, and the declaration's max_bytes.
import assert from "node:assert/strict";
import {createHmac} from "node:crypto";
import {test} from "node:test";

import {InvalidParameterError, MemoryStore, OpenDomainSketch, Reporter} from "../dist/all.js";
import {collectorLike, startServer} from "./helpers.js";
import {memoPrefix} from "../dist/kinds.js";
import {BlockBits, importSecret} from "../dist/memo.js";
import {normalise} from "../dist/open.js";
import {encodeBatch} from "../dist/wire.js";

const quiet = {log: () => undefined, onePerPeriod: false};
const ID = "od:8:1:64:3:1/2";  // epsilon = ln 2, under the default ceiling ln 9
const sketch = OpenDomainSketch.fromId(ID);
const DOC = {metrics: [{name: "crash_sig", description: "", kind: "open", mechanism: ID,
                        max_bytes: 8, p1: "1/2", q: "1/4", epsilon: sketch.epsilon,
                        memoization: "memoized", instantaneous: null, period: "day"}]};
const DECLARED = {crash_sig: {kind: "open", mechanism: ID, max_bytes: 8}};
const SECRET = new Uint8Array(32).map((_, i) => 3 * i + 5);
const fixedSecret = () => ({load: () => importSecret(SECRET)});

/**
 * The memoized cell of `value`, derived here from its definition (Python's memo.string_answer):
 * perturbPadded over the HMAC-SHA256 stream of (secret, prefix("prr", metric, id) || padded),
 * block i keyed by a big-endian uint64 counter, computed with node:crypto.
 */
function memoCell(metric, value) {
  const context = Buffer.concat([memoPrefix("prr", metric, ID), normalise(value, 8)]);
  const blocks = [];
  for (let i = 0n; i < 64n; i++) {
    const counter = Buffer.alloc(8);
    counter.writeBigUInt64BE(i);
    blocks.push(new Uint8Array(createHmac("sha256", SECRET).update(context).update(counter)
      .digest()));
  }
  return sketch.perturbPadded(normalise(value, 8), new BlockBits(blocks));
}

/** The ledger tag of `value` (Python's memo.string_tag), derived here with node:crypto. */
function tagOf(metric, value) {
  return createHmac("sha256", SECRET).update(memoPrefix("tag", metric, ID))
    .update(normalise(value, 8)).digest("hex").slice(0, 32);
}

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

test("an open metric is reported memoized by its normalised bytes, as {cell: n}", async () => {
  const {sent} = await run({}, ["crash:m1", "Cafe\u0301", "crash:m1", "Caf\u00e9", "x"]);
  assert.equal(sent.length, 5);
  for (const x of sent) {
    assert.deepEqual(Object.keys(x), ["metric", "mechanism", "cell"]);
    assert.equal(x.mechanism, ID);
  }
  const want = ["crash:m1", "Caf\u00e9", "crash:m1", "Caf\u00e9", "x"]
    .map((v) => memoCell("crash_sig", v));
  assert.deepEqual(sent.map((x) => x.cell).sort(), want.sort());
  // NFD and NFC spell one string: one answer. The wire spells it as Python does.
  assert.equal(memoCell("crash_sig", "Cafe\u0301"), memoCell("crash_sig", "Caf\u00e9"));
  assert.equal(encodeBatch("0".repeat(32), [["crash_sig", ID, 7]]),
               `{"batch_id":"${"0".repeat(32)}","reports":[{"metric":"crash_sig",` +
               `"mechanism":"${ID}","cell":7}]}`);
});

test("a fresh open metric draws every report anew, within [0, cells)", async () => {
  const {sent} = await run({fresh: ["crash_sig"]}, Array(40).fill("crash:m1"));
  assert.equal(sent.length, 40);
  for (const x of sent) assert.ok(Number.isInteger(x.cell) && x.cell >= 0 && x.cell < sketch.cells);
  // 40 fresh draws over 192 cells all equal: probability far below 1e-60.
  assert.ok(new Set(sent.map((x) => x.cell)).size > 1);
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

test("past the cap, a new string is sent as the lowest-tag paid answer, never its own", async () => {
  // ln 2 per string, cap 1 nat: the first string is paid, every later new one refused.
  const {sent, ledger} = await run({maxMetricEpsilon: 1}, ["first", "second", "third", "first"]);
  const first = memoCell("crash_sig", "first");
  assert.deepEqual(sent.map((x) => x.cell), [first, first, first, first]);
  // The ledger names the paid string by its tag only (Python's string_tag), never the value.
  assert.ok(ledger.includes(tagOf("crash_sig", "first")), ledger);
  assert.ok(!ledger.includes(tagOf("crash_sig", "second")) && !ledger.includes("first"), ledger);
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
