"""Public dimensions in the registry: the metrics file and the admin API declare them, the
registry keeps one declaration per metric (changing it is no new version), the catalogue and
the admin listing state them, and the counts API reads one series (``?series=``) or a whole
breakdown (``?by=``)."""
from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from deniable.client.dimensions import Dimensions
from deniable.client.kinds import MetricSpec
from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.app import create_app
from deniable.collector.live_registry import Entry, LiveRegistry
from deniable.collector.registry import (MAX_COMBINED_SERIES, RegistryError,
                                         declare_dimensions, load_metrics_file)
from tests.conftest import OPEN, snapshot

RR = "rr:1/2:1/2"
OS = MetricSpec.build("categorical", epsilon=1.0, categories=["android", "ios", "web", "tv"])
DIMENSIONS_TOML = f"""\
[metrics.dark_mode]
description = "Dark mode is on"
mechanism = "{RR}"
combinations = [["platform", "app_version"]]
[metrics.dark_mode.dimensions.app_version]
values = ["2.3", "2.4", "2.5"]
other = true
[metrics.dark_mode.dimensions.platform]
values = ["android", "ios", "web"]

[metrics.os]
kind = "categorical"
categories = ["android", "ios", "web", "tv"]
epsilon = 1.0
[metrics.os.dimensions.channel]
values = ["stable", "beta"]

[metrics.plain]
mechanism = "{RR}"
"""
DARK_MODE = {"dimensions": {"app_version": {"values": ["2.3", "2.4", "2.5"], "other": True},
                            "platform": {"values": ["android", "ios", "web"], "other": False}},
             "combinations": [["app_version", "platform"]]}


