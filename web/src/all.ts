/**
 * deniable-client/all: the Reporter with every metric kind the Python client reports.
 *
 *     import {Reporter} from "deniable-client/all";
 *     const reporter = new Reporter("https://telemetry.example.com", {token: "dn_ingest_..."});
 *     reporter.report("dark_mode", true);          // boolean
 *     reporter.report("os", "android");            // categorical: a declared label
 *     reporter.report("crashes_per_week", 3);      // histogram: put in its bucket
 *     reporter.report("startup_ms", 812.5);        // numeric: in [lower, upper]
 *
 * Public dimensions (src/dimensions.ts) are reported from here only: the device's values as
 * `new Reporter(url, {dimensions: {app_version: "2.4", platform: "web"}})`, a call's own as
 * `report(metric, value, {platform: "ios"})`. They travel in clear: NOT protected by local
 * differential privacy.
 *
 * The default entry point (`deniable-client`) reports boolean metrics only and stays small;
 * this one adds the kinds module (src/kinds.ts). Everything else (queue, sender, memo of
 * booleans, the rules) is the same Reporter's.
 */
import {DIMENSION_NAME, DimensionError, Dimensions, NONE} from "./dimensions.js";
import {InvalidParameterError, QueueError, UnknownMetricError} from "./errors.js";
import {cmp} from "./fraction.js";
import {
  alphaThreshold, type AnyMetric, DEFAULT_GRID, type Declared, declareMetric, type KindDeclaration,
  MetricSpec, parseAllCatalogue,
} from "./kinds.js";
import {type RandomizedResponse, Rr} from "./mechanism.js";
import {memoBit} from "./memo.js";
import {type Catalogue, lookup} from "./catalogue.js";
import {DEFAULT_MAX_EPSILON, spend} from "./privacy.js";
import {PrivacyLoss} from "./loss.js";
import {above, nats, Reporter as BooleanReporter, type ReporterOptions as BooleanOptions,
  type Stats as BooleanStats} from "./reporter.js";
import type {Dims, Payload} from "./wire.js";

export * from "./index.js";
export * from "./kinds.js";
export * from "./dimensions.js";
export {PrivacyLoss} from "./loss.js";
export {identifying, MAX_UNIQUE_SHARE, UNIQUE_SHARE_DEVICES, uniqueShare} from "./unique.js";

/** Public dimension values as an app states them: name -> value. */
export type DimensionValues = Readonly<Record<string, string>>;

export interface ReporterOptions extends Omit<BooleanOptions, "metrics"> {
  /**
   * name -> mechanism, spec, id (`rr:`, or `bm:` with its bounds) or declaration
   * (`{kind, mechanism, categories | edges | lower, upper, clamp}`): usable at once, before
   * any network; a privacy floor.
   */
  metrics?: Record<string, Declared | (KindOrBoolean & DimensionDeclaration)>;
  /**
   * The device's public dimension values, e.g. `{app_version: "2.4", platform: "web"}`:
   * attached, in clear (NOT protected by local differential privacy), to each report of a
   * metric that declares that dimension, and to no other. A value a metric's list refuses
   * (without `other`) makes that metric's `report()` throw DimensionError unless the call
   * gives its own value; it is logged once and shown in `stats().dimensionProblems`.
   */
  dimensions?: DimensionValues;
}

/** A declaration's public dimensions, as in the metrics file and the catalogue. */
export interface DimensionDeclaration {
  dimensions?: Record<string, {values: readonly string[]; other?: boolean}>;
  combinations?: readonly (readonly string[])[];
}

type KindOrBoolean = KindDeclaration | {kind?: "boolean"; mechanism: string};

export interface Stats extends BooleanStats {
  /** Metrics whose list refuses a device-wide dimension value: metric -> why. */
  dimensionProblems: Record<string, string>;
}

/** How one metric's reports get their dimensions (Python's _DimensionRoute). */
interface Route {
  dimensions: Dimensions;
  /** The device-wide values the metric declares, as given. */
  device: Record<string, string>;
  /** Those values as counted; undefined for none. */
  counted?: Dims;
  /** Why the device-wide values are refused, if they are. */
  error?: DimensionError;
}

