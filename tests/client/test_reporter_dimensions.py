"""Public dimensions through the Reporter: device-wide values from ``Reporter(dimensions=...)``
attached only to the metrics that declare them, per-call ``dims`` overriding them, ``other``
applied at the call; every refusal raises at ``report()`` with the dimension named and
queues, charges and spends nothing. The queue keeps each report's dims durably (schema 3)
and puts them on the wire; reports without dims keep the compact fast-path layout."""
from __future__ import annotations

import json
import logging
import math
import sqlite3
from pathlib import Path

import pytest

from deniable.client import (
    BudgetExceededError,
    DimensionError,
    InvalidParameterError,
    Privacy,
    Reporter,
    Storage,
)
from deniable.client.budget import Budget
from deniable.client.dimensions import Dimensions
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import DEFAULT
from deniable.client.metrics import describe_metric, load_metrics_file, parse_catalogue
from deniable.client.queue import SCHEMA_VERSION, DurableQueue
from deniable.client.state import IN_MEMORY
from deniable.client.wire import decode_batch, decode_compact_batch
from tests.client.test_sender import wait_for
from tests.servers import recording_collector

RR = "rr:1/2:1/2"
DARK_DIMS = Dimensions.parse({"app_version": {"values": ["2.3", "2.4"], "other": True},
                              "platform": {"values": ["android", "ios"]}},
                             [["app_version", "platform"]])
OS = MetricSpec.build("categorical", categories=["android", "ios", "web"], epsilon=1.0)
OS_DIMS = Dimensions.parse({"platform": {"values": ["android", "ios"]}})


def entry(name: str, mechanism: object, dims: Dimensions | None = None) -> dict:
    """One served catalogue entry, with the dimensions the collector would serve."""
    doc = describe_metric(name, name, mechanism)  # type: ignore[arg-type]
    return {**doc, **(dims.describe() if dims else {})}


CATALOGUE = {"metrics": [entry("dark_mode", DEFAULT, DARK_DIMS), entry("os", OS, OS_DIMS),
                         entry("feature_x_enabled", DEFAULT)]}
DECLARED = {"dark_mode": {"mechanism": RR, **DARK_DIMS.describe()},
            "os": {"kind": "categorical", "categories": list(OS.categories),
                   "mechanism": OS.mechanism.id, **OS_DIMS.describe()},
            "feature_x_enabled": {"mechanism": RR}}
"""What the app declares: the same metrics and dimensions as the collector serves."""
DEVICE = {"app_version": "2.4", "platform": "android", "channel": "beta"}


def sent_reports(recorder) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r for body in recorder.bodies for r in json.loads(body)["reports"]]


def reporter(url: str, privacy: Privacy = Privacy(one_per_period=False),  # noqa: B008
             **options: object) -> Reporter:
    """A Reporter that has fetched the catalogue (one report per call unless told)."""
    options.setdefault("metrics", DECLARED)
    r = Reporter(url, storage=Storage(privacy_dir=IN_MEMORY), privacy=privacy,
                 **options)  # type: ignore[arg-type]
    wait_for(lambda: r.catalogue_fetched)
    return r


def test_device_wide_values_go_only_to_the_metrics_that_declare_them() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with reporter(url, dimensions=DEVICE) as r:
            assert r.dimensions == {"dark_mode": DARK_DIMS, "os": OS_DIMS}
            r.report("dark_mode", True)
            r.report("os", "web")
            r.report("feature_x_enabled", False)
            assert r.flush(10)
        dark, os_report, plain = sent_reports(recorder)
    assert dark["dims"] == {"app_version": "2.4", "platform": "android"}  # no channel
    assert os_report["dims"] == {"platform": "android"}
    assert "dims" not in plain


def test_per_call_dims_override_and_other_is_applied_at_the_call() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with reporter(url, dimensions={"app_version": "2.4"}) as r:
            r.report("dark_mode", True, dims={"platform": "ios"})
            r.report("dark_mode", True, dims={"app_version": "3.0-beta"})  # off the list
            r.report("dark_mode", True, dims={"platform": "ios"})           # as remembered
            r.report("os", "ios", dims={"platform": "ios"})
            r.report("feature_x_enabled", True, dims={})
            assert r.flush(10)
        reports = sent_reports(recorder)
    assert [x.get("dims") for x in reports] == [
        {"app_version": "2.4", "platform": "ios"}, {"app_version": "other"},
        {"app_version": "2.4", "platform": "ios"}, {"platform": "ios"}, None]


