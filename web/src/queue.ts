/**
 * The on-device queue: perturbed bits in a durable store, sealed into batches with fixed ids.
 *
 * Only (metric, mechanism id, perturbed value[, public dims]) reports are ever stored; true
 * values never reach this module. Reports collect in memory and are committed to the store `commitInterval` ms
 * after the first one (the crash-loss window, like the Python client's group commit). A batch
 * is sealed (given its random id and its exact body) in the same store transaction that takes
 * its reports out of `pending`; its bytes never change afterwards, so every retry, in this
 * page or after a reload, re-sends the same id and the collector counts it once.
 */
import {QueueError} from "./errors.js";
import type {Store} from "./store.js";
import {type Dims, encodeBatch, type Item, newBatchId, type Payload} from "./wire.js";

export const DEFAULT_BATCH_SIZE = 100;
/** Milliseconds the in-memory buffer gathers reports before one store commit. */
export const DEFAULT_COMMIT_INTERVAL = 50;
/** Milliseconds the oldest pending report waits before a partial batch is sealed. */
export const DEFAULT_MAX_BATCH_AGE = 15_000;
/** Reports kept queued at most; the oldest batches are dropped beyond it. */
export const DEFAULT_MAX_QUEUED_REPORTS = 100_000;
/** Milliseconds a report may wait before it is dropped: the collector's batch-id memory. */
export const DEFAULT_MAX_QUEUE_AGE = 7 * 24 * 3600 * 1000;
const KEY = "queue";

/** A sealed batch: its id, the exact body to POST, its report count. */
export interface SealedBatch {
  id: string;
  body: string;
  n: number;
  sealedAt: number;
  oldestAt: number;
}

/**
 * A batch the collector refused for good (a 4xx other than 401/403/408/429), or the reports
 * of one `metric` it refused in a batch it otherwise counted (a new batch id).
 */
export interface DeadLetter {
  id: string;
  body: string;
  n: number;
  status: number | null;
  reason: string;
  metric?: string;
}

/** The stored document. */
export interface QueueState {
  v: 1;
  pending: Row[];
  batches: SealedBatch[];
  dead: DeadLetter[];
  /** `refused`: reports of refused metrics kept as dead letters (absent in older queues). */
  counters: {sent: number; dropped: number; deadLettered: number; refused?: number};
}

/**
 * A pending report: metric, mechanism id, perturbed value, queued at (ms), and its public
 * dimension values if it states any (absent in queues written before dims; null once a Node
 * file has stored an absent one).
 */
type Row = [string, string, Payload, number, (Dims | null)?];

const empty = (): QueueState => ({v: 1, pending: [], batches: [], dead: [],
                                  counters: {sent: 0, dropped: 0, deadLettered: 0}});

export interface QueueOptions {
  batchSize: number;
  maxBatchAge: number;
  maxQueuedReports: number;
  maxQueueAge: number;
  now?: () => number;
}

export class DurableQueue {
  private buffer: Row[] = [];
  private state: QueueState = empty();
  private chain: Promise<unknown> = Promise.resolve();
  private readonly now: () => number;

  constructor(private readonly store: Store, private readonly options: QueueOptions) {
    this.now = options.now ?? Date.now;
  }

  /** Hand one perturbed report over (memory; durable at the next commit). */
  put(item: Item): void {
    if (this.buffer.length >= this.options.maxQueuedReports) {  // the store keeps failing
      this.buffer.shift();
      this.droppedInMemory++;
    }
    this.buffer.push([item[0], item[1], item[2], this.now(), item[3]]);
  }

  /** Reports dropped from memory because the store could not take them (and the cap hit). */
  droppedInMemory = 0;

  /**
   * Reports not in a sealed batch: in memory, or pending in the store as last read (another
   * reporter on the store may have committed them).
   */
  get unsealed(): number {
    return this.buffer.length + this.state.pending.length;
  }

  /** The last state read from or written to the store. */
  get snapshot(): QueueState {
    return this.state;
  }

  /** Reports handed to the store by a commit still in progress. */
  private committing = 0;

  /** Reports queued: buffered, being committed, pending and in sealed batches. */
  get queued(): number {
    return this.buffer.length + this.committing + this.state.pending.length +
      this.state.batches.reduce((n, b) => n + b.n, 0);
  }

  /** Read the stored state (e.g. after another tab changed it). */
  load(): Promise<QueueState> {
    return this.serial(async () => {
      this.state = normalise(await this.store.get<QueueState>(KEY));
      return this.state;
    });
  }

  /**
   * Commit the buffer to the store and seal what is due: full batches, partial ones whose
   * oldest report is older than maxBatchAge, and everything if `sealAll`.
   * @returns how many batches were sealed.
   */
  commit(sealAll = false): Promise<number> {
    return this.serial(async () => {
      const moving = this.buffer;
      this.buffer = [];
      this.committing = moving.length;  // still queued while the store writes them
      let sealed = 0;
      try {
        this.state = await this.store.update<QueueState>(KEY, (old) => {
          const state = normalise(old);
          state.pending.push(...moving);
          sealed = this.seal(state, sealAll);
          this.enforceLimits(state);
          return state;
        });
      } catch (error) {
        this.buffer = moving.concat(this.buffer);  // nothing is lost: try again later
        throw error instanceof QueueError ? error : new QueueError(String(error));
      } finally {
        this.committing = 0;
      }
      return sealed;
    });
  }

