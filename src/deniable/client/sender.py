"""The background sender: uploads sealed batches, oldest first, exactly once.

Policy, for each batch (``UploadError.kind`` names the failure):
- 2xx: the batch leaves the queue (``DurableQueue.ack``). A duplicate answer is a 2xx too:
  the collector had already counted that batch id. Batches go with ``Prefer:
  handling=lenient``: the metrics an answer lists as ``refused`` were not counted, and their
  reports move to the queue's refused table (``Stats.refused``, ``Reporter.retry_refused``);
  the rest count as sent.
- 400, 409, 413 or 422 (``bad_batch``): the batch can never be accepted as it is; it moves
  to the dead-letter table with the collector's reason, and the next batch goes. A 422 that
  lists every metric as ``refused`` keeps the reports per metric instead, as above.
- 408, 429, 5xx, timeouts, connection errors, DNS failures (``network``): the same bytes (same
  batch id) are sent again after exponential backoff with full jitter,
  ``uniform(0, min(max_backoff, backoff * 2**(attempt - 1)))``, and never sooner than the
  collector's ``Retry-After`` (capped at ``max_retry_after``).
- 401/403 (``key_refused``), another 4xx (``config``: 404, 405, ...) and TLS failures
  (``tls``): a configuration problem on one side, not a bad batch. The batch stays queued
  and is retried with the same backoff but the long cap ``max_config_backoff`` (minutes).
  ``key_refused`` stays True until an upload succeeds.
- ``upload_jitter``: before uploading after an idle spell, wait ``uniform(0, upload_jitter)``
  seconds so the upload time does not mirror the moment the app reported.

Every random delay comes from ``secrets.SystemRandom`` (the OS's CSPRNG); the sender never
blocks ``report()``: it runs in its own daemon thread and only takes the queue's lock for
short SQLite statements.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable

from deniable.client.doorbell import Doorbell
from deniable.client.errors import InvalidParameterError, UploadError
from deniable.client.queue import DurableQueue
from deniable.client.transport import Transport
from deniable.client.wire import parse_refused

log = logging.getLogger("deniable.client")

DEFAULT_BACKOFF = 0.5
"""Seconds: the first retry waits up to this long (full jitter), doubling per attempt."""
DEFAULT_MAX_BACKOFF = 60.0
"""Seconds: the cap on one backoff wait."""
DEFAULT_MAX_CONFIG_BACKOFF = 300.0
"""Seconds: the cap on one backoff wait after a refused key, a TLS failure or another
configuration error (404, 413, ...): long, since only a change of configuration helps."""
DEFAULT_MAX_RETRY_AFTER = 3600.0
"""Seconds: the longest ``Retry-After`` obeyed; a larger one is read as this."""
LONG_BACKOFF_KINDS = frozenset({"key_refused", "config", "tls"})


def backoff_bound(attempt: int, backoff: float, cap: float) -> float:
    """Upper bound, in seconds, of the wait before retry number ``attempt`` (1, 2, ...):
    ``min(cap, backoff * 2**(attempt - 1))``. The wait is drawn uniformly below it."""
    return min(cap, backoff * float(2 ** min(max(attempt - 1, 0), 62)))


class Sender:
    """Uploads a DurableQueue's sealed batches from a background thread.

    Args:
        queue: the queue to drain.
        transport_factory: makes the Transport (one per process: a forked child makes its
            own); it should have ``retries=0``, since the sender owns the retry policy.
        backoff: seconds of the first backoff's upper bound.
        max_backoff: cap on one backoff, in seconds.
        max_config_backoff: cap on one backoff, in seconds, after a configuration failure
            (refused key, TLS failure, 404, 413, ...).
        max_retry_after: cap on an obeyed ``Retry-After``, in seconds.
        upload_jitter: upper bound, in seconds, of a random delay before uploading after idle.
        rand: the random source for delays; ``secrets.SystemRandom()`` unless a test injects.
    """

    def __init__(self, queue: DurableQueue, transport_factory: Callable[[], Transport], *,
                 backoff: float = DEFAULT_BACKOFF, max_backoff: float = DEFAULT_MAX_BACKOFF,
                 max_config_backoff: float = DEFAULT_MAX_CONFIG_BACKOFF,
                 max_retry_after: float = DEFAULT_MAX_RETRY_AFTER, upload_jitter: float = 0.0,
                 rand: secrets.SystemRandom | None = None) -> None:
        for name, value in (("backoff", backoff), ("max_backoff", max_backoff),
                            ("max_config_backoff", max_config_backoff),
                            ("max_retry_after", max_retry_after),
                            ("upload_jitter", upload_jitter)):
            if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise InvalidParameterError(
                    f"{name} must be a finite number of seconds >= 0. Got {value!r} instead.")
        self.queue = queue
        self._transport_factory = transport_factory
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_config_backoff = max(float(max_config_backoff), self.max_backoff)
        self.max_retry_after = float(max_retry_after)
        self.upload_jitter = float(upload_jitter)
        self._rand = rand or secrets.SystemRandom()
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._transport: Transport | None = None
        self._renew = False                  # new_transport(): replace it before next use
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped = Doorbell()           # set by stop(): ends every wait at once
        self._wake = Doorbell()              # a batch was sealed, a flush began, or stop
        self._hurry = Doorbell()             # flush: cut jitter and backoff waits short
        self._progress = Doorbell()          # a batch left the queue
        self.last_error: str | None = None
        """The latest upload failure, as text without any report content."""
        self.last_kind: str | None = None
        """``UploadError.kind`` of the latest failure (None after a success)."""
        self.attempts = 0
        """Failed attempts on the current batch (0 after a success)."""
        self._warned_refused: dict[str, str] = {}

    def start(self) -> None:
        """Start the sender thread (a daemon)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="deniable-sender",
                                            daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """A batch was sealed: look at the queue now."""
        self._wake.set()

    def hurry(self) -> None:
        """Upload now: skip the upload jitter and the rest of a backoff (not a Retry-After)."""
        self._hurry.set()
        self._wake.set()

    def wait_for_progress(self, timeout: float) -> None:
        """Block until a batch left the queue, or ``timeout`` seconds passed."""
        if self._progress.wait(timeout):
            self._progress.clear()

    @property
    def key_refused(self) -> bool:
        """Whether the latest upload was refused for its key (401/403)."""
        return self.last_kind == "key_refused"

    def new_transport(self) -> None:
        """Make a new Transport for the next request (e.g. after the token changed)."""
        self._renew = True
        self.hurry()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread, waiting at most ``timeout`` seconds, and close the transport.

        A request still in flight then is abandoned, not awaited: the daemon thread ends
        when it does (its connect and read timeouts bound it) and closes the transport. Its
        batch was never acknowledged, so it stays queued under the same batch id.
        """
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        self._hurry.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                return  # an upload is still in flight; the daemon thread closes it
        self._close_transport()

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's thread is gone and its sockets are the parent's."""
        was_started = self._thread is not None
        # Dropped without closing: its pooled sockets belong to the parent's connections.
        self._init_runtime()
        if was_started:
            self.start()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        idle = True
        try:
            while not self._stopping:
                try:
                    batch = self.queue.next_batch()
                except Exception:
                    if self._stopping:  # closed under us at a deadline: nothing to report
                        break
                    log.exception("deniable: reading the queue failed")
                    self._sleep(1.0, interruptible=True)
                    continue
                if batch is None:
                    idle = True
                    self._hurry.clear()
                    self._notify()
                    self._wake.wait()
                    self._wake.clear()
                    continue
                if idle and self.upload_jitter > 0:
                    idle = False
                    if not self._sleep(self._rand.uniform(0, self.upload_jitter),
                                       interruptible=True):
                        continue
                idle = False
                try:
                    self._upload(batch.batch_id, batch.body)
                except Exception:  # the queue failed (e.g. closed under us): never die loudly
                    if self._stopping:
                        break
                    log.exception("deniable: recording an upload's outcome failed")
                    self._sleep(1.0, interruptible=True)
        finally:
            if self._stopping:
                self._close_transport()
            self._notify()

    def _upload(self, batch_id: str, body: bytes) -> None:
        if self._renew:
            self._renew = False
            self._close_transport()
        if self._transport is None:
            self._transport = self._transport_factory()
        try:
            answer = self._transport.send_raw(body)
        except UploadError as exc:
            if exc.refused and not exc.retryable:  # every metric refused: keep them per metric
                self._refused(exc.refused)
                self.last_error, self.last_kind, self.attempts = str(exc), exc.kind, 0
                self.queue.ack(batch_id, exc.refused, status=exc.status, nothing_counted=True)
                self._notify()
                return
            if exc.kind != self.last_kind or self.attempts == 0:
                log.warning("deniable: upload failed (%s); the batch stays queued" if
                            exc.retryable else "deniable: %s; dead-lettered", exc)
            self.last_error = str(exc)
            self.last_kind = exc.kind
            if not exc.retryable:
                self.queue.dead_letter(batch_id, exc.status, str(exc))
                self.attempts = 0
                self._notify()
                return
            self.attempts += 1
            cap = self.max_config_backoff if exc.kind in LONG_BACKOFF_KINDS else self.max_backoff
            delay = self._rand.uniform(0, backoff_bound(self.attempts, self.backoff, cap))
            if exc.retry_after is not None:
                floor = min(exc.retry_after, self.max_retry_after)
                self._sleep(floor, interruptible=False)
                delay = max(0.0, delay - floor)
            self._sleep(delay, interruptible=True)
            return
        except Exception as exc:  # a bug or an unexpected answer: back off, keep the batch
            if self._stopping:
                return
            self.last_error = type(exc).__name__
            self.last_kind = "network"
            log.exception("deniable: uploading a batch failed unexpectedly")
            self.attempts += 1
            self._sleep(backoff_bound(self.attempts + 1, self.backoff, self.max_backoff),
                        interruptible=True)
            return
        if self._stopping and self.queue.closed:
            return  # abandoned at close: the batch stays in the queue file, same id
        self.attempts = 0
        self.last_error = None
        self.last_kind = None
        refused = parse_refused(answer)
        if refused:
            self._refused(refused)
        self.queue.ack(batch_id, refused, status=200 if answer.get("duplicate") else 202)
        self._notify()

    def _refused(self, refused: dict[str, str]) -> None:
        """Warn, once per metric and reason, that the collector refused a metric's reports."""
        for metric, reason in sorted(refused.items()):
            if self._warned_refused.get(metric) != reason:
                self._warned_refused[metric] = reason
                log.warning("deniable: the collector refused the reports of metric %r (%s); "
                            "they are kept (stats().refused_metrics, retry_refused())",
                            metric, reason)

    def _sleep(self, seconds: float, *, interruptible: bool) -> bool:
        """Wait ``seconds``; stop always ends it, a flush only if ``interruptible``.

        Returns True if the full time passed.
        """
        deadline = time.monotonic() + seconds
        while not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if interruptible:
                if self._hurry.wait(left):
                    self._hurry.clear()
                    return False
            else:
                self._stopped.wait(left)
        return False

    def _notify(self) -> None:
        self._progress.set()

    def _close_transport(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()
