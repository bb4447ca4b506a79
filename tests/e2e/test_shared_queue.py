"""Two ``Reporter``s on one queue file, reports and flushes interleaved, through a real collector.

The web client had a race here: two reporters sharing one durable store, where one's flush met
rows the other had committed but not sealed (fixed on the web side with
``DurableQueue.unsealed``). The Python client's reporters on one SQLite file (the same
``queue_path`` and ``Storage``) must give: every report counted exactly once (nothing lost,
nothing doubled, though both senders upload from the file), each flush draining what either
reporter committed before it returned, and batches cut and sent in the order the reports were
handed over, whatever their values (a value never moves a report or a batch boundary).
"""
from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis
import requests

from deniable.client import Delivery, Privacy, Reporter, Storage
from deniable.client.wire import REPORTS_PATH
from tests.conftest import hour_counts
from tests.servers import collector_with_metrics

MECHANISM = "rr:3/4:1/2"
METRICS = {"from_a": {"mechanism": MECHANISM}, "from_b": {"mechanism": MECHANISM}}
BATCH_SIZE = 7
ROUNDS = 6
REPORTS_PER_ROUND = 20
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@contextmanager
def recording_forwarder(upstream: str, hold_first_post: Callable[[], bool] | None = None
                        ) -> Iterator[tuple[str, list[bytes]]]:
    """An HTTP forwarder in front of ``upstream`` that keeps each ``POST /v1/reports`` body,
    in the order the requests arrived, before passing it on. With ``hold_first_post``, the
    first POST is passed on only once that holds (or 10 s have passed): it orders a race."""
    posted: list[bytes] = []
    lock = threading.Lock()

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "POST" and self.path == REPORTS_PATH:
                with lock:
                    posted.append(body)
                    first = len(posted) == 1
                deadline = time.monotonic() + 10
                while first and hold_first_post and not hold_first_post() \
                        and time.monotonic() < deadline:
                    time.sleep(0.01)
            answer = requests.request(
                self.command, upstream + self.path, data=body or None, timeout=30,
                headers={k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP})
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_BY_HOP | {"content-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posted
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def counted_since(client: redis.Redis, started: datetime) -> dict[str, tuple[int, int]]:
    """(n, ones) the collector counted for each metric in the hour of ``started`` and the
    hour now (one hour, unless the test crossed an hour boundary)."""
    hours = {started.replace(minute=0, second=0, microsecond=0),
             datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)}
    return {metric: (sum(hour_counts(client, metric, MECHANISM, h)[0] for h in hours),
                     sum(hour_counts(client, metric, MECHANISM, h)[1] for h in hours))
            for metric in METRICS}


def expected_batch_sizes(flush_points: list[int]) -> list[int]:
    """The batch sizes the schedule alone dictates: a batch is sealed whenever
    ``BATCH_SIZE`` reports are pending, and a flush seals what is left."""
    sizes, pending, done = [], 0, 0
    for point in flush_points:
        for _ in range(point - done):
            pending += 1
            if pending == BATCH_SIZE:
                sizes.append(pending)
                pending = 0
        if pending:
            sizes.append(pending)
            pending = 0
        done = point
    return sizes


