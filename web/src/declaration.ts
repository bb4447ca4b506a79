/**
 * The app's declaration is the privacy contract (issue 26; docs/web.md, "The declaration").
 *
 * An app declares each metric it reports: `new Reporter(url, {metrics})`, where `metrics` is
 * the metrics file's `[metrics.NAME]` tables as JSON (`{"NAME": {"kind": ..., "mechanism":
 * ..., "categories": [...], "memoization": ..., "period": ..., "dimensions": {...}}}`), or a
 * mechanism (or its id) per name in code. Everything privacy-relevant comes from it: kind,
 * domain, the epsilon ceiling (the declared mechanism's), memoization, period, dimensions.
 *
 * The collector's catalogue may only choose, for a declared metric, the mechanism (version) to
 * report under, and only one that asks the same question (kind and domain) with a likelihood
 * ratio no larger than the declared one's. Every other served part is ignored, counted in
 * `stats().ignoredServed` and warned about once per metric; a metric the app does not declare
 * is never reported (`report()` throws UnknownMetricError, whatever the value).
 */
import {InvalidParameterError} from "./errors.js";
import {cmp, type Fraction} from "./fraction.js";
import {isMetricName} from "./wire.js";

/** How a declared metric is collected. `dims` is its public dimensions' canonical form. */
export interface Policy {
  memoization: "memoized" | "instantaneous" | "fresh";
  /** The instantaneous layer's id (deniable-client/all, layers.ts). */
  irr?: string;
  period: "hour" | "day" | "week";
  dims: string;
}

/** What the resolution needs of a metric of any kind. */
export interface Declarable {
  readonly id: string;
  readonly likelihoodRatio: Fraction;
  /** What the metric asks (kinds beyond boolean: kind and domain); booleans have none. */
  readonly question?: string;
}

/** The metrics file's fields (collector/registry.py), in its order; `epsilon` is refused below. */
export const FIELDS = ["description", "retention_days", "memoization", "instantaneous", "period",
  "kind", "mechanism", "epsilon", "categories", "edges", "lower", "upper", "clamp",
  "dimensions", "combinations"];

const DEFAULT_POLICY: Policy = {memoization: "memoized", period: "day", dims: dimsKey({})};

/** The app's declarations: the metrics this entry reports, each one's policy, and the
 * metrics declared in kinds it does not report (name -> kind). */
export interface Declared<M> {
  metrics: Map<string, M>;
  policies: Map<string, Policy>;
  other: Map<string, string>;
}

/**
 * Read the `metrics` option. `make` turns one declaration (a table, an id or a mechanism)
 * into the metric, or into its kind if this entry does not report that kind.
 * @throws InvalidParameterError naming the metric and the field, as the metrics file does.
 */
export function declare<M>(metrics: Record<string, unknown> | undefined,
                           make: (name: string, value: unknown) => M | string): Declared<M> {
  const found: Declared<M> = {metrics: new Map(), policies: new Map(), other: new Map()};
  for (const [name, value] of Object.entries(metrics ?? {})) {
    if (!isMetricName(name)) {
      throw new InvalidParameterError(
        "metric names are lowercase letters, digits and '_', at most 64 characters. " +
        `Got ${JSON.stringify(name)} instead.`);
    }
    const table = value?.constructor === Object ? value as Record<string, unknown> : undefined;
    found.policies.set(name, table ? policy(name, table) : DEFAULT_POLICY);
    const metric = make(name, value);
    if (typeof metric === "string") found.other.set(name, metric);
    else found.metrics.set(name, metric);
  }
  return found;
}

