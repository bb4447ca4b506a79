/**
 * Metric kinds beyond boolean, mirroring deniable.client.categorical, numeric, kinds and memo
 * (THE definitions, in Python): categorical and histogram metrics under k-ary randomized
 * response (`grr:<d>:<p>:<tag>`), optimized unary encoding (`oue:<d>:<q>:<tag>`) or subset
 * selection (`ss:<d>:<k>:<r>:<tag>`), and numeric metrics under 1BitMean
 * (`bm:<a>:<lower>:<upper>`).
 *
 * A page opts in: `import {Reporter} from "deniable-client/all"` (src/all.ts). The default
 * entry point stays boolean-only, so a page that reports booleans does not ship this module.
 *
 * Every draw is the Python *reference* sampler's, draw for draw (a mechanism's
 * `perturb(value, rng)` with an injected source): integer draws `below(n)` by rejection, and
 * coins decided byte by byte against the probability's base-256 expansion (`ByteCoin`), so each
 * outcome has exactly the stated probability and no float is ever compared with a random
 * number. Bytes come from a SecureBits as whole 64-bit words (the rest of a word dropped), from
 * any other source (the memo's HMAC stream) 8 bits at a time, as Python's `byte_source`.
 * The shared test vectors (tests/vectors) check ids, channels, outputs, memoized answers,
 * encodings and refusals against the Python code.
 */
import {Dimensions, NONE} from "./dimensions.js";
import {InvalidParameterError, WireFormatError} from "./errors.js";
import {
  add, cmp, div, eq, frac, type Fraction, fracToString, mul, parseFraction, sub, toNumber,
} from "./fraction.js";
import {RandomizedResponse, Rr} from "./mechanism.js";
import {BlockBits, memoContext, OutOfBits} from "./memo.js";
import {below, type RandomBits, SecureBits, SYSTEM_BITS} from "./random.js";
import {
  bucketLabels, checkCategories, declaredNumber, DEFAULT_GRID, domainTag, exactValue, fail,
  fractionField, label,
  MAX_CATEGORIES, MIN_CATEGORIES, show, typeOf,
} from "./kinds/values.js";
import {type Encoded, type Kind as KindModule, kindName, type ValueKind} from "./kinds/kind.js";
import {OpenDomainSketch} from "./open.js";
import {KIND_TABLE, kindNamed, type KindName, type ValueKindName} from "./kinds/table.js";
import {isMetricName, type Payload} from "./wire.js";

export {fractionField} from "./kinds/values.js";
export {
  DEFAULT_GRID, domainTag, exactValue, MAX_CATEGORIES, MAX_CATEGORY_LENGTH, MIN_CATEGORIES,
} from "./kinds/values.js";

/** The kinds (kinds/table.ts): boolean, categorical, histogram, numeric. */
export const KINDS = Object.keys(KIND_TABLE) as readonly Kind[];
export type Kind = KindName;
/** Every mechanism family (id prefix) of a registered kind. */
const FAMILIES: readonly string[] = Object.values(KIND_TABLE).flatMap((k) => k.families);

const MAX_ID = 1n << 64n;
const ONE = frac(1n);
const HALF = frac(1n, 2n);
const TAG = /^[0-9a-f]{8}$/;
const CATEGORICAL_ID = /^(grr|oue):([0-9]{1,4}):([0-9/]{1,41}):([0-9a-f]{8})$/;
const SS_ID = /^ss:([0-9]{1,4}):([0-9]{1,4}):([0-9/]{1,41}):([0-9a-f]{8})$/;
const BM_ID = /^bm:([0-9/]{1,41}):(-?[0-9/]{1,42}):(-?[0-9/]{1,42})$/;


// -- exact numbers --------------------------------------------------------------------------

// -- random bytes and exact coins ---------------------------------------------------------------

/** n -> n uniform bytes, as Python's byte_source: a SecureBits serves whole 64-bit words
 * (little-endian, the rest of the last word dropped); any other source 8 bits per byte. */
export function byteSource(rng: RandomBits): (n: number) => Uint8Array {
  if (rng instanceof SecureBits) {
    return (n) => {
      const out = new Uint8Array(Math.ceil(n / 8) * 8);
      for (let i = 0; i < out.length; i += 8) {
        let word = rng.bigBits(64);
        for (let j = 0; j < 8; j++, word >>= 8n) out[i + j] = Number(word & 255n);
      }
      return out.subarray(0, n);
    };
  }
  return (n) => Uint8Array.from({length: n}, () => rng.bits(8));
}

