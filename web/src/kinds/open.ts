/**
 * Open metrics: one string from no list (a crash signature, a domain, a search term) under the
 * open-domain sketch (`od:`, src/open.ts; Python's kinds/open.py). The value is normalised
 * (NFC, UTF-8, at most max_bytes bytes, NUL-padded; `clamp` cuts a longer one at a character
 * boundary instead of refusing it); the report is one cell, `{"cell": n}` on the wire.
 *
 * Memoized by the padded bytes: the answer over the HMAC stream of (secret, "prr", metric, id)
 * || padded, its ledger tag the HMAC of (secret, "tag", metric, id) || padded (Python's
 * memo.string_answer and string_tag). A memo key here is a number standing for one padded
 * value in this process (`memoKey` interns it, memory only); the tag is always derived from
 * the bytes (`tagInput`), so the ledger is the same across processes. A new string the cap or
 * a budget refuses is sent as the paid answer with the lowest ledger tag this process holds
 * (all.ts, paidInstead): a paid answer, never the value.
 */
import {normalise, type OpenDomainSketch} from "../open.js";
import type {MetricSpec} from "../kinds.js";
import type {ValueKind} from "./kind.js";
import {fail, show} from "./values.js";

/** Per spec: padded value (hex) -> memo key, and memo key -> padded value. */
const interned = new WeakMap<MetricSpec, {keys: Map<string, number>; values: Uint8Array[]}>();

function table(spec: MetricSpec): {keys: Map<string, number>; values: Uint8Array[]} {
  let t = interned.get(spec);
  if (t === undefined) interned.set(spec, t = {keys: new Map(), values: []});
  return t;
}

/** The padded value memo key `key` of `spec` stands for. */
export function paddedOf(spec: MetricSpec, key: number): Uint8Array {
  return table(spec).values[key] ?? fail(`no open-domain value is memoized under key ${key}`);
}

export const open: ValueKind = {
  families: ["od"],
  fields: ["clamp", "max_bytes"],
  /** A bare `od:` id carries max_bytes: it declares the metric. */
  bare: true,
  labels(_m, categories, edges) {
    if (categories.length > 0 || edges.length > 0) fail("an open metric takes no categories or edges");
    return [];
  },
  categories: () => [],
  bounds(d, mechanism) {
    if (d.lower !== undefined || d.upper !== undefined) fail("an open metric takes no lower or upper");
    const od = mechanism as unknown as OpenDomainSketch;
    if (d.max_bytes !== undefined && d.max_bytes !== null && d.max_bytes !== od.maxBytes) {
      fail(`mechanism ${show(od.id)} takes ${od.maxBytes} bytes; the metric declares ` +
           `max_bytes = ${show(d.max_bytes)}`);
    }
  },
  encode(spec, value) {
    return normalise(value, (spec.mechanism as unknown as OpenDomainSketch).maxBytes, spec.clamp);
  },
  memoKey(spec, encoded) {
    const padded = encoded as Uint8Array;
    const t = table(spec);
    const hex = Array.from(padded, (b) => b.toString(16).padStart(2, "0")).join("");
    let key = t.keys.get(hex);
    if (key === undefined) {
      t.keys.set(hex, key = t.values.length);
      t.values.push(padded.slice());
    }
    return key;
  },
  memoInput(spec, key) {
    const padded = paddedOf(spec, key);
    return [padded, padded];
  },
  tagInput: (spec, key) => paddedOf(spec, key),
  /** Every key paid in this process: all.ts sends the one with the lowest ledger tag. */
  instead: () => [],
};
