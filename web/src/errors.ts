/**
 * Errors thrown by deniable-client. One root, as in the Python client:
 *
 *     DeniableError
 *     ├── InvalidParameterError   a mechanism parameter, option or value is unusable
 *     ├── UnknownMetricError      a metric the (known) catalogue does not hold
 *     ├── WireFormatError         a document that breaks the v1 wire format
 *     ├── UploadError             the collector could not be reached or refused (never thrown
 *     │                           by report(); the sender keeps it in lastError)
 *     └── QueueError              the reporter is closed, or its store cannot be used
 */

/** Root of every error deniable-client throws. */
export class DeniableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A mechanism parameter, an option or a reported value is unusable. */
export class InvalidParameterError extends DeniableError {}

/** A metric the client's catalogue does not hold (thrown only once a catalogue is known). */
export class UnknownMetricError extends DeniableError {}

/** A document (catalogue, batch) breaks the v1 wire format. */
export class WireFormatError extends DeniableError {}

/** The durable queue is closed or its store failed. */
export class QueueError extends DeniableError {}

/** One upload failed. `retryable` is false only for a batch the collector can never accept. */
export class UploadError extends DeniableError {
  readonly status: number | undefined;
  readonly retryable: boolean;
  /** Seconds the collector asked us to wait (`Retry-After`), if it did. */
  readonly retryAfter: number | undefined;
  /** True for 401/403: the key was refused; the batch stays queued. */
  readonly authRefused: boolean;
  /** Metric -> why: the metrics a lenient answer refused (its `refused` member), if any. */
  readonly refused: Record<string, string>;

  constructor(message: string, options: {status?: number; retryable?: boolean;
                                         retryAfter?: number; refused?: Record<string, string>} = {}) {
    super(message);
    this.status = options.status;
    this.retryable = options.retryable ?? true;
    this.retryAfter = options.retryAfter;
    this.authRefused = options.status === 401 || options.status === 403;
    this.refused = options.refused ?? {};
  }
}
