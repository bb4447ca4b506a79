/**
 * deniable-client/all: the Reporter with every metric kind the Python client reports.
 *
 *     import {Reporter} from "deniable-client/all";
 *     import metrics from "./metrics.json" with {type: "json"};  // the app's declarations
 *     const reporter = new Reporter("https://telemetry.example.com", {token: "dn_ingest_...",
 *                                                                    metrics});
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
 * A boolean metric may be declared `memoization: "instantaneous"` with its layer
 * (`instantaneous: "rr:..."`): its permanent answer is re-perturbed with fresh coins on every
 * report (RAPPOR's IRR, src/layers.ts), here only.
 *
 * The default entry point (`deniable-client`) reports boolean metrics only and stays small;
 * this one gives the same Reporter (reporter.ts) other parts at construction: AllParts, below,
 * which holds the kinds (kinds.ts, kinds/*.ts; booleans one of them, on the same path as the
 * others), the instantaneous layer, budgets and public dimensions. Its
 * Reporter class only passes them and adds privacyLoss, dimensions and the extra stats.
 * Everything else (queue, sender, the rules) is the same Reporter's.
 */
import {DIMENSION_NAME, DimensionError, Dimensions, NONE} from "./dimensions.js";
import {FIELDS} from "./declaration.js";
import {InvalidParameterError} from "./errors.js";
import {alwaysFresh, KIND_TABLE, kindNamed} from "./kinds/table.js";
import {boolean} from "./kinds/boolean.js";
import {type Encoded, type Kind as KindModule, kindName, type Metric} from "./kinds/kind.js";
import type {RandomBits} from "./random.js";
import {
  alphaThreshold, type AnyMetric, type Declared, declareMetric, type KindDeclaration, KINDS,
  MetricSpec, parseAllCatalogue,
} from "./kinds.js";
import {declaredLayer, split} from "./layers.js";
import {Rr} from "./mechanism.js";
import {memoBit} from "./memo.js";
import {type Catalogue, lookup} from "./catalogue.js";
import {spend} from "./privacy.js";
import {type Budget, BUDGETS_KEY, BudgetExceededError, type BudgetLedger, chargeBudget, checkBudgets,
  periodStart} from "./budget.js";
import {PrivacyLoss} from "./loss.js";
import {identifying} from "./unique.js";
import {type Parts, Reporter as Core, type ReporterOptions as BooleanOptions,
  type Stats as BooleanStats} from "./reporter.js";
import type {Dims, Payload} from "./wire.js";

// The public API (docs/web.md, "What each entry exports"): the default entry's, this Reporter,
// and what its declarations, methods and errors name.
export * from "./index.js";
export {
  BitMean, type Declared, domainTag, KaryRandomizedResponse, type KindDeclaration, MetricSpec,
  SubsetSelection, UnaryEncoding,
} from "./kinds.js";
export {DimensionError, type Dimensions} from "./dimensions.js";
export {PrivacyLoss} from "./loss.js";
export {OpenDomainSketch} from "./open.js";
export {type Budget, BudgetExceededError} from "./budget.js";

/** Public dimension values as an app states them: name -> value. */
export type DimensionValues = Readonly<Record<string, string>>;

export interface ReporterOptions extends Omit<BooleanOptions, "metrics"> {
  /**
   * The metrics this app reports, and the privacy contract: name -> the metrics file's table
   * as JSON (`{kind, mechanism, categories | edges | lower, upper, clamp, memoization, period,
   * dimensions, combinations}`), or a mechanism, spec or id (`rr:`, or `bm:` with its bounds).
   * Reported at once, before any network. Undeclared metrics are never reported.
   */
  metrics?: Record<string, Declared | (KindOrBoolean & DimensionDeclaration & Policies) |
    MetricTable>;
  /**
   * The device's public dimension values, e.g. `{app_version: "2.4", platform: "web"}`:
   * attached, in clear (NOT protected by local differential privacy), to each report of a
   * metric that declares that dimension, and to no other. A value a metric's list refuses
   * (without `other`) makes that metric's `report()` throw DimensionError unless the call
   * gives its own value; it is logged once and shown in `stats().dimensionProblems`.
   */
  dimensions?: DimensionValues;
  /**
   * Per-period privacy budgets (Python's `budgets={metric: Budget(epsilon, period)}`):
   * metric -> `{epsilon, period}`, at most `epsilon` nats of that metric's reports per
   * `period` seconds (default 86,400; epoch-aligned windows, src/budget.ts). A fresh report
   * the budget refuses throws BudgetExceededError from report() (as last read) or is dropped
   * when the store's transaction refuses it; a memoized one's new answer is refused as by the
   * cap (a paid answer is sent instead, if any). Refused reports not sent are counted in
   * `stats().budgetRefused`. Both clients admit the same reports (shared vectors `budgets`).
   */
  budgets?: Record<string, Budget>;
}