/** A uniform integer in [0, bound) for any bound, as Python's `below`: past 2**64, whole
 * draws of k bits made of 64-bit pieces (high first), rejected while >= bound. */
export function belowAny(rng: RandomBits, bound: bigint): bigint {
  if (bound <= MAX_ID) return below(rng, bound);
  const k = (bound - 1n).toString(2).length;
  for (;;) {
    let value = 0n;
    for (let got = 0; got < k;) {
      const take = Math.min(64, k - got);
      value = (value << BigInt(take)) | rng.bigBits(take);
      got += take;
    }
    if (value < bound) return value;
  }
}

/**
 * Coins that come up 1 with probability exactly p, decided from bytes (Python's ByteCoin): a
 * uniform U = 0.b0 b1 ... in base 256 against p's expansion t0 t1 ...; 1 iff U < p, decided at
 * the first differing digit; where the expansion ends and every digit agrees, 0.
 */
export class ByteCoin {
  private readonly digits: [number, boolean][] = [];

  constructor(private readonly p: Fraction) {
    if (p.num < 0n || p.num >= p.den) fail(`a coin's probability lies in [0, 1). Got ${fracToString(p)}.`);
  }

  /** (t_level, whether the expansion ends there). */
  digit(level: number): [number, boolean] {
    while (this.digits.length <= level) {
      const scaled = this.p.num * 256n ** BigInt(this.digits.length + 1);
      const whole = scaled / this.p.den;
      this.digits.push([Number(whole % 256n), whole * this.p.den === scaled]);
    }
    return this.digits[level]!;
  }

  /** One coin (1 or 0) per byte of `first`; undecided coins draw their next digits, all at
   * one level in one `draw` call, in order. */
  decide(first: Uint8Array, draw: (n: number) => Uint8Array): Uint8Array {
    const marks = new Uint8Array(first.length);
    const [t0, last] = this.digit(0);
    let pending: number[] = [];
    first.forEach((b, i) => {
      if (b < t0) marks[i] = 1;
      else if (b === t0 && !last) pending.push(i);
    });
    for (let level = 1; pending.length > 0; level++) {
      const [digit, end] = this.digit(level);
      const bytes = draw(pending.length);
      const still: number[] = [];
      pending.forEach((i, j) => {
        const b = bytes[j]!;
        if (b === digit && !end) still.push(i);
        else marks[i] = b < digit ? 1 : 0;
      });
      pending = still;
    }
    return marks;
  }
}

// -- the mechanisms ---------------------------------------------------------------------------

/** What every mechanism of a kind beyond boolean offers. */
export interface ValueMechanism {
  readonly id: string;
  readonly kind: "categorical" | "numeric" | "open";
  /** (P1, Q): the channel each counted slot follows, exact. */
  readonly p1: Fraction;
  readonly q: Fraction;
  /** The most one report moves the odds between two true values, exact. */
  readonly likelihoodRatio: Fraction;
  readonly epsilon: number;
  /** The perturbed report as it travels (an index, a hex bitset or a bit). */
  perturb(value: Encoded, rng?: RandomBits): Payload;
}

function checkSize(d: number): number {
  if (!Number.isInteger(d) || d < MIN_CATEGORIES || d > MAX_CATEGORIES) {
    fail(`a categorical metric has ${MIN_CATEGORIES} to ${MAX_CATEGORIES} categories. ` +
         `Got ${d} instead.`);
  }
  return d;
}

function checkTag(tag: string): string {
  if (!TAG.test(tag)) fail(`tag must be 8 lowercase hex digits (domain_tag of the categories). Got ${show(tag)}.`);
  return tag;
}

function checkIndex(index: unknown, d: number): number {
  if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= d) {
    fail(`a category index must be an int in [0, ${d}).`);
  }
  return index as number;
}

const log = (ratio: Fraction): number =>
  cmp(ratio, frac(2n)) >= 0 ? Math.log(toNumber(ratio)) : Math.log1p(toNumber(sub(ratio, ONE)));

