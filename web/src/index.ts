/**
 * deniable-client: private telemetry under local differential privacy, for browsers and Node.
 *
 *     import {Reporter} from "deniable-client";
 *     const reporter = new Reporter("https://telemetry.example.com", {token: "dn_ingest_...",
 *                                   metrics: {dark_mode: {mechanism: "rr:1/2:1/2"}}});
 *     reporter.report("dark_mode", matchMedia("(prefers-color-scheme: dark)").matches);
 */
// The public API, and nothing else (docs/web.md, "What each entry exports"): what apps and the
// docs use. Internals are imported from their own modules (dist/<module>.js) by the tests.
export {Reporter, type ReporterOptions, type Stats} from "./reporter.js";
export {RandomizedResponse, type Estimate} from "./mechanism.js";
export {
  DeniableError, InvalidParameterError, UnknownMetricError, WireFormatError, UploadError,
  QueueError,
} from "./errors.js";
export {type Fraction, frac} from "./fraction.js";
export {type Store, MemoryStore, IdbStore} from "./store.js";
export {type SecretStore, StoreSecret, MemorySecret} from "./secret.js";
export {type DeadLetter} from "./queue.js";
export {type RetryOptions} from "./sender.js";
