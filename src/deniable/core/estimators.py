"""THE estimators, one definition each, for the collector's dashboard (on floats) and the
analysis (on numpy arrays, ``xp=numpy``; this package imports no numpy).

- ``debias_line``: every kind's slot on the mechanism's line p = (r - Q) / (P1 - Q), with
  Wilson's interval on the perturbed rate r over n / deff reports (the window interval,
  ``deniable.core.variance``), mapped through the line and clipped to [0, 1]. A boolean's
  share, each category's share and 1BitMean's scaled mean all use it (``channel_rr``).
- ``debias_categories``: a categorical or histogram metric's per-category and simultaneous
  (Bonferroni, ``simultaneous_level``) intervals.
- ``window_estimate``: ``debias_line`` on one bucket, as a ``WindowEstimate``; ``scaled``
  maps 1BitMean's s in [0, 1] to the metric's units.

The collector never imports ``deniable.analysis``; both import this module.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from deniable.client.composition import from_probabilities
from deniable.client.mechanism import Estimate, RandomizedResponse, wilson_interval, z_score
from deniable.client.period import CollectionPolicy
from deniable.core.variance import Scalars, design_effect, line


@dataclass(frozen=True)
class WindowEstimate(Estimate):
    """A window's estimate: ``RandomizedResponse.estimate``'s fields, with n / deff reports
    behind the interval and the standard error (NaN estimates and the interval [0, 1] for
    n = 0), and the periods and design effect that gave them."""

    periods: int = 1
    design_effect: float = 1.0


class Debiased(NamedTuple):
    """The fields of one estimate (floats), or of many (numpy arrays of one shape)."""

    yes_rate: Any
    value: Any
    unclipped: Any
    stderr: Any
    ci_low: Any
    ci_high: Any
    clipped: Any
    wide: Any
    interval_clipped: Any
    design_effect: Any


def debias_line(mechanism: RandomizedResponse, policy: CollectionPolicy, ones: Any, n: Any,
                periods: Any, confidence: float = 0.95, xp: Any = Scalars) -> Debiased:
    """THE estimator of every kind: debias ``ones`` of ``n`` reports pooled over ``periods``
    reporting periods on the mechanism's line p = (r - Q) / (P1 - Q), with Wilson's interval
    on the perturbed rate r over n / deff reports (Kish), mapped through the line.

    ``value`` and the interval are clipped to [0, 1]; ``unclipped`` is the unbiased value.
    Floats by default (n > 0); with ``xp=numpy`` (float n, under ``numpy.errstate``),
    arrays element-wise, where n = 0 gives NaN estimates and the interval [0, 1].
    """
    q, spread = line(mechanism)
    rate = ones / n
    deff = design_effect(mechanism, policy, rate, periods, xp)
    n_eff = n / deff  # Kish's effective number of independent reports
    unclipped = (rate - q) / spread
    stderr = xp.sqrt(rate * (1 - rate) / n_eff) / spread
    low_rate, high_rate = wilson_interval(rate, n_eff, z_score(confidence))
    low, high = (low_rate - q) / spread, (high_rate - q) / spread
    empty = n == 0
    ci_low = xp.where(empty, 0.0, xp.clip(low, 0.0, 1.0))
    ci_high = xp.where(empty, 1.0, xp.clip(high, 0.0, 1.0))
    value = xp.clip(unclipped, 0.0, 1.0)
    return Debiased(
        yes_rate=rate, value=value, unclipped=unclipped, stderr=stderr, ci_low=ci_low,
        ci_high=ci_high, clipped=xp.logical_and(xp.logical_not(empty), value != unclipped),
        wide=(ci_high - ci_low) >= 0.5,
        interval_clipped=xp.logical_and(
            xp.logical_not(empty), xp.logical_or(ci_low != low, ci_high != high)),
        design_effect=xp.where(empty, math.nan, deff))


def window_estimate(mechanism: RandomizedResponse, policy: CollectionPolicy, ones: int, n: int,
                    periods: int, confidence: float = 0.95) -> WindowEstimate:
    """Debias ``ones`` of ``n`` reports pooled over ``periods`` periods, with the window
    interval (``debias_line`` on one bucket)."""
    if n == 0:
        nan = math.nan
        return WindowEstimate(0, 0, nan, nan, nan, nan, 0.0, 1.0, confidence, False, True,
                              False, periods, nan)
    e = debias_line(mechanism, policy, ones, n, periods, confidence)
    return WindowEstimate(
        n=n, ones=ones, yes_rate=e.yes_rate, value=e.value, unclipped=e.unclipped,
        stderr=e.stderr, ci_low=e.ci_low, ci_high=e.ci_high, confidence=confidence,
        clipped=e.clipped, wide=e.wide, interval_clipped=e.interval_clipped, periods=periods,
        design_effect=e.design_effect)


@functools.lru_cache(maxsize=1024)
def channel_rr(mechanism: Any) -> RandomizedResponse:
    """The randomized response whose (P1, Q) is exactly each counted slot's of ``mechanism``
    (``mechanism.channel``; the mechanism itself for a boolean metric). Every kind debiases
    each slot on this one line, so the window maths above serves them all: a category's
    share, or 1BitMean's scaled value s in [0, 1]. Its epsilon is one slot's alone: show the
    mechanism's."""
    if isinstance(mechanism, RandomizedResponse):
        return mechanism
    p1, q = mechanism.channel
    return from_probabilities(p1, q)


def simultaneous_level(confidence: float, d: int) -> float:
    """The per-category confidence level at which all ``d`` categories' intervals hold at
    once with ``confidence`` (Bonferroni): 1 - (1 - confidence) / d."""
    return 1 - (1 - confidence) / d


def debias_categories(mechanism: Any, policy: CollectionPolicy, slots: Any, n: Any,
                      periods: Any, d: int, confidence: float = 0.95,
                      xp: Any = Scalars) -> tuple[Debiased, Debiased]:
    """THE estimator of categorical and histogram metrics: each category's slot debiased on
    the mechanism's channel (``channel_rr``), as (per-category: at ``confidence``;
    simultaneous: at the Bonferroni level over the ``d`` categories, ``simultaneous_level``).

    Floats (one category's count, n > 0) or, with ``xp=numpy``, arrays of any shape, as
    ``debias_line``: the dashboard calls it per category, the analysis on (buckets, d) arrays.
    """
    channel = channel_rr(mechanism)
    return (debias_line(channel, policy, slots, n, periods, confidence, xp),
            debias_line(channel, policy, slots, n, periods, simultaneous_level(confidence, d),
                        xp))


E = TypeVar("E", bound=Estimate)


def scaled(e: E, lower: float, upper: float) -> E:
    """An estimate (a window's, or any ``Estimate``) of 1BitMean's s in [0, 1] in the
    metric's units: every estimate and bound x becomes lower + (upper - lower) x."""
    span = upper - lower
    return dataclasses.replace(
        e, value=lower + span * e.value, unclipped=lower + span * e.unclipped,
        stderr=span * e.stderr, ci_low=lower + span * e.ci_low, ci_high=lower + span * e.ci_high)
