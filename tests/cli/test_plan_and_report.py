"""``deniable plan`` and ``deniable report`` as a user runs them."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from deniable.cli.main import main
from deniable.client import Delivery, Privacy, Reporter


def test_plan_by_epsilon_and_by_n(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--epsilon", "1.0", "--margin", "0.01", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plans"][0]["n"] == 44_972
    assert main(["plan", "--mechanism", "rr:1/2:1/2", "--n", "50000"]) == 0
    assert "±0.88 points on the share" in capsys.readouterr().out  # 0.00877
    with pytest.raises(SystemExit) as bad:
        main(["plan", "--epsilon", "-1", "--margin", "0.01"])
    assert bad.value.code == 2


@pytest.mark.slow
def test_plan_for_every_registered_metric(live_collector, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["plan", "--collector", live_collector.url, "--margin", "0.02",
                 "--format", "json"]) == 0
    plans = {p["metric"]: p for p in json.loads(capsys.readouterr().out)["plans"]}
    assert set(plans) == {"feature_x_enabled", "dark_mode"}
    # rr:1/2:1/2: spread 1/2, n = ceil((1.959964 * 0.5 / (0.02 * 0.5))^2) = 9,604.
    assert plans["feature_x_enabled"]["n"] == 9_604


def test_report_series_csv_and_html(live_collector, metrics_file, redis_client,  # type: ignore[no-untyped-def]
                                    tmp_path: Path, capsys) -> None:
    with Reporter(live_collector.url, metrics_file, delivery=Delivery(batch_size=500),
                  privacy=Privacy(one_per_period=False)) as reporter:
        for i in range(1_000):
            reporter.report("dark_mode", i % 2 == 0)
    assert main(["report", "--collector", live_collector.url, "--metric", "dark_mode",
                 "--every", "day", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sum(int(r["n"]) for r in rows) == 1_000 and len(rows) == 8  # 7 days + today's part
    out = tmp_path / "report.html"
    assert main(["report", "--collector", live_collector.url, "--html", str(out)]) == 0
    page = out.read_text()
    assert 'data-metric="dark_mode"' in page and "<svg" in page
