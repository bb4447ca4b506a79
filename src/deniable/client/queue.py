"""The on-device queue: perturbed reports in SQLite (WAL mode), sealed into batches with fixed ids.

Only ``(metric, mechanism id, perturbed payload[, public dims])`` reports are ever stored; true
values never reach this module. The payload is the report's wire value: a bit (``rr:``,
``bm:``), a category index (``grr:``) or an OUE bitset's hex (``oue:``). The dims are the
report's public dimension values (in clear, not protected by local DP), as compact JSON text
(``dims_text``), empty for none. The tables::

    pending(seq, metric, mechanism, bit, queued_at, payload, dims)
                                                      committed reports not yet in a batch:
                                                      ``bit`` for the one-bit kinds, ``payload``
                                                      (an int or text, NULL for bits) for the
                                                      others (schema 2 added it to schema 1's
                                                      table in place; nothing is rewritten),
                                                      ``dims`` ('' for none; schema 3 added it
                                                      in place the same way)
    batches(seq, batch_id, body, n_reports, ...)      sealed batches: the exact bytes to POST
    dead_letter(batch_id, body, status, reason, ...)  batches the collector refused (400/409/413/422)
    refused(seq, metric, mechanism, payload, dims,    reports of the metrics the collector refused
            status, reason, refused_at)               per metric (lenient handling), kept with
                                                      its reason until ``retry_refused``; a newer
                                                      table that an older client ignores
    ledger(metric, mechanism, handed_*, sent_*)       perturbed bits handed over and sent
                                                      (``*_ones`` counts ones of the one-bit
                                                      kinds; categorical reports count in n only)
    counters(name, value)                             sent, dropped, dead_lettered, ...

Durability:
- ``"group"`` (default): ``put`` appends to an in-memory buffer (about a microsecond). A
  background committer writes the buffer to SQLite in one transaction ``commit_interval``
  seconds after the first report that found it empty (or at once when it holds
  ``max_buffer`` reports). A crash therefore loses only reports handed over in the last
  ``commit_interval`` seconds plus the time the commit in flight takes (see docs/client.md).
- ``"sync"``: ``put_sync`` returns only after the report's transaction has committed
  (``synchronous=FULL``: also fsynced). Threads that call it together share one commit.

A batch is sealed (given its random id, in the same transaction that moves its reports out of
``pending``) when ``batch_size`` reports are pending or the oldest has waited
``max_batch_age`` seconds. Its bytes never change afterwards, so every retry, in this process
or after a restart, re-sends the same id. Several processes may share one queue file: SQLite's
locks serialise sealing, and an acknowledgement counts only once.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deniable.client.doorbell import Doorbell
from deniable.client.errors import InvalidParameterError, QueueError
from deniable.client.kinds import payload_field
from deniable.client.stats import DeadLetter, LedgerEntry, Stats
from deniable.client.wire import DEFAULT_MAX_REPORTS, encode_batch, new_batch_id

log = logging.getLogger("deniable.client")

Durability = Literal["group", "sync"]
Item = tuple[str, str, "int | str"] | tuple[str, str, "int | str", str]
"""One queued report: (metric, mechanism id, perturbed payload: a bit or index, or hex), and
optionally its public dimensions as ``dims_text`` gives them ('' for none)."""

SCHEMA_VERSION = 3
"""1: reports were bits only. 2: ``pending.payload`` holds the other kinds' payloads.
3: ``pending.dims`` holds each report's public dimensions. An older file is upgraded in place
when opened (one ALTER TABLE per step, no rows rewritten)."""
DEFAULT_COMMIT_INTERVAL = 0.05
"""Seconds the group committer gathers reports before one commit: the crash-loss window."""
DEFAULT_MAX_BUFFER = 20_000
"""Reports in memory that trigger a commit at once, before the window ends."""
DEFAULT_MAX_BATCH_AGE = 15.0
"""Seconds the oldest pending report waits before a partial batch is sealed."""
DEFAULT_MAX_QUEUED_REPORTS = 1_000_000
"""Cap on reports held in the queue (about 60 MB of SQLite at most, plus the dims text of
reports that carry public dimensions); the oldest batches are dropped beyond it."""
DEFAULT_MAX_QUEUE_AGE = 7 * 24 * 3600.0
"""Seconds a report may wait in the queue before it is dropped: 7 days, the collector's
batch-id memory, so a re-sent batch is always still recognised."""
COUNTER_NAMES = ("sent", "dropped", "dead_lettered", "budget_refused", "not_ready", "withheld",
                 "refused")
REFUSAL_COUNTERS = ("budget_refused", "not_ready", "withheld")
"""Counters of ``report()`` calls that queued nothing, counted through ``count_refused``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    metric TEXT NOT NULL, mechanism TEXT NOT NULL, bit INTEGER NOT NULL CHECK (bit IN (0, 1)),
    queued_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE, body BLOB NOT NULL, n_reports INTEGER NOT NULL,
    sealed_at REAL NOT NULL, oldest_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letter (
    batch_id TEXT PRIMARY KEY, body BLOB NOT NULL, n_reports INTEGER NOT NULL,
    status INTEGER, reason TEXT NOT NULL, dead_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    metric TEXT NOT NULL, mechanism TEXT NOT NULL,
    handed_n INTEGER NOT NULL DEFAULT 0, handed_ones INTEGER NOT NULL DEFAULT 0,
    sent_n INTEGER NOT NULL DEFAULT 0, sent_ones INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (metric, mechanism));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refused (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    metric TEXT NOT NULL, mechanism TEXT NOT NULL, payload, dims TEXT NOT NULL DEFAULT '',
    status INTEGER, reason TEXT NOT NULL, refused_at REAL NOT NULL);
