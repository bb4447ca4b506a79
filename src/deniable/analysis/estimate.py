"""A metric's estimates over ranges and windows: summaries, window estimates, per kind.

The estimator itself is ``deniable.analysis.debias`` (numpy over ``deniable.core.estimators``'s
one definition); this module pools a metric's buckets over ranges and windows and debiases
each kind: a boolean's share of yes, a numeric metric's mean in its units, a categorical or
histogram metric's per-category shares (``deniable.analysis.categorical``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

from deniable.analysis.categorical import (CategoryEstimates, category_arrays,
                                           estimate_categories, from_arrays)
from deniable.analysis.debias import (Estimates, debias, numeric_range, scale_estimate,
                                      scale_estimates, slot_channel)
from deniable.analysis.sources import MetricCounts, MetricInfo
from deniable.analysis.window import estimand, period_ids
from deniable.client.mechanism import Estimate
from deniable.client.period import DEFAULT_POLICY

__all__ = ["Estimates", "MetricSummary", "Window", "debias", "debias_values", "is_categorical",
           "numeric_range", "scale_estimate", "scale_estimates", "slot_channel", "summarize",
           "summarize_windows", "window_categories", "window_estimate", "window_totals",
           "window_values"]
"""``Estimates``, ``debias`` and the scaling helpers live in ``deniable.analysis.debias``;
they are named here too, where callers have always found them."""


@dataclass(frozen=True)
class MetricSummary:
    """One metric's estimate over a whole range: every bucket's reports pooled.

    What to read, by kind: a boolean metric's share of yes and a numeric metric's mean (in its
    units) are ``estimate``, ``ci_low`` and ``ci_high``; a categorical or histogram metric has
    no single estimate (those fields are NaN): read ``shares`` (category -> share) or
    ``categories`` (shares with both kinds of interval).
    """

    metric: str
    description: str
    mechanism: str
    epsilon: float
    n: int
    ones: int
    yes_rate: float
    estimate: float
    unclipped: float
    stderr: float
    ci_low: float
    ci_high: float
    confidence: float
    clipped: bool
    wide: bool
    interval_clipped: bool = False
    periods: int = 1
    design_effect: float = 1.0
    policy: str = DEFAULT_POLICY.summary()
    estimand: str = ""
    version: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    kind: str = "boolean"
    lower: float | None = None
    upper: float | None = None
    categories: CategoryEstimates | None = None
    """Categorical and histogram metrics: the per-category shares (the scalar estimate fields
    are then NaN). Numeric metrics: the estimate fields are the mean, in [lower, upper]."""

    @property
    def shares(self) -> dict[str, float]:
        """A categorical or histogram metric's unbiased share per category (or bucket), in
        label order; each may fall slightly outside [0, 1] (``categories`` has the
        intervals).

        Raises:
            ValueError: a boolean or numeric metric, whose one figure is ``estimate``.
        """
        if self.categories is None:
            raise ValueError(
                f"{self.metric} is a {self.kind} metric: it has one estimate, not shares per "
                f"category. Read summary.estimate (with ci_low and ci_high) instead.")
        return dict(zip(self.categories.labels, map(float, self.categories.value)))


def is_categorical(metric: MetricInfo) -> bool:
    """A categorical or histogram metric: one counter per category."""
    return metric.spec.kind_object.per_category


def debias_values(metric: MetricInfo, values: NDArray[np.int64], confidence: float = 0.95,
                  periods: NDArray[np.int64] | None = None
                  ) -> tuple[Estimates, Estimates | None]:
    """Debias counter slots of any kind, bucket by bucket: (estimates, simultaneous).

    Boolean: the share of yes, shape (buckets,). Numeric: the mean in the metric's units,
    shape (buckets,). Categorical and histogram: per-category shares, shape (buckets, d), and
    the simultaneous (Bonferroni) intervals in the second ``Estimates`` (None otherwise).

    Args:
        values: counter slots, shape (buckets, width); slot 0 is n.
        periods: reporting periods pooled per bucket, shape (buckets,).
    """
    values = np.asarray(values, dtype=np.int64).reshape(-1, metric.mechanism.width)
    if is_categorical(metric):
        return category_arrays(values, metric.mechanism, confidence, policy=metric.policy,
                               periods=periods)
    e = debias(slot_channel(metric.mechanism), values[:, 1], values[:, 0], confidence,
               policy=metric.policy, periods=periods)
    scale = metric.spec.kind_object.scale(metric.spec)
    if scale is not None:
        e = scale_estimates(e, *scale)
    return e, None


def summarize(counts: MetricCounts, confidence: float = 0.95, *,
              start: datetime | None = None, end: datetime | None = None) -> MetricSummary:
    """Pool a metric's buckets and debias the total, with the window interval of the
    metric's collection policy over the reporting periods that have reports.

    Boolean: the share of yes; numeric: the mean (in its units, ``lower``/``upper`` set);
    categorical and histogram: ``categories`` (per-category shares, both kinds of interval).
    ``start`` and ``end`` name the range the counts cover, for the outputs."""
    return summarize_windows(counts, (), confidence, start=start, end=end)[0]


Window = tuple[datetime | None, datetime | None]
"""A [start, end) of hour buckets by their start (None: unbounded)."""


def summarize_windows(counts: MetricCounts, windows: Sequence[Window],
                      confidence: float = 0.95, *, start: datetime | None = None,
                      end: datetime | None = None
                      ) -> tuple[MetricSummary, list[Estimate | CategoryEstimates]]:
    """``summarize(counts)`` and the estimate over each of ``windows`` (the hour buckets
    that start in [start, end), None unbounded) from one debiasing of all their sums: the
    same numbers as ``summarize``, ``window_estimate`` and ``window_categories`` each give
    (the estimators are element-wise), for a report's whole range and its two halves.

    Returns:
        (the summary, per window an ``Estimate``, or ``CategoryEstimates`` for a categorical
        or histogram metric).
    """
    metric = counts.metric
    totals, periods = window_totals(counts, [(None, None), *windows])
    e, simultaneous = debias_values(metric, totals, confidence, periods)
    if is_categorical(metric):
        assert simultaneous is not None
        found: list[Estimate | CategoryEstimates] = [
            from_arrays(metric.spec.labels, totals, e, simultaneous, i, metric.mechanism,
                        int(periods[i])) for i in range(len(totals))]
        deff = found[0].design_effect  # type: ignore[union-attr]
    else:
        found = [_estimate(e, i) for i in range(len(totals))]
        deff = float(e.design_effect[0])  # type: ignore[index]
    return (_summary(metric, found[0], int(periods[0]), deff, confidence, start, end),
            found[1:])


def _estimate(e: Estimates, i: int) -> Estimate:
    """Row ``i`` of a boolean or numeric ``Estimates`` as an ``Estimate``."""
    return Estimate(n=int(e.n[i]), ones=int(e.ones[i]), yes_rate=float(e.yes_rate[i]),
                    value=float(e.estimate[i]), unclipped=float(e.unclipped[i]),
                    stderr=float(e.stderr[i]), ci_low=float(e.ci_low[i]),
                    ci_high=float(e.ci_high[i]), confidence=e.confidence,
                    clipped=bool(e.clipped[i]), wide=bool(e.wide[i]),
                    interval_clipped=bool(e.interval_clipped[i]))  # type: ignore[index]


def _summary(metric: MetricInfo, found: Estimate | CategoryEstimates, periods: int,
             design_effect: float, confidence: float, start: datetime | None,
             end: datetime | None) -> MetricSummary:
    """The MetricSummary of a metric's pooled estimate over ``periods`` periods."""
    mechanism = metric.mechanism
    policy = metric.policy
    common = dict(metric=metric.name, description=metric.description, mechanism=mechanism.id,
                  epsilon=mechanism.epsilon, confidence=confidence, periods=periods,
                  policy=policy.summary(), estimand=estimand(policy, periods, kind=metric.kind),
                  version=metric.version, start=start, end=end, kind=metric.kind)
    if not isinstance(found, Estimate):
        n = found.n
        nan = float("nan")
        return MetricSummary(
            n=n, ones=0, yes_rate=nan, estimate=nan, unclipped=nan, stderr=nan,
            ci_low=nan, ci_high=nan, clipped=False,
            wide=bool(n and np.max(found.ci_high - found.ci_low) >= 0.5),
            interval_clipped=False, design_effect=design_effect, categories=found,
            **common)  # type: ignore[arg-type]
    lower, upper = metric.spec.kind_object.scale(metric.spec) or (None, None)
    return MetricSummary(
        n=found.n, ones=found.ones, yes_rate=found.yes_rate, estimate=found.value,
        unclipped=found.unclipped, stderr=found.stderr, ci_low=found.ci_low,
        ci_high=found.ci_high, clipped=found.clipped, wide=found.wide,
        interval_clipped=found.interval_clipped, design_effect=design_effect, lower=lower, upper=upper, **common)  # type: ignore[arg-type]


