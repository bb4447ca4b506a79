/**
 * Boolean metrics: randomized response (`rr:<truth>:<forced_yes>`), one bit. Their memo is
 * memoBit (memo.ts), their report the perturbed bit; past the cap, the other value's paid
 * answer stands in. They alone take an instantaneous layer (layers.ts). A catalogue entry
 * states P1 and Q as `p_yes_given_yes` and `p_yes_given_no` (and maybe `p1`, `q`).
 *
 * The default entry (parts.ts, catalogue.ts) imports `reporting` and the functions below, not
 * the `boolean` object, so that its bundle does not carry RandomizedResponse's estimator.
 */
import {RandomizedResponse, type Rr} from "../mechanism.js";
import {type Kind, kindName, type Reporting} from "./kind.js";
import {fail, show} from "./values.js";

/** Whether a catalogue entry or declaration table declares a boolean metric (kind "boolean",
 * or none), and, if it names a mechanism id, one of the `rr` family. */
export function owns(e: {kind?: unknown; mechanism?: unknown} | undefined): boolean {
  return kindName(e) === "boolean" &&
    (typeof e?.mechanism !== "string" || e.mechanism.startsWith("rr:"));
}

/** Whether a boolean metric takes `value`: a boolean, or 0 or 1. */
export const isBit = (value: unknown): value is boolean | 0 | 1 =>
  typeof value === "boolean" || value === 0 || value === 1;

/**
 * The true value as randomized response takes it: 1 or 0.
 * @throws InvalidParameterError not a boolean (or 0/1); the message never shows the value.
 */
export function bit(value: unknown): 0 | 1 {
  if (!isBit(value)) fail(`trueValue must be a boolean. Got a ${typeof value} instead.`);
  return value ? 1 : 0;
}

/** How a boolean is reported: its bit; past the cap, the other value's paid answer stands in
 * (issue 26). The default entry's kind (`boolean` adds the
 * declaration and catalogue parts; spelled out, not spread, so bundles can leave it out). */
export const reporting: Reporting<Rr> = {encode, instead};

function encode(_m: unknown, value: unknown): 0 | 1 {
  return bit(value);
}

function instead(_m: unknown, key: number): number[] {
  return [1 - key];
}

export const boolean: Kind<RandomizedResponse> = {
  encode,
  instead,
  families: ["rr"],
  fields: [],
  entry(e) {
    if (!owns(e) || typeof e.mechanism !== "string") {
      fail(`a boolean metric needs a rr mechanism. Got ${show(e.mechanism)} instead.`);
    }
    const metric = RandomizedResponse.fromId(e.mechanism as string);
    const claims: [unknown, unknown][] = [[e.p_yes_given_yes, e.p_yes_given_no]];
    if ("p1" in e || "q" in e) claims.push([e.p1, e.q]);
    return [metric, claims, [metric.pYesGivenYes, metric.pYesGivenNo]];
  },
  declare: (table) => RandomizedResponse.fromId(table.mechanism as string),
  bare: true,
  layered: true,
};
