// The shared test vectors (tests/vectors/vectors.json, written from the Python client) checked
// entry by entry against the TypeScript code: a change on either side fails until both agree.
import assert from "node:assert/strict";
import {test} from "node:test";

import {RandomizedResponse, WireFormatError, InvalidParameterError} from "../dist/index.js";
import {fromHex, source, vectors} from "./vectors.js";
import {parseCatalogue} from "../dist/catalogue.js";
import {fracToString, parseFraction} from "../dist/fraction.js";
import {zScore} from "../dist/mechanism.js";
import {importSecret, memoBit, memoContext} from "../dist/memo.js";
import {below} from "../dist/random.js";
import {ledgerTag, tagContext} from "../dist/tags.js";
import {encodeBatch} from "../dist/wire.js";

const hex = (bytes) => Buffer.from(bytes).toString("hex");


const close = (actual, expected, what) =>
  assert.ok(Math.abs(actual - expected) <= 1e-12 * Math.max(1, Math.abs(expected)),
            `${what}: ${actual} != ${expected}`);

test("vectors: there are some of every kind", () => {
  for (const name of ["mechanisms", "invalid_ids", "bits", "below", "perturb", "memo", "wire",
                      "estimates"]) {
    assert.ok(vectors[name].length > 0, name);
  }
});

test("vectors: mechanisms' ids, exact probabilities and epsilon", () => {
  for (const v of vectors.mechanisms) {
    const m = RandomizedResponse.fromId(v.id);
    assert.equal(m.id, v.id);
    assert.equal(fracToString(m.truth), v.truth);
    assert.equal(fracToString(m.forcedYes), v.forced_yes);
    assert.equal(fracToString(m.pYesGivenYes), v.p_yes_given_yes);
    assert.equal(fracToString(m.pYesGivenNo), v.p_yes_given_no);
    assert.equal(fracToString(m.likelihoodRatio), v.likelihood_ratio);
    close(m.epsilon, v.epsilon, `epsilon of ${v.id}`);
    assert.equal(new RandomizedResponse(v.truth, v.forced_yes).id, v.id);
  }
});

test("vectors: non-canonical or invalid ids are refused", () => {
  for (const id of vectors.invalid_ids) {
    assert.throws(() => RandomizedResponse.fromId(id), InvalidParameterError, JSON.stringify(id));
  }
});

test("vectors: raw bit draws agree word for word (k up to 64)", () => {
  for (const v of vectors.bits) {
    const s = source(v.words);
    assert.deepEqual(v.ks.map((k) => String(k <= 32 ? s.bits(k) : s.bigBits(k))), v.outputs);
  }
});

test("vectors: below() rejects and redraws exactly as Python", () => {
  for (const v of vectors.below) {
    const s = source(v.words);
    assert.deepEqual(v.bounds.map((b) => String(below(s, BigInt(b)))), v.outputs);
  }
});

test("vectors: perturb() gives the same outputs for the same random words", () => {
  for (const v of vectors.perturb) {
    const m = RandomizedResponse.fromId(v.mechanism);
    const s = source(v.words);
    assert.deepEqual(v.true_bits.map((bit) => m.perturb(bit, s)), v.outputs, v.mechanism);
  }
});

test("vectors: memoized answers from the same secret are the same", async () => {
  const keys = new Map();
  for (const v of vectors.memo) {
    if (!keys.has(v.secret)) keys.set(v.secret, await importSecret(fromHex(v.secret)));
    const m = RandomizedResponse.fromId(v.mechanism);
    assert.equal(hex(memoContext("prr", v.metric, v.mechanism, v.true_bit)), v.context);
    assert.equal(await memoBit(keys.get(v.secret), v.metric, m, v.true_bit), v.bit,
                 `${v.metric} ${v.mechanism} ${v.true_bit}`);
  }
});

test("vectors: batches encode to the same bytes", async () => {
  for (const v of vectors.wire) {
    const body = encodeBatch(v.batch_id, v.reports);
    assert.equal(body, v.body);
    const digest = Buffer.from(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(body)));
    assert.equal(digest.toString("hex"), v.sha256);
  }
});

test("vectors: catalogues parse alike, and tampered ones are refused", () => {
  const parsed = parseCatalogue(vectors.catalogue.good);
  assert.deepEqual(Object.fromEntries([...parsed].map(([k, m]) => [k, m.id])),
                   vectors.catalogue.parsed);
  for (const doc of vectors.catalogue.bad) {
    assert.throws(() => parseCatalogue(doc), WireFormatError, JSON.stringify(doc).slice(0, 80));
  }
});

test("vectors: a catalogue of every kind keeps its boolean metrics and leaves the rest out", () => {
  const v = vectors.catalogue_kinds;
  const skipped = {};
  const parsed = parseCatalogue(v.doc, (name, kind) => { skipped[name] = kind; });
  assert.deepEqual(Object.fromEntries([...parsed].map(([k, m]) => [k, m.id])), v.boolean);
  assert.deepEqual(skipped, v.skipped);
  // Without a callback the other kinds are left out all the same.
  assert.deepEqual([...parseCatalogue(v.doc).keys()], Object.keys(v.boolean));
  // A tampered boolean entry beside them is still refused.
  const tampered = structuredClone(v.doc);
  tampered.metrics.find((e) => e.name === "dark_mode").p_yes_given_yes = "7/8";
  assert.throws(() => parseCatalogue(tampered), WireFormatError);
  // An entry that calls itself boolean but is not randomized response is left out too.
  const odd = {metrics: [{...v.doc.metrics.find((e) => e.name === "startup_ms"),
                          kind: "boolean"}]};
  assert.equal(parseCatalogue(odd).size, 0);
});

test("vectors: estimator values", () => {
  for (const v of vectors.estimates) {
    const m = RandomizedResponse.fromId(v.mechanism);
    const e = m.estimate(v.ones, v.n, v.confidence);
    const what = `${v.mechanism} ${v.ones}/${v.n}`;
    close(zScore(v.confidence), v.z, `z ${what}`);
    assert.equal(fracToString(m.debias(parseFraction(`${v.ones}/${v.n}`))), v.debiased);
    for (const [ours, theirs] of [["yesRate", "yes_rate"], ["value", "value"],
                                  ["unclipped", "unclipped"], ["stderr", "stderr"],
                                  ["ciLow", "ci_low"], ["ciHigh", "ci_high"]]) {
      close(e[ours], v[theirs], `${ours} ${what}`);
    }
    assert.equal(e.clipped, v.clipped, what);
    assert.equal(e.wide, v.wide, what);
  }
});

test("vectors: ledger tags are the Python ledger's HMAC tags under the same secret", async () => {
  const keys = new Map();
  assert.ok(vectors.ledger_tags.length > 0);
  for (const v of vectors.ledger_tags) {
    if (!keys.has(v.secret)) keys.set(v.secret, await importSecret(fromHex(v.secret)));
    assert.equal(hex(tagContext(v.metric, v.mechanism, v.key)), v.context,
                 `context of ${v.metric} ${v.mechanism} ${v.key}`);
    assert.equal(await ledgerTag(keys.get(v.secret), v.metric, v.mechanism, v.key), v.tag);
  }
});
