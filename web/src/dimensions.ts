/**
 * Public dimensions (deniable-client/all): the few coarse, allow-listed facts a report may
 * carry in clear, mirroring deniable.client.dimensions (THE definition, in Python).
 *
 *     const dims = Dimensions.parse({app_version: {values: ["2.3", "2.4"], other: true},
 *                                    platform: {values: ["android", "ios"]}});
 *     dims.normalize({app_version: "2.5", platform: "ios"});
 *     // {app_version: "other", platform: "ios"}
 *
 * **Dimensions are not protected by local differential privacy**: they travel and are counted
 * in clear, so the allow-lists keep them coarse. A value off a list is refused, or counted as
 * `other` where the dimension declares `other`. A report need not state every dimension.
 */
import {InvalidParameterError} from "./errors.js";
import type {Dims} from "./wire.js";

export const MAX_DIMENSIONS = 3;
/** At most this many listed values per dimension (plus `other`). */
export const MAX_VALUES = 100;
export const OTHER = "other";
export const DIMENSION_NAME = /^[a-z][a-z0-9_]{0,31}$/;
/** Letters, digits and `._+-`, at most 32 characters (no `:`, `,` or `=`). */
export const DIMENSION_VALUE = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,31}$/;

/** A dimension or value the metric does not declare; `field` names the offending one. */
export class DimensionError extends InvalidParameterError {
  constructor(message: string, readonly field: string) {
    super(message);
  }
}

/** Python's repr of a str (the messages quote names and values as the Python client does). */
const show = (value: unknown): string =>
  typeof value === "string" ? `'${value}'` : JSON.stringify(value) ?? String(value);

/** One public dimension: its name, its allowed values, and whether others count as `other`. */
export class Dimension {
  readonly values: readonly string[];

  /** @throws InvalidParameterError a declaration that does not hold, as Python's Dimension. */
  constructor(readonly name: string, values: unknown, readonly other: boolean = false) {
    if (typeof name !== "string" || !DIMENSION_NAME.test(name)) {
      throw new InvalidParameterError("a dimension name is lowercase letters, digits and '_', " +
                                      `at most 32 characters. Got ${show(name)}.`);
    }
    if (!Array.isArray(values) || values.length === 0) {
      throw new InvalidParameterError(`dimension '${name}' must list its values`);
    }
    if (values.length > MAX_VALUES) {
      throw new InvalidParameterError(
        `dimension '${name}' lists ${values.length} values; the most is ${MAX_VALUES}`);
    }
    for (const value of values) {
      if (typeof value !== "string" || !DIMENSION_VALUE.test(value)) {
        throw new InvalidParameterError(`dimension '${name}': a value is letters, digits and ` +
                                        `'._+-', at most 32 characters. Got ${show(value)}.`);
      }
    }
    if (new Set(values).size !== values.length) {
      throw new InvalidParameterError(`dimension '${name}' lists a value twice`);
    }
    if (values.includes(OTHER)) {
      throw new InvalidParameterError(
        `dimension '${name}': '${OTHER}' is reserved (declare other = true)`);
    }
    if (typeof other !== "boolean") {
      throw new InvalidParameterError(`dimension '${name}': other must be true or false`);
    }
    this.values = [...values] as string[];
  }

  /** Every value a count can carry: the listed ones, then `other` if declared. */
  get labels(): readonly string[] {
    return this.other ? [...this.values, OTHER] : this.values;
  }

  /** `value` as counted: itself if listed, `other` if declared, else DimensionError. */
  normalize(value: unknown): string {
    if (typeof value === "string" && this.values.includes(value)) return value;
    if (this.other && typeof value === "string") return OTHER;
    const listed = this.values.slice(0, 10).join(", ") + (this.values.length > 10 ? ", ..." : "");
    throw new DimensionError(
      `${show(value)} is not a listed value of dimension '${this.name}' (${listed})`, this.name);
  }
}

/** A metric's public dimensions (at most three) and declared combinations. */
export class Dimensions {
  readonly combinations: readonly (readonly string[])[];
  private readonly byName = new Map<string, Dimension>();

