"""Hostile ``dims`` on reports, sent to the collector's ingest endpoint on real Redis.

The pass bar, for every case: no 5xx, a problem document whose first error names the
offending dimension (``/reports/<i>/dims/<name>``, or ``/reports/<i>/dims`` for a ``dims``
that is not an object), and Redis byte-for-byte unchanged (a DUMP of every key).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
import redis

from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.store import Store
from tests.conftest import snapshot

RR = "rr:1/2:1/2"
BATCH_ID = "0123456789abcdef0123456789abcdef"
METRICS = f"""\
[metrics.flag]
mechanism = "{RR}"
combinations = [["app_version", "platform"]]
[metrics.flag.dimensions.platform]
values = ["android", "ios"]
[metrics.flag.dimensions.app_version]
values = ["2.3", "2.4"]
other = true
[metrics.flag.dimensions.channel]
values = ["stable", "beta"]

[metrics.plain]
mechanism = "{RR}"
"""


@pytest.fixture(scope="module")
def metrics_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dims-hostile") / "metrics.toml"
    path.write_text(METRICS)
    return path




def report(dims: object, metric: str = "flag", bit: int = 1) -> dict:
    return {"metric": metric, "mechanism": RR, "bit": bit, "dims": dims}


def body(*reports: dict) -> bytes:
    return orjson.dumps({"batch_id": BATCH_ID, "reports": list(reports)})


def raw(*reports: str) -> bytes:
    return f'{{"batch_id":"{BATCH_ID}","reports":[{",".join(reports)}]}}'.encode()


GOOD = report({"platform": "ios", "app_version": "2.4"})
HOSTILE: dict[str, tuple[bytes, int, str]] = {
    # a value off a list that declares no other
    "unlisted value": (body(report({"platform": "web"})), 422, "/reports/0/dims/platform"),
    "another case": (body(report({"platform": "iOS"})), 422, "/reports/0/dims/platform"),
    "padded value": (body(report({"platform": " ios"})), 422, "/reports/0/dims/platform"),
    "empty value": (body(report({"platform": ""})), 422, "/reports/0/dims/platform"),
    "'other' without other": (body(report({"platform": "other"})), 422,
                              "/reports/0/dims/platform"),
    "a series label as value": (body(report({"platform": "platform=ios"})), 422,
                                "/reports/0/dims/platform"),
    "unicode look-alike": (body(report({"platform": "\u0456os"})), 422,
                           "/reports/0/dims/platform"),
    # values must be strings, even where other is declared
    "value an int": (body(report({"app_version": 24})), 422, "/reports/0/dims/app_version"),
    "value a float": (body(report({"app_version": 2.4})), 422, "/reports/0/dims/app_version"),
    "value true": (body(report({"app_version": True})), 422, "/reports/0/dims/app_version"),
    "value null": (body(report({"app_version": None})), 422, "/reports/0/dims/app_version"),
    "value a list": (body(report({"platform": ["ios"]})), 422, "/reports/0/dims/platform"),
    "value an object": (body(report({"platform": {"ios": 1}})), 422,
                        "/reports/0/dims/platform"),
    # dimensions the metric does not declare
    "undeclared dimension": (body(report({"country": "fr"})), 422, "/reports/0/dims/country"),
    "a dimension on a metric declaring none": (body(report({"platform": "ios"}, "plain")), 422,
                                              "/reports/0/dims/platform"),
    "too many dimensions": (body(report({"platform": "ios", "app_version": "2.4",
                                         "channel": "beta", "locale": "fr"})), 422,
                            "/reports/0/dims/locale"),
    "a combination as a name": (body(report({"app_version,platform": "2.4,ios"})), 422,
                                "/reports/0/dims/app_version,platform"),
    "empty name": (body(report({"": "ios"})), 422, "/reports/0/dims/"),
    "name with a slash": (body(report({"a/b": "ios"})), 422, "/reports/0/dims/a~1b"),
    "name with a tilde": (body(report({"a~b": "ios"})), 422, "/reports/0/dims/a~0b"),
    "name upper case": (body(report({"Platform": "ios"})), 422, "/reports/0/dims/Platform"),
    # dims must be an object
    "dims a list": (body(report(["platform", "ios"])), 422, "/reports/0/dims"),
    "dims a string": (body(report("platform=ios")), 422, "/reports/0/dims"),
    "dims null": (body(report(None)), 422, "/reports/0/dims"),
    "dims a number": (body(report(1)), 422, "/reports/0/dims"),
    "dims true": (body(report(True)), 422, "/reports/0/dims"),
    # one bad report refuses the whole batch; every bad one is named
    "good then bad": (body(GOOD, GOOD, report({"platform": "web"})), 422,
                      "/reports/2/dims/platform"),
    "a bad bit beside good dims": (body(report({"platform": "ios"}, bit=2)), 422,
                                   "/reports/0/bit"),
    "unknown metric with dims": (body(report({"platform": "ios"}, "nope")), 422,
                                 "/reports/0/metric"),
    # a key written twice, anywhere, is refused (JSON parsers keep only the last)
    "repeated dimension": (raw(f'{{"metric":"flag","mechanism":"{RR}","bit":1,'
                               '"dims":{"platform":"web","platform":"ios"}}'), 400, ""),
    "repeated dims": (raw(f'{{"metric":"flag","mechanism":"{RR}","bit":1,'
                          '"dims":{"platform":"web"},"dims":{"platform":"ios"}}'), 400, ""),
    "repeated empty dims": (raw(f'{{"metric":"flag","mechanism":"{RR}","bit":1,'
                                '"dims":{},"dims":{"platform":"ios"}}'), 400, ""),
    "repeated dimension, a quote in other": (
        raw(f'{{"metric":"flag","mechanism":"{RR}","bit":1,'
            '"dims":{"app_version":"2\\"5","app_version":"2.4"}}'), 400, ""),
    "repeated dimension, the kept one with a quote": (
        raw(f'{{"metric":"flag","mechanism":"{RR}","bit":1,'
            '"dims":{"app_version":"2.4","app_version":"2\\"5"}}'), 400, ""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_dims_are_refused_naming_the_dimension_and_change_nothing(
        http, redis_client: redis.Redis, case: str) -> None:  # type: ignore[no-untyped-def]
    data, status, pointer = HOSTILE[case]
    first = http.post("/v1/reports", json=encode_batch("f" * 32, [
        ("flag", RR, 1, {"platform": "ios", "app_version": "2.4"}), ("plain", RR, 1)]))
    assert first.status_code == 202
    before = snapshot(redis_client)
    assert any(b":d:" in key for key in before)  # there are series to change
    response = http.post("/v1/reports", data=data, content_type="application/json")
    assert response.status_code == status, response.json
    assert response.mimetype == "application/problem+json"
    if pointer:
        assert response.json["errors"][0]["pointer"] == pointer, response.json
    assert snapshot(redis_client) == before


def test_every_bad_dimension_of_a_batch_is_named(http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    response = http.post("/v1/reports", data=body(
        report({"platform": "web", "country": "fr"}), GOOD, report([]),
        report({"platform": "android"}, "plain")), content_type="application/json")
    assert response.status_code == 422
    assert [e["pointer"] for e in response.json["errors"]] == [
        "/reports/0/dims/platform", "/reports/2/dims", "/reports/3/dims/platform"]
    assert Store(redis_client).totals() == {}


def counted(redis_client: redis.Redis, label: str | None) -> tuple[int, int]:
    """(n, ones) of flag's total (None) or one series, over the last and next hour."""
    now = datetime.now(timezone.utc)
    hours = Store(redis_client).counts("flag", RR, now - timedelta(hours=1),
                                       now + timedelta(hours=1), series=label)
    return sum(h.n for h in hours), sum(h.ones for h in hours)


