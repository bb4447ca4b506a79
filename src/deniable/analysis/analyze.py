"""One call from a counts source to everything a report shows: per metric a time series and a
pooled summary, and the change between the two halves of the range, corrected for
multiplicity."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from deniable.analysis.breakdown import DEFAULT_MIN_REPORTS, Breakdown, breakdown
from deniable.analysis.categorical import CategoryEstimates
from deniable.analysis.changes import FAMILIES, FamilyError, correct_family
from deniable.analysis.compare import (Comparison, ComparisonError, category_changes,
                                       window_change)
from deniable.analysis.estimate import summarize_windows
from deniable.analysis.html import MetricSection
from deniable.analysis.sources import CountsSource, default_range
from deniable.analysis.timeseries import floor, rolling, series


@dataclass(frozen=True)
class Analysis:
    """Sections (series + summary) per metric, and the before/after comparisons."""

    start: datetime
    end: datetime
    split: datetime
    sections: list[MetricSection]
    comparisons: list[Comparison]
    breakdowns: list[Breakdown] = field(default_factory=list)
    """Per metric that declares dimensions: a breakdown by each (or by ``by`` alone)."""
    histories: dict[str, Any] = field(default_factory=dict)
    """Per metric with reports of several versions in the range: its ``analysis.history``."""
    family: str = "metric"
    """The correction's family of ``comparisons``: "metric" (each metric's own) or "report"
    (all together); ``analysis.changes``."""


def analyze(source: CountsSource, metrics: Sequence[str] | None = None, *,
            start: datetime | None = None, end: datetime | None = None,
            granularity: str = "day", confidence: float = 0.95, split: datetime | None = None,
            correction: str = "holm", alpha: float = 0.05, rolling_window: int | None = None,
            version: int | None = None, by: str | None = None,
            min_reports: int | None = None, family: str = "metric") -> Analysis:
    """Read each metric's counts over [start, end) (default: the last 7 days) and analyse them.

    The comparison is [split, end) minus [start, split) per metric; ``split`` defaults to the
    bucket boundary nearest the middle of the range. Metrics with no reports on one side are
    left out of the comparisons (and so out of the correction's family). ``family``: the
    correction's family (``analysis.changes``): "metric" (default) corrects each metric's own
    comparisons together (a categorical metric's categories), "report" every comparison of
    every metric together. ``rolling_window``
    pools each bucket with the ones before it (``timeseries.rolling``); ``version`` reads that
    version of every metric named. Every interval follows its metric's collection policy.

    Breakdowns (sources with ``breakdown_counts``; of ``version`` when given): each metric that
    declares dimensions is broken down by each of them, or by ``by`` alone when given (metrics
    that do not declare it are skipped), cells under ``min_reports`` devices suppressed
    (``analysis.breakdown``). Their comparisons are corrected within each breakdown.
    """
    if family not in FAMILIES:
        raise FamilyError(f"family must be one of {FAMILIES}. Got {family!r} instead.")
    start, end = default_range(start, end)
    if split is None:
        split = floor(start + (end - start) / 2, granularity)
        if split <= start:
            split = start + (end - start) / 2
    names = list(metrics) if metrics else sorted(source.metrics())
    read_ahead = getattr(source, "read_ahead", None)
    if read_ahead is not None:  # RedisSource: many metrics per round trip
        read_ahead(names, start, end)
    sections, raw = [], []
    breakdowns: list[Breakdown] = []
    histories: dict[str, Any] = {}
    for name in names:
        counts = source.counts(name, start, end, version=version)
        ts = series(counts, granularity, start, end, confidence)
        if rolling_window:
            ts = rolling(ts, rolling_window)
        # The whole range and its two halves, debiased at once (summarize, compare_windows
        # and compare_categories give the same numbers one by one).
        summary, (a, b) = summarize_windows(counts, [(start, split), (split, end)],
                                            confidence, start=start, end=end)
        sections.append(MetricSection(ts, summary))
        try:
            if isinstance(a, CategoryEstimates):  # one comparison per category, in the family
                raw.extend(category_changes(counts.metric, a, b,  # type: ignore[arg-type]
                                            (start, split), (split, end), alpha=alpha,
                                            confidence=confidence, correction=None))
            else:
                raw.append(window_change(counts.metric, a, b,  # type: ignore[arg-type]
                                         (start, split), (split, end), alpha=alpha,
                                         confidence=confidence))
        except ComparisonError:
            pass
        if version is None and (counts.metric.version or 1) >= 2 and not rolling_window:
            from deniable.analysis.history import history

            joined = history(source, name, start, end, granularity, confidence)
            if joined is not None:
                histories[name] = joined
        dims = counts.metric.dimensions
        if dims and hasattr(source, "breakdown_counts"):
            wanted = ([by] if by is not None and (dims.get(by) is not None or
                                                  tuple(by.split(",")) in dims.combinations)
                      else [] if by is not None else list(dims.names))
            breakdowns.extend(breakdown(source, name, b, start, end,  # type: ignore[arg-type]
                                        min_reports=min_reports or DEFAULT_MIN_REPORTS,
                                        confidence=confidence, alpha=alpha,
                                        correction=correction, version=version)
                              for b in wanted)
    return Analysis(start, end, split, sections, correct_family(raw, family, correction, alpha),
                    breakdowns, histories, family)
