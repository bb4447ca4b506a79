// The od: mechanism (src/open.ts): the shared vectors' open_domain section (written from the
// Python client) entry by entry, and its exact epsilon by enumerating every random draw.
import assert from "node:assert/strict";
import {test} from "node:test";

import {InvalidParameterError} from "../dist/errors.js";
import {add, cmp, div, frac, fracToString, mul} from "../dist/fraction.js";
import {OpenDomainSketch, hashConstants, normalise, prefixHash, prefixWords} from "../dist/open.js";
import {SecureBits} from "../dist/random.js";
import {fromHex, source, vectors} from "./vectors.js";

const od = vectors.open_domain;
const hex = (bytes) => Buffer.from(bytes).toString("hex");

test("open vectors: there are some of every section", () => {
  for (const name of ["mechanisms", "invalid_ids", "normalise", "hashes", "perturb"]) {
    assert.ok(od[name].length > 0, name);
  }
});

test("open vectors: ids, parameters, exact p, q, likelihood ratio, epsilon and sizes", () => {
  for (const v of od.mechanisms) {
    const m = OpenDomainSketch.fromId(v.id);
    assert.equal(m.id, v.id);
    assert.equal(m.kind, "open");
    assert.deepEqual([m.maxBytes, m.step, m.seeds, m.g], [v.max_bytes, v.step, v.seeds, v.g]);
    assert.equal(fracToString(m.p), v.p, `p of ${v.id}`);
    assert.equal(fracToString(m.q), v.q, `q of ${v.id}`);
    assert.equal(fracToString(m.likelihoodRatio), v.likelihood_ratio, `ratio of ${v.id}`);
    // ln of the same exact ratio; V8's Math.log may differ from libm's in the last bit.
    assert.ok(Math.abs(m.epsilon - v.epsilon) <= 1e-12 * Math.max(1, v.epsilon), `eps ${v.id}`);
    assert.deepEqual([m.levels, m.cells, m.width], [v.levels, v.cells, v.width]);
  }
});

test("open vectors: the ids Python refuses are refused", () => {
  for (const id of od.invalid_ids) {
    assert.throws(() => OpenDomainSketch.fromId(id), InvalidParameterError, JSON.stringify(id));
  }
});

test("open vectors: normalisation (NFC, UTF-8, length rule, clamp) byte for byte", () => {
  for (const v of od.normalise) {
    const what = `${JSON.stringify(v.value)} (${v.max_bytes} bytes, clamp ${v.clamp})`;
    if (v.padded === null) {
      assert.throws(() => normalise(v.value, v.max_bytes, v.clamp), InvalidParameterError, what);
      // The refusal never shows the value (the secret).
      try {
        normalise(v.value, v.max_bytes, v.clamp);
      } catch (error) {
        if (typeof v.value === "string" && v.value.length > 1) {
          assert.ok(!error.message.includes(v.value), what);
        }
      }
    } else {
      assert.equal(hex(normalise(v.value, v.max_bytes, v.clamp)), v.padded, what);
    }
  }
});

test("open vectors: hash constants, words, 64-bit hash and buckets bit for bit", () => {
  for (const v of od.hashes) {
    const prefix = fromHex(v.prefix);
    const what = `prefix ${v.prefix} level ${v.level} seed ${v.seed}`;
    assert.deepEqual(prefixWords(prefix), v.words, what);
    assert.deepEqual(hashConstants(v.level, v.seed, v.constants.length)
      .map((a) => a.toString(16).padStart(16, "0")), v.constants, what);
    assert.equal(prefixHash(prefix, v.level, v.seed).toString(16).padStart(16, "0"), v.hash,
                 what);
    for (const [g, b] of Object.entries(v.buckets)) {
      // bucketOf reads the value's prefix of the level: give it exactly that prefix.
      const m = new OpenDomainSketch(64, 1, 65536, Number(g), frac(3n, 4n));
      const level = prefix.length - 1;
      if (level === v.level) assert.equal(m.bucketOf(prefix, level, v.seed), b, `${what} g ${g}`);
      const direct = Number(((prefixHash(prefix, v.level, v.seed) >> 32n) * BigInt(g)) >> 32n);
      assert.equal(direct, b, `${what} g ${g}`);
    }
  }
});

test("open vectors: cells for given random words, every word read and none more", () => {
  for (const v of od.perturb) {
    const m = OpenDomainSketch.fromId(v.mechanism);
    const s = source(v.words);
    const cells = v.values.map((x) => m.perturb(x, s));
    assert.deepEqual(cells, v.cells, v.mechanism);
    assert.deepEqual(cells.map((c) => m.splitCell(c)), v.splits, v.mechanism);
    assert.throws(() => s.bigBits(64), /ran out/, `${v.mechanism} left words unread`);
  }
});

/**
 * The exact distribution of perturbPadded's cell, by enumerating every outcome of every
 * bits(k) call the mechanism makes (each with probability 2**-k). A path on which a draw is
 * rejected (a 5th call: below() drew again) is dropped and the rest renormalised: the retry is
 * the same independent draw, so conditioning on first-try acceptance changes nothing.
 */
