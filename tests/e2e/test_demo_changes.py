"""The demo's injected changes all show as changes, read as a user would: ``deniable demo
--keep`` leaves its collector and data up, ``deniable report --changes`` reads them over
HTTP, and Ctrl-C stops everything.

A reduced demo (10,000 devices, 4 simulated days, the change from day 3), through the real
client, collector and Redis. False-failure rate, per injected change (each a family of its
own, alpha 0.05; memoized devices whose value did not change send the same bits in both
halves, so the estimated change's noise comes only from the devices that changed):
- dark_mode 50 % -> 56 %: ~600 devices change; the change's SD is at most
  2 sqrt(600 * 0.375) / 10,000 = 0.003 (plus 0.0025 from how many change), and it is marked
  above 1.96 * sqrt(2) / 100 = 0.028: 0.06 is > 7 SDs above that (< 1e-12).
- new_editor 25 % -> ~34 %: ~900 devices change, SD < 0.005, marked above 0.028: > 10 SDs.
- os android -6 points, ios +6 points (Holm over 6 categories, z > 2.64 needed, about
  0.033): ~600 devices move, SD of each share's change < 0.004: > 6 SDs (< 1e-9).
- startup_ms x0.8 (about -190 ms on [0, 3000] at epsilon 2): every device's value changes,
  so all its bits are fresh: SD about 27 ms, marked beyond 1.96 * 27.8 = 54.5 ms: 5.1 SDs,
  about 2e-7.
Together below 1e-6.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tests.e2e.test_demo_lifecycle import port_open, run_demo, wait_for_ports


@pytest.mark.slow
def test_every_injected_change_shows_and_keep_leaves_the_data_to_explore(tmp_path) -> None:  # type: ignore[no-untyped-def]
    demo = run_demo("--devices", "10000", "--other-devices", "10000", "--days", "4",
                    "--seed", "3", "--keep", "--html", str(tmp_path / "demo.html"))
    try:
        redis_port, collector_port = wait_for_ports(demo)
        assert demo.stdout is not None
        output = []
        for line in demo.stdout:  # until the demo says how to explore what it keeps
            output.append(line)
            if "the live dashboard:" in line:
                break
        text = "".join(output)
        url = f"http://127.0.0.1:{collector_port}"
        assert f"deniable report --collector {url}" in text, text[-3000:]
        assert (tmp_path / "demo.html").exists()
        # Simulated day d (0-based) is filed 3 - d days ago; the change starts on day 2.
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        first, split = today - timedelta(days=3), today - timedelta(days=1)
        done = subprocess.run([sys.executable, "-m", "deniable.cli", "report", "--collector",
                               url, "--changes", "--from", first.isoformat(), "--split",
                               split.isoformat()], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "What changed" in done.stdout, done.stdout
        lines = {m.group(1): m.group(0) for m in
                 re.finditer(r"^\s+\S*\s+(\w+): .*$", done.stdout, re.M)}
        for metric in ("dark_mode", "new_editor", "startup_ms"):
            assert "a change (p" in lines[metric], lines[metric]
        assert re.search(r"os: 2 of 6 categories changed: android down .*; ios up ",
                         lines["os"]), lines["os"]
        assert lines["startup_ms"].startswith("  \u25bc  startup_ms: down ")
        assert "Family: each metric on its own" in done.stdout
        # The 60 devices on 2.2 are hidden in a one-day view and in the whole range alike.
        for window in ([], ["--from", today.isoformat()]):
            shown = subprocess.run([sys.executable, "-m", "deniable.cli", "report",
                                    "--collector", url, "--metric", "new_editor", "--by",
                                    "app_version", "--format", "json", *window],
                                   capture_output=True, text=True, timeout=120)
            assert shown.returncode == 0, shown.stderr
            [b] = json.loads(shown.stdout)["breakdowns"]
            cells = {c["value"]: c for c in b["cells"]}
            assert cells["2.2"]["suppressed"] and cells["2.2"]["estimate"] is None
            assert cells["2.2"]["devices"] == 60 and cells["2.2"]["n"] == (60 * 4 if not window
                                                                            else 60)
            assert not cells["2.4"]["suppressed"]
        assert port_open(redis_port) and port_open(collector_port)  # still up, as promised
    finally:
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, rest[-2000:]
    assert not port_open(redis_port) and not port_open(collector_port)