"""

# Connections left open in a forked child: SQLite forbids using (or closing) a parent's
# connection in a child, so the child keeps the object alive and never touches it.
_ABANDONED: list[sqlite3.Connection] = []


@dataclass(frozen=True)
class SealedBatch:
    """A sealed batch: its id, the exact body bytes to POST, and its report count."""

    batch_id: str
    body: bytes
    n_reports: int


class DurableQueue:
    """Perturbed reports on their way to the collector, in a SQLite file.

    Args:
        path: the SQLite file, created with mode 0600 if missing. None keeps the queue in
            memory only: nothing survives the process.
        durability: ``"group"`` or ``"sync"`` (see the module docstring).
        batch_size: reports per sealed batch, in [1, 1000].
        commit_interval: seconds of the group-commit window.
        max_batch_age: seconds before a partial batch is sealed.
        max_queued_reports: cap on queued reports; the oldest batches are dropped beyond it.
        max_queue_age: seconds a report may wait before it is dropped.
        max_buffer: in-memory reports that trigger an immediate commit.
        on_sealed: called (from the committer thread) after new batches were sealed.
        clock: wall-clock seconds, for ages that must survive restarts.

    Raises:
        InvalidParameterError: a parameter out of range.
        QueueError: the file cannot be opened or holds a newer schema.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 durability: Durability = "group", batch_size: int = 100,
                 commit_interval: float = DEFAULT_COMMIT_INTERVAL,
                 max_batch_age: float = DEFAULT_MAX_BATCH_AGE,
                 max_queued_reports: int = DEFAULT_MAX_QUEUED_REPORTS,
                 max_queue_age: float = DEFAULT_MAX_QUEUE_AGE,
                 max_buffer: int = DEFAULT_MAX_BUFFER,
                 on_sealed: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if durability not in ("group", "sync"):
            raise InvalidParameterError(
                f"durability must be 'group' or 'sync'. Got {durability!r} instead.")
        if not 1 <= batch_size <= DEFAULT_MAX_REPORTS:
            raise InvalidParameterError(
                f"batch_size must lie in [1, {DEFAULT_MAX_REPORTS}]. Got {batch_size} instead.")
        for name, value in (("commit_interval", commit_interval),
                            ("max_batch_age", max_batch_age), ("max_queue_age", max_queue_age)):
            if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise InvalidParameterError(
                    f"{name} must be a finite number of seconds >= 0. Got {value!r} instead.")
        if max_queued_reports < batch_size:
            raise InvalidParameterError(
                f"max_queued_reports must be at least batch_size ({batch_size}). "
                f"Got {max_queued_reports} instead.")
        if max_buffer < 1:
            raise InvalidParameterError(f"max_buffer must be at least 1. Got {max_buffer}.")
        self.path = None if path is None else Path(path)
        self.durability: Durability = durability
        self.batch_size = batch_size
        self.commit_interval = float(commit_interval)
        self.max_batch_age = float(max_batch_age)
        self.max_queued_reports = max_queued_reports
        self.max_queue_age = float(max_queue_age)
        self.max_buffer = max_buffer
        self._on_sealed = on_sealed
        self._clock = clock
        self._init_runtime()
        self._db = self._connect()

    # -- set-up ----------------------------------------------------------------------------

    def _init_runtime(self) -> None:
        self._buffer_lock = threading.Lock()   # guards _buffer, _appended, _refused
        self._db_lock = threading.RLock()      # guards the connection and _committed
        self._buffer: list[Item] = []
        self._appended = 0                     # items ever appended to _buffer
        self._committed = 0                    # items of _buffer ever committed (or failed)
        self._refused: Counter[str] = Counter()  # refusal counts not yet written to counters
        self._in_flight: str | None = None     # the batch the sender is uploading
        self._wake = Doorbell()                # buffer became non-empty, or stop
        self._urgent = Doorbell()              # buffer is full, or flush/stop
        self._stopping = False
        self._closed = False
        self._discarding = False               # erase(discard=True): puts are dropped
        self._thread: threading.Thread | None = None
        self._oldest_pending: float | None = None

    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        try:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            db = sqlite3.connect(target, isolation_level=None, check_same_thread=False,
                                 timeout=30.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                db.close()
                raise QueueError(f"{target} holds queue schema {version}; this client "
                                 f"understands up to {SCHEMA_VERSION}")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(pending)")}
            if "payload" not in columns:  # a new file, or schema 1: add it in place
                db.execute("ALTER TABLE pending ADD COLUMN payload")
            if "dims" not in columns:  # a new file, or schema 1 or 2: add it in place
                db.execute("ALTER TABLE pending ADD COLUMN dims TEXT NOT NULL DEFAULT ''")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            row = db.execute("SELECT MIN(queued_at) FROM pending").fetchone()
            self._oldest_pending = row[0]
        except (sqlite3.Error, OSError) as exc:
            raise QueueError(f"cannot open the queue at {target}: {exc}") from exc
        return db

    def start(self) -> None:
        """Start the background committer thread (a daemon)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="deniable-committer",
                                            daemon=True)
            self._thread.start()
            if self._oldest_pending is not None:
                self._wake.set()

    def hold_for_fork(self) -> None:
        """Before fork(): wait until no thread of ours is inside SQLite, and keep it so."""
        self._db_lock.acquire()

    def release_after_fork(self) -> None:
        """After fork(), in the parent: undo ``hold_for_fork``."""
        self._db_lock.release()

    def after_fork_in_child(self) -> None:
        """Called in a forked child: fresh locks, no parent buffer, a new connection.

        The parent's buffered reports stay the parent's to commit, so the child must not
        commit its copy of them. The parent's connection is abandoned, never used.
        """
        was_started = self._thread is not None
        _ABANDONED.append(self._db)
        self._init_runtime()
        self._db = self._connect()
        if was_started:
            self.start()

    # -- the hot path ----------------------------------------------------------------------

    def put(self, item: Item) -> None:
        """Queue one report in memory; the committer writes it within ``commit_interval``."""
        with self._buffer_lock:
            if self._closed:
                raise QueueError("the queue is closed")
            if self._discarding:
                return
            buffer = self._buffer
            buffer.append(item)
            self._appended += 1
            n = len(buffer)
        if n == 1:
            self._wake.set()
        elif n >= self.max_buffer:
            self._urgent.set()

    def put_sync(self, item: Item) -> None:
        """Queue one report and return only once it is committed to SQLite."""
        with self._buffer_lock:
            if self._closed:
                raise QueueError("the queue is closed")
            if self._discarding:
                return
            self._buffer.append(item)
            self._appended += 1
            mine = self._appended
        with self._db_lock:
            before = self._oldest_pending
            if self._committed < mine:  # else another thread's commit already carried it
                self._commit(seal=True)
            if self._committed < mine:
                raise QueueError("the report could not be committed to the queue; it stays "
                                 "buffered and a later commit may still carry it")
        if before is None and self._oldest_pending is not None:
            self._wake.set()  # let the committer time the age of the new partial batch

    def count_budget_refused(self) -> None:
        """Count one report refused by the privacy budget (written with the next commit)."""
        self.count_refused("budget_refused")

    def count_refused(self, counter: str) -> None:
        """Count one ``report()`` call that queued nothing, under ``counter`` (one of
        ``REFUSAL_COUNTERS``); written with the next commit."""
        with self._buffer_lock:
            if self._discarding:
                return
            self._refused[counter] += 1
        self._wake.set()

    # -- committing and sealing ------------------------------------------------------------

    def commit(self, *, seal_all: bool = False, timeout: float | None = None) -> bool:
        """Write the buffer to SQLite now; seal full (or, with ``seal_all``, all) batches.

        With ``timeout`` (seconds), give up if another thread holds the file that long (a
        caller with a deadline, such as ``flush``); the buffer then waits for the next commit.
        Returns whether the commit ran.
        """
        if not self._db_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        try:
            self._commit(seal=True, seal_all=seal_all)
        finally:
            self._db_lock.release()
        return True

    def _commit(self, *, seal: bool, seal_all: bool = False) -> None:
        with self._buffer_lock:
            items, self._buffer = self._buffer, []
            upto = self._appended
            refused, self._refused = self._refused, Counter()
        now = self._clock()
        sealed = 0
        db = self._db
        try:
            with _write_transaction(db):
                if items:
                    db.executemany(
                        "INSERT INTO pending (metric, mechanism, bit, payload, queued_at, "
                        "dims) VALUES (?, ?, ?, ?, ?, ?)", [_row(item, now) for item in items])
                    db.executemany(
                        "INSERT INTO ledger (metric, mechanism, handed_n, handed_ones) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (metric, mechanism) DO UPDATE SET "
                        "handed_n = handed_n + excluded.handed_n, "
                        "handed_ones = handed_ones + excluded.handed_ones",
                        _tally(items))
                for name, value in refused.items():
                    self._add_counter(name, value)
                if seal:
                    dropped = self._drop_stale(now)  # before sealing: a fresh report never
                    sealed = self._seal(now, seal_all)  # shares a batch with a stale one
                    self._enforce_size_cap(dropped)
        except sqlite3.Error as exc:
            # Keep the reports: put them back in front of whatever arrived meanwhile.
            with self._buffer_lock:
                self._buffer[:0] = items
                self._refused.update(refused)
            log.warning("deniable: committing the queue failed (%s); will retry",
                        type(exc).__name__)
            return
        self._committed = upto
        if seal:
            row = db.execute("SELECT MIN(queued_at) FROM pending").fetchone()
            self._oldest_pending = row[0]
        if sealed and self._on_sealed is not None:
            self._on_sealed()

    def _seal(self, now: float, seal_all: bool) -> int:
        """Seal pending reports into batches, inside the caller's transaction."""
        db = self._db
        count, oldest = db.execute("SELECT COUNT(*), MIN(queued_at) FROM pending").fetchone()
        sealed = 0
        if count == 0:
            return 0
        aged = seal_all or (oldest is not None and now - oldest >= self.max_batch_age)
        while count >= self.batch_size or (aged and count > 0):
            rows = _one_mechanism_per_metric(db.execute(
                "SELECT seq, metric, mechanism, COALESCE(payload, bit), queued_at, dims "
                "FROM pending ORDER BY seq LIMIT ?", (self.batch_size,)).fetchall())
            batch_id = new_batch_id()
            parsed: dict[str, dict[str, str] | None] = {"": None}
            body = json.dumps(encode_batch(batch_id, (
                (m, k, b, parsed[d] if d in parsed else parsed.setdefault(d, json.loads(d)))
                for _, m, k, b, _, d in rows)), separators=(",", ":")).encode()
            db.execute("INSERT INTO batches (batch_id, body, n_reports, sealed_at, oldest_at) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (batch_id, body, len(rows), now, min(r[4] for r in rows)))
            db.execute("DELETE FROM pending WHERE seq <= ?", (rows[-1][0],))
            count -= len(rows)
            sealed += 1
        return sealed

    def _drop_stale(self, now: float) -> int:
        """Delete reports older than ``max_queue_age``; return how many."""
        db = self._db
        cutoff = now - self.max_queue_age
        in_flight = self._in_flight or ""
        row = db.execute("SELECT COALESCE(SUM(n_reports), 0) FROM batches "
                         "WHERE oldest_at < ? AND batch_id != ?", (cutoff, in_flight)).fetchone()
        dropped = int(row[0])
        if dropped:
            db.execute("DELETE FROM batches WHERE oldest_at < ? AND batch_id != ?",
                       (cutoff, in_flight))
        stale = db.execute("DELETE FROM pending WHERE queued_at < ?", (cutoff,)).rowcount
        return dropped + max(stale, 0)

    def _enforce_size_cap(self, dropped: int) -> None:
        """Drop the oldest batches (never the one in flight) beyond ``max_queued_reports``."""
        db = self._db
        in_flight = self._in_flight or ""
        pending = db.execute("SELECT COUNT(*) FROM pending").fetchone()[0]
        in_batches = db.execute("SELECT COALESCE(SUM(n_reports), 0) FROM batches").fetchone()[0]
        excess = pending + in_batches - self.max_queued_reports
        while excess > 0:
            victim = db.execute("SELECT batch_id, n_reports FROM batches WHERE batch_id != ? "
                                "ORDER BY seq LIMIT 1", (in_flight,)).fetchone()
            if victim is None:
                break
            db.execute("DELETE FROM batches WHERE batch_id = ?", (victim[0],))
            dropped += victim[1]
            excess -= victim[1]
        if dropped:
            self._add_counter("dropped", dropped)
            log.warning("deniable: the queue was full or stale; dropped %d reports", dropped)

    def _add_counter(self, name: str, value: int) -> None:
        self._db.execute("INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) "
                         "DO UPDATE SET value = value + excluded.value", (name, value))

    # -- the sender's side -----------------------------------------------------------------

    def next_batch(self) -> SealedBatch | None:
        """The oldest sealed batch, now marked in flight (never dropped by the caps)."""
        with self._db_lock:
            row = self._db.execute("SELECT batch_id, body, n_reports FROM batches "
                                   "ORDER BY seq LIMIT 1").fetchone()
            if row is None:
                self._in_flight = None
                return None
            self._in_flight = row[0]
            return SealedBatch(row[0], bytes(row[1]), row[2])

    def ack(self, batch_id: str, refused: Mapping[str, str] | None = None, *,
            status: int | None = None, nothing_counted: bool = False) -> bool:
        """The collector answered: remove the batch and count it sent, exactly once.

        Args:
            batch_id: the batch answered.
            refused: metric -> reason, the metrics whose reports the collector refused
                (the answer's ``refused`` member): their reports move to the refused table,
                counted in ``Stats.refused``; the others count as sent.
            status: the answer's HTTP status, kept with the refused reports.
            nothing_counted: the collector counted none of the batch (a 422 refusing every
                metric): every report is kept as refused, none counts as sent.

        Returns False if the batch was no longer queued (another process sharing the file
        acknowledged it first); nothing is counted then.
        """
        with self._db_lock:
            db = self._db
            with _write_transaction(db):
                row = _take_batch(db, batch_id)
                if row is not None:
                    reports = json.loads(row[0])["reports"]
                    if refused or nothing_counted:
                        refused = refused or {}
                        held = [r for r in reports if nothing_counted or r["metric"] in refused]
                        reports = [r for r in reports
                                   if not (nothing_counted or r["metric"] in refused)]
                        now = self._clock()
                        db.executemany(
                            "INSERT INTO refused (metric, mechanism, payload, dims, status, "
                            "reason, refused_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [(r["metric"], r["mechanism"], r[payload_field(r["mechanism"])],
                              dims_text(r.get("dims")), status,
                              refused.get(r["metric"], "refused by the collector")[:2000], now)
                             for r in held])
                        self._add_counter("refused", len(held))
                    self._add_counter("sent", len(reports))
                    db.executemany(
                        "UPDATE ledger SET sent_n = sent_n + ?, sent_ones = sent_ones + ? "
                        "WHERE metric = ? AND mechanism = ?",
                        [(n, ones, m, k) for m, k, n, ones in _tally(
                            (r["metric"], r["mechanism"], r.get("bit", 0)) for r in reports)])
            if self._in_flight == batch_id:
                self._in_flight = None
            return row is not None

    def retry_refused(self, metric: str | None = None) -> int:
        """Queue the reports the collector refused (of ``metric``, or of every metric) again,
        in new batches: it never counted them, so a new batch id counts them once. Returns
        the number of reports requeued (taken off ``refused`` and back in ``queued``)."""
        sealed = 0
        with self._db_lock:
            db = self._db
            with _write_transaction(db):
                where, args = ("WHERE metric = ?", (metric,)) if metric is not None else ("", ())
                rows = db.execute(f"SELECT metric, mechanism, payload, dims FROM refused "
                                  f"{where} ORDER BY seq", args).fetchall()
                now = self._clock()
                db.executemany(
                    "INSERT INTO pending (metric, mechanism, bit, payload, queued_at, dims) "
                    "VALUES (?, ?, ?, ?, ?, ?)", [_row(tuple(r), now) for r in rows])
                db.execute(f"DELETE FROM refused {where}", args)
                if rows:
                    self._add_counter("refused", -len(rows))
                    sealed = self._seal(now, seal_all=True)
        if rows:
            self._oldest_pending = None
            if sealed and self._on_sealed is not None:
                self._on_sealed()
        return len(rows)

    def dead_letter(self, batch_id: str, status: int | None, reason: str) -> bool:
        """The collector refused the batch for good: move it to the dead-letter table."""
        with self._db_lock:
            db = self._db
            with _write_transaction(db):
                row = _take_batch(db, batch_id)
                if row is not None:
                    db.execute("INSERT OR REPLACE INTO dead_letter (batch_id, body, n_reports, "
                               "status, reason, dead_at) VALUES (?, ?, ?, ?, ?, ?)",
                               (batch_id, row[0], row[1], status, reason[:2000], self._clock()))
                    self._add_counter("dead_lettered", row[1])
            if self._in_flight == batch_id:
                self._in_flight = None
            return row is not None

    def retry_dead_letters(self) -> int:
        """Move every dead-lettered batch back into the queue, oldest first, unchanged.

        Each keeps its batch id and bytes: the collector refused it (400/422) and so never
        counted it, and a re-send is counted at most once. Returns the number of reports
        requeued (taken off ``dead_lettered`` and back in ``queued``).
        """
        with self._db_lock:
            db = self._db
            with _write_transaction(db):
                rows = db.execute("SELECT batch_id, body, n_reports FROM dead_letter "
                                  "ORDER BY dead_at, batch_id").fetchall()
                now = self._clock()
                db.executemany("INSERT OR IGNORE INTO batches (batch_id, body, n_reports, "
                               "sealed_at, oldest_at) VALUES (?, ?, ?, ?, ?)",
                               [(b, body, n, now, now) for b, body, n in rows])
                db.execute("DELETE FROM dead_letter")
                n_reports = sum(int(r[2]) for r in rows)
                if n_reports:
                    self._add_counter("dead_lettered", -n_reports)
        if rows and self._on_sealed is not None:
            self._on_sealed()
        return n_reports

    def erase(self, *, discard: bool) -> int:
        """Delete every report and count: the memory buffer, pending reports, sealed
        batches, dead letters, refused reports, the ledger and the counters (the cached
        catalogue stays: it holds nothing of the device). The file is then vacuumed, so no
        deleted page keeps them. With ``discard``, later ``put`` calls are dropped (and
        refusals not counted) until ``erase(discard=False)``. Returns the reports deleted.
        """
        with self._db_lock:
            with self._buffer_lock:
                self._discarding = discard
                dropped = len(self._buffer)
                self._buffer = []
                self._committed = self._appended
                self._refused = Counter()
            db = self._db
            with _write_transaction(db):
                dropped += db.execute("SELECT COUNT(*) FROM pending").fetchone()[0]
                dropped += db.execute(
                    "SELECT COALESCE(SUM(n_reports), 0) FROM batches").fetchone()[0]
                for table in ("pending", "batches", "dead_letter", "refused", "ledger",
                              "counters"):
                    db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            self._oldest_pending = None
            self._in_flight = None
            try:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:  # the rows are gone either way
                log.warning("deniable: compacting the queue after erasing it failed (%s)",
                            type(exc).__name__)
        return int(dropped)

    def refused_mechanisms(self) -> dict[str, set[str]]:
        """metric -> the mechanism ids of its refused reports (those kept for
        ``retry_refused``)."""
        with self._db_lock:
            rows = self._db.execute("SELECT DISTINCT metric, mechanism FROM refused").fetchall()
        found: dict[str, set[str]] = {}
        for metric, mechanism in rows:
            found.setdefault(metric, set()).add(mechanism)
        return found

    # -- reading ---------------------------------------------------------------------------

    def stats(self) -> Stats:
        """Counts of reports; see ``Stats``.

        The buffer is read under the database lock, which every commit holds: a commit
        moving reports or refusal counts from the buffer to SQLite cannot run in between,
        so nothing is counted twice or missed.
        """
        with self._db_lock:
            with self._buffer_lock:
                buffered, refused = len(self._buffer), Counter(self._refused)
            db = self._db
            pending = db.execute("SELECT COUNT(*) FROM pending").fetchone()[0]
            in_batches = db.execute(
                "SELECT COALESCE(SUM(n_reports), 0) FROM batches").fetchone()[0]
            counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
            refused_metrics = dict(db.execute(
                "SELECT metric, reason FROM refused WHERE seq IN "
                "(SELECT MAX(seq) FROM refused GROUP BY metric) ORDER BY metric").fetchall())
        return Stats(refused=counters.get("refused", 0), refused_metrics=refused_metrics,
                     queued=buffered + pending + in_batches,
                     sent=counters.get("sent", 0), dropped=counters.get("dropped", 0),
                     dead_lettered=counters.get("dead_lettered", 0),
                     budget_refused=counters.get("budget_refused", 0) + refused["budget_refused"],
                     not_ready=counters.get("not_ready", 0) + refused["not_ready"],
                     withheld=counters.get("withheld", 0) + refused["withheld"])

    def ledger(self) -> dict[str, LedgerEntry]:
        """metric -> perturbed bits handed over and sent (committed reports only)."""
        with self._db_lock:
            rows = self._db.execute("SELECT metric, mechanism, handed_n, handed_ones, sent_n, "
                                    "sent_ones FROM ledger ORDER BY metric").fetchall()
        return {r[0]: LedgerEntry(*r) for r in rows}

    def dead_letters(self) -> list[DeadLetter]:
        """The refused batches, oldest first, with the collector's reasons."""
        with self._db_lock:
            rows = self._db.execute("SELECT batch_id, n_reports, status, reason, dead_at "
                                    "FROM dead_letter ORDER BY dead_at").fetchall()
        return [DeadLetter(*r) for r in rows]

    def has_work(self, timeout: float | None = None) -> bool:
        """Whether any report is buffered, pending or in a sealed batch (True if the file is
        busy for longer than ``timeout`` seconds: the caller then assumes work is left)."""
        return self._buffered_or(
            "SELECT EXISTS (SELECT 1 FROM pending) OR EXISTS (SELECT 1 FROM batches)", timeout)

    def has_pending(self, timeout: float | None = None) -> bool:
        """Whether any report is buffered or committed but not yet sealed into a batch (False
        if the file is busy for longer than ``timeout`` seconds)."""
        return self._buffered_or("SELECT EXISTS (SELECT 1 FROM pending)", timeout, busy=False)

    def _buffered_or(self, exists_query: str, timeout: float | None = None,
                     busy: bool = True) -> bool:
        """Whether the memory buffer holds a report, else whether ``exists_query`` holds;
        ``busy`` if the file stays locked past ``timeout``."""
        with self._buffer_lock:
            if self._buffer:
                return True
        if not self._db_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return busy
        try:
            return bool(self._db.execute(exists_query).fetchone()[0] == 1)
        finally:
            self._db_lock.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def get_meta(self, name: str) -> str | None:
        with self._db_lock:
            row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, name: str, value: str) -> None:
        with self._db_lock:
            self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                             (name, value))

    # -- the committer thread --------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping:
            oldest = self._oldest_pending
            timeout = (None if oldest is None
                       else max(0.0, oldest + self.max_batch_age - self._clock()) + 0.001)
            self._wake.wait(timeout)
            if self._stopping:
                break
            if self.durability == "group" and self._buffer:
                self._urgent.wait(self.commit_interval)  # the group-commit window
            self._wake.clear()
            self._urgent.clear()
            try:
                self.commit()
            except Exception:  # never let the committer die: the app keeps reporting
                log.exception("deniable: the queue committer failed; retrying")
                time.sleep(min(1.0, self.commit_interval * 10 or 0.1))

    def stop(self, timeout: float | None = None) -> None:
        """Stop the committer, then commit whatever is still buffered."""
        self._stopping = True
        self._wake.set()
        self._urgent.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.commit()

    def close(self) -> None:
        """Stop the committer, commit the buffer, close the file. Further puts raise."""
        if self._closed:
            return
        self.stop()
        with self._buffer_lock:
            self._closed = True
        with self._db_lock:
            self._db.close()


