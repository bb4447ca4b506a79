/**
 * deniable-client: private telemetry under local differential privacy, for browsers and Node.
 *
 *     import {Reporter} from "deniable-client";
 *     const reporter = new Reporter("https://telemetry.example.com", {token: "dn_ingest_...",
 *                                   metrics: {dark_mode: {mechanism: "rr:1/2:1/2"}}});
 *     reporter.report("dark_mode", matchMedia("(prefers-color-scheme: dark)").matches);
 */
export {Reporter, type ReporterOptions, type Stats} from "./reporter.js";
export {RandomizedResponse, DEFAULT, type Estimate, zScore, wilsonInterval} from "./mechanism.js";
export {
  DeniableError, InvalidParameterError, UnknownMetricError, WireFormatError, UploadError,
  QueueError,
} from "./errors.js";
export {type Fraction, frac, parseFraction, fracToString} from "./fraction.js";
export {SecureBits, SYSTEM_BITS, below, type RandomBits, type ReadBytes} from "./random.js";
export {memoBit, memoContext, importSecret, newSecretKey, SECRET_BYTES} from "./memo.js";
export {ledgerTag, tagContext} from "./tags.js";
export {PeriodGate, periodIndex, PERIODS, type Period} from "./period.js";
export {encodeBatch, newBatchId, isMetricName, REPORTS_PATH, METRICS_PATH, type Item, type Payload} from "./wire.js";
export {type Catalogue} from "./catalogue.js";
import {declareCatalogue as declare, parseCatalogue as parse} from "./catalogue.js";
import {RandomizedResponse} from "./mechanism.js";
/** A catalogue document's boolean metrics: name -> RandomizedResponse (catalogue.ts). */
export const parseCatalogue = (doc: unknown, skipped?: (name: string, kind: string) => void):
  Map<string, RandomizedResponse> =>
  parse(doc, skipped, RandomizedResponse) as Map<string, RandomizedResponse>;
/** Declared metrics (name -> mechanism or id) as a catalogue of RandomizedResponse. */
export const declareCatalogue = (metrics: Record<string, RandomizedResponse | string>):
  Map<string, RandomizedResponse> =>
  declare(metrics, RandomizedResponse) as Map<string, RandomizedResponse>;
export {
  aboveCeiling, DEFAULT_MAX_EPSILON, DEFAULT_MAX_METRIC_EPSILON, type Ledger, spend,
} from "./privacy.js";
export {type Store, MemoryStore, IdbStore, defaultStore} from "./store.js";
export {type SecretStore, StoreSecret, MemorySecret} from "./secret.js";
export {DurableQueue, type SealedBatch, type DeadLetter, type QueueState} from "./queue.js";
export {Transport, backoffDelay, parseRetryAfter, DEFAULT_RETRY, type RetryOptions} from "./sender.js";
