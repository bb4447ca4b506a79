// The instantaneous layer (RAPPOR's IRR) of boolean metrics in deniable-client/all, as the
// Python guard has it: the shared vectors (layers, permanent answers, ledger tags, the fresh
// draws of the layer, draw for draw), the same through the Reporter to a loopback collector,
// the default entry's refusal, and the frequencies the collector debiases with.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as core from "../dist/index.js";
import {InvalidParameterError, MemoryStore, PrivacyLoss, RandomizedResponse, Reporter} from "../dist/all.js";
import {collectorLike, startServer} from "./helpers.js";
import {fromHex, source, vectors} from "./vectors.js";
import {fracToString} from "../dist/fraction.js";
import {split} from "../dist/layers.js";
import {importSecret, memoBit, newSecretKey} from "../dist/memo.js";
import {ledgerTag} from "../dist/tags.js";

const {layered, unreachable} = vectors.instantaneous;
const rr = (id) => RandomizedResponse.fromId(id);
const table = (wire, irr) => ({mechanism: wire, memoization: "instantaneous", instantaneous: irr});
/** A served boolean entry with an instantaneous layer, as describe_metric writes it. */
function served(name, wire, irr) {
  const m = rr(wire);
  const [p1, q] = [fracToString(m.pYesGivenYes), fracToString(m.pYesGivenNo)];
  return {name, description: "", kind: "boolean", mechanism: wire, p_yes_given_yes: p1,
          p_yes_given_no: q, p1, q, epsilon: m.epsilon, memoization: "instantaneous",
          instantaneous: irr, period: "day"};
}

test("instantaneous vectors: the memo layer, its answers and tags, then the layer's draws", async () => {
  assert.ok(layered.length >= 20);
  for (const v of layered) {
    const memo = split(rr(v.wire), rr(v.instantaneous));
    assert.equal(memo.id, v.memo);
    const key = await importSecret(fromHex(v.secret));
    const answers = [await memoBit(key, v.metric, memo, 0), await memoBit(key, v.metric, memo, 1)];
    assert.deepEqual(answers, v.answers);
    assert.deepEqual([await ledgerTag(key, v.metric, memo.id, 0),
                      await ledgerTag(key, v.metric, memo.id, 1)], v.tags);
    const s = source(v.words);
    const irr = rr(v.instantaneous);
    assert.deepEqual(v.true_bits.map((b) => irr.perturb(answers[b], s)), v.outputs);
  }
  for (const {wire, instantaneous} of unreachable) {
    assert.throws(() => split(rr(wire), rr(instantaneous)), InvalidParameterError);
    assert.throws(() => new Reporter("http://127.0.0.1:9", {
      log: () => undefined, store: new MemoryStore(), metrics: {m: table(wire, instantaneous)}}),
    (e) => e instanceof InvalidParameterError && e.message.startsWith("metric 'm': instantaneous:"));
  }
});

test("instantaneous vectors replay through the Reporter: the collector gets the same bits", async (t) => {
  for (const v of layered.filter((_, i) => i % 4 === 0)) {
    const c = collectorLike({metrics: [served(v.metric, v.wire, v.instantaneous)]});
    const server = await startServer(c.answer);
    t.after(() => server.close());
    const key = await importSecret(fromHex(v.secret));
    const r = new Reporter(server.url, {
      log: () => undefined, store: new MemoryStore(), rng: source(v.words),
      secret: {load: async () => key, clear: async () => undefined},
      metrics: {[v.metric]: table(v.wire, v.instantaneous)}, onePerPeriod: false,
      maxMetricEpsilon: Infinity, flushOnHide: false});
    assert.equal(await r.waitReady(5000), true);  // the catalogue served and followed
    for (const b of v.true_bits) r.report(v.metric, b === 1);
    assert.equal(await r.close(5000), true);
    assert.deepEqual(c.counted().map((x) => x.bit), v.outputs, v.wire);
    assert.deepEqual(new Set(c.counted().map((x) => x.mechanism)), new Set([v.wire]));
    assert.deepEqual(r.stats().ignoredServed, {});
  }
});

test("privacy_loss vectors with an instantaneous layer: Python's layered statements", () => {
  const withLayer = vectors.privacy_loss.filter((v) => v.instantaneous);
  assert.ok(withLayer.length >= 5);
  const close = (a, b) => Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(b));
  for (const v of withLayer) {
    const loss = new PrivacyLoss("m", rr(v.mechanism), true, rr(v.instantaneous));
    assert.ok(close(loss.oneReportEpsilon, v.one_report_epsilon), v.mechanism);
    assert.ok(close(loss.longRunEpsilon, v.long_run_epsilon), v.mechanism);
    assert.ok(close(loss.costPerNewValue, v.cost_per_new_value), v.mechanism);
    assert.equal(fracToString(loss.pAnswersDiffer), v.p_answers_differ, v.mechanism);
    [0, 1, 2, 3, 10, 100].forEach((n, i) => assert.ok(close(loss.after(n), v.after[i]), `${v.mechanism} after ${n}`));
    assert.ok(loss.valueChange.endsWith("the more sharply the more reports there are."));
    assert.equal(loss.valueChange, v.value_change);
  }
});

