/**
 * What the kind modules share (kinds/*.ts): declared numbers read exactly, category lists and
 * histogram edges checked, and the domain tag their mechanism ids carry. No I/O, no kind.
 */
import {InvalidParameterError} from "../errors.js";
import {cmp, eq, frac, type Fraction, fracToString, parseFraction, toNumber} from "../fraction.js";
import {sha256Hex} from "../sha256.js";

export const MIN_CATEGORIES = 2;
export const MAX_CATEGORIES = 1024;
export const MAX_CATEGORY_LENGTH = 100;
/** Grid intervals of α-point rounding for numeric metrics (33 points), as memo.DEFAULT_GRID. */
export const DEFAULT_GRID = 32;

export const fail = (message: string): never => {
  throw new InvalidParameterError(message);
};
export const show = (text: unknown): string => JSON.stringify(String(text).slice(0, 80));

/** A finite JS number (or bigint) at its exact value: a double is m * 2**-e exactly. */
export function exactValue(value: unknown): Fraction {
  if (typeof value === "bigint") return frac(value);
  if (typeof value !== "number") {
    return fail("the value must be a number. Got a " +
                `${value === null ? "null" : typeof value} instead.`);
  }
  if (!Number.isFinite(value)) fail("the value must be a finite number. Got a non-finite number.");
  let m = value;
  let e = 0n;
  while (!Number.isInteger(m)) {  // doubling is exact: a non-integer double is below 2**52
    m *= 2;
    e++;
  }
  return frac(BigInt(m), 1n << e);
}

/** A declared number (an edge, a bound): an exact string ("3", "-1/2", "0.25") or a number. */
export function declaredNumber(name: string, value: unknown): Fraction {
  if (typeof value === "string") {
    return parseFraction(value) ?? parseDecimal(value) ??
      fail(`${name} must be a number. Got ${show(value)}.`);
  }
  if (typeof value === "number" && Number.isFinite(value) && !Number.isInteger(value)) {
    return declaredNumber(name, String(value));  // as it prints, as Python's Fraction(repr(x))
  }
  if (typeof value !== "number" && typeof value !== "bigint") {
    fail(`${name} must be a number (int, float or Fraction). Got ${show(value)} instead.`);
  }
  return exactValue(value);
}

/** A decimal such as "0.25", "-.5" or "1e-7" (as a double prints), exactly; null if not. */
function parseDecimal(text: string): Fraction | null {
  const m = /^(-?)([0-9]*)(?:\.([0-9]*))?(?:e([+-]?[0-9]+))?$/.exec(text);
  if (m === null || !(m[2] || m[3])) return null;
  const digits = BigInt(`${m[1]}${m[2] || "0"}${m[3] ?? ""}`);
  const exponent = Number(m[4] ?? 0) - (m[3] ?? "").length;
  return exponent >= 0 ? frac(digits * 10n ** BigInt(exponent))
    : frac(digits, 10n ** BigInt(-exponent));
}

/** A bound or edge as people write it: an integer, a short decimal, or a fraction. */
export function label(value: Fraction): string {
  if (value.den === 1n) return `${value.num}`;
  const shown = String(toNumber(value));
  const back = parseDecimal(shown);
  return back !== null && eq(back, value) ? shown : fracToString(value);
}

/** The 8-hex-digit digest of a category list (or of a histogram's edges) that ids carry. */
export function domainTag(labels: readonly string[]): string {
  return sha256Hex(new TextEncoder().encode(JSON.stringify(labels))).slice(0, 8);
}

export function typeOf(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "list" : typeof value;
}

export function bucketLabels(edges: readonly Fraction[]): string[] {
  if (edges.length < MIN_CATEGORIES + 1 || edges.length > MAX_CATEGORIES + 1) {
    fail(`a histogram declares ${MIN_CATEGORIES + 1} to ${MAX_CATEGORIES + 1} edges ` +
         `(${MIN_CATEGORIES} to ${MAX_CATEGORIES} buckets). Got ${edges.length}.`);
  }
  if (edges.some((e, i) => i > 0 && cmp(e, edges[i - 1]!) <= 0)) {
    fail("histogram edges must increase strictly");
  }
  return edges.slice(1).map((e, i) => `[${label(edges[i]!)}, ${label(e)}` +
                                       `${i === edges.length - 2 ? "]" : ")"}`);
}

export function checkCategories(labels: readonly unknown[]): void {
  if (labels.length < MIN_CATEGORIES || labels.length > MAX_CATEGORIES) {
    fail(`a categorical metric declares ${MIN_CATEGORIES} to ${MAX_CATEGORIES} categories. ` +
         `Got ${labels.length}.`);
  }
  labels.forEach((l, i) => {
    if (typeof l !== "string" || !l || [...l].length > MAX_CATEGORY_LENGTH) {
      fail(`categories[${i}] must be a non-empty string of at most ${MAX_CATEGORY_LENGTH} ` +
           `characters. Got ${show(l)}.`);
    }
  });
  if (new Set(labels).size !== labels.length) fail("categories must be distinct");
}

/**
 * A reported number at its exact value, in [low, high] (clamped into it if the metric declares
 * clamp). Never shows the value in an error: it is the secret.
 * @throws InvalidParameterError not a number, NaN or infinite, or out of range without clamp.
 */
export function numberIn(value: unknown, low: Fraction, high: Fraction, clamp: boolean): Fraction {
  if (typeof value !== "number" && typeof value !== "bigint") {
    fail(`the value must be a number. Got a ${typeOf(value)} instead.`);
  }
  const number = exactValue(value);
  if (cmp(number, low) >= 0 && cmp(number, high) <= 0) return number;
  if (!clamp) {
    fail(`the value must lie in [${label(low)}, ${label(high)}] (the metric does not ` +
         "declare clamp)");
  }
  return cmp(number, low) < 0 ? low : high;
}

const MAX_ID = 18446744073709551616n;  // 2**64 (a literal: bundles leave an unused one out)

/**
 * One exact number of a mechanism id, as Python's `fraction_field`: `num/den` (or `num` where
 * `whole`), in lowest terms, denominator and numerator at most 2**64, negative only if `signed`.
 */
export function fractionField(name: string, text: string, signed = false,
                              whole = false): Fraction {
  const match = /^(-?)([0-9]{1,20})(?:\/([0-9]{1,20}))?$/.exec(text);
  if (match === null || (match[1] && !signed) || (match[3] === undefined && !whole)) {
    fail(`${name} in a mechanism id must be ${whole ? "a number or " : ""}a fraction such as ` +
         `'1/2'${signed ? ", maybe negative" : ""}. Got ${show(text)}.`);
  }
  const den = BigInt(match![3] ?? "1");
  if (den === 0n || den > MAX_ID || BigInt(match![2]!) > MAX_ID) {
    fail(`${name} in a mechanism id must have a denominator in [1, 2**64]. Got ${show(text)}.`);
  }
  const value = frac(BigInt(match![1]! + match![2]!), den);
  if (fracToString(value) !== text) {
    fail(`${name} in a mechanism id must be in lowest terms: '${fracToString(value)}'. ` +
         `Got ${show(text)} instead.`);
  }
  return value;
}
