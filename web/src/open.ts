/**
 * The open-domain mechanism (`od:`), mirroring deniable.client.open_domain (THE definition, in
 * Python): prefix extension with local hashing over a FIXED family of hash seeds.
 *
 * 1. The value is normalised (`normalise`): Unicode NFC, UTF-8, at most `maxBytes` bytes
 *    (longer: refused, or cut at a character boundary if the metric declares `clamp`), no NUL,
 *    not empty; then padded with NUL bytes to `maxBytes`.
 * 2. The device draws a level l in [0, levels) and a seed s in [0, seeds), levels = maxBytes /
 *    step (`below`: exact, secure), neither of which depends on the value.
 * 3. It hashes its prefix of (l + 1) step bytes with h_{l,s} to a bucket in [0, g) and reports
 *    that bucket through k-ary randomized response over g: the true bucket with probability p,
 *    each other with q = (1 - p) / (g - 1), by integer draws only (`below(den) < num`).
 *
 * The report is one integer, cell = (l seeds + s) g + y, sent as `{"cell": n}`. Level and seed
 * are independent of the value and, given them, the bucket is GRR over g: epsilon =
 * ln(p (g - 1) / (1 - p)), exactly the GRR's, whatever the hash family.
 *
 * The hash: for level l and seed s, constants a_0, a_1, ... are the little-endian 64-bit words
 * of SHA-256("deniable/od/v1" || byte(l) || uint32_le(s) || byte(j)), j = 0, 1, ... (four per
 * digest). The prefix, zero-padded to a multiple of 4 bytes, is read as little-endian 32-bit
 * words w_1..w_m; h = (a_0 + sum a_i w_i) mod 2**64; the bucket is ((h >> 32) g) >> 32.
 * The shared test vectors (tests/vectors, `open_domain`) check all of this against Python.
 */
import {InvalidParameterError} from "./errors.js";
import {cmp, div, frac, type Fraction, fracToString, sub, toNumber} from "./fraction.js";
import {fractionField} from "./kinds/values.js";
import {below, type RandomBits, SYSTEM_BITS} from "./random.js";
import {sha256Hex} from "./sha256.js";

export const ID_PREFIX = "od";
/** The longest string (UTF-8 bytes, after NFC) a metric may declare. */
export const MAX_BYTES_LIMIT = 64;
export const DEFAULT_MAX_BYTES = 16;
export const DEFAULT_SEEDS = 1024;
export const MAX_SEEDS = 1 << 16;
export const MAX_G = 1024;
const HASH_DOMAIN = new TextEncoder().encode("deniable/od/v1");
const MASK64 = (1n << 64n) - 1n;
const ONE = frac(1n);
const OD_ID = /^od:([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,5}):([0-9]{1,4}):([0-9/]{1,41})$/;
/** A lone (unpaired) surrogate: text that has no UTF-8 encoding (Python refuses it). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ENCODER = new TextEncoder();

function fail(message: string): never {
  throw new InvalidParameterError(message);
}

/**
 * The string as the mechanism takes it: NFC, UTF-8, NUL-padded to `maxBytes` bytes.
 * @throws InvalidParameterError not a string, empty, holds U+0000, not valid Unicode, or longer
 *   than `maxBytes` UTF-8 bytes after NFC (unless `clamp`: then cut at the last whole
 *   character, refused if none fits). The message never shows the value: it is the secret.
 */
export function normalise(value: unknown, maxBytes: number, clamp = false): Uint8Array {
  if (typeof value !== "string") {
    fail(`the value must be a str. Got a ${value === null ? "null" : typeof value} instead.`);
  }
  if (LONE_SURROGATE.test(value)) fail("the value must be valid Unicode text");
  const data = ENCODER.encode(value.normalize("NFC"));
  if (data.length === 0) fail("the value must be a non-empty string");
  if (data.includes(0)) fail("the value must not hold U+0000 (NUL pads the string)");
  let length = data.length;
  if (length > maxBytes) {
    if (!clamp) {
      fail(`the value must be at most ${maxBytes} UTF-8 bytes after NFC (the metric does not ` +
           "declare clamp)");
    }
    length = maxBytes;
    while (length > 0 && (data[length]! & 0xc0) === 0x80) length--;  // never split a character
    if (length === 0) fail(`the value's first character is longer than ${maxBytes} UTF-8 bytes`);
  }
  const padded = new Uint8Array(maxBytes);
  padded.set(data.subarray(0, length));
  return padded;
}

