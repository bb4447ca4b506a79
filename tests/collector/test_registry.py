"""The metric registry in Redis: admin API, versions with separate counters, retiring, file sync."""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.core import keys
from deniable.collector.app import create_app
from tests.conftest import hour_counts, snapshot

A, B, C = "rr:1/2:1/2", "rr:3/4:1/2", "rr:1/4:1/2"


@pytest.fixture()
def http(secure_app):  # type: ignore[no-untyped-def]
    return secure_app.test_client()


@pytest.fixture()
def keyring(redis_client: redis.Redis) -> dict[str, dict[str, str]]:
    """Authorization headers by role."""
    return {role: {"Authorization": f"Bearer {auth.create_key(redis_client, role, 'app').secret}"}
            for role in auth.ROLES}


def send(http, keyring, metric: str, mechanism: str, bits: list[int]):  # type: ignore[no-untyped-def]
    doc = encode_batch(new_batch_id(), [(metric, mechanism, b) for b in bits])
    return http.post("/v1/reports", json=doc, headers=keyring["ingest"])


def register(http, keyring, **body):  # type: ignore[no-untyped-def]
    return http.post("/v1/admin/metrics", json=body, headers=keyring["admin"])


def hour() -> datetime:
    return keys.bucket_start(datetime.now(timezone.utc))


def test_a_registered_metric_is_listed_and_accepted_at_once(http, keyring, redis_client) -> None:
    assert send(http, keyring, "checkout_v2", A, [1]).status_code == 422
    created = register(http, keyring, name="checkout_v2", mechanism=A,
                       description="New checkout used", retention_days=14)
    assert created.status_code == 201
    assert created.json["result"] == "created"
    assert created.json["metric"]["version"] == 1
    assert send(http, keyring, "checkout_v2", A, [1, 0, 1]).status_code == 202
    catalogue = {m["name"]: m for m in http.get("/v1/metrics", headers=keyring["ingest"]).json[
        "metrics"]}
    assert catalogue["checkout_v2"]["mechanism"] == A
    assert catalogue["checkout_v2"]["description"] == "New checkout used"
    # Its retention: the month's counters expire 14 days after the month ends.
    assert redis_client.expiretime(keys.counters("checkout_v2", A, hour())) == \
        keys.month_of(hour()).end_hour * 3600 + 14 * 86400


def test_a_new_mechanism_is_a_new_version_with_its_own_counters(http, keyring,
                                                                redis_client) -> None:
    metric = "feature_x_enabled"  # from the metrics file, mechanism A
    assert send(http, keyring, metric, A, [1, 1, 0]).status_code == 202
    changed = register(http, keyring, name=metric, mechanism=B)
    assert changed.status_code == 201 and changed.json["result"] == "new_version"
    assert [v["mechanism"] for v in changed.json["metric"]["versions"]] == [A, B]
    # A mechanism no version used is refused and counts nothing; so is a batch that mixes
    # two versions of one metric (it is summed per metric).
    before = snapshot(redis_client)
    never = send(http, keyring, metric, C, [1])
    assert never.status_code == 422
    assert never.json["errors"][0]["pointer"] == "/reports/0/mechanism"
    mixed = http.post("/v1/reports", headers=keyring["ingest"], json=encode_batch(
        new_batch_id(), [(metric, A, 1), (metric, B, 1)]))
    assert mixed.status_code == 422
    assert mixed.json["errors"][0]["pointer"] == "/reports/1/mechanism"
    assert snapshot(redis_client) == before
    # Both versions are accepted (a device that declared A as its privacy floor keeps
    # reporting under A), each counted under its own version.
    assert send(http, keyring, metric, B, [1, 0, 0, 0]).status_code == 202
    assert send(http, keyring, metric, A, [1]).status_code == 202
    assert hour_counts(redis_client, metric, A, hour()) == (4, 3)
    assert hour_counts(redis_client, metric, B, hour()) == (4, 1)

    counts = lambda **q: http.get(f"/v1/metrics/{metric}/counts", query_string=q,  # noqa: E731
                                  headers=keyring["read"]).json
    current = counts()
    assert (current["version"], current["mechanism"]) == (2, B)
    assert [(b["n"], b["ones"]) for b in current["buckets"]] == [(4, 1)]
    for old_version in (counts(version="1"), counts(mechanism=A)):
        assert (old_version["version"], old_version["mechanism"]) == (1, A)
        assert [(b["n"], b["ones"]) for b in old_version["buckets"]] == [(4, 3)]
    missing = http.get(f"/v1/metrics/{metric}/counts", query_string={"version": "7"},
                       headers=keyring["read"])
    assert missing.status_code == 404 and missing.json["errors"][0]["parameter"] == "version"
    for bad in ("one", "\u00b2", "-1", "9" * 30):
        response = http.get(f"/v1/metrics/{metric}/counts", query_string={"version": bad},
                            headers=keyring["read"])
        assert response.status_code == 422, bad
        assert response.json["errors"][0]["parameter"] == "version"
    unknown_mechanism = http.get(f"/v1/metrics/{metric}/counts", headers=keyring["read"],
                                 query_string={"mechanism": C})
    assert unknown_mechanism.status_code == 404


