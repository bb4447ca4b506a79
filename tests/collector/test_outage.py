"""Redis down, failing over, full or stalled: 503 with Retry-After, never a 500, and recovery
with no restart. SIGTERM lets in-flight requests finish."""
from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.app import create_app
from deniable.collector.embedded import RedisServer, free_port
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN, OPEN_ENV, hour_counts, snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


def batch(n: int = 10, bit: int = 1) -> dict:
    return encode_batch(new_batch_id(), [(X, X_MECH, bit)] * n)


def assert_unavailable(response: requests.Response | object) -> None:
    status = getattr(response, "status_code")
    headers = getattr(response, "headers")
    body = response.json() if hasattr(response, "json") and callable(response.json) else response.json
    assert status == 503
    assert int(headers["Retry-After"]) > 0
    assert headers["Content-Type"] == "application/problem+json"
    assert body["status"] == 503 and "Traceback" not in str(body)


@pytest.fixture()
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, on a fixed port, that the test may stop."""
    server = RedisServer(tmp_path / "redis", port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.mark.slow
def test_redis_down_answers_503_then_recovers_without_a_restart(
        own_redis: RedisServer, metrics_file: Path) -> None:
    with CollectorProcess(own_redis.url, metrics_file, workers=2, env=OPEN_ENV) as collector, \
            requests.Session() as http:
        assert http.post(f"{collector.url}/v1/reports", json=batch()).status_code == 202
        assert http.get(f"{collector.url}/readyz").status_code == 200

        own_redis.stop()
        for _ in range(4):  # every worker, whichever takes the request
            assert_unavailable(http.post(f"{collector.url}/v1/reports", json=batch()))
            assert_unavailable(http.get(f"{collector.url}/v1/metrics/{X}/counts"))
        assert_unavailable(http.get(f"{collector.url}/readyz"))
        assert http.get(f"{collector.url}/healthz").status_code == 200  # alive, not ready

        restarted = RedisServer(own_redis.data_dir, port=own_redis.port)
        restarted.start()
        try:
            assert http.get(f"{collector.url}/readyz").status_code == 200
            for _ in range(4):
                assert http.post(f"{collector.url}/v1/reports", json=batch()).status_code == 202
            metrics = http.get(f"{collector.url}/metrics").text
            assert 'deniable_batches_total{outcome="rejected",reason="storage_unavailable"} 4.0' \
                in metrics
            assert "deniable_storage_errors_total{kind=\"ConnectionError\"}" in metrics
            assert "Traceback" not in collector.log_tail(1 << 20)
        finally:
            restarted.stop()


@pytest.fixture()
def own_app(own_redis: RedisServer, metrics_file: Path):  # type: ignore[no-untyped-def]
    app = create_app({"REDIS_URL": own_redis.url, "METRICS_FILE": str(metrics_file),
                      "REDIS_TIMEOUT_SECONDS": 0.3, "TESTING": True, **OPEN})
    client = redis.Redis.from_url(own_redis.url)
    yield app.test_client(), client
    client.close()
    app.extensions["deniable.store"].client.close()


def _read_only(client: redis.Redis, data_dir: Path) -> Callable[[], None]:
    """Demote the server to a replica of a master that is not there: writes get READONLY."""
    client.config_set("replica-read-only", "yes")
    client.replicaof("127.0.0.1", free_port())
    return lambda: client.replicaof("NO", "ONE")


def _no_replicas(client: redis.Redis, data_dir: Path) -> Callable[[], None]:
    """min-replicas-to-write 1 and no replica: writes get NOREPLICAS."""
    client.config_set("min-replicas-to-write", "1")
    return lambda: client.config_set("min-replicas-to-write", "0")


def _full(client: redis.Redis, data_dir: Path) -> Callable[[], None]:
    """maxmemory below what Redis uses, under noeviction: writes get OOM."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    return lambda: client.config_set("maxmemory", "0")