/** (prefix, d, probability, tag) of a grr:/oue: id (canonical spellings only). */
function parseCategoricalId(id: string): [string, number, Fraction, string] {
  const match = typeof id === "string" ? CATEGORICAL_ID.exec(id) : null;
  if (match === null) {
    return fail("a categorical mechanism id looks like 'grr:<d>:<p>:<tag>' or " +
                `'oue:<d>:<q>:<tag>', e.g. 'grr:6:1/2:0a1b2c3d'. Got ${show(id)}.`);
  }
  const d = Number(match[2]);
  if (String(d) !== match[2]) fail(`d must have no leading zeros. Got ${show(id)}.`);
  return [match[1]!, checkSize(d), fractionField("probability", match[3]!), match[4]!];
}

/** Bitset digits on the wire: ceil(d / 4) lowercase hex. */
export const bitsetDigits = (d: number): number => Math.ceil(d / 4);
/** The wire spelling of a bitset over d categories (bit i = category i). */
export const encodeBitset = (bits: bigint, d: number): string =>
  bits.toString(16).padStart(bitsetDigits(d), "0");

/** k-ary randomized response (GRR) over d categories: the true one with probability p. */
export class KaryRandomizedResponse implements ValueMechanism {
  readonly kind = "categorical";
  readonly id: string;
  readonly q: Fraction;

  constructor(readonly d: number, readonly p: Fraction, readonly tag: string) {
    checkSize(d);
    checkTag(tag);
    if (!(cmp(frac(1n, BigInt(d)), p) < 0 && cmp(p, ONE) < 0)) {
      fail(`p must lie strictly between 1/d = 1/${d} (no information) and 1 (infinite ` +
           `epsilon). Got ${fracToString(p)} instead.`);
    }
    this.id = `grr:${d}:${fracToString(p)}:${tag}`;
    this.q = div(sub(ONE, p), frac(BigInt(d - 1)));
  }

  static fromId(id: string): KaryRandomizedResponse {
    const [prefix, d, p, tag] = parseCategoricalId(id);
    if (prefix !== "grr") fail(`not a GRR id: ${show(id)}`);
    return new KaryRandomizedResponse(d, p, tag);
  }

  get p1(): Fraction { return this.p; }
  get likelihoodRatio(): Fraction { return div(this.p, this.q); }
  get epsilon(): number { return log(this.likelihoodRatio); }

  /** The reported index: keep with probability p, else uniform over the d - 1 others. */
  perturb(index: number, rng: RandomBits = SYSTEM_BITS): number {
    checkIndex(index, this.d);
    const keep = below(rng, this.p.den) < this.p.num;
    let other = Number(below(rng, BigInt(this.d - 1)));
    if (other >= index) other++;
    return keep ? index : other;
  }
}

/** Optimized unary encoding (OUE): one bit per category, the true one's fair, others q. */
export class UnaryEncoding implements ValueMechanism {
  readonly kind = "categorical";
  readonly id: string;
  readonly p1 = HALF;
  private readonly coin: ByteCoin;

  constructor(readonly d: number, readonly q: Fraction, readonly tag: string) {
    checkSize(d);
    checkTag(tag);
    if (!(q.num > 0n && cmp(q, HALF) < 0)) {
      fail("q must lie strictly between 0 (infinite epsilon) and 1/2 (no information). " +
           `Got ${fracToString(q)} instead.`);
    }
    this.id = `oue:${d}:${fracToString(q)}:${tag}`;
    this.coin = new ByteCoin(q);
  }

  static fromId(id: string): UnaryEncoding {
    const [prefix, d, q, tag] = parseCategoricalId(id);
    if (prefix !== "oue") fail(`not an OUE id: ${show(id)}`);
    return new UnaryEncoding(d, q, tag);
  }

  get likelihoodRatio(): Fraction { return div(sub(ONE, this.q), this.q); }
  get epsilon(): number { return log(this.likelihoodRatio); }

  /** The reported bitset (hex): d coins of probability q, then the true bit a fair coin (the
   * top bit of one more byte). */
  perturb(index: number, rng: RandomBits = SYSTEM_BITS): string {
    checkIndex(index, this.d);
    const draw = byteSource(rng);
    const raw = draw(this.d + 1);
    const marks = this.coin.decide(raw.subarray(0, this.d), draw);
    marks[index] = raw[this.d]! >> 7;
    return encodeBitset(marksToBits(marks), this.d);
  }
}

