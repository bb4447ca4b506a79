/**
 * Reporter: the app-facing client. Perturb on the device, queue durably, upload in the
 * background, exactly once.
 *
 *     const reporter = new Reporter("https://telemetry.example.com", {token: "dn_ingest_...",
 *                                   metrics: {dark_mode: {mechanism: "rr:1/2:1/2"}}});
 *     reporter.report("dark_mode", true);   // perturbed here; true never leaves this call
 *
 * The rules it keeps (the same as the Python client's, docs/client.md):
 * - The app's declaration (`metrics`) is the privacy contract (declaration.ts): only declared
 *   metrics are reported, at once, under the declared mechanism; the catalogue, fetched in the
 *   background, may only swap in a mechanism asking the same question at no larger epsilon.
 * - Construction never waits on the network. `report()` never touches the network and never
 *   throws for network conditions. It throws at once for programming errors: an undeclared
 *   metric, or a value that is not a boolean. Reports made before the local state has loaded
 *   wait in memory (at most `maxEarlyReports`).
 * - A revoked or refused key (401/403) keeps the data queued; uploads back off.
 * - `flush(timeout)` and `close(timeout)` return by their deadline; a request in flight then is
 *   abandoned and its batch stays queued under the same id.
 * - When the page is hidden, everything queued is sealed and sent with `fetch(keepalive)`.
 * - No report goes out under a mechanism above `maxEpsilon` (the metric is withheld, counted),
 *   and a metric's new memoized answers stop at `maxMetricEpsilon` over every version, paid
 *   for in the store's ledger before their report is queued (privacy.ts, docs/privacy.md).
 */
import {type Catalogue, lookup, parseCatalogue} from "./catalogue.js";
import {type Declared, declare, resolve} from "./declaration.js";
import {InvalidParameterError, QueueError, UnknownMetricError, UploadError} from "./errors.js";
import type {Fraction} from "./fraction.js";
import {type RandomizedResponse, Rr} from "./mechanism.js";
import {owns, reporting} from "./kinds/boolean.js";
import {kindName, type Reported, type Reporting} from "./kinds/kind.js";
import {
  aboveCeiling, DEFAULT_MAX_EPSILON, DEFAULT_MAX_METRIC_EPSILON, type Ledger, spend,
} from "./privacy.js";
import {
  DEFAULT_BATCH_SIZE, DEFAULT_COMMIT_INTERVAL, DEFAULT_MAX_BATCH_AGE, DEFAULT_MAX_QUEUE_AGE,
  DEFAULT_MAX_QUEUED_REPORTS, type DeadLetter, DurableQueue, type SealedBatch,
} from "./queue.js";
import {type RandomBits, SYSTEM_BITS} from "./random.js";
import {MemorySecret, type SecretStore, StoreSecret} from "./secret.js";
import {
  backoffDelay, DEFAULT_RETRY, DEFAULT_TIMEOUT, parseRefused, type RetryOptions, secureUniform,
  Transport,
} from "./sender.js";
import {defaultStore, IdbStore, MemoryStore, type Store} from "./store.js";
import {LEDGER_KEY, ledgerTag, retagLedger} from "./tags.js";
import {PeriodGate} from "./period.js";
import {setConsent, withdrawn} from "./consent.js";
import {
  DEFAULT_MAX_REPORTS, type Dims, type Item, METRICS_PATH, type Payload, REPORTS_PATH,
} from "./wire.js";

export interface ReporterOptions {
  /**
   * The metrics this app reports, and the privacy contract: name -> the metrics file's table
   * as JSON (`{mechanism, memoization, period, ...}`; this entry reports boolean ones), or a
   * mechanism or its id. Reported at once, before any network. Undeclared metrics are never
   * reported.
   */
  metrics?: Record<string, RandomizedResponse | string | Record<string, unknown>>;
  /** An ingest key (sent as `Authorization: Bearer`). */
  token?: string;
  /** The durable store: IndexedDB in browsers by default; `fileStore()` in Node. */
  store?: Store;
  /** The device secret: IndexedDB beside the store by default; `fileSecret()` in Node. */
  secret?: SecretStore;
  /** Reports per batch, in [1, 1000]. Default 100. */
  batchSize?: number;
  /** Milliseconds the in-memory buffer waits before a store commit. Default 50. */
  commitInterval?: number;
  /** Milliseconds before a partial batch is sealed and sent. Default 15 000; 0 in a page. */
  maxBatchAge?: number;
  /** Reports queued at most (oldest batches dropped beyond). Default 100 000. */
  maxQueuedReports?: number;
  /** Milliseconds a report may wait in the queue. Default 7 days. */
  maxQueueAge?: number;
  /** Milliseconds one request may take. Default 10 000. */
  timeout?: number;
  /** Backoff and status policy (see sender.ts). */
  retry?: Partial<RetryOptions>;
  /** Upper bound (ms) of a random delay before uploading after idle. Default 0. */
  uploadJitter?: number;
  /** Milliseconds `flush()` and `close()` wait by default. Default 10 000. */
  closeTimeout?: number;
  /** Node: milliseconds the exit hook (beforeExit) waits for a Reporter left open to send
   * its reports, as Python's exit_timeout. Default 2000. */
  exitTimeout?: number;
  /** Milliseconds between catalogue refreshes. Default 1 hour. */
  refreshInterval?: number;
  /** Metrics reported with fresh coins each time instead of the memoized answer (as
   * declaring `memoization: "fresh"`). */
  fresh?: readonly string[];
  /** Seal and send with fetch(keepalive) when the page is hidden. Default true. */
  flushOnHide?: boolean;
  /** Reports held in memory until the local state has loaded. Default 1000. */
  maxEarlyReports?: number;
  /** The fetch to use; globalThis.fetch by default. */
  fetch?: typeof globalThis.fetch;
  /** Random bits for fresh reports; the secure system source unless a test injects one. */
  rng?: RandomBits;
  /** Where warnings go; console.warn by default. */
  log?: (message: string) => void;
  /**
   * The epsilon ceiling, in nats: no report is ever sent under a mechanism whose one-report
   * epsilon exceeds it (decided exactly). A served metric above it is withheld (counted in
   * `stats().withheld`); a declared one throws at construction. Default ln 9; Infinity
   * turns it off.
   */
  maxEpsilon?: number;
  /**
   * The cap, in nats, on what one metric name's memoized answers may cost over every version
   * (mechanism) ever reported, kept in the store across restarts; past it the metric's new
   * answers are not reported (one warning, `stats().capRefused`). Default ln 81; Infinity
   * turns it off.
   */
  maxMetricEpsilon?: number;
  /**
   * At most one report per metric per period (its declared `period`: hour, day (default) or
   * week, UTC): the first; later calls are no-ops counted in `stats().periodSkipped`. Kept
   * in the store, so restarts and tabs share it (period.ts). Default true.
   */
  onePerPeriod?: boolean;
  /** The clock the period gate reads, in Unix milliseconds; Date.now unless a test injects one. */
  clock?: () => number;
}

