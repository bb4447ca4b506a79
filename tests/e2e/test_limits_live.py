"""Rate limits over the wire: 429 with Retry-After from a real gunicorn collector, no IP stored."""
from __future__ import annotations

import requests

import pytest

from deniable.collector.server import CollectorProcess
from tests.conftest import snapshot

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


def test_a_flooding_client_gets_429_and_leaves_no_ip_behind(redis_url, metrics_file,
                                                            redis_client) -> None:
    env = {"DENIABLE_AUTH": "off", "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0.5",
           "DENIABLE_RATE_LIMIT_IP_BURST": "5"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        statuses, retry_after = [], None
        for i in range(8):
            response = requests.post(f"{collector.url}/v1/reports", timeout=5, json={
                "batch_id": f"{i:032x}",
                "reports": [{"metric": X, "mechanism": X_MECH, "bit": 1}]})
            statuses.append(response.status_code)
            if response.status_code == 429:
                retry_after = response.headers["Retry-After"]
                assert response.headers["Content-Type"] == "application/problem+json"
        # One bucket for this client, whichever worker answers (`deniable serve` gives all
        # workers one secret; the single rl:ip key below shows it).
        assert statuses == [202] * 5 + [429] * 3
        assert retry_after in ("1", "2")
        # Only the counters and batch ids of the 5 accepted batches changed, besides the bucket.
        before = {k: v for k, v in snapshot(redis_client).items() if b":rl:" not in k}
        response = requests.post(f"{collector.url}/v1/reports", timeout=5, json={
            "batch_id": "f" * 32, "reports": [{"metric": X, "mechanism": X_MECH, "bit": 1}]})
        assert response.status_code == 429
        after = {k: v for k, v in snapshot(redis_client).items() if b":rl:" not in k}
        assert after == before
        log = collector.log_tail(50_000)
    everything = b"".join(k + redis_client.dump(k) for k in redis_client.scan_iter())
    assert b"127.0.0.1" not in everything and b"7f000001" not in everything
    assert "127.0.0.1" not in log.replace(collector.url, "")
    assert len(list(redis_client.scan_iter("dn:v1:rl:ip:*"))) == 1
