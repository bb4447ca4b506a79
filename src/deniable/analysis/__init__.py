"""deniable.analysis: debias perturbed counts into estimates analysts can read.

Every metric kind: a boolean metric's share of yes, each category's share of a categorical or
histogram metric (``estimate_categories``: per-category and simultaneous intervals, an optional
biased simplex projection), and a numeric metric's mean and total (``estimate_mean``).

Time series (``series``, ``rolling``), comparisons with multiplicity corrections (``compare``),
planning in devices (``plan``), intervals that hold over windows of several reporting periods
(``deniable.analysis.window``, from each metric's collection policy), and outputs: terminal tables, JSON, CSV, pandas (``to_frame``) and a
self-contained HTML report (``render_html``). Breakdowns by public dimension
(``breakdown``): an estimate per value, small cells suppressed.
"""
from deniable.analysis.analyze import Analysis, analyze
from deniable.analysis.breakdown import DEFAULT_MIN_REPORTS, Breakdown, Cell, breakdown
from deniable.analysis.categorical import (CategoryEstimates, estimate_categories,
                                           project_to_simplex)
from deniable.analysis.compare import (Comparison, bonferroni, compare_categories,
                                       compare_metrics, compare_windows, correct, difference,
                                       holm)
from deniable.analysis.estimate import (Estimates, MetricSummary, debias, summarize,
                                        window_estimate)
from deniable.analysis.frame import to_frame
from deniable.analysis.html import MetricSection, render_html
from deniable.analysis.numeric import MeanEstimate, estimate_mean
from deniable.analysis.plan import Plan, plan
from deniable.analysis.sources import HTTPSource, MetricCounts, MetricInfo, RedisSource
from deniable.analysis.timeseries import TimeSeries, rolling, rollup, series

__all__ = ["DEFAULT_MIN_REPORTS", "Breakdown", "Cell", "breakdown", "Analysis", "CategoryEstimates", "Comparison", "Estimates", "HTTPSource",
           "MeanEstimate", "MetricCounts", "MetricInfo", "MetricSection", "MetricSummary",
           "Plan", "RedisSource", "TimeSeries", "analyze", "bonferroni", "compare_categories",
           "compare_metrics", "compare_windows", "correct", "debias", "difference",
           "estimate_categories", "estimate_mean", "holm", "plan", "project_to_simplex",
           "render_html", "rolling", "rollup", "series", "summarize", "to_frame",
           "window_estimate"]