/** What happened to the reports handed over, for diagnostics. */
export interface Stats {
  /** Reports queued (memory, pending and sealed), not counting early ones still waiting. */
  queued: number;
  sent: number;
  /** Dropped by maxQueuedReports or maxQueueAge. */
  dropped: number;
  deadLettered: number;
  /** Reports of metrics the collector refused in batches it otherwise counted (lenient
   * handling), kept as dead letters of their own until retryDeadLetters() (Python's refused). */
  refused: number;
  /** Refused metrics kept: metric -> the collector's latest reason (Python's refused_metrics). */
  refusedMetrics: Record<string, string>;
  /** Dropped because the device secret could not be had (nothing true is kept). */
  droppedNoCatalogue: number;
  /** Dropped because more than maxEarlyReports arrived before the local state loaded. */
  droppedEarly: number;
  /** Early reports of a metric the catalogue turned out not to hold. */
  droppedUnknownMetric: number;
  /** Reports needing durable state (memoized, or period-gated) with no durable store. */
  droppedNoState: number;
  /** The last upload was refused with 401/403: the key is wrong or revoked; data kept. */
  keyRefused: boolean;
  /** Declared metrics whose registered mechanism differs: metric -> the two ids. */
  mechanismMismatch: Record<string, {declared: string; registered: string; using: string}>;
  /** A served catalogue is known (fetched or cached); declared metrics never need one. */
  catalogueKnown: boolean;
  /** Declared metrics whose latest served entry this client ignores in part: metric -> how
   * many of its mechanism (another question or a larger epsilon), memoization, period,
   * dimensions (Python's ignored_served); metrics served as declared are absent. */
  ignoredServed: Record<string, number>;
  /** report() calls of a withheld metric (above maxEpsilon); nothing of them was kept. */
  withheld: number;
  /** Withheld metrics: metric -> why. */
  withheldMetrics: Record<string, string>;
  /** report() calls refused because their metric reached maxMetricEpsilon. */
  capRefused: number;
  /** report() calls not sent because their metric's period was reported already. */
  periodSkipped: number;
}

/** A report held until its answer can be derived: its public dims as the call gave them. */
type Early = [metric: string, value: unknown, dims?: unknown];

const CATALOGUE_KEY = "catalogue";

/** A memoized answer's mechanism: what the ledger needs of it. */
type Priced = {readonly id: string; readonly epsilon: number};

/** `value` as a ceiling or cap: a number of nats > 0 (Infinity turns it off). */
export function nats(name: string, value: number): number {
  if (typeof value !== "number" || !(value > 0)) {
    throw new InvalidParameterError(`${name} must be nats > 0 or Infinity (off). ` +
                                    `Got ${String(value)} instead.`);
  }
  return value;
}

/** Why `m` is above the ceiling `max`, or undefined if it is not. */
export function above(m: Priced & {readonly likelihoodRatio: Fraction}, max: number):
    string | undefined {
  return aboveCeiling(m.likelihoodRatio, max) ? `${m.id}: epsilon ` +
    `${m.epsilon.toPrecision(3)}, above maxEpsilon ${max.toPrecision(3)}` : undefined;
}

export class Reporter<V = boolean, D = never> {
  /** @internal What this reporter reports and how (given at construction). */
  readonly parts: Parts<D>;
  readonly collectorUrl: string;
  /** The latest upload failure (undefined after a success), without any report content. */
  lastError: string | undefined;

  private cat: Catalogue<Reported> = new Map();
  /** Served metrics above the ceiling: metric -> why. */
  /** @internal */ over = new Map<string, string>();
  /** @internal */ readonly maxEpsilon: number;
  /** @internal */ readonly cap: number;
  /** The cap's ledger as last read or written (the store's copy decides). */
  /** @internal */ ledger: Ledger = {};
  /** metric \0 mechanism id \0 memo key -> its ledger tag (an HMAC under the secret). */
  private readonly tags = new Map<string, string>();
  /** The period gate (onePerPeriod), or undefined. */
  /** @internal */ readonly gate: PeriodGate | undefined;
  /** @internal */ readonly declared: Declared<Reported>;
  /** The latest served catalogue's ignored parts: metric -> field names. */
  private ignored = new Map<string, string[]>();
  private servedKnown = false;
  private fetched: Promise<void> | undefined;
  /** metric \0 mechanism id \0 memo key (a boolean's bit, a category index or grid point) ->
   * its paid answer (under the memo layer, for a boolean with an instantaneous layer). */
  private readonly answers = new Map<string, Payload>();
  /** @internal */ early: Early[] = [];
  private readonly queue: DurableQueue;
  /** @internal */ readonly store: Store;
  private readonly secretStore: SecretStore;
  /** @internal */ secret: CryptoKey | undefined;
  private readonly transport: Transport;
  private readonly retry: RetryOptions;
  /** @internal */ readonly fresh: Set<string>;
  /** @internal */ readonly rng: RandomBits;
  /** The app's log (options.log), each message prefixed with `deniable: `. */
  /** @internal */ readonly log: (message: string) => void;
  /** @internal */ readonly opts: Required<Pick<ReporterOptions, "commitInterval" | "closeTimeout" |
    "refreshInterval" | "maxEarlyReports" | "uploadJitter" | "exitTimeout">>;
  /** @internal */ readonly counts = {noCatalogue: 0, early: 0, unknown: 0, withheld: 0, capped: 0,
                               noState: 0};
  /** No durable store and the app did not ask for one in memory: reports needing state are
   * refused (stats().droppedNoState). */
  private readonly stateless: boolean = false;
  /** @internal */ mismatch: Stats["mechanismMismatch"] = {};
  private readonly logged = new Set<string>();
  /** @internal */ initDone = false;
  /** Consent withdrawn (setEnabled(false)): nothing is collected, kept or sent. */
  /** @internal */ disabled = false;
  /** @internal */ readonly initialised: Promise<void>;
  /** @internal */ closed = false;
  private stopping = false;
  private attempts = 0;
  private keyRefused = false;
  private commitTimer: ReturnType<typeof setTimeout> | undefined;
  private sealTimer: ReturnType<typeof setTimeout> | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  /** @internal */ draining: Promise<void> | undefined;
  private inFlight: AbortController | undefined;
  /** Aborted by close(): a catalogue request in flight then must not keep Node running. */
  private readonly halt = new AbortController();
  private wakeBell = new Bell();
  private hurryBell = new Bell();
  private progressBell = new Bell();
  private closedBell = new Bell();
  private readonly onHide: (event?: Event) => void;
  /** The page-hide send in progress (pagehide and visibilitychange may both fire). */
  private hiding: Promise<void> | undefined;
  private readonly loop: Promise<void>;

