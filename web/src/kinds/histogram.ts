/**
 * Histogram metrics: a number counted in its bucket of the declared edges (the last bucket
 * closed), under the categorical mechanisms over the buckets (their tag digests the edges).
 * The memo key is the bucket's index; past the cap, the nearest paid bucket stands in.
 */
import {cmp, fracToString} from "../fraction.js";
import type {KaryRandomizedResponse} from "../kinds.js";
import {matchDomain, noBounds} from "./categorical.js";
import {indexInput, nearest, type ValueKind} from "./kind.js";
import {bucketLabels, numberIn} from "./values.js";

export const histogram: ValueKind = {
  families: ["grr", "oue", "ss"],
  fields: ["edges", "clamp"],
  labels: (m, _categories, edges) => matchDomain(m as KaryRandomizedResponse, bucketLabels(edges),
                                                 edges.map(fracToString), "edges"),
  categories: () => [],
  bounds: noBounds,
  encode(spec, value) {
    const edges = spec.edges;
    const number = numberIn(value, edges[0]!, edges[edges.length - 1]!, spec.clamp);
    let bucket = 0;  // bisect_right(edges, number) - 1, the last bucket closed
    while (bucket < edges.length - 2 && cmp(edges[bucket + 1]!, number) <= 0) bucket++;
    return bucket;
  },
  memoKey: (_spec, encoded) => encoded as number,
  memoInput: (_spec, key) => indexInput(key),
  instead: (spec, key) => nearest(key, spec.edges.length - 2),
};
