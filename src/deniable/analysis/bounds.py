"""Exact binomial confidence bounds, empirical epsilon lower bounds, chi-square tail
probabilities and Welch's t: the statistics behind ``deniable audit``.

Pure Python (no numpy or scipy): the regularized incomplete beta function by Lentz's
continued fraction, inverted by bisection; the regularized incomplete gamma function by its
series and continued fraction. Accurate to about 1e-12 in probability, which is
far below the sampling error of any audit.

    clopper_pearson(750_000, 1_000_000)           # (0.7491..., 0.7508...), 95% two-sided
    epsilon_lower_bound({"1": 750_000}, 1_000_000, {"1": 250_000}, 1_000_000)
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CF_MAX_ITER = 100_000
_BISECT_STEPS = 200
_BISECT_TOLERANCE = 1e-13


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) (Numerical Recipes' betacf, modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, _nonzero(1.0 - qab * x / qap)
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAX_ITER):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 / _nonzero(1.0 + aa * d)
            c = _nonzero(1.0 + aa / c)
            h *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def _nonzero(value: float) -> float:
    return value if abs(value) > _CF_TINY else _CF_TINY


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and x in [0, 1]."""
    if not (a > 0 and b > 0):
        raise ValueError(f"a and b must be above 0. Got {a} and {b} instead.")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The q-quantile of the Beta(a, b) distribution, by bisection on ``betainc``."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1]. Got {q} instead.")
    low, high = 0.0, 1.0
    for _ in range(_BISECT_STEPS):
        mid = (low + high) / 2
        if high - low < _BISECT_TOLERANCE or mid in (low, high):
            break
        if betainc(a, b, mid) < q:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95,
                    sides: int = 2) -> tuple[float, float]:
    """The exact (Clopper-Pearson) confidence interval for a binomial proportion.

    Args:
        successes: k, in [0, trials].
        trials: n >= 1.
        confidence: coverage of the interval.
        sides: 2 for a two-sided interval; 1 makes each bound a one-sided bound at
            ``confidence`` on its own (alpha is not halved).

    Returns:
        (lower, upper), each in [0, 1].
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, trials >= 1. "
                         f"Got {successes} of {trials} instead.")
    if not 0 < confidence < 1 or sides not in (1, 2):
        raise ValueError(f"confidence must lie in (0, 1) and sides be 1 or 2. "
                         f"Got {confidence} and {sides} instead.")
    alpha = (1 - confidence) / sides
    lower = 0.0 if successes == 0 else beta_quantile(alpha, successes, trials - successes + 1)
    upper = 1.0 if successes == trials else beta_quantile(1 - alpha, successes + 1,
                                                           trials - successes)
    return lower, upper


@dataclass(frozen=True)
class EpsilonBound:
    """A 95% (or ``confidence``) lower bound on epsilon from samples of two neighbours.

    Attributes:
        epsilon: the lower bound in nats (0 when no event distinguishes the two at all).
        event: the output event that gave it, e.g. ``"ones>=3"``.
        numerator / denominator: the one-sided bounds whose log-ratio is ``epsilon``: a
            lower bound on P(event | one input) and an upper bound on P(event | the other).
        comparisons: how many (event, direction) pairs were tried (Bonferroni-corrected).
    """

    epsilon: float
    event: str
    numerator: float
    denominator: float
    comparisons: int


def epsilon_lower_bound(counts_a: Mapping[str, int], n_a: int,
                        counts_b: Mapping[str, int], n_b: int,
                        confidence: float = 0.95) -> EpsilonBound:
    """A lower bound on epsilon that holds with probability >= ``confidence``.

    For every event E (a key of the counts: how often each sample fell in E) and both
    directions, ln(CP_lower(P(E | a)) / CP_upper(P(E | b))) is a lower bound on epsilon
    whenever both one-sided bounds hold. Each bound is taken at (1 - confidence) / (2m) over
    the m (event, direction) pairs, so all hold at once with probability >= ``confidence``
    (Bonferroni), and the largest of them is a valid bound however it was chosen.
    """
    events = sorted(set(counts_a) | set(counts_b))
    if not events:
        raise ValueError("need at least one event")
    comparisons = 2 * len(events)
    one_sided = 1 - (1 - confidence) / (2 * comparisons)
    best = EpsilonBound(0.0, "none", 0.0, 1.0, comparisons)
    for event in events:
        ka, kb = counts_a.get(event, 0), counts_b.get(event, 0)
        a_low, a_high = clopper_pearson(ka, n_a, one_sided, sides=1)
        b_low, b_high = clopper_pearson(kb, n_b, one_sided, sides=1)
        for label, low, high in ((f"{event} (a over b)", a_low, b_high),
                                 (f"{event} (b over a)", b_low, a_high)):
            if low > 0 and high > 0:
                bound = math.log(low / high)
                if bound > best.epsilon:
                    best = EpsilonBound(bound, label, low, high, comparisons)
    return best


def count_events(outcomes: Iterable[int], k: int) -> dict[str, int]:
    """Events over the number of ones in k reports: ``ones=j``, ``ones>=j`` and ``ones<=j``.

    The number of ones is sufficient for reports that are exchangeable given the device
    (memoized, an instantaneous layer, or fresh coins), so these events include the most
    distinguishing one of each such mechanism.
    """
    histogram = [0] * (k + 1)
    for ones in outcomes:
        histogram[ones] += 1
    events: dict[str, int] = {}
    for j in range(k + 1):
        events[f"ones={j}"] = histogram[j]
        if 0 < j:
            events[f"ones>={j}"] = sum(histogram[j:])
        if j < k:
            events[f"ones<={j}"] = sum(histogram[:j + 1])
    return events


@dataclass(frozen=True)
class WelchTest:
    """Welch's unequal-variance t statistic of two samples' means (units of the samples)."""

    t: float
    mean_a: float
    mean_b: float

    @property
    def difference(self) -> float:
        return self.mean_a - self.mean_b


def welch_t(a: list[float], b: list[float]) -> WelchTest:
    """Welch's t for the difference of the means of ``a`` and ``b`` (each >= 2 samples)."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each sample needs at least 2 values")
    mean_a, mean_b = math.fsum(a) / len(a), math.fsum(b) / len(b)
    var_a = math.fsum((x - mean_a) ** 2 for x in a) / (len(a) - 1)
    var_b = math.fsum((x - mean_b) ** 2 for x in b) / (len(b) - 1)
    scale = math.sqrt(var_a / len(a) + var_b / len(b))
    t = 0.0 if scale == 0 else (mean_a - mean_b) / scale
    return WelchTest(t, mean_a, mean_b)


