/**
 * Memoized (permanent) randomized response from a device secret, mirroring
 * deniable.client.memo: the same 32-byte secret gives the same answers in Python and here.
 *
 *     block_i = HMAC-SHA256(secret, context || i)     (i as 8 big-endian bytes)
 *     context = length-prefixed ("deniable/memo/v1", "prr", metric, mechanism id) || value byte
 *
 * The blocks are spent as a bit stream (each block little-endian, low bits first) and the
 * memoized bit is `mechanism.perturb(value, stream)`: the mechanism is defined once and its
 * draws stay exact. WebCrypto's HMAC is asynchronous, so the stream is filled block by block:
 * a derivation that runs out of bits (rejection) starts again with one more block, and reads
 * the very same bits it would have read from an endless stream.
 */
import type {Rr} from "./mechanism.js";
import type {RandomBits} from "./random.js";

/** Length of a device secret in bytes (the HMAC-SHA256 key size). */
export const SECRET_BYTES = 32;
const DOMAIN = "deniable/memo/v1";
const encoder = new TextEncoder();

export class OutOfBits extends Error {}

/** Bits from a fixed list of HMAC blocks; throws OutOfBits past their end. */
export class BlockBits implements RandomBits {
  private pool = 0n;
  private avail = 0;
  private next = 0;

  constructor(private readonly blocks: readonly Uint8Array[]) {}

  bits(k: number): number {
    return Number(this.bigBits(k));
  }

  bigBits(k: number): bigint {
    while (this.avail < k) {
      const block = this.blocks[this.next++];
      if (block === undefined) throw new OutOfBits();
      let value = 0n;
      for (let i = block.length - 1; i >= 0; i--) value = (value << 8n) | BigInt(block[i]!);
      this.pool |= value << BigInt(this.avail);
      this.avail += block.length * 8;
    }
    const value = this.pool & ((1n << BigInt(k)) - 1n);
    this.pool >>= BigInt(k);
    this.avail -= k;
    return value;
  }
}

/** The HMAC input for (label, metric, mechanism id, true bit), without the block counter. */
export function memoContext(label: string, metric: string, mechanismId: string,
                            trueBit: 0 | 1): Uint8Array {
  const fields = [DOMAIN, label, metric, mechanismId].map((f) => encoder.encode(f));
  const size = fields.reduce((n, f) => n + 4 + f.length, 1);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const f of fields) {
    view.setUint32(at, f.length, false);
    out.set(f, at + 4);
    at += 4 + f.length;
  }
  out[at] = trueBit;
  return out;
}

/** An HMAC-SHA256 key for `secret` (32 bytes), not extractable. */
export async function importSecret(secret: Uint8Array): Promise<CryptoKey> {
  if (!(secret instanceof Uint8Array) || secret.length !== SECRET_BYTES) {
    throw new RangeError(`the device secret must be ${SECRET_BYTES} bytes`);
  }
  return globalThis.crypto.subtle.importKey(
    "raw", secret as Uint8Array<ArrayBuffer>, {name: "HMAC", hash: "SHA-256"}, false, ["sign"]);
}

/** A fresh random device secret as a non-extractable HMAC key (browsers keep it so). */
export async function newSecretKey(): Promise<CryptoKey> {
  const key = await globalThis.crypto.subtle.generateKey(
    {name: "HMAC", hash: "SHA-256", length: 256}, false, ["sign"]);
  return key as CryptoKey;
}

/**
 * The device's permanent perturbed answer for (metric, mechanism, trueBit): always the same
 * for the same secret; over random secrets, 1 with probability exactly P1 (true 1) or Q.
 */
export async function memoBit(key: CryptoKey, metric: string, mechanism: Rr,
                              trueBit: boolean | 0 | 1): Promise<0 | 1> {
  const bit = trueBit ? 1 : 0;
  const context = memoContext("prr", metric, mechanism.id, bit);
  const blocks: Uint8Array[] = [];
  for (;;) {
    const input = new Uint8Array(context.length + 8);
    input.set(context);
    new DataView(input.buffer).setBigUint64(context.length, BigInt(blocks.length), false);
    blocks.push(new Uint8Array(await globalThis.crypto.subtle.sign("HMAC", key, input)));
    try {
      return mechanism.perturb(bit, new BlockBits(blocks));
    } catch (error) {
      if (!(error instanceof OutOfBits)) throw error;
    }
  }
}
