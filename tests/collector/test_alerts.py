"""The shipped alert rules (deploy/prometheus/alerts.yml): promtool checks them and runs their
unit tests (alerts.test.yml, "no reports after a restart" included), and a fresh collector's
/metrics holds every series they read, at 0, before any request."""
from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
SELECTOR = re.compile(r"\b(deniable_[a-z_]+)(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
COLLECTOR_SAMPLES_LIMIT = 2000
"""DeniableSeriesGrowth's threshold (scrape_samples_scraped)."""


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: run ./dev test, which installs Debian's prometheus")
    return found


def rule_expressions() -> dict[str, str]:
    groups = yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = subprocess.run([promtool(), "check", "rules", "alerts.yml"], cwd=RULES,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in checked.stdout
    tested = subprocess.run([promtool(), "test", "rules", "alerts.test.yml"], cwd=RULES,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert is tested: not firing when healthy, and firing where alerts.test.yml says.
    tests = yaml.safe_load((RULES / "alerts.test.yml").read_text())["tests"]
    named = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert named == set(rule_expressions())
    assert "DeniableNoReports" in {case["alertname"] for test in tests[1:]
                                   for case in test["alert_rule_test"] if case["exp_alerts"]}


def test_the_docs_table_names_every_shipped_alert() -> None:
    docs = (RULES.parents[1] / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Alerts"):]
    missing = [name for name in rule_expressions() if f"`{name}`" not in section]
    assert missing == [], missing


@pytest.fixture()
def fresh_collector(redis_url: str, metrics_file: Path) -> Iterator[CollectorProcess]:
    """A collector just started under gunicorn (multiprocess metrics), no request served."""
    with CollectorProcess(redis_url, metrics_file, workers=2, env=OPEN_ENV) as collector:
        yield collector


def test_a_fresh_collector_exports_every_series_an_alert_reads_at_0(
        fresh_collector: CollectorProcess) -> None:
    text = requests.get(f"{fresh_collector.url}/metrics", timeout=10).text
    samples = [sample for family in text_string_to_metric_families(text)
               for sample in family.samples]
    assert len(samples) < COLLECTOR_SAMPLES_LIMIT
    read = {(name, labels or "") for expr in rule_expressions().values()
            for name, labels in SELECTOR.findall(expr)}
    assert len(read) >= 10
    for name, labels in sorted(read):
        wanted = {key: value for key, value in MATCHER.findall(labels) if key != "job"}
        found = [s for s in samples if s.name == name
                 and wanted.items() <= s.labels.items()]
        assert found, f"{name}{{{labels}}}: no series in a fresh collector's /metrics"
        if name.endswith(("_total", "_bucket")) and name != "deniable_process_cpu_seconds_total":
            assert all(s.value == 0 for s in found), (name, labels, found)
