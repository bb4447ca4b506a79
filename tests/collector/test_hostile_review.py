"""The security review's findings (issue 20), each sent over HTTP to a real gunicorn collector on
real Redis, as part of the hostile-input suite: /metrics cannot be grown by requests, read
endpoints answer 422 (never 500) to extreme dates and Unicode digits, browser-facing headers,
the admin API refuses repeated JSON keys and oversized mechanism ids, and 403s read well."""
from __future__ import annotations

import json
import random
import re
import string
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deniable.client import Privacy, Reporter
from deniable.collector.auth import create_key
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV, snapshot

X = "feature_x_enabled"
PROBLEM = "application/problem+json"


def series(text: str) -> set[str]:
    """Every series (name and labels) a /metrics page exposes, without its value."""
    return {line.rsplit(" ", 1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


@pytest.mark.slow
def test_odd_methods_and_paths_add_no_series(redis_url: str, metrics_file: Path,
                                             redis_client: redis.Redis, tmp_path: Path) -> None:
    """2,000 requests with made-up methods and paths leave /metrics and the multiprocess
    directory exactly as large as one request of each kind did."""
    metrics_dir = tmp_path / "prometheus"
    env = {**OPEN_ENV, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    rng = random.Random(20)

    def odd_method() -> str:
        return "".join(rng.choices(string.ascii_uppercase, k=rng.randint(3, 20)))

    def odd_path() -> str:
        return "/" + "/".join("".join(rng.choices(string.ascii_lowercase + "_-.~", k=6))
                              for _ in range(rng.randint(1, 4)))

    # One worker: the warm-up then surely reached the worker that serves the rest.
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as live:
        def send(method_path: tuple[str, str]) -> int:
            method, path = method_path
            return requests.request(method, f"{live.url}{path}", timeout=10).status_code

        # One request of each kind first: the series they add are the ones any number add.
        warm = [("QWERTYUIOPAS", "/healthz"), ("GET", "/no/such/path"),
                ("BREW", "/no/such/path"), ("GET", f"/v1/metrics/{X}/counts"),
                ("GET", "/v1/metrics/no_such_metric/counts"), ("PROPFIND", "/v1/reports"),
                ("GET", "/metrics")]
        assert {send(request) for request in warm} <= {200, 404, 405}
        before = requests.get(f"{live.url}/metrics", timeout=10).text
        dir_before = directory_bytes(metrics_dir)

        hostile = ([(odd_method(), "/healthz") for _ in range(700)]
                   + [("GET", odd_path()) for _ in range(400)]
                   + [(odd_method(), odd_path()) for _ in range(400)]
                   + [("GET", f"/v1/metrics/{odd_path()[1:7]}/counts") for _ in range(250)]
                   + [(odd_method(), "/v1/reports") for _ in range(250)])
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(send, hostile))
        after = requests.get(f"{live.url}/metrics", timeout=10).text

        assert set(statuses) <= {400, 404, 405}, sorted(set(statuses))
        assert statuses.count(405) >= 900
        assert series(after) - series(before) <= {  # only process gauges may come and go
            s for s in series(after) if s.startswith("deniable_process")}
        assert not {s for s in series(after) if 'method="' in s} - series(before)
        # Only counts changed: a few digits longer at most.
        assert len(after) - len(before) < 2_000, (len(before), len(after))
        assert directory_bytes(metrics_dir) == dir_before
        assert 'method="OTHER",route="<unmatched>",status="405"' in after
        assert not [m for m, _ in hostile if m != "GET" and f'"{m}"' in after]
        assert not [p for _, p in hostile if p not in ("/healthz", "/v1/reports")
                    and p in after]


def problem_names(response: requests.Response, parameter: str) -> bool:
    body = response.json()
    return (response.headers["Content-Type"] == PROBLEM and body["status"] == 422
            and any(e.get("parameter") == parameter for e in body.get("errors", [])))


@pytest.fixture()
def read_key(redis_client: redis.Redis) -> str:
    return create_key(redis_client, "read").secret


@pytest.mark.slow
@pytest.mark.parametrize(("query", "parameter"), [
    (f"/v1/metrics/{X}/counts?to=0001-01-01T00:00:00", "to"),
    (f"/v1/metrics/{X}/counts?from=9999-12-01T00:00:00&to=9999-12-31T23:00:00"
     "&granularity=week", "to"),
    (f"/v1/metrics/{X}/counts?from=0001-01-01T00:00:00%2B23:59", "from"),
    (f"/v1/metrics/{X}/counts?to=9999-12-31T23:59:59.999999-23:59", "to"),
    (f"/v1/metrics/{X}/counts?from=%EF%BC%92%EF%BC%90%EF%BC%92%EF%BC%96-01-01", "from"),
    (f"/dashboard/data?metric={X}&rolling=%C2%B2", "rolling"),
    (f"/dashboard/data?metric={X}&rolling=%D9%A3", "rolling"),
    (f"/dashboard/data?metric={X}&rolling=" + "1" * 4000, "rolling"),
    (f"/dashboard/data?metric={X}&to=0001-01-01T00:00:00", "to"),
    (f"/dashboard/data?metric={X}&from=8999-12-31T00:00:00&to=9999-12-31T23:00:00", "to"),
])
def test_read_endpoints_answer_422_naming_the_parameter(
        live_secure_collector: CollectorProcess, read_key: str, query: str,
        parameter: str) -> None:
    response = requests.get(f"{live_secure_collector.url}{query}", timeout=10,
                            headers={"Authorization": f"Bearer {read_key}"})
    assert response.status_code == 422, response.text[:300]
    assert problem_names(response, parameter), response.text[:300]


def test_the_edges_of_the_date_range_are_served(live_secure_collector: CollectorProcess,
                                                read_key: str) -> None:
    headers = {"Authorization": f"Bearer {read_key}"}
    for query in ("from=2000-01-01T00:00:00&to=2000-01-08T00:00:00&granularity=week",
                  "from=8999-12-01T00:00:00&to=9000-01-01T00:00:00&granularity=week",
                  "from=8999-12-31T00:00:00%2B23:59&to=9000-01-01T00:00:00&granularity=day"):
        response = requests.get(f"{live_secure_collector.url}/v1/metrics/{X}/counts?{query}",
                                headers=headers, timeout=10)
        assert response.status_code == 200, (query, response.text[:300])
        assert response.json()["buckets"] == []


offsets = st.builds(lambda minutes: f"{'+' if minutes >= 0 else '-'}"
                                    f"{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}",
                    st.integers(-(23 * 60 + 59), 23 * 60 + 59))
times = st.one_of(
    st.builds(lambda d, tz: d.isoformat() + tz, st.datetimes(), st.just("") | offsets),
    st.sampled_from(["0001-01-01T00:00:00", "9999-12-31T23:59:59.999999", "9999-12-31",
                     "0001-01-01T00:00:00+23:59", "9999-12-31T23:00:00-23:59"]),
    st.text(st.characters(categories=["Nd", "No", "Pd", "Po"]), max_size=12),
)
numbers = st.one_of(st.integers(-10, 10**30).map(str),
                    st.text(st.characters(categories=["Nd", "No", "Nl"]), max_size=8))


@pytest.mark.slow
def test_read_routes_never_answer_5xx_to_extreme_dates_or_unicode_digits(
        live_collector: CollectorProcess) -> None:
    """A property over both read routes: any from/to/granularity/every/rolling/version gets a
    2xx or a 4xx problem document, never a 5xx."""
    with requests.Session() as session:
        @given(start=st.none() | times, end=st.none() | times,
               granularity=st.sampled_from(["hour", "day", "week"]),
               rolling=st.none() | numbers, dashboard=st.booleans())
        @settings(max_examples=250, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(start: str | None, end: str | None, granularity: str, rolling: str | None,
                  dashboard: bool) -> None:
            params = {"from": start, "to": end}
            if dashboard:
                url = f"{live_collector.url}/dashboard/data"
                params.update(metric=X, every=granularity, rolling=rolling)
            else:
                url = f"{live_collector.url}/v1/metrics/{X}/counts"
                params.update(granularity=granularity, version=rolling)
            response = session.get(url, params={k: v for k, v in params.items()
                                                if v is not None}, timeout=10)
            assert response.status_code < 500, (params, response.text[:300])
            if response.status_code >= 400:
                assert response.headers["Content-Type"] == PROBLEM

        check()


def test_the_dashboard_page_holds_no_data_and_sends_security_headers(
        live_secure_collector: CollectorProcess, read_key: str) -> None:
    page = requests.get(f"{live_secure_collector.url}/dashboard", timeout=10)
    assert page.status_code == 200
    for secret in (X, "dark_mode", "Feature X is switched on", "rr:1/2:1/2", "epsilon"):
        assert secret not in page.text, secret
    assert "<script>" not in page.text and " style=" not in page.text  # nothing inline
    policy = page.headers["Content-Security-Policy"]
    directives = dict(d.strip().partition(" ")[::2] for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["X-Frame-Options"] == "DENY"
    script = re.search(r'<script src="([^"]+)"', page.text)
    assert script is not None
    js = requests.get(f"{live_secure_collector.url}{script.group(1)}", timeout=10)
    assert js.status_code == 200 and "javascript" in js.headers["Content-Type"]
    assert js.headers["X-Content-Type-Options"] == "nosniff"
    assert "history.replaceState" in js.text
    # The catalogue the page fetches wants a key, like every /v1 read.
    assert requests.get(f"{live_secure_collector.url}/v1/metrics", timeout=10).status_code == 401
    listed = requests.get(f"{live_secure_collector.url}/v1/metrics", timeout=10,
                          headers={"Authorization": f"Bearer {read_key}"})
    assert listed.status_code == 200 and listed.headers["X-Content-Type-Options"] == "nosniff"
    assert listed.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


@pytest.fixture()
def admin_key(redis_client: redis.Redis) -> str:
    return create_key(redis_client, "admin", app="ops").secret


def register(collector: CollectorProcess, key: str, body: bytes) -> requests.Response:
    return requests.post(f"{collector.url}/v1/admin/metrics", data=body, timeout=10,
                         headers={"Authorization": f"Bearer {key}",
                                  "Content-Type": "application/json"})


@pytest.mark.parametrize("body", [
    b'{"name":"ok_metric","mechanism":"rr:1/2:1/2","name":"other_metric"}',
    b'{"name":"ok_metric","mechanism":"rr:1/2:1/2","mechanism":"rr:3/4:1/2"}',
    b'{"name" : "ok_metric", "mechanism" : "rr:1/2:1/2", "description":"a",'
    b' "description" : "b"}',
    b'{"name":"ok_metric","mechanism":"rr:1/2:1/2","n\\u0061me":"other_metric"}',
])
def test_the_admin_api_refuses_repeated_json_keys_and_changes_nothing(
        live_secure_collector: CollectorProcess, admin_key: str, redis_client: redis.Redis,
        body: bytes) -> None:
    before = snapshot(redis_client)
    response = register(live_secure_collector, admin_key, body)
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == PROBLEM
    pointer = response.json()["errors"][0]["pointer"]
    assert pointer in {"/name", "/mechanism", "/description"}
    assert snapshot(redis_client) == before
    ok = register(live_secure_collector, admin_key,
                  b'{"name":"ok_metric","mechanism":"rr:1/2:1/2"}')
    assert ok.status_code == 201, ok.text


@pytest.mark.slow
def test_mechanism_ids_are_bounded_at_2_to_the_64_on_the_collector(
        live_secure_collector: CollectorProcess, admin_key: str, redis_client: redis.Redis) -> None:
    """Refused above 2**64 (the 955-digit id of the review too); at the bound, registered, and
    the real client reports fresh draws of it (one 64-bit draw per coin)."""
    huge = "rr:1/" + "9" * 955 + ":1/2"
    for mechanism in (huge, f"rr:1/{2**64 + 1}:1/2", f"rr:1/2:{2**64 - 1}/{2**64 + 1}"):
        before = snapshot(redis_client)
        response = register(live_secure_collector, admin_key, json.dumps(
            {"name": "wide_metric", "mechanism": mechanism}).encode())
        assert response.status_code == 422, response.text[:300]
        assert response.json()["errors"][0]["pointer"] == "/mechanism"
        assert len(response.text) < 1_000  # the id is not echoed whole
        assert snapshot(redis_client) == before
    edge = f"rr:1/{2**64 - 1}:{2**64 - 2}/{2**64 - 1}"
    response = register(live_secure_collector, admin_key, json.dumps(
        {"name": "wide_metric", "mechanism": edge}).encode())
    assert response.status_code == 201, response.text
    ingest = create_key(redis_client, "ingest", app="wide").secret
    time.sleep(1.5)  # every worker's registry cache (1 s here) has seen the new metric
    with Reporter(live_secure_collector.url, {"wide_metric": edge}, token=ingest,
                  privacy=Privacy(fresh={"wide_metric"},
                                  one_per_period=False)) as reporter:  # 20 draws, not 20 devices
        for _ in range(20):
            reporter.report("wide_metric", True)
        assert reporter.flush(timeout=10)
    counts = requests.get(f"{live_secure_collector.url}/v1/metrics/wide_metric/counts",
                          timeout=10, headers={"Authorization": f"Bearer "
                                               f"{create_key(redis_client, 'read').secret}"})
    assert sum(b["n"] for b in counts.json()["buckets"]) == 20


def test_a_403_reads_an_ingest_key(live_secure_collector: CollectorProcess,
                                   redis_client: redis.Redis) -> None:
    ingest = create_key(redis_client, "ingest", app="grammar").secret
    response = requests.get(f"{live_secure_collector.url}/v1/metrics/{X}/counts", timeout=10,
                            headers={"Authorization": f"Bearer {ingest}"})
    assert response.status_code == 403
    assert response.json()["detail"] == "an ingest key cannot do this; it needs a read key"
    admin = requests.get(f"{live_secure_collector.url}/v1/admin/metrics", timeout=10,
                         headers={"Authorization": f"Bearer {ingest}"})
    assert admin.json()["detail"] == "an ingest key cannot do this; it needs an admin key"


@pytest.mark.slow
def test_an_over_bound_mechanism_already_in_the_registry_is_skipped_not_fatal(
        redis_url: str, metrics_file: Path, redis_client: redis.Redis) -> None:
    """A registry written by an older collector that accepted a 955-digit id: the metric is
    skipped (and logged); every other metric is still served and accepts reports."""
    from deniable.client.wire import encode_batch, new_batch_id
    from deniable.core import keys

    env = {**OPEN_ENV, "DENIABLE_REGISTRY_CACHE_SECONDS": "0"}  # read Redis every time
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as live:
        old = json.dumps({"name": "wide_metric", "description": "", "retention_days": 30,
                          "retired": None, "versions": [{"version": 1, "registered": "x",
                                                         "mechanism": "rr:1/" + "9" * 955
                                                                      + ":1/2"}]})
        redis_client.hset(keys.registry(), "wide_metric", old)
        redis_client.set(keys.registry_generation(), "changed")
        listed = requests.get(f"{live.url}/v1/metrics", timeout=10)
        assert listed.status_code == 200
        assert X in {m["name"] for m in listed.json()["metrics"]}
        batch = encode_batch(new_batch_id(), [(X, "rr:1/2:1/2", 1)])
        assert requests.post(f"{live.url}/v1/reports", json=batch, timeout=10).status_code == 202
        assert "registry entry wide_metric skipped" in live.log_tail(1 << 20)