@contextlib.contextmanager
def _write_transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed if the block succeeds, rolled back if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _take_batch(db: sqlite3.Connection, batch_id: str) -> tuple[bytes, int] | None:
    """Remove a sealed batch from the queue; return its (body, n_reports), None if gone."""
    row = db.execute("SELECT body, n_reports FROM batches WHERE batch_id = ?",
                     (batch_id,)).fetchone()
    if row is None:
        return None
    db.execute("DELETE FROM batches WHERE batch_id = ?", (batch_id,))
    return bytes(row[0]), int(row[1])


def dims_text(dims: Mapping[str, str] | None) -> str:
    """A report's public dimension values as the queue stores them: compact JSON with sorted
    names, '' for none."""
    if not dims:
        return ""
    return json.dumps(dict(sorted(dims.items())), separators=(",", ":"))


def _row(item: Item, now: float) -> tuple[str, str, int, int | str | None, float, str]:
    """The pending row of a report: a one-bit kind's bit in ``bit`` (``payload`` NULL, as
    schema 1 stored it); another kind's index or hex in ``payload`` (``bit`` 0); its dims
    text ('' for none)."""
    metric, mechanism, value = item[0], item[1], item[2]
    dims = item[3] if len(item) > 3 else ""
    if _is_bit(mechanism):
        return metric, mechanism, value, None, now, dims  # type: ignore[return-value]
    return metric, mechanism, 0, value, now, dims


