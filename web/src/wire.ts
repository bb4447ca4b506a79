/**
 * The v1 wire format, mirroring deniable.client.wire (THE definition, in Python).
 *
 *     {"batch_id":"<32 lowercase hex>","reports":[{"metric":"m","mechanism":"rr:1/2:1/2","bit":1}]}
 *
 * `encodeBatch` writes exactly the bytes the Python client writes (that key order, no
 * whitespace), which is also the compact layout the collector reads without a JSON parser.
 * A report may also carry `"dims":{"platform":"ios",...}` after its payload: the metric's public
 * dimension values (deniable-client/all, src/dimensions.ts), in clear, not protected by local
 * differential privacy. A batch carries perturbed values only: no true value, device id, user
 * id or timestamp.
 */
export const API_VERSION = "v1";
export const REPORTS_PATH = `/${API_VERSION}/reports`;
export const METRICS_PATH = `/${API_VERSION}/metrics`;
export const MEDIA_TYPE = "application/json";
/** Lowercase letters, digits and '_', starting with a letter, at most 64 characters. */
export const METRIC_NAME = /^[a-z][a-z0-9_]{0,63}$/;
export const BATCH_ID = /^[0-9a-f]{32}$/;
/** The cap on reports per batch, for the client and the collector alike. */
export const DEFAULT_MAX_REPORTS = 1000;

/**
 * One queued report: (metric, mechanism id, perturbed value[, dims]): a bit (`rr:`, `bm:`), a
 * category index (`grr:`), a cell (`od:`) or a bitset in lowercase hex (`oue:`, `ss:`), as
 * client/kinds.payload_field; its public dimension values, if it states any.
 */
export type Item = readonly [metric: string, mechanism: string, value: Payload, dims?: Dims | null];
/**
 * A report's public dimension values as they travel: name -> value, names in sorted order (as
 * the Python queue's dims_text keeps them), never empty (Python leaves an empty one out).
 */
export type Dims = Readonly<Record<string, string>>;
/** A perturbed value as it travels: a bit, a category index, a cell or a hex bitset. */
export type Payload = number | string;

export function isMetricName(name: unknown): name is string {
  return typeof name === "string" && METRIC_NAME.test(name);
}

/** A fresh random batch id: 128 bits from crypto.getRandomValues, as 32 lowercase hex. */
export function newBatchId(): string {
  return hex(globalThis.crypto.getRandomValues(new Uint8Array(16)));
}

/** `bytes` as lowercase hex, two digits each (batch ids, ledger tags). */
export function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += (b < 16 ? "0" : "") + b.toString(16);
  return out;
}

/**
 * The exact JSON text of a batch, as the Python client's json.dumps(encode_batch(...),
 * separators=(",", ":")): keys in that order, no whitespace; `dims` left out when absent.
 * Names and values are ASCII (metric names, mechanism ids, hex, dimension values), so
 * JSON.stringify writes what Python's ensure_ascii does.
 */
export function encodeBatch(batchId: string, reports: Iterable<Item>): string {
  return JSON.stringify({batch_id: batchId, reports: Array.from(reports, ([metric, mechanism, value, dims]) => ({
    // The payload field: "bits" for a hex bitset (oue:, ss:), "index" for grr: (the only id
    // starting with g), "cell" for od: (the only one whose second letter is d), "bit"
    // otherwise (rr:, bm:). Spelled to fit the default entry's size budget.
    metric, mechanism, [typeof value == "string" ? "bits" : mechanism[0] === "g" ? "index"
      : mechanism[1] === "d" ? "cell" : "bit"]: value,
    dims: dims || undefined,
  }))});
}
