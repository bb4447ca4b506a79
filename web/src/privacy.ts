/**
 * The two defences against a collector that tries to undo local privacy (issue 19; Python's
 * client/metrics.py and client/budget.py, docs/privacy.md):
 *
 * - the epsilon ceiling `maxEpsilon` (default ln 9): no report under a mechanism whose
 *   likelihood ratio r has ln r above it. Decided exactly on BigInt (`lnExceeds`), allowing
 *   max_epsilon a relative 2**-40 for its own rounding, as the cap does: a ceiling of
 *   Math.log(9) admits ratio 9, and no float rounding can be gamed past it.
 * - the cap over versions `maxMetricEpsilon` (default ln 81): the epsilons of one metric
 *   name's new memoized answers (tag = mechanism id + memo key) are summed over every version,
 *   persistently (`Ledger`, stored under "ledger"); a new answer past the cap is refused for
 *   good, answers already paid for stay free. Sums are exact: each float epsilon is an integer
 *   number of 2**-1074 units.
 */
import {bitLength, type Fraction} from "./fraction.js";

export const DEFAULT_MAX_EPSILON = Math.log(9);
export const DEFAULT_MAX_METRIC_EPSILON = Math.log(81);

/** metric -> its paid memoized answers (tags) and their summed epsilon, in 2**-1074 units. */
export type Ledger = Record<string, {paid: string[]; spent: string}>;

/** `x` (a finite double >= 0) times 2**1074, exactly. */
export function units(x: number): bigint {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const exponent = bits >> 52n;
  const mantissa = bits & 0xfffffffffffffn;
  return exponent ? (mantissa | 1n << 52n) << exponent - 1n : mantissa;
}

/** Whether `cost` more nats take `spent` (units) past `cap` allowing its 2**-40 rounding. */
const past = (spent: bigint, cap: number): boolean =>
  cap < Infinity && spent << 40n > units(cap) * ((1n << 40n) + 1n);

/**
 * Whether one report under a mechanism of likelihood ratio `ratio` (>= 1) loses more than
 * `maxEpsilon` nats (with its 2**-40 rounding allowance). Exact: ln is bounded from below in
 * fixed point with a proven error, and the precision doubles until the bound decides.
 */
export function aboveCeiling(ratio: Fraction, maxEpsilon: number): boolean {
  if (maxEpsilon === Infinity) return false;
  const tn = units(maxEpsilon) * ((1n << 40n) + 1n);
  return lnExceeds(ratio, tn, 1n << 1114n);
}

/**
 * ln(r) > tn / td, for r >= 1 and tn / td > 0. ln r = 2k atanh(1/3) + 2 atanh(z) with
 * r = 2**k y, y in [1, 2), z = (y - 1) / (y + 1) < 1/3. `atanh` below underestimates
 * S atanh(x) (x <= 1/3) by less than 3 * bits units: its power p is off by < 9/8 (each floor
 * adds < 1, shrunk by x**2 <= 1/9), each of its <= bits/3 + 2 terms by < 1 + 9/8, and the
 * tail left when p reaches 0 is < 1.3. ln r is irrational for r > 1, so the loop ends.
 */
export function lnExceeds(r: Fraction, tn: bigint, td: bigint): boolean {
  if (r.num <= r.den) return false;
  let k = bitLength(r.num) - bitLength(r.den);
  if (r.num < r.den << BigInt(k)) k--;
  const yd = r.den << BigInt(k);
  for (let bits = 64n; ; bits *= 2n) {
    const s = 1n << bits;
    const low = 2n * BigInt(k) * atanh(1n, 3n, s) + 2n * atanh(r.num - yd, r.num + yd, s);
    if (low * td > tn * s) return true;
    if ((low + BigInt(2 * k + 2) * 3n * bits) * td <= tn * s) return false;
  }
}

function atanh(num: bigint, den: bigint, s: bigint): bigint {
  let sum = 0n;
  for (let p = s * num / den, i = 1n; p > 0n; i += 2n, p = p * num * num / (den * den)) {
    sum += p / i;
  }
  return sum;
}

/**
 * The new memoized answer `tag` of `metric`, costing `cost` nats, against the cap `cap`:
 * 0 already paid for (free), 1 affordable (and, if `add`, paid for now in `ledger`), 2 refused.
 */
export function spend(ledger: Ledger, metric: string, tag: string, cost: number, cap: number,
                      add?: boolean): 0 | 1 | 2 {
  const entry = Object.hasOwn(ledger, metric) ? ledger[metric] : undefined;
  if (entry?.paid.includes(tag)) return 0;
  const spent = BigInt(entry?.spent ?? 0) + units(cost);
  if (past(spent, cap)) return 2;
  if (add) {
    ledger[metric] = {paid: [...entry?.paid ?? [], tag], spent: `${spent}`};
  }
  return 1;
}
