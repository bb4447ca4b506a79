"""Metric kinds in the registry: the metrics file and the admin API declare categorical,
histogram and numeric metrics; each version keeps its declaration; the counts API serves
every counter slot."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from deniable.client.categorical import domain_tag
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.wire import encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.live_registry import Entry
from deniable.collector.registry import RegistryError, declare, load_metrics_file
from tests.conftest import snapshot

OS = ["android", "ios", "windows", "macos", "linux", "other"]
KINDS_TOML = f"""\
[metrics.os]
description = "Operating system"
kind = "categorical"
categories = {json.dumps(OS)}
epsilon = 1.0

[metrics.startup_ms]
kind = "histogram"
edges = [0, 250, 500, 1000, 2000]
clamp = true
epsilon = 2.0

[metrics.crashes]
kind = "numeric"
lower = 0
upper = 20
epsilon = 1.0

[metrics.dark_mode]
mechanism = "rr:1/2:1/2"
"""


@pytest.fixture()
def metrics_file(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.toml"
    path.write_text(KINDS_TOML)
    return path



def catalogue(http) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {m["name"]: m for m in http.get("/v1/metrics").json["metrics"]}


def hour() -> datetime:
    return keys.bucket_start(datetime.now(timezone.utc))


# -- declaring -----------------------------------------------------------------------------

def test_the_metrics_file_declares_each_kind(metrics_file: Path) -> None:
    metrics = load_metrics_file(metrics_file)
    assert {n: m.spec.kind for n, m in metrics.items()} == {
        "os": "categorical", "startup_ms": "histogram", "crashes": "numeric",
        "dark_mode": "boolean"}
    os_metric = metrics["os"]
    assert os_metric.spec.categories == tuple(OS)
    assert os_metric.mechanism is os_metric.spec.mechanism
    # d = 6 < 3 e^1 + 2 = 10.2: k-ary randomized response, and the registry says why.
    assert os_metric.mechanism.id.startswith("grr:6:")
    assert os_metric.mechanism.id.endswith(":" + domain_tag(OS))
    assert "k-ary randomized response" in os_metric.spec.choice
    assert metrics["startup_ms"].spec.labels == (
        "[0, 250)", "[250, 500)", "[500, 1000)", "[1000, 2000]")
    assert metrics["startup_ms"].spec.clamp
    assert metrics["crashes"].mechanism.id.startswith("bm:")
    assert metrics["crashes"].mechanism.id.endswith(":0:20")
    assert metrics["dark_mode"].spec == MetricSpec("boolean", parse_mechanism("rr:1/2:1/2"))


def test_the_catalogue_states_each_kind_its_declaration_and_the_choice(http) -> None:  # type: ignore[no-untyped-def]
    listed = catalogue(http)
    assert listed["os"]["kind"] == "categorical"
    assert listed["os"]["categories"] == OS
    assert "k-ary randomized response" in listed["os"]["choice"]
    assert listed["startup_ms"]["edges"] == ["0", "250", "500", "1000", "2000"]
    assert listed["startup_ms"]["clamp"] is True
    assert (listed["crashes"]["lower"], listed["crashes"]["upper"]) == ("0", "20")
    assert listed["dark_mode"]["kind"] == "boolean"
    for entry in listed.values():  # every kind states its per-slot channel, exactly
        p1, q = parse_mechanism(entry["mechanism"]).channel
        assert (entry["p1"], entry["q"]) == (str(p1), str(q))


@pytest.mark.parametrize("toml, field", [
    ('kind = "categorical"\nepsilon = 1.0', "categories"),
    ('kind = "categorical"\ncategories = ["a"]\nepsilon = 1.0', "categories"),
    ('kind = "categorical"\ncategories = ["a", "a"]\nepsilon = 1.0', "categories"),
    ('kind = "categorical"\ncategories = ["a", "b"]', "mechanism"),
    ('kind = "categorical"\ncategories = ["a", "b"]\nepsilon = 1.0\nmechanism = "rr:1/2:1/2"',
     "epsilon"),
    ('kind = "categorical"\ncategories = ["a", "b"]\nmechanism = "grr:2:3/4:00000000"',
     "mechanism"),
    ('kind = "categorical"\ncategories = ["a", "b"]\nepsilon = 1.0\nclamp = true', "clamp"),
    ('kind = "histogram"\nedges = [0, 1]\nepsilon = 1.0', "edges"),
    ('kind = "histogram"\nedges = [0, 2, 1]\nepsilon = 1.0', "edges"),
    ('kind = "numeric"\nlower = 0\nepsilon = 1.0', "upper"),
    ('kind = "numeric"\nlower = 5\nupper = 5\nepsilon = 1.0', "lower"),
    ('kind = "numeric"\nlower = 0\nupper = 1e300\nepsilon = 1.0', "upper"),
    ('kind = "numeric"\nlower = 0\nupper = 10\nmechanism = "bm:1/4:0:9"', "mechanism"),
    ('kind = "numeric"\nlower = 0\nupper = 10\nepsilon = -1.0', "epsilon"),
    ('kind = "ordinal"\nepsilon = 1.0', "kind"),
    ('categories = ["a", "b"]\nmechanism = "rr:1/2:1/2"', "categories"),
    ('mechanism = "grr:2:3/4:00000000"', "mechanism"),
    # An open metric always draws fresh coins: a declared memo or layer is refused.
    ('kind = "open"\nmechanism = "od:8:1:64:10:1/2"\nmemoization = "memoized"', "memoization"),
    ('kind = "open"\nepsilon = 2.0\nmemoization = "instantaneous"\n'
     'instantaneous = "rr:3/4:1/4"', "memoization"),
    ('kind = "open"\nepsilon = 2.0\ninstantaneous = "rr:3/4:1/4"', "instantaneous"),
])
def test_a_bad_declaration_in_the_file_names_its_metric_and_field(tmp_path: Path, toml: str,
                                                                  field: str) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(f"[metrics.m]\n{toml}\n")
    with pytest.raises(RegistryError, match=rf"metrics\.m\.{field}: "):
        load_metrics_file(path)


def test_an_instantaneous_layer_is_refused_for_other_kinds_naming_the_field() -> None:
    from deniable.collector.registry import check_policy

    spec = declare({"kind": "categorical", "categories": ["a", "b", "c"], "epsilon": 1.0})
    with pytest.raises(Exception, match="^instantaneous: .*boolean metrics only"):
        check_policy(spec.mechanism, {"memoization": "instantaneous",
                                      "instantaneous": "rr:1/2:1/2"})
    # Memoized and fresh collection are every kind's.
    assert check_policy(spec.mechanism, {"memoization": "fresh"}).memoization == "fresh"


def test_an_open_metric_is_fresh_unstated_and_refuses_a_declared_memo() -> None:
    from deniable.collector.registry import check_policy

    sketch = declare({"kind": "open", "epsilon": 2.0}).mechanism
    assert check_policy(sketch, {}).memoization == "fresh"
    assert check_policy(sketch, {"memoization": "fresh", "period": "week"}).period == "week"
    with pytest.raises(Exception, match="^memoization: .*always draws fresh coins"):
        check_policy(sketch, {"memoization": "memoized"})


# -- the admin API -------------------------------------------------------------------------

def register(http, **body):  # type: ignore[no-untyped-def]
    return http.post("/v1/admin/metrics", json=body)


def test_the_admin_api_chooses_grr_or_oue_and_says_why(http) -> None:  # type: ignore[no-untyped-def]
    few = register(http, name="theme", kind="categorical", categories=["light", "dark", "auto"],
                   epsilon=1.0)
    many = register(http, name="locale", kind="categorical",
                    categories=[f"l{i:02}" for i in range(64)], epsilon=1.0)
    assert (few.status_code, many.status_code) == (201, 201)
    # By exact variance at eps = 1: d = 3 is GRR, d = 64 subset selection (k = 2: a memoized answer stays shared).
    assert few.json["metric"]["mechanism"].startswith("grr:3:")
    assert "k-ary randomized response" in few.json["metric"]["choice"]
    assert many.json["metric"]["mechanism"].startswith("ss:64:2:")  # answers stay shared
    assert "subset selection" in many.json["metric"]["choice"]
    assert catalogue(http)["locale"]["choice"] == many.json["metric"]["choice"]
    # The same declaration again changes nothing; so does its mechanism given by id.
    again = register(http, name="theme", kind="categorical",
                     categories=["light", "dark", "auto"], epsilon=1.0)
    by_id = register(http, name="theme", kind="categorical",
                     categories=["light", "dark", "auto"],
                     mechanism=few.json["metric"]["mechanism"])
    assert again.json["result"] == by_id.json["result"] == "unchanged"


def test_a_changed_category_list_is_a_new_version_keeping_its_own_declaration(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    first = catalogue(http)["os"]
    changed = register(http, name="os", kind="categorical", categories=OS[:5] + ["chromeos"],
                       epsilon=1.0)
    assert changed.status_code == 201 and changed.json["result"] == "new_version"
    versions = changed.json["metric"]["versions"]
    assert [v["categories"] for v in versions] == [OS, OS[:5] + ["chromeos"]]
    assert versions[0]["mechanism"] == first["mechanism"] != versions[1]["mechanism"]
    # Redis holds each version's declaration beside its mechanism.
    stored = json.loads(redis_client.hget(keys.registry(), "os"))
    assert [v["categories"] for v in stored["versions"]] == [OS, OS[:5] + ["chromeos"]]
    assert all(v["kind"] == "categorical" and v["choice"] for v in stored["versions"])
    entry = Entry.from_json(redis_client.hget(keys.registry(), "os"))
    assert Entry.from_json(entry.to_json()) == entry
    assert entry.versions[0].spec.categories == tuple(OS)
    # Both versions count apart; each reads back under its own labels.
    old, new = versions[0]["mechanism"], versions[1]["mechanism"]
    for mechanism, index in ((old, 1), (new, 5)):
        sent = http.post("/v1/reports", json=encode_batch(new_batch_id(), [("os", mechanism,
                                                                            index)]))
        assert sent.status_code == 202, sent.json
    for version, index, label in ((1, 1, "ios"), (2, 5, "chromeos")):
        doc = http.get("/v1/metrics/os/counts", query_string={"version": str(version)}).json
        assert doc["labels"][index] == label
        assert doc["buckets"][0]["counts"] == [1] + [int(i == index) for i in range(6)]


def test_the_same_mechanism_with_another_declaration_is_409_naming_the_field(
        http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(redis_client)
    unclamped = register(http, name="startup_ms", kind="histogram", edges=[0, 250, 500, 1000,
                                                                           2000], epsilon=2.0)
    assert unclamped.status_code == 409
    assert unclamped.json["errors"][0]["pointer"] == "/clamp"
    assert snapshot(redis_client) == before
    # New edges are a new mechanism id (the tag), hence a new version.
    wider = register(http, name="startup_ms", kind="histogram", edges=[0, 500, 1000, 5000],
                     epsilon=2.0, clamp=True)
    assert wider.status_code == 201 and wider.json["metric"]["version"] == 2
    assert wider.json["metric"]["edges"] == ["0", "500", "1000", "5000"]
    # New bounds are a new mechanism id too.
    bounds = register(http, name="crashes", kind="numeric", lower=0, upper=50, epsilon=1.0)
    assert bounds.status_code == 201
    assert bounds.json["metric"]["mechanism"].endswith(":0:50")


@pytest.mark.parametrize("body, pointer", [
    ({"name": "m", "kind": "categorical", "epsilon": 1.0}, "/categories"),
    ({"name": "m", "kind": "categorical", "categories": "abc", "epsilon": 1.0}, "/categories"),
    ({"name": "m", "kind": "categorical", "categories": ["a", 7], "epsilon": 1.0},
     "/categories"),
    ({"name": "m", "kind": "categorical", "categories": ["x"] * 2, "epsilon": 1.0},
     "/categories"),
    ({"name": "m", "kind": "categorical", "categories": [str(i) for i in range(1025)],
      "epsilon": 1.0}, "/categories"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"]}, "/mechanism"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"], "epsilon": 0},
     "/epsilon"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"], "epsilon": True},
     "/epsilon"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"], "epsilon": 1e-300},
     "/epsilon"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"], "epsilon": 21},
     "/epsilon"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b"],
      "mechanism": "oue:3:1/4:00000000"}, "/mechanism"),
    ({"name": "m", "kind": "histogram", "edges": [0, "x", 2], "epsilon": 1.0}, "/edges"),
    ({"name": "m", "kind": "histogram", "edges": [0, None, 2], "epsilon": 1.0}, "/edges"),
    ({"name": "m", "kind": "histogram", "edges": [0, 1, "1/" + "3" * 60], "epsilon": 1.0},
     "/edges"),
    ({"name": "m", "kind": "numeric", "lower": 0, "upper": [1], "epsilon": 1.0}, "/upper"),
    ({"name": "m", "kind": "numeric", "lower": 1, "upper": 0, "epsilon": 1.0}, "/lower"),
    ({"name": "m", "kind": "numeric", "lower": 0, "upper": 1, "epsilon": 1.0, "clamp": "yes"},
     "/clamp"),
    ({"name": "m", "kind": "boolean", "epsilon": 1.0, "lower": 0}, "/lower"),
    ({"name": "m", "kind": 3, "epsilon": 1.0}, "/kind"),
    ({"name": "m", "kind": "categorical", "categories": ["a", "b", "c"], "epsilon": 1.0,
      "memoization": "instantaneous", "instantaneous": "rr:1/2:1/2"}, "/instantaneous"),
    ({"name": "m", "kind": "open", "epsilon": 2.0, "memoization": "memoized"}, "/memoization"),
])
def test_bad_declarations_are_422_naming_the_field_and_change_nothing(
        http, redis_client: redis.Redis, body: dict, pointer: str) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(redis_client)
    response = register(http, **body)
    assert response.status_code == 422, response.json
    assert response.mimetype == "application/problem+json"
    assert response.json["errors"][0]["pointer"] == pointer
    assert len(response.json["errors"][0]["detail"]) < 400
    assert snapshot(redis_client) == before


# -- the counts API ------------------------------------------------------------------------

def test_counts_serve_every_slot_per_bucket_and_the_declaration(http) -> None:  # type: ignore[no-untyped-def]
    mechanism = catalogue(http)["os"]["mechanism"]
    reports = [("os", mechanism, i) for i in (0, 1, 1, 5, 5, 5)]
    assert http.post("/v1/reports", json=encode_batch(new_batch_id(),
                                                      reports)).status_code == 202
    doc = http.get("/v1/metrics/os/counts").json
    assert (doc["kind"], doc["categories"], doc["labels"]) == ("categorical", OS, OS)
    assert doc["mechanism"] == mechanism and "k-ary" in doc["choice"]
    assert doc["buckets"] == [{"start": hour().isoformat(), "n": 6,
                               "counts": [6, 1, 2, 0, 0, 0, 3]}]
    # A boolean keeps n and ones, and gains counts; its one label is "yes".
    http.post("/v1/reports", json=encode_batch(new_batch_id(), [("dark_mode", "rr:1/2:1/2", 1)]))
    boolean = http.get("/v1/metrics/dark_mode/counts").json
    assert (boolean["kind"], boolean["labels"]) == ("boolean", ["yes"])
    assert boolean["buckets"][0] == {"start": hour().isoformat(), "n": 1, "ones": 1,
                                     "counts": [1, 1]}


def test_rolled_up_counts_are_summed_per_slot(http, redis_client: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    from deniable.collector.store import Store

    mechanism = catalogue(http)["startup_ms"]["mechanism"]
    day = hour().replace(hour=0) - timedelta(days=3)
    Store(redis_client).add_hours("startup_ms", mechanism, {
        keys.hour_index(day + timedelta(hours=1)): (3, 1, 2, 0, 0),
        keys.hour_index(day + timedelta(hours=20)): (4, 0, 1, 1, 2),
        keys.hour_index(day + timedelta(days=1)): (1, 0, 0, 0, 1)},
        90, "rollup-test", datetime.now(timezone.utc), 3600)
    query = {"from": day.isoformat(), "to": (day + timedelta(days=2)).isoformat(),
             "granularity": "day"}
    doc = http.get("/v1/metrics/startup_ms/counts", query_string=query).json
    assert doc["labels"] == ["[0, 250)", "[250, 500)", "[500, 1000)", "[1000, 2000]"]
    assert doc["edges"] == ["0", "250", "500", "1000", "2000"]
    assert [b["counts"] for b in doc["buckets"]] == [[7, 1, 3, 1, 2], [1, 0, 0, 0, 1]]
    assert [b["n"] for b in doc["buckets"]] == [7, 1]
    assert all("ones" not in b for b in doc["buckets"])


# -- bytes in Redis ------------------------------------------------------------------------

def test_a_month_of_d_64_costs_96_bytes_a_day_per_slot_as_documented(
        redis_client: redis.Redis) -> None:
    """docs/operations.md, "Bytes in Redis per metric": 96 x (d + 1) bytes of counters a day,
    plus at most 25% allocator rounding and a key's overhead, measured by MEMORY USAGE."""
    from deniable.client.categorical import UnaryEncoding
    from deniable.collector.store import Store

    mechanism = UnaryEncoding.from_epsilon(1.0, 64, domain_tag([f"c{i}" for i in range(64)]))
    month = keys.month_of(datetime(2026, 12, 1, tzinfo=timezone.utc))  # 31 days
    Store(redis_client).add_hours("bytes", mechanism.id,
                                  {month.first_hour + 5: (1,) * 65}, 3650, "bytes-test",
                                  datetime.now(timezone.utc), 3600)
    key = keys.counters("bytes", mechanism.id, month)
    counters = 96 * 65 * 31
    assert redis_client.strlen(key) == counters  # the whole month, from its first write
    usage = redis_client.memory_usage(key, samples=0)
    assert counters < usage <= counters * 1.25 + 256
    assert 6240 < usage / 31 < 6240 * 1.25 + 10  # bytes per day, as the table gives