type Metrics = Map<string, AnyMetric>;

/** The Reporter of every metric kind (see the module doc and ../reporter.ts). */
export class Reporter extends BooleanReporter {
  /** metric \0 mechanism id -> memo key (category index or grid point) -> answer. */
  private readonly answers = new Map<string, Map<number, Payload>>();
  /** metric -> the device's α-point rounding threshold (numeric metrics). */
  private readonly alphas = new Map<string, bigint>();
  private readonly device: Record<string, string>;
  /** The app's declared dimensions: metric -> Dimensions (metrics that declare none absent). */
  private readonly declaredDims: Map<string, Dimensions>;
  /** The served catalogue's metric names and dimensions; null while none is known. */
  private served: {names: Set<string>; dimensions: Map<string, Dimensions>} | null = null;
  /** Served entries left out for their public dimensions: metric -> why. */
  private withheld = new Map<string, string>();
  private routes = new Map<string, Route | undefined>();

  /**
   * @throws InvalidParameterError an option out of range, an invalid declared metric or
   *   declared dimensions, or `dimensions` that do not map dimension names to strings
   *   (DimensionError, naming the dimension).
   */
  constructor(collectorUrl: string, options: ReporterOptions = {}) {
    const device = deviceDimensions(options.dimensions);
    let booleans: Record<string, RandomizedResponse> | undefined;
    const others = new Map<string, MetricSpec>();
    const declaredDims = new Map<string, Dimensions>();
    if (options.metrics !== undefined) {
      booleans = {};
      for (const [name, declared] of Object.entries(options.metrics)) {
        const metric = declareMetric(name, declared as Declared);
        const why = above(metric, nats("maxEpsilon", options.maxEpsilon ?? DEFAULT_MAX_EPSILON));
        if (why) throw new InvalidParameterError(`metric '${name}': ${why}`);
        if (metric instanceof Rr) booleans[name] = metric;
        else others.set(name, metric);
        if (typeof declared === "object" && declared !== null &&
            !(declared instanceof Rr) && !(declared instanceof MetricSpec)) {
          let found: Dimensions;
          try {
            found = Dimensions.of(declared as DimensionDeclaration);
          } catch (error) {
            throw new InvalidParameterError(`metric '${name}': ${(error as Error).message}`);
          }
          if (found !== NONE) declaredDims.set(name, found);
        }
      }
    }
    super(collectorUrl, {...options, metrics: booleans});
    this.device = device;
    this.declaredDims = declaredDims;
    // The declared catalogue is the catalogue until one is fetched (the same map): add the
    // other kinds to it before init() reads it (after its first await).
    for (const [name, spec] of others) (this.declared as unknown as Metrics).set(name, spec);
  }

