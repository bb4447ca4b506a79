"""Abuse limits: per-IP and per-key token buckets (429 + Retry-After), no IP in Redis, batch caps."""
from __future__ import annotations

from pathlib import Path

import pytest
import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.collector.app import create_app
from deniable.collector.ratelimit import RateLimiter
from tests.conftest import OPEN, snapshot

X, X_MECH, DARK, DARK_MECH = "feature_x_enabled", "rr:1/2:1/2", "dark_mode", "rr:3/4:1/2"


def counters_and_batches(client: redis.Redis) -> dict[bytes, bytes]:
    """The snapshot minus rate-limit buckets, which a refused request may legitimately drain."""
    return {k: v for k, v in snapshot(client).items() if not k.startswith(b"dn:v1:rl:")}


def make_app(redis_url: str, metrics_file: Path, **settings):  # type: ignore[no-untyped-def]
    return create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                       **OPEN, **settings})


def batch() -> dict:
    return encode_batch(new_batch_id(), [(X, X_MECH, 1)])


def test_the_per_ip_bucket_answers_429_with_retry_after(redis_url, metrics_file,
                                                        redis_client) -> None:
    app = make_app(redis_url, metrics_file, RATE_LIMIT_IP_PER_SECOND=0.5,
                   RATE_LIMIT_IP_BURST=3)
    http = app.test_client()
    for _ in range(3):
        assert http.post("/v1/reports", json=batch()).status_code == 202
    before = counters_and_batches(redis_client)
    refused = http.post("/v1/reports", json=batch())
    assert refused.status_code == 429
    assert refused.mimetype == "application/problem+json"
    # One token refills in 1 / 0.5 = 2 s (less whatever has refilled since the burst).
    assert refused.headers["Retry-After"] in ("1", "2")
    assert counters_and_batches(redis_client) == before
    # Another client address has its own bucket.
    other = http.post("/v1/reports", json=batch(), environ_base={"REMOTE_ADDR": "198.51.100.7"})
    assert other.status_code == 202


def test_rate_limit_keys_hold_a_keyed_hash_with_a_ttl_and_no_ip(redis_url, metrics_file,
                                                                redis_client) -> None:
    ip = "203.0.113.42"
    app = make_app(redis_url, metrics_file, RATE_LIMIT_IP_PER_SECOND=1, RATE_LIMIT_IP_BURST=5)
    app.test_client().post("/v1/reports", json=batch(), environ_base={"REMOTE_ADDR": ip})
    limits = [k for k in redis_client.scan_iter("dn:v1:rl:*")]
    assert len(limits) == 1
    subject = limits[0].decode().rsplit(":", 1)[1]
    assert len(subject) == 32 and int(subject, 16) >= 0
    assert 0 < redis_client.pttl(limits[0]) <= 6000  # a full bucket is forgotten in 5 s + 1
    everything = b"".join(k + redis_client.dump(k) for k in redis_client.scan_iter())
    for form in (ip, ip.replace(".", ""), "cb00712a"):  # dotted, digits, hex of 203.0.113.42
        assert form.encode() not in everything
    # Another process with its own random secret maps the same IP elsewhere.
    other = RateLimiter(redis_client, ip_rate=1, ip_burst=1, key_rate=0, key_burst=1)
    assert other.ip_subject(ip) != subject
    assert RateLimiter(redis_client, ip_rate=1, ip_burst=1, key_rate=0, key_burst=1,
                       secret="s").ip_subject(ip) == RateLimiter(
        redis_client, ip_rate=1, ip_burst=1, key_rate=0, key_burst=1,
        secret="s").ip_subject(ip)
    # An all-digit secret from the environment arrives as a number, and still works as text.
    as_text = RateLimiter(redis_client, ip_rate=1, ip_burst=1, key_rate=0, key_burst=1,
                          secret="1234").ip_subject(ip)
    assert RateLimiter(redis_client, ip_rate=1, ip_burst=1, key_rate=0, key_burst=1,
                       secret=1234).ip_subject(ip) == as_text


