"""Quiet and prompt: the client writes nothing to the app's terminal, a once-a-day CLI with the
documented settings exits promptly when the collector is down (and sends on its next run), and
``stats()`` after ``close()`` gives the last stats."""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deniable.client import LOGGER_NAME, Privacy, QueueError, Reporter
from deniable.collector.embedded import free_port

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "daily_cli.py"


def run_sample(url: str, data_dir: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(SAMPLE), url, str(data_dir)],
                          capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


@pytest.mark.slow
def test_a_daily_cli_exits_promptly_and_silently_when_the_collector_is_down(
        live_collector, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    done, elapsed = run_sample(dead, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sent 0, queued 2\n"
    assert done.stderr == ""  # no "deniable: upload failed ..." on the user's terminal
    # close_timeout=1 s bounds the wait; the rest is the interpreter starting. Without the
    # settings the default close_timeout alone is 10 s.
    assert elapsed < 8, elapsed
    # The next run (the collector is up) sends what the first one kept; today's values were
    # already reported this period, so it adds none.
    done, _ = run_sample(live_collector.url, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "sent 2, queued 0\n", "")


def test_the_client_logger_has_a_null_handler() -> None:
    assert LOGGER_NAME == "deniable.client"
    handlers = logging.getLogger(LOGGER_NAME).handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_stats_after_close_are_the_last_stats(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    reporter = Reporter(dead, metrics={"dark_mode": "rr:3/4:1/2"},
                        privacy=Privacy(one_per_period=False), queue_path=tmp_path / "q.db")
    for _ in range(3):
        reporter.report("dark_mode", True)
    assert reporter.close(timeout=0.2) is False
    stats = reporter.stats()
    assert (stats.queued, stats.sent) == (3, 0)
    assert "refused the connection" in (stats.last_error or "")
    assert reporter.stats() == stats
    with pytest.raises(QueueError, match="closed"):
        reporter.ledger()
    with pytest.raises(QueueError, match="closed"):
        reporter.dead_letters()