  /** The oldest sealed batch, read from the store (another tab may have sent it). */
  async nextBatch(): Promise<SealedBatch | undefined> {
    await this.load();
    return this.state.batches[0];
  }

  /**
   * The batch was answered: remove it, once. With no `refused` metrics it was accepted (2xx,
   * or a duplicate) and counts as sent. Otherwise each refused metric's reports become a
   * dead letter of their own (a new batch id, the collector's reason), the rest counts as sent.
   * Given a `reason` and none of its reports `refused`, the collector can never accept the
   * batch: it moves to the dead letters whole. `status` is the answer's.
   */
  ack(id: string, refused: Record<string, string> = {}, status: number | null = 202,
      reason?: string): Promise<void> {
    return this.serial(async () => {
      this.state = await this.store.update<QueueState>(KEY, (old) => {
        const state = normalise(old);
        const c = state.counters;
        const i = state.batches.findIndex((b) => b.id === id);
        if (i < 0) return state;
        const {body, n} = state.batches.splice(i, 1)[0]!;
        const doc = JSON.parse(body) as {reports: {metric: string}[]};
        let kept = 0;
        for (const metric in refused) {
          const reports = doc.reports.filter((r) => r.metric === metric);
          const fresh = newBatchId();
          if (reports.length) {
            state.dead.push({id: fresh, body: JSON.stringify({...doc, batch_id: fresh, reports}),
                             n: reports.length, status, reason: refused[metric]!, metric});
          }
          kept += reports.length;
        }
        if (reason !== undefined && !kept) {
          state.dead.push({id, body, n, status, reason});
          c.deadLettered += n;
        } else {
          c.refused = (c.refused ?? 0) + kept;
          c.sent += n - kept;
        }
        return state;
      });
    });
  }

  /** Queue the dead letters again (same ids) once their cause is fixed. Returns how many. */
  retryDeadLetters(): Promise<number> {
    return this.serial(async () => {
      let moved = 0;
      this.state = await this.store.update<QueueState>(KEY, (old) => {
        const state = normalise(old);
        moved = state.dead.length;
        for (const d of state.dead) {
          state.batches.push({id: d.id, body: d.body, n: d.n, sealedAt: this.now(),
                              oldestAt: this.now()});
          if (d.metric) state.counters.refused! -= d.n;
          else state.counters.deadLettered -= d.n;
        }
        state.dead = [];
        return state;
      });
      return moved;
    });
  }

  /** Milliseconds until the oldest pending report makes a partial batch due, if any. */
  dueIn(): number | undefined {
    const oldest = this.state.pending[0]?.[3] ?? this.buffer[0]?.[3];
    return oldest === undefined ? undefined
      : Math.max(0, oldest + this.options.maxBatchAge - this.now());
  }

  /** Drop every report, in memory and in the store (consent withdrawn). */
  clear(): Promise<void> {
    this.buffer = [];
    return this.serial(async () => {
      await this.store.del(KEY);
      this.state = empty();
    });
  }

  private seal(state: QueueState, sealAll: boolean): number {
    const size = this.options.batchSize;
    let sealed = 0;
    while (state.pending.length > 0) {
      const due = state.pending.length >= size || sealAll ||
        this.now() - state.pending[0]![3] >= this.options.maxBatchAge;
      if (!due) break;
      const rows = state.pending.splice(0, size);
      const id = newBatchId();
      state.batches.push({id, body: encodeBatch(id, rows.map((r) => [r[0], r[1], r[2], r[4]] as const)),
                          n: rows.length, sealedAt: this.now(), oldestAt: rows[0]![3]});
      sealed++;
    }
    return sealed;
  }

  private enforceLimits(state: QueueState): void {
    const cutoff = this.now() - this.options.maxQueueAge;
    const tooOld = state.batches.filter((b) => b.oldestAt < cutoff);
    let queued = state.pending.length + state.batches.reduce((n, b) => n + b.n, 0);
    for (const b of tooOld) queued -= b.n;
    let keep = state.batches.filter((b) => b.oldestAt >= cutoff);
    let dropped = tooOld.reduce((n, b) => n + b.n, 0);
    while (queued > this.options.maxQueuedReports && keep.length > 0) {
      const oldest = keep.shift()!;
      queued -= oldest.n;
      dropped += oldest.n;
    }
    state.batches = keep;
    state.counters.dropped += dropped;
  }

  private serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.chain.then(task, task);
    this.chain = run.catch(() => undefined);
    return run;
  }
}

function normalise(state: QueueState | undefined): QueueState {
  return state !== undefined && state.v === 1 ? state : empty();
}
