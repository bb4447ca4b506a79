/**
 * Consent (issue 30): the app's switch, `reporter.setEnabled(false)`, stops collection, drops
 * what is queued and deletes the device's local state: the queue, the cached catalogue, the
 * cap's ledger, the period gate, the budgets' spending and the device secret. What is left in the store is one marker,
 * `enabled: false`, so that a later Reporter on the same store (a reload, a restart) stays off
 * and creates no secret until `setEnabled(true)`. Deletion cannot reach the collector: its
 * counters hold sums of perturbed reports, no per-device data to delete.
 */
import type {SecretStore} from "./secret.js";
import type {Store} from "./store.js";

const MARKER = "enabled";
/** Every key a Reporter writes, besides the marker (queue.ts, reporter.ts, tags.ts, period.ts,
 * budget.ts's BUDGETS_KEY: deniable-client/all). */
const KEYS = ["queue", "catalogue", "ledger", "periods", "budgets"];

/** Whether the app withdrew consent on this store (and has not given it again). */
export async function withdrawn(store: Store): Promise<boolean> {
  return await store.get<boolean>(MARKER) === false;
}

/** Delete the device's local state and leave the marker, or (`enabled`) remove the marker. */
export async function setConsent(store: Store, secret: SecretStore, enabled: boolean):
    Promise<void> {
  if (enabled) return store.del(MARKER);
  await store.set(MARKER, false);
  for (const key of KEYS) await store.del(key);
  await secret.clear();
}
