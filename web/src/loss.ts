/**
 * What a metric's reports reveal on this device, as Python's `PrivacyLoss`
 * (client/longitudinal.py), with or without an instantaneous layer (layers.ts): the
 * epsilon of one report, the epsilon of any number of reports of a value held constant, and,
 * stated apart because no epsilon bounds it, what a change of value reveals, with the exact
 * probability that the permanent answers of two values differ. Shared vectors
 * (`privacy_loss`) check every kind against Python's.
 */
import {add, type Fraction, frac, fracToString, mul, sub, toNumber} from "./fraction.js";
import {KaryRandomizedResponse, SubsetSelection, UnaryEncoding} from "./kinds.js";
import {OpenDomainSketch} from "./open.js";
import {repeatedLoss, split} from "./layers.js";
import type {Rr} from "./mechanism.js";

/** A mechanism as the statements need it: its epsilon and its channel (P1, Q) or kind. */
type Mechanism = {readonly epsilon: number; readonly id: string};

const ONE = frac(1n);

export class PrivacyLoss {
  /** Epsilon per report, in nats. */
  readonly oneReportEpsilon: number;
  /** Epsilon of any number of reports of one value held constant; null for fresh reporting
   * (n reports lose n times oneReportEpsilon: `after(n)`). */
  readonly longRunEpsilon: number | null;
  /** Memoized: the exact probability that the permanent answers of two values differ (numeric:
   * the two ends of the range, the most it can be); null for fresh reporting. */
  readonly pAnswersDiffer: Fraction | null;
  /** What the ledger charges for a new (mechanism, value) (memoized), or per report (fresh). */
  readonly costPerNewValue: number;
  /** In plain words, what a change of value reveals and why no epsilon bounds it. */
  readonly valueChange: string;

  /** The permanent (memo) layer under an instantaneous layer: split(wire, irr). */
  private readonly memo: Rr | undefined;

  /**
   * @param mechanism the wire mechanism, which one report follows.
   * @param memoized false for fresh reporting.
   * @param irr a boolean metric's instantaneous layer (memoized only): the permanent answer
   *   follows split(mechanism, irr) and every report re-perturbs it with irr.
   * @throws InvalidParameterError irr cannot produce reports that follow mechanism.
   */
  constructor(readonly metric: string, mechanism: Mechanism, memoized: boolean,
              readonly irr?: Rr) {
    this.oneReportEpsilon = mechanism.epsilon;
    if (memoized && irr !== undefined) mechanism = this.memo = split(mechanism as Rr, irr);
    this.costPerNewValue = mechanism.epsilon;
    this.longRunEpsilon = memoized ? mechanism.epsilon : null;
    if (!memoized) {
      this.pAnswersDiffer = null;
      this.valueChange = "Each report is a fresh draw, so n reports lose at most n times the " +
        "one-report epsilon whatever the values, changed or not. A change of value shifts the " +
        "share of ones in the reports, which an observer who links them can see by averaging " +
        "the reports on either side of it: the more reports, the more sharply it dates the change.";
      return;
    }
    const differ = this.pAnswersDiffer = answersDiffer(mechanism);
    const perPoint = mechanism.id.startsWith("bm:")
      ? " (numeric: each grid point of alpha-point rounding)" : "";
    this.valueChange = `A new value gets its own permanent answer${perPoint}. The two answers ` +
      `differ with probability ${fracToString(differ)} (${Number(toNumber(differ).toPrecision(3))}); ` +
      "when they do, anyone who links this device's reports sees when " +
      "the value changed, and every later change back and forth. No epsilon bounds this: the " +
      "timing of each change shows, whatever the nats charged." + (this.memo === undefined ? ""
      : " The instantaneous layer blurs each report, but averaging the reports on either side " +
        "of a change still dates it, the more sharply the more reports there are.");
  }

  /** The exact worst-case loss of `n` reports of one value held constant. */
  after(n: number): number {
    if (!Number.isInteger(n) || n < 0) throw new RangeError("n must be an integer >= 0");
    if (this.memo !== undefined) return repeatedLoss(this.memo, this.irr!, n);
    return this.longRunEpsilon === null ? n * this.oneReportEpsilon : n ? this.longRunEpsilon : 0;
  }
}

/** P(the permanent answers of two values differ), exact (Python's _p_answers_differ). */
function answersDiffer(m: Mechanism): Fraction {
  const sq = (x: Fraction): Fraction => mul(x, x);
  if (m instanceof KaryRandomizedResponse) {
    return sub(ONE, add(mul(frac(2n), mul(m.p, m.q)), mul(frac(BigInt(m.d - 2)), sq(m.q))));
  }
  if (m instanceof OpenDomainSketch) {
    // Two strings' answers are independent draws: they agree only on the same (level, seed),
    // probability 1 / (levels seeds), and then on the bucket: 2pq + (g - 2) q^2 where their
    // buckets differ, p^2 + (g - 1) q^2 (larger) where they collide. The most they can differ
    // (no collision at any level and seed):
    const agree = add(mul(frac(2n), mul(m.p, m.q)), mul(frac(BigInt(m.g - 2)), sq(m.q)));
    return sub(ONE, mul(agree, frac(1n, BigInt(m.levels * m.seeds))));
  }
  if (m instanceof UnaryEncoding) {
    const agree = add(sq(m.q), sq(sub(ONE, m.q)));
    let power = ONE;
    for (let i = 0; i < m.d - 2; i++) power = mul(power, agree);
    return sub(ONE, mul(frac(1n, 4n), power));
  }
  if (m instanceof SubsetSelection) {
    const {d, k, r} = m;
    const c = (n: number, j: number): Fraction => frac(choose(n, j));
    const num = add(add(mul(c(d - 2, k - 2), sq(r)), mul(mul(frac(2n), c(d - 2, k - 1)), r)),
                    c(d - 2, k));
    const den = sq(add(mul(c(d - 1, k - 1), r), c(d - 1, k)));
    return sub(ONE, mul(num, frac(den.den, den.num)));
  }
  const [p1, q] = channel(m);
  return add(mul(p1, sub(ONE, q)), mul(q, sub(ONE, p1)));
}

/** (P1, Q) of a boolean mechanism or a 1BitMean (1 - a, a). */
function channel(m: Mechanism): [Fraction, Fraction] {
  const rr = m as {pYesGivenYes?: Fraction; pYesGivenNo?: Fraction; a?: Fraction};
  return rr.a !== undefined ? [sub(ONE, rr.a), rr.a] : [rr.pYesGivenYes!, rr.pYesGivenNo!];
}

function choose(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let out = 1n;
  for (let i = 1; i <= k; i++) out = out * BigInt(n - k + i) / BigInt(i);
  return out;
}
