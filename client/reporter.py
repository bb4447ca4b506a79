"""Reporter: the app-facing client. Perturb at once, queue durably, upload in the background.

    with Reporter("https://telemetry.example.com", queue_path=data_dir / "deniable.db") as r:
        r.report("feature_x_enabled", True)   # perturbed here; True never leaves this call

The true value is used once, inside ``_perturb``; only the perturbed bit is queued, stored,
logged or sent. ``report()`` never touches the network: it costs a few microseconds (group
commit) and returns. A committer thread writes reports to SQLite, a sender thread uploads
sealed batches (see ``deniable.client.queue`` and ``deniable.client.sender``, and
docs/client.md for the guarantees).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Collection, Mapping
from types import TracebackType

from deniable.client.errors import (
    BudgetExceededError,
    InvalidParameterError,
    QueueError,
    UploadError,
)
from deniable.client.budget import Budget
from deniable.client.longitudinal import LongitudinalGuard, PrivacyLoss
from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import Catalogue, coerce_catalogue, lookup, parse_catalogue
from deniable.client.queue import (
    DEFAULT_COMMIT_INTERVAL,
    DEFAULT_MAX_BATCH_AGE,
    DEFAULT_MAX_QUEUE_AGE,
    DEFAULT_MAX_QUEUED_REPORTS,
    DurableQueue,
    Durability,
)
from deniable.client.randomness import RandomBits
from deniable.client.sender import DEFAULT_BACKOFF, DEFAULT_MAX_BACKOFF, Sender
from deniable.client.stats import DeadLetter, LedgerEntry, Stats
from deniable.client.transport import DEFAULT_TIMEOUT, Transport

log = logging.getLogger("deniable.client")

DEFAULT_BATCH_SIZE = 100
DEFAULT_CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` and the context manager wait for uploads."""
DEFAULT_EXIT_TIMEOUT = 2.0
"""Seconds the atexit hook waits for uploads: short, so an offline app still exits promptly."""
_CATALOGUE_META = "catalogue"

# Every open Reporter, for the atexit flush and for restarting threads after a fork.
_OPEN: weakref.WeakSet[Reporter] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


