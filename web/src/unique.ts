/**
 * Memoized answers are not device identifiers (issue 26; docs/privacy.md, "Memoized answers
 * are not identifiers"), as Python's `unique_share` and `LongitudinalGuard(max_unique_share)`.
 *
 * The unique share of a categorical mechanism is the expected share of 20,000 devices holding
 * the same category whose memoized answer no other of them has: the sum over answers y of
 * P(y) (1 - P(y))^19,999, over classes of equally likely answers (GRR: the true category or
 * one of d - 1 others; SS: k-sets with or without it; OUE: the true bit and the number of
 * other bits set). A float design figure, not a privacy bound; the shared vectors check it
 * against Python's away from the 1 % limit.
 */
import type {Fraction} from "./fraction.js";

/** The population the share is stated for. */
export const UNIQUE_SHARE_DEVICES = 20_000;
/** The most a memoized answer may single out: 1 % (ten boolean metrics make 0.63 %). */
export const MAX_UNIQUE_SHARE = 0.01;

/** What the share needs of a GRR, OUE or SS mechanism (their fields, by id prefix). */
interface Categorical {
  readonly id: string;
  readonly d: number;
  readonly p?: Fraction;
  readonly q: Fraction;
  readonly k?: number;
  readonly r?: Fraction;
}

const ln = (f: Fraction): number => Math.log(Number(f.num)) - Math.log(Number(f.den));

/** ln C(n, k), summed term by term. */
function lnComb(n: number, k: number): number {
  let sum = 0;
  for (let i = 1; i <= k; i++) sum += Math.log((n - k + i) / i);
  return sum;
}

/** The expected unique share among `devices` same-valued devices (see the module). */
export function uniqueShare(m: Categorical, devices = UNIQUE_SHARE_DEVICES): number {
  const d = m.d;
  const classes: Array<[number, number]> = [];  // (ln count, ln P(answer)) per class
  if (m.id.startsWith("grr:")) {
    classes.push([0, ln(m.p!)], [Math.log(d - 1), ln(m.q)]);
  } else if (m.id.startsWith("ss:")) {
    const k = m.k!;
    const withTrue = lnComb(d - 1, k - 1) + ln(m.r!);
    const without = lnComb(d - 1, k);
    const lnZ = Math.max(withTrue, without) + Math.log1p(Math.exp(-Math.abs(withTrue - without)));
    classes.push([lnComb(d - 1, k - 1), ln(m.r!) - lnZ], [without, -lnZ]);
  } else {
    const lnQ = ln(m.q);
    const lnNotQ = Math.log(Number(m.q.den - m.q.num)) - Math.log(Number(m.q.den));
    let lnC = 0;  // ln C(d - 1, w), updated as w grows
    for (let w = 0; w < d; w++) {
      classes.push([lnC + Math.LN2, -Math.LN2 + w * lnQ + (d - 1 - w) * lnNotQ]);
      lnC += Math.log((d - 1 - w) / (w + 1));
    }
  }
  let share = 0;
  for (const [lnCount, lnP] of classes) {
    share += Math.exp(lnCount + lnP + (devices - 1) * Math.log1p(-Math.exp(lnP)));
  }
  return share;
}

/**
 * Why a memoized report of catalogue entry `entry` (a mechanism, or a MetricSpec holding one)
 * would single the device out, or undefined if it would not (booleans and numbers never do).
 */
export function identifying(entry: unknown): string | undefined {
  const m = (entry as {mechanism?: unknown}).mechanism ?? entry;
  const id = (m as {id?: unknown}).id;
  if (typeof id !== "string" || !/^(grr|oue|ss):/.test(id)) return undefined;
  const share = uniqueShare(m as Categorical);
  return share > MAX_UNIQUE_SHARE ? `a memoized answer of ${id} would single this device ` +
    `out: among 20,000 devices with the same value, ${(100 * share).toFixed(1)}% would hold ` +
    "an answer no other has (the limit is 1%); not reported" : undefined;
}
