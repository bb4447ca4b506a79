/**
 * The v1 wire format, mirroring deniable.client.wire (THE definition, in Python).
 *
 *     {"batch_id":"<32 lowercase hex>","reports":[{"metric":"m","mechanism":"rr:1/2:1/2","bit":1}]}
 *
 * `encodeBatch` writes exactly the bytes the Python client writes (that key order, no
 * whitespace), which is also the compact layout the collector reads without a JSON parser.
 * A batch carries perturbed bits only: no true value, device id, user id or timestamp.
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
 * One queued report: (metric, mechanism id, perturbed value): a bit (`rr:`, `bm:`), a category
 * index (`grr:`) or a bitset in lowercase hex (`oue:`, `ss:`), as client/kinds.payload_field.
 */
export type Item = readonly [metric: string, mechanism: string, value: Payload];
/** A perturbed value as it travels: a bit, a category index or a hex bitset. */
export type Payload = number | string;

export function isMetricName(name: unknown): name is string {
  return typeof name === "string" && METRIC_NAME.test(name);
}

/** A fresh random batch id: 128 bits from crypto.getRandomValues, as 32 lowercase hex. */
export function newBatchId(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  let out = "";
  for (const b of bytes) out += (b < 16 ? "0" : "") + b.toString(16);
  return out;
}

/** The exact JSON text of a batch, as the Python client's json.dumps(encode_batch(...)). */
export function encodeBatch(batchId: string, reports: Iterable<Item>): string {
  const parts: string[] = [];
  for (const [metric, mechanism, value] of reports) {
    // The payload field: "index" for grr: (the only id starting with g), "bits" for a hex
    // bitset (oue:, ss:), "bit" otherwise (rr:, bm:).
    parts.push(`{"metric":${JSON.stringify(metric)},"mechanism":${JSON.stringify(mechanism)},` +
               `"${mechanism[0] === "g" ? "index" : typeof value == "string" ? "bits" : "bit"}":` +
               `${JSON.stringify(value)}}`);
  }
  return `{"batch_id":${JSON.stringify(batchId)},"reports":[${parts.join(",")}]}`;
}