def test_the_per_key_bucket_limits_one_key_and_not_another(redis_url, metrics_file,
                                                           redis_client) -> None:
    app = make_app(redis_url, metrics_file, AUTH="on", RATE_LIMIT_KEY_PER_SECOND=0.2,
                   RATE_LIMIT_KEY_BURST=2)
    http = app.test_client()
    shop = {"Authorization": f"Bearer {auth.create_key(redis_client, 'ingest', 'shop').secret}"}
    game = {"Authorization": f"Bearer {auth.create_key(redis_client, 'ingest', 'game').secret}"}
    assert [http.post("/v1/reports", json=batch(), headers=shop).status_code
            for _ in range(3)] == [202, 202, 429]
    before = counters_and_batches(redis_client)
    limited = http.post("/v1/reports", json=batch(), headers=shop)
    assert limited.status_code == 429 and limited.headers["Retry-After"] in ("4", "5")
    assert counters_and_batches(redis_client) == before
    assert http.post("/v1/reports", json=batch(), headers=game).status_code == 202


def test_bad_credentials_still_drain_the_ip_bucket(redis_url, metrics_file,
                                                   redis_client) -> None:
    app = make_app(redis_url, metrics_file, AUTH="on", RATE_LIMIT_IP_PER_SECOND=0.1,
                   RATE_LIMIT_IP_BURST=2)
    http = app.test_client()
    wrong = {"Authorization": f"Bearer dnk_{'0' * 16}_{'A' * 43}"}
    assert [http.get("/v1/metrics", headers=wrong).status_code for _ in range(3)] == \
        [401, 401, 429]


def test_behind_a_trusted_proxy_the_forwarded_ip_is_the_client(redis_url, metrics_file,
                                                               redis_client) -> None:
    limited = dict(RATE_LIMIT_IP_PER_SECOND=0.1, RATE_LIMIT_IP_BURST=1)
    direct = make_app(redis_url, metrics_file, **limited).test_client()
    # Without PROXY_FIX_X_FOR, X-Forwarded-For is ignored: it cannot be spoofed to dodge limits.
    statuses = [direct.post("/v1/reports", json=batch(),
                            headers={"X-Forwarded-For": f"192.0.2.{i}"}).status_code
                for i in range(2)]
    assert statuses == [202, 429]
    redis_client.flushdb()
    proxied = make_app(redis_url, metrics_file, PROXY_FIX_X_FOR=1, **limited).test_client()
    statuses = [proxied.post("/v1/reports", json=batch(),
                             headers={"X-Forwarded-For": f"192.0.2.{i}"}).status_code
                for i in (1, 2, 1)]
    assert statuses == [202, 202, 429]


def test_too_many_distinct_metrics_in_one_batch_is_422(redis_url, metrics_file,
                                                       redis_client) -> None:
    http = make_app(redis_url, metrics_file, MAX_BATCH_METRICS=1).test_client()
    assert http.post("/v1/reports", json=batch()).status_code == 202
    before = snapshot(redis_client)
    mixed = encode_batch(new_batch_id(), [(X, X_MECH, 1), (DARK, DARK_MECH, 0)])
    response = http.post("/v1/reports", json=mixed)
    assert response.status_code == 422
    assert response.json["errors"] == [{"pointer": "/reports", "detail": "holds 2 distinct "
                                        "metrics; the most is 1"}]
    assert snapshot(redis_client) == before


@pytest.mark.parametrize("setting, value, body, status", [
    ("MAX_BODY_BYTES", 200, encode_batch("0" * 32, [(X, X_MECH, 1)] * 10), 413),
    ("MAX_BATCH_REPORTS", 5, encode_batch("0" * 32, [(X, X_MECH, 1)] * 6), 422),
])
def test_body_size_and_reports_per_batch_are_configurable(redis_url, metrics_file, redis_client,
                                                          setting: str, value: int, body: dict,
                                                          status: int) -> None:
    http = make_app(redis_url, metrics_file, **{setting: value}).test_client()
    before = snapshot(redis_client)
    response = http.post("/v1/reports", json=body)
    assert response.status_code == status
    assert response.mimetype == "application/problem+json"
    assert snapshot(redis_client) == before