function marksToBits(marks: Uint8Array): bigint {
  let bits = 0n;
  for (let i = marks.length - 1; i >= 0; i--) bits = (bits << 1n) | BigInt(marks[i]!);
  return bits;
}

/** Subset selection (SS): a set of k categories, r times as likely when it holds the true one. */
export class SubsetSelection implements ValueMechanism {
  readonly kind = "categorical";
  readonly id: string;
  readonly p1: Fraction;
  readonly q: Fraction;
  private readonly coin: ByteCoin;

  constructor(readonly d: number, readonly k: number, readonly r: Fraction,
              readonly tag: string) {
    checkSize(d);
    checkTag(tag);
    if (!Number.isInteger(k) || k < 1 || k >= d) {
      fail(`k (the subset size) must be an int in [1, d - 1] = [1, ${d - 1}]. Got ${k} instead.`);
    }
    if (cmp(r, ONE) <= 0) {
      fail(`r (the likelihood ratio) must exceed 1 (no information at 1). Got ${fracToString(r)}.`);
    }
    this.id = `ss:${d}:${k}:${fracToString(r)}:${tag}`;
    const kr = mul(frac(BigInt(k)), r);
    const total = add(kr, frac(BigInt(d - k)));
    this.p1 = div(kr, total);
    this.q = div(mul(frac(BigInt(k)), add(mul(frac(BigInt(k - 1)), r), frac(BigInt(d - k)))),
                 mul(frac(BigInt(d - 1)), total));
    this.coin = new ByteCoin(this.p1);
  }

  static fromId(id: string): SubsetSelection {
    const match = typeof id === "string" ? SS_ID.exec(id) : null;
    if (match === null) {
      return fail("a subset-selection id looks like 'ss:<d>:<k>:<r>:<tag>', e.g. " +
                  `'ss:8:3:3/2:0a1b2c3d'. Got ${show(id)}.`);
    }
    if (String(Number(match[1])) !== match[1] || String(Number(match[2])) !== match[2]) {
      fail(`d and k must have no leading zeros. Got ${show(id)}.`);
    }
    return new SubsetSelection(checkSize(Number(match[1])), Number(match[2]),
                               fractionField("r", match[3]!, false, true), match[4]!);
  }

  get likelihoodRatio(): Fraction { return this.r; }
  get epsilon(): number { return log(this.r); }

  /** The reported subset (hex bitset): the true category kept with probability P1 (a coin
   * on fresh bytes), the rest a partial Fisher-Yates shuffle of the others with `below`. */
  perturb(index: number, rng: RandomBits = SYSTEM_BITS): string {
    checkIndex(index, this.d);
    const read = byteSource(rng);
    const keep = this.coin.decide(read(1), read)[0] === 1;
    const d = this.d;
    const others = Array.from({length: d - 1}, (_, i) => i);
    if (index < d - 1) others[index] = d - 1;
    let bits = keep ? 1n << BigInt(index) : 0n;
    for (let t = 0; t < (keep ? this.k - 1 : this.k); t++) {
      const j = t + Number(below(rng, BigInt(d - 1 - t)));
      [others[t], others[j]] = [others[j]!, others[t]!];
      bits |= 1n << BigInt(others[t]!);
    }
    return encodeBitset(bits, d);
  }
}

/** 1BitMean over [lower, upper]: one bit, 1 with probability a + (1 - 2a)(x - lower)/(upper - lower). */
export class BitMean implements ValueMechanism {
  readonly kind = "numeric";
  readonly id: string;

  constructor(readonly a: Fraction, readonly lower: Fraction, readonly upper: Fraction) {
    if (!(a.num > 0n && cmp(a, HALF) < 0)) {
      fail("a must lie strictly between 0 (infinite epsilon) and 1/2 (no information). " +
           `Got ${fracToString(a)} instead.`);
    }
    if (cmp(lower, upper) >= 0) {
      fail(`lower must be below upper. Got [${fracToString(lower)}, ${fracToString(upper)}] instead.`);
    }
    this.id = `bm:${fracToString(a)}:${fracToString(lower)}:${fracToString(upper)}`;
  }