/** A declaration's public dimensions, as in the metrics file and the catalogue. */
export interface DimensionDeclaration {
  dimensions?: Record<string, {values: readonly string[]; other?: boolean}>;
  combinations?: readonly (readonly string[])[];
}

type KindOrBoolean = KindDeclaration | {kind?: "boolean"; mechanism: string};

/** A metrics-file table as an app loads it from JSON (checked at construction). */
export type MetricTable = Readonly<Record<string, unknown>>;

/** A declaration's collection policy and notes, as in the metrics file. */
interface Policies {
  memoization?: "memoized" | "instantaneous" | "fresh";
  /** The instantaneous layer's mechanism id, with memoization "instantaneous" (booleans). */
  instantaneous?: string | null;
  period?: "hour" | "day" | "week";
  description?: string;
  retention_days?: number;
}

export interface Stats extends BooleanStats {
  /** Metrics whose list refuses a device-wide dimension value: metric -> why. */
  dimensionProblems: Record<string, string>;
  /** Reports a budget refused and nothing was sent for (Python's budget_refused): fresh ones,
   * and memoized ones with no paid answer to send instead (the `budgets` option). */
  budgetRefused: number;
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

/** Fields that only some kinds declare, in the metrics file's order: field -> those kinds (each
 * kind's `fields`, kinds/*.ts; collector/registry.py's _ONLY_FOR). */
const ONLY_FOR: [string, string[]][] = FIELDS.map((field): [string, string[]] =>
  [field, KINDS.filter((kind) => KIND_TABLE[kind]!.fields.includes(field))])
  .filter(([, kinds]) => kinds.length > 0);

/**
 * deniable-client/all's parts (reporter.ts, Parts): every kind (kinds.ts and kinds/*.ts), the
 * instantaneous layer (layers.ts), budgets (budget.ts) and public dimensions (dimensions.ts).
 * Every kind takes one path (report, drainOne, prepareMemo, charge), asking the kind (kindOf)
 * for the encoding, rounding, stand-ins and the answers derived up front.
 */
class AllParts implements Parts<unknown, DimensionValues> {
  /** metric \0 mechanism id -> memo key (a boolean's bit, a category index or grid point) ->
   * its paid answer (under the memo layer, for a boolean with an instantaneous layer). */
  private readonly answers = new Map<string, Map<number, Payload>>();
  /** metric -> the device's α-point rounding threshold (numeric metrics). */
  private readonly alphas = new Map<string, bigint>();
  private readonly device: Record<string, string>;
  /** The app's declared dimensions: metric -> Dimensions (metrics that declare none absent);
   * the only ones ever attached (a served list changes nothing). */
  private readonly declaredDims: Map<string, Dimensions>;
  private readonly routes = new Map<string, Route | undefined>();
  /** Boolean metric -> its declared instantaneous layer (layers.ts). */
  private readonly irrs: Map<string, Rr>;
  /** metric \0 wire id -> its memo layer, or null if the layer cannot produce wire's reports. */
  private readonly memoLayers = new Map<string, Metric | null>();
  /** metric -> [epsilon, period in seconds] (the budgets option). */
  private readonly budgets: Map<string, [number, number]>;
  private readonly clock: () => number;
  /** The budgets' spending as last read or written (the store's copy decides). */
  private spending: BudgetLedger = {};
  private budgetRefused = 0;

  /** The `metrics` option as the reporter reads it (instantaneous layers taken out). */
  readonly metrics: ReporterOptions["metrics"];

