"""Reporter: the app-facing client. Perturb at once, batch, upload.

    with Reporter("https://telemetry.example.com") as reporter:
        reporter.report("feature_x_enabled", True)   # perturbed here; True never leaves

The true value is used once, inside ``RandomizedResponse.perturb``; only the perturbed bit is
kept, queued, logged or sent.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from types import TracebackType

from deniable.client.errors import InvalidParameterError, UploadError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import Catalogue, coerce_catalogue, lookup
from deniable.client.randomness import RandomBits
from deniable.client.transport import DEFAULT_TIMEOUT, Transport
from deniable.client.wire import DEFAULT_MAX_REPORTS, encode_batch, new_batch_id

DEFAULT_BATCH_SIZE = 100


class Reporter:
    """Reports boolean telemetry under randomized response.

    Args:
        collector_url: the collector's base URL.
        metrics: name -> mechanism (or mechanism id). If omitted, the catalogue is fetched
            once from the collector's ``GET /v1/metrics``.
        batch_size: reports per batch; a full batch is uploaded at once.
        timeout: (connect, read) timeouts in seconds for every request.
        retries: retries per upload on connection errors, timeouts, 429 and 5xx.
        token: an ingest key, if the collector requires one.
        rng: the random-bit source; the secure system source unless a test injects one.

    Raises:
        InvalidParameterError: a batch size outside [1, 1000] or an invalid catalogue.
        UploadError: the catalogue could not be fetched.
    """

    def __init__(self, collector_url: str,
                 metrics: Mapping[str, RandomizedResponse | str] | None = None, *,
                 batch_size: int = DEFAULT_BATCH_SIZE,
                 timeout: tuple[float, float] = DEFAULT_TIMEOUT, retries: int = 3,
                 token: str | None = None, rng: RandomBits | None = None) -> None:
        if not 1 <= batch_size <= DEFAULT_MAX_REPORTS:
            raise InvalidParameterError(
                f"batch_size must lie in [1, {DEFAULT_MAX_REPORTS}]. Got {batch_size} instead.")
        self.batch_size = batch_size
        self._rng = rng
        self._transport = Transport(collector_url, timeout=timeout, retries=retries, token=token)
        self._catalogue: Catalogue = (coerce_catalogue(metrics) if metrics is not None
                                      else self._transport.fetch_catalogue())
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str, int]] = []
        self._sealed: list[tuple[str, list[tuple[str, str, int]]]] = []
        self.sent = 0

    @property
    def metrics(self) -> Catalogue:
        """The metrics this reporter knows: name -> mechanism (a copy)."""
        return dict(self._catalogue)

    def report(self, metric: str, true_value: bool) -> None:
        """Perturb ``true_value`` for ``metric`` and queue the perturbed bit.

        Uploads when the batch is full.

        Raises:
            UnknownMetricError: a metric this reporter was not configured with.
            InvalidParameterError: ``true_value`` is not a bool (or 0/1).
            UploadError: a full batch could not be delivered; it is kept and retried, with
                the same batch id, on the next flush.
        """
        mechanism = lookup(self._catalogue, metric)
        if not (true_value is True or true_value is False or true_value in (0, 1)):
            raise InvalidParameterError(
                f"true_value must be a bool. Got a {type(true_value).__name__} instead.")
        bit = mechanism.perturb(true_value, self._rng)
        with self._lock:
            self._pending.append((metric, mechanism.id, bit))
            full = len(self._pending) >= self.batch_size
            if full:
                self._seal()
        if full:
            self.flush()

    def flush(self) -> int:
        """Upload every queued report; return how many the collector accepted.

        A batch that fails with a retryable error stays queued with its batch id, so the next
        flush re-sends exactly the same batch, which the collector counts once.

        Raises:
            UploadError: the first batch that could not be delivered.
        """
        with self._lock:
            if self._pending:
                self._seal()
            accepted = 0
            while self._sealed:
                batch_id, reports = self._sealed[0]
                try:
                    answer = self._transport.send(encode_batch(batch_id, reports))
                except UploadError as exc:
                    if not exc.retryable:
                        self._sealed.pop(0)  # refused as malformed: re-sending cannot help
                    raise
                self._sealed.pop(0)
                accepted += int(answer.get("accepted", 0))
                self.sent += len(reports)
            return accepted

    def close(self) -> None:
        """Flush, then release the connection pool."""
        try:
            self.flush()
        finally:
            self._transport.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _seal(self) -> None:
        # The batch id is drawn when the batch is sealed and never changes afterwards.
        self._sealed.append((new_batch_id(), self._pending))
        self._pending = []