def gammaincc(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x), for a > 0 and x >= 0
    (Numerical Recipes' gammq: the series below a + 1, Lentz's continued fraction above)."""
    if not a > 0 or x < 0:
        raise ValueError(f"need a > 0 and x >= 0. Got a={a}, x={x} instead.")
    if x == 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(_CF_MAX_ITER):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * _CF_EPS:
                return max(0.0, 1.0 - total * math.exp(log_front))
        raise ArithmeticError(f"incomplete gamma series did not converge for a={a}, x={x}")
    b = x + 1.0 - a
    c = 1.0 / _CF_TINY
    d = 1.0 / b
    h = d
    for i in range(1, _CF_MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = 1.0 / _nonzero(an * d + b)
        c = _nonzero(b + an / c)
        h *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return math.exp(log_front) * h
    raise ArithmeticError(f"incomplete gamma fraction did not converge for a={a}, x={x}")


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X chi-square with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"dof must be at least 1. Got {dof} instead.")
    return gammaincc(dof / 2.0, max(0.0, statistic) / 2.0)


@dataclass(frozen=True)
class ChiSquareTest:
    """Pearson's goodness of fit of observed counts to exact expected probabilities.

    Attributes:
        statistic: sum over cells of (observed - expected)^2 / expected.
        dof: cells - 1 (the counts' total is fixed).
        p_value: P(a statistic at least this large) if the probabilities are right.
        worst: the cell farthest from its expectation, and by how many standard errors.
    """

    statistic: float
    dof: int
    p_value: float
    worst: tuple[str, float]


def chi_square_test(observed: Mapping[str, int], expected: Mapping[str, float]) -> ChiSquareTest:
    """Goodness of fit of ``observed`` counts (same keys) to probabilities ``expected``
    (summing to 1). Cells should expect at least 5 counts for the chi-square law to hold."""
    n = sum(observed.values())
    if n < 1 or set(observed) - set(expected) or len(expected) < 2:
        raise ValueError("need counts for at least two cells with known probabilities")
    statistic, worst = 0.0, ("", 0.0)
    for cell, p in expected.items():
        mean = n * p
        k = observed.get(cell, 0)
        statistic += (k - mean) ** 2 / mean
        z = (k - mean) / math.sqrt(mean * (1 - p)) if p < 1 else 0.0
        if abs(z) > abs(worst[1]):
            worst = (cell, z)
    dof = len(expected) - 1
    return ChiSquareTest(statistic, dof, chi_square_sf(statistic, dof), worst)
