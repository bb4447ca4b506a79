"""Numbers for people: percent with the interval, means in their unit, p-values and counts as
a reader without statistics reads them; the plain reading of every output, the notes once."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone


from deniable.analysis import analyze, render_html, summarize
from deniable.analysis import plain
from deniable.analysis.report import render

UTC = timezone.utc
START = datetime(2026, 11, 16, tzinfo=UTC)


def test_shares_read_in_percent_with_their_interval() -> None:
    assert plain.share(0.5329, 0.29, 0.78) == "53 % (29\u201378 %)"
    assert plain.share(0.5329, 0.5231, 0.5427) == "53.3 % (52.3\u201354.3 %)"
    assert plain.share(0.0021, 0.0011, 0.0032) == "0.21 % (0.11\u20130.32 %)"
    assert plain.share(0.055, 0.031, 0.079, signed=True) == "+5.5 points (+3.1 to +7.9)"
    assert plain.share(float("nan"), 0, 1) == "-"


def test_means_read_in_their_unit_and_never_in_scientific_notation() -> None:
    assert plain.unit_of("startup_ms") == "ms" and plain.unit_of("dark_mode") == ""
    assert plain.mean(812.4, 700.2, 925.9, "ms") == "812 ms (700\u2013926 ms)"
    assert plain.mean(-201.1575, -344.2, -59.1, "ms", signed=True) == \
        "-201 ms (-344 to -59 ms)"
    assert plain.number(50_558_100.0) == "50,558,100"
    assert plain.number(0.000123) == "0.000123"
    assert plain.exact(1e6) == "1000000" and plain.exact(0.1) == "0.1"
    assert plain.exact(-0.0000001) == "0"
    for x in (4.44e-15, 5.05581e7, 1e-9, 123456789.123):
        assert "e" not in plain.exact(x)
        assert "e" not in plain.number(x) and "e" not in plain.mean(x, x * 0.9, x * 1.1)


def test_p_values_and_counts_read_as_words() -> None:
    assert plain.p_value(4.44e-15) == "p < 0.001" and plain.p_value(0.0) == "p < 0.001"
    assert plain.p_value(0.006) == "p = 0.006" and plain.p_value(0.4321) == "p = 0.43"
    assert plain.p_value(1.0) == "p = 1" and plain.p_value(float("nan")) == "-"
    assert plain.count(1, "comparison") == "1 comparison"
    assert plain.count(16, "comparison") == "16 comparisons"
    assert plain.count(1, "category", "categories") == "1 category"


def _source(memory_source):  # type: ignore[no-untyped-def]
    hours = {"a": [(START + timedelta(days=d, hours=3), 1000, 600 if d < 2 else 650)
                   for d in range(4)],
             "b": [(START + timedelta(days=d, hours=3), 1000, 500) for d in range(4)]}
    return memory_source({"a": "rr:1/2:1/2", "b": "rr:1/2:1/2"}, hours)


def test_the_plain_table_shows_no_raw_rate_and_its_notes_once(memory_source) -> None:  # type: ignore[no-untyped-def]
    src = _source(memory_source)
    summaries = [summarize(src.counts(m), start=START, end=START + timedelta(days=4))
                 for m in ("a", "b")]
    text = render(summaries, "table")
    assert "raw" not in text.split("How to read")[0] and "0.0" not in text.split("How")[0]
    assert text.count("How to read this") == 1 and text.count("19 times out of 20") == 1
    assert re.search(r"a\s+4,000\s+yes\s+\d+(\.\d)? % \(\d+(\.\d)?\u2013\d+(\.\d)? %\)", text)
    detailed = render(summaries, "table", detailed=True)
    assert "raw yes-rate" in detailed and "0.6250" in detailed  # 2,500 of 4,000
    row = json.loads(render(summaries, "json"))["metrics"][0]  # JSON keeps every field
    assert {"yes_rate", "ones", "estimate", "ci_low", "stderr"} <= set(row)
    assert row["display"].endswith("%)")


def test_the_html_report_reads_in_percent_without_statisticians_numbers(memory_source) -> None:  # type: ignore[no-untyped-def]
    src = _source(memory_source)
    a = analyze(src, start=START, end=START + timedelta(days=4), split=START + timedelta(days=2))
    page = render_html(a.sections, a.comparisons)
    overview = page[page.index("<h2>Overview"):page.index("<h2>Metrics")]
    assert "raw yes-rate" not in overview and " %" in overview
    text = page[:page.index("<script>")]
    assert not re.search(r"\d[eE][+-]\d", text)       # no scientific notation anywhere
    assert "p adj. 0" not in page and "1 comparisons" not in page
    assert page.count("How to read this") == 1            # the notes once per report
    assert '<details class="method">' in page             # the method one click away