  static fromId(id: string): BitMean {
    const match = typeof id === "string" ? BM_ID.exec(id) : null;
    if (match === null) {
      return fail("a numeric mechanism id looks like 'bm:<a>:<lower>:<upper>', e.g. " +
                  `'bm:1/4:0:10000'. Got ${show(id)} instead.`);
    }
    return new BitMean(fractionField("a", match[1]!),
                       fractionField("lower", match[2]!, true, true),
                       fractionField("upper", match[3]!, true, true));
  }

  get p1(): Fraction { return sub(ONE, this.a); }
  get q(): Fraction { return this.a; }
  get likelihoodRatio(): Fraction { return div(sub(ONE, this.a), this.a); }
  get epsilon(): number { return log(this.likelihoodRatio); }

  /** The reported bit for the exact `value` in [lower, upper]: one integer draw below the
   * probability's unreduced denominator, as Python's BitMean.perturb. */
  perturb(value: Fraction, rng: RandomBits = SYSTEM_BITS): 0 | 1 {
    const {num: xn, den: xd} = value;
    const {num: ln, den: ld} = this.lower;
    const {num: un, den: ud} = this.upper;
    const {num: sn, den: sd} = sub(this.upper, this.lower);
    const {num: an, den: ad} = this.a;
    const offset = xn * ld - ln * xd;
    if (offset < 0n || xn * ud > un * xd) {
      fail(`the value must lie in [${fracToString(this.lower)}, ${fracToString(this.upper)}].`);
    }
    const scale = xd * ld * sn;
    const num = an * scale + (ad - 2n * an) * offset * sd;
    return belowAny(rng, ad * scale) < num ? 1 : 0;
  }
}

/** The mechanism of a canonical id of a kind beyond boolean. */
export function parseValueMechanism(id: string): ValueMechanism {
  const prefix = typeof id === "string" ? id.split(":", 1)[0] : "";
  if (prefix === "grr") return KaryRandomizedResponse.fromId(id);
  if (prefix === "oue") return UnaryEncoding.fromId(id);
  if (prefix === "ss") return SubsetSelection.fromId(id);
  if (prefix === "bm") return BitMean.fromId(id);
  if (prefix === "od") return OpenDomainSketch.fromId(id);
  return fail(`mechanism id must start with one of bm, grr, od, oue, rr, ss and ':'. Got ${show(id)} instead.`);
}

/** Any mechanism by its id, boolean (rr:) included. */
export function parseMechanism(id: string): RandomizedResponse | ValueMechanism {
  return typeof id === "string" && id.startsWith("rr:") ? RandomizedResponse.fromId(id)
    : parseValueMechanism(id);
}

// -- metric specs -----------------------------------------------------------------------------

/** A declaration of a metric of a kind beyond boolean (as a catalogue entry or TOML table). */
export interface KindDeclaration {
  kind: ValueKindName;
  mechanism: string;
  categories?: readonly string[];
  edges?: readonly (string | number)[];
  lower?: string | number;
  upper?: string | number;
  clamp?: boolean;
  /** Open metrics: the longest string in UTF-8 bytes after NFC (the od: id carries it). */
  max_bytes?: number;
}

/**
 * One metric of a kind beyond boolean: its mechanism, what it declares, and how a true value
 * is encoded (Python's MetricSpec), memoized (deniable.client.memo) and perturbed.
 */
export class MetricSpec {
  readonly categories: readonly string[];
  readonly edges: readonly Fraction[];
  private readonly index = new Map<string, number>();

  /** @throws InvalidParameterError a declaration that does not hold, as Python's MetricSpec. */
  constructor(readonly kind: ValueKindName,
              readonly mechanism: ValueMechanism, categories: readonly string[] = [],
              edges: readonly Fraction[] = [], readonly clamp = false) {
    const k = valueKind(kind);
    const prefix = mechanism.id.split(":", 1)[0]!;
    if (!k.families.includes(prefix)) {
      fail(`a ${kind} metric needs a ${k.families.join(" or ")} mechanism. ` +
           `Got ${show(mechanism.id)} instead.`);
    }
    if (typeof clamp !== "boolean") fail(`clamp must be true or false. Got ${show(clamp)}.`);
    if (clamp && !k.fields.includes("clamp")) fail("clamp applies to histogram and numeric metrics only");
    this.edges = edges;
    this.categories = k.labels(mechanism, categories, edges);
    this.categories.forEach((l, i) => this.index.set(l, i));
  }

