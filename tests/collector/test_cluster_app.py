"""The real collector (`deniable serve`, gunicorn) on a real 3-master + 3-replica Redis Cluster:
every route that works on one Redis works on a cluster, through HTTP, the CLI and RedisSource.

Nothing here reads the counter layout: counts come from the API and from RedisSource, so these
tests hold for whichever layout src/deniable/core/keys.py defines.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis.cluster
import requests

from deniable.analysis.sources import RedisSource
from deniable.cli.main import main
from deniable.client.categorical import UnaryEncoding, domain_tag
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.core import keys
from deniable.collector.server import CollectorProcess
from deniable.collector.store import connect
from tests.rediscluster import RedisClusterNodes

pytestmark = pytest.mark.slow
METRICS = {f"cl_metric_{i}": "rr:1/2:1/2" for i in range(6)}  # spread over the three masters
METRICS_TOML = "".join(f'[metrics.{name}]\nmechanism = "{mech}"\n\n'
                       for name, mech in METRICS.items())
LIMIT_BURST = 30
_addresses = (f"198.51.100.{i}" for i in itertools.count(1))


@pytest.fixture(scope="module")
def cluster_metrics_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cluster-config") / "metrics.toml"
    path.write_text(METRICS_TOML)
    return path


@pytest.fixture(scope="module")
def cluster_client(redis_cluster: RedisClusterNodes) -> Iterator[redis.cluster.RedisCluster]:
    client = connect(redis_cluster.url, cluster=True)
    assert isinstance(client, redis.cluster.RedisCluster)
    yield client
    client.close()


@pytest.fixture(scope="module")
def collector(redis_cluster: RedisClusterNodes, cluster_metrics_file: Path
              ) -> Iterator[CollectorProcess]:
    """Production defaults (auth on, rate limits on) on the cluster, with small buckets; the
    client address comes from X-Forwarded-For, so each test has buckets of its own."""
    env = {"DENIABLE_REDIS_CLUSTER": "true", "DENIABLE_AUTH": "on",
           "DENIABLE_BATCH_SECRET": "cluster-tests",  # so a reused batch id is a 409
           "DENIABLE_AUTH_CACHE_SECONDS": "0", "DENIABLE_REGISTRY_CACHE_SECONDS": "1",
           "DENIABLE_PROXY_FIX_X_FOR": "1",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0.5", "DENIABLE_RATE_LIMIT_IP_BURST": "50",
           "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0.5",
           "DENIABLE_RATE_LIMIT_KEY_BURST": str(LIMIT_BURST)}
    with CollectorProcess(redis_cluster.url, cluster_metrics_file, workers=2,
                          env=env) as process:
        yield process


def headers(key: auth.NewKey, address: str | None = None) -> dict[str, str]:
    """Bearer auth, from a client address of this test's own (a fresh per-IP bucket)."""
    return {"Authorization": f"Bearer {key.secret}",
            "X-Forwarded-For": address or next(_addresses)}


def counts(url: str, key: auth.NewKey, metric: str) -> tuple[int, int]:
    answer = requests.get(f"{url}/v1/metrics/{metric}/counts", headers=headers(key), timeout=10)
    assert answer.status_code == 200, answer.text
    buckets = answer.json()["buckets"]
    return sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets)


def test_the_metrics_span_every_master(redis_cluster: RedisClusterNodes) -> None:
    assert len({redis_cluster.master_for(f"{{{m}}}") for m in METRICS}) == 3


