"""95% intervals that hold: coverage measured by simulation, and computed exactly.

Model: n people are a random sample from a population whose true share is p; each reports
through the mechanism. The true yes-count is k ~ Binomial(n, p), and the perturbed ones are
Binomial(k, P1) + Binomial(n - k, Q), i.e. per person exactly what a device does. The interval
is the one analysis uses everywhere (``debias``: Wilson on the perturbed yes-rate, mapped
through the debiasing line and clipped to [0, 1]).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from deniable.analysis.estimate import debias
from deniable.client.mechanism import RandomizedResponse

TRIALS = 10_000  # >= 2,000 required; 10,000 gives a simulation SE of 0.22 points
POINTS = [  # (p, n, epsilon)
    (0.01, 200, 0.5), (0.01, 200, 1.0), (0.01, 200, math.log(3)), (0.01, 200, 2.0),
    (0.01, 1000, 4.0), (0.01, 10_000, 8.0), (0.05, 500, 1.0), (0.3, 50, 1.0),
    (0.5, 200, math.log(3)), (0.9, 2000, 2.0), (0.99, 200, 1.0),
]


def _mechanism(epsilon: float) -> RandomizedResponse:
    return RandomizedResponse.from_epsilon(epsilon)


@pytest.mark.parametrize("p, n, epsilon", POINTS)
def test_simulated_coverage_is_within_93_5_and_96_5_percent(p: float, n: int,
                                                            epsilon: float) -> None:
    rr = _mechanism(epsilon)
    rng = np.random.default_rng(20261122 + n)
    true_yes = rng.binomial(n, p, TRIALS)
    ones = rng.binomial(true_yes, float(rr.p_yes_given_yes)) \
        + rng.binomial(n - true_yes, float(rr.p_yes_given_no))
    e = debias(rr, ones, np.full(TRIALS, n))
    coverage = np.mean((e.ci_low <= p) & (p <= e.ci_high))
    assert 0.935 <= coverage <= 0.965, f"coverage {coverage:.4f} at p={p}, n={n}, eps={epsilon}"


def _binomial_pmf(n: int, r: float) -> np.ndarray:
    k = np.arange(n + 1)
    log = (np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                     for i in k]) + k * math.log(r) + (n - k) * math.log1p(-r))
    return np.exp(log)


@pytest.mark.slow
@pytest.mark.parametrize("n", [200, 1000])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, math.log(3), 2.0, 4.0])
def test_exact_coverage_stays_in_the_band_up_to_epsilon_4(n: int, epsilon: float) -> None:
    # Exact: sum the binomial probabilities of every count whose interval holds p, over a grid
    # of p in [0.005, 0.995]. Measured minimum 93.95% (eps 2 and 4, n = 200). Near the edges
    # (a perturbed count of a few units) Wilson over-covers, up to 97.2% at eps 4, n = 200.
    rr = _mechanism(epsilon)
    coverages = _exact_coverages(rr, n)
    assert min(coverages) >= 0.935
    assert max(coverages) <= (0.965 if epsilon <= 2 else 0.975)
    assert np.mean(coverages) == pytest.approx(0.95, abs=0.002)


def test_exact_coverage_dips_just_below_the_band_at_epsilon_8_and_n_200() -> None:
    # The known weak spot, stated rather than hidden: at epsilon 8 almost no noise is added,
    # so with n = 200 and p near 0.02 the perturbed count is ~4 and Wilson's coverage dips to
    # 93.0%. At n = 1000 it is back in the band.
    rr = _mechanism(8.0)
    assert 0.925 <= min(_exact_coverages(rr, 200)) < 0.935
    assert min(_exact_coverages(rr, 1000)) >= 0.935


def _exact_coverages(rr: RandomizedResponse, n: int) -> list[float]:
    q, p1 = float(rr.p_yes_given_no), float(rr.p_yes_given_yes)
    e = debias(rr, np.arange(n + 1), np.full(n + 1, n))
    coverages = []
    for p in np.linspace(0.005, 0.995, 199):
        pmf = _binomial_pmf(n, q + p * (p1 - q))
        coverages.append(float(pmf[(e.ci_low <= p) & (p <= e.ci_high)].sum()))
    return coverages


def test_with_the_true_count_fixed_the_interval_is_conservative() -> None:
    # For the share among exactly these n reporters (no sampling noise), the interval is wider
    # than it needs to be: it still covers, more often than 95%.
    rr = _mechanism(2.0)
    n, k = 200, 40
    rng = np.random.default_rng(7)
    ones = rng.binomial(k, float(rr.p_yes_given_yes), TRIALS) \
        + rng.binomial(n - k, float(rr.p_yes_given_no), TRIALS)
    e = debias(rr, ones, np.full(TRIALS, n))
    assert np.mean((e.ci_low <= k / n) & (k / n <= e.ci_high)) >= 0.95
