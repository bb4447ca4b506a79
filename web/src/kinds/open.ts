/**
 * Open metrics: one string from no list (a crash signature, a domain, a search term) under the
 * open-domain sketch (`od:`, src/open.ts; Python's kinds/open.py). The value is normalised
 * (NFC, UTF-8, at most max_bytes bytes, NUL-padded; `clamp` cuts a longer one at a character
 * boundary instead of refusing it); the report is one cell, `{"cell": n}` on the wire.
 *
 * Always fresh: every report charges the metric's epsilon and draws fresh secure coins; there
 * is no memo (Python's kinds/open.py). A memoized cell is unique to ~75 % of 20,000 devices
 * holding the same string, so it would link a device's reports; and past a cap a memo answers a
 * paid string but refuses a new one. The Reporter marks every open metric fresh and refuses a
 * declared memoization or layer (declaration.ts, openFresh).
 */
import {normalise, type OpenDomainSketch} from "../open.js";
import type {MetricSpec} from "../kinds.js";
import type {ValueKind} from "./kind.js";
import {fail, show} from "./values.js";

const never = (): never => fail("an open metric is never memoized: it always draws fresh coins");

export const open: ValueKind = {
  families: ["od"],
  fields: ["clamp", "max_bytes"],
  /** A bare `od:` id carries max_bytes: it declares the metric. */
  bare: true,
  fresh: true,
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
  memoKey: never,
  memoInput: never,
  instead: () => [],
};
