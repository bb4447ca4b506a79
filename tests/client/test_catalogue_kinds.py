"""The catalogue of every kind: served (``GET /v1/metrics``), declared in code or in the
metrics TOML file; unknown kinds skipped without failing the rest; the epsilon ceiling and
the declared floor for every kind; and the queue holding every payload durably."""
from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from deniable.client import (
    Delivery,
    InvalidParameterError,
    Privacy,
    Reporter,
    Storage,
    UnknownMetricError,
)
from deniable.client.categorical import domain_tag
from deniable.client.errors import WireFormatError
from deniable.client.kinds import MetricSpec
from deniable.client.metrics import (DEFAULT_MAX_EPSILON, coerce_catalogue, describe_metric,
                                     load_metrics_file, parse_catalogue, resolve)
from deniable.client.period import CollectionPolicy
from deniable.client.queue import SCHEMA_VERSION, DurableQueue
from deniable.client.mechanism import RandomizedResponse
from tests.client.test_sender import wait_for
from tests.servers import recording_collector

OS = ["android", "ios", "windows", "other"]
GRR = MetricSpec.build("categorical", categories=OS, mechanism=f"grr:4:1/2:{domain_tag(OS)}")
OUE = MetricSpec.build("categorical", categories=OS, mechanism=f"oue:4:1/4:{domain_tag(OS)}")
HIST = MetricSpec.build("histogram", edges=[0, 1, 5, 10], epsilon=1.0)
LOAD = MetricSpec.build("numeric", lower=0, upper=100, mechanism="bm:1/4:0:100", clamp=True)
DARK = MetricSpec("boolean", RandomizedResponse())
LOUD = MetricSpec.build("categorical", categories=OS, epsilon=5.0)  # above the ln 9 ceiling


def served(*entries: dict) -> dict:  # type: ignore[type-arg]
    return {"metrics": list(entries)}


def test_every_kind_round_trips_through_the_served_catalogue() -> None:
    doc = served(describe_metric("os", "OS", GRR), describe_metric("hist", "H", HIST),
                 describe_metric("load", "L", LOAD), describe_metric("dark", "D", DARK.mechanism))
    catalogue = parse_catalogue(json.loads(json.dumps(doc)))
    assert catalogue == {"os": GRR, "hist": HIST, "load": LOAD, "dark": DARK}
    assert catalogue["hist"].choice == HIST.choice != ""   # why this mechanism was chosen


def test_an_entry_of_an_unknown_kind_or_mechanism_is_skipped_not_fatal(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="deniable.client")
    doc = served(describe_metric("dark", "D", DARK.mechanism),
                 {"name": "words", "kind": "sketch", "mechanism": "cms:1024:3"},
                 {"name": "later", "kind": "categorical", "mechanism": "olh:64:1/3"})
    skipped: dict[str, str] = {}
    assert parse_catalogue(doc, skipped) == {"dark": DARK}
    assert set(skipped) == {"words", "later"} and "upgrade the client" in skipped["words"]
    assert parse_catalogue(doc) == {"dark": DARK}
    assert parse_catalogue(doc) == {"dark": DARK}
    warned = [r.getMessage() for r in caplog.records if "skipping metric" in r.getMessage()]
    assert len(warned) == 2  # once per entry and process, not per fetch


@pytest.mark.parametrize("tamper", [
    {"p1": "3/4"},                                 # P1 stated against the id
    {"categories": ["android", "ios", "windows"]},  # categories against the id's d and tag
    {"categories": ["ios", "android", "windows", "other"]},  # same labels, another order
    {"kind": "numeric"},                           # a kind against the mechanism's family
    {"mechanism": "grr:4:2/4:" + domain_tag(OS)},  # a non-canonical id of a known family
])
def test_a_malformed_entry_of_a_known_kind_fails_the_catalogue(tamper: dict[str, object]
                                                               ) -> None:
    entry = {**describe_metric("os", "OS", GRR), **tamper}
    with pytest.raises(WireFormatError):
        parse_catalogue(served(describe_metric("dark", "D", DARK.mechanism), entry))