def test_ingest_counts_and_duplicates_over_every_slot(collector, cluster_client) -> None:
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    before = {m: counts(collector.url, read, m) for m in METRICS}
    reports = [(m, mech, i % 2) for i, (m, mech) in enumerate(METRICS.items())] * 5
    batch = encode_batch(new_batch_id(), reports)
    answer = requests.post(f"{collector.url}/v1/reports", json=batch, headers=headers(ingest),
                           timeout=10)
    assert (answer.status_code, answer.json()["accepted"]) == (202, 30), answer.text
    again = requests.post(f"{collector.url}/v1/reports", json=batch, headers=headers(ingest),
                          timeout=10)
    assert (again.status_code, again.json()["duplicate"]) == (200, True)
    reused = encode_batch(batch["batch_id"], [(m, mech, 1) for m, mech in METRICS.items()])
    conflict = requests.post(f"{collector.url}/v1/reports", json=reused,
                             headers=headers(ingest), timeout=10)
    assert conflict.status_code == 409
    for i, metric in enumerate(METRICS):
        n, ones = counts(collector.url, read, metric)
        assert (n - before[metric][0], ones - before[metric][1]) == (5, 5 * (i % 2))


def test_auth_keys_are_looked_up_on_the_cluster(collector, cluster_client) -> None:
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    url = f"{collector.url}/v1/metrics/cl_metric_0/counts"
    assert requests.get(url, headers={"X-Forwarded-For": next(_addresses)},
                        timeout=10).status_code == 401
    assert requests.get(url, headers=headers(ingest), timeout=10).status_code == 403
    assert requests.get(url, headers=headers(read), timeout=10).status_code == 200
    auth.revoke_key(cluster_client, read.info.key_id)
    assert requests.get(url, headers=headers(read), timeout=10).status_code == 401
    listed = {k.key_id: k for k in auth.list_keys(cluster_client)}
    assert listed[read.info.key_id].revoked is not None
    assert listed[ingest.info.key_id].revoked is None


def test_the_keys_cli_finds_the_cluster_by_itself(redis_cluster, collector, capsys) -> None:
    assert main(["keys", "--redis-url", redis_cluster.url, "create", "--role", "read",
                 "--app", "cli"]) == 0
    secret = capsys.readouterr().out.strip()
    answer = requests.get(f"{collector.url}/v1/metrics", timeout=10,
                          headers={"Authorization": f"Bearer {secret}",
                                   "X-Forwarded-For": next(_addresses)})
    assert answer.status_code == 200
    assert main(["keys", "--redis-url", redis_cluster.url, "list"]) == 0
    assert secret.split("_")[1] in capsys.readouterr().out


def test_per_key_and_per_ip_rate_limits_hold_on_the_cluster(collector, cluster_client) -> None:
    read = auth.create_key(cluster_client, "read", "limits")
    url = f"{collector.url}/v1/metrics"
    # One key from many addresses: its bucket (LIMIT_BURST tokens) empties, then 429.
    statuses = [requests.get(url, headers=headers(read), timeout=10).status_code
                for _ in range(LIMIT_BURST + 2)]
    assert statuses[:LIMIT_BURST] == [200] * LIMIT_BURST
    assert statuses[-1] == 429
    refused = requests.get(url, headers=headers(read), timeout=10)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    # One address with many keys: the per-IP bucket (50 tokens) empties, then 429.
    address = next(_addresses)
    fresh = [auth.create_key(cluster_client, "read", f"ip{i}") for i in range(2)]
    statuses = [requests.get(url, headers=headers(fresh[i % 2], address),
                             timeout=10).status_code for i in range(56)]
    assert statuses[:50] == [200] * 50
    assert statuses[-1] == 429


