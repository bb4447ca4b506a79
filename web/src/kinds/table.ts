/**
 * The kinds, registered: kind name -> its module. A new kind is its own module (kinds/<kind>.ts,
 * implementing Kind or ValueKind, kind.ts) and one line here.
 */
import {boolean} from "./boolean.js";
import {categorical} from "./categorical.js";
import {histogram} from "./histogram.js";
import type {RandomizedResponse} from "../mechanism.js";
import type {Kind, ValueKind} from "./kind.js";
import {numeric} from "./numeric.js";
import {open} from "./open.js";

export const KIND_TABLE = {
  boolean,
  categorical,
  histogram,
  numeric,
  open,
} as const satisfies Readonly<Record<string, Kind<RandomizedResponse> | ValueKind>>;

/** A registered kind's name. */
export type KindName = keyof typeof KIND_TABLE;
/** The kinds beyond boolean (their metrics are MetricSpecs). */
export type ValueKindName = Exclude<KindName, "boolean">;

/** The module of the kind named `name`, or undefined if none is registered under it. */
export function kindNamed(name: string): Kind<RandomizedResponse> | ValueKind | undefined {
  return Object.hasOwn(KIND_TABLE, name) ? KIND_TABLE[name as KindName] : undefined;
}

/** Whether a declaration is of a kind that always draws fresh coins (open), by its `kind` or
 * by its mechanism's family (a bare `od:` id). */
export function alwaysFresh(table: {kind?: unknown; mechanism?: unknown}): boolean {
  const prefix = String(table.mechanism).split(":", 1)[0]!;
  return Object.entries(KIND_TABLE).some(([name, k]: [string, Kind<any>]) =>
    k.fresh === true && (name === table.kind || k.families.includes(prefix)));
}