  /**
   * @param collectorUrl the collector's base URL.
   * @throws InvalidParameterError for an option out of range or an invalid declared metric.
   *   Never for network conditions: construction does no I/O on the caller's time.
   */
  constructor(collectorUrl: string, options: ReporterOptions = {},
              parts: Parts<D> = new Parts() as Parts<D>) {
    if (typeof collectorUrl !== "string" || !/^https?:\/\//.test(collectorUrl)) {
      throw new InvalidParameterError(
        `collectorUrl must be an http(s) URL. Got ${JSON.stringify(collectorUrl)} instead.`);
    }
    this.collectorUrl = collectorUrl;
    const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > DEFAULT_MAX_REPORTS) {
      throw new InvalidParameterError(
        `batchSize must be an integer in [1, ${DEFAULT_MAX_REPORTS}]. Got ${batchSize} instead.`);
    }
    const ms = (name: keyof ReporterOptions, fallback: number): number => {
      const value = (options[name] as number | undefined) ?? fallback;
      if (typeof value !== "number" || !(value >= 0)) {
        throw new InvalidParameterError(
          `${name} must be a number of milliseconds >= 0. Got ${String(value)} instead.`);
      }
      return value;
    };
    this.opts = {
      commitInterval: ms("commitInterval", DEFAULT_COMMIT_INTERVAL),
      closeTimeout: ms("closeTimeout", 10_000),
      refreshInterval: ms("refreshInterval", 3_600_000),
      maxEarlyReports: ms("maxEarlyReports", 1000),
      uploadJitter: ms("uploadJitter", 0),
      exitTimeout: ms("exitTimeout", 2000),
    };
    this.retry = {...DEFAULT_RETRY, ...options.retry};
    this.maxEpsilon = nats("maxEpsilon", options.maxEpsilon ?? DEFAULT_MAX_EPSILON);
    this.cap = nats("maxMetricEpsilon", options.maxMetricEpsilon ?? DEFAULT_MAX_METRIC_EPSILON);
    this.parts = parts;
    this.declared = declare(options.metrics, (name, value) => parts.declare(name, value));
    for (const [name, m] of this.declared.metrics) {
      const why = above(m, this.maxEpsilon);
      if (why) throw new InvalidParameterError(`metric '${name}': ${why}`);
    }
    this.fresh = new Set(options.fresh);
    for (const [name, p] of this.declared.policies) if (p.memoization === "fresh") this.fresh.add(name);
    this.catalogue = this.declared.metrics;  // after fresh: a fresh metric is never withheld as identifying
    this.rng = options.rng ?? SYSTEM_BITS;
    const log = options.log ?? ((message) => console.warn(message));
    this.log = (message) => log(`deniable: ${message}`);
    if (this.declared.policies.size === 0) {
      this.log("no metrics declared (the `metrics` option): nothing is reported");
    }
    this.store = options.store ?? defaultStore();
    this.secretStore = options.secret ??
      (this.store instanceof IdbStore ? new StoreSecret(this.store) : new MemorySecret());
    // State that would last this process only is never silent (issue 27): used with a warning
    // if the app asks for it by name (store: new MemoryStore()), else refused.
    if (this.secretStore instanceof MemorySecret || this.store instanceof MemoryStore) {
      this.stateless = !(options.store instanceof MemoryStore);
      this.log(this.stateless ? "no durable store (nodeStorage(dir) in Node): " +
        "memoized and period-gated reports are dropped" : "state in " +
        "memory: memoized answers, ledger and period gate last one process");
    }
    if (options.onePerPeriod ?? true) {
      this.gate = new PeriodGate(this.store, options.clock ?? Date.now);
      for (const [name, p] of this.declared.policies) this.gate.periods.set(name, p.period);  // declared
    }
    this.queue = new DurableQueue(this.store, {
      batchSize,
      // A page seals at every commit: a store transaction started when the page is left may
      // never complete (a followed link), and only sealed batches can go then.
      maxBatchAge: ms("maxBatchAge", globalThis.document ? 0 : DEFAULT_MAX_BATCH_AGE),
      maxQueuedReports: ms("maxQueuedReports", DEFAULT_MAX_QUEUED_REPORTS),
      maxQueueAge: ms("maxQueueAge", DEFAULT_MAX_QUEUE_AGE),
    });
    this.transport = new Transport(collectorUrl, {
      timeout: ms("timeout", DEFAULT_TIMEOUT), token: options.token, fetch: options.fetch});
    // pagehide whatever the visibility: Chromium keeps "visible" when a link is followed.
    this.onHide = (event?: Event) => {
      if (event?.type === "pagehide" || globalThis.document?.visibilityState !== "visible") {
        this.hiding ??= this.sendOnHide().finally(() => { this.hiding = undefined; });
      }
    };
    if (options.flushOnHide ?? true) {
      globalThis.document?.addEventListener("visibilitychange", this.onHide);
      globalThis.addEventListener?.("pagehide", this.onHide);
    }
    atExit(this, this.opts.exitTimeout);
    this.initialised = this.init();
    this.loop = this.initialised.then(() => this.run());
  }

  // -- reporting ------------------------------------------------------------------------


  /**
   * Perturb `trueValue` for `metric` and queue the perturbed report. Never touches the network.
   * The default entry's metrics take a boolean (or 0/1); deniable-client/all's take what their
   * kind takes, and public dimensions `dims` (all.ts).
   *
   * @throws InvalidParameterError `trueValue` is not what the metric takes, or `metric` not a
   *   string.
   * @throws UnknownMetricError the app does not declare `metric` (whatever the value), or
   *   declares it in a kind this entry does not report (categorical, histogram, numeric:
   *   deniable-client/all reports every kind).
   * @throws QueueError the reporter is closed.
   */
  report(metric: string, trueValue: V, dims?: D): void {
    this.check(metric);
    if (this.disabled) return;
    const ready = this.ready(metric, trueValue, dims);  // throws for a value it does not take
    if (ready === undefined) return;
    // Behind reports still waiting, it waits too: reports keep their call order.
    if (!this.waiting) {
      const [m, encoded, stated] = ready;
      if (this.fresh.has(metric)) {
        return this.parts.putFresh(this, metric, m, m.perturb(encoded, this.rng), stated, true);
      }
      // Its memoized answer (through its instantaneous layer), if derived and paid for; else a
      // new answer is derived and charged asynchronously (drainOne), and one the cap refuses
      // is substituted there, so no value is silent once an answer is paid (issue 26).
      const answer = this.answers.get(at(metric, m, m.keyOf(encoded, this.secret, metric)));
      if (answer !== undefined) return this.send(metric, m, answer, stated);
    }
    this.wait(metric, trueValue, dims);
  }

  /** Queue `metric`'s report of its permanent answer `answer` under `m` (through its
   * instantaneous layer, if any). */
  private send(metric: string, m: Reported, answer: Payload, stated: Dims | undefined): void {
    this.put(metric, m.id, this.parts.layered(this, metric, answer), stated);
  }

  /** Hold a report in memory until it can be perturbed (never written anywhere). */
  private wait(metric: string, value: unknown, dims: unknown): void {
    if (this.early.length >= this.opts.maxEarlyReports) return void this.counts.early++;
    this.early.push([metric, value, dims && {...dims}]);
    this.schedule();
  }

  /**
   * Whether reports are waiting for their answer (derived and charged asynchronously). While
   * any is, every later report waits behind it, paid for or not: reports are queued in call
   * order, so their order in a batch never says which answers were new (issue 26).
   */
  /** @internal */ get waiting(): boolean {
    return this.draining !== undefined || this.early.length > 0;
  }

  /** Drain the waiting reports, in order; again if one arrived as the last drain ended. */
  /** @internal */ schedule(): void {
    this.draining ??= this.drain().finally(() => {
      this.draining = undefined;
      if (this.early.length > 0) this.schedule();
    });
  }

  /**
   * The check every report() makes first: on the name alone, never on a value (a withheld
   * metric is declared all the same: its reports are counted, not thrown).
   * @throws QueueError closed; InvalidParameterError not a string; UnknownMetricError see report().
   */
  /** @internal */ check(metric: string): void {
    if (this.closed) throw new QueueError("the reporter is closed");
    if (typeof metric !== "string") {
      throw new InvalidParameterError(`metric must be a string. Got a ${typeof metric} instead.`);
    }
    const kind = this.declared.other.get(metric);  // a kind these parts do not report
    if (kind !== undefined) {
      throw new UnknownMetricError(`${JSON.stringify(metric)} is ${kind}: boolean metrics ` +
                                   'only; import {Reporter} from "deniable-client/all"');
    }
    lookup(this.declared.metrics, metric);
  }

  /**
   * What one report of `metric` needs, asked of its kind and the parts: its metric now, the
   * encoded value, public dims and the mechanism its memoized answer is paid at (the metric's,
   * or a boolean's memo layer under its instantaneous one); undefined if it is not sent
   * (withheld, its period reported, no state: counted).
   * @throws InvalidParameterError (DimensionError) refused public dims, checked first as in
   *   Python, so a refused one spends nothing; a value the metric does not take.
   */
  private ready(metric: string, value: unknown, dims: unknown):
      [Reported, unknown, Dims | undefined, Reported] | undefined {
    if (this.held(metric)) return;
    const m = this.catalogue.get(metric)!;  // a declared metric not held
    const stated = this.parts.stated?.(metric, dims as D);
    const encoded = this.parts.kindOf(m).encode(m, value);  // throws for a value not taken
    if (this.skipped(metric)) return;
    const memo = this.fresh.has(metric) ? m : this.parts.memoLayer(this, metric, m);
    if (memo === undefined) return void this.counts.withheld++;
    return [m, encoded, stated, memo];
  }


  /** The metrics this reporter reports now: name -> mechanism id. */
  get metrics(): Record<string, string> {
    return Object.fromEntries([...this.catalogue].map(([name, m]) => [name, m.id]));
  }

  /**
   * Wait until the local state has loaded and the first catalogue fetch has answered or
   * failed, at most `timeout` ms. Declared metrics are reported without it. Returns whether a
   * served catalogue is known (fetched or cached).
   */
  async waitReady(timeout = this.opts.closeTimeout): Promise<boolean> {
    await race(this.initialised.then(() => this.fetched), timeout);
    return this.servedKnown;
  }

  /** Queued, sent, dropped and dead-lettered report counts, and what went wrong. */
  stats(): Stats {
    const c = this.queue.snapshot.counters;
    return {
      queued: this.queue.queued, sent: c.sent, dropped: c.dropped + this.queue.droppedInMemory,
      deadLettered: c.deadLettered, refused: c.refused ?? 0,
      refusedMetrics: Object.fromEntries(this.queue.snapshot.dead.filter((d) => d.metric).map((d) => [d.metric, d.reason])),
      droppedNoCatalogue: this.counts.noCatalogue, droppedEarly: this.counts.early,
      droppedUnknownMetric: this.counts.unknown, droppedNoState: this.counts.noState,
      keyRefused: this.keyRefused,
      mechanismMismatch: {...this.mismatch}, catalogueKnown: this.servedKnown,
      ignoredServed: Object.fromEntries([...this.ignored].map(([m, parts]) => [m, parts.length])),
      withheld: this.counts.withheld, withheldMetrics: Object.fromEntries(this.over),
      capRefused: this.counts.capped, periodSkipped: this.gate?.skipped ?? 0,
    };
  }

  /**
   * The app's consent switch (Python's set_enabled). `false` stops collection at once
   * (report() does nothing), drops every queued report and deletes the device's local state
   * (secret, ledger, period gate, cached catalogue: consent.ts), leaving only a marker so that
   * later Reporters on the same store stay off; `true` resumes, as a new device (new secret).
   * Nothing can be deleted on the collector: it holds sums of perturbed reports only.
   * @throws InvalidParameterError `enabled` is not a boolean; the store's errors (QueueError).
   */
  async setEnabled(enabled: boolean): Promise<void> {
    if (typeof enabled !== "boolean") {
      throw new InvalidParameterError(`enabled must be a boolean. Got a ${typeof enabled} instead.`);
    }
    await this.initialised;
    this.disabled = !enabled;
    if (!enabled) {
      this.early = [];
      this.inFlight?.abort();
      await this.draining;
      await this.gate?.pending;
      this.forget();
      await this.queue.clear();
    }
    await setConsent(this.store, this.secretStore, enabled);
    if (enabled) {
      this.forget();  // nothing derived from the deleted secret survives
      this.secret = await this.secretStore.load();
    }
  }

  /** Batches the collector refused for good, with its reasons. */
  deadLetters(): DeadLetter[] {
    return [...this.queue.snapshot.dead];
  }

  /** Queue the dead letters again (same batch ids) once their cause is fixed. */
  async retryDeadLetters(): Promise<number> {
    const moved = await this.queue.retryDeadLetters();
    this.wakeBell.ring();
    return moved;
  }

  // -- flushing and shutdown ------------------------------------------------------------

  /**
   * Commit and seal everything, upload it now, and wait up to `timeout` ms.
   * @returns true if the queue was empty by then; false at the deadline (nothing is lost:
   *   the store keeps the rest and uploads go on).
   */
  async flush(timeout = this.opts.closeTimeout): Promise<boolean> {
    if (this.closed) throw new QueueError("the reporter is closed");
    return this.flushUntil(timeout);
  }

  private async flushUntil(timeout: number): Promise<boolean> {
    const deadline = Date.now() + timeout;
    await race(this.initialised, timeout);
    if (this.draining !== undefined) await race(this.draining, deadline - Date.now());
    await race(this.gate?.pending ?? Promise.resolve(), deadline - Date.now());
    try {
      await race(this.queue.commit(true), deadline - Date.now());
    } catch {
      return false;
    }
    this.hurryBell.ring();
    this.wakeBell.ring();
    for (;;) {
      if (this.queue.queued === 0 && this.early.length === 0 && this.initDone) return true;
      const left = deadline - Date.now();
      if (left <= 0) return false;
      // Seal pending rows too: another reporter on the store may have committed its reports
      // unsealed after our commit, and nothing else seals them before maxBatchAge.
      if (this.queue.unsealed > 0) void this.queue.commit(true).catch(() => undefined);
      this.hurryBell.ring();
      this.wakeBell.ring();
      await race(this.progressBell.wait(), Math.min(left, 100));
    }
  }

  /**
   * Flush with a deadline, stop uploading and release the page hooks. Idempotent. What is not
   * sent by then stays in the store and is sent by the next Reporter on it.
   * @returns true if everything was sent before closing.
   */
  async close(timeout = this.opts.closeTimeout): Promise<boolean> {
    if (this.closed) return true;
    this.closed = true;
    OPEN.delete(this);
    const drained = await this.flushUntil(timeout).catch(() => false);
    this.stopping = true;
    this.closedBell.ring();
    this.inFlight?.abort();
    this.halt.abort();
    for (const t of [this.commitTimer, this.sealTimer, this.refreshTimer]) clearTimeout(t);
    globalThis.document?.removeEventListener("visibilitychange", this.onHide);
    globalThis.removeEventListener?.("pagehide", this.onHide);
    this.wakeBell.ring();
    this.hurryBell.ring();
    await race(this.loop, 100);
    if (!drained) this.log("closed with reports still queued");
    return drained;
  }

  // -- internals ------------------------------------------------------------------------

  /** The catalogue report() routes by; setting it withholds every metric above the ceiling
   * (Python's resolve) and every memoized one whose answer would single the device out
   * (unique.ts, as Python's guard), saying so once per metric and mechanism. */
  /** @internal */ get catalogue(): Catalogue<Reported> {
    return this.cat;
  }
  /** @internal */ set catalogue(catalogue: Catalogue<Reported>) {
    this.over = new Map();
    let kept = catalogue;
    for (const [name, m] of catalogue) {
      // Above the ceiling, or memoized with an answer that would identify the device.
      const why = above(m, this.maxEpsilon) ?? (this.fresh.has(name) ? undefined : this.parts.identifying?.(m));
      if (why === undefined) continue;
      if (kept === catalogue) kept = new Map(catalogue);
      kept!.delete(name);
      this.over.set(name, why);
      this.once(`over:${name}:${m.id}`, `metric '${name}' is withheld: ${why}`);
    }
    this.cat = kept;
  }


  /** Whether `metric` is withheld (above the ceiling); counts the report if so. */
  /** @internal */ held(metric: string): boolean {
    return this.over.has(metric) && ++this.counts.withheld > 0;
  }

  /** Whether `metric`'s report is skipped now: its period is reported already, or it needs
   * state (a secret, ledger, period gate) that would last this process only. Counted. */
  /** @internal */ skipped(metric: string): boolean {
    if (this.stateless && (this.gate || !this.fresh.has(metric))) return ++this.counts.noState > 0;
    return this.gate?.closed(metric) ?? false;
  }

  /** The ledger tag of memoized answer `key` of `metric` under `m` (tags.ts); needs the
   * secret. */
  /** @internal */ async tag(metric: string, m: Priced, key: number): Promise<string> {
    let tag = this.tags.get(at(metric, m, key));
    if (tag === undefined) {
      this.tags.set(at(metric, m, key), tag = await ledgerTag(this.secret!, metric, m.id, key));
    }
    return tag;
  }

  /**
   * Pay for the memoized answer `key` of `metric` under `m` in the store's ledger (one
   * read-modify-write transaction, so reporters sharing the store never double-spend), before
   * its report is queued. False if the cap refuses it (counted, said once) or the ledger
   * cannot be written (the report is dropped: no report goes out whose charge could be lost).
   */
  /** @internal */ async charge(metric: string, m: Priced, key: number): Promise<boolean> {
    const tag = await this.tag(metric, m, key);
    let s: number = spend(this.ledger, metric, tag, m.epsilon, this.cap);
    if (s === 1) {
      try {
        this.ledger = await this.store.update<Ledger>(LEDGER_KEY, (old) => {
          const ledger = old ?? {};
          s = spend(ledger, metric, tag, m.epsilon, this.cap, true);
          return ledger;
        });
      } catch (error) {
        this.once("ledger", `ledger not written, new answers dropped: ${String(error)}`);
        return false;
      }
    }
    if (s === 2) this.capped(metric);
    return s < 2;
  }

  private capped(metric: string): true {
    this.counts.capped++;
    this.once(`cap:${metric}`, `metric '${metric}' is past its cap ` +
              `(maxMetricEpsilon ${this.cap.toPrecision(3)}): paid answers only`);
    return true;
  }

  /** Queue `item`, once the period gate has admitted it (period.ts). */
  /** @internal */ put(...item: Item): void {
    if (this.disabled) return;
    const claim = this.gate?.admit(item[0]);
    if (claim === undefined) this.enqueue(item);
    else if (claim) void claim.then((ok) => ok && this.enqueue(item));
  }

  private enqueue(item: Item): void {
    this.queue.put(item);
    if (this.commitTimer === undefined) {
      this.commitTimer = timer(() => {
        this.commitTimer = undefined;
        void this.commit(false);
      }, this.opts.commitInterval);
    }
  }

  /** @internal */ async commit(sealAll: boolean): Promise<void> {
    if (this.disabled) return;
    try {
      const sealed = await this.queue.commit(sealAll);
      if (sealed > 0) this.wakeBell.ring();
    } catch (error) {
      this.once("commit", `store failed, reports kept in memory: ${String(error)}`);
    }
    const due = this.queue.dueIn();
    clearTimeout(this.sealTimer);
    if (due !== undefined && !this.stopping) {
      this.sealTimer = timer(() => void this.commit(false), due + 1);
    }
  }

  /** Forget everything derived from the device secret and the ledger (consent withdrawn). */
  /** @internal */ forget(): void {
    this.secret = undefined;
    this.answers.clear();
    this.tags.clear();
    this.ledger = {};
    this.gate?.clear();
    this.parts.forget?.();
  }

  private async init(): Promise<void> {
    this.disabled = await withdrawn(this.store).catch(() => false);
    try {
      if (!this.disabled) this.secret = await this.secretStore.load();
    } catch (error) {
      this.once("secret", `no device secret: ${String(error)}`);
    }
    try {
      await this.queue.load();
    } catch (error) {
      this.once("load", `queue not read: ${String(error)}`);
    }
    await this.gate?.load().catch(() => undefined);
    try {
      this.ledger = await retagLedger(this.store, this.secret);
    } catch {
      // unread: every new answer is charged in the store, which decides
    }
    try {
      const cached = await this.store.get<unknown>(CATALOGUE_KEY);
      if (cached !== undefined) this.serve(cached);
    } catch {
      // a bad cache is no catalogue: the declared metrics are used
    }
    this.fetched = this.refresh();
    this.initDone = true;
    void this.commit(false);
  }

  /** Fetch the catalogue in the background; keep the last one on any failure. */
  private async refresh(): Promise<void> {
    clearTimeout(this.refreshTimer);
    try {
      const doc = await this.transport.request("GET", METRICS_PATH, undefined, this.halt.signal);
      this.serve(doc);
      if (!this.disabled) await this.store.set(CATALOGUE_KEY, doc).catch(() => undefined);
    } catch (error) {
      if (this.halt.signal.aborted) return;  // close() abandoned it: nothing went wrong
      if (error instanceof UploadError && error.authRefused) this.keyRefused = true;
      this.once("catalogue", `catalogue not fetched: ${String(error)}`);
    }
    if (!this.stopping) {
      this.refreshTimer = timer(() => void this.refresh(), this.opts.refreshInterval);
    }
  }


  /** Apply a served catalogue to the declared metrics (declaration.ts, resolve): only a
   * mechanism asking the same question at no larger epsilon is taken; the rest is ignored,
   * counted in stats().ignoredServed and said once per metric, without any value. */
  private serve(doc: unknown): void {
    const found = resolve(this.declared, this.parts.parse(doc), doc);
    this.catalogue = found.using;
    this.ignored = found.ignored;
    this.mismatch = found.mismatch;
    this.servedKnown = true;
    for (const [name, parts] of found.ignored) {
      this.once(`ignored:${name}`, `metric '${name}': served otherwise in ` +
                `${parts.join(", ")}; ignored (the declaration applies)`);
    }
  }


  /** Reports that arrived before their memoized answer was known. */
  /** @internal */ async drain(): Promise<void> {
    await this.initialised;
    for (let early; (early = this.early.shift());) {
      // A report its metric no longer takes (never for a declared one: a served version asks
      // the same question) is dropped, counted and said once; the drain goes on.
      await this.drainOne(...early).catch((error) => {
        this.counts.unknown++;
        this.once(`early:${early![0]}`, `early report dropped: ${String(error)}`);
      });
    }
  }

  /** One early report, once the local state has loaded: perturbed (and its answer derived and
   * paid for), or, refused by the cap or a budget, a paid answer instead or nothing. */
  private async drainOne(metric: string, value: unknown, dims?: unknown): Promise<void> {
    const ready = this.ready(metric, value, dims);
    if (ready === undefined) return;
    const [m, encoded, stated, memo] = ready;
    if (this.fresh.has(metric)) {
      return this.parts.putFresh(this, metric, m, m.perturb(encoded, this.rng), stated, false);
    }
    const secret = this.secret;
    if (secret === undefined) return void this.counts.noCatalogue++;
    await m.prepare?.(secret, metric);
    const key = m.keyOf(encoded, secret, metric)!;
    // Its answer, paid for now (or before); else, refused by the cap or a budget, the first
    // paid answer its kind offers instead, or nothing.
    const paid = await this.parts.charge(this, metric, memo, key, m) ? key
      : await this.paidInstead(metric, m, memo, key);
    if (paid === undefined) return;
    const answer = this.answers.get(at(metric, m, paid)) ??
      await memo.memoAnswer(secret, metric, paid);
    this.answers.set(at(metric, m, paid), answer);  // paid for: reported synchronously from now on
    this.send(metric, m, answer, stated);
  }

  /**
   * The first memo key its kind offers instead of `key` (the kind's `instead`: the other value;
   * the nearest paid grid point or bucket, the lower on a tie; the lowest paid category) whose
   * answer is paid for (here, or in another process as the ledger was last read), or undefined
   * if none is: a value whose new answer the cap refuses is sent as that, free, so a drifting
   * value never goes silent (as Python's guard; issue 26). The rule reads the ledger, never the
   * value. `memo` is the mechanism answers are paid at (a boolean's memo layer).
   */
  /** @internal */ async paidInstead(metric: string, m: Reported, memo: Priced, key: number):
      Promise<number | undefined> {
    for (const point of this.parts.kindOf(m).instead(m, key)) {
      if (this.answers.has(at(metric, m, point))) return point;
      const tag = await this.tag(metric, memo, point);
      if (spend(this.ledger, metric, tag, memo.epsilon, this.cap) === 0) return point;
    }
    return undefined;
  }



  /** The upload loop: oldest sealed batch first, one at a time. */
  private async run(): Promise<void> {
    let idle = true;
    while (!this.stopping) {
      let batch: SealedBatch | undefined;
      try {
        batch = await this.queue.nextBatch();
      } catch {
        await this.sleep(1000, true);
        continue;
      }
      if (this.stopping) return;
      if (batch === undefined) {
        idle = true;
        this.progressBell.ring();
        await this.wakeBell.wait();
        continue;
      }
      if (idle && this.opts.uploadJitter > 0) {
        idle = false;
        if (!await this.sleep(secureUniform() * this.opts.uploadJitter, true)) continue;
      }
      idle = false;
      await this.upload(batch);
    }
  }

  private async upload(batch: SealedBatch): Promise<void> {
    const controller = new AbortController();
    this.inFlight = controller;
    let refused: Record<string, string>;
    try {
      refused = parseRefused(await this.transport.request("POST", REPORTS_PATH, batch.body,
                                                          controller.signal));
    } catch (error) {
      const e = error instanceof UploadError ? error : new UploadError(String(error));
      this.lastError = e.message;
      if (e.status !== undefined && this.retry.deadLetterStatusCodes.includes(e.status)) {
        if (!this.refusedLog(e.refused)) this.log(`batch refused (${e.status}); dead-lettered`);
        await this.queue.ack(batch.id, e.refused, e.status, e.message).catch(() => undefined);
        this.attempts = 0;
        this.progressBell.ring();
        return;
      }
      const config = e.status !== undefined && this.retry.configStatusCodes.includes(e.status);
      // Only an answer says anything about the key: a timeout or an abandoned request (close)
      // leaves an earlier refusal standing.
      if (e.status !== undefined) this.keyRefused = e.authRefused;
      this.attempts++;
      const delay = backoffDelay(this.attempts, this.retry,
                                 config ? this.retry.maxAuthBackoff : this.retry.maxBackoff,
                                 e.retryAfter);
      // A Retry-After is a floor a flush does not cut short; the jitter above it is.
      const floor = e.retryAfter === undefined ? 0 : Math.min(e.retryAfter, this.retry.maxRetryAfter);
      if (floor > 0) await this.sleep(floor, false);
      await this.sleep(delay - floor, true);
      return;
    } finally {
      if (this.inFlight === controller) this.inFlight = undefined;
    }
    this.attempts = 0;
    this.lastError = undefined;
    this.keyRefused = false;
    this.refusedLog(refused);
    await this.queue.ack(batch.id, refused).catch(() => undefined);
    this.progressBell.ring();
  }

  /** Log each refused metric once per reason; whether there was one. */
  private refusedLog(refused: Record<string, string>): boolean {
    for (const m in refused) this.once(m + refused[m], `metric ${m} refused, kept: ${refused[m]}`);
    return Object.keys(refused).length > 0;
  }

  /** Sleep `ms`; close always ends it, a flush only if `interruptible`. True if it ran out. */
  private async sleep(ms: number, interruptible: boolean): Promise<boolean> {
    if (this.stopping) return false;
    if (ms <= 0) return true;
    const stop = this.closedBell.wait();
    const hurry = interruptible ? this.hurryBell.wait() : new Promise<void>(() => undefined);
    return Promise.race([delay(ms).then(() => true), stop.then(() => false),
                         hurry.then(() => false)]);
  }

  /**
   * The page is being hidden. Batches already sealed (their ids stored) go at once with
   * fetch(keepalive); the rest is sealed in one store transaction and sent once that has
   * committed, never before: a batch sent before its id is stored could be sent again under
   * another id on the next load. If the page dies first, the next load sends it.
   */
  private async sendOnHide(): Promise<void> {
    const sent = new Set<string>();
    let budget = 60_000;  // keepalive bodies in flight may total 64 KiB per page
    const send = (batches: readonly SealedBatch[]): void => {
      for (const batch of batches) {
        if (sent.has(batch.id)) continue;
        if (batch.body.length > budget) return;
        budget -= batch.body.length;
        sent.add(batch.id);
        void this.transport.request("POST", REPORTS_PATH, batch.body, undefined, true)
          .then((answer) => this.queue.ack(batch.id, parseRefused(answer)))
          .then(() => this.progressBell.ring(), () => undefined);
      }
    };
    send(this.queue.snapshot.batches);
    try {
      await this.queue.commit(true);
    } catch {
      return;
    }
    send(this.queue.snapshot.batches);
  }

  /** @internal */ once(key: string, message: string): void {
    if (this.logged.has(key)) return;
    this.logged.add(key);
    this.log(message);
  }
}