def test_registry_and_admin_api_on_the_cluster(collector, cluster_client) -> None:
    admin = auth.create_key(cluster_client, "admin", "ops")
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    name = f"cl_runtime_{new_batch_id()[:8]}"
    created = requests.post(f"{collector.url}/v1/admin/metrics", headers=headers(admin),
                            json={"name": name, "mechanism": "rr:3/4:1/2", "retention_days": 3},
                            timeout=10)
    assert created.status_code == 201, created.text
    time.sleep(1.1)  # the other worker's registry cache (REGISTRY_CACHE_SECONDS=1)
    for _ in range(2):  # each worker answers the same
        listing = requests.get(f"{collector.url}/v1/admin/metrics", headers=headers(admin),
                               timeout=10).json()["metrics"]
        assert {m["name"] for m in listing} >= {name, *METRICS}
    # New metrics are accepted at once, by every worker (the registry re-checks on a miss).
    for _ in range(4):
        batch = encode_batch(new_batch_id(), [(name, "rr:3/4:1/2", 1)] * 3)
        answer = requests.post(f"{collector.url}/v1/reports", json=batch,
                               headers=headers(ingest), timeout=10)
        assert answer.status_code == 202, answer.text
    assert counts(collector.url, read, name) == (12, 12)
    retired = requests.post(f"{collector.url}/v1/admin/metrics/{name}/retire",
                            headers=headers(admin), timeout=10)
    assert retired.status_code == 200
    time.sleep(1.1)  # a retired metric may be accepted for REGISTRY_CACHE_SECONDS
    late = requests.post(f"{collector.url}/v1/reports", headers=headers(ingest), timeout=10,
                         json=encode_batch(new_batch_id(), [(name, "rr:3/4:1/2", 1)]))
    assert late.status_code == 422
    assert counts(collector.url, read, name) == (12, 12)  # retired metrics stay readable


def test_a_categorical_metric_is_counted_per_category_on_the_cluster(collector,
                                                                     cluster_client) -> None:
    admin = auth.create_key(cluster_client, "admin", "ops")
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    names = {f"cl_cat_{new_batch_id()[:8]}": 3, f"cl_cat_{new_batch_id()[:8]}": 8}
    mechanisms = {}
    for name, d in names.items():  # GRR for d = 3 (chosen at epsilon 0.5); OUE for d = 8
        categories = [f"c{i}" for i in range(d)]
        chosen = {"epsilon": 0.5} if d == 3 else {"mechanism": UnaryEncoding.from_epsilon(
            0.5, d, domain_tag(categories)).id}
        created = requests.post(f"{collector.url}/v1/admin/metrics", headers=headers(admin),
                                json={"name": name, "kind": "categorical", **chosen,
                                      "categories": categories}, timeout=10)
        assert created.status_code == 201, created.text
        mechanisms[name] = created.json()["metric"]["mechanism"]
    grr, oue = names
    assert mechanisms[grr].startswith("grr:3:") and mechanisms[oue].startswith("oue:8:")
    # One batch across slots: two categorical metrics and a boolean one.
    reports = [(grr, mechanisms[grr], i % 3) for i in range(7)] + \
        [(oue, mechanisms[oue], f"{(1 << (i % 8)) | 1:02x}") for i in range(9)] + \
        [("cl_metric_0", "rr:1/2:1/2", 1)]
    answer = requests.post(f"{collector.url}/v1/reports", headers=headers(ingest), timeout=10,
                           json=encode_batch(new_batch_id(), reports))
    assert answer.status_code == 202, answer.text
    for name, expected in ((grr, [7, 3, 2, 2]),
                           (oue, [9, 9, 1, 1, 1, 1, 1, 1, 1])):  # bit 0 in every report
        doc = requests.get(f"{collector.url}/v1/metrics/{name}/counts", headers=headers(read),
                           timeout=10).json()
        assert doc["kind"] == "categorical"
        assert [sum(c) for c in zip(*(b["counts"] for b in doc["buckets"]))] == expected


