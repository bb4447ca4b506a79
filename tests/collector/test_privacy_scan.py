"""What the server holds after real traffic: no batch content, no time finer than the hour.

A real collector (gunicorn, auth and rate limits on, behind one trusted proxy) takes batches
from the real client, a re-send, a reused id, bad requests and a read; then the privacy scan
reads every Redis key, value and expiry and every line the collector logged. It must find
nothing. The scan itself is checked on planted layout-1 records, fine expiries and logged ids.
"""
from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
import requests

from deniable.client import Delivery, Privacy, Reporter
from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.auth import create_key
from deniable.audit.privacy_scan import scan, scan_log_lines, scan_redis
from deniable.collector.server import CollectorProcess
from deniable.collector.store import Store
from tests.conftest import BATCH_SECRET

CLIENT_IP = "203.0.113.7"  # what the trusted proxy says; never to be stored or logged
X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"
DARK, DARK_MECH = "dark_mode", "rr:3/4:1/2"


@pytest.mark.slow
def test_after_real_traffic_the_scan_finds_nothing(redis_url: str, metrics_file: Path,
                                                   redis_client: redis.Redis) -> None:
    ingest = create_key(redis_client, "ingest", "shop").secret
    read = create_key(redis_client, "read", "analyst").secret
    env = {"DENIABLE_BATCH_SECRET": BATCH_SECRET, "DENIABLE_PROXY_FIX_X_FOR": "1",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "1000", "DENIABLE_RATE_LIMIT_IP_BURST": "1000",
           "DENIABLE_LOG_REQUESTS_DELAY_SECONDS": "0", "DENIABLE_AUTH_CACHE_SECONDS": "0"}
    headers = {"X-Forwarded-For": CLIENT_IP, "User-Agent": "secret-agent/1.0"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        # Traffic of many devices from one Reporter: every call is sent (no period gate).
        with Reporter(collector.url, metrics_file, token=ingest, delivery=Delivery(batch_size=50),
                      privacy=Privacy(one_per_period=False)) as reporter:
            for i in range(400):
                reporter.report(X, i % 3 == 0)
                reporter.report(DARK, i % 5 == 0)
            assert reporter.flush(15) is True
        auth = {**headers, "Authorization": f"Bearer {ingest}"}
        doc = encode_batch(new_batch_id(), [(X, X_MECH, 1), (DARK, DARK_MECH, 0)])
        url = f"{collector.url}/v1/reports"
        assert requests.post(url, json=doc, headers=auth, timeout=5).status_code == 202
        assert requests.post(url, json=doc, headers=auth, timeout=5).status_code == 200
        reused = encode_batch(doc["batch_id"], [(X, X_MECH, 0)])
        assert requests.post(url, json=reused, headers=auth, timeout=5).status_code == 409
        assert requests.post(url, data=b"{not json", headers={
            **auth, "Content-Type": "application/json"}, timeout=5).status_code == 400
        counts = requests.get(f"{collector.url}/v1/metrics/{X}/counts", timeout=5,
                              headers={**headers, "Authorization": f"Bearer {read}"})
        assert counts.status_code == 200 and sum(b["n"] for b in counts.json()["buckets"]) == 401
        time.sleep(0.3)
        lines = [line for line in collector.log_tail(1 << 24).splitlines() if line.strip()]
    assert sum('"route":"/v1/reports"' in line or "/v1/reports" in line for line in lines) >= 4
    stored = list(redis_client.scan_iter())
    assert any(keys.parse_counters(k.decode()) for k in stored)
    assert any(k.startswith(b"dn:v1:b:") for k in stored)
    assert any(k.startswith(b"dn:v1:rl:") for k in stored)
    # The collector's own bind address appears in gunicorn's "Listening at" line: not a client's.
    lines = [line for line in lines if "Listening at: http://127.0.0.1:" not in line]
    assert scan(redis_url, lines) == []


def test_the_scan_finds_reversible_records_fine_expiries_and_logged_ids(
        redis_client: redis.Redis, app) -> None:  # type: ignore[no-untyped-def]
    now = datetime.now(timezone.utc)
    batch = decode_batch(encode_batch(new_batch_id(), [(X, X_MECH, 1), (X, X_MECH, 0)]),
                         {X: X_MECH})
    assert Store(redis_client, "s").add_batch(batch, now, {X: 90}, 3600).name == "APPLIED"
    assert scan_redis(redis_client) == []  # what the collector writes is clean

    # Layout 1's record: the unkeyed digest, a TTL counted from the write (milliseconds).
    planted = keys.batch(new_batch_id())
    redis_client.set(planted, batch.digest, px=7 * 86400 * 1000 + 1234)
    layout1 = keys.counters_v1(X, X_MECH, now)
    redis_client.hset(layout1, mapping={"n": 2, "ones": 1})
    redis_client.expire(layout1, 90 * 86400)
    redis_client.set(keys.rate_limit("ip", "198.51.100.4"), "x", ex=10)
    redis_client.set("somebody:else", "1")
    truncated = keys.batch(new_batch_id())
    digest = hashlib.sha256(f"{X}|{X_MECH}|3|2".encode()).hexdigest()
    redis_client.set(truncated, digest[:32], exat=(int(now.timestamp()) // 3600 + 2) * 3600)
    # A cluster's marker hashes (keys.batch_markers): clean when they hold 16-byte ids marked
    # 1 and expire on the hour; flagged when a field or value is anything else.
    hour_end = (int(now.timestamp()) // 3600 + 2) * 3600
    clean_markers = keys.batch_markers(X, hour_end)
    redis_client.hset(clean_markers, keys.marker_field(batch.batch_id), "1")
    redis_client.expireat(clean_markers, hour_end)
    bad_markers = keys.batch_markers(X, hour_end + 3600)
    redis_client.hset(bad_markers, keys.marker_field(new_batch_id()), batch.digest)
    redis_client.expireat(bad_markers, hour_end + 3600)
    problems = {(f.where, f.problem.split(":")[0].split(" (")[0]) for f in scan_redis(redis_client)}
    assert not any(where == clean_markers for where, _ in problems)
    assert (bad_markers, "holds a marker that is not a 16-byte batch id marked '1'") in problems
    assert (planted, "holds a 256-bit digest") in problems
    assert (planted, "reversed") in problems
    assert any(where == planted and p.startswith("expires at") for where, p in problems)
    assert any(where == layout1 and p.startswith("is a layout-1 hour hash") for where, p in problems)
    assert any(where == layout1 and p.startswith("expires at") for where, p in problems)
    assert ("somebody:else", "is not in the key layout") in problems
    assert any(where.startswith("dn:v1:rl:ip:198") and p == "holds an IP address"
               for where, p in problems)
    assert (truncated, "reversed") in problems  # a truncated unkeyed digest is no better

    lines = ['{"ts":"2026-11-23T10:00:00.123+00:00","message":"request","route":"/v1/reports"}',
             f'{{"message":"stored","batch_id":"{batch.batch_id}"}}',
             "GET /v1/metrics from 198.51.100.4"]
    found = scan_log_lines(lines, {batch.batch_id})
    assert {f.where for f in found} == {"log line 2", "log line 3"}
