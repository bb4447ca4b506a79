"""The README and docs say what the code does: every setting it reads, and the privacy
figures per metric kind (computed here from the mechanisms' exact variances)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import itertools
import math
import re
import tomllib
from fractions import Fraction
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest

from deniable.client.categorical import (KaryRandomizedResponse, SubsetSelection,
                                         UnaryEncoding, choose_categorical)
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse
from deniable.client.numeric import BitMean
from deniable.collector.settings import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_collector_setting_is_in_the_readme() -> None:
    missing = [name for name in DEFAULTS if f"`DENIABLE_{name}`" not in README]
    assert missing == []


def test_every_environment_variable_the_code_reads_is_in_the_readme() -> None:
    code = "".join(p.read_text() for folder in ("client", "collector", "analysis", "cli", "deploy")
                   for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".conf", ""))
    named = set(re.findall(r"DENIABLE_[A-Z_]+[A-Z]", code))
    named |= {f"DENIABLE_{n}" for n in re.findall(r'env_default\("([A-Z_]+)"', code)}
    undocumented = sorted(n for n in named if n not in README and n != "DENIABLE_")
    assert undocumented == []


def readme_settings_table() -> set[str]:
    """Every ``DENIABLE_*`` named in a row of the README's settings table."""
    section = README.split("### Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `DENIABLE_")]
    return set(re.findall(r"DENIABLE_[A-Z_]+[A-Z]", "\n".join(rows)))


def test_operations_md_links_the_one_complete_settings_table() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "(../README.md#settings)" in operations
    table = readme_settings_table()
    missing = [name for name in DEFAULTS if f"DENIABLE_{name}" not in table]
    assert missing == []  # rate limits and proxy settings included


def test_every_setting_the_docs_and_deploy_files_name_exists() -> None:
    """No stale or misspelt setting in docs/ or deploy/ (e.g. one the code stopped reading)."""
    known = readme_settings_table() | {"DENIABLE_COLLECTOR_URL", "DENIABLE_READ_TOKEN",
                                       "DENIABLE_REDIS_SERVER"}
    files = [*(ROOT / "docs").glob("*.md"), *(p for p in (ROOT / "deploy").rglob("*")
                                             if p.is_file())]
    unknown = sorted({f"{path.relative_to(ROOT)}: {name}" for path in files
                      for name in re.findall(r"DENIABLE_[A-Z_]+[A-Z]", path.read_text())
                      if name not in known})
    assert unknown == []


# -- the price of privacy, per metric kind (docs/privacy.md and the README) -----------------

Z95 = NormalDist().inv_cdf(0.975)
PRIVACY = (ROOT / "docs" / "privacy.md").read_text()


def reports_for(variance_per_report: float, margin: float = 0.01) -> int:
    """Reports for a 95% margin of ``margin``, from the exact variance of one report."""
    return math.ceil(Z95 * Z95 * variance_per_report / (margin * margin))


def categorical_price_rows() -> list[str]:
    """The categorical price table: reports for ±1 point at a category share of 0, 0.1 and 0.5,
    under the mechanism the automatic choice makes (its exact variance, src/deniable/client/categorical.py)."""
    rows = []
    for d in (8, 64, 1024):
        for epsilon in (1, 2, 4):
            mechanism, _ = choose_categorical(epsilon, d, "00000000")
            name = ("GRR" if isinstance(mechanism, KaryRandomizedResponse) else
                    "SS" if isinstance(mechanism, SubsetSelection) else "OUE")
            cells = [f"{reports_for(mechanism.variance(f, 1)):,}" for f in (0.0, 0.1, 0.5)]
            rows.append(f"| {d} | {epsilon} | {name} | " + " | ".join(cells) + " |")
    return rows


def numeric_price_rows() -> list[str]:
    """Reports for a mean within ±1% of the range, mean mid-range (1BitMean's exact variance)."""
    rows = []
    for epsilon in (1, 2, 4):
        mechanism = BitMean.from_epsilon(epsilon, 0, 1)
        rows.append(f"| {epsilon} | 1BitMean, a ≈ {float(mechanism.a):.4f} | "
                    f"{reports_for(mechanism.variance_of_mean(0.5, 1)):,} |")
    return rows


def table_after(text: str, marker: str) -> list[str]:
    """The body rows of the markdown table that follows ``marker``."""
    lines = text.split(marker, 1)[1].split("\n", 1)[1].splitlines()
    table = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines)]
    return table[2:]


def test_the_price_tables_are_what_the_exact_variances_give() -> None:
    assert table_after(PRIVACY, "<!-- price-table: categorical") == categorical_price_rows()
    assert table_after(PRIVACY, "<!-- price-table: numeric -->") == numeric_price_rows()


README_PRICE_ROWS = {line for line in README.splitlines()
                     if re.match(r"^\| (\d+ \| [124] \| (GRR|OUE|SS)|[124] \| 1BitMean)", line)}


def test_the_readme_quotes_rows_of_the_computed_price_tables() -> None:
    computed = set(categorical_price_rows()) | set(numeric_price_rows())
    assert README_PRICE_ROWS and README_PRICE_ROWS <= computed


