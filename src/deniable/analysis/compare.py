"""Comparisons: the difference between two estimates, its interval and a two-sided p-value,
with Holm or Bonferroni correction when many are made at once.

Method (a normal approximation on the debiased scale):

    d = b - a                      (unclipped estimates: clipping would bias the difference)
    se = sqrt(se_a**2 + se_b**2)   (each se the plug-in sqrt(r (1 - r) / n) / (P1 - Q))
    CI = d -/+ z * se,   z-statistic = d / se,   p = 2 * (1 - Phi(|d| / se))

Each side's standard error is its window's honest one (``estimate.window_estimate``): it follows
the metric's collection policy, so memoized reports pooled over several periods count as the
devices behind them, not as independent reports (docs/analysis.md).

Every kind compares the same way: a boolean metric's share of yes, a numeric metric's mean (in
its units), and for a categorical or histogram metric each category's share
(``compare_categories``: one comparison per category, Holm-corrected across the categories, so
"which categories' shares changed" controls the family-wise error over all of them).

Assumptions, stated plainly:

- **Two time windows** of one metric: the two windows' estimates are taken as independent.
  Exact when different devices report in each window. When the same devices report in both,
  a memoized device sends the same bit for the same value in both windows and its true value
  tends to persist: both make the covariance of the two sides non-negative (memoized bits of
  different values are independent), so the test is conservative, never too liberal, on
  account of memoization.
- **Two metrics** over the same range: every report's coins are drawn independently, so the
  *randomization* noise of the two metrics is independent, but both are answered by the same
  people, whose true answers may correlate. The counters keep no link between a person's two
  reports, so that covariance cannot be estimated; it is taken as 0. Positively correlated
  answers make the test conservative; negatively correlated ones make it too liberal.
- Large enough n that the normal approximation holds (several dozen reports per side). With a
  yes-rate of exactly 0 or 1 the plug-in standard error is 0, and the p-value is NaN.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from statistics import NormalDist

from deniable.client.mechanism import Estimate, z_score
from deniable.analysis.estimate import is_categorical, window_categories, window_estimate
from deniable.analysis.categorical import CategoryEstimates
from deniable.analysis.sources import MetricCounts, MetricInfo

CORRECTIONS = ("holm", "bonferroni", "none")


class ComparisonError(ValueError):
    """Comparisons that cannot be made: an empty side, an unknown correction."""


@dataclass(frozen=True)
class Comparison:
    """``b - a`` for one pair of estimates.

    ``p_adjusted`` and ``significant`` hold after a correction over a family of comparisons
    (``correct``); before, ``p_adjusted`` equals ``p_value`` and ``correction`` is "none".
    """

    label: str
    a: str
    b: str
    n_a: int
    n_b: int
    estimate_a: float
    estimate_b: float
    difference: float
    stderr: float
    ci_low: float
    ci_high: float
    z: float
    p_value: float
    p_adjusted: float
    significant: bool
    correction: str
    alpha: float
    confidence: float
    metric: str = ""
    category: str | None = None
    """Categorical and histogram metrics: the category whose share is compared."""
    kind: str = "boolean"


def difference(a: Estimate, b: Estimate, *, label: str = "", name_a: str = "a",
               name_b: str = "b", alpha: float = 0.05, confidence: float = 0.95,
               metric: str = "", category: str | None = None,
               kind: str = "boolean") -> Comparison:
    """Compare two estimates (from ``RandomizedResponse.estimate``); see the module docstring.
    ``metric``, ``category`` and ``kind`` only label the result."""
    if a.n == 0 or b.n == 0:
        raise ComparisonError(f"{label or 'comparison'}: a side has no reports "
                              f"(n_a={a.n}, n_b={b.n})")
    d = b.unclipped - a.unclipped
    se = math.hypot(a.stderr, b.stderr)
    half = z_score(confidence) * se
    if se > 0:
        z = d / se
        p = 2 * NormalDist().cdf(-abs(z))
    else:
        z = p = math.nan
    return Comparison(label=label, a=name_a, b=name_b, n_a=a.n, n_b=b.n,
                      estimate_a=a.unclipped, estimate_b=b.unclipped, difference=d, stderr=se,
                      ci_low=d - half, ci_high=d + half, z=z, p_value=p, p_adjusted=p,
                      significant=bool(p <= alpha), correction="none", alpha=alpha,
                      confidence=confidence, metric=metric, category=category, kind=kind)


def compare_windows(counts: MetricCounts, before: tuple[datetime, datetime],
                    after: tuple[datetime, datetime], *, alpha: float = 0.05,
                    confidence: float = 0.95) -> Comparison:
    """``after - before`` for one metric: the change between two [start, end) windows."""
    if is_categorical(counts.metric):
        raise ComparisonError(f"{counts.metric.name} is {counts.metric.kind}: compare its "
                              "categories with compare_categories")
    a = window_estimate(counts, *before, confidence=confidence)
    b = window_estimate(counts, *after, confidence=confidence)
    return window_change(counts.metric, a, b, before, after, alpha=alpha,
                         confidence=confidence)


def window_change(metric: MetricInfo, a: Estimate, b: Estimate,
                  before: tuple[datetime, datetime], after: tuple[datetime, datetime], *,
                  alpha: float = 0.05, confidence: float = 0.95) -> Comparison:
    """``compare_windows`` of the two windows' estimates, already made (as
    ``estimate.summarize_windows`` makes them)."""
    return difference(a, b, label=metric.name, name_a=_window_name(before),
                      name_b=_window_name(after), alpha=alpha, confidence=confidence,
                      metric=metric.name, kind=metric.kind)


def compare_categories(counts: MetricCounts, before: tuple[datetime, datetime],
                       after: tuple[datetime, datetime], *, alpha: float = 0.05,
                       confidence: float = 0.95, correction: str | None = "holm"
                       ) -> list[Comparison]:
    """``after - before`` for each category's share of a categorical or histogram metric,
    labelled "<metric>: <category>", and corrected across the categories (Holm by default;
    ``correction=None`` leaves them raw, for a larger family such as a whole report's).

    Raises:
        ComparisonError: a window without reports, or a metric that is not categorical.
    """
    metric = counts.metric
    if not is_categorical(metric):
        raise ComparisonError(f"{metric.name} is {metric.kind}: use compare_windows")
    a = window_categories(counts, *before, confidence=confidence)
    b = window_categories(counts, *after, confidence=confidence)
    return category_changes(metric, a, b, before, after, alpha=alpha, confidence=confidence,
                            correction=correction)


def category_changes(metric: MetricInfo, a: CategoryEstimates, b: CategoryEstimates,
                     before: tuple[datetime, datetime], after: tuple[datetime, datetime], *,
                     alpha: float = 0.05, confidence: float = 0.95,
                     correction: str | None = "holm") -> list[Comparison]:
    """``compare_categories`` of the two windows' category estimates, already made (as
    ``estimate.summarize_windows`` makes them).

    Raises:
        ComparisonError: a window without reports.
    """
    if a.n == 0 or b.n == 0:
        raise ComparisonError(f"{metric.name}: a side has no reports (n_a={a.n}, n_b={b.n})")
    found = []
    name_a, name_b = _window_name(before), _window_name(after)
    for i, category in enumerate(a.labels):
        found.append(difference(_category_estimate(a, i), _category_estimate(b, i),
                                label=f"{metric.name}: {category}", name_a=name_a,
                                name_b=name_b, alpha=alpha, confidence=confidence,
                                metric=metric.name, category=category, kind=metric.kind))
    return correct(found, correction, alpha) if correction else found


def _category_estimate(c: CategoryEstimates, i: int) -> Estimate:
    """Category ``i`` of ``c`` as an Estimate (its unbiased share and plug-in SE)."""
    value = float(c.value[i])
    return Estimate(n=c.n, ones=int(c.counts[i]), yes_rate=int(c.counts[i]) / c.n if c.n
                    else math.nan, value=min(1.0, max(0.0, value)), unclipped=value,
                    stderr=float(c.stderr[i]), ci_low=float(c.ci_low[i]),
                    ci_high=float(c.ci_high[i]), confidence=c.confidence,
                    clipped=not 0 <= value <= 1, wide=bool(c.ci_high[i] - c.ci_low[i] >= 0.5))


def compare_metrics(a: MetricCounts, b: MetricCounts, *, alpha: float = 0.05,
                    confidence: float = 0.95) -> Comparison:
    """``b - a`` for two metrics over the counts given (pool each one's buckets)."""
    est_a = window_estimate(a, confidence=confidence)
    est_b = window_estimate(b, confidence=confidence)
    kind = a.metric.spec.kind_object
    if a.metric.kind != b.metric.kind or kind.scale(a.metric.spec) != kind.scale(b.metric.spec):
        raise ComparisonError(f"{a.metric.name} ({a.metric.kind}) and {b.metric.name} "
                              f"({b.metric.kind}) measure different things")
    return replace(difference(est_a, est_b, label=f"{b.metric.name} - {a.metric.name}",
                              name_a=a.metric.name, name_b=b.metric.name, alpha=alpha,
                              confidence=confidence), kind=a.metric.kind)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (strong family-wise error control), capped at 1.

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) * p_(j)).
    NaN p-values are left NaN and do not count towards m.
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(order)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def bonferroni(p_values: Sequence[float]) -> list[float]:
    """Bonferroni-adjusted p-values: min(1, m * p). NaN stays NaN and does not count."""
    m = sum(not math.isnan(p) for p in p_values)
    return [p if math.isnan(p) else min(1.0, m * p) for p in p_values]


def correct(comparisons: Sequence[Comparison], method: str = "holm",
            alpha: float = 0.05) -> list[Comparison]:
    """Adjust a family of comparisons' p-values; ``significant`` means p_adjusted <= alpha."""
    if method not in CORRECTIONS:
        raise ComparisonError(f"correction must be one of {CORRECTIONS}. Got {method!r} instead.")
    raw = [c.p_value for c in comparisons]
    adjusted = holm(raw) if method == "holm" else bonferroni(raw) if method == "bonferroni" \
        else list(raw)
    return [replace(c, p_adjusted=p, significant=bool(p <= alpha), correction=method,
                    alpha=alpha) for c, p in zip(comparisons, adjusted)]


def _window_name(window: tuple[datetime, datetime]) -> str:
    return f"{window[0]:%Y-%m-%d %H:%M}..{window[1]:%Y-%m-%d %H:%M}"
