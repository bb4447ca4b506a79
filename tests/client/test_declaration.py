"""The declaration is the contract (issue 26): the shared vectors' ``declarations`` section
through the real Reporter, the converter to the web client's JSON, and the example metrics
file holding every metric the samples of the README and docs/ report."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deniable.cli.main import main
from deniable.client import Delivery, Privacy, Reporter, Storage, UnknownMetricError
from deniable.client.metrics import DECLARATION_FIELDS, SERVED_PARTS, load_metrics_file
from deniable.collector.registry import load_metrics_file as collector_metrics_file
from tests.client.test_sender import wait_for
from tests.servers import recording_collector
from tests.vectors.generate import PATH

VECTORS = json.loads(PATH.read_text())["declarations"]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "metrics.example.toml"


@pytest.mark.parametrize("case", VECTORS, ids=[c["about"] for c in VECTORS])
def test_the_reporter_resolves_each_vector_as_stated(case: dict) -> None:  # type: ignore[type-arg]
    with recording_collector(case["catalogue"]) as (url, _):
        with Reporter(url, case["declared"], storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(max_epsilon=case["max_epsilon"])) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            expect = case["expect"]
            assert {n: m.id for n, m in reporter.metrics.items()} == {
                n: e["mechanism"] for n, e in expect.items() if e["mechanism"] is not None}
            stats = reporter.stats()
            assert stats.ignored_served == {n: len(e["ignored"]) for n, e in expect.items()
                                            if e["ignored"]}
            assert set(stats.floored_metrics) == {n for n, e in expect.items() if e["floored"]}
            for name, e in expect.items():
                assert set(e["ignored"]) <= set(SERVED_PARTS)
                policy = reporter._policy(name)  # noqa: SLF001 - what the period gate follows
                assert (policy.memoization, policy.period) == (e["memoization"], e["period"])
                dims = reporter.dimensions.get(name)
                assert (dims.describe() if dims else {}) == e["dimensions"]
                memoized = reporter.privacy_loss(name).long_run_epsilon is not None
                assert memoized == (e["memoization"] != "fresh")
            for name in case["undeclared"]:
                with pytest.raises(UnknownMetricError, match=name):
                    reporter.report(name, True)


def test_the_vectors_cover_every_served_part_and_the_undeclared() -> None:
    ignored = {part for case in VECTORS for e in case["expect"].values()
               for part in e["ignored"]}
    assert ignored == set(SERVED_PARTS)
    assert any(case["undeclared"] for case in VECTORS)
    assert any(not case["catalogue"]["metrics"] for case in VECTORS)


def test_the_converter_prints_the_web_clients_declaration(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["metrics", "json", str(EXAMPLE)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == set(load_metrics_file(EXAMPLE))
    assert all(set(table) <= DECLARATION_FIELDS for table in printed.values())
    assert printed["feature_x_enabled"]["dimensions"]["platform"]["values"] == [
        "android", "ios", "web"]
    # One file serves both: the JSON declares exactly what the file declares.
    with Reporter("http://127.0.0.1:9", EXAMPLE,
                  storage=Storage(privacy_dir=":memory:")) as from_file, \
            Reporter("http://127.0.0.1:9", printed,
                     storage=Storage(privacy_dir=":memory:")) as from_json:
        assert from_file.specs == from_json.specs
        assert from_file.dimensions == from_json.dimensions
        from_file.close(timeout=0)
        from_json.close(timeout=0)
    out = tmp_path / "metrics.json"
    assert main(["metrics", "json", str(EXAMPLE), "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == printed
    bad = tmp_path / "bad.toml"
    bad.write_text('[metrics.os]\nkind = "categorical"\ncategories = ["a"]\nepsilon = 1.0\n')
    assert main(["metrics", "json", str(bad)]) == 1
    assert "'os'" in capsys.readouterr().err  # the CLI names the metric, exit 1


def test_the_example_file_declares_every_metric_the_docs_report() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    python = "\n".join(block for page in pages
                       for block in re.findall(r"```python[^\n]*\n(.*?)```", page.read_text(), re.S))
    reported = set(re.findall(r'\.report\("([a-z_0-9]+)"', python))
    assert {"feature_x_enabled", "os", "crashes_per_week", "startup_ms"} <= reported
    declared = load_metrics_file(EXAMPLE)
    assert reported <= set(declared)
    assert set(collector_metrics_file(EXAMPLE)) == set(declared)  # the collector loads it too


def test_ignored_served_parts_are_warned_about_once_per_metric_without_values(caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from deniable.client.mechanism import RandomizedResponse
    from deniable.client.metrics import describe_metric
    from deniable.client.period import CollectionPolicy

    caplog.set_level(logging.WARNING, logger="deniable.client")
    doc = {"metrics": [describe_metric("flag", "F", RandomizedResponse.from_id("rr:1/2:1/2"),
                                       CollectionPolicy("fresh", period="hour"))]}
    with recording_collector(doc) as (url, recorder):
        with Reporter(url, {"flag": "rr:1/2:1/2"}, storage=Storage(privacy_dir=":memory:"),
                      delivery=Delivery(catalogue_refresh=0.05)) as reporter:
            wait_for(lambda: recorder.paths.count("/v1/metrics") >= 4)  # several refreshes
            reporter.report("flag", True)
            assert reporter.stats().ignored_served == {"flag": 2}
    lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(lines) == 1 and "memoization, period" in lines[0] and "True" not in lines[0]


SHORT_LIVED_APP = """
import sys
from deniable.client import Reporter
with Reporter(sys.argv[1], metrics=sys.argv[2]) as reporter:  # no queue_path, as documented
    reporter.report("feature_x_enabled", True)
    reporter.report("os", "linux")
    reporter.flush()
    print(reporter.stats().sent, reporter.stats().not_ready)
"""


@pytest.mark.slow
def test_a_short_lived_process_loses_nothing_run_after_run(tmp_path: Path) -> None:
    """Issue 26: a CLI run once a day without queue_path used to send nothing, run after run
    (``Stats(sent=0, not_ready=2)``): the catalogue never arrived in time and was never cached.
    Declared metrics need none."""
    with recording_collector({"metrics": []}) as (url, recorder):
        for run in range(2):
            done = subprocess.run([sys.executable, "-c", SHORT_LIVED_APP, url, str(EXAMPLE)],
                                  capture_output=True, text=True, timeout=60, cwd=ROOT,
                                  env={**os.environ,
                                       "XDG_DATA_HOME": str(tmp_path / f"home{run}")})
            assert done.returncode == 0, done.stderr
            assert done.stdout.split() == ["2", "0"]
    sent = [r["metric"] for body in recorder.bodies for r in json.loads(body)["reports"]]
    assert sorted(sent) == ["feature_x_enabled", "feature_x_enabled", "os", "os"]