def test_a_batch_with_dims_is_counted_per_series_on_the_cluster(collector,
                                                               cluster_client) -> None:
    """Each series string shares its metric's {slot}, so one script writes the total and the
    series together; reads come back per series."""
    admin = auth.create_key(cluster_client, "admin", "ops")
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    name = f"cl_dims_{new_batch_id()[:8]}"
    created = requests.post(f"{collector.url}/v1/admin/metrics", headers=headers(admin),
                            timeout=10, json={
                                "name": name, "mechanism": "rr:1/2:1/2",
                                "dimensions": {"platform": {"values": ["android", "ios"]},
                                               "app_version": {"values": ["2.4"],
                                                               "other": True}},
                                "combinations": [["platform", "app_version"]]})
    assert created.status_code == 201, created.text
    reports = [(name, "rr:1/2:1/2", 1, {"platform": "ios", "app_version": "2.4"})] * 3 + \
        [(name, "rr:1/2:1/2", 0, {"platform": "android", "app_version": "9"})] * 2 + \
        [(name, "rr:1/2:1/2", 1)] + [("cl_metric_1", "rr:1/2:1/2", 1)]  # and another slot
    answer = requests.post(f"{collector.url}/v1/reports", headers=headers(ingest), timeout=10,
                           json=encode_batch(new_batch_id(), reports))
    assert answer.status_code == 202, answer.text

    def by(dimension: str) -> dict[str, tuple[int, int]]:
        doc = requests.get(f"{collector.url}/v1/metrics/{name}/counts", headers=headers(read),
                           params={"by": dimension}, timeout=10).json()
        found = {label: (sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets))
                 for label, buckets in doc["series"].items()}
        found["total"] = (sum(b["n"] for b in doc["buckets"]),
                          sum(b["ones"] for b in doc["buckets"]))
        return found

    assert by("platform") == {"platform=android": (2, 0), "platform=ios": (3, 3),
                              "total": (6, 4)}
    assert by("app_version") == {"app_version=2.4": (3, 3), "app_version=other": (2, 0),
                                 "total": (6, 4)}
    assert {k: v for k, v in by("app_version,platform").items() if v != (0, 0)} == {
        "app_version=2.4,platform=ios": (3, 3), "app_version=other,platform=android": (2, 0),
        "total": (6, 4)}
    month = keys.month_of(datetime.now(timezone.utc))
    total_key = keys.counters(name, "rr:1/2:1/2", month)
    series_key = keys.series_counters(name, "rr:1/2:1/2", "app_version=other,platform=android",
                                      month)
    assert cluster_client.keyslot(series_key) == cluster_client.keyslot(total_key)
    assert cluster_client.exists(series_key) == cluster_client.exists(total_key) == 1


def test_retention_applies_on_the_cluster(redis_cluster, collector, cluster_client) -> None:
    """Every key written for a metric expires within its retention (plus at most a month of
    bucket span), whatever the counter layout."""
    admin = auth.create_key(cluster_client, "admin", "ops")
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    name = f"cl_retention_{new_batch_id()[:8]}"
    assert requests.post(f"{collector.url}/v1/admin/metrics", headers=headers(admin),
                         json={"name": name, "mechanism": "rr:1/2:1/2", "retention_days": 2},
                         timeout=10).status_code == 201
    answer = requests.post(f"{collector.url}/v1/reports", headers=headers(ingest), timeout=10,
                           json=encode_batch(new_batch_id(), [(name, "rr:1/2:1/2", 1)] * 4))
    assert answer.status_code == 202
    written = []
    for port in redis_cluster.masters():
        with redis_cluster.client(port) as node:
            written += [(key, node.ttl(key)) for key in node.scan_iter(f"*{name}*")
                        if node.type(key) != b"none"]
    assert written, "no key holds the metric's counters"
    assert all(0 < ttl <= (2 + 31) * 86400 for _, ttl in written), written


