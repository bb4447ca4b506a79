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
 * The default entry point (`deniable-client`) reports boolean metrics only and stays small;
 * this one adds the kinds module (src/kinds.ts). Everything else (queue, sender, memo of
 * booleans, the rules) is the same Reporter's.
 */
import {InvalidParameterError, QueueError, UnknownMetricError} from "./errors.js";
import {cmp} from "./fraction.js";
import {
  alphaThreshold, type AnyMetric, type Declared, declareMetric, MetricSpec, parseAllCatalogue,
} from "./kinds.js";
import {RandomizedResponse} from "./mechanism.js";
import {memoBit} from "./memo.js";
import {type Catalogue, lookup} from "./catalogue.js";
import {Reporter as BooleanReporter, type ReporterOptions as BooleanOptions,
} from "./reporter.js";
import type {Payload} from "./wire.js";

export * from "./index.js";
export * from "./kinds.js";

export interface ReporterOptions extends Omit<BooleanOptions, "metrics"> {
  /**
   * name -> mechanism, spec, id (`rr:`, or `bm:` with its bounds) or declaration
   * (`{kind, mechanism, categories | edges | lower, upper, clamp}`): usable at once, before
   * any network; a privacy floor.
   */
  metrics?: Record<string, Declared>;
}

type Metrics = Map<string, AnyMetric>;

/** The Reporter of every metric kind (see the module doc and ../reporter.ts). */
export class Reporter extends BooleanReporter {
  /** metric \0 mechanism id -> memo key (category index or grid point) -> answer. */
  private readonly answers = new Map<string, Map<number, Payload>>();
  /** metric -> the device's α-point rounding threshold (numeric metrics). */
  private readonly alphas = new Map<string, bigint>();

  /** @throws InvalidParameterError an option out of range or an invalid declared metric. */
  constructor(collectorUrl: string, options: ReporterOptions = {}) {
    let booleans: Record<string, RandomizedResponse> | undefined;
    const others = new Map<string, MetricSpec>();
    if (options.metrics !== undefined) {
      booleans = {};
      for (const [name, declared] of Object.entries(options.metrics)) {
        const metric = declareMetric(name, declared);
        if (metric instanceof RandomizedResponse) booleans[name] = metric;
        else others.set(name, metric);
      }
    }
    super(collectorUrl, {...options, metrics: booleans});
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
   * @throws InvalidParameterError a value the metric does not take (the message never shows
   *   it); nothing is queued or sent.
   * @throws UnknownMetricError a catalogue is known and does not hold `metric`.
   * @throws QueueError the reporter is closed.
   */
  override report(metric: string, trueValue: unknown): void {
    if (this.closed) throw new QueueError("the reporter is closed");
    const kind = this.otherKinds.get(metric);
    if (kind !== undefined) {
      throw new UnknownMetricError(`${JSON.stringify(metric)} is of kind ${JSON.stringify(kind)}, ` +
                                   "which this client does not know: upgrade it to report it");
    }
    const spec = this.catalogue === null ? undefined : this.metricsMap.get(metric);
    if (!(spec instanceof MetricSpec)) {
      const booleanLike = typeof trueValue === "boolean" || trueValue === 0 || trueValue === 1;
      const someKind = ["string", "number", "bigint"].includes(typeof trueValue);
      if (this.catalogue !== null && spec === undefined && someKind && typeof metric === "string") {
        lookup(this.catalogue, metric);  // UnknownMetricError, as Python (whatever the value)
      }
      if (this.catalogue !== null || booleanLike) {
        super.report(metric, trueValue as boolean);  // a boolean metric
        return;
      }
      if (typeof metric !== "string") {
        throw new InvalidParameterError(`metric must be a string. Got a ${typeof metric} instead.`);
      }
      if (!someKind) {
        throw new InvalidParameterError("trueValue must be a boolean, a category label " +
                                        `(string) or a number. Got a ${typeof trueValue} instead.`);
      }
      this.wait(metric, trueValue);  // no catalogue yet: its kind is not known
      return;
    }
    const encoded = spec.encode(trueValue);  // throws for a value the metric does not take
    if (this.fresh.has(metric)) {
      this.put(metric, spec.id, spec.perturb(encoded, this.rng));
      return;
    }
    const alpha = spec.kind === "numeric" ? this.alphas.get(metric) : 0n;
    const answer = alpha === undefined ? undefined
      : this.answers.get(`${metric}\u0000${spec.id}`)?.get(spec.memoKey(encoded, alpha));
    if (answer !== undefined) this.put(metric, spec.id, answer);
    else this.wait(metric, trueValue);  // its memoized answer is derived asynchronously
  }

  private get metricsMap(): Metrics {
    return this.catalogue as unknown as Metrics;
  }

  /** Hold a report in memory until it can be perturbed (never written anywhere). */
  private wait(metric: string, value: unknown): void {
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
    this.early.push([metric, value as 0 | 1]);
    this.draining ??= this.drain().finally(() => { this.draining = undefined; });
  }

  protected override async drainOne(metric: string, value: unknown): Promise<void> {
    const spec = this.catalogue === null ? undefined : this.metricsMap.get(metric);
    if (!(spec instanceof MetricSpec)) {
      if (typeof value === "boolean" || value === 0 || value === 1) {
        return super.drainOne(metric, value ? 1 : 0);
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
    if (this.fresh.has(metric)) {
      this.put(metric, spec.id, spec.perturb(encoded, this.rng));
      return;
    }
    if (this.secret === undefined) {
      this.counts.noCatalogue++;
      return;
    }
    let alpha = spec.kind === "numeric" ? this.alphas.get(metric) : 0n;
    if (alpha === undefined) this.alphas.set(metric, alpha = await alphaThreshold(this.secret, metric));
    const id = `${metric}\u0000${spec.id}`;
    let answers = this.answers.get(id);
    if (answers === undefined) this.answers.set(id, answers = new Map());
    const key = spec.memoKey(encoded, alpha);
    let answer = answers.get(key);
    if (answer === undefined) {
      answer = await spec.memoAnswer(this.secret, metric, key);
      answers.set(key, answer);
    }
    this.put(metric, spec.id, answer);
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
    const catalogue = parseAllCatalogue(doc, (name, kind) => other.set(name, kind));
    this.otherKinds = other;
    const listed = [...other].map(([name, kind]) => `${name} (${kind})`).sort().join(", ");
    if (listed) this.once(`kinds:${listed}`, `deniable: left out metrics of unknown kinds: ${listed}`);
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

  /** The memoized answers of boolean metrics, and each numeric metric's α, derived at once. */
  protected override async prepareMemo(): Promise<void> {
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
      if (this.memo.get(key)?.every((b) => b !== undefined)) continue;
      this.memo.set(key, [await memoBit(this.secret, metric, m, 0),
                          await memoBit(this.secret, metric, m, 1)]);
    }
  }
}

function question(metric: AnyMetric): string {
  return metric instanceof MetricSpec ? metric.question : "boolean";
}
