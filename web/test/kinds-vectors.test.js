// The shared test vectors of the kinds beyond boolean (tests/vectors/vectors.json, sections
// kind_*, written from the Python client) checked entry by entry against deniable-client/all.
import assert from "node:assert/strict";
import {test} from "node:test";

import {InvalidParameterError, MetricSpec, WireFormatError} from "../dist/all.js";
import {fromHex, source, vectors} from "./vectors.js";
import {fracToString, parseFraction} from "../dist/fraction.js";
import {alphaThreshold, memoValue, parseAllCatalogue, parseMechanism} from "../dist/kinds.js";
import {importSecret} from "../dist/memo.js";
import {encodeBatch} from "../dist/wire.js";


/** A value the vectors could not write as JSON (NaN, infinities). */
const jsValue = (v) => v !== null && typeof v === "object" && "number" in v ?
  {nan: NaN, inf: Infinity, "-inf": -Infinity}[v.number] : v;

const specOf = (entry) => parseAllCatalogue({metrics: [entry]}).get(entry.name);

test("kind vectors: there are some of every section and kind", () => {
  for (const name of ["kind_mechanisms", "kind_invalid_ids", "kind_perturb", "kind_encode",
                      "kind_memo", "kind_wire"]) {
    assert.ok(vectors[name].length > 0, name);
  }
  const families = new Set(vectors.kind_mechanisms.map((v) => v.id.split(":")[0]));
  assert.deepEqual([...families].sort(), ["bm", "grr", "oue", "ss"]);
});

test("kind vectors: ids, exact channels, likelihood ratios and epsilon", () => {
  for (const v of vectors.kind_mechanisms) {
    const m = parseMechanism(v.id);
    assert.equal(m.id, v.id);
    assert.equal(m.kind, v.kind);
    assert.equal(fracToString(m.p1), v.p1, `p1 of ${v.id}`);
    assert.equal(fracToString(m.q), v.q, `q of ${v.id}`);
    assert.equal(fracToString(m.likelihoodRatio), v.likelihood_ratio, `ratio of ${v.id}`);
    assert.ok(Math.abs(m.epsilon - v.epsilon) <= 1e-12 * Math.max(1, v.epsilon), `eps ${v.id}`);
  }
});

test("kind vectors: the ids Python refuses are refused", () => {
  for (const id of vectors.kind_invalid_ids) {
    assert.throws(() => parseMechanism(id), InvalidParameterError, JSON.stringify(id));
  }
});

test("kind vectors: perturb() reads the same words and gives the same reports", () => {
  for (const v of vectors.kind_perturb) {
    const m = parseMechanism(v.mechanism);
    const s = source(v.words);
    const values = v.values.map((x) => (typeof x === "string" ? parseFraction(x) : x));
    assert.deepEqual(values.map((x) => m.perturb(x, s)), v.outputs, v.mechanism);
    // Every word was read, none more: the next draw needs a word the vector does not have.
    assert.throws(() => s.bigBits(64), /ran out/, `${v.mechanism} left words unread`);
  }
});

test("kind vectors: values encode alike (label -> index, number -> bucket or exact value)", () => {
  for (const v of vectors.kind_encode) {
    const spec = specOf(v.entry);
    assert.ok(spec instanceof MetricSpec, v.entry.name);
    const encoded = v.values.map((x) => spec.encode(x));
    assert.deepEqual(encoded.map((e) => (typeof e === "number" ? e : fracToString(e))),
                     v.encoded, v.entry.name);
    for (const x of v.refused) {
      assert.throws(() => spec.encode(jsValue(x)), (error) => {
        assert.ok(error instanceof InvalidParameterError, String(error));
        // The message never shows a number reported: it is the user's secret.
        if (typeof x === "number" && spec.kind !== "categorical") {
          assert.ok(!error.message.includes(String(x)), error.message);
        }
        return true;
      }, `${v.entry.name} took ${JSON.stringify(x)}`);
    }
  }
});

test("kind vectors: memoized answers from the same secret are the same", async () => {
  const keys = new Map();
  for (const v of vectors.kind_memo) {
    if (!keys.has(v.secret)) keys.set(v.secret, await importSecret(fromHex(v.secret)));
    const secret = keys.get(v.secret);
    const spec = specOf(v.entry);
    const encoded = spec.encode(v.value);
    if (v.alpha !== null) {
      const alpha = await alphaThreshold(secret, v.metric);
      assert.equal(String(alpha), v.alpha);
      assert.equal(spec.memoKey(encoded, alpha), v.key, `${v.metric} ${v.value}`);
    } else {
      assert.equal(spec.memoKey(encoded, 0n), v.key);
    }
    assert.deepEqual(await memoValue(secret, v.metric, spec, encoded), v.answer,
                     `${v.metric} ${JSON.stringify(v.value)}`);
  }
});

test("kind vectors: batches of every kind encode to the same bytes", async () => {
  for (const v of vectors.kind_wire) {
    const body = encodeBatch(v.batch_id, v.reports);
    assert.equal(body, v.body);
    const digest = Buffer.from(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(body)));
    assert.equal(digest.toString("hex"), v.sha256);
  }
});

test("kind vectors: catalogues of every kind parse alike; tampered ones are refused", () => {
  const v = vectors.kind_catalogue;
  const skipped = [];
  const parsed = parseAllCatalogue(v.good, (name) => skipped.push(name));
  assert.deepEqual(Object.fromEntries([...parsed].map(([k, m]) => [k, m.id])), v.parsed);
  assert.deepEqual(skipped.sort(), v.skipped);
  for (const doc of v.bad) {
    assert.throws(() => parseAllCatalogue(doc), WireFormatError, JSON.stringify(doc).slice(0, 200));
  }
  // The boolean-only catalogue of the other vectors parses alike too.
  const booleans = parseAllCatalogue(vectors.catalogue.good);
  assert.deepEqual(Object.fromEntries([...booleans].map(([k, m]) => [k, m.id])),
                   vectors.catalogue.parsed);
  for (const doc of vectors.catalogue.bad) assert.throws(() => parseAllCatalogue(doc), WireFormatError);
});
