/**
 * Boolean metrics: randomized response (`rr:<truth>:<forced_yes>`), one bit. Their memo is
 * memoBit (memo.ts), their report the perturbed bit. A catalogue entry states P1 and Q as
 * `p_yes_given_yes` and `p_yes_given_no` (and maybe `p1`, `q`).
 */
import {RandomizedResponse} from "../mechanism.js";
import type {Kind} from "./kind.js";
import {fail, show} from "./values.js";

export const boolean: Kind<RandomizedResponse> = {
  families: ["rr"],
  fields: [],
  entry(e) {
    if ((typeof e.mechanism === "string" ? e.mechanism.split(":", 1)[0] : "") !== "rr") {
      fail(`a boolean metric needs a rr mechanism. Got ${show(e.mechanism)} instead.`);
    }
    const metric = RandomizedResponse.fromId(e.mechanism as string);
    const claims: [unknown, unknown][] = [[e.p_yes_given_yes, e.p_yes_given_no]];
    if ("p1" in e || "q" in e) claims.push([e.p1, e.q]);
    return [metric, claims, [metric.pYesGivenYes, metric.pYesGivenNo]];
  },
  declare: (table) => RandomizedResponse.fromId(table.mechanism as string),
  bare: true,
  /** The other value's paid answer (issue 26). */
  instead: (_m, key) => [1 - key],
};