  /**
   * Perturb `trueValue` for `metric` and queue the perturbed report. Never touches the network.
   *
   * `trueValue` is what the metric's kind takes: a boolean (or 0/1), a declared category
   * label, or a number (histogram: put in its bucket; numeric: in [lower, upper]), clamped
   * only if the metric declares clamp.
   *
   * `dims` gives public dimension values for this report (e.g. `{platform: "ios"}`), over the
   * device-wide `dimensions` option; only dimensions the metric declares are attached. They
   * travel in clear: they are NOT protected by local differential privacy. A value off the
   * list counts as `other` where the dimension declares it.
   *
   * @throws DimensionError (an InvalidParameterError) a dimension the metric does not
   *   declare, a value that is not a string, or one off its list (without `other`), per call
   *   or device-wide; `field` names the dimension. Checked first; nothing is queued or sent.
   * @throws InvalidParameterError a value the metric does not take (the message never shows
   *   it), or `dims` that is not an object; nothing is queued or sent.
   * @throws UnknownMetricError a catalogue is known and does not hold `metric`.
   * @throws QueueError the reporter is closed.
   */
  override report(metric: string, trueValue: unknown, dims?: DimensionValues): void {
    if (this.closed) throw new QueueError("the reporter is closed");
    if (this.disabled) return;
    const kind = this.otherKinds.get(metric);
    if (kind !== undefined) {
      throw new UnknownMetricError(`${JSON.stringify(metric)} is of kind ${JSON.stringify(kind)}, ` +
                                   "which this client does not know: upgrade it to report it");
    }
    const spec = this.catalogue === null ? undefined : this.metricsMap.get(metric);
    const booleanLike = typeof trueValue === "boolean" || trueValue === 0 || trueValue === 1;
    if (spec === undefined) {
      const someKind = ["string", "number", "bigint"].includes(typeof trueValue);
      if (this.catalogue !== null) {
        if (this.held(metric)) return;
        const withheld = this.withheld.get(metric);
        if (withheld !== undefined) {
          throw new UnknownMetricError(`${JSON.stringify(metric)} is withheld: ${withheld}`);
        }
        if (someKind && typeof metric === "string") lookup(this.catalogue, metric);
        super.report(metric, trueValue as boolean);  // throws: not a value, or not a metric
        return;
      }
      if (typeof metric !== "string") {
        throw new InvalidParameterError(`metric must be a string. Got a ${typeof metric} instead.`);
      }
      if (!someKind && !booleanLike) {
        throw new InvalidParameterError("trueValue must be a boolean, a category label " +
                                        `(string) or a number. Got a ${typeof trueValue} instead.`);
      }
      if (dims !== undefined && dims !== null) checkStated(metric, dims);
      this.wait(metric, trueValue, dims);  // no catalogue yet: its kind is not known
      return;
    }
    // Public dimensions first, as in Python: a refused one spends nothing.
    const stated = this.stated(metric, dims);
    if (spec instanceof Rr) {
      if (!booleanLike) {
        throw new InvalidParameterError(
          `trueValue must be a boolean. Got a ${typeof trueValue} instead.`);
      }
      const value = trueValue ? 1 : 0;
      if (this.skipped(metric)) return;
      // Behind reports still waiting, it waits too: reports keep their call order.
      if (this.waiting) {
        if (this.fresh.has(metric) || !this.refused(metric, spec, value)) {
          this.wait(metric, value, dims);
        }
      } else if (this.fresh.has(metric)) {
        this.put(metric, spec.id, spec.perturb(value, this.rng), stated);
      // Else its memoized answer, if derived and paid for; else derived and charged
      // asynchronously.
      } else {
        const bit = this.memo.get(`${metric}\u0000${spec.id}`)?.[value];  // paid for
        if (bit !== undefined) this.put(metric, spec.id, bit, stated);
        else if (!this.refused(metric, spec, value)) this.wait(metric, value, dims);
      }
      return;
    }
    const encoded = spec.encode(trueValue);  // throws for a value the metric does not take
    if (this.skipped(metric)) return;
    if (this.fresh.has(metric) && this.waiting) {
      this.wait(metric, trueValue, dims);
      return;
    }
    if (this.fresh.has(metric)) {
      this.put(metric, spec.id, spec.perturb(encoded, this.rng), stated);
      return;
    }
    const alpha = spec.kind === "numeric" ? this.alphas.get(metric) : 0n;
    const key = alpha === undefined ? undefined : spec.memoKey(encoded, alpha);
    // Its memoized answer, if derived and paid for; else derived and charged asynchronously.
    const answer = key === undefined ? undefined
      : this.answers.get(`${metric}\u0000${spec.id}`)?.get(key);
    if (answer !== undefined && !this.waiting) this.put(metric, spec.id, answer, stated);
    // A number (or histogram bucket) is never silent once one is paid: drainOne sends the nearest.
    else if (key === undefined || spec.kind !== "categorical" || !this.refused(metric, spec, key)) {
      this.wait(metric, trueValue, dims);
    }
  }

  /**
   * Epsilon per report, long-run epsilon of a constant value, and what a change of value
   * reveals, for `metric` on this device under the mechanism its reports follow now (Python's
   * privacy_loss; loss.ts).
   * @throws UnknownMetricError no catalogue is known yet, or it does not hold `metric`.
   */
  privacyLoss(metric: string): PrivacyLoss {
    if (this.catalogue === null) throw new UnknownMetricError("no catalogue is known yet");
    const m = lookup(this.catalogue, metric) as unknown as AnyMetric;
    return new PrivacyLoss(metric, m instanceof MetricSpec ? m.mechanism : m, !this.fresh.has(metric));
  }