/** One table's fields and collection policy, checked as the metrics file's. */
function policy(name: string, table: Record<string, unknown>): Policy {
  const fail = (field: string, why: string): never => {
    throw new InvalidParameterError(`metric '${name}': ${field}: ${why}`);
  };
  for (const field of Object.keys(table)) {
    if (!FIELDS.includes(field)) fail(field, "not a field of a metric declaration");
  }
  const one = (field: string, allowed: string[]): string => {
    const value = table[field] ?? allowed[0];
    return allowed.includes(value as string) ? value as string
      : fail(field, `must be one of ${allowed.join(", ")}`);
  };
  const {description = "", retention_days: days = 1} = table;
  if (typeof description !== "string") fail("description", "must be a string");
  if (!Number.isInteger(days) || (days as number) < 1) fail("retention_days", "must be a whole number >= 1");
  if ("epsilon" in table) {
    fail("epsilon", "declare the collector's `mechanism`, not an epsilon");
  }
  // The default entry has no instantaneous layer; deniable-client/all takes it (layers.ts).
  if ((table.instantaneous ?? null) !== null) fail("instantaneous", "in deniable-client/all only");
  const memoization = one("memoization", ["memoized", "fresh"]);
  const period = one("period", ["day", "hour", "week"]);
  return {memoization, period, dims: dimsKey(table)} as Policy;
}

/** A table's public dimensions in one canonical string: what they allow, in any order
 * (Python's _dimension_key). */
function dimsKey(t: {dimensions?: unknown; combinations?: unknown}): string {
  const dims = (t.dimensions ?? {}) as Record<string, {values?: unknown; other?: unknown}>;
  return JSON.stringify([
    Object.keys(dims).sort().map((n) => [n, String([dims[n]?.values].flat().sort()),
                                         dims[n]?.other === true]),
    (Array.isArray(t.combinations) ? t.combinations as unknown[] : [])
      .map((c) => String(Array.isArray(c) ? [...c].sort() : c)).sort()]);
}

/** What a served catalogue changes: the metrics to report under, and what was ignored. */
export interface Resolution<M> {
  using: Map<string, M>;
  /** metric -> the served parts ignored (field names, never values). */
  ignored: Map<string, string[]>;
  /** Declared metrics served under another mechanism: the declared, the served, the one used. */
  mismatch: Record<string, {declared: string; registered: string; using: string}>;
}

/**
 * Resolve the declared metrics against a served catalogue: `served` the entries this client
 * could parse, `doc` the document as served. A served mechanism replaces the declared one only
 * if it asks the same question with a likelihood ratio no larger (so never above the ceiling
 * the declared one passed); every other difference is ignored.
 */
export function resolve<M extends Declarable>(declared: Declared<M>, served: Map<string, M>,
                                              doc: unknown): Resolution<M> {
  const found: Resolution<M> = {using: new Map(declared.metrics), ignored: new Map(), mismatch: {}};
  const entries = (doc as {metrics?: unknown} | null)?.metrics;
  for (const e of Array.isArray(entries) ? entries as Record<string, unknown>[] : []) {
    const name = String(e?.name);
    const mine = declared.metrics.get(name);
    const theirs = served.get(name);
    // Undeclared metrics are never reported (nothing of them is used, nor counted, as in
    // Python); an entry this client could not parse offers nothing to take.
    if (mine === undefined || theirs === undefined) continue;
    const p = declared.policies.get(name)!;
    const parts: string[] = [];
    if (theirs.id !== mine.id) {
      const same = theirs.question === mine.question &&
        cmp(theirs.likelihoodRatio, mine.likelihoodRatio) <= 0;
      if (same) found.using.set(name, theirs);
      else parts.push("mechanism");
      found.mismatch[name] = {declared: mine.id, registered: theirs.id, using: same ? theirs.id : mine.id};
    }
    // Python's SERVED_PARTS: memoization (with its instantaneous layer), period, dimensions.
    if ((e.memoization ?? "memoized") !== p.memoization || (e.instantaneous ?? null) !== (p.irr ?? null)) {
      parts.push("memoization");
    }
    if ((e.period ?? "day") !== p.period) parts.push("period");
    if (dimsKey(e) !== p.dims) parts.push("dimensions");
    if (parts.length > 0) found.ignored.set(name, parts);
  }
  return found;
}