@pytest.fixture()
def metrics_file(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.toml"
    path.write_text(DIMENSIONS_TOML)
    return path




def catalogue(http) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {m["name"]: m for m in http.get("/v1/metrics").json["metrics"]}


def send(http, *reports: tuple) -> None:  # type: ignore[no-untyped-def]
    answer = http.post("/v1/reports", json=encode_batch(new_batch_id(), reports))
    assert answer.status_code == 202, answer.json


def summed(buckets: list[dict]) -> list[int]:
    """The counter slots summed over every bucket (a run may cross an hour)."""
    return [sum(column) for column in zip(*(b["counts"] for b in buckets))]


# -- declaring -----------------------------------------------------------------------------

def test_the_metrics_file_declares_dimensions_and_combinations(metrics_file: Path) -> None:
    metrics = load_metrics_file(metrics_file)
    dark = metrics["dark_mode"].dimensions
    assert dark.names == ("app_version", "platform")
    assert dark.get("app_version").other and not dark.get("platform").other  # type: ignore[union-attr]
    assert dark.combinations == (("app_version", "platform"),)  # names sorted
    assert dark.describe() == DARK_MODE
    assert metrics["os"].dimensions.describe() == {
        "dimensions": {"channel": {"values": ["stable", "beta"], "other": False}}}
    assert not metrics["plain"].dimensions
    # Dimensions are not the mechanism: the os metric's id is the one it has without them.
    assert metrics["os"].mechanism.id == OS.mechanism.id


def test_the_catalogue_and_admin_listing_state_the_dimensions(http) -> None:  # type: ignore[no-untyped-def]
    listed = catalogue(http)
    assert {k: listed["dark_mode"][k] for k in ("dimensions", "combinations")} == DARK_MODE
    assert listed["os"]["dimensions"] == {"channel": {"values": ["stable", "beta"],
                                                      "other": False}}
    assert "combinations" not in listed["os"]
    assert "dimensions" not in listed["plain"] and "combinations" not in listed["plain"]
    # A client reads the declaration back from the catalogue entry as it was declared.
    assert Dimensions.parse(listed["dark_mode"]["dimensions"],
                            listed["dark_mode"]["combinations"]).describe() == DARK_MODE
    admin = {m["name"]: m for m in http.get("/v1/admin/metrics").json["metrics"]}
    assert admin["dark_mode"]["dimensions"] == DARK_MODE["dimensions"]
    assert admin["dark_mode"]["combinations"] == DARK_MODE["combinations"]
    assert "dimensions" not in admin["plain"]


BAD_FILE_DIMENSIONS = [
    # (the metric's extra TOML lines, the field the error names)
    ('dimensions = ["platform"]', "dimensions"),
    ("[metrics.m.dimensions.platform]\nvalues = []", "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = "ios"', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["ios", "ios"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["ios", "other"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["i os"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["ios:1"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["a,b"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["a=b"]', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["' + "x" * 33 + '"]', "dimensions.platform"),
    ("[metrics.m.dimensions.platform]\nvalues = [2, 3]", "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["ios"]\nother = "yes"', "dimensions.platform"),
    ('[metrics.m.dimensions.platform]\nvalues = ["ios"]\nlabels = ["x"]',
     "dimensions.platform"),
    ("[metrics.m.dimensions.platform]\nvalues = [" + ",".join(f'"v{i}"' for i in range(101))
     + "]", "dimensions.platform"),
    ('[metrics.m.dimensions.Platform]\nvalues = ["ios"]', "dimensions"),
    ('[metrics.m.dimensions."plat-form"]\nvalues = ["ios"]', "dimensions"),
    ("".join(f'[metrics.m.dimensions.d{i}]\nvalues = ["x"]\n' for i in range(4)),
     "dimensions"),
    ('combinations = [["platform", "channel"]]\n[metrics.m.dimensions.platform]\n'
     'values = ["ios"]', "combinations"),
    ('combinations = [["platform"]]\n[metrics.m.dimensions.platform]\nvalues = ["ios"]',
     "combinations"),
    ('combinations = [["platform", "platform"]]\n[metrics.m.dimensions.platform]\n'
     'values = ["ios"]', "combinations"),
    ('combinations = ["platform,channel"]\n[metrics.m.dimensions.platform]\nvalues = ["ios"]'
     '\n[metrics.m.dimensions.channel]\nvalues = ["beta"]', "combinations"),
    ('combinations = [["a", "b"], ["b", "a"]]\n[metrics.m.dimensions.a]\nvalues = ["x"]'
     '\n[metrics.m.dimensions.b]\nvalues = ["y"]', "combinations"),
    ('combinations = [["a", "b"]]', "combinations"),
]


@pytest.mark.parametrize("toml, field", BAD_FILE_DIMENSIONS)
def test_a_bad_dimension_declaration_in_the_file_names_its_metric_and_field(
        tmp_path: Path, toml: str, field: str) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(f'[metrics.m]\nmechanism = "{RR}"\n{toml}\n')
    with pytest.raises(RegistryError, match=re.escape(f"metrics.m.{field}: ")):
        load_metrics_file(path)


def test_null_or_empty_declarations_declare_nothing() -> None:
    for doc in ({}, {"dimensions": None}, {"dimensions": {}}, {"combinations": []},
                {"dimensions": None, "combinations": None}):
        assert declare_dimensions(doc) == Dimensions() and not declare_dimensions(doc)
    one = declare_dimensions({"dimensions": {"p": {"values": ["x"]}}, "combinations": None})
    assert one.names == ("p",) and one.combinations == ()


def test_a_combination_is_capped_by_its_number_of_combined_values() -> None:
    def values(n: int) -> dict[str, list[str]]:
        return {"values": [f"v{i}" for i in range(n)]}

    # 32 x 32 = 1024 combined values: the most; 32 x 33 is one dimension value too many.
    fits = declare_dimensions({"dimensions": {"a": values(32), "b": values(32)},
                               "combinations": [["a", "b"]]})
    assert len(fits.all_series("a,b")) == MAX_COMBINED_SERIES == 1024
    with pytest.raises(Exception, match=r"^combinations: a,b has 1056 combined values"):
        declare_dimensions({"dimensions": {"a": values(32), "b": values(33)},
                            "combinations": [["a", "b"]]})
    # Each dimension alone may list its 100 values: marginals cost one series per value.
    assert len(declare_dimensions({"dimensions": {"a": values(100), "b": values(100)}})
               .all_series("a")) == 100


# -- the admin API -------------------------------------------------------------------------

def register(http, **body):  # type: ignore[no-untyped-def]
    return http.post("/v1/admin/metrics", json=body)


@pytest.mark.parametrize("dimensions, combinations, pointer", [
    (["platform"], None, "/dimensions"),
    ({"platform": ["ios"]}, None, "/dimensions/platform"),
    ({"platform": {"values": ["ios", "iOS", "ios"]}}, None, "/dimensions/platform"),
    ({"platform": {"values": ["ios"], "other": 1}}, None, "/dimensions/platform"),
    ({"platform": {"values": ["ios"], "extra": True}}, None, "/dimensions/platform"),
    ({"platform": {"values": ["ios\u0000"]}}, None, "/dimensions/platform"),
    ({"Platform": {"values": ["ios"]}}, None, "/dimensions"),
    ({"a/b": {"values": ["ios"]}}, None, "/dimensions"),
    ({f"d{i}": {"values": ["x"]} for i in range(4)}, None, "/dimensions"),
    ({"platform": {"values": ["ios"]}}, [["platform", "channel"]], "/combinations"),
    ({"platform": {"values": ["ios"]}}, "platform", "/combinations"),
    ({"platform": {"values": ["ios"]}}, [[1, 2]], "/combinations"),
    ({"platform": {"values": ["ios"]}}, [[1, "platform"]], "/combinations"),
    (None, [["platform", "channel"]], "/combinations"),
])
def test_bad_dimensions_are_422_naming_the_field_and_change_nothing(
        http, redis_client: redis.Redis, dimensions: object, combinations: object,
        pointer: str) -> None:  # type: ignore[no-untyped-def]
    catalogue(http)  # the metrics file is in Redis
    before = snapshot(redis_client)
    body: dict[str, object] = {"name": "fresh_metric", "mechanism": RR}
    if dimensions is not None:
        body["dimensions"] = dimensions
    if combinations is not None:
        body["combinations"] = combinations
    answer = register(http, **body)
    assert answer.status_code == 422, answer.json
    assert answer.json["errors"][0]["pointer"] == pointer, answer.json
    assert snapshot(redis_client) == before


def test_the_admin_api_declares_dimensions_and_changes_them_in_place(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    declared = {"platform": {"values": ["android", "ios"]}}
    created = register(http, name="theme", kind="categorical", epsilon=1.0,
                       categories=["light", "dark", "auto"], dimensions=declared)
    assert created.status_code == 201, created.json
    metric = created.json["metric"]
    assert metric["dimensions"] == {"platform": {"values": ["android", "ios"], "other": False}}
    mechanism = metric["mechanism"]
    stored = json.loads(redis_client.hget(keys.registry(), "theme"))
    assert stored["dimensions"] == metric["dimensions"]
    assert "dimensions" not in stored["versions"][0]  # one declaration per metric, not version
    send(http, ("theme", mechanism, 1, {"platform": "ios"}))
    # Unknown web values are refused until the declaration takes them...
    refused = http.post("/v1/reports", json=encode_batch(
        new_batch_id(), [("theme", mechanism, 1, {"platform": "web"})]))
    assert refused.status_code == 422
    assert refused.json["errors"][0]["pointer"] == "/reports/0/dims/platform"
    # ...and a changed declaration is an update in place: no new version, same mechanism.
    changed = register(http, name="theme", kind="categorical", epsilon=1.0,
                       categories=["light", "dark", "auto"],
                       dimensions={"platform": {"values": ["android", "ios", "web"]},
                                   "channel": {"values": ["beta"], "other": True}},
                       combinations=[["platform", "channel"]])
    assert (changed.status_code, changed.json["result"]) == (200, "updated")
    assert changed.json["metric"]["version"] == 1
    assert changed.json["metric"]["mechanism"] == mechanism
    assert changed.json["metric"]["combinations"] == [["channel", "platform"]]
    # From then on, the new series count; the earlier series keeps its counts.
    send(http, ("theme", mechanism, 2, {"platform": "web", "channel": "nightly"}),
         ("theme", mechanism, 1, {"platform": "ios"}))
    doc = http.get("/v1/metrics/theme/counts", query_string={"by": "platform"}).json
    assert {label: summed(b) for label, b in doc["series"].items()} == {
        "platform=android": [], "platform=ios": [2, 0, 2, 0], "platform=web": [1, 0, 0, 1]}
    combined = http.get("/v1/metrics/theme/counts",
                        query_string={"by": "platform,channel"}).json
    assert combined["by"] == "channel,platform"
    assert {label for label, b in combined["series"].items() if b} == {
        "channel=other,platform=web"}
    # The same registration again changes nothing; leaving dimensions out removes them.
    again = register(http, name="theme", kind="categorical", epsilon=1.0,
                     categories=["light", "dark", "auto"],
                     dimensions={"channel": {"values": ["beta"], "other": True},
                                 "platform": {"values": ["android", "ios", "web"]}},
                     combinations=[["channel", "platform"]])
    assert again.json["result"] == "unchanged"
    removed = register(http, name="theme", kind="categorical", epsilon=1.0,
                       categories=["light", "dark", "auto"])
    assert removed.json["result"] == "updated" and "dimensions" not in removed.json["metric"]
    refused = http.post("/v1/reports", json=encode_batch(
        new_batch_id(), [("theme", mechanism, 1, {"platform": "ios"})]))
    assert refused.status_code == 422
    assert refused.json["errors"][0]["pointer"] == "/reports/0/dims/platform"


def test_a_new_version_carries_the_dimensions_it_is_registered_with(http) -> None:  # type: ignore[no-untyped-def]
    catalogue(http)
    answer = register(http, name="dark_mode", mechanism="rr:3/4:1/2",
                      dimensions=DARK_MODE["dimensions"],
                      combinations=DARK_MODE["combinations"])
    assert (answer.status_code, answer.json["result"]) == (201, "new_version")
    assert catalogue(http)["dark_mode"]["dimensions"] == DARK_MODE["dimensions"]


def test_the_registry_entry_round_trips_and_one_without_dimensions_is_unchanged() -> None:
    dims = declare_dimensions(DARK_MODE)
    text = ('{"description": "", "name": "old", "retention_days": 90, "retired": null, '
            '"versions": [{"mechanism": "rr:1/2:1/2", "registered": "2026-01-01T00:00:00+00:00",'
            ' "version": 1}]}')
    old = Entry.from_json(text)  # written before dimensions: it declares none
    assert not old.dimensions and "dimensions" not in old.to_json()
    with_dims = Entry(old.name, old.description, old.retention_days, old.versions,
                      dimensions=dims)
    assert Entry.from_json(with_dims.to_json()) == with_dims
    assert Entry.from_json(with_dims.to_json()).metric().dimensions == dims


def test_the_registry_wins_over_the_file_for_dimensions_and_says_so(
        redis_url: str, redis_client: redis.Redis, metrics_file: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), "TESTING": True,
                **OPEN})
    changed = tmp_path / "changed.toml"
    changed.write_text(DIMENSIONS_TOML.replace('"2.3", "2.4", "2.5"', '"2.3", "2.4"'))
    with caplog.at_level(logging.WARNING, logger="deniable.collector"):
        app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(changed),
                          "TESTING": True, **OPEN})
    assert any("dark_mode" in r.getMessage() and "dimensions differ" in r.getMessage()
               for r in caplog.records)
    registry: LiveRegistry = app.extensions["deniable.registry"]
    assert registry.active()["dark_mode"].dimensions.describe() == DARK_MODE