/** `count` 64-bit constants a_0, a_1, ... of hash h_{level,seed} (see the module doc). */
export function hashConstants(level: number, seed: number, count: number): bigint[] {
  const out: bigint[] = [];
  const input = new Uint8Array(HASH_DOMAIN.length + 6);
  input.set(HASH_DOMAIN);
  const view = new DataView(input.buffer);
  view.setUint8(HASH_DOMAIN.length, level);
  view.setUint32(HASH_DOMAIN.length + 1, seed, true);
  for (let j = 0; out.length < count; j++) {
    view.setUint8(HASH_DOMAIN.length + 5, j);
    const hex = sha256Hex(input);
    for (let i = 0; i < 64; i += 16) {
      let word = 0n;  // little-endian: the byte at i + 2k is worth 256**k
      for (let k = 7; k >= 0; k--) word = (word << 8n) | BigInt(parseInt(hex.slice(i + 2 * k, i + 2 * k + 2), 16));
      out.push(word);
    }
  }
  return out.slice(0, count);
}

/** The prefix, zero-padded to a multiple of 4 bytes, as little-endian 32-bit words. */
export function prefixWords(prefix: Uint8Array): number[] {
  const words: number[] = [];
  for (let i = 0; i < prefix.length; i += 4) {
    words.push(((prefix[i] ?? 0) | ((prefix[i + 1] ?? 0) << 8) | ((prefix[i + 2] ?? 0) << 16) |
                ((prefix[i + 3] ?? 0) << 24)) >>> 0);
  }
  return words;
}

/** The 64-bit hash h_{level,seed}(prefix): multiply-add-shift (see the module doc). */
export function prefixHash(prefix: Uint8Array, level: number, seed: number,
                           constants = hashConstants(level, seed, Math.ceil(prefix.length / 4) + 1)
): bigint {
  const words = prefixWords(prefix);
  let h = constants[0]!;
  words.forEach((w, i) => { h += constants[i + 1]! * BigInt(w); });
  return h & MASK64;
}

/** h_{level,seed}(prefix) in [0, g): the hash, then multiply-shift to [0, g). */
export function bucket(prefix: Uint8Array, level: number, seed: number, g: number): number {
  return Number((((prefixHash(prefix, level, seed) >> 32n) * BigInt(g)) >> 32n));
}

function checkInt(name: string, value: number, low: number, high: number): number {
  if (!Number.isInteger(value) || value < low || value > high) {
    fail(`${name} must be an int in [${low}, ${high}]. Got ${String(value)} instead.`);
  }
  return value;
}

/**
 * Prefix extension with local hashing over a fixed seed family, `od:<maxBytes>:<step>:<seeds>:
 * <g>:<p>`, e.g. `od:16:1:1024:10:1/2`: q = 1/18, epsilon = ln 9 (Python's OpenDomainSketch).
 */
export class OpenDomainSketch {
  readonly kind = "open";
  readonly id: string;
  /** P(report bucket y | true bucket != y): (1 - p) / (g - 1), exact. */
  readonly q: Fraction;
  /** Constants per (level, seed), derived on first use (levels seeds entries at most). */
  private readonly constants = new Map<number, bigint[]>();

  /**
   * @param maxBytes longest string in UTF-8 bytes after NFC, 1..64.
   * @param step bytes added per level, 1 or 2, dividing maxBytes.
   * @param seeds hash seeds in the family, 1..65536.
   * @param g buckets per hash, 2..1024.
   * @param p probability of reporting the true bucket, exact, in (1/g, 1).
   * @throws InvalidParameterError a parameter out of range.
   */
  constructor(readonly maxBytes = DEFAULT_MAX_BYTES, readonly step = 1,
              readonly seeds = DEFAULT_SEEDS, readonly g = 10, readonly p: Fraction = frac(1n, 2n)) {
    checkInt("max_bytes", maxBytes, 1, MAX_BYTES_LIMIT);
    checkInt("step", step, 1, 2);
    checkInt("seeds", seeds, 1, MAX_SEEDS);
    checkInt("g", g, 2, MAX_G);
    if (maxBytes % step !== 0) {
      fail(`step must divide max_bytes. Got step ${step}, max_bytes ${maxBytes}.`);
    }
    if (!(cmp(frac(1n, BigInt(g)), p) < 0 && cmp(p, ONE) < 0)) {
      fail(`p must lie strictly between 1/d = 1/${g} (no information) and 1 (infinite ` +
           `epsilon). Got ${fracToString(p)} instead.`);
    }
    this.id = `${ID_PREFIX}:${maxBytes}:${step}:${seeds}:${g}:${fracToString(p)}`;
    this.q = div(sub(ONE, p), frac(BigInt(g - 1)));
  }