class Reporter:
    """Reports boolean telemetry under randomized response, durably and exactly once.

    Args:
        collector_url: the collector's base URL.
        metrics: name -> mechanism (or mechanism id). If omitted, the catalogue is fetched
            from the collector's ``GET /v1/metrics`` (and cached in the queue file, so an
            offline restart can use the last one fetched).
        batch_size: reports per uploaded batch, in [1, 1000].
        queue_path: the SQLite queue file, e.g. in the app's private data directory. None
            (the default) keeps the queue in memory: fast, but a crash loses what is queued.
        durability: ``"group"`` (default): ``report()`` returns at once and a crash loses at
            most the last ``commit_interval`` seconds of reports. ``"sync"``: ``report()``
            returns once the report is committed (and fsynced); a crash loses nothing.
        commit_interval: seconds of the group-commit window.
        max_batch_age: seconds before a partial batch is sealed and sent.
        max_queued_reports: cap on queued reports; the oldest batches are dropped beyond it.
        max_queue_age: seconds a report may wait in the queue before it is dropped.
        upload_jitter: upper bound, in seconds, of a random delay before uploading after idle.
        backoff: seconds of the first retry's backoff bound (doubling, full jitter).
        max_backoff: cap on one retry wait, in seconds.
        close_timeout: seconds ``close()`` and ``with`` wait for uploads.
        exit_timeout: seconds the atexit hook waits for uploads of a reporter left open.
        timeout: (connect, read) timeouts in seconds for every request.
        token: an ingest key, if the collector requires one.
        privacy_dir: directory of the on-device privacy state: the device secret behind the
            memoized answers and the budget ledger (docs/privacy.md). By default
            ``<queue_path>.privacy`` beside a queue file; with the in-memory queue, memory
            only (memoized answers then last as long as this Reporter).
        budgets: metric -> Budget (epsilon per period). A report that would exceed its
            metric's budget raises BudgetExceededError. Metrics without one are not capped.
        irr: metric -> an instantaneous layer (a RandomizedResponse or its id) that
            re-perturbs the memoized answer on every report, as RAPPOR's IRR does.
        fresh: metrics reported with fresh coins on every report instead of a memoized
            answer (each report then costs its full epsilon; use with a budget).
        rng: the random-bit source; the secure system source unless a test injects one.

    Raises:
        InvalidParameterError: an option out of range or an invalid catalogue.
        UploadError: the catalogue could not be fetched and none is cached.
        QueueError: the queue file cannot be opened.
    """

    def __init__(self, collector_url: str,
                 metrics: Mapping[str, RandomizedResponse | str] | None = None, *,
                 batch_size: int = DEFAULT_BATCH_SIZE,
                 queue_path: str | os.PathLike[str] | None = None,
                 durability: Durability = "group",
                 commit_interval: float = DEFAULT_COMMIT_INTERVAL,
                 max_batch_age: float = DEFAULT_MAX_BATCH_AGE,
                 max_queued_reports: int = DEFAULT_MAX_QUEUED_REPORTS,
                 max_queue_age: float = DEFAULT_MAX_QUEUE_AGE,
                 upload_jitter: float = 0.0,
                 backoff: float = DEFAULT_BACKOFF, max_backoff: float = DEFAULT_MAX_BACKOFF,
                 close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
                 exit_timeout: float = DEFAULT_EXIT_TIMEOUT,
                 timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 token: str | None = None,
                 privacy_dir: str | os.PathLike[str] | None = None,
                 budgets: Mapping[str, Budget] | None = None,
                 irr: Mapping[str, RandomizedResponse | str] | None = None,
                 fresh: Collection[str] = (),
                 rng: RandomBits | None = None) -> None:
        self.collector_url = collector_url
        self.batch_size = batch_size
        self.close_timeout = close_timeout
        self.exit_timeout = exit_timeout
        self._rng = rng
        self._timeout = timeout
        self._token = token
        self._queue = DurableQueue(queue_path, durability=durability, batch_size=batch_size,
                                   commit_interval=commit_interval, max_batch_age=max_batch_age,
                                   max_queued_reports=max_queued_reports,
                                   max_queue_age=max_queue_age, on_sealed=self._on_sealed)
        try:
            self._sender = Sender(self._queue, self._new_transport, backoff=backoff,
                                  max_backoff=max_backoff, upload_jitter=upload_jitter)
            self._catalogue: Catalogue = (coerce_catalogue(metrics) if metrics is not None
                                          else self._fetch_catalogue())
        except BaseException:
            self._queue.close()
            raise
        # metric -> (mechanism, its id): the id is computed once, not per report.
        self._entries = {name: (m, m.id) for name, m in self._catalogue.items()}
        if privacy_dir is None and queue_path is not None:
            privacy_dir = f"{os.fspath(queue_path)}.privacy"
        try:
            self._guard = LongitudinalGuard(
                privacy_dir, budgets=budgets, fresh=fresh, rng=rng,
                irr={name: (layer if isinstance(layer, RandomizedResponse)
                            else RandomizedResponse.from_id(layer))
                     for name, layer in (irr or {}).items()})
            self._guard.check(self._catalogue)
        except BaseException:
            self._queue.close()
            raise
        self._put = self._queue.put_sync if durability == "sync" else self._queue.put
        self._closed = False
        self._close_lock = threading.Lock()
        self._queue.start()
        self._sender.start()
        with _OPEN_LOCK:
            _OPEN.add(self)

    # -- configuration ---------------------------------------------------------------------

    @property
    def metrics(self) -> Catalogue:
        """The metrics this reporter knows: name -> mechanism (a copy)."""
        return dict(self._catalogue)

    def _new_transport(self) -> Transport:
        return Transport(self.collector_url, timeout=self._timeout, retries=0,
                         token=self._token)

    def _fetch_catalogue(self) -> Catalogue:
        transport = Transport(self.collector_url, timeout=self._timeout, retries=2,
                              backoff=0.1, token=self._token)
        try:
            catalogue = transport.fetch_catalogue_document()
        except UploadError:
            cached = self._queue.get_meta(_CATALOGUE_META)
            if cached is None:
                raise
            log.warning("deniable: the collector is unreachable; using the cached catalogue")
            return parse_catalogue(json.loads(cached))
        finally:
            transport.close()
        parsed = parse_catalogue(catalogue)
        self._queue.set_meta(_CATALOGUE_META, json.dumps(catalogue))
        return parsed

    # -- reporting -------------------------------------------------------------------------

    def report(self, metric: str, true_value: bool) -> None:
        """Perturb ``true_value`` for ``metric`` and queue the perturbed bit.

        Never touches the network. In ``"sync"`` durability, returns once the bit is
        committed to the queue file.

        Raises:
            UnknownMetricError: a metric this reporter was not configured with.
            InvalidParameterError: ``true_value`` is not a bool (or 0/1).
            BudgetExceededError: the privacy budget refused the report (counted in
                ``stats().budget_refused``; nothing was queued).
            QueueError: the reporter is closed, or (sync) the bit could not be committed.
        """
        entry = self._entries.get(metric)
        if entry is None:
            lookup(self._catalogue, metric)  # raises UnknownMetricError
            raise AssertionError("unreachable")
        if not (true_value is True or true_value is False or true_value in (0, 1)):
            raise InvalidParameterError(
                f"true_value must be a bool. Got a {type(true_value).__name__} instead.")
        mechanism, mechanism_id = entry
        try:
            bit = self._perturb(metric, mechanism, true_value)
        except BudgetExceededError:
            self._queue.count_budget_refused()
            raise
        self._put((metric, mechanism_id, bit))

    def _perturb(self, metric: str, mechanism: RandomizedResponse, true_value: bool) -> int:
        """The one place a true value becomes a perturbed bit: the privacy layer.

        Memoized by default (repeats of a value reveal nothing new), with the metric's
        instantaneous layer and budget if it has them. May raise ``BudgetExceededError``,
        which ``report()`` counts and lets propagate.
        """
        return self._guard.perturb(metric, mechanism, true_value)

    def privacy_loss(self, metric: str) -> PrivacyLoss:
        """One-report, long-run and lifetime epsilon of ``metric`` on this device."""
        mechanism = lookup(self._catalogue, metric)
        return self._guard.privacy_loss(metric, mechanism)

    # -- introspection ---------------------------------------------------------------------

    def stats(self) -> Stats:
        """Queued, sent, dropped, dead-lettered and budget-refused report counts."""
        return self._queue.stats()

    def ledger(self) -> dict[str, LedgerEntry]:
        """metric -> perturbed bits committed to the queue (handed over) and sent."""
        return self._queue.ledger()

    def dead_letters(self) -> list[DeadLetter]:
        """Batches the collector refused with a 4xx other than 429, with its reasons."""
        return self._queue.dead_letters()

    @property
    def last_error(self) -> str | None:
        """The latest upload failure (None after a success), for diagnostics."""
        return self._sender.last_error

    # -- flushing and shutdown -------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Commit and seal everything queued, upload it now, and wait up to ``timeout``.

        Args:
            timeout: seconds to wait; ``close_timeout`` by default.

        Returns:
            True if the queue was empty at return: every report handed over so far was sent
            (or dead-lettered or dropped, see ``stats()``). False at the deadline; nothing
            is lost then: the queue keeps the rest and keeps retrying.
        """
        if self._queue.closed:
            raise QueueError("the reporter is closed")
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        self._queue.commit(seal_all=True)
        self._sender.hurry()
        while True:
            if not self._queue.has_work():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._queue.has_pending():  # reports arrived meanwhile (other threads)
                self._queue.commit(seal_all=True)
                self._sender.hurry()
            self._sender.wait_for_progress(min(left, 0.1))

    def close(self, timeout: float | None = None) -> bool:
        """Flush with a deadline, stop the threads and close the queue. Idempotent.

        What is not sent by the deadline stays in the queue file (sent on the next start);
        with the in-memory queue it is lost, and ``stats().queued`` said how much.

        Returns:
            True if everything was sent before closing.
        """
        with self._close_lock:
            if self._closed:
                return True
            self._closed = True
        with _OPEN_LOCK:
            _OPEN.discard(self)
        drained = False
        try:
            drained = self.flush(timeout)
        finally:
            self._sender.stop(timeout=1.0)
            self._queue.close()
            self._guard.close()
        if not drained:
            log.warning("deniable: closed with reports still queued")
        return drained

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- threads, fork, exit ---------------------------------------------------------------

    def _on_sealed(self) -> None:
        self._sender.wake()

    def _after_fork_in_child(self) -> None:
        self._close_lock = threading.Lock()
        self._queue.after_fork_in_child()
        self._sender.after_fork_in_child()


def _close_all_at_exit() -> None:
    with _OPEN_LOCK:
        reporters = list(_OPEN)
    for reporter in reporters:
        try:
            reporter.close(timeout=reporter.exit_timeout)
        except Exception:  # never fail the app's exit
            log.exception("deniable: closing a reporter at exit failed")


_FORK_HELD: list[Reporter] = []


def _before_fork() -> None:
    # Hold every queue's lock across fork(): then none of our threads is inside SQLite (whose
    # global mutexes a child would otherwise inherit locked) at the moment of the fork.
    _OPEN_LOCK.acquire()
    _FORK_HELD[:] = list(_OPEN)
    for reporter in _FORK_HELD:
        reporter._queue.hold_for_fork()


def _after_fork_in_parent() -> None:
    for reporter in _FORK_HELD:
        reporter._queue.release_after_fork()
    _FORK_HELD.clear()
    _OPEN_LOCK.release()


def _restart_in_child() -> None:
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    _FORK_HELD.clear()
    for reporter in list(_OPEN):
        if not reporter._closed:
            reporter._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_restart_in_child)
