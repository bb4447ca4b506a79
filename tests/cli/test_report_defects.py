"""``deniable report`` and ``deniable plan`` say what they show: one test per defect of
issue 18 part 4. Counts are written through the collector's Store into a real Redis and read
back with --redis-url."""
from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import redis

from deniable.analysis.charts import series_svg, y_limits
from deniable.analysis.compare import Comparison
from deniable.analysis.html import render_html
from deniable.analysis.estimate import debias
from deniable.analysis.sources import MetricInfo
from deniable.analysis.timeseries import TimeSeries
from deniable.cli.main import main
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.wire import Batch, Tally, new_batch_id
from deniable.collector import auth
from deniable.collector.live_registry import LiveRegistry
from deniable.collector.registry import load_metrics_file
from deniable.collector.store import Store

X = "feature_x_enabled"
DAY0 = datetime(2026, 11, 10, tzinfo=timezone.utc)
RANGE = ["--from", "2026-11-10T14:00", "--to", "2026-11-14T00:00"]


def _fill(url: str, metric: str, mechanism: str, hours: dict[datetime, tuple[int, int]]) -> None:
    store = Store(redis.Redis.from_url(url))
    for hour, (n, ones) in hours.items():
        batch = Batch(new_batch_id(), {metric: Tally(mechanism, (n, ones))}, n)
        store.add_batch(batch, hour, {metric: 30}, 3600)


@pytest.fixture()
def report(redis_url: str, redis_client: redis.Redis, metrics_file: Path, capsys):  # type: ignore[no-untyped-def]
    """Four days of feature_x_enabled (rr:1/2:1/2), 1000 reports a day at 15:00 UTC; run
    ``deniable report`` on them: returns (exit status, stdout, stderr)."""
    LiveRegistry(redis_client, load_metrics_file(metrics_file), 0).sync_file()
    _fill(redis_url, X, "rr:1/2:1/2",
          {DAY0 + timedelta(days=d, hours=15): (1000, 400 + 10 * d) for d in range(4)})

    def run(*args: str) -> tuple[int, str, str]:
        try:
            status = main(["report", "--redis-url", redis_url, "--metric", X, *args])
        except SystemExit as exit_:
            status = int(exit_.code or 0)
        out = capsys.readouterr()
        return status, out.out, out.err
    return run


def test_confidence_0_5_prints_a_50_percent_interval_under_its_own_header(report) -> None:  # type: ignore[no-untyped-def]
    status, out, _ = report(*RANGE, "--confidence", "0.5", "--detailed")
    assert status == 0 and "50% CI" in out and "95% CI" not in out
    status, out, _ = report(*RANGE, "--confidence", "0.5", "--every", "day", "--detailed")
    assert status == 0 and "50% CI" in out and "95% CI" not in out
    for plain in (report(*RANGE, "--confidence", "0.5")[1],
                  report(*RANGE, "--confidence", "0.5", "--every", "day")[1]):
        assert "50 % interval" in plain and "95 %" not in plain
    status, out, _ = report(*RANGE, "--confidence", "0.5", "--format", "json")
    assert json.loads(out)["range"]["confidence"] == 0.5
    assert report("--confidence", "1")[0] == 2


