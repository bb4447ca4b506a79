/** Exact non-negative rationals on BigInt: just what the mechanism's probabilities need. */

export interface Fraction {
  readonly num: bigint;
  readonly den: bigint;
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a < 0n ? -a : a;
}

/** num/den in lowest terms, with a positive denominator. */
export function frac(num: bigint, den: bigint = 1n): Fraction {
  if (den === 0n) throw new RangeError("zero denominator");
  if (den < 0n) [num, den] = [-num, -den];
  const g = gcd(num, den) || 1n;
  return {num: num / g, den: den / g};
}

/** Parse "a/b" or "a" (digits only, as in mechanism ids and catalogue strings); null if not. */
export function parseFraction(text: string): Fraction | null {
  const match = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(text);
  if (match === null) return null;
  const den = BigInt(match[2] ?? "1");
  return den === 0n ? null : frac(BigInt(match[1]!), den);
}

export const add = (a: Fraction, b: Fraction): Fraction =>
  frac(a.num * b.den + b.num * a.den, a.den * b.den);
export const sub = (a: Fraction, b: Fraction): Fraction =>
  frac(a.num * b.den - b.num * a.den, a.den * b.den);
export const mul = (a: Fraction, b: Fraction): Fraction => frac(a.num * b.num, a.den * b.den);
export const div = (a: Fraction, b: Fraction): Fraction => frac(a.num * b.den, a.den * b.num);
/** Negative, zero or positive as a < b, a == b, a > b. */
export const cmp = (a: Fraction, b: Fraction): number => {
  const d = a.num * b.den - b.num * a.den;
  return d < 0n ? -1 : d > 0n ? 1 : 0;
};
export const eq = (a: Fraction, b: Fraction): boolean => a.num === b.num && a.den === b.den;
/** Python's str(Fraction): "3/4", or "1" for an integer. */
export const fracToString = (a: Fraction): string =>
  a.den === 1n ? `${a.num}` : `${a.num}/${a.den}`;
/** The nearest double (exact for the small fractions mechanisms use). */
export function toNumber(a: Fraction): number {
  // Scale so both parts fit a double's 53 bits before dividing: correctly rounded enough for
  // estimates; exact comparisons never go through this.
  const shift = BigInt(Math.max(0, bitLength(a.den) - 1000));
  return Number(a.num >> shift) / Number(a.den >> shift);
}
export function bitLength(n: bigint): number {
  return n === 0n ? 0 : n.toString(2).length;
}