def test_the_worked_numbers_in_plain_words_are_the_mechanisms() -> None:
    """p and q of six categories at ε = 2 (GRR), q of OUE at ε = 2, a of 1BitMean at ε = 1 and
    its P(1) for 812.5 ms and 10 s on [0, 10 000]: as docs/privacy.md states them."""
    grr = MetricSpec.build("categorical", epsilon=2.0, categories=list("abcdef")).mechanism
    assert isinstance(grr, KaryRandomizedResponse)
    oue = UnaryEncoding.from_epsilon(2.0, 64, "00000000")
    bm = BitMean.from_epsilon(1.0, 0, 10_000)
    for stated in (f"p ≈ {float(grr.p):.3f}", f"q ≈ {float(grr.q):.3f}",
                   f"ε = 2, q ≈ {float(oue.q):.3f}", f"a ≈ {float(bm.a):.3f}",
                   f"probability {float(bm.p_one(Fraction(10_000))):.3f}",
                   f"probability {float(bm.p_one(Fraction(0))):.3f}",
                   f"probability {float(bm.p_one(Fraction(812.5))):.3f}"):
        assert stated in PRIVACY, stated
    assert f"{3 * math.exp(2) + 2:.1f} categories at ε = 2" in PRIVACY
    z64 = NormalDist().inv_cdf(1 - 0.05 / (2 * 64))
    assert f"z grows from {Z95:.2f} to {z64:.2f} at d = 64" in PRIVACY


def toml_blocks(text: str) -> list[dict[str, Any]]:
    return [tomllib.loads(block) for block in re.findall(r"```toml\n(.*?)```", text, re.S)]


def declared_kinds() -> dict[str, MetricSpec]:
    """Every metric of a kind other than boolean declared in the README's TOML examples."""
    specs = {}
    for doc in toml_blocks(README):
        for name, table in doc.get("metrics", {}).items():
            if table.get("kind", "boolean") == "boolean":
                continue
            fields = {k: v for k, v in table.items()
                      if k in ("mechanism", "epsilon", "categories", "edges", "lower", "upper",
                               "clamp")}
            specs[name] = MetricSpec.build(table["kind"], **fields)
    return specs


def test_the_readme_declares_every_kind_and_its_examples_report_valid_values() -> None:
    specs = declared_kinds()
    assert {spec.kind for spec in specs.values()} == {"categorical", "histogram", "numeric"}
    calls = re.findall(r'reporter\.report\("(\w+)", ([^)]+)\)', README + PRIVACY)
    used = {name for name, _ in calls if name in specs}
    assert used == set(specs)  # each declared example metric is also shown being reported
    for name, value in calls:
        if name in specs:
            specs[name].encode(ast.literal_eval(value))  # raises if the example is invalid


def test_the_readme_yes_no_comparison_is_the_default_mechanisms() -> None:
    p1, q = (float(x) for x in RandomizedResponse().channel)
    f = 0.5
    pi = q + f * (p1 - q)
    assert f"needs {reports_for(pi * (1 - pi) / (p1 - q) ** 2):,} reports" in README


@pytest.mark.slow
def test_the_plan_commands_the_privacy_doc_quotes_give_its_figures() -> None:
    for command, stated in re.findall(r"`(deniable plan [^`]+)`\s+\((\d[\d,]*\d)", PRIVACY):
        done = subprocess.run([sys.executable, "-m", "deniable.cli", *command.split()[1:],
                               "--format", "json"], capture_output=True, text=True, check=True)
        assert f"{json.loads(done.stdout)['plans'][0]['n']:,}" == stated, command
    assert len(re.findall(r"`deniable plan [^`]+`\s+\([\d,]+", PRIVACY)) == 2


def test_the_collector_loads_the_readmes_metrics_file(tmp_path: Path) -> None:
    from deniable.collector.registry import load_metrics_file

    block = next(b for b in re.findall(r"```toml\n(.*?)```", README, re.S) if "kind =" in b)
    path = tmp_path / "metrics.toml"
    path.write_text(block)
    loaded = load_metrics_file(path)
    for name, spec in declared_kinds().items():
        assert loaded[name].mechanism.id == spec.mechanism.id, name


def test_the_readmes_dimensions_load_as_declared_and_its_calls_state_listed_values(
        tmp_path: Path) -> None:
    """The README's metrics file declares public dimensions the collector's registry loads as
    written, and the values its client examples state are ones those dimensions count."""
    from deniable.collector.registry import load_metrics_file

    block = next(b for b in re.findall(r"```toml\n(.*?)```", README, re.S) if ".dimensions." in b)
    path = tmp_path / "metrics.toml"
    path.write_text(block)
    loaded = load_metrics_file(path)
    declaring = {name: table for name, table in tomllib.loads(block)["metrics"].items()
                 if "dimensions" in table}
    assert declaring
    for name, table in declaring.items():
        expected = {"dimensions": {d: {"values": spec["values"], "other": spec.get("other", False)}
                                   for d, spec in table["dimensions"].items()}}
        if "combinations" in table:
            expected["combinations"] = [sorted(c) for c in table["combinations"]]
        assert loaded[name].dimensions.describe() == expected, name
    dims = loaded["feature_x_enabled"].dimensions
    stated = [ast.literal_eval(found) for found in
              re.findall(r"\bdims?(?:ensions)?=(\{[^}]*\})", README)]
    assert len(stated) >= 2  # Reporter(dimensions=...) and report(..., dims=...)
    for values in stated:
        assert dims.normalize(values) == values  # listed values: counted as they are


def test_the_suppression_threshold_the_docs_give_is_the_analysis_default() -> None:
    """docs/privacy.md: under rr:1/2:1/2 a share from n = k reports has a standard error of up
    to 1/sqrt(n), a 95% margin of ±0.20 at the default k."""
    from deniable.analysis.breakdown import DEFAULT_MIN_REPORTS

    p1, q = (float(x) for x in RandomizedResponse().channel)
    worst = math.sqrt(0.25 / (p1 - q) ** 2 / DEFAULT_MIN_REPORTS)  # yes-rate 1/2
    assert f"n = {DEFAULT_MIN_REPORTS} the 95% interval is up to ±{Z95 * worst:.2f}" in PRIVACY
    assert f"default {DEFAULT_MIN_REPORTS})" in PRIVACY
    assert f"(default {DEFAULT_MIN_REPORTS})" in README
