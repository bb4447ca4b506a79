/**
 * Randomized response, mirroring deniable.client.mechanism (THE definition, in Python).
 *
 * Forced-response randomized response with exact rational parameters: flip the truth coin;
 * with probability `truth` report the true bit, otherwise report 1 with probability
 * `forced_yes`. Every coin is an integer draw `below(den) < num` from a secure source, so each
 * outcome has exactly the stated probability. The shared test vectors (tests/vectors) check
 * ids, probabilities, epsilon, draws and estimates against the Python code.
 */
import {InvalidParameterError} from "./errors.js";
import {
  cmp, div, eq, frac, type Fraction, fracToString, mul, parseFraction, sub, toNumber,
} from "./fraction.js";
import {memoBit} from "./memo.js";
import {below, belowSmall, bitsFor, type RandomBits, SYSTEM_BITS} from "./random.js";

const ID_PATTERN = /^rr:([0-9]+\/[0-9]+):([0-9]+\/[0-9]+)$/;
const MAX_TABLE_BITS = 12;
const MAX_DENOMINATOR = 1n << 64n;
const ONE = frac(1n);

/** The debiased share behind `ones` perturbed ones out of `n` (Python's Estimate). */
export interface Estimate {
  n: number; ones: number; yesRate: number; value: number; unclipped: number; stderr: number;
  ciLow: number; ciHigh: number; confidence: number; clipped: boolean; wide: boolean;
}

function powerOfTwoBits(den: bigint): number | null {
  return (den & (den - 1n)) === 0n ? bitsFor(den) : null;
}

/**
 * Forced-response randomized response with exact probabilities (see the module doc), without
 * its estimator: what reporting needs. The default entry's Reporter builds these, so a page's
 * bundle leaves the estimator out; `RandomizedResponse` adds it.
 */
export class Rr {
  readonly truth: Fraction;
  readonly forcedYes: Fraction;
  /** The canonical id that travels with every report, e.g. "rr:1/2:1/2". */
  readonly id: string;
  private readonly tables: [Uint8Array, Uint8Array] | null = null;
  private readonly tableBits: number = 0;
  private readonly small: boolean;
  private readonly tNum: number; private readonly tDen: number; private readonly tK: number;
  private readonly fNum: number; private readonly fDen: number; private readonly fK: number;

  /**
   * @param truth probability of reporting the true bit, strictly between 0 and 1.
   * @param forcedYes probability of a forced 1, strictly between 0 and 1.
   * @throws InvalidParameterError for a parameter that is not an exact probability in (0, 1),
   *   or whose denominator exceeds 2**64 (the most one draw of the secure source can serve).
   */
  constructor(truth: Fraction | string = "1/2", forcedYes: Fraction | string = "1/2") {
    this.truth = exact("truth", truth);
    this.forcedYes = exact("forced_yes", forcedYes);
    for (const [name, f] of [["truth", this.truth], ["forced_yes", this.forcedYes]] as const) {
      if (!(f.num > 0n && f.num < f.den)) {
        throw new InvalidParameterError(
          `${name} must lie strictly between 0 and 1. Got ${fracToString(f)} instead.`);
      }
    }
    for (const [name, f] of [["truth", this.truth], ["forced_yes", this.forcedYes]] as const) {
      if (f.den > MAX_DENOMINATOR) {
        throw new InvalidParameterError(
          `${name}'s denominator must be at most 2**64. Got ${fracToString(f)} instead.`);
      }
    }
    const t = this.truth;
    const f = this.forcedYes;
    this.id = `rr:${t.num}/${t.den}:${f.num}/${f.den}`;
    this.small = t.den <= 0xffffffffn && f.den <= 0xffffffffn;
    this.tNum = Number(t.num); this.tDen = Number(t.den); this.tK = bitsFor(t.den);
    this.fNum = Number(f.num); this.fDen = Number(f.den); this.fK = bitsFor(f.den);
    const kt = powerOfTwoBits(t.den);
    const ky = powerOfTwoBits(f.den);
    if (kt !== null && ky !== null && kt + ky <= MAX_TABLE_BITS) {
      // One draw of kt + ky bits decides both coins, exactly as the Python client's tables.
      const size = 1 << (kt + ky);
      const tables: [Uint8Array, Uint8Array] = [new Uint8Array(size), new Uint8Array(size)];
      for (let draw = 0; draw < size; draw++) {
        const truthCoin = (draw & ((1 << kt) - 1)) < this.tNum;
        const forced = (draw >>> kt) < this.fNum ? 1 : 0;
        tables[0][draw] = truthCoin ? 0 : forced;
        tables[1][draw] = truthCoin ? 1 : forced;
      }
      this.tables = tables;
      this.tableBits = kt + ky;
    }
  }

