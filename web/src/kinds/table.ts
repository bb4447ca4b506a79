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

export const KIND_TABLE: Readonly<Record<string, Kind<RandomizedResponse> | ValueKind>> = {
  boolean,
  categorical,
  histogram,
  numeric,
};
