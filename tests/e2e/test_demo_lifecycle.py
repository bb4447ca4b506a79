"""The demo as a user runs it: it finishes, and it cleans up every process it started."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def run_demo(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deniable.cli", "demo", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "160"})


def wait_for_ports(demo: subprocess.Popen[str], timeout: float = 30) -> tuple[int, int]:
    """Read the demo's output until it has named its Redis and collector ports."""
    redis_port = collector_port = None
    deadline = time.monotonic() + timeout
    assert demo.stdout is not None
    while time.monotonic() < deadline and not (redis_port and collector_port):
        line = demo.stdout.readline()
        if not line:
            break
        if match := re.search(r"Redis on redis://127\.0\.0\.1:(\d+)", line):
            redis_port = int(match.group(1))
        if match := re.search(r"on http://127\.0\.0\.1:(\d+)", line):
            collector_port = int(match.group(1))
    assert redis_port and collector_port, "the demo never named its servers"
    return redis_port, collector_port


@pytest.mark.slow
def test_the_demo_reports_every_metric_and_stops_its_servers() -> None:
    demo = run_demo("--devices", "20000", "--other-devices", "5000")
    redis_port, collector_port = wait_for_ports(demo)
    output, _ = demo.communicate(timeout=120)
    assert demo.returncode == 0, output
    for metric in ("crash_reporter_enabled", "dark_mode", "notifications_on"):
        assert metric in output
    assert re.search(r"\d of 3 true shares fall inside their 95%\s+intervals", output)
    assert re.search(r"intervals\s+count\s+20,000\s+devices,\s+not\s+140,000\s+reports", output)
    # The other kinds: every category, bucket and day, truth beside estimate and interval.
    assert re.search(r"5,000\s+of\s+the\s+devices\s+also\s+reported", output)
    for title in ("os (categorical", "crashes_per_week (histogram", "startup_ms (numeric"):
        assert title in output
    for label in ("android", "ios", "windows", "macos", "linux", "other", "[10, 100]"):
        assert label in output
    assert len(re.findall(r"│\s+\d\s+│\s+5,000\s+│", output)) == 7  # one row per day
    assert re.search(r"\d+\s+of\s+29\s+true\s+values\s+fall\s+inside\s+their\s+95%\s+intervals",
                     output)
    # The breakdown: new_editor by app_version on the last day, truth beside estimate and
    # interval per version; the 60 devices on 2.2 are suppressed, and the output says why.
    assert "new_editor (rr:1/2:1/2) by app_version" in output
    number, share = r"[\d,.]+", r"[\d.]+ % \([\d.]+\u2013[\d.]+ %\)"
    for version in ("2.3", "2.4", "2.5", "other"):
        assert re.search(rf"│ {re.escape(version)}\s+│\s+{number}\s+│\s+{number} %\s+│\s+"
                         rf"{share}\s+│", output), version
    assert re.search(rf"│ 2\.2\s+│\s+60\s+│\s+{number} %\s+│\s+suppressed\s+│", output)
    assert re.search(r"│ not stated \(2\.1\)\s+│\s+[1-9][\d,]*\s+│", output)
    assert re.search(r"1\s+cell\s+suppressed,\s+2\.2\s+\(n\s+=\s+60,\s+60\s+devices\):\s+each\s+"
                     r"has\s+fewer\s+than\s+100\s+devices", output)
    assert re.search(r"\d\s+of\s+4\s+true\s+shares\s+fall\s+inside", output)
    # 2.5 turns the feature on by default (70% against 25%): about 11 standard errors apart.
    assert re.search(r"2\.5\s+above\s+2\.3\s+by\s+\d+\s+points", output)
    assert re.search(r"2\.5\s+above\s+2\.4\s+by\s+\d+\s+points", output)
    assert re.search(r"NOT\s+protected\s+by\s+local\s+differential\s+privacy", output)
    assert not port_open(redis_port) and not port_open(collector_port)


@pytest.mark.slow
def test_ctrl_c_stops_every_process_the_demo_started() -> None:
    demo = run_demo("--devices", "3000000")  # long enough to interrupt mid-run
    redis_port, collector_port = wait_for_ports(demo)
    assert port_open(redis_port) and port_open(collector_port)
    time.sleep(1.0)
    demo.send_signal(signal.SIGINT)
    try:
        demo.communicate(timeout=30)
    finally:
        if demo.poll() is None:  # never leave a stuck demo behind
            demo.kill()
            demo.communicate()
    assert demo.returncode == 130
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (port_open(redis_port) or port_open(collector_port)):
        time.sleep(0.1)
    assert not port_open(redis_port), "the demo left its Redis running"
    assert not port_open(collector_port), "the demo left its collector running"
