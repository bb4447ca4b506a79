/**
 * Per-period privacy budgets (deniable-client/all only; Python's client/budget.py `Budget`):
 * `budgets: {metric: {epsilon, period}}` allows at most `epsilon` nats of one metric's
 * reports per `period` seconds (default 86,400). A fresh report costs its mechanism's epsilon
 * every time; a memoized one costs its memo layer's epsilon once, on its value's first (new)
 * answer, and nothing after (already paid for in the cap's ledger). Periods are Python's:
 * fixed windows aligned to the Unix epoch, `floor(now / period) * period` seconds (UTC days
 * by default, NOT the metric's declared reporting period); a clock that goes back never
 * reopens a period already spent. Sums are exact, in 2**-1074 units, against the budget with
 * the ledger's relative 2**-40 allowance (privacy.ts), so `k * epsilon` admits exactly k
 * reports of `epsilon`.
 *
 * The spending is kept in the store under "budgets" (metric -> {start, spent}; no value, no
 * identifier) and charged in one read-modify-write transaction before a report is queued, so
 * reporters sharing a store (tabs, restarts) share each budget.
 */
import {DeniableError, InvalidParameterError} from "./errors.js";
import {units} from "./privacy.js";

/** At most `epsilon` nats of privacy loss per `period` seconds (default 86,400) for one metric. */
export interface Budget {
  epsilon: number;
  period?: number;
}

/** metric -> the start (Unix seconds) of the period last charged and what it spent (units). */
export type BudgetLedger = Record<string, {start: number; spent: string}>;

export const BUDGETS_KEY = "budgets";
export const DAY = 86_400;

/** A report the metric's budget refuses (Python's BudgetExceededError): nothing was queued. */
export class BudgetExceededError extends DeniableError {
  constructor(message: string, readonly metric: string, readonly retryAt: number) {
    super(message);
  }
}

/** The budgets option checked (Python's Budget.__post_init__): metric -> [epsilon, period].
 * @throws InvalidParameterError an epsilon not finite >= 0, or a period not finite > 0. */
export function checkBudgets(budgets: Record<string, Budget> | undefined):
    Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  for (const [name, b] of Object.entries(budgets ?? {})) {
    const {epsilon, period = DAY} = b ?? {} as Budget;
    if (typeof epsilon !== "number" || !Number.isFinite(epsilon) || epsilon < 0) {
      throw new InvalidParameterError(`budgets['${name}']: epsilon must be a finite number >= 0 ` +
                                      `(nats per period). Got ${String(epsilon)} instead.`);
    }
    if (typeof period !== "number" || !Number.isFinite(period) || period <= 0) {
      throw new InvalidParameterError(`budgets['${name}']: period must be a finite number of ` +
                                      `seconds above 0. Got ${String(period)} instead.`);
    }
    out.set(name, [epsilon, period]);
  }
  return out;
}

/** The start (Unix seconds) of the budget period of `period` seconds holding `ms`. */
export function periodStart(period: number, ms: number): number {
  return Math.floor(ms / 1000 / period) * period;
}

/**
 * Charge `cost` nats of `metric` at `ms` (Unix milliseconds) against [epsilon, period]:
 * whether the budget admits it (and, if `add`, it is spent now in `ledger`).
 */
export function chargeBudget(ledger: BudgetLedger, metric: string, budget: [number, number],
                             cost: number, ms: number, add?: boolean): boolean {
  const start = periodStart(budget[1], ms);
  const entry = Object.hasOwn(ledger, metric) ? ledger[metric] : undefined;
  // A newer period starts from zero; a current or later one (the clock went back) keeps its spend.
  const stored = entry === undefined || entry.start < start ? undefined : entry;
  const spent = BigInt(stored?.spent ?? 0) + units(cost);
  if (spent << 40n > units(budget[0]) * ((1n << 40n) + 1n)) return false;
  if (add) ledger[metric] = {start: stored?.start ?? start, spent: `${spent}`};
  return true;
}
