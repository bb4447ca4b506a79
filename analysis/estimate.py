"""Debiasing perturbed counts with numpy: estimates, standard errors and intervals.

The formulas are the mechanism's own (``RandomizedResponse.debias`` and ``.estimate``),
applied to whole arrays of buckets at once: p = (ones / n - Q) / (P1 - Q), with Wilson's score
interval on the perturbed yes-rate mapped through the same line and clipped to [0, 1].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from deniable.client.mechanism import RandomizedResponse, wilson_interval, z_score
from deniable.analysis.sources import MetricCounts

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Estimates:
    """Debiased estimates for a set of buckets; every array has shape (buckets,).

    ``estimate``, ``ci_low`` and ``ci_high`` are clipped to [0, 1]; ``unclipped`` keeps the
    raw unbiased value and ``clipped`` flags where clipping changed it. ``wide`` flags an
    interval spanning half of [0, 1] or more: too few reports to say much. Buckets with n = 0
    have NaN estimates and the interval [0, 1].
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


def debias(mechanism: RandomizedResponse, ones: NDArray[np.int64], n: NDArray[np.int64],
           confidence: float = 0.95) -> Estimates:
    """Debias ``ones`` perturbed ones out of ``n`` reports, bucket by bucket.

    Args:
        mechanism: the mechanism that perturbed the reports.
        ones: perturbed ones, shape (buckets,).
        n: reports, shape (buckets,).
        confidence: the interval's confidence level.
    """
    ones = np.asarray(ones, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if ones.shape != n.shape or np.any(n < 0) or np.any(ones < 0) or np.any(ones > n):
        raise ValueError("need arrays of one shape with 0 <= ones <= n")
    q = float(mechanism.p_yes_given_no)
    spread = float(mechanism.p_yes_given_yes - mechanism.p_yes_given_no)
    z = z_score(confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        nf = n.astype(np.float64)
        rate = ones / nf
        unclipped = (rate - q) / spread
        stderr = np.sqrt(rate * (1 - rate) / nf) / spread
        rate_low, rate_high = wilson_interval(rate, nf, z)
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
        wide=(ci_high - ci_low) >= 0.5, confidence=confidence)


@dataclass(frozen=True)
class MetricSummary:
    """One metric's estimate over a whole range: every bucket's reports pooled."""

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


def summarize(counts: MetricCounts, confidence: float = 0.95) -> MetricSummary:
    """Pool a metric's buckets and debias the total."""
    total = debias(counts.metric.mechanism, np.array([counts.ones.sum()]),
                   np.array([counts.n.sum()]), confidence)
    mechanism = counts.metric.mechanism
    return MetricSummary(
        metric=counts.metric.name, description=counts.metric.description,
        mechanism=mechanism.id, epsilon=mechanism.epsilon,
        n=int(total.n[0]), ones=int(total.ones[0]), yes_rate=float(total.yes_rate[0]),
        estimate=float(total.estimate[0]), unclipped=float(total.unclipped[0]),
        stderr=float(total.stderr[0]), ci_low=float(total.ci_low[0]),
        ci_high=float(total.ci_high[0]), confidence=confidence,
        clipped=bool(total.clipped[0]), wide=bool(total.wide[0]))