@pytest.mark.slow
def test_two_reporters_on_one_queue_file_send_each_report_once_in_handing_order(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    # "sync": each report() is committed to the shared file before it returns, so the file
    # holds the reports in call order; a large max_batch_age: only size and flush seal.
    storage = Storage(durability="sync", privacy_dir=tmp_path / "privacy")
    delivery = Delivery(batch_size=BATCH_SIZE, max_batch_age=3600.0, close_timeout=20.0)
    privacy = Privacy(one_per_period=False)
    queue = tmp_path / "shared.db"
    schedule = random.Random(31)  # the interleaving and the true values; seeded, replayable
    handed: list[str] = []
    flushed: list[bool] = []
    (tmp_path / "collector").mkdir()
    with collector_with_metrics(redis_url, METRICS, tmp_path / "collector", workers=1,
                                flush=True) as collector, \
            recording_forwarder(collector.url) as (url, posted):
        a = Reporter(url, {"from_a": MECHANISM}, queue_path=queue, storage=storage,
                     delivery=delivery, privacy=privacy)
        b = Reporter(url, {"from_b": MECHANISM}, queue_path=queue, storage=storage,
                     delivery=delivery, privacy=privacy)
        assert a.wait_ready(20) and b.wait_ready(20)
        started = datetime.now(timezone.utc)
        for round_ in range(ROUNDS):
            for _ in range(REPORTS_PER_ROUND):
                reporter, metric = (a, "from_a") if schedule.random() < 0.5 else (b, "from_b")
                reporter.report(metric, schedule.random() < 0.5)
                handed.append(metric)
            # Alternate which reporter flushes: each must drain the other's rows too.
            flushed.append((a if round_ % 2 == 0 else b).flush(timeout=20))
        assert a.close(20) and b.close(20)
        # The collector's counts, read before it stops (it empties its Redis on the way out).
        counted = counted_since(redis_client, started)
        # The shared file's own account, read by a third reporter on it.
        with Reporter(url, {"from_a": MECHANISM, "from_b": MECHANISM}, queue_path=queue,
                      storage=storage, delivery=delivery, privacy=privacy) as reader:
            ledger, left = reader.ledger(), reader.stats()
    assert flushed == [True] * ROUNDS
    total = ROUNDS * REPORTS_PER_ROUND
    assert left.queued == 0 and left.dead_lettered == 0 and left.sent == total
    # Each report was counted exactly once by the collector: n per metric equals what was
    # handed over, and the ones counted equal the ones the shared ledger says it sent.
    for metric in ("from_a", "from_b"):
        n, ones = counted[metric]
        assert n == handed.count(metric) == ledger[metric].sent_n == ledger[metric].handed_n
        assert ones == ledger[metric].sent_ones
    # The batches, each taken once (a re-send of the same id is allowed and counted once), in
    # the order they first reached the collector: a sender takes the next batch only after
    # the one before was answered, so that is the order they were sealed in.
    batches: dict[str, list[str]] = {}
    for body in posted:
        document = json.loads(body)
        sent = [report["metric"] for report in document["reports"]]
        assert batches.setdefault(document["batch_id"], sent) == sent  # same id, same reports
    assert sum(map(len, batches.values())) == total
    # Cut by the schedule alone, never by a value, and in handing order across both reporters.
    flush_points = [REPORTS_PER_ROUND * (r + 1) for r in range(ROUNDS)]
    assert [len(sent) for sent in batches.values()] == expected_batch_sizes(flush_points)
    assert [metric for sent in batches.values() for metric in sent] == handed


@pytest.mark.slow
def test_a_flush_drains_what_the_other_reporter_committed_while_it_waited(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    # The web client's race, ordered rather than timed: a's flush has its batch in flight, and
    # the forwarder answers it only once b's group committer has put b's report in the shared
    # file unsealed. a's flush must seal and send that row too, well before max_batch_age
    # (3600 s here) would, and return True with the file empty.
    queue = tmp_path / "shared.db"

    def unsealed_row_in_file() -> bool:
        with contextlib.closing(sqlite3.connect(queue, timeout=5)) as db:
            return bool(db.execute("SELECT COUNT(*) FROM pending").fetchone()[0])

    storage = Storage(durability="group", commit_interval=0.05, privacy_dir=tmp_path / "p")
    delivery = Delivery(batch_size=BATCH_SIZE, max_batch_age=3600.0)
    privacy = Privacy(one_per_period=False)
    (tmp_path / "collector").mkdir()
    with collector_with_metrics(redis_url, METRICS, tmp_path / "collector", workers=1,
                                flush=True) as collector, \
            recording_forwarder(collector.url, unsealed_row_in_file) as (url, posted):
        a = Reporter(url, {"from_a": MECHANISM}, queue_path=queue, storage=storage,
                     delivery=delivery, privacy=privacy)
        b = Reporter(url, {"from_b": MECHANISM}, queue_path=queue, storage=storage,
                     delivery=delivery, privacy=privacy)
        assert a.wait_ready(20) and b.wait_ready(20)
        started = datetime.now(timezone.utc)
        a.report("from_a", True)
        result: list[bool] = []
        flushing = threading.Thread(target=lambda: result.append(a.flush(timeout=10)))
        flushing.start()
        deadline = time.monotonic() + 20
        while not posted and time.monotonic() < deadline:  # a's batch reaches the forwarder
            time.sleep(0.01)
        assert posted, "a's flush sent nothing"
        b.report("from_b", False)  # committed by b's own committer within 0.05 s, unsealed
        flushing.join()
        assert result == [True]
        assert not unsealed_row_in_file()
        counts = {metric: n for metric, (n, _) in counted_since(redis_client, started).items()}
        assert a.close(10) and b.close(10)
    assert counts == {"from_a": 1, "from_b": 1}
    assert len({json.loads(body)["batch_id"] for body in posted}) == 2
