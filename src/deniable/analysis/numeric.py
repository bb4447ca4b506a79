"""The population mean of a numeric metric (1BitMean), with its SE, interval and total.

One report is one bit with P(1 | x) = a + (1 - 2a) s, s = (x - lower) / (upper - lower). With
r = ones / n the perturbed rate,

    mean = lower + (upper - lower) (r - a) / (1 - 2a)              unbiased
    Var(mean) = (upper - lower)^2 pi (1 - pi) / (n (1 - 2a)^2),   pi = E[r]

exactly when every value is the mean, and an upper bound otherwise (spread-out values only
lower the variance of their bits): the plug-in SE uses r for pi. The interval is Wilson's on r,
mapped through the same line and clipped to [lower, upper], as for a boolean share. ``total`` is
the sum over the n reports, n * mean, with n times the mean's SE and interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deniable.client.errors import InvalidParameterError
from deniable.client.numeric import BitMean
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.analysis.estimate import debias, numeric_range, scale_estimates, slot_channel


@dataclass(frozen=True)
class MeanEstimate:
    """The estimated mean of a numeric metric over ``n`` reports, in the metric's units.

    Attributes:
        n: reports; ones: perturbed ones among them.
        mean: the unbiased mean (not clipped: may fall outside [lower, upper] by noise).
        stderr: its plug-in standard error.
        ci_low, ci_high: the interval at ``confidence``, clipped to [lower, upper].
        total: the sum over the reports, n * mean; total_low, total_high its interval.
        lower, upper: the declared range; clipped: the mean fell outside it.
    """

    n: int
    ones: int
    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    total: float
    total_low: float
    total_high: float
    confidence: float
    lower: float
    upper: float
    clipped: bool
    mechanism: str = ""
    epsilon: float = float("nan")
    periods: int = 1
    design_effect: float = 1.0


def estimate_mean(n: int, ones: int, mechanism: BitMean, confidence: float = 0.95, *,
                  policy: CollectionPolicy = DEFAULT_POLICY, periods: int = 1) -> MeanEstimate:
    """The mean behind ``ones`` perturbed ones out of ``n`` 1BitMean reports.

    Raises:
        InvalidParameterError: not a 1BitMean, or not 0 <= ones <= n.
    """
    if not isinstance(mechanism, BitMean):
        raise InvalidParameterError(f"estimate_mean needs a 1BitMean (bm:) mechanism. "
                                    f"Got {getattr(mechanism, 'id', mechanism)!r} instead.")
    if not 0 <= ones <= n:
        raise InvalidParameterError(f"need 0 <= ones <= n. Got ones={ones}, n={n} instead.")
    lower, upper = numeric_range(mechanism)
    e = scale_estimates(debias(slot_channel(mechanism), np.array([ones]), np.array([n]),
                               confidence, policy=policy, periods=np.array([max(periods, 1)])),
                        lower, upper)
    mean = float(e.unclipped[0])
    deff = float(e.design_effect[0]) if e.design_effect is not None and n else 1.0
    return MeanEstimate(
        n=n, ones=ones, mean=mean, stderr=float(e.stderr[0]), ci_low=float(e.ci_low[0]),
        ci_high=float(e.ci_high[0]), total=n * mean, total_low=n * float(e.ci_low[0]),
        total_high=n * float(e.ci_high[0]), confidence=confidence, lower=lower, upper=upper,
        clipped=bool(e.clipped[0]), mechanism=mechanism.id, epsilon=mechanism.epsilon,
        periods=max(periods, 1), design_effect=deff)