# -- the counts API ------------------------------------------------------------------------

def test_series_and_by_read_each_series_and_the_total(http) -> None:  # type: ignore[no-untyped-def]
    os_id = catalogue(http)["os"]["mechanism"]
    send(http, ("dark_mode", RR, 1, {"platform": "ios", "app_version": "2.4"}),
         ("dark_mode", RR, 0, {"platform": "ios", "app_version": "9.9"}),   # other
         ("dark_mode", RR, 1, {"platform": "android"}),
         ("dark_mode", RR, 1),                                               # not stated
         ("os", os_id, 3, {"channel": "beta"}), ("os", os_id, 0))
    total = http.get("/v1/metrics/dark_mode/counts").json
    assert summed(total["buckets"]) == [4, 3]
    assert "series" not in total and "by" not in total
    assert total["dimensions"] == DARK_MODE["dimensions"]
    ios = http.get("/v1/metrics/dark_mode/counts", query_string={"series": "platform=ios"}).json
    assert ios["series"] == "platform=ios" and summed(ios["buckets"]) == [2, 1]
    assert [set(b) for b in ios["buckets"]] == [{"start", "n", "ones", "counts"}]
    by = http.get("/v1/metrics/dark_mode/counts", query_string={"by": "app_version"}).json
    assert by["by"] == "app_version" and summed(by["buckets"]) == [4, 3]
    assert {label: summed(b) for label, b in by["series"].items()} == {
        "app_version=2.3": [], "app_version=2.4": [1, 1], "app_version=2.5": [],
        "app_version=other": [1, 0]}
    # A declared combination, asked in either order; its series label in either order too.
    for asked in ("app_version,platform", "platform,app_version"):
        combo = http.get("/v1/metrics/dark_mode/counts", query_string={"by": asked}).json
        assert combo["by"] == "app_version,platform"
        assert len(combo["series"]) == 4 * 3
        assert {label: summed(b) for label, b in combo["series"].items() if b} == {
            "app_version=2.4,platform=ios": [1, 1], "app_version=other,platform=ios": [1, 0]}
    one = http.get("/v1/metrics/dark_mode/counts",
                   query_string={"series": "platform=ios,app_version=2.4"}).json
    assert one["series"] == "app_version=2.4,platform=ios" and summed(one["buckets"]) == [1, 1]
    # A categorical metric: every slot per series, by day.
    beta = http.get("/v1/metrics/os/counts",
                    query_string={"by": "channel", "granularity": "day"}).json
    assert summed(beta["buckets"]) == [2, 1, 0, 0, 1]
    assert {label: summed(b) for label, b in beta["series"].items()} == {
        "channel=stable": [], "channel=beta": [1, 0, 0, 0, 1]}
    assert [set(b) for b in beta["series"]["channel=beta"]] == [{"start", "n", "counts"}]