/** A reporter as its parts see it (any entry's). */
type Core = Reporter<any, any>;

/**
 * What an entry's Reporter reports and how, given to it at construction: the kinds, and
 * features around the one reporting path (report, ready, drainOne, above) such as the
 * instantaneous layer, budgets and public dimensions. This base is the default entry's: boolean
 * metrics (kinds/boolean.ts) and none of the features; deniable-client/all's AllParts (all.ts)
 * extends it with every kind and the features. A hook may use what the reporter marks internal
 * (public to the parts, left out of the published types). D: the public dims report() takes.
 */
export class Parts<D = never> {
  /** The declared metric `value` (a table, an id or a mechanism), or its kind if these parts
   * do not report it. Called by the constructor, before any field of the reporter is set.
   * @throws InvalidParameterError an invalid declaration. */
  declare(name: string, value: unknown): Reported | string {
    if (value instanceof Rr) return value;
    const table = value?.constructor === Object ? value as {kind?: unknown; mechanism?: unknown}
      : undefined;
    // Another kind's (deniable-client/all reports it); its mechanism is checked below.
    if (!owns({kind: table?.kind})) return kindName(table);
    try {
      return Rr.fromId((table ? table.mechanism : value) as string);
    } catch (error) {
      throw new InvalidParameterError(`metric '${name}': mechanism: ${(error as Error).message}`);
    }
  }

