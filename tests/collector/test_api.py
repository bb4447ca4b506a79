"""The v1 API against a real Redis: accepted whole or not at all, and only counters stored."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.app import create_app
from deniable.collector.embedded import free_port
from tests.conftest import hour_counts, put_counts, snapshot

X, DARK = "feature_x_enabled", "dark_mode"
X_MECH, DARK_MECH = "rr:1/2:1/2", "rr:3/4:1/2"


def batch(bits_x: list[int], bits_dark: list[int] = (), batch_id: str | None = None) -> dict:
    reports = [(X, X_MECH, b) for b in bits_x] + [(DARK, DARK_MECH, b) for b in bits_dark]
    return encode_batch(batch_id or new_batch_id(), reports)


def hour_now() -> datetime:
    return keys.bucket_start(datetime.now(timezone.utc))


def test_a_batch_is_counted_exactly(http, redis_client: redis.Redis) -> None:
    response = http.post("/v1/reports", json=batch([1, 0, 1, 1], [0, 1]))
    assert response.status_code == 202
    assert response.json["accepted"] == 6
    hour = hour_now()
    assert hour_counts(redis_client, X, X_MECH, hour) == (4, 3)
    assert hour_counts(redis_client, DARK, DARK_MECH, hour) == (2, 1)


def test_only_counters_and_batch_ids_are_stored_with_ttls(http, redis_client: redis.Redis) -> None:
    doc = batch([1, 0], [1])
    http.post("/v1/reports", json=doc, headers={"User-Agent": "secret-agent/1.0"})
    hour = hour_now()
    expected = {keys.counters(X, X_MECH, hour), keys.counters(DARK, DARK_MECH, hour),
                keys.batch(doc["batch_id"]),
                keys.registry(), keys.registry_generation(),  # the metric registry
                keys.layout_marker()}  # "no layout-1 counters here", found at start
    stored = {k.decode() for k in redis_client.scan_iter()}
    assert stored == expected
    assert all(k.startswith("dn:v1:") for k in stored)
    # Retention: 90 days by default, 30 for dark_mode, after the month's end; batch ids kept
    # 7 days, rounded up to the hour. Every expiry falls on an hour boundary.
    month = keys.month_of(hour)
    assert redis_client.expiretime(keys.counters(X, X_MECH, hour)) == \
        month.end_hour * 3600 + 90 * 86400
    assert redis_client.expiretime(keys.counters(DARK, DARK_MECH, hour)) == \
        month.end_hour * 3600 + 30 * 86400
    claim_expiry = redis_client.expiretime(keys.batch(doc["batch_id"]))
    assert claim_expiry % 3600 == 0
    assert 7 * 86400 <= claim_expiry - datetime.now(timezone.utc).timestamp() <= 7 * 86400 + 3600
    everything = b"".join(redis_client.dump(k) for k in redis_client.scan_iter())
    for leak in (b"127.0.0.1", b"secret-agent"):
        assert leak not in everything


def test_a_resent_batch_is_acknowledged_and_counted_once(http, redis_client) -> None:
    doc = batch([1, 1, 0], [1])
    assert http.post("/v1/reports", json=doc).status_code == 202
    before = snapshot(redis_client)
    again = http.post("/v1/reports", json=doc)
    assert again.status_code == 200
    assert again.json == {"batch_id": doc["batch_id"], "accepted": 0, "duplicate": True}
    assert snapshot(redis_client) == before


def test_a_batch_id_reused_for_other_content_is_a_conflict(http, redis_client) -> None:
    doc = batch([1, 1, 0])
    http.post("/v1/reports", json=doc)
    before = snapshot(redis_client)
    other = batch([1, 1, 1], batch_id=doc["batch_id"])
    response = http.post("/v1/reports", json=other)
    assert response.status_code == 409
    assert response.json["errors"] == [{"pointer": "/batch_id",
                                        "detail": "already used for other content"}]
    assert snapshot(redis_client) == before


BAD_REQUESTS = [
    pytest.param(dict(data=b'{"batch_id": ', content_type="application/json"), 400, [""],
                 id="malformed-json"),
    pytest.param(dict(data=b'{"a": NaN}', content_type="application/json"), 400, [""], id="nan"),
    pytest.param(dict(data=b"\xff\xfe", content_type="application/json"), 400, [""],
                 id="not-utf8"),
    pytest.param(dict(data=b"bit=1", content_type="application/x-www-form-urlencoded"), 415,
                 [], id="not-json"),
    pytest.param(dict(data=b"{}"), 415, [], id="no-content-type"),
    pytest.param(dict(data=b" " * (1 << 20 + 1), content_type="application/json"), 413, [],
                 id="too-large"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1},
        {"metric": X, "mechanism": X_MECH, "bit": True}]}), 422, ["/reports/1/bit"],
        id="bool-bit"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 2}]}), 422, ["/reports/0/bit"], id="bit-2"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": "unknown_metric", "mechanism": X_MECH, "bit": 1}]}), 422,
        ["/reports/0/metric"], id="unknown-metric"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": X, "mechanism": "rr:3/4:1/2", "bit": 1}]}), 422, ["/reports/0/mechanism"],
        id="wrong-mechanism"),
    pytest.param(dict(json={"batch_id": "not-hex", "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1}]}), 422, ["/batch_id"], id="bad-batch-id"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": []}), 422, ["/reports"],
                 id="empty-batch"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1}] * 1001}), 422, ["/reports"],
        id="batch-too-large"),
    pytest.param(dict(json={"batch_id": "0" * 32, "device_id": "abc", "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1}]}), 422, ["/device_id"],
        id="unknown-field"),
    pytest.param(dict(json={"batch_id": "0" * 32, "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1, "true_value": 1}]}), 422,
        ["/reports/0/true_value"], id="unknown-report-field"),
]


@pytest.mark.parametrize("request_kwargs, status, pointers", BAD_REQUESTS)
def test_bad_requests_get_a_problem_document_and_change_nothing(
        http, redis_client, request_kwargs: dict, status: int, pointers: list[str]) -> None:
    http.post("/v1/reports", json=batch([1, 0, 1]))  # some state that must survive
    before = snapshot(redis_client)
    response = http.post("/v1/reports", **request_kwargs)
    assert response.status_code == status
    assert response.mimetype == "application/problem+json"
    problem = response.json
    assert problem["status"] == status and problem["title"] and problem["detail"]
    assert [e["pointer"] for e in problem.get("errors", [])] == pointers
    assert snapshot(redis_client) == before


def test_storage_down_is_503_with_retry_after_and_not_ready(metrics_file: Path) -> None:
    app = create_app({"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                      "METRICS_FILE": str(metrics_file), "REDIS_TIMEOUT_SECONDS": 0.5})
    http = app.test_client()
    response = http.post("/v1/reports", json=batch([1]))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert response.mimetype == "application/problem+json"
    assert "Traceback" not in response.get_data(as_text=True)
    assert http.get("/readyz").status_code == 503
    assert http.get("/healthz").status_code == 200
    assert http.get(f"/v1/metrics/{X}/counts").status_code == 503


def test_health_and_readiness(http) -> None:
    assert http.get("/healthz").json == {"status": "ok"}
    assert http.get("/readyz").json == {"status": "ready"}


def test_metrics_are_listed_with_exact_probabilities_and_epsilon(http) -> None:
    doc = http.get("/v1/metrics").json
    by_name = {m["name"]: m for m in doc["metrics"]}
    assert by_name[X] == {"name": X, "description": "Feature X is switched on",
                          "kind": "boolean", "mechanism": X_MECH, "p_yes_given_yes": "3/4",
                          "p_yes_given_no": "1/4", "p1": "3/4", "q": "1/4",
                          "epsilon": pytest.approx(1.0986122886681098),
                          "memoization": "memoized", "instantaneous": None, "period": "day",
                          "version": 1}
    assert by_name[DARK]["p_yes_given_yes"] == "7/8"
    assert by_name[DARK]["p_yes_given_no"] == "1/8"


def test_counts_per_hour_bucket_over_a_range(http, redis_client) -> None:
    past = hour_now() - timedelta(hours=5)
    put_counts(redis_client, X, X_MECH, {past: (10, 4)})
    http.post("/v1/reports", json=batch([1, 1, 0]))
    doc = http.get(f"/v1/metrics/{X}/counts").json
    assert doc["metric"] == X and doc["mechanism"] == X_MECH
    assert doc["buckets"] == [
        {"start": past.isoformat(), "n": 10, "ones": 4, "counts": [10, 4]},
        {"start": hour_now().isoformat(), "n": 3, "ones": 2, "counts": [3, 2]}]
    narrow = http.get(f"/v1/metrics/{X}/counts",
                      query_string={"from": (past - timedelta(hours=1)).isoformat(),
                                    "to": (past + timedelta(minutes=30)).isoformat()}).json
    assert narrow["buckets"] == [{"start": past.isoformat(), "n": 10, "ones": 4, "counts": [10, 4]}]


@pytest.mark.parametrize("query, parameter", [
    ({"from": "yesterday"}, "from"), ({"to": "2026-13-01"}, "to"),
    ({"from": "2026-01-02T00:00:00", "to": "2026-01-01T00:00:00"}, "from"),
    ({"from": "2020-01-01T00:00:00", "to": "2026-01-01T00:00:00"}, "from"),
])
def test_bad_count_ranges_are_422_naming_the_parameter(http, query: dict, parameter: str) -> None:
    response = http.get(f"/v1/metrics/{X}/counts", query_string=query)
    assert response.status_code == 422
    assert response.json["errors"][0]["parameter"] == parameter


def test_unknown_routes_and_metrics_are_problem_documents(http) -> None:
    for path, status in (("/v1/metrics/nope/counts", 404), ("/v2/reports", 404)):
        response = http.get(path)
        assert response.status_code == status
        assert response.mimetype == "application/problem+json"
    assert http.get("/v1/reports").status_code == 405