test("the declaration: all takes the layer as Python does; the default entry names all", () => {
  const decl = {flag: table("rr:1/2:1/2", "rr:3/4:1/2")};
  const r = new Reporter("http://127.0.0.1:9", {log: () => undefined, store: new MemoryStore(), metrics: decl});
  const loss = r.privacyLoss("flag");
  assert.equal(loss.irr.id, "rr:3/4:1/2");
  assert.ok(loss.longRunEpsilon > loss.oneReportEpsilon);  // the memo layer is less noisy
  assert.throws(() => new core.Reporter("http://127.0.0.1:9", {store: new MemoryStore(), metrics: decl}),
                (e) => e instanceof InvalidParameterError &&
                  /^metric 'flag': instantaneous: in deniable-client\/all only/.test(e.message));
  assert.throws(() => new Reporter("http://127.0.0.1:9", {store: new MemoryStore(), metrics: decl,
                                                          fresh: ["flag"]}),
                (e) => e instanceof InvalidParameterError && e.message.startsWith("metric 'flag': instantaneous:"));
  void r.close(100);
});

test("frequencies: reports follow the wire mechanism across devices, the layer within one", async (t) => {
  // Across N devices (a fresh secret each: independent permanent answers), one report of
  // true 1 is 1 with P1_wire = 3/4, of true 0 with Q_wire = 1/4 (rr:1/2:1/2 over the layer
  // rr:3/4:1/2: memo layer rr:2/3:1/2, P1 5/6), drawn as the Reporter draws (memoBit, then
  // the layer's perturb with the secure source; the replay test above shows the Reporter
  // does exactly that). Within one device, n reports of one value through the Reporter are
  // 1 with P1_irr = 7/8 if its permanent answer is 1, else Q_irr = 1/8.
  // Tolerance 5.5 SE for each of the 3 binomial counts (N = 5,000, n = 3,000, p in
  // [1/8, 7/8]): P(|Z| > 5.5) = 3.8e-8 each, so a false failure has probability
  // < 3 * 3.8e-8 ~ 1.1e-7 (plus the normal approximation's error in those tails, far smaller
  // at these n). A broken layer fails: the memo answer alone gives 5/6, the layer over the
  // true bit 7/8, both more than 5.5 SE (0.034 at N = 5,000) from 3/4.
  const [N, n] = [5000, 3000];
  const wire = rr("rr:1/2:1/2");
  const irr = rr("rr:3/4:1/2");
  const memo = split(wire, irr);
  const within = (count, trials, p) => Math.abs(count - trials * p) <= 5.5 * Math.sqrt(trials * p * (1 - p));
  const counts = [0, 0];
  for (let i = 0; i < N; i++) {
    const key = await newSecretKey();
    for (const v of [0, 1]) counts[v] += irr.perturb(await memoBit(key, "m", memo, v));
  }
  assert.ok(within(counts[1], N, 3 / 4), `${counts[1]} of ${N}`);
  assert.ok(within(counts[0], N, 1 / 4), `${counts[0]} of ${N}`);

  const c = collectorLike({metrics: []});
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const key = await newSecretKey();
  const r = new Reporter(server.url, {
    log: () => undefined, store: new MemoryStore(), metrics: {one: table(wire.id, irr.id)},
    onePerPeriod: false, secret: {load: async () => key, clear: async () => undefined},
    flushOnHide: false, maxEarlyReports: n});  // all wait behind the first, paid once
  for (let i = 0; i < n; i++) r.report("one", true);
  assert.equal(await r.close(20_000), true);
  const sent = c.counted();
  assert.equal(sent.length, n);
  const answer = await memoBit(key, "one", memo, 1);
  const ones = sent.filter((x) => x.bit === 1).length;
  assert.ok(within(ones, n, answer ? 7 / 8 : 1 / 8), `${ones} of ${n}, answer ${answer}`);
});

test("a served version the layer cannot produce is withheld, said once, nothing sent", async (t) => {
  // Declared rr:1/2:1/2 (ln 3) over rr:3/4:1/2 (Q 1/8); served rr:1/4:1/6 (P1 3/8, Q 1/8,
  // likelihood ratio 3: the same question at no larger epsilon, so taken), whose Q is the
  // layer's: no memo layer gives it (Python's guard refuses the split too).
  assert.throws(() => split(rr("rr:1/4:1/6"), rr("rr:3/4:1/2")), InvalidParameterError);
  const c = collectorLike({metrics: [served("flag", "rr:1/4:1/6", "rr:3/4:1/2")]});
  const server = await startServer(c.answer);
  t.after(() => server.close());
  const lines = [];
  const r = new Reporter(server.url, {log: (l) => lines.push(l), store: new MemoryStore(),
                                      metrics: {flag: table("rr:1/2:1/2", "rr:3/4:1/2")},
                                      onePerPeriod: false, flushOnHide: false});
  assert.equal(await r.waitReady(5000), true);
  assert.equal(r.metrics.flag, "rr:1/4:1/6");
  for (let i = 0; i < 5; i++) r.report("flag", i % 2 === 0);
  assert.equal(await r.close(5000), true);
  assert.equal(c.counted().length, 0);
  assert.equal(r.stats().withheld, 5);
  assert.equal(lines.filter((l) => l.includes("'flag' is withheld")).length, 1, lines.join("\n"));
});