  /** The public dimensions each metric reported now declares: name -> Dimensions (metrics
   * that declare none are absent). The collector's declaration when its catalogue lists the
   * metric (it refuses any other), else the app's. */
  get dimensions(): Record<string, Dimensions> {
    const found: Record<string, Dimensions> = {};
    for (const name of this.catalogue?.keys() ?? []) {
      const route = this.route(name);
      if (route !== undefined) found[name] = route.dimensions;
    }
    return found;
  }

  override stats(): Stats {
    const dimensionProblems: Record<string, string> = {};
    for (const name of this.catalogue?.keys() ?? []) {
      const error = this.route(name)?.error;
      if (error !== undefined) dimensionProblems[name] = error.message;
    }
    return {...super.stats(), dimensionProblems};
  }

  /** The declaration that applies to `metric`'s dimensions, and the device's values in it. */
  private route(metric: string): Route | undefined {
    if (this.routes.has(metric)) return this.routes.get(metric);
    const served = this.served;
    const dimensions = (served !== null && served.names.has(metric) ?
      served.dimensions.get(metric) : this.declaredDims.get(metric)) ?? NONE;
    let route: Route | undefined;
    if (dimensions !== NONE) {
      const device: Record<string, string> = {};
      for (const [name, value] of Object.entries(this.device)) {
        if (dimensions.get(name) !== undefined) device[name] = value;
      }
      route = {dimensions, device};
      try {
        route.counted = nonEmpty(dimensions.normalize(device));
      } catch (error) {
        const e = error as DimensionError;
        route.error = new DimensionError(
          `metric '${metric}': the device-wide value of dimension '${e.field}' ` +
          `(new Reporter(url, {dimensions})) is refused: ${e.message}; give a listed value with ` +
          `report(metric, value, {${e.field}: ...}) or fix the dimensions option. Nothing was ` +
          "reported.", e.field);
      }
    }
    this.routes.set(metric, route);
    return route;
  }

  /**
   * The dims one report of `metric` carries (Python's _stated_dims): the device-wide values
   * the metric declares, overridden by `dims`, as counted; undefined for none.
   * @throws DimensionError see report().
   */
  private stated(metric: string, dims: DimensionValues | undefined): Dims | undefined {
    const route = this.route(metric);
    if (dims === undefined || dims === null || (checkStated(metric, dims),
                                                 Object.keys(dims).length === 0)) {
      if (route?.error !== undefined) throw route.error;
      return route?.counted;
    }
    let counted: Record<string, string>;
    try {
      counted = (route?.dimensions ?? NONE).normalize({...route?.device, ...dims});
    } catch (error) {
      const e = error as DimensionError;
      if (route?.error !== undefined && !Object.hasOwn(dims, e.field)) throw route.error;
      throw new DimensionError(`metric '${metric}': ${e.message}. Nothing was reported.`, e.field);
    }
    return nonEmpty(counted);
  }

  private get metricsMap(): Metrics {
    return this.catalogue as unknown as Metrics;
  }

  /** Hold a report in memory until it can be perturbed (never written anywhere). */
  private wait(metric: string, value: unknown, dims?: DimensionValues): void {
    if (this.catalogue === null && this.initDone) {
      this.counts.noCatalogue++;
      this.once("no-catalogue", "deniable: no metric catalogue yet (collector unreachable, " +
                "nothing cached, no metrics declared): reports are dropped until one is known");
      return;
    }
    if (this.early.length >= this.opts.maxEarlyReports) {
      this.counts.early++;
      return;
    }
    this.early.push([metric, value as 0 | 1, dims === undefined || dims === null ? undefined
      : {...dims}]);
    this.schedule();
  }

