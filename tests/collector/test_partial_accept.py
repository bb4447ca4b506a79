"""Per-metric acceptance (``Prefer: handling=lenient``) against a real Redis: the valid metrics
of a batch are counted exactly, the others listed as refused, and a re-send counted once."""
from __future__ import annotations

import redis

from deniable.client.wire import encode_batch, new_batch_id, parse_refused
from tests.collector.test_api import DARK, DARK_MECH, X, X_MECH, hour_now
from tests.conftest import hour_counts, snapshot

LENIENT = {"Prefer": "handling=lenient"}


def mixed(batch_id: str | None = None) -> dict:
    """Three valid feature_x_enabled reports, one valid dark_mode report, and two reports of
    'os', a metric the collector does not register."""
    return encode_batch(batch_id or new_batch_id(), [
        (X, X_MECH, 1), (X, X_MECH, 0), ("os", "grr:3:1/2", 2), (X, X_MECH, 1),
        (DARK, DARK_MECH, 1), ("os", "grr:3:1/2", 0)])


def test_lenient_handling_counts_the_valid_metrics_and_lists_the_refused_one(
        http, redis_client: redis.Redis) -> None:
    doc = mixed()
    response = http.post("/v1/reports", json=doc, headers=LENIENT)
    assert response.status_code == 202
    assert response.headers["Preference-Applied"] == "handling=lenient"
    assert response.json["accepted"] == 4
    [entry] = response.json["refused"]
    assert (entry["metric"], entry["reports"]) == ("os", 2)
    assert entry["problems"][0] == {"pointer": "/reports/2/metric",
                                    "detail": "is not a registered metric"}
    assert parse_refused(response.json) == {
        "os": "/reports/2/metric is not a registered metric; "
              "/reports/5/metric is not a registered metric"}
    hour = hour_now()
    assert hour_counts(redis_client, X, X_MECH, hour) == (3, 2)
    assert hour_counts(redis_client, DARK, DARK_MECH, hour) == (1, 1)
    assert not any(b"{os}" in key for key in redis_client.scan_iter())

    # A re-send (the answer was lost) is a duplicate: counted once, refused the same way.
    before = snapshot(redis_client)
    again = http.post("/v1/reports", json=doc, headers=LENIENT)
    assert again.status_code == 200 and again.json["duplicate"] is True
    assert again.json["refused"] == response.json["refused"]
    assert snapshot(redis_client) == before

    # The same batch id with other refused content is a conflict, not a duplicate.
    other = dict(doc, reports=[*doc["reports"][:5], {"metric": "os", "mechanism": "grr:3:1/2",
                                                     "index": 1}])
    assert http.post("/v1/reports", json=other, headers=LENIENT).status_code == 409
    assert snapshot(redis_client) == before


def test_without_the_preference_a_batch_is_still_accepted_whole_or_not_at_all(
        http, redis_client: redis.Redis) -> None:
    before = snapshot(redis_client)
    response = http.post("/v1/reports", json=mixed())
    assert response.status_code == 422
    assert "refused" not in response.json and "Preference-Applied" not in response.headers
    assert {e["pointer"] for e in response.json["errors"]} == {"/reports/2/metric",
                                                              "/reports/5/metric"}
    assert snapshot(redis_client) == before


def test_a_batch_whose_every_metric_is_refused_is_422_with_the_refused_member(
        http, redis_client: redis.Redis) -> None:
    before = snapshot(redis_client)
    doc = encode_batch(new_batch_id(), [(X, "rr:1/4:1/2", 1), ("os", "grr:3:1/2", 1)])
    response = http.post("/v1/reports", json=doc, headers={"Prefer": "respond-async, "
                                                                     "HANDLING = lenient"})
    assert response.status_code == 422
    assert response.headers["Preference-Applied"] == "handling=lenient"
    assert [(e["metric"], e["reports"]) for e in response.json["refused"]] == [
        ("feature_x_enabled", 1), ("os", 1)]
    assert "must be the metric's registered mechanism rr:1/2:1/2" in \
        parse_refused(response.json)["feature_x_enabled"]
    assert snapshot(redis_client) == before
    # Nothing was recorded: the same id with valid content is counted.
    fixed = encode_batch(doc["batch_id"], [(X, X_MECH, 1)])
    assert http.post("/v1/reports", json=fixed, headers=LENIENT).status_code == 202


def test_problems_of_the_batch_itself_still_refuse_it_whole(
        http, redis_client: redis.Redis) -> None:
    before = snapshot(redis_client)
    doc = encode_batch(new_batch_id(), [(X, X_MECH, 1)])
    doc["reports"].append({"metric": "Not A Name", "mechanism": X_MECH, "bit": 1})
    doc["reports"].append([1, 2])
    response = http.post("/v1/reports", json=doc, headers=LENIENT)
    assert response.status_code == 422 and "refused" not in response.json
    assert {e["pointer"] for e in response.json["errors"]} == {"/reports/1/metric",
                                                              "/reports/2"}
    assert snapshot(redis_client) == before


def test_a_repeated_key_in_a_refused_report_is_still_400(http, redis_client) -> None:
    before = snapshot(redis_client)
    body = (f'{{"batch_id":"{new_batch_id()}","reports":[{{"metric":"{X}","mechanism":'
            f'"{X_MECH}","bit":1}},{{"metric":"os","mechanism":"x","bit":1,"bit":0}}]}}')
    response = http.post("/v1/reports", data=body, content_type="application/json",
                         headers=LENIENT)
    assert response.status_code == 400
    assert snapshot(redis_client) == before
