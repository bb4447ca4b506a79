"""The web client's instantaneous layer end to end: Node devices (deniable-client/all, the file
queue, a device secret written as the Python client's) report a boolean metric declared with
an instantaneous layer to a real gunicorn collector on real Redis. Device by device, the
collector's count of ones follows the layer over the permanent answer the Python client derives
from that secret (memo_bit under the memo layer split(wire, irr)), and the device's ledger holds
exactly Python's tag for that answer.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deniable.client.composition import split
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit, spend_tag
from deniable.client.state import SECRET_FILE
from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics
from tests.e2e.test_web_client import WEB, node
from tests.e2e.test_web_kinds import summed_counts

pytestmark = pytest.mark.slow

WIRE, IRR = RandomizedResponse.from_id("rr:1/2:1/2"), RandomizedResponse.from_id("rr:3/4:1/2")
MEMO = split(WIRE, IRR)  # rr:2/3:1/2
METRICS = f"""\
[metrics.dark_mode]
mechanism = "{WIRE.id}"
memoization = "instantaneous"
instantaneous = "{IRR.id}"
"""
DECLARATION = {"dark_mode": {"mechanism": WIRE.id, "memoization": "instantaneous",
                             "instantaneous": IRR.id}}
REPORTS = 400


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("web-irr"),
                                workers=2, flush=True) as process:
        yield process


def _secrets() -> list[bytes]:
    """Four device secrets, deterministic: two whose permanent answer for "true" is 1 and two
    whose is 0, so a missing layer (ones = 0 or all) and a layer over the true value (7/8
    for every device) both show."""
    found: dict[int, list[bytes]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in found.values()) < 2:
        secret = i.to_bytes(32, "big")
        found[memo_bit(secret, "dark_mode", MEMO, 1)].append(secret)
        i += 1
    return found[1][:2] + found[0][:2]


def test_node_devices_report_the_layer_over_pythons_permanent_answers(
        collector: CollectorProcess, tmp_path: Path) -> None:
    # Each device sends REPORTS = 400 reports of "true"; its ones are Binomial(400, p) with
    # p = P1_irr = 7/8 if its permanent answer is 1, else Q_irr = 1/8 (SE 6.6 either way).
    # Tolerance 5.5 SE per device: P(|Z| > 5.5) = 3.8e-8, so over 4 devices a false failure
    # has probability < 1.6e-7. Without the layer a device would send 400 or 0 ones (>= 50 =
    # 7.6 SE away); with the layer over the true value, 350 for the answer-0 devices.
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(DECLARATION))
    reports = tmp_path / "reports.json"
    reports.write_text(json.dumps([["dark_mode", True]] * REPORTS))
    before = [0, 0]
    for d, secret in enumerate(_secrets()):
        home = tmp_path / f"device{d}"
        (home / "privacy").mkdir(parents=True, mode=0o700)
        (home / "privacy" / SECRET_FILE).write_bytes(secret)
        os.chmod(home / "privacy" / SECRET_FILE, 0o600)
        done = subprocess.run([node(), "scripts/node-kinds-reporter.mjs", collector.url,
                               str(home), str(reports), str(metrics)], cwd=WEB,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert result["sent"] is True and result["stats"]["queued"] == 0, result
        assert result["stats"]["ignoredServed"] == {}, result  # served as declared
        n, ones = summed_counts(collector.url, "dark_mode")
        assert n - before[0] == REPORTS
        p = IRR.p_yes_given_yes if memo_bit(secret, "dark_mode", MEMO, 1) else \
            IRR.p_yes_given_no
        got = ones - before[1]
        se = math.sqrt(REPORTS * p * (1 - p))
        assert abs(got - REPORTS * p) <= 5.5 * se, (d, got, float(p))
        before = [n, ones]
        state = json.loads((home / "queue.json").read_text())
        assert state["ledger"]["dark_mode"]["paid"] == [spend_tag(secret, "dark_mode", MEMO, 1)]