  protected override async drainOne(metric: string, value: unknown,
                                    dims?: DimensionValues): Promise<void> {
    if (this.catalogue !== null && this.held(metric)) return;
    const spec = this.catalogue === null ? undefined : this.metricsMap.get(metric);
    let stated: Dims | undefined;
    if (spec !== undefined) {
      try {
        stated = this.stated(metric, dims);
      } catch {
        this.dropEarly(metric, "refuses the public dimensions of a report made before the " +
                       "catalogue was known");
        return;
      }
    }
    if (!(spec instanceof MetricSpec)) {
      if (typeof value === "boolean" || value === 0 || value === 1) {
        return super.drainOne(metric, value ? 1 : 0, stated);
      }
      if (this.catalogue === null) this.counts.noCatalogue++;
      else this.dropEarly(metric, "is not in the catalogue, or not a metric of this value's kind");
      return;
    }
    let encoded: ReturnType<MetricSpec["encode"]>;
    try {
      encoded = spec.encode(value);
    } catch {
      this.dropEarly(metric, "does not take the value reported before the catalogue was known");
      return;
    }
    if (this.skipped(metric)) return;
    if (this.fresh.has(metric)) {
      this.put(metric, spec.id, spec.perturb(encoded, this.rng), stated);
      return;
    }
    if (this.secret === undefined) {
      this.counts.noCatalogue++;
      return;
    }
    let alpha = spec.kind === "numeric" ? this.alphas.get(metric) : 0n;
    if (alpha === undefined) this.alphas.set(metric, alpha = await alphaThreshold(this.secret, metric));
    const id = `${metric}\u0000${spec.id}`;
    const key = spec.memoKey(encoded, alpha);
    const answer = this.answers.get(id)?.get(key) ?? await spec.memoAnswer(this.secret, metric, key);
    if (!await this.charge(metric, spec, key)) {
      const nearest = spec.kind !== "categorical" ? await this.nearestPaid(metric, spec, key)
        : undefined;
      if (nearest !== undefined) this.put(metric, spec.id, nearest, stated);
      return;
    }
    let answers = this.answers.get(id);
    if (answers === undefined) this.answers.set(id, answers = new Map());
    answers.set(key, answer);  // paid for: reported synchronously from now on
    this.put(metric, spec.id, answer, stated);
  }

  /**
   * The memoized answer of the paid grid point (or histogram bucket) nearest `key` (the lower
   * one on a tie), or undefined if none is paid: a number whose new grid point (or bucket) the
   * cap refuses is sent as that, free, so a drifting number never goes silent (as Python's
   * guard; issue 26).
   */
  private async nearestPaid(metric: string, spec: MetricSpec, key: number):
      Promise<Payload | undefined> {
    const known = this.answers.get(`${metric}\u0000${spec.id}`);
    const last = spec.kind === "numeric" ? DEFAULT_GRID : spec.edges.length - 2;
    for (let distance = 1; distance <= last; distance++) {
      for (const point of [key - distance, key + distance]) {
        if (point < 0 || point > last) continue;
        const answer = known?.get(point);
        if (answer !== undefined) return answer;
        // Paid in another process (the ledger as last read): derive its answer.
        const tag = await this.tag(metric, spec, point);
        if (spend(this.ledger, metric, tag, spec.epsilon, this.cap) === 0) {
          return spec.memoAnswer(this.secret!, metric, point);
        }
      }
    }
    return undefined;
  }

  private dropEarly(metric: string, why: string): void {
    this.counts.unknown++;
    this.once(`unknown:${metric}`, `deniable: metric '${metric}' ${why}; its early reports ` +
              "were dropped");
  }

  /** Every kind of a catalogue document; metrics of kinds this client does not know are left
   * out (logged once; reporting one throws UnknownMetricError). */
  protected override parse(doc: unknown): Catalogue {
    const other = new Map<string, string>();
    const withheld = new Map<string, string>();
    const dimensions = new Map<string, Dimensions>();
    const catalogue = parseAllCatalogue(
      doc, (name, kind, why) => (why === undefined ? other : withheld).set(name, why ?? kind),
      dimensions);
    this.otherKinds = other;
    this.withheld = withheld;
    this.served = {names: new Set(catalogue.keys()), dimensions};
    this.routes = new Map();
    const listed = [...other].map(([name, kind]) => `${name} (${kind})`).sort().join(", ");
    if (listed) this.once(`kinds:${listed}`, `deniable: left out metrics of unknown kinds: ${listed}`);
    for (const [name, why] of withheld) this.once(`withheld:${name}:${why}`, `deniable: metric '${name}' is withheld: ${why}`);
    return catalogue as unknown as Catalogue;
  }

