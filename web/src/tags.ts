/**
 * Ledger tags: the opaque names under which the cap's ledger (privacy.ts) records which
 * memoized answers are paid for, exactly as Python's `memo.spend_tag` and `memo.value_tag`:
 *
 *     tag = hex(HMAC-SHA256(secret, context)[:16])       (128 bits, 32 hex characters)
 *     context = length-prefixed ("deniable/memo/v1", "tag", metric, mechanism id) || key
 *
 * where key is the true bit (one byte) of a boolean metric, the category index (4 bytes,
 * big-endian) of a categorical or histogram one, and the grid size then the grid point (4 + 4
 * bytes) of a numeric one. The label "tag" keeps the tag independent of the answer (label
 * "prr"); without the device secret (a non-extractable key in browsers) a tag says nothing
 * about the value. Shared test vectors (`ledger_tags`) check both clients give the same tags.
 *
 * Ledgers written before this (tags `mechanism id + "\0" + key`, the value in clear) are
 * re-tagged on load (`retagLedger`); a clear tag that cannot be re-tagged is dropped, its
 * epsilon staying spent (the answer would be paid for again: the private side).
 */
import {memoContext} from "./memo.js";
import type {Ledger} from "./privacy.js";
import type {Store} from "./store.js";
import {hex} from "./wire.js";

/** The store key of the ledger. */
export const LEDGER_KEY = "ledger";
/** Grid intervals of numeric metrics' α-point rounding (kinds.DEFAULT_GRID, memo.DEFAULT_GRID). */
const GRID = 32;

/** The HMAC input of the tag of (metric, mechanism id, key); the kind is read off the id. */
export function tagContext(metric: string, mechanismId: string, key: number): Uint8Array {
  const context = memoContext("tag", metric, mechanismId, key ? 1 : 0);
  if (mechanismId.startsWith("rr:")) return context;
  const numeric = mechanismId.startsWith("bm:");
  const out = new Uint8Array(context.length - 1 + (numeric ? 8 : 4));
  out.set(context.subarray(0, -1));
  const view = new DataView(out.buffer, context.length - 1);
  if (numeric) view.setUint32(0, GRID);
  view.setUint32(numeric ? 4 : 0, key);
  return out;
}

/** The ledger tag of memoized answer `key` of `metric` under `mechanismId`: 32 hex digits. */
export async function ledgerTag(secret: CryptoKey, metric: string, mechanismId: string,
                                key: number): Promise<string> {
  const mac = await globalThis.crypto.subtle.sign(
    "HMAC", secret, tagContext(metric, mechanismId, key) as Uint8Array<ArrayBuffer>);
  return hex(new Uint8Array(mac, 0, 16));
}

/**
 * The store's ledger, its clear tags (`id + "\0" + key`, written by earlier versions) replaced
 * by their HMAC tags under `secret` in one store transaction; without a secret they are
 * dropped (their epsilon stays spent). Never keeps a clear tag.
 */
export async function retagLedger(store: Store, secret: CryptoKey | undefined): Promise<Ledger> {
  const found = await store.get<Ledger>(LEDGER_KEY) ?? {};
  const clear = new Map<string, string | undefined>();
  for (const [metric, entry] of Object.entries(found)) {
    for (const tag of entry.paid) {
      const at = tag.indexOf("\u0000");
      if (at < 0) continue;
      const key = Number(tag.slice(at + 1));
      clear.set(metric + "\u0000" + tag, secret === undefined || !Number.isInteger(key) ? undefined
        : await ledgerTag(secret, metric, tag.slice(0, at), key));
    }
  }
  if (clear.size === 0) return found;
  return store.update<Ledger>(LEDGER_KEY, (old) => {
    const ledger: Ledger = {};
    for (const [metric, entry] of Object.entries(old ?? {})) {
      const paid = new Set<string>();
      for (const tag of entry.paid) {
        const kept = tag.includes("\u0000") ? clear.get(metric + "\u0000" + tag) : tag;
        if (kept !== undefined) paid.add(kept);
      }
      ledger[metric] = {paid: [...paid], spent: entry.spent};
    }
    return ledger;
  });
}