def test_the_dashboard_data_and_pages_on_the_cluster(collector, cluster_client) -> None:
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    batch = encode_batch(new_batch_id(), [("cl_metric_3", "rr:1/2:1/2", i % 2)
                                          for i in range(40)])
    assert requests.post(f"{collector.url}/v1/reports", json=batch, headers=headers(ingest),
                         timeout=10).status_code == 202
    n, _ = counts(collector.url, read, "cl_metric_3")
    data = requests.get(f"{collector.url}/dashboard/data", headers=headers(read), timeout=10,
                        params={"metric": "cl_metric_3", "every": "hour"})
    assert data.status_code == 200, data.text
    assert sum(b["n"] for b in data.json()["buckets"]) == n
    page = requests.get(f"{collector.url}/dashboard", timeout=10,
                        headers={"X-Forwarded-For": next(_addresses)})
    assert page.status_code == 200  # the page holds no data; its script reads /v1/metrics
    listed = requests.get(f"{collector.url}/v1/metrics", headers=headers(read), timeout=10)
    assert "cl_metric_3" in {m["name"] for m in listed.json()["metrics"]}
    for path in ("/healthz", "/readyz", "/metrics"):
        assert requests.get(f"{collector.url}{path}", timeout=10).status_code == 200, path


def test_redis_source_reads_the_cluster_as_the_api_does(redis_cluster, collector,
                                                        cluster_client,
                                                        cluster_metrics_file) -> None:
    ingest = auth.create_key(cluster_client, "ingest", "shop")
    read = auth.create_key(cluster_client, "read", "analysts")
    batch = encode_batch(new_batch_id(), [(m, mech, 1) for m, mech in METRICS.items()] * 2)
    assert requests.post(f"{collector.url}/v1/reports", json=batch, headers=headers(ingest),
                         timeout=10).status_code == 202
    source = RedisSource(redis_cluster.url, cluster_metrics_file)
    assert set(METRICS) <= set(source.metrics())
    for metric in METRICS:
        found = source.counts(metric)
        assert (int(found.n.sum()), int(found.ones.sum())) == counts(collector.url, read, metric)


def test_every_route_answers_on_the_cluster(collector, cluster_client,
                                            cluster_metrics_file) -> None:
    """Walks the app's URL map: no route answers 5xx on a cluster (a new route must be
    added to POST_BODIES if it takes a body)."""
    from deniable.collector.app import create_app

    app = create_app({"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_TIMEOUT_SECONDS": 0.1,
                      "METRICS_FILE": str(cluster_metrics_file)})  # only for its URL map
    roles = {role: auth.create_key(cluster_client, role, "sweep") for role in auth.ROLES}
    name = f"cl_sweep_{new_batch_id()[:8]}"
    post_bodies = {
        "/v1/reports": encode_batch(new_batch_id(), [("cl_metric_2", "rr:1/2:1/2", 1)]),
        "/v1/admin/metrics": {"name": name, "mechanism": "rr:1/2:1/2"},
        "/v1/admin/metrics/<name>/retire": None,
    }
    dims_metric = f"cl_dims_{new_batch_id()[:8]}"  # for the breakdown route
    created = requests.post(f"{collector.url}/v1/admin/metrics", headers=headers(roles["admin"]),
                            timeout=10, json={"name": dims_metric, "mechanism": "rr:1/2:1/2",
                                              "dimensions": {"platform": {"values": ["ios"]}}})
    assert created.status_code == 201, created.text
    time.sleep(1.1)  # every worker's registry cache (REGISTRY_CACHE_SECONDS=1)
    params = {"/dashboard/data": {"metric": "cl_metric_2"},
              "/dashboard/breakdown": {"metric": dims_metric, "by": "platform"}}
    seen = 0
    for rule in app.url_map.iter_rules():
        path = rule.rule.replace("<name>", name if "retire" in rule.rule else "cl_metric_2")
        path = path.replace("<path:filename>", "dashboard.js")
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            if method == "POST":
                assert rule.rule in post_bodies, f"add a body for POST {rule.rule}"
            statuses = []
            for key in roles.values():
                answer = requests.request(method, f"{collector.url}{path}", timeout=10,
                                          headers=headers(key), params=params.get(rule.rule),
                                          json=post_bodies.get(rule.rule))
                statuses.append(answer.status_code)
            assert max(statuses) < 500 and min(statuses) < 300, (method, rule.rule, statuses)
            seen += 1
    assert seen >= 12
