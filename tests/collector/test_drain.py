"""Graceful drain through a real gunicorn collector: after SIGTERM, new connections are refused
at once, and the request in flight finishes."""
from __future__ import annotations

import json
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV

pytestmark = pytest.mark.slow


def refused_within(port: int, seconds: float) -> float | None:
    """Seconds until a new connection to ``port`` is refused, or None if it never was."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            probe = socket.create_connection(("127.0.0.1", port), timeout=0.5)
        except ConnectionRefusedError:
            return time.monotonic() - start
        probe.close()
        time.sleep(0.02)
    return None


def test_after_sigterm_new_connections_are_refused_and_the_one_in_flight_finishes(
        redis_url: str, metrics_file: Path, redis_client) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps(encode_batch(new_batch_id(),
                                   [("feature_x_enabled", "rr:1/2:1/2", 1)] * 50)).encode()
    head = (f"POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    collector = CollectorProcess(redis_url, metrics_file, workers=2, env=OPEN_ENV)
    collector.start()
    try:
        assert collector.process is not None
        in_flight = socket.create_connection(("127.0.0.1", collector.port), timeout=10)
        in_flight.sendall(head + body[:20])  # a worker now waits for the rest of the body
        time.sleep(0.3)
        # SIGTERM to gunicorn's master only, as Kubernetes (PID 1) and systemd (KillMode=mixed)
        # send it.
        os.kill(collector.process.pid, signal.SIGTERM)
        # Before the fix, the busy worker's copy of the listening socket kept it open: new
        # connections were accepted by the kernel and then hung for as long as the drain.
        took = refused_within(collector.port, 5.0)
        assert took is not None and took < 3.0, took
        in_flight.sendall(body[20:])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = in_flight.recv(65536)
            if not chunk:
                break
            answer += chunk
        in_flight.close()
        assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["accepted"] == 50
        collector.process.wait(timeout=10)  # and then the collector exits
        assert '"level":"ERROR"' not in collector.log_tail(1 << 20)
    finally:
        collector.stop()


def test_collectors_on_one_host_share_no_control_socket(redis_url: str, metrics_file: Path,
                                                        tmp_path: Path) -> None:
    """gunicorn's default control socket is one per user ($HOME/.gunicorn/gunicorn.ctl or
    $XDG_RUNTIME_DIR/gunicorn.ctl): a second collector replaced the first one's, and stopping
    it deleted it. Off by default; with DENIABLE_CONTROL_SOCKET each instance has its own."""
    home = tmp_path / "home"
    home.mkdir()
    base = {**OPEN_ENV, "HOME": str(home), "XDG_RUNTIME_DIR": ""}
    sockets = [tmp_path / "one.ctl", tmp_path / "two.ctl"]
    plain = CollectorProcess(redis_url, metrics_file, workers=1, env=base)
    first, second = (CollectorProcess(redis_url, metrics_file, workers=1,
                                      env={**base, "DENIABLE_CONTROL_SOCKET": str(path)})
                     for path in sockets)
    try:
        with ThreadPoolExecutor(3) as pool:  # start all three at once: seconds, not 3x
            list(pool.map(CollectorProcess.start, (plain, first, second)))
        deadline = time.monotonic() + 5
        while not all(s.is_socket() for s in sockets) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(s.is_socket() for s in sockets)
        second.stop()
        assert sockets[0].is_socket()  # stopping one leaves the other's alone
        assert requests.get(f"{plain.url}/healthz", timeout=5).status_code == 200
    finally:
        for collector in (plain, first, second):
            collector.stop()
    assert list(home.iterdir()) == []  # no $HOME/.gunicorn: the default shares nothing