  /**
   * A spec from a declaration (a catalogue entry's fields, or a metrics-file table):
   * `kind`, `mechanism`, and `categories` / `edges` / `lower` and `upper` / `clamp`.
   */
  static fromDeclaration(doc: KindDeclaration | Record<string, unknown>): MetricSpec {
    const d = doc as Record<string, unknown>;
    const kind = d.kind as MetricSpec["kind"];
    if (typeof d.mechanism !== "string") fail(`a ${String(kind)} metric declares its mechanism id`);
    const mechanism = parseValueMechanism(d.mechanism as string);
    const k = valueKind(kind);
    const categories = k.categories(d);
    const edges = d.edges === undefined || d.edges === null ? [] : Array.isArray(d.edges)
      ? d.edges.map((e, i) => declaredNumber(`edges[${i}]`, e))
      : fail(`edges must be a list. Got ${show(d.edges)}.`);
    k.bounds(d, mechanism);
    return new MetricSpec(kind, mechanism, categories as string[], edges,
                          (d.clamp ?? false) as boolean);
  }

  /** Its kind's module (kinds/<kind>.ts). */
  get kindOf(): ValueKind {
    return KIND_TABLE[this.kind];
  }

  get id(): string { return this.mechanism.id; }
  get likelihoodRatio(): Fraction { return this.mechanism.likelihoodRatio; }
  get epsilon(): number { return this.mechanism.epsilon; }

  /** What the metric asks (kind, categories, edges, bounds, clamp): a served spec replaces
   * the declared one only if it asks the same (Python's _same_question). */
  get question(): string {
    const m = this.mechanism as BitMean;
    return JSON.stringify([this.kind, this.categories, this.edges.map(fracToString),
                           m.lower && fracToString(m.lower), m.upper && fracToString(m.upper),
                           this.clamp]);
  }

  /** The index of category (or bucket) `label`, if declared. */
  indexOf(label: string): number | undefined {
    return this.index.get(label);
  }

  /**
   * The true value as the mechanism takes it: a category index, or an exact number in range
   * (histogram: its bucket's index). Never shows the value in an error: it is the secret.
   * @throws InvalidParameterError wrong type, unknown category, NaN or infinite, out of range
   *   (unless the metric declares clamp).
   */
  encode(value: unknown): Encoded {
    return this.kindOf.encode(this, value);
  }

  /** A fresh perturbed report of an encoded value. */
  perturb(encoded: Encoded, rng: RandomBits = SYSTEM_BITS): Payload {
    return this.mechanism.perturb(encoded, rng);
  }

  /** The memo key of an encoded value: the index, or the grid point a number rounds to
   * under the device's threshold `alpha` (α-point rounding, memo.memo_key). */
  memoKey(encoded: Encoded, alpha: bigint, grid = DEFAULT_GRID): number {
    return this.kindOf.memoKey(this, encoded, alpha, grid);
  }

  /** The memo key of `encoded` on the device with `secret` (reporter.ts), or undefined if
   * its kind rounds (numeric) and `prepare` has not derived the device's α yet. */
  keyOf(encoded: Encoded, secret: CryptoKey | undefined, metric: string): number | undefined {
    const alpha = this.kindOf.rounds ? secret && ALPHAS.get(secret)?.get(metric) : 0n;
    return alpha === undefined ? undefined : this.memoKey(encoded, alpha);
  }

  /** Derive the device's α for `metric` once per secret, if its kind rounds (numeric). */
  async prepare(secret: CryptoKey, metric: string): Promise<void> {
    if (!this.kindOf.rounds) return;
    let alphas = ALPHAS.get(secret);
    if (alphas === undefined) ALPHAS.set(secret, alphas = new Map());
    if (!alphas.has(metric)) alphas.set(metric, await alphaThreshold(secret, metric));
  }

  /** The device's permanent answer for memo key `key` (memo.memo_answer). */
  async memoAnswer(secret: CryptoKey, metric: string, key: number,
                   grid = DEFAULT_GRID): Promise<Payload> {
    const [input, value] = this.kindOf.memoInput(this, key, grid);
    const m = this.mechanism;
    const start = m instanceof UnaryEncoding ? Math.ceil((m.d + 1) / 32) + 1 : 1;
    return hmacStream(secret, concat(memoPrefix("prr", metric, m.id), input),
                      (bits) => m.perturb(value, bits), start);
  }
}

