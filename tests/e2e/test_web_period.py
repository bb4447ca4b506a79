"""The web client's period gate end to end (issue 27): 40 Node devices open an app twice a day
and call report() three times per run, on simulated days (the Reporter's clock); a real
gunicorn collector counts 40 reports of a daily metric a day and 40 of a weekly one a week,
however often the app starts. And a Node device without a store (finding 3) sends nothing
memoized, saying so at each start.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics
from tests.e2e.test_web_client import WEB, node

pytestmark = pytest.mark.slow

DEVICES = 40
METRICS = """\
[metrics.dark_mode]
mechanism = "rr:3/4:1/2"

[metrics.weekly_opt_in]
mechanism = "rr:1/2:1/2"
period = "week"
"""
WEDNESDAY = 20_418  # 2025-11-26 as a Unix day number (its ISO week runs Monday 24 to Sunday 30)


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("web-period"),
                                workers=2, flush=True) as process:
        yield process


def reports(url: str, metric: str) -> int:
    doc = requests.get(f"{url}/v1/metrics/{metric}/counts", timeout=5).json()
    return sum(b["counts"][0] for b in doc["buckets"])


def test_forty_devices_starting_twice_a_day_send_forty_reports_a_day(
        collector: CollectorProcess, tmp_path: Path) -> None:
    for day in range(3):  # Wednesday, Thursday, Friday: one ISO week
        done = subprocess.run([node(), "scripts/node-period-devices.mjs", collector.url,
                               str(tmp_path), str(DEVICES), str(WEDNESDAY + day), "2", "3"],
                              cwd=WEB, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        devices = json.loads(done.stdout)
        # Per device and day: 2 runs x 3 calls x 2 metrics = 12 calls; 1 daily report sent,
        # plus the weekly one on the first day.
        assert [d["sent"] for d in devices] == [2 + day] * DEVICES
        assert [d["periodSkipped"] for d in devices] == [10 if day == 0 else 11] * DEVICES
        assert reports(collector.url, "dark_mode") == DEVICES * (day + 1)
        assert reports(collector.url, "weekly_opt_in") == DEVICES
    states = [json.loads((tmp_path / str(i) / "queue.json").read_text())["periods"]
              for i in range(DEVICES)]
    assert states == [{"dark_mode/day": WEDNESDAY + 2, "weekly_opt_in/week": 2917}] * DEVICES


def test_a_node_device_without_a_store_sends_no_memoized_report_and_says_so(
        collector: CollectorProcess) -> None:
    """Issue 27, finding 3: a default Node Reporter (no nodeStorage) kept its secret in memory,
    so 15 starts gave 15 answers a majority vote decoded. Now it reports nothing memoized and
    warns once per start; counted in stats().droppedNoState."""
    before = reports(collector.url, "dark_mode")
    script = (f'import {{Reporter}} from "{(WEB / "dist" / "index.js").as_uri()}";\n'
              f'const r = new Reporter("{collector.url}", '
              '{metrics: {dark_mode: "rr:3/4:1/2"}});\n'
              'await r.waitReady(10000);\n'
              'r.report("dark_mode", true);\n'
              'await r.close(5000);\n'
              'console.log(JSON.stringify(r.stats()));\n')
    for _ in range(3):  # three starts of the app
        done = subprocess.run([node(), "--input-type=module", "-e", script], cwd=WEB,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["droppedNoState"] == 1
        assert done.stderr.count("deniable: no durable store") == 1, done.stderr
    assert reports(collector.url, "dark_mode") == before
