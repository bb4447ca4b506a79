"""CORS for web clients, over real HTTP against a real gunicorn collector with auth on.

Only the two routes a page calls (POST /v1/reports, GET /v1/metrics) answer allowed origins;
preflights are judged by origin, method and headers; every other route stays closed; and a
collector without CORS_ORIGINS answers no CORS header at all.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deniable.collector import auth
from deniable.collector.cors import parse_origins
from deniable.collector.errors import CollectorError
from deniable.collector.server import CollectorProcess
from tests.conftest import snapshot

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

PAGE = "http://127.0.0.1:8123"
OTHER = "http://evil.example"
X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


@pytest.fixture(scope="module")
def cors_collector(redis_url: str, metrics_file: Path) -> Iterator[CollectorProcess]:
    env = {"DENIABLE_CORS_ORIGINS": json.dumps([PAGE, "https://b.example:8443"]),
           "DENIABLE_AUTH_CACHE_SECONDS": "0", "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
           "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        yield collector


def preflight(url: str, origin: str, method: str, headers: str = "authorization,content-type,prefer"
              ) -> requests.Response:
    return requests.options(url, timeout=5, headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers})


def batch(i: int) -> str:
    return json.dumps({"batch_id": f"{i:032x}", "reports": [
        {"metric": X, "mechanism": X_MECH, "bit": 1}]}, separators=(",", ":"))


def test_preflights_from_an_allowed_origin_pass_for_the_web_clients_two_routes(
        cors_collector, redis_client) -> None:
    before = snapshot(redis_client)
    for path, method in (("/v1/reports", "POST"), ("/v1/metrics", "GET")):
        response = preflight(cors_collector.url + path, PAGE, method)
        assert response.status_code == 204, response.text
        assert response.headers["Access-Control-Allow-Origin"] == PAGE
        assert response.headers["Access-Control-Allow-Methods"] == method
        assert {h.strip().lower() for h in
                response.headers["Access-Control-Allow-Headers"].split(",")} == {
            "authorization", "content-type", "prefer"}
        assert int(response.headers["Access-Control-Max-Age"]) > 0
        assert "Origin" in response.headers["Vary"]
        assert "Access-Control-Allow-Credentials" not in response.headers
    assert preflight(cors_collector.url + "/v1/reports", "https://b.example:8443",
                     "POST", "Content-Type").status_code == 204
    assert snapshot(redis_client) == before  # a preflight never touches Redis


@pytest.mark.parametrize(("origin", "method", "headers", "why"), [
    (OTHER, "POST", "content-type", "origin"),
    ("http://127.0.0.1:8124", "POST", "content-type", "origin"),  # another port
    ("https://127.0.0.1:8123", "POST", "content-type", "origin"),  # another scheme
    ("null", "POST", "content-type", "origin"),
    (PAGE, "DELETE", "content-type", "only POST"),
    (PAGE, "GET", "", "only POST"),
    (PAGE, "POST", "authorization,x-custom", "x-custom"),
    (PAGE, "POST", "cookie", "cookie"),
])
def test_preflights_are_refused_for_other_origins_methods_and_headers(
        cors_collector, origin, method, headers, why) -> None:
    response = preflight(cors_collector.url + "/v1/reports", origin, method, headers)
    assert response.status_code == 403
    assert response.headers["Content-Type"] == "application/problem+json"
    assert why in response.json()["detail"]
    assert "Access-Control-Allow-Origin" not in response.headers
    assert "Origin" in response.headers["Vary"]


def test_answers_carry_cors_headers_for_allowed_origins_only_even_errors(
        cors_collector, redis_client) -> None:
    key = auth.create_key(redis_client, "ingest", "web")
    url = cors_collector.url + "/v1/reports"
    headers = {"Authorization": f"Bearer {key.secret}", "Content-Type": "application/json"}
    accepted = requests.post(url, data=batch(1), timeout=5, headers={**headers, "Origin": PAGE})
    assert accepted.status_code == 202
    assert accepted.headers["Access-Control-Allow-Origin"] == PAGE
    assert "Retry-After" in accepted.headers["Access-Control-Expose-Headers"]
    assert accepted.headers["Vary"] == "Origin"
    # A page must see a refused key (401) to keep its data and back off: the answer is readable.
    refused = requests.post(url, data=batch(2), timeout=5,
                            headers={"Content-Type": "application/json", "Origin": PAGE})
    assert refused.status_code == 401
    assert refused.headers["Access-Control-Allow-Origin"] == PAGE
    # Another origin's request is served as any non-browser request, but its page may not read it.
    other = requests.post(url, data=batch(3), timeout=5, headers={**headers, "Origin": OTHER})
    assert other.status_code == 202
    assert "Access-Control-Allow-Origin" not in other.headers
    assert other.headers["Vary"] == "Origin"
    catalogue = requests.get(cors_collector.url + "/v1/metrics", timeout=5,
                             headers={"Authorization": f"Bearer {key.secret}", "Origin": PAGE})
    assert catalogue.status_code == 200
    assert catalogue.headers["Access-Control-Allow-Origin"] == PAGE
    # Nothing else is opened: reading counts, admin routes, health.
    read = auth.create_key(redis_client, "read", "analysts")
    for path, token in ((f"/v1/metrics/{X}/counts", read.secret), ("/v1/admin/metrics", read.secret),
                        ("/healthz", None)):
        response = requests.get(cors_collector.url + path, timeout=5, headers={
            "Origin": PAGE, **({"Authorization": f"Bearer {token}"} if token else {})})
        assert "Access-Control-Allow-Origin" not in response.headers, path
        response = preflight(cors_collector.url + path, PAGE, "GET")
        assert "Access-Control-Allow-Origin" not in response.headers, path
    counts = requests.get(f"{cors_collector.url}/v1/metrics/{X}/counts", timeout=5,
                          headers={"Authorization": f"Bearer {read.secret}"}).json()
    assert sum(bucket["n"] for bucket in counts["buckets"]) == 2


def test_without_cors_origins_no_answer_carries_a_cors_header(live_collector) -> None:
    for path, method in (("/v1/reports", "POST"), ("/v1/metrics", "GET")):
        response = preflight(live_collector.url + path, PAGE, method)
        assert "Access-Control-Allow-Origin" not in response.headers
        assert "Access-Control-Allow-Methods" not in response.headers
    response = requests.get(live_collector.url + "/v1/metrics", timeout=5,
                            headers={"Origin": PAGE})
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers


def test_the_setting_takes_lists_or_strings_and_refuses_what_is_not_an_origin() -> None:
    assert parse_origins([]) == parse_origins("") == parse_origins(None) == frozenset()
    assert parse_origins("https://A.example, http://b.example:81") == {
        "https://a.example", "http://b.example:81"}
    assert parse_origins(["*"]) == {"*"}
    assert parse_origins(["http://[::1]:8080"]) == {"http://[::1]:8080"}
    for bad in (["https://a.example/"], ["https://a.example/app"], ["a.example"],
                ["ftp://a.example"], [3], {"a": 1}, ["null"]):
        with pytest.raises(CollectorError):
            parse_origins(bad)