def test_by_reads_every_series_in_one_round_trip(app, http,  # type: ignore[no-untyped-def]
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = app.extensions["deniable.store"]
    reads = []
    original = store.month_strings_by_series
    monkeypatch.setattr(store, "month_strings_by_series",
                        lambda *a, **k: reads.append(a) or original(*a, **k))
    monkeypatch.setattr(store, "month_strings", lambda *a, **k: pytest.fail("a second read"))
    doc = http.get("/v1/metrics/dark_mode/counts", query_string={
        "by": "app_version", "from": (datetime.now(timezone.utc) - timedelta(days=60))
        .isoformat()}).json
    assert len(reads) == 1 and reads[0][2] == [None, *doc["series"]]


@pytest.mark.parametrize("metric, query, status, parameter", [
    ("dark_mode", {"series": "platform=tv"}, 404, "series"),
    ("dark_mode", {"series": "channel=beta"}, 404, "series"),
    ("dark_mode", {"series": "platform=other"}, 404, "series"),       # platform has no other
    ("dark_mode", {"series": "platform=ios,platform=web"}, 404, "series"),
    ("plain", {"series": "platform=ios"}, 404, "series"),
    ("dark_mode", {"series": "platform"}, 422, "series"),
    ("dark_mode", {"series": "platform=i os"}, 422, "series"),
    ("dark_mode", {"series": "platform=ios:x"}, 422, "series"),
    ("dark_mode", {"series": "a=1,b=2,c=3,d=4"}, 422, "series"),
    ("dark_mode", {"by": "channel"}, 404, "by"),
    ("os", {"by": "channel,platform"}, 404, "by"),                    # not declared together
    ("plain", {"by": "platform"}, 404, "by"),
    ("dark_mode", {"by": "Platform"}, 422, "by"),
    ("dark_mode", {"by": "platform=ios"}, 422, "by"),
    ("dark_mode", {"by": "a,b,c,d"}, 422, "by"),
    ("dark_mode", {"by": "platform", "series": "platform=ios"}, 422, "by"),
])
def test_a_series_or_dimension_the_metric_lacks_is_refused_naming_the_parameter(
        http, metric: str, query: dict[str, str], status: int,
        parameter: str) -> None:  # type: ignore[no-untyped-def]
    answer = http.get(f"/v1/metrics/{metric}/counts", query_string=query)
    assert answer.status_code == status, answer.json
    assert answer.mimetype == "application/problem+json"
    assert answer.json["errors"][0]["parameter"] == parameter
