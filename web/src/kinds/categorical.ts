/**
 * Categorical metrics: one of the declared labels, under k-ary randomized response (`grr:`),
 * optimized unary encoding (`oue:`) or subset selection (`ss:`). The memo key is the label's
 * index; past the cap, the lowest paid category stands in (it reads the ledger, never the
 * value, as Python's guard).
 */
import type {KaryRandomizedResponse} from "../kinds.js";
import {indexInput, type ValueKind} from "./kind.js";
import {checkCategories, domainTag, fail, show, typeOf} from "./values.js";

/** Check `labels` (categories or buckets) and that `mechanism` has their d and tag. */
export function matchDomain(m: KaryRandomizedResponse, labels: string[], tagged: string[],
                            what: string): string[] {
  checkCategories(labels);
  const tag = domainTag(tagged);
  if (m.d !== labels.length || m.tag !== tag) {
    fail(`mechanism ${show(m.id)} does not match the declared ${what}: they need ` +
         `d = ${labels.length} and tag ${tag}`);
  }
  return labels;
}

/** Refuse bounds on a kind that takes none. */
export function noBounds(d: Record<string, unknown>): void {
  if (d.lower !== undefined || d.upper !== undefined) {
    fail(`a ${String(d.kind)} metric takes no lower or upper`);
  }
}

export const categorical: ValueKind = {
  families: ["grr", "oue", "ss"],
  fields: ["categories"],
  labels: (m, categories) =>
    matchDomain(m as KaryRandomizedResponse, [...categories], [...categories], "categories"),
  categories(d) {
    const value = d.categories;
    if (value === undefined || value === null) return [];
    return Array.isArray(value) ? value : fail(`categories must be a list. Got ${show(value)}.`);
  },
  bounds: noBounds,
  encode(spec, value) {
    const index = typeof value === "string" ? spec.indexOf(value) : undefined;
    if (index === undefined) {
      const shown = spec.categories.slice(0, 8).join(", ") +
        (spec.categories.length > 8 ? ", ..." : "");
      fail(`the value must be one of the declared categories (${shown})` +
           (typeof value === "string" ? " and it is not." : `. Got a ${typeOf(value)} instead.`));
    }
    return index!;
  },
  memoKey: (_spec, encoded) => encoded as number,
  memoInput: (_spec, key) => indexInput(key),
  instead: (spec) => spec.categories.map((_, i) => i),
};