  /** A catalogue document's entries these parts can parse (others left out).
   * @throws WireFormatError a malformed document: nothing of it is used. */
  parse(doc: unknown): Catalogue<Reported> {
    return parseCatalogue(doc);
  }

  /** The kind of `m` (kinds/*.ts), as reporting needs it. */
  kindOf(_m: Reported): Reporting {
    return reporting as Reporting;
  }

  /** Why a memoized answer under `m` would single the device out (unique.ts), or undefined;
   * absent, none does (one bit identifies no one). */
  identifying?(m: Reported): string | undefined;

  /** The public dims one report of `metric` carries, undefined for none (all.ts); absent,
   * none. @throws DimensionError a refused dimension; nothing is reported. */
  stated?(metric: string, dims?: D): Dims | undefined;

  /** The mechanism `metric`'s memoized answers are paid at under `m`: `m`, or a boolean's memo
   * layer under its instantaneous one (all.ts); undefined if the metric is withheld. */
  memoLayer(_r: Core, _metric: string, m: Reported): Reported | undefined {
    return m;
  }

  /** What one report of `metric` sends for its permanent answer (the answer, or a fresh draw
   * of its instantaneous layer over it: all.ts). */
  layered(_r: Core, _metric: string, answer: Payload): Payload {
    return answer;
  }