  /** Parse a canonical id such as "rr:1/2:1/2". Non-canonical spellings are refused. */
  static fromId<T extends Rr>(this: new (truth: string, forcedYes: string) => T,
                              mechanismId: string): T {
    const match = typeof mechanismId === "string" ? ID_PATTERN.exec(mechanismId) : null;
    if (match === null) {
      throw new InvalidParameterError(
        "mechanism id must look like 'rr:1/2:1/2'. " +
        `Got ${JSON.stringify(mechanismId)} instead.`);
    }
    const mechanism = new this(match[1]!, match[2]!);
    if (mechanism.id !== mechanismId) {
      throw new InvalidParameterError(
        `mechanism id must be in lowest terms: '${mechanism.id}'. Got '${mechanismId}' instead.`);
    }
    return mechanism;
  }

  /** P1 = P(report 1 | true 1), exact. */
  get pYesGivenYes(): Fraction {
    return frac(this.truth.num * this.forcedYes.den +
                (this.truth.den - this.truth.num) * this.forcedYes.num,
                this.truth.den * this.forcedYes.den);
  }

  /** Q = P(report 1 | true 0), exact. */
  get pYesGivenNo(): Fraction {
    return mul(sub(ONE, this.truth), this.forcedYes);
  }

  /** max(P1 / Q, (1 - Q) / (1 - P1)), exact: the worst-case odds one report moves. */
  get likelihoodRatio(): Fraction {
    const p = this.pYesGivenYes;
    const q = this.pYesGivenNo;
    const a = div(p, q);
    const b = div(sub(ONE, q), sub(ONE, p));
    return cmp(a, b) >= 0 ? a : b;
  }

  /** The local-DP epsilon of one report, ln(likelihoodRatio), in nats. */
  get epsilon(): number {
    return Math.log(toNumber(this.likelihoodRatio));
  }

  /**
   * The reported bit, 0 or 1. `trueBit` never leaves this function. Integer draws only, from
   * `rng` (the secure system source by default).
   */
  perturb(trueBit: boolean | 0 | 1, rng: RandomBits = SYSTEM_BITS): 0 | 1 {
    const tables = this.tables;
    if (tables !== null) return tables[trueBit ? 1 : 0][rng.bits(this.tableBits)] as 0 | 1;
    if (this.small) {
      if (belowSmall(rng, this.tDen, this.tK) < this.tNum) return trueBit ? 1 : 0;
      return belowSmall(rng, this.fDen, this.fK) < this.fNum ? 1 : 0;
    }
    if (below(rng, this.truth.den) < this.truth.num) return trueBit ? 1 : 0;
    return below(rng, this.forcedYes.den) < this.forcedYes.num ? 1 : 0;
  }

  // As a boolean metric (kinds/kind.ts, Reported): its memo key is the bit itself.

  /** The memo key of the true bit: the bit. */
  keyOf(trueBit: 0 | 1): number {
    return trueBit;
  }

  /** The device's permanent answer for the true bit `key` (memo.ts, memoBit). */
  memoAnswer(secret: CryptoKey, metric: string, key: number): Promise<0 | 1> {
    return memoBit(secret, metric, this, key as 0 | 1);
  }
}

/** Forced-response randomized response with exact probabilities (see the module doc), and its
 * estimator. */
export class RandomizedResponse extends Rr {
  /** Whether `other` has the same truth and forced_yes (the same mechanism). */
  equals(other: Rr): boolean {
    return eq(this.truth, other.truth) && eq(this.forcedYes, other.forcedYes);
  }

  /** The unbiased true share behind an exact yes-rate: (rate - Q) / (P1 - Q), exact. */
  debias(yesRate: Fraction): Fraction {
    const q = this.pYesGivenNo;
    return div(sub(yesRate, q), sub(this.pYesGivenYes, q));
  }