function exactCells(m, padded) {
  const dist = new Map();
  let kept = frac(0n);
  const explore = (script) => {
    let at = 0;
    let spent = 0;
    const calls = [];
    const rng = {
      bits(k) {
        calls.push(k);
        spent += k;
        if (at < script.length) return script[at++];
        throw Object.assign(new Error("branch"), {k});
      },
      bigBits(k) { return BigInt(this.bits(k)); },
    };
    let cell;
    try {
      cell = m.perturbPadded(padded, rng);
    } catch (error) {
      if (error.message !== "branch") throw error;
      if (calls.length > 4) return;  // a rejected draw: dropped (see above)
      for (let value = 0; value < 2 ** error.k; value++) explore([...script, value]);
      return;
    }
    if (calls.length > 4) return;
    const weight = frac(1n, 2n ** BigInt(spent));
    kept = add(kept, weight);
    dist.set(cell, add(dist.get(cell) ?? frac(0n), weight));
  };
  explore([]);
  for (const [cell, w] of dist) dist.set(cell, div(w, kept));
  return dist;
}

test("exact epsilon by enumeration: no two strings' cell probabilities differ by more than " +
     "p/q, and some pair reaches it", () => {
  // 3 levels and 3 seeds (2-bit draws, rejecting 3), p = 2/3 (2-bit draws, rejecting 3), g = 3:
  // q = 1/6, p/q = 4 exactly, epsilon = ln 4.
  const m = OpenDomainSketch.fromId("od:3:1:3:3:2/3");
  assert.equal(fracToString(m.likelihoodRatio), "4");
  assert.ok(Math.abs(m.epsilon - Math.log(4)) <= 1e-15);
  const strings = ["a", "b", "ab", "ba", "abc", "abd", "\u00e9", "z\u00e9", "\u20ac", "x", "xyz",
    "aaa"];
  const dists = strings.map((s) => exactCells(m, normalise(s, m.maxBytes)));
  for (const [i, dist] of dists.entries()) {
    let total = frac(0n);
    for (const w of dist.values()) total = add(total, w);
    assert.equal(fracToString(total), "1", strings[i]);
    assert.equal(dist.size, m.cells, `${strings[i]}: every cell is possible`);
    // The enumeration agrees with the closed form 1/(levels seeds) times p or q.
    const padded = normalise(strings[i], m.maxBytes);
    for (const [cell, w] of dist) {
      assert.equal(fracToString(w), fracToString(m.reportProbability(padded, cell)));
    }
  }
  let worst = frac(0n);
  for (const a of dists) {
    for (const b of dists) {
      for (const [cell, w] of a) {
        const ratio = div(w, b.get(cell));
        if (cmp(ratio, worst) > 0) worst = ratio;
      }
    }
  }
  assert.equal(fracToString(worst), fracToString(m.likelihoodRatio));  // tight, both sides
  assert.equal(fracToString(mul(m.q, m.likelihoodRatio)), fracToString(m.p));
});

test("a value is refused before any random draw, and the refusal does not show it", () => {
  const m = OpenDomainSketch.fromId("od:4:1:4:3:1/2");
  const rng = new SecureBits(() => { throw new Error("drew randomness for a refused value"); });
  for (const value of ["toolong", "", "a\u0000", 5, null, "\ud800"]) {
    assert.throws(() => m.perturb(value, rng), InvalidParameterError, JSON.stringify(value));
  }
  assert.throws(() => m.perturb("toolong", rng), (e) => !e.message.includes("toolong"));
  assert.equal(m.perturb("toolong", new SecureBits(), true) < m.cells, true);  // clamp cuts it
});

// Each check compares one count c of N independent reports (system source) with its exact
// expectation N P: |c - N P| <= 6 sqrt(N P (1 - P)); one check fails by chance with
// probability 1.97e-9 (normal approximation, N P (1 - P) >= 900 in each). 1 + 4 + 4 + 3 = 12
// checks: a chance failure of the test with probability <= 2.4e-8.
test("perturb's cells follow the mechanism: level and seed uniform, the true bucket with p", () => {
  const m = OpenDomainSketch.fromId("od:4:1:4:3:1/2");
  const padded = normalise("ab", 4);
  const n = 60_000;
  const levels = [0, 0, 0, 0];
  const seeds = [0, 0, 0, 0];
  const offsets = [0, 0, 0];  // reported bucket minus the true one, mod g
  let hits = 0;
  for (let i = 0; i < n; i++) {
    const [level, seed, reported] = m.splitCell(m.perturb("ab"));
    const truth = m.bucketOf(padded, level, seed);
    levels[level]++;
    seeds[seed]++;
    offsets[(reported - truth + 3) % 3]++;
    if (reported === truth) hits++;
  }
  let checks = 0;
  const within = (count, p, what) => {
    checks++;
    const variance = n * p * (1 - p);
    assert.ok(variance >= 900, what);
    assert.ok(Math.abs(count - n * p) <= 6 * Math.sqrt(variance), `${what}: ${count} of ${n}`);
  };
  within(hits, 1 / 2, "true bucket");
  levels.forEach((c, i) => within(c, 1 / 4, `level ${i}`));
  seeds.forEach((c, i) => within(c, 1 / 4, `seed ${i}`));
  offsets.forEach((c, i) => within(c, i === 0 ? 1 / 2 : 1 / 4, `offset ${i}`));
  assert.equal(checks, 12);
});
