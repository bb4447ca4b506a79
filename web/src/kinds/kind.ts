/**
 * What a metric kind defines, in one module per kind (boolean.ts, categorical.ts, histogram.ts,
 * numeric.ts), registered in one table (table.ts). The rest of the code asks the kind: the
 * declaration's fields, the mechanism families, the encoding of a true value, the memo key and
 * the memo's input, and which paid answers stand in for one the cap refuses.
 */
import type {Fraction} from "../fraction.js";
import type {Rr} from "../mechanism.js";
import type {MetricSpec, ValueMechanism} from "../kinds.js";
import type {RandomBits} from "../random.js";
import type {Payload} from "../wire.js";

/** A metric of any kind: randomized response (booleans) or a spec (the other kinds). */
export type Metric = Rr | MetricSpec;

/** What the reporter asks of a metric (reporter.ts): a boolean's Rr and a MetricSpec alike. */
export interface Reported {
  readonly id: string;
  readonly epsilon: number;
  readonly likelihoodRatio: Fraction;
  /** A fresh perturbed report of `encoded` (what its kind's encode made). */
  perturb(encoded: any, rng: RandomBits): Payload;
  /** The memo key of `encoded` on the device with `secret`, or undefined until `prepare` has
   * derived what it needs (a numeric metric's rounding threshold α). */
  keyOf(encoded: any, secret: CryptoKey | undefined, metric: string): number | undefined;
  /** The device's permanent answer for memo key `key` (memo.memo_answer). */
  memoAnswer(secret: CryptoKey, metric: string, key: number): Promise<Payload>;
  /** Derive, once per secret, what `keyOf` needs (numeric: α); absent, nothing. */
  prepare?(secret: CryptoKey, metric: string): Promise<void>;
}

/** What the reporter asks of a metric's kind (reporter.ts): the default entry's booleans give
 * this only (boolean.ts, `reporting`), without the declaration and catalogue parts. */
export interface Reporting<M = Reported> {
  /** Whether its reports always draw fresh coins, never memoized (open). */
  readonly fresh?: boolean;
  /**
   * The true value as the mechanism takes it; never shows the value in an error.
   * @throws InvalidParameterError a value the metric does not take.
   */
  encode(metric: M, value: unknown): Encoded;
  /** The memo keys whose paid answer is sent instead of a new one the cap refuses, in order. */
  instead(metric: M, key: number): number[];
}

/** The kind a catalogue entry or declaration table states: none is boolean (collectors and
 * metrics files from before metric kinds). */
export const kindName = (e: {kind?: unknown} | undefined): string => String(e?.kind ?? "boolean");

/** One metric kind: what every kind defines (M: its metrics). */
export interface Kind<M extends Metric = Metric> extends Reporting<M> {
  /** The mechanism families (id prefixes) its metrics are reported under. */
  readonly families: readonly string[];
  /** The declaration fields only some kinds take that this one does. */
  readonly fields: readonly string[];
  /** Whether memo keys round a number under the device's secret threshold α (numeric). */
  readonly rounds?: boolean;
  /**
   * Its metric from a catalogue entry, the (P1, Q) pairs the entry claims and the metric's
   * own (P1, Q); kinds beyond boolean use MetricSpec.fromDeclaration (kinds.ts) when absent.
   */
  entry?(e: Record<string, unknown>): [M, [unknown, unknown][], [Fraction, Fraction]];
  /** Its metric from a declaration table; MetricSpec.fromDeclaration when absent. */
  declare?(table: Record<string, unknown>): M;
  /** Whether a bare mechanism id of its family declares a metric (`rr:`, `bm:`, `od:`). */
  readonly bare?: boolean;
  /** Whether it takes an instantaneous layer (layers.ts; booleans). */
  readonly layered?: boolean;
}

/** A kind beyond boolean: its metrics are MetricSpecs (kinds.ts), and it defines their domain,
 * encoding and memo. */
export interface ValueKind extends Kind<MetricSpec> {
  /** The category (bucket) labels of a declaration, checked against `mechanism`. */
  labels(mechanism: ValueMechanism, categories: readonly string[], edges: readonly Fraction[]):
    string[];
  /** The categories a declaration lists. */
  categories(d: Record<string, unknown>): unknown[];
  /** Check a declaration's bounds (lower, upper) against `mechanism`. */
  bounds(d: Record<string, unknown>, mechanism: ValueMechanism): void;
  /** The memo key of an encoded value under the device's threshold `alpha`. */
  memoKey(spec: MetricSpec, encoded: Encoded, alpha: bigint, grid: number): number;
  /** The memo's HMAC input for `key` (after its prefix), and the value perturbed for it. */
  memoInput(spec: MetricSpec, key: number, grid: number): [Uint8Array, Encoded];
}

/** A true value as a mechanism takes it: an index, an exact number or padded bytes (open). */
export type Encoded = number | Fraction | Uint8Array;

/** Memo keys 0..last by distance from `key`, the lower first on a tie (histogram, numeric). */
export function nearest(key: number, last: number): number[] {
  const keys: number[] = [];
  for (let distance = 1; distance <= last; distance++) {
    for (const point of [key - distance, key + distance]) {
      if (point >= 0 && point <= last) keys.push(point);
    }
  }
  return keys;
}

/** A category index's memo input: 4 bytes, big-endian. */
export function indexInput(key: number): [Uint8Array, number] {
  const value = new Uint8Array(4);
  new DataView(value.buffer).setUint32(0, key, false);
  return [value, key];
}
