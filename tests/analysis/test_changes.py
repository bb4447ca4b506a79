""""What changed": one line per metric, the correction's family per metric by default (a
categorical metric's categories together), across the report on request, and said."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from deniable.analysis import analyze, correct
from deniable.analysis.changes import FamilyError, correct_family, family_note, what_changed

UTC = timezone.utc
START = datetime(2026, 11, 16, tzinfo=UTC)
SPLIT, END = START + timedelta(days=2), START + timedelta(days=4)


def _source(memory_source):  # type: ignore[no-untyped-def]
    # 4,000 memoized devices a day (a side of two days counts 4,000 devices). "up": 0.70 ->
    # 0.80 (z about 4.6); "flat": the same counts on both sides (z = 0); "weak": 0.10 ->
    # 0.148 (z about 2.2, p about 0.03: significant alone, not after a correction across
    # 16 metrics). Exact counts, no sampling: the test cannot fail by chance.
    rows = {"up": (2400, 2600), "flat": (2200, 2200), "weak": (2200, 2296)}
    hours = {name: [(START + timedelta(days=d, hours=3), 4000, a if d < 2 else b)
                    for d in range(4)] for name, (a, b) in rows.items()}
    for i in range(13):
        hours[f"z{i:02d}"] = [(START + timedelta(days=d, hours=3), 4000, 2000) for d in range(4)]
    return memory_source({name: "rr:1/2:1/2" for name in hours}, hours)


def test_each_metric_is_its_own_family_by_default(memory_source) -> None:  # type: ignore[no-untyped-def]
    src = _source(memory_source)
    a = analyze(src, start=START, end=END, split=SPLIT)
    assert a.family == "metric"
    by = {c.metric: c for c in a.comparisons}
    for c in a.comparisons:  # a family of one: the corrected p-value is the raw one
        assert c.p_adjusted == c.p_value
    assert by["up"].significant and by["weak"].significant and not by["flat"].significant
    across = analyze(src, start=START, end=END, split=SPLIT, family="report")
    by_all = {c.metric: c for c in across.comparisons}
    assert across.family == "report" and by_all["up"].significant
    assert not by_all["weak"].significant  # 16 comparisons at once: the weak move is not
    assert [c.p_adjusted for c in across.comparisons] == \
        [c.p_adjusted for c in correct([c for c in a.comparisons], "holm")]
    with pytest.raises(FamilyError):
        analyze(src, start=START, end=END, family="everything")


def test_one_line_per_metric_says_what_changed_and_the_family(memory_source) -> None:  # type: ignore[no-untyped-def]
    a = analyze(_source(memory_source), start=START, end=END, split=SPLIT)
    lines = {line.metric: line for line in what_changed(a.comparisons)}
    assert len(lines) == 16
    assert lines["up"].changed and lines["up"].text.startswith("up: up 10.0 points (+5.8 to +14.2)")
    assert "70.0 % to 80.0 %" in lines["up"].text \
        and "a change (p < 0.001)" in lines["up"].text
    assert not lines["flat"].changed and lines["flat"].text.startswith("flat: no clear change")
    assert "each metric on its own" in family_note(a.comparisons, a.family)
    assert "all 16 comparisons" in family_note(a.comparisons, "report")


def test_a_categorical_metrics_categories_are_one_family(memory_source) -> None:  # type: ignore[no-untyped-def]
    from deniable.analysis.compare import Comparison

    def comparison(metric: str, category: str | None, p: float) -> Comparison:
        return Comparison(label=f"{metric}: {category}" if category else metric, a="a", b="b",
                          n_a=100, n_b=100, estimate_a=0.4, estimate_b=0.34,
                          difference=-0.06, stderr=0.01, ci_low=-0.08, ci_high=-0.04, z=-6,
                          p_value=p, p_adjusted=p, significant=p <= 0.05, correction="none",
                          alpha=0.05, confidence=0.95, metric=metric, category=category,
                          kind="categorical" if category else "boolean")

    raw = [comparison("os", c, p) for c, p in (("android", 0.01), ("ios", 0.02),
                                                ("linux", 0.9))] + [comparison("m", None, 0.04)]
    corrected = correct_family(raw, "metric")
    assert [c.p_adjusted for c in corrected] == pytest.approx([0.03, 0.04, 0.9, 0.04])
    [os_line, m_line] = what_changed(corrected)
    assert os_line.text.startswith("os: 2 of 3 categories changed: android down 6")
    assert m_line.changed