def test_an_old_mechanism_cannot_come_back(http, keyring, redis_client) -> None:
    register(http, keyring, name="feature_x_enabled", mechanism=B)
    before = snapshot(redis_client)
    back = register(http, keyring, name="feature_x_enabled", mechanism=A)
    assert back.status_code == 409
    assert back.json["errors"][0]["pointer"] == "/mechanism"
    assert "version 1" in back.json["detail"]
    assert snapshot(redis_client) == before


def test_description_and_retention_change_in_place(http, keyring, redis_client) -> None:
    same = register(http, keyring, name="dark_mode", mechanism=B, description="Dark mode is on",
                    retention_days=30)
    assert same.status_code == 200 and same.json["result"] == "unchanged"
    updated = register(http, keyring, name="dark_mode", mechanism=B, description="Dark UI",
                       retention_days=60)
    assert updated.status_code == 200 and updated.json["result"] == "updated"
    assert updated.json["metric"]["version"] == 1
    assert updated.json["metric"]["retention_days"] == 60
    send(http, keyring, "dark_mode", B, [1])
    assert redis_client.expiretime(keys.counters("dark_mode", B, hour())) == \
        keys.month_of(hour()).end_hour * 3600 + 60 * 86400


def test_a_retired_metric_refuses_reports_but_its_counts_stay_readable(http, keyring,
                                                                       redis_client) -> None:
    assert send(http, keyring, "dark_mode", B, [1, 1]).status_code == 202
    retired = http.post("/v1/admin/metrics/dark_mode/retire", headers=keyring["admin"])
    assert retired.status_code == 200 and retired.json["metric"]["retired"]
    before = snapshot(redis_client)
    refused = send(http, keyring, "dark_mode", B, [1])
    assert refused.status_code == 422
    assert refused.json["errors"][0]["pointer"] == "/reports/0/metric"
    assert snapshot(redis_client) == before
    names = [m["name"] for m in http.get("/v1/metrics", headers=keyring["read"]).json["metrics"]]
    assert "dark_mode" not in names and "feature_x_enabled" in names
    counts = http.get("/v1/metrics/dark_mode/counts", headers=keyring["read"]).json
    assert counts["retired"] and [(b["n"], b["ones"]) for b in counts["buckets"]] == [(2, 2)]
    again = register(http, keyring, name="dark_mode", mechanism=B)
    assert again.status_code == 409 and again.json["errors"][0]["pointer"] == "/name"
    assert http.post("/v1/admin/metrics/dark_mode/retire",
                     headers=keyring["admin"]).status_code == 200  # idempotent
    assert snapshot(redis_client) == before
    everything = {m["name"]: m for m in http.get("/v1/admin/metrics",
                                                 headers=keyring["admin"]).json["metrics"]}
    assert everything["dark_mode"]["retired"] and everything["feature_x_enabled"]["retired"] is None


def test_retiring_an_unknown_metric_is_404(http, keyring, redis_client) -> None:
    before = snapshot(redis_client)
    response = http.post("/v1/admin/metrics/no_such_metric/retire", headers=keyring["admin"])
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"
    assert snapshot(redis_client) == before


@pytest.mark.parametrize("body, pointer", [
    ({"name": "Bad-Name", "mechanism": A}, "/name"),
    ({"name": "x{tag}", "mechanism": A}, "/name"),
    ({"name": "ok_name", "mechanism": "rr:1:1/2"}, "/mechanism"),
    ({"name": "ok_name", "mechanism": 3}, "/mechanism"),
    ({"name": "ok_name", "mechanism": A, "retention_days": 0}, "/retention_days"),
    ({"name": "ok_name", "mechanism": A, "retention_days": True}, "/retention_days"),
    ({"name": "ok_name", "mechanism": A, "retention_days": 99999}, "/retention_days"),
    ({"name": "ok_name", "mechanism": A, "description": 5}, "/description"),
    ({"name": "ok_name", "mechanism": A, "owner": "me"}, "/owner"),
    ({"mechanism": A}, "/name"),
    ([1, 2], ""),
])
def test_bad_registrations_are_422_and_change_nothing(http, keyring, redis_client, body,
                                                      pointer: str) -> None:
    before = snapshot(redis_client)
    response = register_raw = http.post("/v1/admin/metrics", json=body, headers=keyring["admin"])
    assert register_raw.status_code == 422, response.json
    assert response.mimetype == "application/problem+json"
    assert response.json["errors"][0]["pointer"] == pointer
    assert snapshot(redis_client) == before


