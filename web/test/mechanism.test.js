// Statistical and exactness tests of the mechanism, the secure bits and the memoized answers.
// Tolerances are stated in standard errors, as in the Python tests.
import assert from "node:assert/strict";
import {test} from "node:test";

import {InvalidParameterError, RandomizedResponse, frac} from "../dist/index.js";
import {fracToString} from "../dist/fraction.js";
import {importSecret, memoBit} from "../dist/memo.js";
import {SecureBits, below} from "../dist/random.js";

// 6 SE: an exact binomial tail of at most 2e-9 per check; the 133 checks of the below() test
// fail 2.6e-7 of runs together (at 5 SE, 7.7e-5; the 16 of the first test, 9.2e-6).
const TOLERANCE_SE = 6;

function assertRate(ones, n, p, what) {
  const se = Math.sqrt(p * (1 - p) / n);
  const rate = ones / n;
  assert.ok(Math.abs(rate - p) <= TOLERANCE_SE * se,
            `${what}: rate ${rate} vs ${p} (${((rate - p) / se).toFixed(2)} SE)`);
}

const asNumber = (f) => Number(f.num) / Number(f.den);

test("each mechanism's output frequencies match P1 and Q within 6 SE", () => {
  const n = 200_000;
  for (const id of ["rr:1/2:1/2", "rr:3/4:1/2", "rr:1/3:1/2", "rr:2/3:1/5", "rr:1/1024:1/8",
                    "rr:5/7:3/11", "rr:1/4294967311:1/2", "rr:30285/65536:1/2"]) {
    const m = RandomizedResponse.fromId(id);
    for (const [trueBit, p] of [[1, m.pYesGivenYes], [0, m.pYesGivenNo]]) {
      let ones = 0;
      for (let i = 0; i < n; i++) ones += m.perturb(trueBit);
      assertRate(ones, n, asNumber(p), `${id} true=${trueBit}`);
    }
  }
});

test("rejection sampling is unbiased: every value of below(n) within 6 SE of 1/n", () => {
  const bits = new SecureBits();
  for (const bound of [3, 5, 6, 7, 11, 100]) {
    const draws = 30_000 * bound;
    const counts = new Array(bound).fill(0);
    for (let i = 0; i < draws; i++) counts[Number(below(bits, BigInt(bound)))]++;
    counts.forEach((c, v) => assertRate(c, draws, 1 / bound, `below(${bound}) == ${v}`));
  }
  // Above 2**32 the draw is a BigInt: 2**33 + 1 values, so a modulo would skew the low ones.
  const big = 2n ** 33n + 1n;
  let low = 0;
  const n = 100_000;
  for (let i = 0; i < n; i++) if (below(bits, big) < big / 3n) low++;
  assertRate(low, n, Number(big / 3n) / Number(big), "below(2**33 + 1) < third");
});

test("a value that is not in range is never drawn, and bits() stays in [0, 2**k)", () => {
  const bits = new SecureBits();
  for (let i = 0; i < 20_000; i++) {
    assert.ok(below(bits, 3n) < 3n);
    const k = i % 33;
    const v = bits.bits(k);
    assert.ok(v >= 0 && v < 2 ** k);
    assert.ok(bits.bigBits(64) < 2n ** 64n);
  }
});

test("memoized answers over random secrets are 1 with probability P1 or Q (6 SE)", async () => {
  const n = 3000;
  for (const id of ["rr:1/2:1/2", "rr:2/3:1/5"]) {
    const m = RandomizedResponse.fromId(id);
    const ones = [0, 0];
    for (let i = 0; i < n; i++) {
      const key = await importSecret(crypto.getRandomValues(new Uint8Array(32)));
      ones[0] += await memoBit(key, "dark_mode", m, 0);
      ones[1] += await memoBit(key, "dark_mode", m, 1);
    }
    assertRate(ones[1], n, asNumber(m.pYesGivenYes), `memo ${id} true=1`);
    assertRate(ones[0], n, asNumber(m.pYesGivenNo), `memo ${id} true=0`);
  }
});

test("a memoized answer never changes for the same secret", async () => {
  const key = await importSecret(new Uint8Array(32).fill(7));
  const m = RandomizedResponse.fromId("rr:1/3:1/2");
  const first = await memoBit(key, "x", m, 1);
  for (let i = 0; i < 20; i++) assert.equal(await memoBit(key, "x", m, 1), first);
});

test("parameters that give no privacy or are not exact are refused", () => {
  for (const [t, f] of [["0/1", "1/2"], ["1/1", "1/2"], ["1/2", "0/1"], ["1/2", "1/1"],
                        ["3/2", "1/2"], ["0.5", "1/2"], [0.5, "1/2"], ["1/2", null]]) {
    assert.throws(() => new RandomizedResponse(t, f), InvalidParameterError, `${t} ${f}`);
  }
  assert.throws(() => new RandomizedResponse(frac(1n, 2n ** 65n)), InvalidParameterError);
  assert.equal(new RandomizedResponse(frac(2n, 4n), "1/2").id, "rr:1/2:1/2");
  assert.equal(fracToString(RandomizedResponse.fromId("rr:1/2:1/2").likelihoodRatio), "3");
  assert.ok(Math.abs(RandomizedResponse.fromId("rr:1/2:1/2").epsilon - Math.log(3)) < 1e-15);
});
