"""The Redis registry over the wire: every gunicorn worker sees a metric as soon as it exists."""
from __future__ import annotations

import time

import pytest
import requests

from deniable.collector import auth
from tests.conftest import snapshot

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

NEW, MECH = "onboarding_done", "rr:1/2:1/2"


def batch(i: int, metric: str = NEW, mechanism: str = MECH) -> dict:
    return {"batch_id": f"{i:032x}",
            "reports": [{"metric": metric, "mechanism": mechanism, "bit": i % 2}]}


def test_a_metric_registered_in_one_request_is_accepted_by_every_worker(
        live_secure_collector, redis_client) -> None:
    url = live_secure_collector.url
    admin = {"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"}
    ingest = {"Authorization": f"Bearer {auth.create_key(redis_client, 'ingest', 'a').secret}"}
    # Every worker has loaded (and cached) a registry without the metric.
    for i in range(10):
        assert requests.post(f"{url}/v1/reports", json=batch(i), headers=ingest,
                             timeout=5).status_code == 422
    created = requests.post(f"{url}/v1/admin/metrics", headers=admin, timeout=5,
                            json={"name": NEW, "mechanism": MECH, "retention_days": 7})
    assert created.status_code == 201
    # Separate connections, so the two workers share the requests; none may refuse.
    statuses = [requests.post(f"{url}/v1/reports", json=batch(100 + i), headers=ingest,
                              timeout=5).status_code for i in range(20)]
    assert statuses == [202] * 20
    read = {"Authorization": f"Bearer {auth.create_key(redis_client, 'read', 'b').secret}"}
    counts = requests.get(f"{url}/v1/metrics/{NEW}/counts", headers=read, timeout=5).json()
    assert sum(b["n"] for b in counts["buckets"]) == 20

    retired = requests.post(f"{url}/v1/admin/metrics/{NEW}/retire", headers=admin, timeout=5)
    assert retired.status_code == 200
    time.sleep(1.05)  # DENIABLE_REGISTRY_CACHE_SECONDS=1 for this collector
    before = snapshot(redis_client)
    statuses = [requests.post(f"{url}/v1/reports", json=batch(200 + i), headers=ingest,
                              timeout=5).status_code for i in range(10)]
    assert statuses == [422] * 10
    assert snapshot(redis_client) == before
    counts = requests.get(f"{url}/v1/metrics/{NEW}/counts", headers=read, timeout=5).json()
    assert counts["retired"] and sum(b["n"] for b in counts["buckets"]) == 20
