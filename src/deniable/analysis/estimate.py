"""Debiasing perturbed counts with numpy: estimates, standard errors and intervals.

The formulas are the mechanism's own (``RandomizedResponse.debias`` and ``.estimate``),
applied to whole arrays of buckets at once: p = (ones / n - Q) / (P1 - Q), with Wilson's score
interval on the perturbed yes-rate mapped through the same line and clipped to [0, 1].

Every kind debiases per counted slot on the same line: each slot after ``n`` (a boolean's
ones, a category's count, 1BitMean's ones) counts with probability P1 when the true value is
that slot's and Q otherwise, ``mechanism.channel``. ``slot_channel`` turns that (P1, Q) into
the randomized response with exactly the same channel, so one estimator (and one window
interval) serves every kind: categorical metrics apply it to each category's column, numeric
ones to the scaled value s = (x - lower) / (upper - lower), then map s back to units.

A bucket that pools T > 1 reporting periods gets the honest window interval of
``deniable.analysis.window``: Wilson's with n / deff reports, deff the design effect of the
metric's collection policy (memoized reports do not average out across periods).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from datetime import datetime

from deniable.client.kinds import Mechanism
from deniable.client.mechanism import Estimate, RandomizedResponse, wilson_interval, z_score
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.analysis.sources import MetricCounts, MetricInfo

if TYPE_CHECKING:
    from deniable.analysis.categorical import CategoryEstimates
from deniable.analysis.window import design_effect, estimand, period_ids
from deniable.core.window import channel_rr

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Estimates:
    """Debiased estimates for a set of buckets; every array has shape (buckets,).

    ``estimate``, ``ci_low`` and ``ci_high`` are clipped to [0, 1]; ``unclipped`` keeps the
    raw unbiased value and ``clipped`` flags where clipping changed it; ``interval_clipped``
    flags where clipping changed a bound of the interval. ``wide`` flags an interval spanning
    half of [0, 1] or more: too few reports to say much. Buckets with n = 0 have NaN
    estimates and the interval [0, 1]. ``periods`` is T, the reporting periods pooled in each
    bucket, and ``design_effect`` the factor by which their reports' variance exceeds that of
    independent reports (1 for one period).
    """

    n: NDArray[np.int64]
    ones: NDArray[np.int64]
    yes_rate: FloatArray
    estimate: FloatArray
    unclipped: FloatArray
    stderr: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray
    clipped: NDArray[np.bool_]
    wide: NDArray[np.bool_]
    confidence: float
    interval_clipped: NDArray[np.bool_] | None = None
    periods: NDArray[np.int64] | None = None
    design_effect: FloatArray | None = None


def debias(mechanism: RandomizedResponse, ones: NDArray[np.int64], n: NDArray[np.int64],
           confidence: float = 0.95, *, policy: CollectionPolicy = DEFAULT_POLICY,
           periods: NDArray[np.int64] | None = None) -> Estimates:
    """Debias ``ones`` perturbed ones out of ``n`` reports, bucket by bucket.

    Args:
        mechanism: the mechanism that perturbed the reports.
        ones: perturbed ones, shape (buckets,).
        n: reports, shape (buckets,).
        confidence: the interval's confidence level.
        policy: how the metric is collected (memoization, period).
        periods: T, the reporting periods each bucket pools, shape (buckets,); 1 by default.
    """
    ones = np.asarray(ones, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if ones.shape != n.shape or np.any(n < 0) or np.any(ones < 0) or np.any(ones > n):
        raise ValueError("need arrays of one shape with 0 <= ones <= n")
    q, spread = _line(mechanism)
    z = z_score(confidence)
    t = np.ones(n.shape, np.int64) if periods is None else np.asarray(periods, np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        nf = n.astype(np.float64)
        rate = ones / nf
        deff = design_effect(mechanism, policy, rate, t)
        n_eff = nf / deff  # Kish's effective number of independent reports
        unclipped = (rate - q) / spread
        stderr = np.sqrt(rate * (1 - rate) / n_eff) / spread
        rate_low, rate_high = wilson_interval(rate, n_eff, z)
        low = (rate_low - q) / spread
        high = (rate_high - q) / spread
    empty = n == 0
    ci_low = np.where(empty, 0.0, np.clip(low, 0.0, 1.0))
    ci_high = np.where(empty, 1.0, np.clip(high, 0.0, 1.0))
    estimate = np.clip(unclipped, 0.0, 1.0)
    return Estimates(
        n=n, ones=ones, yes_rate=rate, estimate=estimate, unclipped=unclipped, stderr=stderr,
        ci_low=ci_low, ci_high=ci_high,
        clipped=~empty & (estimate != unclipped),
        wide=(ci_high - ci_low) >= 0.5, confidence=confidence,
        interval_clipped=~empty & ((ci_low != low) | (ci_high != high)),
        periods=t, design_effect=np.where(empty, np.nan, deff))


def slot_channel(mechanism: Mechanism) -> RandomizedResponse:
    """The randomized response whose (P1, Q) is exactly each counted slot's of ``mechanism``
    (``mechanism.channel``): the mechanism itself for a boolean metric. Its own epsilon is
    that of one slot alone, not the mechanism's: show ``mechanism.epsilon``. One definition,
    ``deniable.core.window.channel_rr``, which the dashboard uses too."""
    return channel_rr(mechanism)


def scale_estimates(e: Estimates, lower: float, upper: float) -> Estimates:
    """Estimates of the scaled value s in [0, 1] (1BitMean's channel) in the metric's units:
    every estimate and bound x becomes lower + (upper - lower) x, the stderr (upper - lower)
    times its own. ``yes_rate`` stays the perturbed rate; clipping is now to [lower, upper]."""
    span = upper - lower
    return dataclasses.replace(
        e, estimate=lower + span * e.estimate, unclipped=lower + span * e.unclipped,
        stderr=span * e.stderr, ci_low=lower + span * e.ci_low, ci_high=lower + span * e.ci_high)


def scale_estimate(e: Estimate, lower: float, upper: float) -> Estimate:
    """``scale_estimates`` for one ``Estimate``."""
    span = upper - lower
    return dataclasses.replace(
        e, value=lower + span * e.value, unclipped=lower + span * e.unclipped,
        stderr=span * e.stderr, ci_low=lower + span * e.ci_low, ci_high=lower + span * e.ci_high)


def numeric_range(mechanism: Mechanism) -> tuple[float, float]:
    """(lower, upper) of a 1BitMean as floats; (0, 1) for any other mechanism."""
    lower, upper = getattr(mechanism, "lower", 0), getattr(mechanism, "upper", 1)
    return float(lower), float(upper)


@functools.lru_cache(maxsize=256)
def _line(mechanism: RandomizedResponse) -> tuple[float, float]:
    """(Q, P1 - Q) as floats, computed once per mechanism (exact Fractions are slow)."""
    return (float(mechanism.p_yes_given_no),
            float(mechanism.p_yes_given_yes - mechanism.p_yes_given_no))


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
    return metric.kind in ("categorical", "histogram")


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
        from deniable.analysis.categorical import category_arrays

        return category_arrays(values, metric.mechanism, confidence, policy=metric.policy,
                               periods=periods)
    e = debias(slot_channel(metric.mechanism), values[:, 1], values[:, 0], confidence,
               policy=metric.policy, periods=periods)
    if metric.kind == "numeric":
        e = scale_estimates(e, *numeric_range(metric.mechanism))
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
        from deniable.analysis.categorical import from_arrays

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
    lower, upper = numeric_range(mechanism) if metric.kind == "numeric" else (None, None)
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
    from deniable.analysis.categorical import estimate_categories

    total, periods = window_values(counts, start, end)
    metric = counts.metric
    return estimate_categories(total, metric.mechanism, metric.spec.labels, confidence,
                               policy=metric.policy, periods=periods)