@pytest.mark.slow
@pytest.mark.parametrize(("metric", "dims", "field"), [
    ("dark_mode", {"platform": "web"}, "platform"),           # off the list, no other
    ("dark_mode", {"country": "fr"}, "country"),              # not declared by the metric
    ("dark_mode", {"platform": 1}, "platform"),               # not a str
    ("feature_x_enabled", {"platform": "ios"}, "platform"),   # the metric declares none
    ("os", {"app_version": "2.4"}, "app_version"),            # declared by another metric
])
def test_a_refused_dimension_raises_naming_it_and_nothing_is_queued(
        metric: str, dims: dict, field: str) -> None:
    value = "ios" if metric == "os" else True
    valid = None if metric == "feature_x_enabled" else {"platform": "ios"}
    with recording_collector(CATALOGUE) as (url, recorder):
        with reporter(url, privacy=Privacy()) as r:
            with pytest.raises(DimensionError) as raised:
                r.report(metric, value, dims=dims)
            assert raised.value.field == field and repr(field) in str(raised.value)
            assert isinstance(raised.value, InvalidParameterError)
            assert r.stats().queued == 0 and r.ledger() == {}
            # The period was not spent: the next (valid) report of the period is queued.
            r.report(metric, value, dims=valid)
            assert r.flush(10)
            # Valid dims are remembered; refused ones never are: refused again.
            with pytest.raises(DimensionError):
                r.report(metric, value, dims=dims)
            assert r.stats().queued == 0 and r.ledger()[metric].handed_n == 1
        assert len(sent_reports(recorder)) == 1


def test_a_refused_dimension_spends_no_privacy_budget() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        budgets = {"dark_mode": Budget.for_reports(1, math.log(3))}
        with reporter(url, privacy=Privacy(one_per_period=False, fresh={"dark_mode"},
                                           budgets=budgets)) as r:
            with pytest.raises(DimensionError):
                r.report("dark_mode", True, dims={"platform": "web"})
            r.report("dark_mode", True, dims={"platform": "ios"})  # the one report budgeted
            with pytest.raises(BudgetExceededError):
                r.report("dark_mode", True, dims={"platform": "ios"})
            assert r.stats().budget_refused == 1


def test_a_refused_device_wide_value_is_said_once_and_raised_at_each_report(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="deniable.client")
    with recording_collector(CATALOGUE) as (url, recorder):
        with reporter(url, dimensions={"platform": "tv"}) as r:
            for _ in range(2):
                with pytest.raises(DimensionError, match=r"Reporter\(dimensions=") as raised:
                    r.report("dark_mode", True)
                assert raised.value.field == "platform"
            assert set(r.stats().dimension_problems) == {"dark_mode", "os"}
            r.report("dark_mode", True, dims={"platform": "ios"})  # a per-call value works
            r.report("feature_x_enabled", True)                    # undeclared: unaffected
            assert r.flush(10)
        assert [x.get("dims") for x in sent_reports(recorder)] == [{"platform": "ios"}, None]
    warned = [m for m in caplog.messages if "'tv'" in m and "dark_mode" in m]
    assert len(warned) == 1


@pytest.mark.parametrize("dimensions", [{"platform": 3}, {"App Version": "2.4"}, ["ios"]])
def test_device_wide_values_must_be_names_to_strings(dimensions: object) -> None:
    with pytest.raises(InvalidParameterError):
        Reporter("http://127.0.0.1:9", metrics={"m": RR}, storage=Storage(privacy_dir=IN_MEMORY),
                 dimensions=dimensions)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("malformed", [
    {"dimensions": {"platform": {"values": ["ios", "ios"]}}},  # a value twice
    {"dimensions": {"platform": {"values": ["ios"]}, "app": {"values": ["1"]}},
     "combinations": [[1, "platform"]]},  # a name that is not a string (was a TypeError)
])
def test_a_malformed_served_dimensions_entry_changes_nothing_for_a_declared_metric(
        malformed: dict) -> None:  # type: ignore[type-arg]
    bad = {**entry("dark_mode", DEFAULT), **malformed}
    with recording_collector({"metrics": [bad, entry("feature_x_enabled", DEFAULT)]}) as (
            url, recorder):
        with reporter(url) as r:
            assert r.stats().withheld_metrics == {}
            r.report("dark_mode", True, dims={"platform": "ios"})  # the declared list
            r.report("feature_x_enabled", True)
            assert r.flush(10)
            assert r.stats().withheld == 0
        assert [x["metric"] for x in sent_reports(recorder)] == ["dark_mode",
                                                                 "feature_x_enabled"]
    skipped: dict[str, str] = {}
    dims: dict[str, Dimensions] = {}
    assert set(parse_catalogue(CATALOGUE, skipped, dims)) == {"dark_mode", "os",
                                                               "feature_x_enabled"}
    assert dims == {"dark_mode": DARK_DIMS, "os": OS_DIMS} and skipped == {}