def test_a_reporter_keeps_reporting_beside_served_entries_of_unknown_kinds() -> None:
    doc = served(describe_metric("dark_mode", "D", DARK.mechanism),
                 describe_metric("os", "OS", GRR),
                 {"name": "words", "kind": "sketch", "mechanism": "cms:1024:3"})
    with recording_collector(doc) as (url, recorder):
        with Reporter(url, {"dark_mode": DARK, "os": GRR}, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            reporter.report("dark_mode", True)
            reporter.report("os", "ios")
            with pytest.raises(UnknownMetricError, match="words"):  # served, not declared
                reporter.report("words", "hello")
            stats = reporter.stats()
            assert stats.withheld == 0 and stats.ignored_served == {}
            assert reporter.metrics == {"dark_mode": DARK.mechanism, "os": GRR.mechanism}
            assert reporter.flush(10)
    sent = [r for body in recorder.bodies for r in json.loads(body)["reports"]]
    assert sorted(r["metric"] for r in sent) == ["dark_mode", "os"]
    assert "hello" not in b"".join(recorder.bodies).decode()


def test_the_ceiling_and_the_floor_apply_to_every_kind() -> None:
    resolution = resolve({"os": GRR, "loud": LOUD, "load": LOAD}, None, DEFAULT_MAX_EPSILON)
    assert set(resolution.usable) == {"os", "load"} and "max_epsilon" in resolution.withheld["loud"]
    with pytest.raises(InvalidParameterError, match="above max_epsilon"):
        Reporter("http://127.0.0.1:9", {"loud": LOUD}, storage=Storage(privacy_dir=":memory:"))
    # The floor: a served OUE at ln 3 replaces a declared GRR at ln 3 (not above it); a served
    # mechanism above the declared one does not; nor does another question under the name.
    assert GRR.mechanism.epsilon == pytest.approx(OUE.mechanism.epsilon)
    below = MetricSpec.build("categorical", categories=OS, epsilon=0.5)
    other = MetricSpec.build("categorical", categories=OS[:3], epsilon=0.5)
    floor = resolve({"a": GRR, "b": below, "c": GRR},
                    {"a": OUE, "b": GRR, "c": other}, DEFAULT_MAX_EPSILON)
    assert floor.usable == {"a": OUE, "b": below, "c": GRR}
    assert set(floor.floored) == {"b", "c"} and "different" in floor.floored["c"]


def test_metrics_can_be_declared_in_code_as_specs_ids_or_tables() -> None:
    declared = coerce_catalogue({
        "dark": "rr:1/2:1/2", "load": "bm:1/4:0:100", "os": GRR,
        "hist": {"kind": "histogram", "edges": [0, 1, 5, 10], "epsilon": 1.0},
        "theme": {"kind": "categorical", "categories": ["light", "dark"], "epsilon": 1.0}})
    assert declared["dark"] == DARK and declared["os"] == GRR and declared["hist"] == HIST
    assert declared["load"].kind == "numeric" and not declared["load"].clamp
    assert declared["theme"].mechanism.id.startswith("grr:2:")
    with pytest.raises(InvalidParameterError, match="does not name its categories"):
        coerce_catalogue({"os": GRR.mechanism.id})
    with pytest.raises(InvalidParameterError, match="metric 'x'"):
        coerce_catalogue({"x": {"kind": "categorical", "categories": ["a"], "epsilon": 1.0}})


def test_the_metrics_toml_file_declares_every_kind(tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(f'''
[metrics.dark]
mechanism = "rr:1/2:1/2"
[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
mechanism = "{GRR.mechanism.id}"
[metrics.hist]
kind = "histogram"
edges = [0, 1, 5, 10]
epsilon = 1.0
[metrics.load]
kind = "numeric"
lower = 0
upper = 100
clamp = true
mechanism = "bm:1/4:0:100"
[metrics.words]
kind = "sketch"
mechanism = "cms:1024:3"
''')
    skipped: dict[str, str] = {}
    assert load_metrics_file(path, skipped) == {"dark": DARK, "os": GRR, "hist": HIST,
                                                "load": LOAD}
    assert set(skipped) == {"words"}
    with recording_collector(served()) as (url, _):
        with Reporter(url, path, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(one_per_period=False)) as reporter:
            reporter.report("words", "x")
            assert reporter.stats().withheld == 1
            reporter.report("os", "android")
    path.write_text('[metrics.os]\nkind = "categorical"\ncategories = ["a"]\nepsilon = 1.0\n')
    with pytest.raises(InvalidParameterError, match="metrics.toml"):
        load_metrics_file(path)


def test_a_served_instantaneous_policy_is_ignored_for_a_declared_categorical_metric() -> None:
    entry = describe_metric("os", "OS", GRR, CollectionPolicy(
        "instantaneous", RandomizedResponse.from_id("rr:3/4:1/2")))
    with recording_collector(served(entry, describe_metric("dark", "D", DARK.mechanism))) \
            as (url, _):
        with Reporter(url, {"os": GRR}, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            assert reporter.stats().withheld_metrics == {}
            assert reporter.stats().ignored_served == {"os": 1}  # its memoization
            assert set(reporter.metrics) == {"os"}
            assert reporter.privacy_loss("os").long_run_epsilon is not None  # memoized


# -- the queue -------------------------------------------------------------------------------

SCHEMA_1 = """
CREATE TABLE pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    metric TEXT NOT NULL, mechanism TEXT NOT NULL, bit INTEGER NOT NULL CHECK (bit IN (0, 1)),
    queued_at REAL NOT NULL);
CREATE TABLE ledger (
    metric TEXT NOT NULL, mechanism TEXT NOT NULL,
    handed_n INTEGER NOT NULL DEFAULT 0, handed_ones INTEGER NOT NULL DEFAULT 0,
    sent_n INTEGER NOT NULL DEFAULT 0, sent_ones INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (metric, mechanism));
INSERT INTO ledger VALUES ('dark', 'rr:1/2:1/2', 1, 1, 0, 0);
"""


def test_a_schema_1_queue_file_is_upgraded_in_place_and_keeps_its_reports(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_1)
        db.execute("INSERT INTO pending (metric, mechanism, bit, queued_at) "
                   "VALUES ('dark', 'rr:1/2:1/2', 1, 1e10)")
        db.execute("PRAGMA user_version=1")
    db.close()
    oue_id, grr_id = OUE.mechanism.id, GRR.mechanism.id
    queue = DurableQueue(path, clock=lambda: 1e10)
    queue.put_sync(("os", grr_id, 3))
    queue.put_sync(("colour", oue_id, "0a"))
    queue.put_sync(("load", "bm:1/4:0:100", 0))
    queue.close()
    queue = DurableQueue(path, clock=lambda: 1e10)   # a restart: payloads keep their types
    queue.commit(seal_all=True)
    batch = queue.next_batch()
    assert batch is not None
    assert json.loads(batch.body)["reports"] == [
        {"metric": "dark", "mechanism": "rr:1/2:1/2", "bit": 1},
        {"metric": "os", "mechanism": grr_id, "index": 3},
        {"metric": "colour", "mechanism": oue_id, "bits": "0a"},
        {"metric": "load", "mechanism": "bm:1/4:0:100", "bit": 0}]
    queue.ack(batch.batch_id)
    ledger = queue.ledger()
    assert (ledger["os"].handed_n, ledger["os"].handed_ones, ledger["os"].sent_n) == (1, 0, 1)
    assert (ledger["colour"].sent_n, ledger["colour"].sent_ones) == (1, 0)  # n only
    assert (ledger["dark"].sent_n, ledger["dark"].sent_ones) == (1, 1)
    queue.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_a_cached_catalogue_of_every_kind_serves_an_offline_restart(tmp_path: Path) -> None:
    doc = served(describe_metric("os", "OS", GRR), describe_metric("load", "L", LOAD),
                 {"name": "words", "kind": "sketch", "mechanism": "cms:1024:3"})
    queue = tmp_path / "q.db"
    declared = {"os": OUE, "load": LOAD}
    with recording_collector(doc) as (url, _):
        with Reporter(url, declared, queue_path=queue,
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
    # Offline, the cached catalogue still moves os to the served GRR (the same question, an
    # epsilon no larger); the sketch it serves is not declared, so it is not reported.
    with Reporter("http://127.0.0.1:9", declared, queue_path=queue,
                  delivery=Delivery(close_timeout=0),
                  privacy=Privacy(one_per_period=False)) as offline:
        assert not offline.catalogue_fetched
        assert offline.specs == {"os": GRR, "load": LOAD}
        offline.report("os", "windows")
        offline.report("load", 250)                  # clamped into [0, 100]
        with pytest.raises(UnknownMetricError):
            offline.report("words", "hello")
        stats = offline.stats()
        assert (stats.queued, stats.withheld) == (2, 0)