/** The module of kind `kind`, one whose metrics are MetricSpecs (not boolean).
 * @throws InvalidParameterError another kind. */
function valueKind(kind: string): ValueKind {
  const k = kindNamed(kind);
  return k && "labels" in k ? k
    : fail(`kind must be one of ${KINDS.join(", ")}. Got ${show(kind)} instead.`);
}

// -- memoization (deniable.client.memo) --------------------------------------------------------

/** The length-prefixed ("deniable/memo/v1", label, metric, mechanism id) prefix of a context. */
export function memoPrefix(label: string, metric: string, mechanismId: string): Uint8Array {
  return memoContext(label, metric, mechanismId, 0).subarray(0, -1);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** `fn` over the HMAC-SHA256 stream of (secret, context); more blocks (doubling) while it
 * runs out, so it reads exactly the bits it would read from an endless stream. */
async function hmacStream<T>(secret: CryptoKey, context: Uint8Array, fn: (bits: RandomBits) => T,
                             start = 1): Promise<T> {
  const blocks: Uint8Array[] = [];
  for (let want = start; ; want *= 2) {
    const more = [];
    for (let i = blocks.length; i < want; i++) {
      const input = new Uint8Array(context.length + 8);
      input.set(context);
      new DataView(input.buffer).setBigUint64(context.length, BigInt(i), false);
      more.push(globalThis.crypto.subtle.sign("HMAC", secret, input));
    }
    for (const block of await Promise.all(more)) blocks.push(new Uint8Array(block));
    try {
      return fn(new BlockBits(blocks));
    } catch (error) {
      if (!(error instanceof OutOfBits)) throw error;
    }
  }
}

/** Each device secret's rounding thresholds (metric -> α), derived once (MetricSpec.prepare);
 * a forgotten secret's go with it. */
const ALPHAS = new WeakMap<CryptoKey, Map<string, bigint>>();

/** The device's secret rounding threshold for `metric` (memo.alpha_threshold): 64 bits. */
export function alphaThreshold(secret: CryptoKey, metric: string): Promise<bigint> {
  return hmacStream(secret, memoPrefix("alpha", metric, ""), (bits) => bits.bigBits(64));
}

/** memo.memo_value: the permanent answer for an encoded value, as the client derives it. */
export async function memoValue(secret: CryptoKey, metric: string, spec: MetricSpec,
                                encoded: Encoded, grid = DEFAULT_GRID): Promise<Payload> {
  const alpha = spec.kindOf.rounds ? await alphaThreshold(secret, metric) : 0n;
  return spec.memoAnswer(secret, metric, spec.memoKey(encoded, alpha, grid), grid);
}

// -- catalogues ---------------------------------------------------------------------------------

/** A metric of any kind. */
export type AnyMetric = RandomizedResponse | MetricSpec;

/**
 * Parse a GET /v1/metrics document with every kind (Python's parse_catalogue): entries of a
 * kind or mechanism family this client does not know are left out and passed to `skipped`;
 * every other entry is checked against everything it states (P1 and Q, categories and tag,
 * edges, bounds), and one that does not hold refuses the whole document. The public
 * dimensions each kept entry declares go to `dimensions`; an entry whose dimensions do not
 * parse is left out (passed to `skipped` with why), as in Python.
 */
export function parseAllCatalogue(doc: unknown,
                                  skipped?: (name: string, kind: string, why?: string) => void,
                                  dimensions?: Map<string, Dimensions>): Map<string, AnyMetric> {
  const entries = doc !== null && typeof doc === "object" ?
    (doc as {metrics?: unknown}).metrics : undefined;
  if (!Array.isArray(entries)) {
    throw new WireFormatError("the metrics document must hold a list under 'metrics'");
  }
  const catalogue = new Map<string, AnyMetric>();
  entries.forEach((entry: unknown, i) => {
    if (entry === null || typeof entry !== "object" || !("name" in entry) ||
        !("mechanism" in entry)) {
      throw new WireFormatError(`metrics entry ${i} is malformed`);
    }
    const e = entry as Record<string, unknown>;
    const kind = kindName(e);
    if (!isMetricName(e.name)) {
      throw new WireFormatError(`metrics entry ${i} has an invalid name ${show(e.name)}`);
    }
    const prefix = typeof e.mechanism === "string" ? e.mechanism.split(":", 1)[0]! : "";
    if (!(KINDS as readonly string[]).includes(kind) ||
        (typeof e.mechanism === "string" && !FAMILIES.includes(prefix))) {
      skipped?.(e.name, kind);
      return;
    }
    // Its public dimensions, before the rest (Python's parse_catalogue): an entry whose
    // dimensions do not parse is left out (passed to `skipped` with why), the others kept.
    let declared: Dimensions;
    try {
      declared = Dimensions.of(e);
    } catch (error) {
      skipped?.(e.name, kind, `its public dimensions are malformed ` +
                `(${(error as Error).message.slice(0, 200)}); fix the registration, or ` +
                "upgrade the client, to report it");
      return;
    }
    if (declared !== NONE) dimensions?.set(e.name, declared);
    let metric: AnyMetric;
    let claims: [unknown, unknown][];
    let p1: Fraction;
    let q: Fraction;
    try {
      const k = kindNamed(kind) as KindModule<AnyMetric>;
      [metric, claims, [p1, q]] = k.entry?.(e) ?? specEntry(e);
    } catch (error) {
      throw new WireFormatError(`metrics entry ${i} is malformed: ${(error as Error).message}`);
    }
    for (const [s1, sq] of claims) {
      const f1 = typeof s1 === "string" ? parseFraction(s1) : null;
      const fq = typeof sq === "string" ? parseFraction(sq) : null;
      if (f1 === null || fq === null || !eq(f1, p1) || !eq(fq, q)) {
        throw new WireFormatError(
          `metric '${e.name}' states P1, Q = ${show(s1)}, ${show(sq)}, which do not match its ` +
          `mechanism ${metric.id} (${fracToString(p1)}, ${fracToString(q)})`);
      }
    }
    catalogue.set(e.name, metric);
  });
  return catalogue;
}

/** A catalogue entry of a kind beyond boolean: its spec, its claimed and its own (P1, Q). */
function specEntry(e: Record<string, unknown>): [MetricSpec, [unknown, unknown][], [Fraction, Fraction]] {
  const spec = MetricSpec.fromDeclaration(e);
  return [spec, [[e.p1, e.q]], [spec.mechanism.p1, spec.mechanism.q]];
}

/** A metric declared in code: a mechanism, a spec, an id (`rr:`, or `bm:`, which carries its
 * bounds) or a declaration (`{kind, mechanism, categories | edges | lower, upper, clamp}`). */
export type Declared = RandomizedResponse | MetricSpec | string | KindDeclaration;

/** The metric of one declaration (Python's declared_spec). */
export function declareMetric(name: string, declared: Declared): AnyMetric {
  if (!isMetricName(name)) {
    fail("metric names are lowercase letters, digits and '_', at most 64 characters. " +
         `Got ${show(name)} instead.`);
  }
  if (declared instanceof Rr || declared instanceof MetricSpec) return declared;
  try {
    if (typeof declared === "object" && declared !== null) {
      if (typeof (declared as {mechanism?: unknown}).mechanism !== "string") {
        fail("declare the metric's mechanism id (the web client does not choose one from an " +
             "epsilon)");
      }
      const k = kindNamed(kindName(declared as {kind?: unknown})) as KindModule<AnyMetric> | undefined;
      return k?.declare?.(declared as unknown as Record<string, unknown>) ??
        MetricSpec.fromDeclaration(declared);
    }
    const mechanism = parseMechanism(declared);
    // A bare id of a family whose kind takes one (rr:, bm: with its bounds) declares the metric.
    const prefix = mechanism.id.split(":", 1)[0]!;
    for (const [kind, k] of Object.entries(KIND_TABLE)) {
      if (!k.bare || !k.families.includes(prefix)) continue;
      return mechanism instanceof Rr ? mechanism
        : new MetricSpec(kind as MetricSpec["kind"], mechanism as ValueMechanism);
    }
    return fail(`a bare ${show(declared)} does not name its categories: declare ` +
                "{kind, mechanism, categories} (or edges) instead");
  } catch (error) {
    return fail(`metric '${name}': ${(error as Error).message}`);
  }
}