def test_the_metrics_file_is_written_into_the_registry(redis_url: str, redis_client,
                                                       tmp_path: Path, caplog) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.alpha]\nmechanism = "rr:1/2:1/2"\n'
                    '[metrics.beta]\nmechanism = "rr:1/2:1/2"\n')
    config = {"REDIS_URL": redis_url, "METRICS_FILE": str(path), "AUTH": "off"}
    app = create_app(config)
    listed = {m["name"]: m for m in app.test_client().get("/v1/admin/metrics").json["metrics"]}
    assert set(listed) == {"alpha", "beta"} and listed["alpha"]["version"] == 1
    app.test_client().post("/v1/admin/metrics/beta/retire")
    # The file changes alpha's mechanism (a new version) and still names the retired beta.
    path.write_text('[metrics.alpha]\nmechanism = "rr:3/4:1/2"\n'
                    '[metrics.beta]\nmechanism = "rr:1/2:1/2"\n')
    with caplog.at_level(logging.WARNING, logger="deniable.collector"):
        app = create_app(config)
    listed = {m["name"]: m for m in app.test_client().get("/v1/admin/metrics").json["metrics"]}
    assert [v["mechanism"] for v in listed["alpha"]["versions"]] == [A, B]
    assert listed["beta"]["retired"]
    assert any("beta" in r.getMessage() and "retired" in r.getMessage() for r in caplog.records)
    # A restart with the same file changes nothing.
    before = snapshot(redis_client)
    create_app(config)
    assert snapshot(redis_client) == before


# -- collection policy: memoization and reporting period ---------------------------------------

@pytest.mark.parametrize("body, pointer", [
    ({"name": "ok_name", "mechanism": A, "memoization": "sometimes"}, "/memoization"),
    ({"name": "ok_name", "mechanism": A, "period": "month"}, "/period"),
    ({"name": "ok_name", "mechanism": A, "memoization": "instantaneous"}, "/instantaneous"),
    ({"name": "ok_name", "mechanism": A, "instantaneous": B}, "/instantaneous"),
    # rr:1/2:1/2 (P1 3/4) cannot come out of a layer with P1 5/8 (rr:1/4:1/2): refused.
    ({"name": "ok_name", "mechanism": A, "memoization": "instantaneous",
      "instantaneous": C}, "/instantaneous"),
])
def test_bad_collection_policies_are_422_and_change_nothing(http, keyring, redis_client, body,
                                                            pointer: str) -> None:
    before = snapshot(redis_client)
    response = http.post("/v1/admin/metrics", json=body, headers=keyring["admin"])
    assert response.status_code == 422, response.json
    assert response.json["errors"][0]["pointer"] == pointer
    assert snapshot(redis_client) == before


def test_a_policy_is_registered_served_and_fixed_for_its_version(http, keyring,
                                                                 redis_client) -> None:
    response = register(http, keyring, name="pol", mechanism=C, memoization="instantaneous",
                        instantaneous=A, period="week")
    assert response.status_code == 201, response.json
    listed = {m["name"]: m for m in http.get("/v1/metrics", headers=keyring["read"]).json["metrics"]}
    assert (listed["pol"]["memoization"], listed["pol"]["instantaneous"],
            listed["pol"]["period"], listed["pol"]["version"]) == ("instantaneous", A, "week", 1)
    counts = http.get("/v1/metrics/pol/counts", headers=keyring["read"]).json
    assert (counts["memoization"], counts["period"], counts["current_version"]) == \
        ("instantaneous", "week", 1)
    # The same mechanism with another policy would reinterpret counters collected under the
    # first: refused. A new mechanism is a new version with its own policy.
    response = register(http, keyring, name="pol", mechanism=C)
    assert response.status_code == 409 and response.json["errors"][0]["pointer"] == "/memoization"
    response = register(http, keyring, name="pol", mechanism=B, memoization="fresh")
    assert response.status_code == 201
    versions = response.json["metric"]["versions"]
    assert [(v["memoization"], v["period"]) for v in versions] == [("instantaneous", "week"),
                                                                     ("fresh", "day")]


def test_the_metrics_file_declares_policies(tmp_path: Path) -> None:
    from deniable.client.period import CollectionPolicy
    from deniable.client.mechanism import RandomizedResponse
    from deniable.collector.registry import RegistryError, load_metrics_file

    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.a]\nmechanism = "rr:1/2:1/2"\n'
                    '[metrics.b]\nmechanism = "rr:1/4:1/2"\nmemoization = "instantaneous"\n'
                    'instantaneous = "rr:1/2:1/2"\nperiod = "hour"\n')
    metrics = load_metrics_file(path)
    assert metrics["a"].policy == CollectionPolicy()
    assert metrics["b"].policy == CollectionPolicy("instantaneous",
                                                   RandomizedResponse.from_id(A), "hour")
    assert metrics["b"].describe()["instantaneous"] == A
    path.write_text('[metrics.a]\nmechanism = "rr:1/2:1/2"\nperiod = "fortnight"\n')
    with pytest.raises(RegistryError, match="metrics.a.period"):
        load_metrics_file(path)


def test_registry_entries_written_before_policies_read_as_the_default() -> None:
    from deniable.client.period import DEFAULT_POLICY
    from deniable.collector.live_registry import Entry

    old = ('{"name": "x", "description": "", "retention_days": 90, "retired": null, '
           '"versions": [{"version": 1, "mechanism": "rr:1/2:1/2", "registered": "t"}]}')
    entry = Entry.from_json(old)
    assert entry.current.policy == DEFAULT_POLICY
    assert Entry.from_json(entry.to_json()) == entry