def test_off_list_values_count_as_other_where_declared_whatever_they_hold(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    # Any string is an unlisted app_version: odd characters, escapes, a quote, a long one.
    odd = ["9.9", "", "2.4 ", 'x"y', "\u00e9\u0000", "a" * 1000, "platform=ios", "other"]
    reports = [("flag", RR, 1, {"app_version": value}) for value in odd]
    response = http.post("/v1/reports", json=encode_batch(new_batch_id(), reports))
    assert response.status_code == 202, response.json
    escaped = raw(f'{{"metric":"flag","mechanism":"{RR}","bit":0,'
                  '"dims":{"app_version":"\\u0032.\\u0034","pl\\u0061tform":"\\u0069os"}}')
    response = http.post("/v1/reports", data=escaped, content_type="application/json")
    assert response.status_code == 202, response.json  # JSON escapes read as the same text
    assert counted(redis_client, None) == (len(odd) + 1, len(odd))
    assert counted(redis_client, "app_version=other") == (len(odd), len(odd))
    assert counted(redis_client, "app_version=2.4") == (1, 0)
    assert counted(redis_client, "app_version=2.4,platform=ios") == (1, 0)
    # Nothing but allow-listed labels reached a key: no stated text is stored.
    assert {k.decode().split(":")[4] for k in redis_client.keys("dn:v1:{flag}:d:*")} == {
        "app_version=other", "app_version=2.4", "platform=ios", "app_version=2.4,platform=ios"}


def test_a_report_without_dims_counts_in_the_total_only(http,  # type: ignore[no-untyped-def]
                                                       redis_client: redis.Redis) -> None:
    doc = encode_batch(new_batch_id(), [("flag", RR, 1), ("flag", RR, 0, {}),
                                        ("flag", RR, 1, {"channel": "beta"})])
    response = http.post("/v1/reports", json=doc)
    assert response.status_code == 202, response.json
    assert counted(redis_client, None) == (3, 2)
    assert counted(redis_client, "channel=beta") == (1, 1)
    month = keys.month_of(datetime.now(timezone.utc))
    assert sorted(k.decode() for k in redis_client.keys("dn:v1:{flag}:*")) == sorted([
        keys.counters("flag", RR, month), keys.series_counters("flag", RR, "channel=beta",
                                                               month)])


def test_a_compact_body_with_dims_takes_the_careful_path_and_counts_once(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    doc = encode_batch(new_batch_id(), [("flag", RR, 1, {"platform": "android"})] * 3
                       + [("flag", RR, 0)] * 2)
    compact = json.dumps(doc, separators=(",", ":"))
    for status in (202, 200):  # sent, then re-sent: counted once
        response = http.post("/v1/reports", data=compact, content_type="application/json")
        assert response.status_code == status, response.json
    assert counted(redis_client, None) == (5, 3)
    assert counted(redis_client, "platform=android") == (3, 3)
    # The same id with other dims is other content: 409, nothing written.
    before = snapshot(redis_client)
    other = encode_batch(doc["batch_id"], [("flag", RR, 1, {"platform": "ios"})] * 3
                         + [("flag", RR, 0)] * 2)
    response = http.post("/v1/reports", json=other)
    assert response.status_code == 409
    assert snapshot(redis_client) == before