def _disk_failed(client: redis.Redis, data_dir: Path) -> Callable[[], None]:
    """Save points on and the last RDB save failed (its directory is gone, as a lost disk):
    writes get MISCONF (stop-writes-on-bgsave-error). Clearing the save points ends it."""
    client.config_set("save", "3600 1")
    shutil.rmtree(data_dir)
    client.bgsave()
    deadline = time.monotonic() + 10
    while client.info("persistence")["rdb_last_bgsave_status"] != "err":
        assert time.monotonic() < deadline, "the failing BGSAVE never ended"
        time.sleep(0.02)
    return lambda: client.config_set("save", "")


@pytest.mark.parametrize(("refuse", "error"), [
    (_read_only, "ReadOnlyError"), (_no_replicas, "WritesRefusedError"),
    (_full, "OutOfMemoryError"), (_disk_failed, "WritesRefusedError")])
def test_a_redis_that_refuses_writes_is_not_ready_and_ingest_answers_503(
        own_app, own_redis: RedisServer, refuse: Callable[..., Callable[[], None]],
        error: str) -> None:
    """Redis answers reads in every case (and PING, but under MISCONF), yet a write would
    fail: /readyz, deniable_redis_up and ingest all follow the write (503, never a 500), and
    nothing changes in Redis."""
    http, client = own_app
    assert http.post("/v1/reports", json=batch()).status_code == 202
    assert http.get("/readyz").status_code == 200
    assert redis_up(http) == 1
    before = snapshot(client)
    undo = refuse(client, own_redis.data_dir)
    try:
        assert client.dbsize() == len(before)
        assert_unavailable(http.get("/readyz"))
        assert redis_up(http) == 0
        assert f'deniable_storage_errors_total{{kind="{error}"}}' in http.get("/metrics").text
        assert_unavailable(http.post("/v1/reports", json=batch()))  # 503, not 500
        assert redis_up(http) == 0
    finally:
        undo()
    assert snapshot(client) == before
    assert http.get("/readyz").status_code == 200
    assert redis_up(http) == 1
    assert http.post("/v1/reports", json=batch()).status_code == 202


def redis_up(http) -> float:  # type: ignore[no-untyped-def]
    """deniable_redis_up as a scrape of the in-process collector's /metrics shows it."""
    match = re.search(r"^deniable_redis_up (\S+)$", http.get("/metrics").text, re.M)
    assert match is not None, "deniable_redis_up missing from /metrics"
    return float(match.group(1))


@pytest.mark.slow
def test_a_stalled_redis_times_out_as_503(own_app) -> None:
    http, client = own_app
    client.client_pause(1500, all=False)  # write commands block for 1.5 s
    started = time.monotonic()
    assert_unavailable(http.post("/v1/reports", json=batch()))
    assert time.monotonic() - started < 1.4  # the 0.3 s timeout (and one retry), not the pause
    time.sleep(max(0.0, 1.6 - (time.monotonic() - started)))
    assert http.post("/v1/reports", json=batch()).status_code in (200, 202)


@pytest.mark.slow
def test_sigterm_lets_an_in_flight_request_finish(redis_url: str, metrics_file: Path,
                                                  redis_client: redis.Redis) -> None:
    """A slow upload is in flight when SIGTERM arrives: it is still answered and counted,
    and then the server exits cleanly (within gunicorn's graceful_timeout)."""
    body = json.dumps(batch(n=50, bit=1)).encode()
    head = (f"POST /v1/reports HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    collector = CollectorProcess(redis_url, metrics_file, workers=1, env=OPEN_ENV)
    collector.start()
    try:
        with socket.create_connection(("127.0.0.1", collector.port), timeout=10) as sock:
            sock.sendall(head + body[:len(body) // 2])
            time.sleep(0.3)  # the worker has taken the request and waits for the rest
            assert collector.process is not None
            collector.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            sock.sendall(body[len(body) // 2:])
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
        assert collector.process.wait(timeout=10) == 0
        hour = keys.bucket_start(datetime.now(timezone.utc))
        assert hour_counts(redis_client, X, X_MECH, hour) == (50, 50)
    finally:
        collector.stop()