  /**
   * @throws InvalidParameterError an invalid declared layer or declared dimensions, budgets,
   *   or `dimensions` that do not map dimension names to strings (DimensionError).
   */
  constructor(options: ReporterOptions) {
    const device = deviceDimensions(options.dimensions);
    const budgets = checkBudgets(options.budgets);
    const declaredDims = new Map<string, Dimensions>();
    const irrs = new Map<string, Rr>();
    const metrics = {...options.metrics};
    for (const [name, declared] of Object.entries(metrics)) {
      if (declared?.constructor !== Object) continue;
      const table = declared as MetricTable;
      if (alwaysFresh(table)) freshOnly(name, table);
      // Fields only its kind takes that the shared policy check (declaration.ts) does not know
      // (an open metric's max_bytes): checked here against the id, then left out.
      const own = kindNamed(kindName(table))?.fields.filter((f) => f in table && !FIELDS.includes(f));
      if (own?.length) {
        declareMetric(name, table as unknown as Declared);
        metrics[name] = Object.fromEntries(Object.entries(table).filter(([f]) => !own.includes(f)));
      }
      const layer = declaredLayer(name, declared as MetricTable);
      if (layer !== undefined) {
        if (options.fresh?.includes(name)) {
          throw new InvalidParameterError(`metric '${name}': instantaneous: a fresh metric has ` +
                                          "no instantaneous layer");
        }
        irrs.set(name, layer);
        // The rest of the table as any other; the policy is set below.
        const {memoization: _m, instantaneous: _i, ...rest} = declared as MetricTable;
        metrics[name] = rest;
      }
      let found: Dimensions;
      try {
        found = Dimensions.of(declared as DimensionDeclaration);
      } catch (error) {
        throw new InvalidParameterError(`metric '${name}': dimensions: ${(error as Error).message}`);
      }
      if (found !== NONE) declaredDims.set(name, found);
    }
    this.metrics = metrics;
    this.device = device;
    this.declaredDims = declaredDims;
    this.irrs = irrs;
    this.budgets = budgets;
    this.clock = options.clock ?? Date.now;
  }

  /**
   * Finish setting up `r`, the reporter these parts were given to: the budgets' spending read
   * from its store, and each declared layer's policy and check.
   * @throws InvalidParameterError a declared layer that cannot produce its mechanism's reports.
   */
  attach(r: Core): void {
    const {budgets, irrs} = this;
    if (budgets.size > 0) {
      void r.initialised.then(() => r.store.get<BudgetLedger>(BUDGETS_KEY))
        .then((read) => { this.spending = {...read, ...this.spending}; }, () => undefined);
    }
    for (const [name, m] of r.declared.metrics) {
      if (isFresh(r, name, m)) Object.assign(r.declared.policies.get(name)!, {memoization: "fresh"});
    }
    for (const [name, layer] of irrs) {
      Object.assign(r.declared.policies.get(name)!, {memoization: "instantaneous", irr: layer.id});
      try {
        split(r.declared.metrics.get(name)!, layer);
      } catch (error) {
        throw new InvalidParameterError(`metric '${name}': instantaneous: ${(error as Error).message}`);
      }
    }
  }

  /** A categorical mechanism's memoized answer may single the device out (unique.ts). */
  identifying(m: Rr): string | undefined {
    return identifying(m);
  }