  /**
   * Debias `ones` perturbed ones out of `n` reports, with Wilson's score interval mapped
   * through the debiasing line and clipped to [0, 1] (as the Python client's estimate()).
   */
  estimate(ones: number, n: number, confidence = 0.95): Estimate {
    if (!Number.isSafeInteger(ones) || !Number.isSafeInteger(n) || n < 0 || ones < 0 ||
        ones > n) {
      throw new InvalidParameterError(`need integers 0 <= ones <= n. Got ${ones}, ${n}.`);
    }
    if (n === 0) {
      return {n: 0, ones: 0, yesRate: NaN, value: NaN, unclipped: NaN, stderr: NaN, ciLow: 0,
              ciHigh: 1, confidence, clipped: false, wide: true};
    }
    const z = zScore(confidence);
    const rate = frac(BigInt(ones), BigInt(n));
    const unclipped = toNumber(this.debias(rate));
    const r = toNumber(rate);
    const q = toNumber(this.pYesGivenNo);
    const spread = toNumber(sub(this.pYesGivenYes, this.pYesGivenNo));
    const [low, high] = wilsonInterval(r, n, z);
    const ciLow = clip01((low - q) / spread);
    const ciHigh = clip01((high - q) / spread);
    const value = clip01(unclipped);
    return {n, ones, yesRate: r, value, unclipped, stderr: Math.sqrt(r * (1 - r) / n) / spread,
            ciLow, ciHigh, confidence, clipped: value !== unclipped, wide: ciHigh - ciLow >= 0.5};
  }
}

function exact(name: string, value: Fraction | string): Fraction {
  if (typeof value === "string") {
    const parsed = parseFraction(value);
    if (parsed === null) {
      throw new InvalidParameterError(
        `${name} must be a fraction such as '1/2'. Got ${JSON.stringify(value)} instead.`);
    }
    return parsed;
  }
  if (value !== null && typeof value === "object" && typeof value.num === "bigint" &&
      typeof value.den === "bigint" && value.den !== 0n) {
    return frac(value.num, value.den);
  }
  throw new InvalidParameterError(
    `${name} must be a fraction string such as '1/2'. ` +
    `Got ${String(value)} (${typeof value}) instead.`);
}

function clip01(x: number): number {
  return Math.min(1, Math.max(0, x));
}

/** Wilson's score interval for a binomial proportion `rate` observed over `n` trials. */
export function wilsonInterval(rate: number, n: number, z: number): [number, number] {
  const z2 = z * z;
  const denom = 1 + z2 / n;
  const centre = (rate + z2 / (2 * n)) / denom;
  const half = z / denom * Math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n));
  return [centre - half, centre + half];
}

/** The two-sided standard-normal quantile for a confidence level in (0, 1). */
export function zScore(confidence: number): number {
  if (!(confidence > 0 && confidence < 1)) {
    throw new InvalidParameterError(`confidence must lie in (0, 1). Got ${confidence} instead.`);
  }
  return normalInvCdf(0.5 + confidence / 2);
}

/** Wichura's AS241, the algorithm of Python's statistics.NormalDist.inv_cdf. */
export function normalInvCdf(p: number): number {
  const q = p - 0.5;
  let num: number;
  let den: number;
  if (Math.abs(q) <= 0.425) {
    const r = 0.180625 - q * q;
    num = (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r +
      6.7265770927008700853e+4) * r + 4.5921953931549871457e+4) * r +
      1.3731693765509461125e+4) * r + 1.9715909503065514427e+3) * r +
      1.3314166789178437745e+2) * r + 3.3871328727963666080e+0) * q;
    den = (((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r +
      3.9307895800092710610e+4) * r + 2.1213794301586595867e+4) * r +
      5.3941960214247511077e+3) * r + 6.8718700749205790830e+2) * r +
      4.2313330701600911252e+1) * r + 1.0);
    return num / den;
  }
  let r = q <= 0 ? p : 1 - p;
  r = Math.sqrt(-Math.log(r));
  if (r <= 5) {
    r = r - 1.6;
    num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r +
      2.41780725177450611770e-1) * r + 1.27045825245236838258e+0) * r +
      3.64784832476320460504e+0) * r + 5.76949722146069140550e+0) * r +
      4.63033784615654529590e+0) * r + 1.42343711074968357734e+0);
    den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r +
      1.51986665636164571966e-2) * r + 1.48103976427480074590e-1) * r +
      6.89767334985100004550e-1) * r + 1.67638483018380384940e+0) * r +
      2.05319162663775882187e+0) * r + 1.0);
  } else {
    r = r - 5;
    num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r +
      1.24266094738807843860e-3) * r + 2.65321895265761230930e-2) * r +
      2.96560571828504891230e-1) * r + 1.78482653991729133580e+0) * r +
      5.46378491116411436990e+0) * r + 6.65790464350110377720e+0);
    den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r +
      1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r +
      1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r +
      5.99832206555887937690e-1) * r + 1.0);
  }
  const x = num / den;
  return q < 0 ? -x : x;
}

/** The two-coin scheme, rr:1/2:1/2: epsilon = ln 3. */
export const DEFAULT = /* @__PURE__ */ new RandomizedResponse();