  /** Queue a fresh report (all.ts: once its budget, if any, admits it; `sync`: from report()). */
  putFresh(r: Core, metric: string, m: Priced, payload: Payload, stated: Dims | undefined,
           _sync: boolean): void {
    r.put(metric, m.id, payload, stated);
  }

  /** Pay for memoized answer `key` of `metric` under `memo` (`m`: the metric's mechanism)
   * before its report is queued: the cap's charge (all.ts: and its budget's). */
  charge(r: Core, metric: string, memo: Priced, key: number, _m: Reported): Promise<boolean> {
    return r.charge(metric, memo, key);
  }

  /** Forget what these parts derived from the device secret and the ledger (consent
   * withdrawn; the reporter forgets its own). */
  forget?(): void;
}

/** The key of memo key `key` of `metric` under `m` in the reporter's maps (undefined, a key
 * not known yet: in none). */
function at(metric: string, m: {readonly id: string}, key: number | undefined): string {
  return `${metric}\u0000${m.id}\u0000${key}`;
}

/** Reporters not closed yet: Node's exit hook closes them with their exitTimeout. */
const OPEN = new Map<Core, number>();
let hooked = false;

/** In Node, close `r` when the event loop empties (beforeExit: not process.exit() or a
 * signal), waiting at most its exitTimeout, as Python's atexit hook. */