  /**
   * Declared metrics are a privacy floor (Python's resolve_catalogue): the registered spec is
   * used if it asks the same question (kind, categories, edges, bounds) with a likelihood ratio
   * no larger; otherwise the declared one.
   */
  protected override checkDeclared(registered: Catalogue): void {
    const declared = this.declared as unknown as Metrics;
    const next: Metrics = new Map(declared);
    for (const [name, mine] of declared) {
      const found = (registered as unknown as Metrics).get(name);
      if (found === undefined || found.id === mine.id) continue;
      const same = question(found) === question(mine);
      const using = same && cmp(found.likelihoodRatio, mine.likelihoodRatio) <= 0 ? found : mine;
      next.set(name, using);
      this.mismatch[name] = {declared: mine.id, registered: found.id, using: using.id};
      this.once(`mismatch:${name}`, `deniable: metric '${name}' is registered as ${found.id} ` +
                `but declared as ${mine.id}; using ${using.id} (` +
                (same ? "never a larger epsilon)" : "it asks another question)"));
    }
    this.catalogue = next as unknown as Catalogue;
  }

  protected override forget(): void {
    super.forget();
    this.answers.clear();
    this.alphas.clear();
  }

  /** The memoized answers of boolean metrics, and each numeric metric's α, derived at once. */
  protected override async prepareMemo(): Promise<void> {
    for (const why of Object.values(this.stats().dimensionProblems)) this.once(why, `deniable: ${why}`);
    if (this.catalogue === null || this.secret === undefined) return;
    for (const [metric, m] of this.metricsMap) {
      if (this.fresh.has(metric)) continue;
      if (m instanceof MetricSpec) {
        if (m.kind === "numeric" && !this.alphas.has(metric)) {
          this.alphas.set(metric, await alphaThreshold(this.secret, metric));
        }
        continue;
      }
      const key = `${metric}\u0000${m.id}`;
      const bits = this.memo.get(key) ?? [undefined, undefined];
      for (const v of [0, 1] as const) {
        if (!spend(this.ledger, metric, await this.tag(metric, m, v), 0, Infinity)) {
          bits[v] ??= await memoBit(this.secret, metric, m, v);  // paid for
        }
      }
      this.memo.set(key, bits);
    }
  }
}

function question(metric: AnyMetric): string {
  return metric instanceof MetricSpec ? metric.question : "boolean";
}

/** `dimensions` (the option): a plain object of dimension names to strings (whether a metric's
 * list allows a value is known only with the catalogue). */
function deviceDimensions(dimensions: unknown): Record<string, string> {
  if (dimensions === undefined || dimensions === null) return {};
  if (typeof dimensions !== "object" || Array.isArray(dimensions)) {
    throw new InvalidParameterError("dimensions must map dimension names to string values, " +
                                    `e.g. {platform: "web"}. Got a ${typeof dimensions} instead.`);
  }
  for (const [name, value] of Object.entries(dimensions)) {
    if (!DIMENSION_NAME.test(name)) {
      throw new DimensionError(`dimensions: '${name}' is not a dimension name (lowercase ` +
                               "letters, digits and '_', at most 32 characters)", name);
    }
    if (typeof value !== "string") {
      throw new DimensionError(`dimensions: dimension '${name}' takes a string value. Got a ` +
                               `${typeof value} instead.`, name);
    }
  }
  return {...dimensions as Record<string, string>};
}

/** A call's `dims`: a plain object of strings (Python's check_stated and its str check). */
function checkStated(metric: string, dims: unknown): void {
  if (typeof dims !== "object" || dims === null || Array.isArray(dims)) {
    throw new InvalidParameterError(
      `dims must map dimension names to values. Got a ${typeof dims} instead.`);
  }
  for (const [name, value] of Object.entries(dims)) {
    if (typeof value !== "string") {
      throw new DimensionError(`metric '${metric}': dimension '${name}' takes a string value. ` +
                               `Got a ${typeof value} instead. Nothing was reported.`, name);
    }
  }
}

function nonEmpty(dims: Record<string, string>): Dims | undefined {
  return Object.keys(dims).length > 0 ? dims : undefined;
}