  /**
   * Parse `od:<max_bytes>:<step>:<seeds>:<g>:<p>` (canonical spelling only).
   * @throws InvalidParameterError any other spelling, or parameters out of range.
   */
  static fromId(id: string): OpenDomainSketch {
    const match = typeof id === "string" ? OD_ID.exec(id) : null;
    if (match === null) {
      return fail("an open-domain mechanism id looks like 'od:<max_bytes>:<step>:<seeds>:<g>:" +
                  `<p>', e.g. 'od:16:1:1024:10:9/17'. Got ${JSON.stringify(String(id).slice(0, 80))} instead.`);
    }
    const numbers = match.slice(1, 5).map((text) => {
      if (String(Number(text)) !== text) fail(`numbers must have no leading zeros. Got '${id}'.`);
      return Number(text);
    });
    const sketch = new OpenDomainSketch(numbers[0], numbers[1], numbers[2], numbers[3],
                                        fractionField("p", match[5]!));
    if (sketch.id !== id) fail(`not canonical: '${id}' (is '${sketch.id}')`);
    return sketch;
  }

  /** Prefix levels: maxBytes / step. */
  get levels(): number { return this.maxBytes / this.step; }
  /** Report values (and counters after n): levels x seeds x g. */
  get cells(): number { return this.levels * this.seeds * this.g; }
  /** Counter slots: slot 0 counts reports, slot 1 + cell each report value. */
  get width(): number { return 1 + this.cells; }
  /** (P1, Q) of each bucket: (p, q). */
  get p1(): Fraction { return this.p; }
  /** p / q: the most one report moves the odds between two strings. */
  get likelihoodRatio(): Fraction { return div(this.p, this.q); }
  /** ln(p / q), in nats: the whole report's privacy loss. */
  get epsilon(): number {
    const r = this.likelihoodRatio;  // as kinds.ts's log (Python's natural_log)
    return cmp(r, frac(2n)) >= 0 ? Math.log(toNumber(r)) : Math.log1p(toNumber(sub(r, ONE)));
  }

  /** Bytes in the prefix of `level` (0-based): (level + 1) step. */
  prefixLength(level: number): number { return (level + 1) * this.step; }

  /** h_{level,seed} of the value's prefix of that level, in [0, g). */
  bucketOf(padded: Uint8Array, level: number, seed: number): number {
    const prefix = padded.subarray(0, this.prefixLength(level));
    const key = level * MAX_SEEDS + seed;
    let a = this.constants.get(key);
    if (a === undefined) {
      this.constants.set(key, a = hashConstants(level, seed, Math.ceil(prefix.length / 4) + 1));
    }
    return Number(((prefixHash(prefix, level, seed, a) >> 32n) * BigInt(this.g)) >> 32n);
  }

  /**
   * The report (one cell in [0, cells)) for the true string `value` (or its padded bytes, as
   * `normalise` gives them). Only the cell leaves: the string, its prefix and its true bucket
   * do not.
   * @throws InvalidParameterError a value `normalise` refuses.
   */
  perturb(value: unknown, rng: RandomBits = SYSTEM_BITS, clamp = false): number {
    const padded = value instanceof Uint8Array ? value : normalise(value, this.maxBytes, clamp);
    return this.perturbPadded(padded, rng);
  }

  /** `perturb` of an already normalised, padded value: Python's draws, in order. */
  perturbPadded(padded: Uint8Array, rng: RandomBits = SYSTEM_BITS): number {
    if (!(padded instanceof Uint8Array) || padded.length !== this.maxBytes) {
      fail(`a padded value has ${this.maxBytes} bytes`);
    }
    const level = Number(below(rng, BigInt(this.levels)));
    const seed = Number(below(rng, BigInt(this.seeds)));
    const truth = this.bucketOf(padded, level, seed);
    // k-ary randomized response over g (Python's KaryRandomizedResponse.perturb, reference path)
    const keep = below(rng, this.p.den) < this.p.num;
    let other = Number(below(rng, BigInt(this.g - 1)));
    if (other >= truth) other++;
    return (level * this.seeds + seed) * this.g + (keep ? truth : other);
  }

  /** The payload's cell, checked. @throws InvalidParameterError not an int in [0, cells). */
  cellOf(payload: unknown): number {
    if (typeof payload !== "number" || !Number.isInteger(payload) || payload < 0 ||
        payload >= this.cells) {
      fail(`an open-domain report is an int in [0, ${this.cells}). Got ${String(payload)}.`);
    }
    return payload;
  }

  /** (level, seed, reported bucket) of a cell. */
  splitCell(cell: number): [number, number, number] {
    const c = this.cellOf(cell);
    const rest = Math.floor(c / this.g);
    return [Math.floor(rest / this.seeds), rest % this.seeds, c % this.g];
  }

  /** P(report = cell | padded value), exact: 1 / (levels seeds) times p or q. */
  reportProbability(padded: Uint8Array, cell: number): Fraction {
    const [level, seed, reported] = this.splitCell(cell);
    const hit = reported === this.bucketOf(padded, level, seed) ? this.p : this.q;
    return div(hit, frac(BigInt(this.levels * this.seeds)));
  }
}