def _is_bit(mechanism_id: str) -> bool:
    """Whether reports under ``mechanism_id`` carry one bit (``rr:`` and ``bm:``)."""
    return mechanism_id.startswith(("rr:", "bm:"))


def _one_mechanism_per_metric(rows: list[tuple[int, str, str, int | str, float, str]]
                              ) -> list[tuple[int, str, str, int | str, float, str]]:
    """The longest prefix of ``rows`` that uses one mechanism per metric (at least one row).

    A metric's mechanism changes when the catalogue does; a batch never mixes two versions
    of one metric, which the collector would refuse (it sums a batch per metric).
    """
    seen: dict[str, str] = {}
    for i, (_, metric, mechanism, *_) in enumerate(rows):
        if seen.setdefault(metric, mechanism) != mechanism:
            return rows[:i]
    return rows


def _tally(reports: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, int, int]]:
    """(metric, mechanism, n, ones) for each (metric, mechanism) among the reports (items or
    (metric, mechanism, bit) triples); ``ones`` counts the ones of one-bit kinds only (0 for
    categorical reports)."""
    n: Counter[tuple[str, str]] = Counter()
    ones: Counter[tuple[str, str]] = Counter()
    for metric, mechanism, bit, *_ in reports:
        n[(metric, mechanism)] += 1
        if _is_bit(mechanism):
            ones[(metric, mechanism)] += int(bit)
    return [(m, k, count, ones[(m, k)]) for (m, k), count in n.items()]
