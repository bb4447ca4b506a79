/**
 * Numeric metrics: a number in [lower, upper] under 1BitMean (`bm:<a>:<lower>:<upper>`, one
 * bit). Memoized by α-point rounding onto a grid of DEFAULT_GRID intervals under the device's
 * secret threshold (memo.memo_key); past the cap, the nearest paid grid point stands in.
 */
import {add, eq, frac, mul, sub} from "../fraction.js";
import type {BitMean} from "../kinds.js";
import {type ValueKind, nearest} from "./kind.js";
import {DEFAULT_GRID, declaredNumber, fail, numberIn, show} from "./values.js";

export const numeric: ValueKind = {
  families: ["bm"],
  fields: ["lower", "upper", "clamp"],
  rounds: true,
  /** A bare `bm:` id carries its bounds: it declares the metric. */
  bare: true,
  labels(_m, categories, edges) {
    if (categories.length > 0 || edges.length > 0) fail("a numeric metric takes no categories or edges");
    return [];
  },
  categories: () => [],
  bounds(d, mechanism) {
    if (d.lower === undefined || d.upper === undefined) fail("a numeric metric declares lower and upper");
    const bm = mechanism as BitMean;
    if (bm.kind === "numeric" && (!eq(bm.lower, declaredNumber("lower", d.lower)) ||
                                  !eq(bm.upper, declaredNumber("upper", d.upper)))) {
      fail(`mechanism ${show(bm.id)} does not match lower = ${String(d.lower)}, ` +
           `upper = ${String(d.upper)}`);
    }
  },
  encode(spec, value) {
    const m = spec.mechanism as BitMean;
    return numberIn(value, m.lower, m.upper, spec.clamp);
  },
  /** The grid point `encoded` rounds to under `alpha` (α-point rounding, memo.memo_key). */
  memoKey(spec, encoded, alpha, grid) {
    const m = spec.mechanism as BitMean;
    const value = encoded as ReturnType<typeof frac>;
    const span = sub(m.upper, m.lower);
    const den = value.den * m.lower.den * span.num;
    const num = (value.num * m.lower.den - m.lower.num * value.den) * span.den * BigInt(grid);
    if (num < 0n || num > BigInt(grid) * den) fail("the value lies outside the metric's [lower, upper]");
    const low = num / den;
    return Number(low) + (((num % den) << 64n) > alpha * den ? 1 : 0);
  },
  memoInput(spec, key, grid) {
    const input = new Uint8Array(8);
    const view = new DataView(input.buffer);
    view.setUint32(0, grid, false);
    view.setUint32(4, key, false);
    const m = spec.mechanism as BitMean;
    return [input, add(m.lower, mul(sub(m.upper, m.lower), frac(BigInt(key), BigInt(grid))))];
  },
  instead: (_spec, key) => nearest(key, DEFAULT_GRID),
};