  /** Every kind (kinds.ts, declareMetric). */
  declare(name: string, value: unknown): Rr {
    const table = value?.constructor === Object ? value as Record<string, unknown> : {};
    for (const [field, kinds] of ONLY_FOR) {
      if (field in table && !kinds.includes(table.kind as string)) {
        throw new InvalidParameterError(`metric '${name}': ${field}: only ${kinds.join(" and ")} ` +
                                        "metrics declare it");
      }
    }
    return declareMetric(name, value as Declared) as Rr;
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
   * @throws UnknownMetricError the app does not declare `metric` (whatever the value);
   *   nothing is queued or sent.
   * @throws QueueError the reporter is closed.
   */
  report(r: Core, metric: string, trueValue: unknown, dims?: DimensionValues): void {
    const m = r.declaredMetric(metric) as AnyMetric;
    if (r.disabled || r.held(metric)) return;
    // Public dimensions first, as in Python: a refused one spends nothing.
    const stated = this.stated(metric, dims);
    const kind = kindOf(m);
    const encoded = kind.encode(m, trueValue);  // throws for a value the metric does not take
    if (r.skipped(metric)) return;
    const fresh = isFresh(r, metric, m);
    // The memoized answer's mechanism: the metric's, or the memo layer under an instantaneous one.
    const memo = fresh ? m : this.memoLayer(r, metric, m);
    if (memo === undefined) return void r.counts.withheld++;
    // Behind reports still waiting, it waits too: reports keep their call order; drainOne
    // decides (and substitutes).
    if (r.waiting) return this.wait(r, metric, trueValue, dims);
    if (fresh) return this.putFresh(r, metric, m, perturb(m, encoded, r.rng), stated, true);
    const alpha = kind.rounds ? this.alphas.get(metric) : 0n;
    const key = alpha === undefined ? undefined : memoKey(m, encoded, alpha);
    // Its memoized answer (through its instantaneous layer), if derived and paid for.
    const known = this.answers.get(`${metric}\u0000${m.id}`);
    const answer = key === undefined ? undefined : known?.get(key);
    if (answer !== undefined) return r.put(metric, m.id, this.layered(r, metric, answer), stated);
    // A kind whose paid answers are all derived up front (upFront: booleans) knows the cap's
    // refusal now: the first paid stand-in (instead), else nothing (issue 26). Any other new
    // answer is derived and charged asynchronously, and a refused one substituted there, so
    // no kind is silent for one value once an answer is paid.
    if (key === undefined || !kind.upFront || !r.refused(metric, memo, key)) {
      return this.wait(r, metric, trueValue, dims);
    }
    const instead = kind.instead(m, key).map((k) => known?.get(k)).find((a) => a !== undefined);
    if (instead !== undefined) r.put(metric, m.id, this.layered(r, metric, instead), stated);
  }

  /**
   * Epsilon per report, long-run epsilon of a constant value, and what a change of value
   * reveals, for `metric` on this device under the mechanism its reports follow now (Python's
   * privacy_loss; loss.ts).
   * @throws UnknownMetricError `metric` is not declared.
   */
  privacyLoss(r: Core, metric: string): PrivacyLoss {
    const m = lookup(r.catalogue, metric) as unknown as AnyMetric;
    return new PrivacyLoss(metric, m instanceof MetricSpec ? m.mechanism : m, !isFresh(r, metric, m),
                           this.irrs.get(metric));
  }

  /** The mechanism of boolean `metric`'s permanent answers under `wire`: wire itself, or
   * split(wire, its instantaneous layer); undefined (said once) if the layer cannot produce
   * reports that follow wire (a served version it cannot reach: withheld, as Python's guard). */
  private memoLayer(r: Core, metric: string, wire: Metric): Metric | undefined {
    const irr = this.irrs.get(metric);
    if (irr === undefined) return wire;
    const key = `${metric}\u0000${wire.id}`;
    let memo = this.memoLayers.get(key);
    if (memo === undefined) {
      try {
        memo = split(wire as Rr, irr);  // only a kind that takes a layer has one (layered)
      } catch (error) {
        memo = null;
        r.once(`irr:${key}`, `metric '${metric}' is withheld: ${(error as Error).message}`);
      }
      this.memoLayers.set(key, memo);
    }
    return memo ?? undefined;
  }

  /** What one report sends for the permanent answer `answer`: a fresh secure draw of the
   * metric's instantaneous layer over it (booleans), or the answer itself. */
  private layered(r: Core, metric: string, answer: Payload): Payload {
    return this.irrs.get(metric)?.perturb(answer as 0 | 1, r.rng) ?? answer;
  }

  /**
   * Queue a fresh report of `metric` (cost: `m`'s epsilon) once its budget, if any, is
   * charged in the store's transaction; refused there, it is dropped (counted, said once).
   * @throws BudgetExceededError (if `sync`: from report()) the budget as last read refuses
   *   it; counted, nothing queued.
   */
  private putFresh(r: Core, metric: string, m: {id: string; epsilon: number}, payload: Payload,
                   stated: Dims | undefined, sync: boolean): void {
    const budget = this.budgets.get(metric);
    if (budget === undefined) return r.put(metric, m.id, payload, stated);
    if (!chargeBudget(this.spending, metric, budget, m.epsilon, this.clock())) {
      this.budgetRefused++;
      if (!sync) return;
      const retryAt = periodStart(budget[1], this.clock()) + budget[1];
      throw new BudgetExceededError(
        `report for metric '${metric}' refused: it would take the metric past its budget of ` +
        `${budget[0].toPrecision(6)} nats per ${budget[1]} s. The next period starts at ` +
        `${new Date(retryAt * 1000).toISOString()}.`, metric, retryAt);
    }
    void this.spend(r, metric, budget, m.epsilon).then((ok) => {
      if (ok) r.put(metric, m.id, payload, stated);
      else this.budgetRefused++;
    });
  }

  /** Charge `cost` nats of `metric` against `budget` in the store (one transaction): whether
   * admitted. Refused (said once) or the store failing: false. */
  private async spend(r: Core, metric: string, budget: [number, number], cost: number): Promise<boolean> {
    let ok = false;
    const ms = this.clock();
    try {
      this.spending = await r.store.update<BudgetLedger>(BUDGETS_KEY, (old) => {
        const ledger = old ?? {};
        ok = chargeBudget(ledger, metric, budget, cost, ms, true);
        return ledger;
      });
    } catch (error) {
      r.once("budgets", `the privacy budgets could not be written; reports of ` +
                `budgeted metrics are dropped: ${String(error)}`);
      return false;
    }
    if (!ok) {
      r.once(`budget:${metric}`, `metric '${metric}' is past its budget of ` +
                `${budget[0].toPrecision(3)} nats per ${budget[1]} s: refused until the next period`);
    }
    return ok;
  }

  /** The cap's charge of a new memoized answer (reporter.ts), then its budget's, as Python's
   * ledger: an answer paid for is free; the cap refuses first; the budget refuses as the cap
   * does (a paid answer is sent instead; counted in budgetRefused only if there is none, as
   * Python's budget_refused). */
  async charge(r: Core, metric: string, m: {readonly id: string; readonly epsilon: number},
               key: number, wire = this.metricsMap(r).get(metric)): Promise<boolean> {
    const budget = this.budgets.get(metric);
    if (budget !== undefined) {
      const tag = await r.tag(metric, m, key);
      if (spend(r.ledger, metric, tag, m.epsilon, r.cap) === 1 &&
          !await this.spend(r, metric, budget, m.epsilon)) {
        if (wire === undefined || await this.paidInstead(r, metric, wire, m, key) === undefined) {
          this.budgetRefused++;
        }
        return false;
      }
    }
    return r.charge(metric, m, key);
  }

  /** The public dimensions each metric declares: name -> Dimensions (metrics that declare
   * none are absent). The app's declaration only: a served list changes nothing. */
  dimensions(r: Core): Record<string, Dimensions> {
    const found: Record<string, Dimensions> = {};
    for (const name of r.catalogue.keys()) {
      const route = this.route(name);
      if (route !== undefined) found[name] = route.dimensions;
    }
    return found;
  }

  /** What stats() adds: dimension problems and budget refusals. */
  stats(r: Core): Omit<Stats, keyof BooleanStats> {
    return {dimensionProblems: this.problems(r), budgetRefused: this.budgetRefused};
  }

  /** Metrics whose list refuses a device-wide dimension value: metric -> why. */
  private problems(r: Core): Record<string, string> {
    const dimensionProblems: Record<string, string> = {};
    for (const name of r.catalogue.keys()) {
      const error = this.route(name)?.error;
      if (error !== undefined) dimensionProblems[name] = error.message;
    }
    return dimensionProblems;
  }

  /** The declaration that applies to `metric`'s dimensions, and the device's values in it. */
  private route(metric: string): Route | undefined {
    if (this.routes.has(metric)) return this.routes.get(metric);
    const dimensions = this.declaredDims.get(metric) ?? NONE;
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

  private metricsMap(r: Core): Metrics {
    return r.catalogue as unknown as Metrics;
  }

  /** Hold a report in memory until it can be perturbed (never written anywhere). */
  private wait(r: Core, metric: string, value: unknown, dims?: DimensionValues): void {
    if (r.early.length >= r.opts.maxEarlyReports) {
      r.counts.early++;
      return;
    }
    r.early.push([metric, value as 0 | 1, dims === undefined || dims === null ? undefined
      : {...dims}]);
    r.schedule();
  }

  async drainOne(r: Core, metric: string, value: unknown, dims?: DimensionValues): Promise<void> {
    if (r.held(metric)) return;
    const m = this.metricsMap(r).get(metric);
    // Never: a declared metric not held is reported (counted all the same).
    if (m === undefined) return void r.counts.unknown++;
    let stated: Dims | undefined;
    try {
      stated = this.stated(metric, dims);
    } catch {
      this.dropEarly(r, metric, "refuses the public dimensions of a report made before the " +
                     "catalogue was known");
      return;
    }
    let encoded: Encoded;
    try {
      encoded = kindOf(m).encode(m, value);
    } catch {
      this.dropEarly(r, metric, "does not take the value reported before the catalogue was known");
      return;
    }
    if (r.skipped(metric)) return;
    if (isFresh(r, metric, m)) {
      this.putFresh(r, metric, m, perturb(m, encoded, r.rng), stated, false);
      return;
    }
    const memo = this.memoLayer(r, metric, m);
    if (memo === undefined) return void r.counts.withheld++;
    if (r.secret === undefined) return void r.counts.noCatalogue++;
    let alpha = kindOf(m).rounds ? this.alphas.get(metric) : 0n;
    if (alpha === undefined) this.alphas.set(metric, alpha = await alphaThreshold(r.secret, metric));
    const id = `${metric}\u0000${m.id}`;
    const key = memoKey(m, encoded, alpha);
    const answer = this.answers.get(id)?.get(key) ?? await derive(r.secret, metric, memo, key);
    if (!await this.charge(r, metric, memo, key, m)) {
      const instead = await this.paidInstead(r, metric, m, memo, key);
      if (instead !== undefined) {
        r.put(metric, m.id, this.layered(r, metric, this.answers.get(id)?.get(instead) ??
                                          await derive(r.secret, metric, memo, instead)), stated);
      }
      return;
    }
    let answers = this.answers.get(id);
    if (answers === undefined) this.answers.set(id, answers = new Map());
    answers.set(key, answer);  // paid for: reported synchronously from now on
    r.put(metric, m.id, this.layered(r, metric, answer), stated);
  }

  /**
   * The first memo key its kind offers instead of `key` (the kind's `instead`: the other value;
   * the nearest paid grid point or bucket, the lower on a tie; the lowest paid category) whose
   * answer is paid for (here, or in another process as the ledger was last read), or undefined
   * if none is: a value whose new answer the cap refuses is sent as that, free, so a drifting
   * value never goes silent (as Python's guard; issue 26). The rule reads the ledger, never the
   * value. `memo` is the mechanism answers are paid at (a boolean's memo layer).
   */
  private async paidInstead(r: Core, metric: string, m: AnyMetric, memo: Priced, key: number):
      Promise<number | undefined> {
    const known = this.answers.get(`${metric}\u0000${m.id}`);
    for (const point of kindOf(m).instead(m, key)) {
      if (known?.has(point)) return point;
      const tag = await r.tag(metric, memo, point);
      if (spend(r.ledger, metric, tag, memo.epsilon, r.cap) === 0) return point;
    }
    return undefined;
  }

  private dropEarly(r: Core, metric: string, why: string): void {
    r.counts.unknown++;
    r.once(`unknown:${metric}`, `metric '${metric}' ${why}; its early reports ` +
              "were dropped");
  }

  /** Every kind of a catalogue document (entries of kinds this client does not know left out).
   * @throws WireFormatError a malformed document: nothing of it is used. */
  parse(doc: unknown): Catalogue {
    return parseAllCatalogue(doc) as unknown as Catalogue;
  }

  forget(): void {
    this.spending = {};
    this.answers.clear();
    this.alphas.clear();
    this.memoLayers.clear();
  }

  /** Each rounding metric's α, and the paid answers of the memo keys a kind derives up front
   * (`upFront`: a boolean's two), derived at once, so report() is synchronous for them. */
  async prepareMemo(r: Core): Promise<void> {
    for (const why of Object.values(this.problems(r))) r.once(why, `${why}`);
    if (r.secret === undefined) return;
    for (const [metric, m] of this.metricsMap(r)) {
      if (isFresh(r, metric, m)) continue;
      const kind = kindOf(m);
      if (kind.rounds && !this.alphas.has(metric)) {
        this.alphas.set(metric, await alphaThreshold(r.secret, metric));
      }
      const memo = kind.upFront && this.memoLayer(r, metric, m);
      if (!memo) continue;
      const id = `${metric}\u0000${m.id}`;
      // One map per metric and mechanism, set before any await: two derivations at once
      // (init's and a catalogue fetch's) and drainOne fill the same one.
      let answers = this.answers.get(id);
      if (answers === undefined) this.answers.set(id, answers = new Map<number, Payload>());
      for (const key of kind.upFront!(m)) {
        if (answers.has(key)) continue;
        const tag = await r.tag(metric, memo, key);  // the ledger read after it, not before
        if (!spend(r.ledger, metric, tag, 0, Infinity)) {
          answers.set(key, await derive(r.secret, metric, memo, key));  // paid for
        }
      }
    }
  }
}

/** The Reporter of every metric kind (see the module doc and ../reporter.ts): the default
 * entry's Reporter given AllParts. */
/** A priced mechanism: what the ledger needs of it. */
type Priced = {readonly id: string; readonly epsilon: number};

// A boolean's metric is its randomized response (Rr), every other kind's a MetricSpec: the
// helpers below are the only places that tell them apart; the rest asks the kind.

/** The kind of `m` (kinds/*.ts). */
function kindOf(m: AnyMetric): KindModule<AnyMetric> {
  return (m instanceof MetricSpec ? m.kindOf : boolean) as KindModule<AnyMetric>;
}

/** The memo key of an encoded value: its kind's (MetricSpec.memoKey), a boolean's its bit. */
function memoKey(m: AnyMetric, encoded: Encoded, alpha: bigint): number {
  return m instanceof MetricSpec ? m.memoKey(encoded, alpha) : encoded as number;
}

/** A fresh perturbed report of an encoded value. */
function perturb(m: AnyMetric, encoded: Encoded, rng: RandomBits): Payload {
  return m instanceof MetricSpec ? m.perturb(encoded, rng) : m.perturb(encoded as 0 | 1, rng);
}

/** The device's permanent answer for memo key `key` under `memo` (memo.memo_answer). */
function derive(secret: CryptoKey, metric: string, memo: Metric, key: number): Promise<Payload> {
  return memo instanceof MetricSpec ? memo.memoAnswer(secret, metric, key)
    : memoBit(secret, metric, memo, key as 0 | 1);
}

/** Fresh coins for `metric`: declared or chosen fresh, or of a kind that always is (open). */
function isFresh(r: Core, metric: string, m: unknown): boolean {
  return r.fresh.has(metric) || (m instanceof MetricSpec && m.kindOf.fresh === true);
}

/**
 * A kind that always draws fresh coins (kinds/open.ts): a declared memoization other than
 * fresh, or an instantaneous layer, is refused, naming the field.
 */
function freshOnly(name: string, table: MetricTable): void {
  for (const f of ["memoization", "instantaneous"] as const) {
    const v = table[f] ?? null;
    if (v !== null && (f === "instantaneous" || v !== "fresh")) {
      throw new InvalidParameterError(`metric '${name}': ${f}: an open metric always draws fresh ` +
        "coins: a memoized cell is unique to ~75 % of devices holding the same string");
    }
  }
}

export class Reporter extends Core<unknown, DimensionValues> {
  private readonly all: AllParts;

  /**
   * @throws InvalidParameterError an option out of range, an invalid declared metric or
   *   declared dimensions, or `dimensions` that do not map dimension names to strings
   *   (DimensionError, naming the dimension).
   */
  constructor(collectorUrl: string, options: ReporterOptions = {}) {
    const parts = new AllParts(options);
    super(collectorUrl, {...options, metrics: parts.metrics} as BooleanOptions, parts);
    this.all = parts;
    parts.attach(this);
  }

  /**
   * Epsilon per report, long-run epsilon of a constant value, and what a change of value
   * reveals, for `metric` on this device under the mechanism its reports follow now (Python's
   * privacy_loss; loss.ts).
   * @throws UnknownMetricError `metric` is not declared.
   */
  privacyLoss(metric: string): PrivacyLoss {
    return this.all.privacyLoss(this, metric);
  }

  /** The public dimensions each metric declares: name -> Dimensions (metrics that declare
   * none are absent). The app's declaration only: a served list changes nothing. */
  get dimensions(): Record<string, Dimensions> {
    return this.all.dimensions(this);
  }

  /** What happened to the reports handed over: the default entry's figures, and the
   * dimension problems and budget refusals of these parts. */
  override stats(): Stats {
    return {...super.stats(), ...this.all.stats(this)};
  }
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