  /** @throws InvalidParameterError a declaration that does not hold, as Python's Dimensions. */
  constructor(readonly dimensions: readonly Dimension[] = [],
              combinations: readonly unknown[] = []) {
    if (dimensions.length > MAX_DIMENSIONS) {
      throw new InvalidParameterError(`a metric declares at most ${MAX_DIMENSIONS} dimensions. ` +
                                      `Got ${dimensions.length}.`);
    }
    for (const d of dimensions) this.byName.set(d.name, d);
    if (this.byName.size !== dimensions.length) {
      throw new InvalidParameterError("a dimension is declared twice");
    }
    const combos: string[][] = [];
    for (const combo of combinations) {
      const names = Array.isArray(combo) ? [...combo as unknown[]].sort() as string[] : [];
      if (names.length < 2 || new Set(names).size !== names.length ||
          names.some((n) => typeof n !== "string" || !this.byName.has(n))) {
        throw new InvalidParameterError(
          `a combination names two or three declared dimensions. Got ${show(combo)}.`);
      }
      combos.push(names);
    }
    if (new Set(combos.map((c) => c.join(","))).size !== combos.length) {
      throw new InvalidParameterError("a combination is declared twice");
    }
    this.combinations = combos;
  }

  /**
   * From a declaration: `{name: {values: [...], other: bool}}` (the metrics file, the admin
   * API and the catalogue all use this shape) and a list of name lists.
   * @throws InvalidParameterError it does not parse.
   */
  static parse(doc: unknown, combinations: unknown = []): Dimensions {
    doc ??= {};
    if (typeof doc !== "object" || Array.isArray(doc)) {
      throw new InvalidParameterError("dimensions must map each name to {values, other}");
    }
    if (!Array.isArray(combinations)) {
      throw new InvalidParameterError("combinations must be a list of dimension-name lists");
    }
    const found: Dimension[] = [];
    for (const [name, spec] of Object.entries(doc as object)) {
      if (spec === null || typeof spec !== "object" || Array.isArray(spec) ||
          Object.keys(spec).some((k) => k !== "values" && k !== "other")) {
        throw new InvalidParameterError(
          `dimension '${name}' must be {values = [...], other = true|false}`);
      }
      const s = spec as {values?: unknown; other?: unknown};
      found.push(new Dimension(name, "values" in s ? s.values : [],
                               ("other" in s ? s.other : false) as boolean));
    }
    return new Dimensions(found, combinations);
  }

  /**
   * The public dimensions of a catalogue entry or declaration (its `dimensions` and
   * `combinations`; Python's table_dimensions): none if it states neither.
   */
  static of(table: {dimensions?: unknown; combinations?: unknown}): Dimensions {
    if ((table.dimensions ?? null) === null && falsy(table.combinations)) return NONE;
    return Dimensions.parse(table.dimensions, falsy(table.combinations) ? [] : table.combinations);
  }

  get names(): string[] {
    return this.dimensions.map((d) => d.name);
  }

  /** The dimension called `name`, or undefined. */
  get(name: string): Dimension | undefined {
    return this.byName.get(name);
  }

  /**
   * The dimension values a report carries, as counted (`other` applied), names sorted.
   * @throws DimensionError a dimension the metric does not declare, or an unlisted value of
   *   one without `other`; `field` names the dimension.
   */
  normalize(stated: Readonly<Record<string, unknown>>): Record<string, string> {
    const counted: Record<string, string> = {};
    for (const [name, value] of Object.entries(stated)) {
      const dimension = this.byName.get(name);
      if (dimension === undefined) {
        throw new DimensionError(`'${name}' is not a dimension of this metric` +
          (this.dimensions.length > 0 ? ` (it declares ${this.names.join(", ")})`
                                      : " (it declares none)"), name);
      }
      counted[name] = dimension.normalize(value);
    }
    return sorted(counted);
  }

  /**
   * The series a report with these (normalized) values adds to, besides the total: one per
   * stated dimension, and one per declared combination whose dimensions are all stated.
   */
  series(counted: Dims): string[] {
    const labels = Object.keys(counted).sort().map((name) => `${name}=${counted[name]}`);
    for (const combo of this.combinations) {
      if (combo.every((name) => name in counted)) {
        labels.push(combo.map((name) => `${name}=${counted[name]}`).join(","));
      }
    }
    return labels;
  }
}

/** No dimensions: every stated one is refused. */
export const NONE = new Dimensions();

/** Python's falsiness of a JSON value: null, false, 0, "", [] and {}. */
function falsy(value: unknown): boolean {
  return value === undefined || value === null || value === false || value === 0 ||
    value === "" || (typeof value === "object" && Object.keys(value).length === 0);
}

/** `dims` with its names in sorted order (as the Python queue's dims_text writes them). */
function sorted(dims: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(dims).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