def window_totals(counts: MetricCounts, windows: Sequence[Window]
                  ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(summed counter slots, shape (windows, width); reporting periods with reports, at
    least 1, shape (windows,)) over the hour buckets that start in each [start, end) of
    ``windows`` (None: unbounded). The buckets' periods are numbered once, and each window
    is a slice of them: hours are sorted, so their period numbers are too."""
    busy = np.flatnonzero(counts.n > 0)
    ids = period_ids(counts.hours[busy], counts.metric.policy)
    # begun[k]: the periods that begin among the first k busy buckets.
    begins = np.ones(ids.size, dtype=bool)
    begins[1:] = ids[1:] != ids[:-1]
    begun = np.concatenate(([0], np.cumsum(begins)))
    totals = np.zeros((len(windows), counts.width), np.int64)
    periods = np.ones(len(windows), np.int64)
    for i, (start, end) in enumerate(windows):
        within = counts.between(start, end)
        totals[i] = counts.values[within].sum(axis=0, dtype=np.int64)
        lo, hi = np.searchsorted(busy, (within.start, within.stop))
        if hi > lo:  # the periods begun in the window, and the one it starts inside of
            periods[i] = begun[hi] - begun[lo] + (0 if begins[lo] else 1)
    return totals, periods


def window_values(counts: MetricCounts, start: datetime | None = None,
                  end: datetime | None = None) -> tuple[NDArray[np.int64], int]:
    """(summed counter slots of shape (width,), reporting periods with reports) over the hour
    buckets that start in [start, end) (all by default)."""
    totals, periods = window_totals(counts, [(start, end)])
    return totals[0], int(periods[0])


def window_estimate(counts: MetricCounts, start: datetime | None = None,
                    end: datetime | None = None, confidence: float = 0.95) -> Estimate:
    """One metric's estimate over the hour buckets that start in [start, end) (all by
    default), with the window interval and stderr of its collection policy, as an
    ``Estimate`` (what comparisons take): the share of yes, or a numeric metric's mean in its
    units. Categorical metrics: ``window_categories``."""
    if is_categorical(counts.metric):
        raise ValueError(f"{counts.metric.name} is {counts.metric.kind}: use window_categories")
    total, periods = window_values(counts, start, end)
    e, _ = debias_values(counts.metric, total.reshape(1, -1), confidence, np.array([periods]))
    return Estimate(n=int(e.n[0]), ones=int(e.ones[0]), yes_rate=float(e.yes_rate[0]),
                    value=float(e.estimate[0]), unclipped=float(e.unclipped[0]),
                    stderr=float(e.stderr[0]), ci_low=float(e.ci_low[0]),
                    ci_high=float(e.ci_high[0]), confidence=confidence,
                    clipped=bool(e.clipped[0]), wide=bool(e.wide[0]),
                    interval_clipped=bool(e.interval_clipped[0]))  # type: ignore[index]


def window_categories(counts: MetricCounts, start: datetime | None = None,
                      end: datetime | None = None,
                      confidence: float = 0.95) -> CategoryEstimates:
    """A categorical metric's per-category shares over the hour buckets that start in
    [start, end), with the window interval of its collection policy."""
    total, periods = window_values(counts, start, end)
    metric = counts.metric
    return estimate_categories(total, metric.mechanism, metric.spec.labels, confidence,
                               policy=metric.policy, periods=periods)
