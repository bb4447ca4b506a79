"""The consent switch: ``set_enabled(False)`` stops collection, deletes what is queued (nothing
of it reaches the collector) and the device's privacy state; ``set_enabled(True)`` starts
afresh as a new device. Through a real collector process and a real Redis."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import redis

from deniable.client import Delivery, Privacy, PrivacyStateError, QueueError, Reporter
from deniable.client.errors import InvalidParameterError
from tests.e2e.test_pipeline import counters

METRICS = {"dark_mode": "rr:3/4:1/2", "feature_x_enabled": "rr:1/2:1/2"}
DEVICE_ROWS = ("pending", "batches", "dead_letter", "refused", "ledger", "counters")


def rows(queue: Path) -> dict[str, int]:
    with sqlite3.connect(queue) as db:
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in DEVICE_ROWS}


def test_disabling_deletes_the_queue_and_the_state_and_nothing_more_is_sent(
        live_collector, redis_client: redis.Redis, tmp_path: Path) -> None:
    queue, state = tmp_path / "q.db", tmp_path / "q.db.privacy"
    # Reports stay pending (large batches, long age) until the switch.
    reporter = Reporter(live_collector.url, metrics=METRICS, queue_path=queue,
                        delivery=Delivery(batch_size=1000, max_batch_age=3600))
    reporter.report("dark_mode", True)
    reporter.report("feature_x_enabled", False)
    reporter._queue.commit()  # noqa: SLF001 - on disk, as after a while
    assert {p.name for p in state.iterdir()} >= {"secret", "ledger.json", "periods.json"}
    old_secret = (state / "secret").read_bytes()
    assert reporter.stats().queued == 2 and rows(queue)["pending"] == 2

    reporter.set_enabled(False)
    stats = reporter.stats()
    assert (stats.enabled, stats.queued, stats.sent) == (False, 0, 0)
    assert not state.exists()  # secret, ledger, periods and the folder itself
    assert rows(queue) == dict.fromkeys(DEVICE_ROWS, 0)
    reporter.report("dark_mode", True)  # a no-op now: nothing checked, kept or counted
    reporter.report("no_such_metric", object())
    assert reporter.flush(timeout=5) is True
    assert reporter.stats().queued == 0 and not state.exists()
    reporter.set_enabled(False)  # idempotent

    reporter.set_enabled(True)  # a new device: new secret, empty ledger, no period yet
    reporter.report("dark_mode", True)
    assert reporter.flush(timeout=10) is True
    assert (state / "secret").read_bytes() != old_secret
    stats = reporter.stats()
    assert (stats.enabled, stats.sent, stats.queued) == (True, 1, 0)
    assert reporter.close() is True
    # Only the report made after re-enabling reached the collector.
    assert {m: n for m, (n, _) in counters(redis_client).items()} == {"dark_mode": 1}


def test_a_reporter_constructed_disabled_leaves_no_state(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    queue, state = tmp_path / "q.db", tmp_path / "q.db.privacy"
    with Reporter("http://127.0.0.1:9", metrics=METRICS, queue_path=queue) as earlier:
        earlier.report("dark_mode", True)  # an earlier run, with consent: state on disk
        earlier.close(timeout=0)  # nothing listens on port 9: close now, not after 10 s
    assert (state / "secret").is_file() and (state / "periods.json").is_file()
    with Reporter("http://127.0.0.1:9", metrics=METRICS, queue_path=queue,
                  enabled=False) as reporter:
        assert not state.exists()  # the earlier run's state is deleted, none is made
        assert reporter.enabled is False
        reporter.report("dark_mode", True)
        assert reporter.stats().queued == 0
        with pytest.raises(InvalidParameterError):
            reporter.set_enabled(1)  # type: ignore[arg-type]
    assert not state.exists() and rows(queue) == dict.fromkeys(DEVICE_ROWS, 0)
    assert "in memory only" not in caplog.text
    with pytest.raises(QueueError, match="closed"):
        reporter.set_enabled(True)


def test_a_report_racing_the_switch_never_brings_the_state_back(tmp_path: Path) -> None:
    queue, state = tmp_path / "q.db", tmp_path / "q.db.privacy"
    reporter = Reporter("http://127.0.0.1:9", metrics=METRICS, queue_path=queue,
                        privacy=Privacy(one_per_period=False, fresh={"dark_mode"}))
    started, stop = threading.Event(), threading.Event()
    raced: list[BaseException] = []

    def hammer() -> None:
        while not stop.is_set():
            try:
                reporter.report("dark_mode", True)
            except PrivacyStateError as exc:  # the documented outcome of a racing call
                raced.append(exc)
            started.set()

    thread = threading.Thread(target=hammer)
    thread.start()
    started.wait(5)
    reporter.set_enabled(False)
    stop.set()
    thread.join(10)
    assert not state.exists()
    assert reporter.close(timeout=1) is True
    assert rows(queue) == dict.fromkeys(DEVICE_ROWS, 0)
    assert all("erased" in str(exc) for exc in raced)
