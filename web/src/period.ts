/**
 * The period gate: at most one report per metric per UTC period (its declared `period`:
 * "hour", "day", the default, or "week", ISO weeks from Monday 00:00 UTC), as Python's
 * `client/period.py`. The analysis assumes it (docs/analysis.md); without it the number of
 * reports per batch would also be an un-noised signal of usage.
 *
 * **The first report of a period is sent**; later calls of the same period are no-ops counted
 * in `stats().periodSkipped`. The gate keeps, per `metric/period`, the index of the last
 * period it admitted a report in, under the store key "periods" (IndexedDB in browsers, the
 * queue file in Node): no identifier, no value. A claim is one read-modify-write transaction
 * of the store, so restarts and several tabs of one origin share one gate: a report goes to
 * the queue only once its claim has committed, and a claim another tab made first drops it.
 * Period indexes are Python's (`CollectionPolicy.period_index`), so the keys and numbers are
 * those of its `periods.json`.
 */
import type {Store} from "./store.js";

/** Reporting periods and their length in milliseconds. */
export const PERIODS = {hour: 3_600_000, day: 86_400_000, week: 604_800_000} as const;
export type Period = keyof typeof PERIODS;
const PERIODS_KEY = "periods";

/** The number of the UTC period of `period` holding `ms` (Unix milliseconds); weeks start on
 * Monday (1970-01-01 was a Thursday). */
export function periodIndex(period: Period, ms: number): number {
  return Math.floor((ms + (period === "week" ? 259_200_000 : 0)) / PERIODS[period]);
}

/** metric/period -> the index of the last period a report was admitted in. */
type Claims = Record<string, number>;

export class PeriodGate {
  /** Calls turned into no-ops because their period was already reported. */
  skipped = 0;
  /** metric -> its declared period; "day" for a metric not listed. */
  periods = new Map<string, Period>();
  private claims: Claims = {};
  private readonly inFlight = new Set<Promise<boolean>>();

  constructor(private readonly store: Store, private readonly clock: () => number) {}

  /** Read the claims kept in the store (made by earlier runs and other tabs). */
  async load(): Promise<void> {
    this.claims = {...await this.store.get<Claims>(PERIODS_KEY), ...this.claims};
  }

  /**
   * Admit `metric`'s report now: `false` (counted) if this period was claimed already as far
   * as this gate knows; else a promise of whether the store's transaction claimed it (false,
   * counted, if another tab or run did first; true if the store cannot be written: a report
   * is never dropped over the gate's state, as in Python).
   */
  admit(metric: string): false | Promise<boolean> {
    if (this.closed(metric)) return false;
    const [key, index] = this.now(metric);
    this.claims[key] = index;
    let won = true;
    const claim = this.store.update<Claims>(PERIODS_KEY, (old) => {
      const claims = old ?? {};
      won = claims[key] !== index;
      claims[key] = index;
      return claims;
    }).then(() => won || this.skip(), () => true);
    this.inFlight.add(claim);
    void claim.then(() => this.inFlight.delete(claim));
    return claim;
  }

  /** The claims in flight: flush() waits for them. */
  get pending(): Promise<unknown> {
    return Promise.all(this.inFlight);
  }

  /** Whether `metric`'s period now is claimed already, as far as this gate knows (counted:
   * the call is skipped). report() asks before anything is charged or queued. */
  closed(metric: string): boolean {
    const [key, index] = this.now(metric);
    return this.claims[key] === index && !this.skip();
  }


  /** Forget every claim (consent withdrawn; the store's copy is deleted with the rest). */
  clear(): void {
    this.claims = {};
  }

  private now(metric: string): [string, number] {
    const period = this.periods.get(metric) ?? "day";
    return [`${metric}/${period}`, periodIndex(period, this.clock())];
  }

  private skip(): false {
    this.skipped++;
    return false;
  }
}
