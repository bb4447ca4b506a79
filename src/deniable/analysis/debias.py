"""Debiasing perturbed counts with numpy: the one estimator of ``deniable.core.estimators``
(``debias_line``) applied to whole arrays of buckets at once.

The formulas are the mechanism's own (``RandomizedResponse.debias`` and ``.estimate``):
p = (ones / n - Q) / (P1 - Q), with Wilson's score interval on the perturbed yes-rate mapped
through the same line and clipped to [0, 1]. The collector's dashboard calls the same
function on plain floats, so both show the same numbers.

Every kind debiases per counted slot on the same line: each slot after ``n`` (a boolean's
ones, a category's count, 1BitMean's ones) counts with probability P1 when the true value is
that slot's and Q otherwise, ``mechanism.channel``. ``slot_channel`` turns that (P1, Q) into
the randomized response with exactly the same channel, so one estimator (and one window
interval) serves every kind: categorical metrics apply it to each category's column, numeric
ones to the scaled value s = (x - lower) / (upper - lower), then map s back to units.

A bucket that pools T > 1 reporting periods gets the honest window interval
(``deniable.core.variance``): Wilson's with n / deff reports, deff the design effect of the
metric's collection policy (memoized reports do not average out across periods).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from deniable.client.kinds import Mechanism
from deniable.client.mechanism import Estimate, RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.core.estimators import Debiased, channel_rr, debias_line, scaled

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
    ones, n = checked_counts(ones, n)
    t = np.ones(n.shape, np.int64) if periods is None else np.asarray(periods, np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = debias_line(mechanism, policy, ones, n.astype(np.float64), t, confidence, xp=np)
    return estimates_of(e, ones, n, t, confidence)


def checked_counts(ones: NDArray[np.int64], n: NDArray[np.int64]
                   ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``ones`` and ``n`` as int64 arrays of one shape with 0 <= ones <= n.

    Raises:
        ValueError: counts of different shapes, or out of that range.
    """
    ones = np.asarray(ones, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if ones.shape != n.shape or np.any(n < 0) or np.any(ones < 0) or np.any(ones > n):
        raise ValueError("need arrays of one shape with 0 <= ones <= n")
    return ones, n


def estimates_of(e: Debiased, ones: NDArray[np.int64], n: NDArray[np.int64],
                 periods: NDArray[np.int64], confidence: float) -> Estimates:
    """The ``Estimates`` of ``debias_line``'s arrays for these counts."""
    return Estimates(
        n=n, ones=ones, yes_rate=e.yes_rate, estimate=e.value, unclipped=e.unclipped,
        stderr=e.stderr, ci_low=e.ci_low, ci_high=e.ci_high, clipped=e.clipped, wide=e.wide,
        confidence=confidence, interval_clipped=e.interval_clipped, periods=periods,
        design_effect=e.design_effect)


def slot_channel(mechanism: Mechanism) -> RandomizedResponse:
    """The randomized response whose (P1, Q) is exactly each counted slot's of ``mechanism``
    (``mechanism.channel``): the mechanism itself for a boolean metric. Its own epsilon is
    that of one slot alone, not the mechanism's: show ``mechanism.epsilon``. One definition,
    ``deniable.core.estimators.channel_rr``, which the dashboard uses too."""
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
    """``scale_estimates`` for one ``Estimate`` (``deniable.core.estimators.scaled``)."""
    return scaled(e, lower, upper)


def numeric_range(mechanism: Mechanism) -> tuple[float, float]:
    """(lower, upper) of a 1BitMean as floats; (0, 1) for any other mechanism."""
    lower, upper = getattr(mechanism, "lower", 0), getattr(mechanism, "upper", 1)
    return float(lower), float(upper)
