"""The Reporter as an app sees it, against a real HTTP server that records the wire."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deniable.client import (
    Connection,
    Delivery,
    InvalidParameterError,
    Privacy,
    Reporter,
    Storage,
    UnknownMetricError,
)
from deniable.client.errors import BudgetExceededError, QueueError
from deniable.client.randomness import SYSTEM_BITS
from deniable.client.stats import Stats
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.metrics import describe_metric
from tests.conftest import DECLARED
from tests.servers import recording_collector

CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT),
                         describe_metric("dark_mode", "Dark", RandomizedResponse("3/4", "1/2"))]}


class FixedBits:
    """Always draws the same value: 0b01 makes the two-coin scheme force a "yes"."""

    def __init__(self, value: int) -> None:
        self.value = value

    def bits(self, k: int) -> int:
        return self.value & ((1 << k) - 1)


def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_only_declared_metrics_are_reported_and_at_once() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, {"dark_mode": "rr:3/4:1/2"},
                      privacy=Privacy(one_per_period=False)) as reporter:
            reporter.report("dark_mode", True)  # before any catalogue: queued at once
            assert reporter.stats().queued == 1
            wait_until(lambda: reporter.catalogue_fetched)
            # The catalogue serves feature_x_enabled too: not declared, never reported.
            assert reporter.metrics == {"dark_mode": RandomizedResponse("3/4", "1/2")}
            with pytest.raises(UnknownMetricError, match="feature_x_enabled"):
                reporter.report("feature_x_enabled", True)
            assert reporter.flush() is True
        assert recorder.paths[0] == "/v1/metrics"
        assert [r["metric"] for r in bodies_reports(recorder)] == ["dark_mode"]


def test_the_bytes_sent_carry_perturbed_bits_only() -> None:
    # With the truth coin forced to "lie" and the forced coin to "no", every fresh report of
    # a true "yes" goes out as 0: the wire must show the perturbed bit, not the true value.
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED,
                      privacy=Privacy(one_per_period=False, fresh={"feature_x_enabled"}),
                      rng=FixedBits(0b11)) as reporter:
            assert reporter.wait_ready(10)
            for _ in range(5):
                reporter.report("feature_x_enabled", True)
        [body] = recorder.bodies
        doc = json.loads(body)
        assert set(doc) == {"batch_id", "reports"}
        assert doc["reports"] == [{"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2",
                                   "bit": 0}] * 5
        assert b"true" not in body.lower() and b"value" not in body


def test_requests_carry_no_identifiers_or_cookies() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED, delivery=Delivery(batch_size=1),  # a request per report
                      privacy=Privacy(one_per_period=False)) as reporter:
            assert reporter.wait_ready(10)
            reporter.report("feature_x_enabled", True)
            reporter.report("feature_x_enabled", False)
        assert len(recorder.bodies) == 2
        for headers in recorder.headers:
            assert "Cookie" not in headers  # the server set one; it is never returned
            assert headers["User-Agent"] == "deniable-client"
        ids = [json.loads(b)["batch_id"] for b in recorder.bodies]
        assert ids[0] != ids[1]


def test_batches_upload_when_full_and_on_flush() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        reporter = Reporter(url, DECLARED, delivery=Delivery(batch_size=3),
                            privacy=Privacy(one_per_period=False))
        assert reporter.wait_ready(10)
        for _ in range(7):
            reporter.report("dark_mode", False)
        # Two full batches go in the background; the seventh report waits for its batch.
        deadline = time.monotonic() + 5
        while reporter.stats().sent < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [len(json.loads(b)["reports"]) for b in recorder.bodies] == [3, 3]
        assert reporter.stats().queued == 1
        assert reporter.flush() is True
        assert [len(json.loads(b)["reports"]) for b in recorder.bodies] == [3, 3, 1]
        assert reporter.stats() == Stats(queued=0, sent=7, dropped=0, dead_lettered=0,
                                         budget_refused=0)
        assert reporter.flush() is True  # nothing left
        reporter.close()
        assert len(recorder.bodies) == 3


@pytest.mark.slow
def test_a_partial_batch_is_sent_when_its_oldest_report_is_old_enough() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED, delivery=Delivery(batch_size=100, max_batch_age=0.3),
                      privacy=Privacy(one_per_period=False)) as reporter:
            assert reporter.wait_ready(10)
            started = time.monotonic()
            reporter.report("dark_mode", True)
            while not recorder.bodies and time.monotonic() - started < 5:
                time.sleep(0.01)
            assert len(recorder.bodies) == 1
            assert recorder.post_times[0] - started >= 0.3


def test_report_never_waits_for_the_network() -> None:
    # Nobody listens on this port: report() must still return at once, queueing everything.
    with Reporter("http://127.0.0.1:9", delivery=Delivery(batch_size=10),
                  privacy=Privacy(one_per_period=False),
                  metrics={"dark_mode": "rr:3/4:1/2"}) as reporter:
        started = time.perf_counter()
        for _ in range(1_000):
            reporter.report("dark_mode", True)
        assert time.perf_counter() - started < 1.0  # microseconds each; 1 s is generous
        assert reporter.flush(timeout=0.3) is False
        assert reporter.stats().queued == 1_000
        assert "failed" in (reporter.last_error or "")
        assert reporter.close(timeout=0.2) is False


def test_report_after_close_is_refused() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        reporter = Reporter(url, DECLARED, privacy=Privacy(one_per_period=False))
        assert reporter.wait_ready(10)
        reporter.close()
        with pytest.raises(QueueError, match="closed"):
            reporter.report("dark_mode", True)
        with pytest.raises(QueueError, match="closed"):
            reporter.flush()
        assert reporter.close() is True  # idempotent


def test_a_budget_refusal_is_counted_and_propagates() -> None:
    class Budgeted(Reporter):
        def _perturb(self, metric, mechanism, true_value):  # type: ignore[no-untyped-def]
            if metric == "dark_mode":
                raise BudgetExceededError("dark_mode has spent its epsilon for today")
            return super()._perturb(metric, mechanism, true_value)

    with recording_collector(CATALOGUE) as (url, recorder):
        with Budgeted(url, DECLARED) as reporter:
            assert reporter.wait_ready(10)
            for _ in range(3):
                with pytest.raises(BudgetExceededError):
                    reporter.report("dark_mode", True)
            reporter.report("feature_x_enabled", True)
            assert reporter.flush() is True
            stats = reporter.stats()
            assert (stats.budget_refused, stats.sent, stats.queued) == (3, 1, 0)
        [body] = recorder.bodies
        assert [r["metric"] for r in json.loads(body)["reports"]] == ["feature_x_enabled"]


def test_the_queue_file_keeps_the_cached_catalogue_for_offline_starts(tmp_path) -> None:
    # The catalogue serves a more private version of dark_mode than declared: the client
    # takes it, and an offline restart still does, from the copy cached in the queue file.
    private = RandomizedResponse("1/2", "1/2")
    served = {"metrics": [describe_metric("dark_mode", "Dark", private)]}
    queue = tmp_path / "q.db"
    with recording_collector(served) as (url, _):
        first = Reporter(url, DECLARED, privacy=Privacy(one_per_period=False), queue_path=queue)
        wait_until(lambda: first.metrics["dark_mode"] == private)
        first.close()
    with Reporter(url, DECLARED, privacy=Privacy(one_per_period=False),
                  connection=Connection(timeout=(0.2, 0.2)), queue_path=queue) as reporter:
        assert reporter.metrics["dark_mode"] == private
        reporter.close(timeout=0)
    # Nothing cached, the collector gone: the declared metrics are reported all the same.
    with Reporter(url, DECLARED, privacy=Privacy(one_per_period=False),
                  connection=Connection(timeout=(0.2, 0.2)),
                  queue_path=tmp_path / "fresh.db") as reporter:
        reporter.report("dark_mode", True)
        stats = reporter.stats()
        assert (stats.queued, stats.not_ready) == (1, 0)
        assert reporter.metrics["dark_mode"] == RandomizedResponse("3/4", "1/2")
        reporter.close(timeout=0)


def test_unknown_metrics_and_values_are_refused_without_echoing_the_value() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        with Reporter(url, DECLARED, privacy=Privacy(one_per_period=False)) as reporter:
            assert reporter.wait_ready(10)
            with pytest.raises(UnknownMetricError, match="not_registered"):
                reporter.report("not_registered", True)
            with pytest.raises(UnknownMetricError, match="not_registered"):  # the name decides
                reporter.report("not_registered", object())
            with pytest.raises(InvalidParameterError) as info:
                reporter.report("dark_mode", "sensitive answer")  # type: ignore[arg-type]
            assert "sensitive" not in str(info.value)
            assert reporter.stats().queued == 0
        with pytest.raises(InvalidParameterError):
            Reporter(url, DECLARED, delivery=Delivery(batch_size=0),
                     privacy=Privacy(one_per_period=False))


def test_metrics_can_be_given_in_code() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        with Reporter(url, privacy=Privacy(one_per_period=False),
                      metrics={"feature_x_enabled": "rr:1/2:1/2"}) as reporter:
            assert reporter.ready  # at once: declared metrics need no catalogue fetch first
            assert reporter.metrics == {"feature_x_enabled": DEFAULT}
        with pytest.raises(InvalidParameterError):
            Reporter(url, privacy=Privacy(one_per_period=False), metrics={"Bad Name": DEFAULT})


def bodies_reports(recorder) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r for body in recorder.bodies for r in json.loads(body)["reports"]]


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["group", "sync"])
def test_many_threads_report_at_once_and_every_report_arrives_once(
        durability: str, tmp_path) -> None:
    n_threads, per_thread = (8, 2_500) if durability == "group" else (4, 250)
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED, storage=Storage(durability=durability),
                      delivery=Delivery(batch_size=100), privacy=Privacy(one_per_period=False),
                      queue_path=tmp_path / "q.db") as reporter:  # type: ignore[arg-type]
            assert reporter.wait_ready(10)
            def work(t: int) -> None:
                for i in range(per_thread):
                    reporter.report("dark_mode" if t % 2 else "feature_x_enabled", i % 2 == 0)

            threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert reporter.flush(timeout=30) is True
            ledger = reporter.ledger()
            assert reporter.stats().sent == n_threads * per_thread
        reports = bodies_reports(recorder)
        assert len(reports) == n_threads * per_thread
        for metric in ("dark_mode", "feature_x_enabled"):
            bits = [r["bit"] for r in reports if r["metric"] == metric]
            assert (len(bits), sum(bits)) == (ledger[metric].handed_n, ledger[metric].handed_ones)
            assert len(bits) == n_threads // 2 * per_thread
        ids = [json.loads(b)["batch_id"] for b in recorder.bodies]
        assert len(ids) == len(set(ids))


@pytest.mark.slow
@pytest.mark.parametrize("queue_file", [False, True])
def test_a_forked_child_gets_its_own_sender_and_its_own_randomness(
        queue_file: bool, tmp_path) -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        path = tmp_path / "q.db" if queue_file else None
        reporter = Reporter(url, DECLARED, delivery=Delivery(batch_size=7),
                            privacy=Privacy(one_per_period=False), queue_path=path)
        assert reporter.wait_ready(10)
        for _ in range(10):
            reporter.report("feature_x_enabled", True)  # some sent, some still buffered
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, upload through its own restarted threads, exit
            code = 1
            try:
                os.close(read_end)
                for _ in range(20):
                    reporter.report("dark_mode", True)
                drawn = SYSTEM_BITS.bits(64)
                drained = reporter.close(timeout=10)
                os.write(write_end, f"{drawn} {drained}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        parent_draw = SYSTEM_BITS.bits(64)
        with os.fdopen(read_end) as pipe:
            child_draw, drained = pipe.read().split()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and drained == "True"
        assert int(child_draw) != parent_draw  # the pooled random bytes were not shared
        assert reporter.close(timeout=10) is True
        # Count as the collector does, once per batch id. Sharing one queue file, parent and
        # child may both upload the same sealed batch; its bytes are then identical.
        batches: dict[str, bytes] = {}
        for body in recorder.bodies:
            batch_id = json.loads(body)["batch_id"]
            assert batches.setdefault(batch_id, body) == body
        if not queue_file:
            assert len(batches) == len(recorder.bodies)  # separate queues: no batch twice
        reports = [r for body in batches.values() for r in json.loads(body)["reports"]]
        # Exactly once each: the child never re-sent the parent's buffered reports.
        assert sum(r["metric"] == "feature_x_enabled" for r in reports) == 10
        assert sum(r["metric"] == "dark_mode" for r in reports) == 20


@pytest.mark.slow
def test_the_atexit_hook_flushes_when_the_app_just_exits(tmp_path) -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        # The in-memory queue: only the exit hook can deliver these 250 reports.
        done = subprocess.run(
            [sys.executable, "-c", ATEXIT_APP, url], capture_output=True, text=True,
            timeout=60, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr
        assert len(bodies_reports(recorder)) == 250


ATEXIT_APP = """
import sys
from deniable.client import Reporter
reporter = Reporter(sys.argv[1], one_per_period=False,
                    metrics={"dark_mode": "rr:3/4:1/2"}, batch_size=100)
for _ in range(250):
    reporter.report("dark_mode", False)
# no close(), no flush(): the interpreter exits and the atexit hook uploads
"""


def test_the_client_imports_nothing_heavy() -> None:
    code = ("import sys; from deniable.client import Reporter; import deniable.client.pool; "
            "print(sorted({'flask', 'redis', 'numpy'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
