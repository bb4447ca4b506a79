// Per-period privacy budgets in deniable-client/all (the `budgets` option, src/budget.ts), as
// Python's Budget: the shared vectors replayed through the same charge, two reporters on one
// store sharing one budget (refused synchronously as last read, else in the store's
// transaction), and a memoized metric's refused new answer sent as its paid one (or, with
// none paid, not at all). About 0.5 s.
import assert from "node:assert/strict";
import {test} from "node:test";

import {chargeBudget} from "../dist/budget.js";
import {BudgetExceededError, InvalidParameterError, MemoryStore, RandomizedResponse, Reporter}
  from "../dist/all.js";
import {vectors} from "./vectors.js";

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
const ln3 = RandomizedResponse.fromId("rr:1/2:1/2").epsilon;

test("budget vectors: the same reports admitted as by Python's ledger", () => {
  const {budgets, sequence} = vectors.budgets;
  const ledger = {};
  for (const v of sequence) {
    const b = budgets[v.metric];
    assert.equal(chargeBudget(ledger, v.metric, [b.epsilon, b.period], v.epsilon, v.ms, true),
                 v.admitted, JSON.stringify(v));
  }
  assert.deepEqual(new Set(sequence.map((v) => v.admitted)), new Set([true, false]));
});

test("two reporters on one store share a fresh metric's budget", async (t) => {
  const store = new MemoryStore();
  let now = Date.UTC(2026, 10, 26, 12);
  const make = () => new Reporter("http://127.0.0.1:9", {
    store, log: () => undefined, flushOnHide: false, onePerPeriod: false, clock: () => now,
    commitInterval: 60_000,  // reports stay in each reporter's memory: counted apart
    metrics: {m: {mechanism: "rr:1/2:1/2", memoization: "fresh"}},
    budgets: {m: {epsilon: 2 * ln3}}});
  assert.throws(() => new Reporter("http://127.0.0.1:9", {store, log: () => undefined,
    budgets: {m: {epsilon: 1, period: 0}}}), InvalidParameterError);
  const [a, b] = [make(), make()];
  t.after(() => Promise.all([a.close(50), b.close(50)]));
  await Promise.all([a.waitReady(200), b.waitReady(200)]);
  a.report("m", true);
  await settle();
  b.report("m", false);
  await settle();
  // a last read one charge: admitted synchronously, refused by the store's transaction.
  a.report("m", true);
  await settle();
  assert.equal(a.stats().budgetRefused, 1);
  // Now a has read both: refused at the call.
  assert.throws(() => a.report("m", true), (e) => e instanceof BudgetExceededError &&
                e.metric === "m" && e.retryAt === Date.UTC(2026, 10, 27) / 1000);
  assert.equal(a.stats().budgetRefused + b.stats().budgetRefused, 2);
  assert.equal(a.stats().queued + b.stats().queued, 2);
  now += 86_400_000;  // the next UTC day: a new period
  b.report("m", true);
  await settle();
  assert.equal(a.stats().queued + b.stats().queued, 3);
});

test("a memoized metric's new answer past its budget is sent as its paid answer", async (t) => {
  const store = new MemoryStore();
  const r = new Reporter("http://127.0.0.1:9", {
    store, log: () => undefined, flushOnHide: false, onePerPeriod: false,
    metrics: {m: {mechanism: "rr:1/2:1/2"}, z: {mechanism: "rr:1/2:1/2"}},
    budgets: {m: {epsilon: ln3}, z: {epsilon: 0}}});
  t.after(() => r.close(50));
  await r.waitReady(200);
  r.report("m", true);
  await settle();
  r.report("m", false);  // a new answer: the budget refuses it; true's paid answer goes
  await settle();
  r.report("m", true);  // paid: free
  await settle();
  // Sent as a paid answer: not counted (Python's budget_refused counts reports not sent).
  assert.equal(r.stats().budgetRefused, 0);
  assert.equal(r.stats().queued, 3);
  r.report("z", true);  // nothing paid to send instead: refused, counted
  await settle();
  assert.equal(r.stats().budgetRefused, 1);
  assert.equal(r.stats().queued, 3);
  assert.ok(await store.get("budgets"));
  await r.setEnabled(false);  // consent withdrawn: the spending goes with the rest
  assert.equal(await store.get("budgets"), undefined);
});
