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
 * this one composes the same Reporter (reporter.ts), given other parts at construction:
 * AllParts, below, which holds the kinds (kinds.ts, kinds/*.ts; booleans one of them, every
 * kind on the reporter's one path), the instantaneous layer, budgets and public dimensions.
 * Its Reporter class holds that Reporter, passes every call through and adds privacyLoss,
 * dimensions and the extra stats. Everything else (queue, sender, the rules) is the same.
 */
import {DIMENSION_NAME, DimensionError, Dimensions, NONE} from "./dimensions.js";
import {FIELDS} from "./declaration.js";
import {InvalidParameterError} from "./errors.js";
import {alwaysFresh, KIND_TABLE, kindNamed} from "./kinds/table.js";
import {boolean} from "./kinds/boolean.js";
import {kindName, type Reported, type Reporting} from "./kinds/kind.js";
import {
  alphaThreshold, type AnyMetric, type Declared, declareMetric, type KindDeclaration, KINDS,
  MetricSpec, parseAllCatalogue,
} from "./kinds.js";
import {declaredLayer, split} from "./layers.js";
import {Rr} from "./mechanism.js";
import {type Catalogue, lookup} from "./catalogue.js";
import {spend} from "./privacy.js";
import {type Budget, BUDGETS_KEY, BudgetExceededError, type BudgetLedger, chargeBudget, checkBudgets,
  periodStart} from "./budget.js";
import {PrivacyLoss} from "./loss.js";
import {identifying} from "./unique.js";
import {Parts, Reporter as CoreReporter, type ReporterOptions as BooleanOptions,
  type Stats as BooleanStats} from "./reporter.js";
import type {Dims, Payload} from "./wire.js";
import type {DeadLetter} from "./queue.js";

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
 * Every kind takes the reporter's one path (reporter.ts: report, ready, drainOne); these
 * parts give it the kind of each metric (kindOf) and the features' hooks.
 */
class AllParts extends Parts<DimensionValues> {
  private readonly device: Record<string, string>;
  /** The app's declared dimensions: metric -> Dimensions (metrics that declare none absent);
   * the only ones ever attached (a served list changes nothing). */
  private readonly declaredDims: Map<string, Dimensions>;
  private readonly routes = new Map<string, Route | undefined>();
  /** Boolean metric -> its declared instantaneous layer (layers.ts). */
  private readonly irrs: Map<string, Rr>;
  /** metric \0 wire id -> its memo layer, or null if the layer cannot produce wire's reports. */
  private readonly memoLayers = new Map<string, Reported | null>();
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
    super();
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
      // A kind that always draws fresh coins (open): reported as declared fresh.
      if (this.kindOf(m).fresh) r.fresh.add(name);
      if (r.fresh.has(name)) Object.assign(r.declared.policies.get(name)!, {memoization: "fresh"});
    }
    // Each refused device-wide dimension value, said once (it depends on the declaration only).
    for (const why of Object.values(this.problems(r))) r.once(why, why);
    for (const [name, layer] of irrs) {
      Object.assign(r.declared.policies.get(name)!, {memoization: "instantaneous", irr: layer.id});
      try {
        split(r.declared.metrics.get(name) as Rr, layer);
      } catch (error) {
        throw new InvalidParameterError(`metric '${name}': instantaneous: ${(error as Error).message}`);
      }
    }
  }

  /** A categorical mechanism's memoized answer may single the device out (unique.ts). */
  override identifying(m: Reported): string | undefined {
    return identifying(m);
  }

  /** The kind of `m` (kinds/*.ts): a boolean's Rr is boolean, a MetricSpec knows its own. */
  override kindOf(m: Reported): Reporting {
    return (m instanceof MetricSpec ? m.kindOf : boolean) as Reporting;
  }

  /** Every kind (kinds.ts, declareMetric). */
  override declare(name: string, value: unknown): Reported {
    const table = value?.constructor === Object ? value as Record<string, unknown> : {};
    for (const [field, kinds] of ONLY_FOR) {
      if (field in table && !kinds.includes(table.kind as string)) {
        throw new InvalidParameterError(`metric '${name}': ${field}: only ${kinds.join(" and ")} ` +
                                        "metrics declare it");
      }
    }
    return declareMetric(name, value as Declared);
  }

  /**
   * Epsilon per report, long-run epsilon of a constant value, and what a change of value
   * reveals, for `metric` on this device under the mechanism its reports follow now (Python's
   * privacy_loss; loss.ts).
   * @throws UnknownMetricError `metric` is not declared.
   */
  privacyLoss(r: Core, metric: string): PrivacyLoss {
    const m = lookup(r.catalogue, metric) as unknown as AnyMetric;
    return new PrivacyLoss(metric, m instanceof MetricSpec ? m.mechanism : m, !r.fresh.has(metric),
                           this.irrs.get(metric));
  }

  /** The mechanism of boolean `metric`'s permanent answers under `wire`: wire itself, or
   * split(wire, its instantaneous layer); undefined (said once) if the layer cannot produce
   * reports that follow wire (a served version it cannot reach: withheld, as Python's guard). */
  override memoLayer(r: Core, metric: string, wire: Reported): Reported | undefined {
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
  override layered(r: Core, metric: string, answer: Payload): Payload {
    return this.irrs.get(metric)?.perturb(answer as 0 | 1, r.rng) ?? answer;
  }

  /**
   * Queue a fresh report of `metric` (cost: `m`'s epsilon) once its budget, if any, is
   * charged in the store's transaction; refused there, it is dropped (counted, said once).
   * @throws BudgetExceededError (if `sync`: from report()) the budget as last read refuses
   *   it; counted, nothing queued.
   */
  override putFresh(r: Core, metric: string, m: {id: string; epsilon: number}, payload: Payload,
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
  override async charge(r: Core, metric: string, memo: Priced, key: number, m: Reported):
      Promise<boolean> {
    const budget = this.budgets.get(metric);
    if (budget !== undefined) {
      const tag = await r.tag(metric, memo, key);
      if (spend(r.ledger, metric, tag, memo.epsilon, r.cap) === 1 &&
          !await this.spend(r, metric, budget, memo.epsilon)) {
        if (await r.paidInstead(metric, m, memo, key) === undefined) this.budgetRefused++;
        return false;
      }
    }
    return r.charge(metric, memo, key);
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
  override stated(metric: string, dims: DimensionValues | undefined): Dims | undefined {
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

  /** Every kind of a catalogue document (entries of kinds this client does not know left out).
   * @throws WireFormatError a malformed document: nothing of it is used. */
  override parse(doc: unknown): Catalogue<Reported> {
    return parseAllCatalogue(doc);
  }

  override forget(): void {
    this.spending = {};
    this.memoLayers.clear();
  }
}

/** The reporter these parts are given to. */
type Core = CoreReporter<unknown, DimensionValues>;

/** A priced mechanism: what the ledger needs of it. */
type Priced = {readonly id: string; readonly epsilon: number};

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

/**
 * The Reporter of every metric kind (see the module doc): it composes the default entry's
 * Reporter (reporter.ts), given AllParts, and adds privacyLoss, dimensions and the extra stats.
 * Every other method is that Reporter's, with the same guarantees.
 */
export class Reporter {
  /** @internal The reporter this one composes. */
  readonly core: Core;
  readonly #parts: AllParts;

  /**
   * @param collectorUrl the collector's base URL.
   * @throws InvalidParameterError an option out of range, an invalid declared metric or
   *   declared dimensions, or `dimensions` that do not map dimension names to strings
   *   (DimensionError, naming the dimension). Never for network conditions.
   */
  constructor(collectorUrl: string, options: ReporterOptions = {}) {
    const parts = new AllParts(options);
    this.core = new CoreReporter(collectorUrl, {...options, metrics: parts.metrics} as BooleanOptions,
                                 parts);
    this.#parts = parts;
    parts.attach(this.core);
  }

  /** The collector's base URL. */
  get collectorUrl(): string {
    return this.core.collectorUrl;
  }

  /** The latest upload failure (undefined after a success), without any report content. */
  get lastError(): string | undefined {
    return this.core.lastError;
  }

  /** The metrics this reporter reports now: name -> mechanism id. */
  get metrics(): Record<string, string> {
    return this.core.metrics;
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
  report(metric: string, trueValue: unknown, dims?: DimensionValues): void {
    this.core.report(metric, trueValue, dims);
  }

  /** Wait until the local state has loaded and the first catalogue fetch has answered or
   * failed, at most `timeout` ms; whether a served catalogue is known (reporter.ts). */
  waitReady(timeout?: number): Promise<boolean> {
    return this.core.waitReady(timeout);
  }

  /** Commit, seal and upload everything now, waiting up to `timeout` ms; whether the queue
   * was empty by then (reporter.ts). */
  flush(timeout?: number): Promise<boolean> {
    return this.core.flush(timeout);
  }

  /** Flush with a deadline, stop uploading and release the page hooks; idempotent; whether
   * everything was sent (reporter.ts). */
  close(timeout?: number): Promise<boolean> {
    return this.core.close(timeout);
  }

  /** The app's consent switch: `false` stops collection and deletes the device's local state
   * (reporter.ts). */
  setEnabled(enabled: boolean): Promise<void> {
    return this.core.setEnabled(enabled);
  }

  /** Batches the collector refused for good, with its reasons. */
  deadLetters(): DeadLetter[] {
    return this.core.deadLetters();
  }

  /** Queue the dead letters again (same batch ids) once their cause is fixed. */
  retryDeadLetters(): Promise<number> {
    return this.core.retryDeadLetters();
  }

  /**
   * Epsilon per report, long-run epsilon of a constant value, and what a change of value
   * reveals, for `metric` on this device under the mechanism its reports follow now (Python's
   * privacy_loss; loss.ts).
   * @throws UnknownMetricError `metric` is not declared.
   */
  privacyLoss(metric: string): PrivacyLoss {
    return this.#parts.privacyLoss(this.core, metric);
  }

  /** The public dimensions each metric declares: name -> Dimensions (metrics that declare
   * none are absent). The app's declaration only: a served list changes nothing. */
  get dimensions(): Record<string, Dimensions> {
    return this.#parts.dimensions(this.core);
  }

  /** What happened to the reports handed over: the default entry's figures, and the
   * dimension problems and budget refusals of these parts. */
  stats(): Stats {
    return {...this.core.stats(), ...this.#parts.stats(this.core)};
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
