/**
 * Secure random bits, spent a few at a time, exactly as the Python client's SecureBits does.
 *
 * Bytes come from `crypto.getRandomValues` in blocks of 4096. Each 64-bit little-endian word is
 * spent low bits first; a draw that needs more bits than the word has left takes a fresh word
 * (the rest is thrown away, never stitched to the next). `below(n)` is nanoid's
 * mask-reject-refill: draw just enough bits for n - 1, drop values >= n, draw again. No modulo,
 * no float: `below(den) < num` holds with probability exactly num/den.
 *
 * The shared test vectors feed both this class and the Python one the same words and check
 * that every draw agrees.
 */
import {InvalidParameterError} from "./errors.js";

const BLOCK_BYTES = 4096;
const MASKS = Array.from({length: 33}, (_, k) => (k === 32 ? 0xffffffff : (2 ** k) - 1));

/** A source of uniform random bits. Tests inject their own to make draws reproducible. */
export interface RandomBits {
  /** A uniform integer in [0, 2**k), k in [0, 32]. */
  bits(k: number): number;
  /** A uniform integer in [0, 2**k) for any k the source supports (SecureBits: <= 64). */
  bigBits(k: number): bigint;
}

/** Fills a byte array with secure random bytes: crypto.getRandomValues by default. */
export type ReadBytes = (n: number) => Uint8Array;

const systemRead: ReadBytes = (n) => {
  const out = new Uint8Array(n);
  globalThis.crypto.getRandomValues(out);
  return out;
};

/** Uniform random bits from the platform CSPRNG, buffered in blocks (see the module doc). */
export class SecureBits implements RandomBits {
  private block: Uint8Array = new Uint8Array(0);
  private offset = 0;
  private lo = 0;
  private hi = 0;
  private avail = 0;

  /** @param read the entropy source (byte count -> bytes); crypto.getRandomValues by default. */
  constructor(private readonly read: ReadBytes = systemRead) {}

  bits(k: number): number {
    if (this.avail < k) this.nextWord();
    let value: number;
    if (k < 32) {
      value = (this.lo & MASKS[k]!) >>> 0;
      if (k > 0) {
        this.lo = ((this.lo >>> k) | (this.hi << (32 - k))) >>> 0;
        this.hi = this.hi >>> k;
      }
    } else if (k === 32) {
      value = this.lo;
      this.lo = this.hi;
      this.hi = 0;
    } else {
      throw new RangeError(`bits(k) takes k in [0, 32]; use bigBits. Got ${k} instead.`);
    }
    this.avail -= k;
    return value;
  }

  bigBits(k: number): bigint {
    if (!(k >= 0 && k <= 64)) throw new RangeError(`k must lie in [0, 64]. Got ${k} instead.`);
    if (k <= 32) return BigInt(this.bits(k));
    if (this.avail < k) this.nextWord();
    const value = BigInt(this.lo) | (BigInt((this.hi & MASKS[k - 32]!) >>> 0) << 32n);
    this.lo = k === 64 ? 0 : this.hi >>> (k - 32);
    this.hi = 0;
    this.avail -= k;
    return value;
  }

  private nextWord(): void {
    if (this.offset >= this.block.length) {
      this.block = this.read(BLOCK_BYTES);
      this.offset = 0;
      if (this.block.length < 8) throw new RangeError("the entropy source ran dry");
    }
    const b = this.block;
    const o = this.offset;
    this.lo = (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
    this.hi = (b[o + 4]! | (b[o + 5]! << 8) | (b[o + 6]! << 16) | (b[o + 7]! << 24)) >>> 0;
    this.offset = o + 8;
    this.avail = 64;
  }
}

/** Bits needed for values in [0, bound): bit_length(bound - 1). */
export function bitsFor(bound: bigint): number {
  return bound <= 1n ? 0 : (bound - 1n).toString(2).length;
}

/**
 * A uniform integer in [0, bound), by rejection (mask, reject, refill): exact, no modulo bias.
 * The same draws as the Python client's `below`.
 */
export function below(source: RandomBits, bound: bigint): bigint {
  if (bound < 1n) throw new InvalidParameterError(`bound must be at least 1. Got ${bound}.`);
  const k = bitsFor(bound);
  if (k <= 32) {
    const n = Number(bound);
    for (;;) {
      const value = source.bits(k);
      if (value < n) return BigInt(value);
    }
  }
  for (;;) {
    const value = source.bigBits(k);
    if (value < bound) return value;
  }
}

/** below() for bounds up to 2**32, as a number: the fast path of perturbation. */
export function belowSmall(source: RandomBits, bound: number, k: number): number {
  for (;;) {
    const value = source.bits(k);
    if (value < bound) return value;
  }
}

/** The process-wide secure source used when no other is injected. */
export const SYSTEM_BITS = new SecureBits();
