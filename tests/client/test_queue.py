"""The on-device queue, read back through a second SQLite connection as a restarted app would."""
from __future__ import annotations

import json
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

from deniable.client.errors import InvalidParameterError, QueueError
from deniable.client.queue import DurableQueue


def committed(path: Path) -> int:
    """Reports visible in the file to another connection: pending plus in sealed batches."""
    with sqlite3.connect(path) as db:
        pending = db.execute("SELECT COUNT(*) FROM pending").fetchone()[0]
        sealed = db.execute("SELECT COALESCE(SUM(n_reports), 0) FROM batches").fetchone()[0]
    db.close()
    return int(pending + sealed)


def batch_rows(path: Path) -> list[tuple[str, bytes]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT batch_id, body FROM batches ORDER BY seq").fetchall()
    db.close()
    return [(r[0], bytes(r[1])) for r in rows]


def test_the_file_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "queue.db"
    queue = DurableQueue(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.close()
    finally:
        queue.close()


def test_only_metric_mechanism_and_perturbed_bit_are_stored(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    queue = DurableQueue(path)
    queue.put_sync(("dark_mode", "rr:3/4:1/2", 1))
    queue.close()
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(pending)")]
        rows = db.execute("SELECT metric, mechanism, bit FROM pending").fetchall()
    db.close()
    assert columns == ["seq", "metric", "mechanism", "bit", "queued_at", "payload", "dims"]
    assert rows == [("dark_mode", "rr:3/4:1/2", 1)]


def test_group_commit_writes_within_the_window(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    queue = DurableQueue(path, commit_interval=0.2)
    queue.start()
    try:
        for _ in range(10):
            queue.put(("dark_mode", "rr:3/4:1/2", 0))
        assert committed(path) == 0  # still in memory: this is the window a crash can lose
        deadline = time.monotonic() + 5
        while committed(path) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert committed(path) == 10
        assert queue.stats().queued == 10
    finally:
        queue.close()


def test_sync_mode_commits_before_returning(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    queue = DurableQueue(path, durability="sync", commit_interval=10.0)
    try:
        for i in range(5):
            queue.put_sync(("dark_mode", "rr:3/4:1/2", i % 2))
            assert committed(path) == i + 1
        ledger = queue.ledger()["dark_mode"]
        assert (ledger.handed_n, ledger.handed_ones, ledger.sent_n) == (5, 2, 0)
    finally:
        queue.close()


def test_a_batch_is_sealed_with_its_id_and_keeps_it_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    queue = DurableQueue(path, batch_size=3)
    for bit in (1, 0, 1, 1):
        queue.put(("feature_x_enabled", "rr:1/2:1/2", bit))
    queue.commit()
    queue.close()
    [(batch_id, body)] = batch_rows(path)
    assert json.loads(body) == {"batch_id": batch_id, "reports": [
        {"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": b} for b in (1, 0, 1)]}
    reopened = DurableQueue(path, batch_size=3)
    try:
        batch = reopened.next_batch()
        assert batch is not None and (batch.batch_id, batch.body) == (batch_id, body)
        assert reopened.stats().queued == 4  # three sealed, one still pending
        reopened.commit(seal_all=True)
        assert [b for b, _ in batch_rows(path)][0] == batch_id
        assert len(batch_rows(path)) == 2
    finally:
        reopened.close()


def test_a_partial_batch_is_sealed_when_old_enough(tmp_path: Path) -> None:
    now = [1000.0]
    queue = DurableQueue(tmp_path / "q.db", batch_size=100, max_batch_age=30,
                         clock=lambda: now[0])
    try:
        queue.put(("dark_mode", "rr:3/4:1/2", 1))
        queue.commit()
        assert queue.next_batch() is None
        now[0] += 29.9
        queue.commit()
        assert queue.next_batch() is None
        now[0] += 0.1
        queue.commit()
        batch = queue.next_batch()
        assert batch is not None and batch.n_reports == 1
    finally:
        queue.close()


def test_a_full_queue_drops_the_oldest_batches_and_counts_them(tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "q.db", batch_size=100, max_queued_reports=250)
    try:
        for generation in range(5):  # metric m0 is the oldest, m4 the newest
            for _ in range(100):
                queue.put((f"m{generation}", "rr:1/2:1/2", 1))
        queue.commit()
        stats = queue.stats()
        assert (stats.queued, stats.dropped) == (200, 300)
        metrics = []
        while (batch := queue.next_batch()) is not None:
            metrics.append({r["metric"] for r in json.loads(batch.body)["reports"]})
            assert queue.ack(batch.batch_id)
        assert metrics == [{"m3"}, {"m4"}]
        assert queue.stats().sent == 200
    finally:
        queue.close()


def test_reports_older_than_the_age_cap_are_dropped(tmp_path: Path) -> None:
    now = [1000.0]
    queue = DurableQueue(tmp_path / "q.db", batch_size=2, max_queue_age=3600,
                         clock=lambda: now[0])
    try:
        for _ in range(3):
            queue.put(("dark_mode", "rr:3/4:1/2", 0))
        queue.commit()
        now[0] += 3601
        queue.put(("dark_mode", "rr:3/4:1/2", 1))
        queue.commit()
        stats = queue.stats()
        assert (stats.queued, stats.dropped) == (1, 3)
    finally:
        queue.close()


def test_the_batch_in_flight_is_never_dropped(tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "q.db", batch_size=100, max_queued_reports=100)
    try:
        for _ in range(100):
            queue.put(("m0", "rr:1/2:1/2", 1))
        queue.commit()
        in_flight = queue.next_batch()
        assert in_flight is not None
        for _ in range(100):
            queue.put(("m1", "rr:1/2:1/2", 1))
        queue.commit()  # over the cap: the newer batch goes, the one being uploaded stays
        assert queue.ack(in_flight.batch_id)
        assert (queue.stats().sent, queue.stats().dropped) == (100, 100)
    finally:
        queue.close()


def test_an_acknowledgement_counts_once_even_with_two_processes_on_one_file(
        tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    first, second = DurableQueue(path, batch_size=2), DurableQueue(path, batch_size=2)
    try:
        first.put(("dark_mode", "rr:3/4:1/2", 1))
        first.put(("dark_mode", "rr:3/4:1/2", 1))
        first.commit()
        a, b = first.next_batch(), second.next_batch()
        assert a is not None and b is not None and a.batch_id == b.batch_id
        assert first.ack(a.batch_id) is True
        assert second.ack(b.batch_id) is False
        assert second.stats().sent == 2
        assert second.ledger()["dark_mode"].sent_ones == 2
    finally:
        first.close()
        second.close()


def test_dead_letters_keep_the_reason(tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "q.db", batch_size=1)
    try:
        queue.put(("dark_mode", "rr:3/4:1/2", 1))
        queue.commit()
        batch = queue.next_batch()
        assert batch is not None
        assert queue.dead_letter(batch.batch_id, 422, "/reports/0/metric is not registered")
        [letter] = queue.dead_letters()
        assert (letter.batch_id, letter.n_reports, letter.status) == (batch.batch_id, 1, 422)
        assert "not registered" in letter.reason
        stats = queue.stats()
        assert (stats.queued, stats.dead_lettered, stats.sent) == (0, 1, 0)
    finally:
        queue.close()


def test_bad_options_and_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="durability"):
        DurableQueue(None, durability="fast")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="batch_size"):
        DurableQueue(None, batch_size=1001)
    with pytest.raises(InvalidParameterError, match="max_queued_reports"):
        DurableQueue(None, batch_size=100, max_queued_reports=10)
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(QueueError, match="cannot open"):
        DurableQueue(not_a_db)
    queue = DurableQueue(None)
    queue.close()
    with pytest.raises(QueueError, match="closed"):
        queue.put(("dark_mode", "rr:3/4:1/2", 1))


@pytest.mark.slow
def test_stats_never_counts_a_report_twice_while_a_commit_moves_it(tmp_path: Path) -> None:
    """stats() sums the buffer and the file; a commit in between must not show both."""
    queue = DurableQueue(tmp_path / "queue.db")
    total = 400
    done = threading.Event()

    def refuse_and_commit() -> None:
        try:
            for _ in range(total):
                queue.count_refused("not_ready")
                queue.put(("dark_mode", "rr:3/4:1/2", 1))
                queue.commit()
        finally:
            done.set()

    worker = threading.Thread(target=refuse_and_commit)
    worker.start()
    reads, last, wrong = 0, (0, 0), []
    try:
        while not done.is_set():
            stats = queue.stats()
            now = (stats.not_ready, stats.queued)
            reads += 1
            if max(now) > total or now[0] < last[0]:
                wrong.append(now)
            last = now
    finally:
        worker.join()
        queue.close()
    assert reads > 0, "stats() was never read while commits ran"
    assert wrong == [], f"{len(wrong)} of {reads} reads counted a report twice or went back"
