"""``deniable report --by``: breakdowns from a real Redis in the table, JSON, CSV and HTML,
each saying which cells it suppressed and why."""
from __future__ import annotations

import csv
import io
import json

import pytest

from deniable.cli.main import main
from tests.analysis.test_breakdown import (BOOLEAN, DIMS, OS, RANGE, _ingest, _register,
                                           _reports)


@pytest.fixture()
def seeded(redis_client) -> None:  # type: ignore[no-untyped-def]
    """adoption (boolean): 2.3 has 100 reports (70% say yes), 2.4 has 100 (all no), other 99;
    os_by (categorical) by platform; and a metric without dimensions."""
    _register(redis_client, "adoption", BOOLEAN, DIMS)
    _ingest(redis_client, "adoption", BOOLEAN, DIMS,
            _reports([1] * 70 + [0] * 30, {"app_version": "2.3"})
            + _reports([0] * 100, {"app_version": "2.4"})
            + _reports([1] * 99, {"app_version": "7.0"})
            + _reports([1] * 5, None))
    _register(redis_client, "os_by", OS, DIMS)
    _ingest(redis_client, "os_by", OS, DIMS, _reports([0] * 150, {"platform": "android"}))
    _register(redis_client, "plain", BOOLEAN, DIMS.__class__())


def _run(capsys, redis_url: str, *extra: str) -> str:  # type: ignore[no-untyped-def]
    code = main(["report", "--redis-url", redis_url, "--from", RANGE[0].isoformat(),
                 "--to", RANGE[1].isoformat(), *extra])
    assert code == 0
    return capsys.readouterr().out  # type: ignore[no-any-return]


def test_the_table_shows_k_and_suppresses_k_minus_1(seeded, redis_url, capsys) -> None:  # type: ignore[no-untyped-def]
    out = _run(capsys, redis_url, "--metric", "adoption", "--by", "app_version",
               "--min-reports", "100", "--detailed")
    lines = {line.split()[0]: line for line in out.splitlines() if line[:1].strip()}
    assert "0.4000" not in lines["2.3"] and "SUPPRESSED" not in lines["2.3"]
    assert "SUPPRESSED: fewer than 100 devices (99 in its busiest day, 99 reports)" in lines["other"]
    assert "single people out" in lines["other"]
    assert "5" in lines["not"]     # not stated: 5
    assert "1 of 1 significant" in out
    assert "NOT protected by local differential privacy" in out
    out = _run(capsys, redis_url, "--metric", "adoption", "--by", "app_version",
               "--min-reports", "100")  # the plain reading: percent, "hidden", no "0.4000"
    lines = {line.split()[0]: line for line in out.splitlines() if line[:1].strip()}
    assert "90 % (" in lines["2.3"] and "hidden" not in lines["2.3"]
    assert "hidden" in lines["other"] and "single people out" in lines["other"]
    assert "Clear differences (1 comparison" in out and "p < 0.001" in out


def test_json_and_csv_name_the_suppressed_cells(seeded, redis_url, capsys) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(_run(capsys, redis_url, "--metric", "adoption", "--by", "app_version",
                          "--format", "json"))
    [b] = doc["breakdowns"]
    assert b["min_reports"] == 100 and b["not_stated"] == 5
    assert b["suppressed"] == ["app_version=other"]
    cells = {c["value"]: c for c in b["cells"]}
    assert cells["other"]["estimate"] is None and "mostly noise" in cells["other"]["reason"]
    assert cells["2.3"]["estimate"]["estimate"] == pytest.approx((0.7 - 0.25) / 0.5)
    assert cells["2.4"]["estimate"]["estimate"] == pytest.approx(0.0)  # clipped from -0.5
    rows = list(csv.DictReader(io.StringIO(_run(
        capsys, redis_url, "--metric", "adoption", "--by", "app_version", "--format", "csv"))))
    by_value = {r["value"]: r for r in rows}
    assert by_value["other"]["suppressed"] == "True" and by_value["other"]["estimate"] == ""
    assert by_value["not stated"]["n"] == "5"


def test_without_metric_every_metric_declaring_the_dimension_is_broken_down(  # type: ignore[no-untyped-def]
        seeded, redis_url, capsys) -> None:
    doc = json.loads(_run(capsys, redis_url, "--by", "platform", "--format", "json",
                          "--min-reports", "10"))
    assert [b["metric"] for b in doc["breakdowns"]] == ["adoption", "os_by"]
    os_cells = {c["value"]: c for c in doc["breakdowns"][1]["cells"]}
    assert len(os_cells["android"]["estimate"]["categories"]) == 3


def test_html_has_a_by_section_that_says_what_it_suppressed(seeded, redis_url, capsys,  # type: ignore[no-untyped-def]
                                                            tmp_path) -> None:
    page = tmp_path / "r.html"
    _run(capsys, redis_url, "--metric", "adoption", "--metric", "plain", "--html", str(page))
    text = page.read_text()
    assert 'data-metric="adoption" data-by="app_version"' in text
    assert 'data-metric="adoption" data-by="platform"' in text
    assert 'data-metric="plain"' in text and 'data-by' not in text.split('data-metric="plain"')[1]
    assert "SUPPRESSED: fewer than 100 devices (99 in its busiest day, 99 reports)" in text
    assert "not</b> protected by local differential privacy" in text


def test_by_a_dimension_the_metric_does_not_declare_is_an_error(seeded, redis_url,  # type: ignore[no-untyped-def]
                                                                capsys) -> None:
    assert main(["report", "--redis-url", redis_url, "--metric", "plain", "--by",
                 "platform"]) == 1
    assert ("plain: 'platform' is not a dimension or declared combination of this metric "
            "(it declares no dimensions)") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(capsys, redis_url, "--min-reports", "5")
    assert "--min-devices applies to breakdowns" in capsys.readouterr().err
