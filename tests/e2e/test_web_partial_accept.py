"""One mismatched metric never costs a web client's batch (issue 30 item 1): a Node device
(the default entry, its file queue) declares ``feature_x_enabled`` under ``rr:1/2:1/2`` while
the collector registers it under ``rr:3/4:1/2``. The batches go with ``Prefer:
handling=lenient``: ``dark_mode`` in the same batches is counted exactly, ``feature_x_enabled``'s
reports are kept as dead letters of their own and shown in ``stats()``, and counted once each
after ``retryDeadLetters()`` once the collector registers the app's question.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV
from tests.e2e.test_pipeline import counters
from tests.e2e.test_web_client import WEB, node

COLLECTOR = """\
[metrics.dark_mode]
mechanism = "rr:3/4:1/2"

[metrics.feature_x_enabled]
mechanism = "%s"
"""
N = 30  # reports of each metric; node-reporter.mjs seals batches of 40: both metrics in each
RETRY = """\
import {Reporter} from "./dist/index.js";
import {nodeStorage} from "./dist/node.js";
const [url, dir] = process.argv.slice(1);
const reporter = new Reporter(url, {log: () => undefined, ...nodeStorage(dir), onePerPeriod: false,
  metrics: {feature_x_enabled: "rr:1/2:1/2", dark_mode: "rr:3/4:1/2"}});
const moved = await reporter.retryDeadLetters();
const sent = await reporter.close(15000);
process.stdout.write(JSON.stringify({moved, sent, stats: reporter.stats()}) + "\\n");
"""


@pytest.fixture()
def collector(tmp_path: Path, redis_url: str, redis_client: redis.Redis
              ) -> Iterator[CollectorProcess]:
    path = tmp_path / "collector.toml"
    path.write_text(COLLECTOR % "rr:3/4:1/2")  # not the app's rr:1/2:1/2
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as process:
        yield process


def run(args: list[str]) -> dict[str, Any]:
    """Run node in web/ with `args`; its JSON output."""
    done = subprocess.run([node(), *args], cwd=WEB, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.slow
def test_a_node_devices_valid_metrics_are_counted_and_the_mismatched_one_is_kept(
        collector: CollectorProcess, redis_client: redis.Redis, tmp_path: Path) -> None:
    device = tmp_path / "device"
    first = run(["scripts/node-reporter.mjs", collector.url, "", str(device), str(N), "15000"])
    stats = first["stats"]
    assert first["sent"] is True, first
    assert (stats["sent"], stats["refused"], stats["deadLettered"], stats["queued"]) == \
        (N, N, 0, 0), stats
    assert set(stats["refusedMetrics"]) == {"feature_x_enabled"}
    assert "registered mechanism" in stats["refusedMetrics"]["feature_x_enabled"]
    totals = counters(redis_client)
    assert set(totals) == {"dark_mode"}
    assert totals["dark_mode"] == (N, totals["dark_mode"][1])  # every dark_mode report, once

    # The collector now registers the app's question: the kept reports are counted once each.
    collector.stop()
    (tmp_path / "collector.toml").write_text(COLLECTOR % "rr:1/2:1/2")
    collector.start()
    second = run(["--input-type=module", "-e", RETRY, collector.url, str(device)])
    assert second["moved"] >= 1 and second["sent"] is True, second
    stats = second["stats"]
    assert (stats["refused"], stats["refusedMetrics"], stats["deadLettered"]) == (0, {}, 0), stats
    assert stats["sent"] == 2 * N
    totals = counters(redis_client)
    assert totals["feature_x_enabled"][0] == N and totals["dark_mode"][0] == N