function atExit(r: Core, timeout: number): void {
  const node = (globalThis as {process?: {on?: (e: string, f: () => void) => void}}).process;
  if (globalThis.document || !node?.on) return;
  OPEN.set(r, timeout);
  if (hooked) return;
  hooked = true;
  node.on("beforeExit", () => {
    for (const [open, timeout] of OPEN) void open.close(timeout);
  });
}

/** A reusable wake-up: wait() resolves at the next ring(). */
class Bell {
  private readonly waiters: (() => void)[] = [];
  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }
  ring(): void {
    for (const w of this.waiters.splice(0)) w();  // those added meanwhile wait for the next
  }
}

function timer(fn: () => void, ms: number): ReturnType<typeof setTimeout> {
  const t = setTimeout(fn, ms);
  (t as {unref?: () => void}).unref?.();  // Node: never keep the process alive for telemetry
  return t;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => timer(resolve, ms));
}

/**
 * Wait for `promise`, at most `ms`; never rejects. Its timer is referenced: an app awaiting
 * flush() or close() keeps Node running until they return (background timers do not).
 */
async function race(promise: Promise<unknown>, ms: number): Promise<void> {
  if (ms <= 0) return;
  let t: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([promise.catch(() => undefined),
                      new Promise((resolve) => { t = setTimeout(resolve, ms); })]);
  clearTimeout(t);
}