def test_html_keeps_format_json_on_stdout_and_keeps_rolling(report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "r.html"
    status, out, _ = report(*RANGE, "--html", str(page), "--format", "json", "--every", "day",
                            "--rolling", "3")
    assert status == 0
    doc = json.loads(out)
    assert doc["series"][0]["window"] == 3
    html = page.read_text()
    assert "Rolling 3 days." in html and "partial window: 1 of 3 days" in html


def test_split_outside_the_range_is_refused(report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    status, _, err = report(*RANGE, "--html", str(tmp_path / "r.html"),
                            "--split", "2026-12-01T00:00")
    assert status == 2 and "outside the range" in err
    assert not (tmp_path / "r.html").exists()


def test_split_and_correction_without_html_are_refused(report) -> None:  # type: ignore[no-untyped-def]
    for option in (["--split", "2026-11-12T00:00"], ["--correction", "bonferroni"],
                   ["--family", "report"]):
        status, _, err = report(*RANGE, *option)
        assert status == 2 and "add --changes or --html" in err


def test_partial_first_bucket_and_partial_rolling_windows_are_flagged(report) -> None:  # type: ignore[no-untyped-def]
    status, out, _ = report(*RANGE, "--every", "day", "--format", "json")
    buckets = json.loads(out)["series"][0]["buckets"]
    assert buckets[0]["partial"] is True
    assert "partial day: 2026-11-10 14:00 to 2026-11-11 00:00 UTC" in buckets[0]["flags"]
    assert [b["partial"] for b in buckets[1:]] == [False] * 3
    status, out, _ = report(*RANGE, "--every", "day", "--rolling", "3", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert "partial window: 1 of 3 days" in rows[0]["flags"]
    assert "partial window: 2 of 3 days" in rows[1]["flags"]
    assert "partial window" not in rows[3]["flags"]
    assert {(r["range_from"], r["range_to"]) for r in rows} == {
        ("2026-11-10T14:00:00+00:00", "2026-11-14T00:00:00+00:00")}


def _series(n: list[int], ones: list[int]) -> TimeSeries:
    starts = [DAY0 + timedelta(days=i) for i in range(len(n))]
    return TimeSeries(MetricInfo(X, "", DEFAULT), "day", starts,
                      debias(DEFAULT, np.array(ones), np.array(n)))


@pytest.mark.slow
def test_a_chart_with_one_non_empty_bucket_draws_its_interval() -> None:
    lone = series_svg(_series([0, 500, 0], [0, 200, 0]))
    none = series_svg(_series([0, 0, 0], [0, 0, 0]))
    assert "LineCollection" in lone  # the interval, drawn as a bar
    assert "LineCollection" not in none


def test_chart_axis_zooms_to_the_intervals_at_large_n() -> None:
    e = _series([1_000_000] * 3, [400_000, 401_000, 402_000]).estimates
    low, high = y_limits(e)
    assert high - low < 0.05 and low <= e.ci_low.min() and high >= e.ci_high.max()
    assert y_limits(_series([0], [0]).estimates) == (-0.02, 1.02)


def test_a_new_version_hints_at_the_old_one_and_version_reads_it(report, redis_client) -> None:  # type: ignore[no-untyped-def]
    registry = LiveRegistry(redis_client, {}, 0)
    registry.register(X, RandomizedResponse.from_id("rr:3/4:1/2"), "X", 30)  # version 2
    status, out, err = report(*RANGE, "--format", "json")
    assert status == 0
    row = json.loads(out)["metrics"][0]
    assert (row["version"], row["n"]) == (2, 0)
    assert "version 1 holds 4,000 reports" in err and "--version 1" in err
    status, out, _ = report(*RANGE, "--format", "json", "--version", "1")
    row = json.loads(out)["metrics"][0]
    assert (status, row["version"], row["n"], row["mechanism"]) == (0, 1, 4000, "rr:1/2:1/2")
    assert report(*RANGE, "--version", "9")[0] == 1  # no such version: an error, not a trace


def test_a_retired_metric_is_not_unknown(report, redis_client) -> None:  # type: ignore[no-untyped-def]
    LiveRegistry(redis_client, {}, 0).retire(X)
    status, out, err = report(*RANGE, "--format", "json")
    assert status == 0 and json.loads(out)["metrics"][0]["n"] == 4000
    status, _, err = report(*RANGE, "--metric", "never_registered")
    assert status == 2 and "unknown metric(s): never_registered" in err


def test_an_unreachable_redis_is_an_error_message_not_a_traceback(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["report", "--redis-url", "redis://127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert "cannot read the collector's Redis" in err and "Traceback" not in err


def test_plan_collector_without_a_url_says_so(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("DENIABLE_COLLECTOR_URL", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--collector", "--margin", "0.01"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--collector needs a URL" in err
    assert "is required" not in err


def test_tiny_p_values_print_as_below_0_0001() -> None:
    c = Comparison(label=X, a="a", b="b", n_a=10, n_b=10, estimate_a=0.1, estimate_b=0.9,
                   difference=0.8, stderr=0.01, ci_low=0.78, ci_high=0.82, z=80.0,
                   p_value=0.0, p_adjusted=0.0, significant=True, correction="holm",
                   alpha=0.05, confidence=0.95)
    page = render_html([], [c])
    assert '<td data-field="p_value">&lt;0.0001</td>' in page
    assert '<td data-field="p_value">0</td>' not in page


def test_pooled_json_and_csv_carry_flags_range_and_version(report) -> None:  # type: ignore[no-untyped-def]
    status, out, _ = report(*RANGE, "--format", "json")
    doc = json.loads(out)
    assert doc["range"] == {"from": "2026-11-10T14:00:00+00:00", "to": "2026-11-14T00:00:00+00:00",
                            "confidence": 0.95}
    row = doc["metrics"][0]
    assert {"flags", "version", "start", "end", "periods", "estimand"} <= set(row)
    assert row["periods"] == 4 and "share of devices" in row["estimand"]
    status, out, _ = report(*RANGE, "--format", "csv")
    [row] = list(csv.DictReader(io.StringIO(out)))
    assert {"flags", "version", "start", "end"} <= set(row)
    assert row["start"] == "2026-11-10T14:00:00+00:00"
    status, out, _ = report(*RANGE)
    assert "2026-11-10 14:00 to 2026-11-14 00:00 UTC" in out
    status, out, _ = report(*RANGE, "--every", "day")
    assert "2026-11-10 14:00 to 2026-11-14 00:00 UTC" in out and f"{X} v1" in out


def test_a_clipped_interval_is_flagged_in_every_output(report, redis_url) -> None:  # type: ignore[no-untyped-def]
    _fill(redis_url, X, "rr:1/2:1/2", {DAY0 + timedelta(days=5, hours=1): (10_000, 2550)})
    window = ["--from", "2026-11-15T00:00", "--to", "2026-11-16T00:00"]
    status, out, _ = report(*window, "--format", "json")
    row = json.loads(out)["metrics"][0]
    assert (row["clipped"], row["interval_clipped"], row["ci_low"]) == (False, True, 0.0)
    assert "interval clipped to [0, 1]" in row["flags"]
    status, out, _ = report(*window, "--every", "day", "--format", "json")
    assert json.loads(out)["series"][0]["buckets"][0]["interval_clipped"] is True
    status, out, _ = report(*window, "--detailed")
    assert "interval clipped" in out
    status, out, _ = report(*window)  # the plain reading: the interval starts at 0 %
    assert "1.0 % (0.0–" in out


def test_an_ingest_key_is_an_ingest_key(secure_app, redis_client) -> None:  # type: ignore[no-untyped-def]
    key = auth.create_key(redis_client, "ingest", "shop-app")
    response = secure_app.test_client().get(f"/v1/metrics/{X}/counts",
                                            headers={"Authorization": f"Bearer {key.secret}"})
    assert response.status_code == 403
    assert response.json["detail"].startswith("an ingest key cannot do this; it needs a read")
    assert "a ingest" not in response.json["detail"]
    assert not math.isnan(0.0)