def test_declared_metrics_may_declare_dimensions_in_code_and_in_the_metrics_file(
        tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(f'[metrics.dark_mode]\nmechanism = "{RR}"\n'
                    '[metrics.dark_mode.dimensions.platform]\nvalues = ["android", "ios"]\n'
                    'other = true\n')
    from_file: dict[str, Dimensions] = {}
    load_metrics_file(path, dimensions=from_file)
    assert from_file["dark_mode"].get("platform").other is True  # type: ignore[union-attr]
    declared = {"dark_mode": {"mechanism": RR, "dimensions": {
        "platform": {"values": ["android", "ios"], "other": True}}}}
    # The collector's catalogue does not list the metric: the declared dimensions apply.
    with recording_collector({"metrics": []}) as (url, recorder):
        for metrics in (declared, path):
            with reporter(url, metrics=metrics, dimensions={"platform": "web"}) as r:
                r.report("dark_mode", True)
                assert r.flush(10)
        assert [x["dims"] for x in sent_reports(recorder)] == [{"platform": "other"}] * 2
    with pytest.raises(InvalidParameterError, match="dark_mode"):
        Reporter("http://127.0.0.1:9", storage=Storage(privacy_dir=IN_MEMORY),
                 metrics={"dark_mode": {
            "mechanism": RR, "dimensions": {"platform": {"values": []}}}})


def test_the_apps_declaration_wins_over_the_collectors() -> None:
    declared = {"dark_mode": {"mechanism": RR, "dimensions": {
        "channel": {"values": ["beta", "stable"]}}}}
    with recording_collector(CATALOGUE) as (url, recorder):
        with reporter(url, metrics=declared, dimensions=DEVICE) as r:
            assert r.dimensions == {"dark_mode": Dimensions.parse(
                declared["dark_mode"]["dimensions"])}
            assert r.stats().ignored_served == {"dark_mode": 1}  # the served dimensions
            r.report("dark_mode", True)
            with pytest.raises(DimensionError, match="platform"):  # served, not declared
                r.report("dark_mode", True, dims={"platform": "ios"})
            assert r.flush(10)
        [report] = sent_reports(recorder)
    assert report["dims"] == {"channel": "beta"}


def test_dims_are_stored_durably_and_batches_without_dims_keep_the_compact_layout(
        tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    queue = DurableQueue(path, batch_size=10)
    queue.put_sync(("dark_mode", RR, 1, '{"app_version":"other","platform":"ios"}'))
    queue.put_sync(("dark_mode", RR, 0, ""))
    queue.close()
    queue = DurableQueue(path, batch_size=10)  # a restart
    queue.commit(seal_all=True)
    batch = queue.next_batch()
    assert batch is not None
    doc = json.loads(batch.body)
    assert doc["reports"] == [
        {"metric": "dark_mode", "mechanism": RR, "bit": 1,
         "dims": {"app_version": "other", "platform": "ios"}},
        {"metric": "dark_mode", "mechanism": RR, "bit": 0}]
    decoded = decode_batch(doc, {"dark_mode": RR}, dimensions={"dark_mode": DARK_DIMS})
    assert decoded.tallies["dark_mode"].series == {
        "app_version=other": (1, 1), "platform=ios": (1, 1),
        "app_version=other,platform=ios": (1, 1)}
    assert decode_compact_batch(batch.body, {"dark_mode": RR}) is None  # dims: careful path
    queue.ack(batch.batch_id)
    queue.put_sync(("dark_mode", RR, 1, ""))
    queue.put_sync(("dark_mode", RR, 0))
    queue.commit(seal_all=True)
    plain = queue.next_batch()
    assert plain is not None
    fast = decode_compact_batch(plain.body, {"dark_mode": RR})
    assert fast is not None and fast.tallies["dark_mode"].counts == (2, 1)
    queue.close()


SCHEMA_2 = """
CREATE TABLE pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    metric TEXT NOT NULL, mechanism TEXT NOT NULL, bit INTEGER NOT NULL CHECK (bit IN (0, 1)),
    queued_at REAL NOT NULL, payload);
INSERT INTO pending (metric, mechanism, bit, queued_at, payload)
    VALUES ('dark_mode', 'rr:1/2:1/2', 1, 1e10, NULL), ('os', 'grr:3:1/2:1/4', 0, 1e10, 2);
"""


def test_a_schema_2_queue_file_is_upgraded_in_place_and_keeps_its_reports(
        tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_2)
        db.execute("PRAGMA user_version=2")
    db.close()
    queue = DurableQueue(path, clock=lambda: 1e10)
    queue.put_sync(("dark_mode", RR, 0, '{"platform":"ios"}'))
    queue.commit(seal_all=True)
    batch = queue.next_batch()
    assert batch is not None
    assert json.loads(batch.body)["reports"] == [
        {"metric": "dark_mode", "mechanism": RR, "bit": 1},
        {"metric": "os", "mechanism": "grr:3:1/2:1/4", "index": 2},
        {"metric": "dark_mode", "mechanism": RR, "bit": 0, "dims": {"platform": "ios"}}]
    queue.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        columns = [row[1] for row in db.execute("PRAGMA table_info(pending)")]
    db.close()
    assert columns[-2:] == ["payload", "dims"]
