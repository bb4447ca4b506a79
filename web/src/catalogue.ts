/** The metric catalogue: name -> mechanism, parsed from GET /v1/metrics or declared in code. */
import {InvalidParameterError, UnknownMetricError, WireFormatError} from "./errors.js";
import {eq, fracToString, parseFraction} from "./fraction.js";
import {owns} from "./kinds/boolean.js";
import {kindName} from "./kinds/kind.js";
import {type RandomizedResponse, Rr} from "./mechanism.js";
import {isMetricName} from "./wire.js";

/** name -> its metric (a boolean's Rr here; any kind's in deniable-client/all). */
export type Catalogue<M = Rr> = Map<string, M>;

/**
 * Parse a GET /v1/metrics document, refusing any entry whose stated P1 and Q do not match its
 * mechanism id exactly (as the Python client's parse_catalogue).
 *
 * This entry point reports boolean metrics only (deniable-client/all parses every kind:
 * kinds.ts, parseAllCatalogue): an entry of another kind (categorical,
 * histogram, numeric, or one this version does not know) is left out of the catalogue and
 * passed to `skipped` (its name and kind), so a collector that serves other kinds keeps every
 * boolean metric working. Which entries are boolean, the boolean kind says (kinds/boolean.ts,
 * `owns`).
 */
export function parseCatalogue(doc: unknown,
                               skipped?: (name: string, kind: string) => void,
                               make: typeof Rr = Rr): Catalogue {
  const entries = doc !== null && typeof doc === "object" ?
    (doc as {metrics?: unknown}).metrics : undefined;
  if (!Array.isArray(entries)) {
    throw new WireFormatError("the metrics document must hold a list under 'metrics'");
  }
  const catalogue: Catalogue = new Map();
  entries.forEach((entry: unknown, i) => {
    const e = (entry ?? {}) as Record<string, unknown>;
    if (!owns(e)) {
      skipped?.(String(e.name), kindName(e));
      return;
    }
    let mechanism: Rr;
    try {
      mechanism = make.fromId(e.mechanism as string);
    } catch (error) {
      throw new WireFormatError(`metrics entry ${i} is malformed: ${(error as Error).message}`);
    }
    const p1 = typeof e.p_yes_given_yes === "string" ? parseFraction(e.p_yes_given_yes) : null;
    const q = typeof e.p_yes_given_no === "string" ? parseFraction(e.p_yes_given_no) : null;
    if (!isMetricName(e.name)) {
      throw new WireFormatError(`metrics entry ${i} has an invalid name ${String(e.name)}`);
    }
    if (p1 === null || q === null || !eq(p1, mechanism.pYesGivenYes) ||
        !eq(q, mechanism.pYesGivenNo)) {
      throw new WireFormatError(
        `metric '${e.name}': P1, Q do not match its mechanism ${mechanism.id}`);
    }
    catalogue.set(e.name, mechanism);
  });
  return catalogue;
}

/** A catalogue from code: each value a mechanism or a mechanism id. */
export function declareCatalogue(
    metrics: Record<string, RandomizedResponse | string>, make: typeof Rr = Rr): Catalogue {
  const catalogue: Catalogue = new Map();
  for (const [name, mechanism] of Object.entries(metrics)) {
    if (!isMetricName(name)) {
      throw new InvalidParameterError(
        "metric names are lowercase letters, digits and '_', at most 64 characters. " +
        `Got ${JSON.stringify(name)} instead.`);
    }
    catalogue.set(name, mechanism instanceof Rr ? mechanism : make.fromId(mechanism));
  }
  return catalogue;
}

/** The mechanism of `metric`, or UnknownMetricError. */
export function lookup<M>(catalogue: Catalogue<M>, metric: string): M {
  const mechanism = catalogue.get(metric);
  if (mechanism === undefined) {
    throw new UnknownMetricError(
      `metric ${JSON.stringify(metric)} is not declared (metrics option). ` +
      `Declared: ${JSON.stringify([...catalogue.keys()].sort())}`);
  }
  return mechanism;
}
