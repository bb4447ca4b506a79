"""Access control over the wire, against a real gunicorn collector with auth on."""
from __future__ import annotations

import json
import time

import pytest
import requests

from deniable.cli.main import main
from deniable.client import Delivery, Privacy, Reporter
from deniable.collector import auth
from deniable.collector.server import CollectorProcess
from tests.client.test_sender import wait_for
from tests.conftest import DECLARED, snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


def bearer(key: auth.NewKey) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.secret}"}


def one_batch(i: int) -> dict:
    return {"batch_id": f"{i:032x}", "reports": [{"metric": X, "mechanism": X_MECH, "bit": 1}]}


def test_an_app_reports_with_its_key_and_an_analyst_reads_with_theirs(
        live_secure_collector, redis_client, capsys) -> None:
    url = live_secure_collector.url
    ingest = auth.create_key(redis_client, "ingest", "shop")
    read = auth.create_key(redis_client, "read", "analysts")
    with Reporter(url, DECLARED) as keyless:  # no key: the catalogue itself is refused
        wait_for(lambda: keyless.last_error is not None)
        assert keyless.stats().key_refused and not keyless.catalogue_fetched
        assert "401" in (keyless.last_error or "")
        keyless.close(timeout=0)
    with Reporter(url, DECLARED, delivery=Delivery(batch_size=100),
                  privacy=Privacy(one_per_period=False), token=ingest.secret) as reporter:
        for i in range(300):
            reporter.report(X, i % 3 == 0)
    # The leaked-ingest-key case: it cannot read counts.
    response = requests.get(f"{url}/v1/metrics/{X}/counts", headers=bearer(ingest), timeout=5)
    assert response.status_code == 403
    assert response.headers["Content-Type"] == "application/problem+json"

    assert main(["report", "--collector", url, "--token", read.secret, "--metric", X,
                 "--format", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["metrics"]
    assert (row["metric"], row["n"]) == (X, 300)
    assert main(["report", "--collector", url, "--token", ingest.secret, "--metric", X]) == 1
    assert "403" in capsys.readouterr().err


def test_missing_and_wrong_keys_over_http_are_401_and_change_nothing(
        live_secure_collector, redis_client) -> None:
    url = f"{live_secure_collector.url}/v1/reports"
    ingest = auth.create_key(redis_client, "ingest", "shop")
    assert requests.post(url, json=one_batch(1), headers=bearer(ingest), timeout=5).status_code \
        == 202
    before = snapshot(redis_client)
    for headers in ({}, {"Authorization": "Bearer " + ingest.secret[:-1] + "#"},
                    {"Authorization": f"Bearer dnk_{'f' * 16}_{'x' * 43}"}):
        response = requests.post(url, json=one_batch(2), headers=headers, timeout=5)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.headers["Content-Type"] == "application/problem+json"
    assert snapshot(redis_client) == before


@pytest.mark.slow
def test_a_revoked_key_is_refused_by_every_worker_within_the_cache_window(
        live_secure_collector, redis_client) -> None:
    url = f"{live_secure_collector.url}/v1/reports"
    key = auth.create_key(redis_client, "ingest", "shop")
    for i in range(10):  # warm the key cache of both workers
        assert requests.post(url, json=one_batch(i), headers=bearer(key),
                             timeout=5).status_code == 202
    auth.revoke_key(redis_client, key.info.key_id)
    revoked_at = time.monotonic()
    time.sleep(1.05)  # DENIABLE_AUTH_CACHE_SECONDS=1 for this collector
    before = snapshot(redis_client)
    statuses = [requests.post(url, json=one_batch(100 + i), headers=bearer(key),
                              timeout=5).status_code for i in range(10)]
    assert statuses == [401] * 10
    assert time.monotonic() - revoked_at < 5
    assert snapshot(redis_client) == before


@pytest.mark.slow
def test_dev_mode_collector_logs_a_loud_warning(redis_url, metrics_file, redis_client) -> None:
    with CollectorProcess(redis_url, metrics_file, workers=1,
                          env={"DENIABLE_AUTH": "off"}) as collector:
        assert requests.get(f"{collector.url}/v1/metrics", timeout=5).status_code == 200
        log = collector.log_tail(20_000)
    # Every log line is JSON: the loud warning is one at level "warning".
    loud = [json.loads(line) for line in log.splitlines()
            if line.startswith("{") and "AUTHENTICATION IS DISABLED" in line]
    assert loud and all(entry["level"] == "warning" for entry in loud)
