"""Upgrades without downtime, through deploy/vm's nginx site over TLS: a reload (gunicorn HUP)
and a restart behind the standby (the site's backup upstream) answer no 503 and count every
acknowledged report exactly once. The restart's gap (what devices would see as 503 without the
standby) and the collector's start time are measured and printed."""
from __future__ import annotations

import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.embedded import free_port
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV, hour_counts
from tests.nginx_kit import TLSFiles, private_ca, vm_nginx

pytestmark = pytest.mark.slow
METRIC, MECHANISM = "feature_x_enabled", "rr:1/2:1/2"
ENV = {**OPEN_ENV, "DENIABLE_PROXY_FIX_X_FOR": "1"}


class Probe(threading.Thread):
    """POSTs a one-report batch through nginx every 10 ms and records each status (0: no
    answer)."""

    def __init__(self, url: str, tls: TLSFiles) -> None:
        super().__init__(daemon=True)
        self.url, self.ca = url, str(tls.ca)
        self.statuses: list[int] = []
        self.refused = ""  # the first answer that was not 202
        self.stop = threading.Event()

    def run(self) -> None:
        with requests.Session() as session:
            while not self.stop.is_set():
                batch = encode_batch(new_batch_id(), [(METRIC, MECHANISM, 1)])
                try:
                    answer = session.post(f"{self.url}/v1/reports", json=batch, timeout=10,
                                          verify=self.ca)
                    status = answer.status_code
                    if status not in (200, 202) and not self.refused:
                        self.refused = f"{status} {answer.text}"
                except requests.RequestException as exc:
                    status = 0
                    self.refused = self.refused or repr(exc)
                self.statuses.append(status)
                time.sleep(0.01)

    def finish(self) -> tuple[list[int], str]:
        self.stop.set()
        self.join(timeout=30)
        return self.statuses, self.refused


def wait_for_workers(collector: CollectorProcess, count: int, timeout: float = 30) -> None:
    """Until the collector's log says ``count`` workers in all have become ready."""
    deadline = time.monotonic() + timeout
    while collector.log_tail(1 << 24).count('"message":"worker ready"') < count:
        assert time.monotonic() < deadline, collector.log_tail()
        time.sleep(0.05)


@pytest.fixture()
def tls(tmp_path: Path) -> TLSFiles:
    return private_ca(tmp_path / "tls")


def test_a_reload_and_a_restart_behind_the_standby_answer_no_503(
        redis_url: str, metrics_file: Path, redis_client: redis.Redis, tls: TLSFiles,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port, standby_port = free_port(), free_port()
    primary = CollectorProcess(redis_url, metrics_file, workers=2, port=port, env=ENV)
    started = time.monotonic()
    primary.start()
    first_start = time.monotonic() - started
    probe: Probe | None = None
    standby: CollectorProcess | None = None
    try:
        with vm_nginx(tmp_path / "nginx", tls, port, standby_port=standby_port) as nginx:
            url = f"https://127.0.0.1:{nginx.port}"
            began = datetime.now(timezone.utc)
            probe = Probe(url, tls)
            probe.start()
            time.sleep(0.5)

            # 1. A reload: new workers (settings and metrics file read again), same master.
            assert primary.process is not None
            primary.process.send_signal(signal.SIGHUP)
            wait_for_workers(primary, 4)
            time.sleep(0.5)
            reloaded = len(probe.statuses)
            assert set(probe.statuses) <= {200, 202}, (sorted(set(probe.statuses)), probe.refused)

            # 2. An upgrade: the standby starts (nginx's backup upstream), the collector
            #    restarts on its port, the standby stops.
            standby = CollectorProcess(redis_url, metrics_file, workers=2, port=standby_port,
                                       env=ENV)
            standby.start()
            stopped = time.monotonic()
            primary.stop()  # SIGTERM: it refuses new connections at once, drains the rest
            primary = CollectorProcess(redis_url, metrics_file, workers=2, port=port, env=ENV)
            restarted = time.monotonic()
            primary.start()
            gap = time.monotonic() - stopped
            second_start = time.monotonic() - restarted
            during = len(probe.statuses) - reloaded
            time.sleep(0.5)
            standby.stop()
            time.sleep(0.5)
            statuses, refused = probe.finish()
            refused += nginx.error_log()[-3000:]
            probe = None
    finally:
        if probe is not None:
            probe.finish()
        if standby is not None:
            standby.stop()
        primary.stop()
    # 202, or 200 for a batch nginx passed on again after the collector dropped it unanswered.
    assert statuses and set(statuses) <= {200, 202}, (
        {s: statuses.count(s) for s in set(statuses)}, refused)
    assert during > 10  # the standby served while the collector restarted
    # Every acknowledged report counted once, through both (Redis was empty at the start).
    hours = {began.replace(minute=0, second=0, microsecond=0),
             datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)}
    assert sum(hour_counts(redis_client, METRIC, MECHANISM, h)[0] for h in hours) == \
        len(statuses)
    with capsys.disabled():
        print(f"\nupgrade through nginx: {len(statuses)} batches, 0 answered 503; restart gap "
              f"{gap:.2f} s (stop + start: 503s without the standby), collector start "
              f"{first_start:.2f} s and {second_start:.2f} s (2 workers ready)")

