/**
 * Talking to the collector: one request per call, with a timeout, and the upload loop's
 * retry policy. The options are a plain object with defaults, in ky's shape.
 *
 * Per batch (sent with `Prefer: handling=lenient`: the collector accepts per metric):
 * - 2xx: the batch leaves the queue. A duplicate (200) is a 2xx too: the collector had already
 *   counted that batch id. The metrics the answer lists as `refused` were not counted: their
 *   reports become one dead letter per metric, under a new batch id, with the collector's
 *   reason (`stats().refused`, `refusedMetrics`); the rest counts as sent.
 * - 400, 409, 413, 422: the batch can never be accepted as it is: dead-lettered with the
 *   collector's reason (`retryDeadLetters()` queues them again). A 422 listing every metric
 *   as `refused` keeps the reports per metric instead, as above.
 * - 401, 403, 404: a configuration problem (key refused, wrong URL), not a bad batch: the
 *   batch stays queued and uploads back off up to `maxAuthBackoff`.
 * - 408, 429, 5xx, timeouts, network errors: the same body (same batch id) again after
 *   exponential backoff with full jitter, never sooner than `Retry-After` (capped).
 * Every random delay comes from crypto.getRandomValues.
 */
import {UploadError} from "./errors.js";
import {isMetricName, MEDIA_TYPE} from "./wire.js";

export interface RetryOptions {
  /** Milliseconds: the first retry waits up to this long (full jitter), doubling per attempt. */
  backoff: number;
  /** Milliseconds: the cap on one backoff wait. */
  maxBackoff: number;
  /** Milliseconds: the cap on one backoff wait after 401/403/404 (a configuration problem). */
  maxAuthBackoff: number;
  /** Milliseconds: the longest `Retry-After` obeyed; a larger one is read as this. */
  maxRetryAfter: number;
  /** Statuses whose batch is dead-lettered: it can never be accepted as it is. */
  deadLetterStatusCodes: readonly number[];
  /** Statuses that keep the batch and back off up to maxAuthBackoff. */
  configStatusCodes: readonly number[];
}

export interface TransportOptions {
  /** Milliseconds one request may take, connect to last byte. */
  timeout: number;
  /** An ingest key, sent as `Authorization: Bearer`. */
  token?: string | undefined;
  /** The fetch to use (tests inject one); globalThis.fetch by default. */
  fetch?: typeof globalThis.fetch | undefined;
}

export const DEFAULT_TIMEOUT = 10_000;
export const DEFAULT_RETRY: RetryOptions = {
  backoff: 500,
  maxBackoff: 60_000,
  maxAuthBackoff: 300_000,
  maxRetryAfter: 3_600_000,
  deadLetterStatusCodes: [400, 409, 413, 422],
  configStatusCodes: [401, 403, 404],
};

/** A uniform double in [0, 1) from 53 secure random bits (for delays only). */
export function secureUniform(): number {
  const words = new Uint32Array(2);
  globalThis.crypto.getRandomValues(words);
  return ((words[0]! >>> 5) * 67108864 + (words[1]! >>> 6)) / 9007199254740992;
}

/**
 * The wait before retry number `attempt` (1, 2, ...): full jitter,
 * uniform(0, min(cap, backoff * 2**(attempt - 1))), and never less than `retryAfter` (ms,
 * capped at maxRetryAfter).
 */
export function backoffDelay(attempt: number, retry: RetryOptions, cap: number,
                             retryAfter?: number, uniform: () => number = secureUniform): number {
  const bound = Math.min(cap, retry.backoff * 2 ** Math.min(attempt - 1, 62));
  const jitter = uniform() * bound;
  const floor = retryAfter === undefined ? 0 : Math.min(retryAfter, retry.maxRetryAfter);
  return Math.max(floor, jitter);
}

/** `Retry-After` in milliseconds from now (delay-seconds or an HTTP-date); undefined if bad. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  const when = Date.parse(text);
  return Number.isNaN(when) ? undefined : Math.max(0, when - now);
}

/** One collector, one request per call, each with a timeout and an optional abort signal. */
export class Transport {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof globalThis.fetch;

  constructor(collectorUrl: string, private readonly options: TransportOptions) {
    this.baseUrl = collectorUrl.replace(/\/+$/, "");
    this.headers = {"Content-Type": MEDIA_TYPE, Accept: MEDIA_TYPE, Prefer: "handling=lenient"};
    if (options.token) this.headers.Authorization = `Bearer ${options.token}`;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * One request; resolves with the parsed JSON of a 2xx.
   * @throws UploadError for any failure: network, timeout, abort, or a status >= 400.
   */
  async request(method: "GET" | "POST", path: string, body?: string,
                signal?: AbortSignal, keepalive = false): Promise<unknown> {
    const url = `${this.baseUrl}${path}`;
    const controller = new AbortController();
    const abort = (): void => controller.abort();
    const timer = setTimeout(abort, this.options.timeout);
    signal?.addEventListener("abort", abort);
    if (signal?.aborted) abort();
    try {
      return await this.send(url, method, body, controller.signal, keepalive);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", abort);
    }
  }

  private async send(url: string, method: string, body: string | undefined,
                     signals: AbortSignal, keepalive: boolean): Promise<unknown> {
    let response: Response;
    try {
      response = await this.fetch(url, {
        method, body: body ?? null, headers: this.headers, signal: signals, keepalive,
        // Nothing that could tie a device's batches together or tell where it reported from.
        credentials: "omit", cache: "no-store", redirect: "error", referrerPolicy: "no-referrer",
      });
    } catch (error) {
      const name = (error as Error)?.name ?? "Error";
      throw new UploadError(`${method} ${url} failed: ${name === "AbortError" ? "timed out or abandoned" : name}`);
    }
    const text = await response.text().catch(() => "");
    let doc: Problem | undefined;
    try {
      doc = JSON.parse(text || "{}");
    } catch { /* not JSON: no document */ }
    if (response.status >= 400) {
      let out = doc ? String(doc.detail ?? doc.title ?? "") : text.slice(0, 200);
      if (doc?.errors?.length) out += ` (${problems(doc.errors.slice(0, 5))})`;
      throw new UploadError(`${method} ${url} answered ${response.status}: ${out}`, {
        status: response.status, refused: parseRefused(doc),
        retryAfter: parseRetryAfter(response.headers.get("Retry-After")),
      });
    }
    return doc ?? {};
  }
}

type Pointed = {pointer?: string; detail?: string};
type Problem = {detail?: string; title?: string; errors?: Pointed[]; refused?: unknown};

const problems = (list: Pointed[]): string =>
  list.map((e) => `${e?.pointer ?? ""} ${e?.detail ?? ""}`.trim()).join("; ");

/**
 * metric -> why the collector refused its reports, from an answer's `refused` member (a 2xx
 * or a 422 problem document), as Python's parse_refused; empty if there is none.
 */
export function parseRefused(doc: unknown): Record<string, string> {
  const found: Record<string, string> = {};
  const entries = (doc as Problem | null)?.refused;
  for (const e of Array.isArray(entries) ? entries as {metric?: unknown; problems?: unknown}[] : []) {
    if (isMetricName(e?.metric)) {
      found[e.metric] = problems([e.problems ?? []].flat() as Pointed[]).slice(0, 500) || "refused";
    }
  }
  return found;
}
