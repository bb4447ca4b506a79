"""The variance of a window's reports, split exactly into what persists across reporting
periods and what is fresh each report; the design effect that follows. Plain Python: pass
``numpy`` as ``xp`` to apply the same definitions to arrays (this package imports no numpy).

Each device sends at most one report per metric per period (its collection policy,
``deniable.client.period``). A window pools the reports of T periods, which are not T * N
independent reports: a memoized device sends the same perturbed bit for the same value every
period, and the same devices' true values answer every period.

Split each report's variance r (1 - r) (r the perturbed yes-rate) exactly into a *persistent*
part, the same for a device in every period (its true value's share of the variance and its
memoized noise), and a *fresh* part, new coins each report (the instantaneous layer, or fresh
coins). With the same devices reporting in every one of the T periods, the pooled rate's
variance is

    Var(r_hat) = (T * persistent + fresh) / n      (n = every report of the window)

that is r (1 - r) / n times the design effect deff = (T * persistent + fresh) / r (1 - r),
which lies in [1, T]. The interval is Wilson's on the perturbed rate with n / deff reports
(Kish's effective sample size), mapped through the debiasing line as for one period
(``deniable.core.estimators``). One period (T = 1) gives deff = 1: the one-period interval,
unchanged.

When devices differ between periods, each device reports in at most T of them, so the true
variance is at most this one: the interval is conservative, and at most sqrt(T) times wider
than needed (when no device reports twice in the window).
"""
from __future__ import annotations

import functools
import math
from typing import Any

from deniable.client.composition import split
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import CollectionPolicy


@functools.lru_cache(maxsize=256)
def line(mechanism: RandomizedResponse) -> tuple[float, float]:
    """(Q, P1 - Q) as floats: the debiasing line p = (r - Q) / (P1 - Q), computed once per
    mechanism (exact Fractions are slow)."""
    return (float(mechanism.p_yes_given_no),
            float(mechanism.p_yes_given_yes - mechanism.p_yes_given_no))


@functools.lru_cache(maxsize=256)
def fresh_coefficients(mechanism: RandomizedResponse,
                       policy: CollectionPolicy) -> tuple[float, float]:
    """(fresh variance of a yes device's report, of a no device's report).

    Memoized: (0, 0). Fresh coins: the whole within-device variance, P1 (1 - P1) and
    Q (1 - Q). With an instantaneous layer I over the memo layer M = split(wire, I):
    E[s(b) (1 - s(b))], s(b) = P(report 1 | memoized bit b) under I.
    """
    if policy.memoization == "memoized":
        return 0.0, 0.0
    if policy.memoization == "fresh":
        p1, q = float(mechanism.p_yes_given_yes), float(mechanism.p_yes_given_no)
        return p1 * (1 - p1), q * (1 - q)
    layer = policy.instantaneous
    assert layer is not None
    memo = split(mechanism, layer)
    s1, s0 = float(layer.p_yes_given_yes), float(layer.p_yes_given_no)
    v1, v0 = s1 * (1 - s1), s0 * (1 - s0)
    m1, m0 = float(memo.p_yes_given_yes), float(memo.p_yes_given_no)
    return m1 * v1 + (1 - m1) * v0, m0 * v1 + (1 - m0) * v0


def fresh_variance(mechanism: RandomizedResponse, policy: CollectionPolicy, share: Any) -> Any:
    """The fresh part of one report's variance, for a true share ``share`` in [0, 1] of yes
    (a float, or a numpy array element-wise): share * yes + (1 - share) * no."""
    yes, no = fresh_coefficients(mechanism, policy)
    return share * yes + (1 - share) * no


class Scalars:
    """The few array operations the window maths needs, on plain floats (pass ``numpy`` as
    ``xp`` instead to apply the same definitions element-wise to arrays)."""

    @staticmethod
    def maximum(a: float, b: float) -> float:
        return max(a, b)

    @staticmethod
    def minimum(a: float, b: float) -> float:
        return min(a, b)

    @staticmethod
    def clip(x: float, low: float, high: float) -> float:
        return min(high, max(low, x))

    @staticmethod
    def nan_to_num(x: float) -> float:
        return 0.0 if x != x else x

    @staticmethod
    def isfinite(x: float) -> bool:
        return math.isfinite(x)

    @staticmethod
    def where(condition: bool, a: float, b: float) -> float:
        return a if condition else b

    @staticmethod
    def sqrt(x: float) -> float:
        return math.sqrt(x)

    @staticmethod
    def logical_and(a: bool, b: bool) -> bool:
        return bool(a and b)

    @staticmethod
    def logical_or(a: bool, b: bool) -> bool:
        return bool(a or b)

    @staticmethod
    def logical_not(a: bool) -> bool:
        return not a


def design_effect(mechanism: RandomizedResponse, policy: CollectionPolicy, rate: Any,
                  periods: Any, xp: Any = Scalars) -> Any:
    """deff = (T * persistent + fresh) / r (1 - r), in [1, T], for a perturbed yes-rate
    ``rate`` (NaN for no reports) pooled over ``periods`` = T reporting periods (0 counts as
    1). A rate of 0 or 1 splits nothing: the most conservative, T.

    Floats by default; with ``xp=numpy``, arrays element-wise (what the analysis does).
    """
    t = xp.maximum(periods * 1.0, 1.0)
    total = rate * (1 - rate)
    q, spread = line(mechanism)
    share = xp.clip(xp.nan_to_num((rate - q) / spread), 0.0, 1.0)
    fresh = xp.minimum(fresh_variance(mechanism, policy, share), total)
    split_ok = xp.isfinite(total) & (total > 0)
    deff = (t * (total - fresh) + fresh) / xp.where(split_ok, total, 1.0)
    return xp.where(split_ok & xp.isfinite(deff), xp.clip(deff, 1.0, t), t)
