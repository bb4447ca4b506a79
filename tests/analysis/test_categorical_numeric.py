"""Categorical and numeric estimators: the maths against hand-computed values, unbiasedness in
exact expectation, and seeded sampling checks stated in standard errors."""
from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from deniable.analysis.categorical import estimate_categories, project_to_simplex
from deniable.analysis.numeric import estimate_mean
from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding, domain_tag
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds import MetricSpec
from deniable.client.numeric import BitMean

ABC = ["a", "b", "c"]
GRR3 = KaryRandomizedResponse(3, Fraction(1, 2), domain_tag(ABC))  # q = 1/4, P1 - Q = 1/4
OUE4 = UnaryEncoding(4, Fraction(1, 4), domain_tag(list("wxyz")))  # P1 = 1/2, Q = 1/4
BM = BitMean(Fraction(1, 4), Fraction(0), Fraction(100))            # P1 - Q = 1/2 on s


def wilson(rate: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval, written out by hand for the tests."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_grr_shares_match_hand_computed_values() -> None:
    # n = 1000; a: 500 (rate 1/2), b and c: 250 (rate 1/4 = Q).
    e = estimate_categories([1000, 500, 250, 250], GRR3, ABC)
    # f = (c/n - Q) / (P1 - Q): a (0.5 - 0.25) / 0.25 = 1, b = c = 0.
    assert e.value.tolist() == pytest.approx([1.0, 0.0, 0.0], abs=1e-12)
    # SE = sqrt(r (1 - r) / n) / (P1 - Q): a sqrt(0.25 / 1000) / 0.25, b sqrt(0.1875 / 1000) / 0.25
    assert e.stderr[0] == pytest.approx(math.sqrt(0.25 / 1000) / 0.25)
    assert e.stderr[1] == pytest.approx(math.sqrt(0.1875 / 1000) / 0.25)
    assert e.n == 1000 and e.counts.tolist() == [500, 250, 250]
    # Per-category interval: Wilson on the rate at z(0.975), mapped through the line, clipped.
    low, high = wilson(0.25, 1000, NormalDist().inv_cdf(0.975))
    assert e.ci_low[1] == pytest.approx(max(0.0, (low - 0.25) / 0.25))
    assert e.ci_high[1] == pytest.approx((high - 0.25) / 0.25)
    # Simultaneous: the same at 1 - 0.05 / 3 per category (Bonferroni over d = 3).
    low, high = wilson(0.25, 1000, NormalDist().inv_cdf(1 - 0.05 / 6))
    assert e.sim_high[1] == pytest.approx((high - 0.25) / 0.25)
    assert e.sim_high[1] > e.ci_high[1] and e.simultaneous_confidence == pytest.approx(1 - 0.05 / 3)
    assert "per-category 95%" in e.interval_note and "simultaneous 95%" in e.interval_note


def test_oue_shares_match_hand_computed_values() -> None:
    # n = 800; w's bit set 400 times (rate 1/2 = P1), x: 300 (rate 3/8), y, z: 200 (rate 1/4 = Q).
    e = estimate_categories([800, 400, 300, 200, 200], OUE4, list("wxyz"))
    assert e.value.tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0], abs=1e-12)
    assert e.stderr[0] == pytest.approx(math.sqrt(0.25 / 800) / 0.25)        # 0.0707107
    assert e.stderr[1] == pytest.approx(math.sqrt(0.375 * 0.625 / 800) / 0.25)


@pytest.mark.parametrize("mechanism", [GRR3, KaryRandomizedResponse(3, Fraction(9, 10), "00000000"),
                                       UnaryEncoding(3, Fraction(1, 7), "00000000")])
def test_expected_counts_give_the_true_shares_back(mechanism) -> None:  # type: ignore[no-untyped-def]
    shares = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    p1, q = mechanism.channel
    rates = [q + f * (p1 - q) for f in shares]
    n = math.lcm(*(r.denominator for r in rates))  # so every expected count is an integer
    counts = [n] + [int(n * r) for r in rates]
    assert all(n * r == c for r, c in zip(rates, counts[1:]))
    e = estimate_categories(counts, mechanism)
    assert e.value.tolist() == pytest.approx([float(f) for f in shares], abs=1e-12)


def test_grr_sampling_lands_within_5_standard_errors_of_the_truth() -> None:
    spec = MetricSpec.build("categorical", epsilon=2.0, categories=list("abcdef"))
    truth = np.array([0.4, 0.25, 0.15, 0.1, 0.07, 0.03])
    p1, q = (float(x) for x in spec.mechanism.channel)
    d, n = 6, 200_000
    rng = np.random.default_rng(12)
    # GRR's report probabilities q + f (p - q) sum to 1 exactly (q (d - 1) + p = 1).
    assert (q + truth * (p1 - q)).sum() == pytest.approx(1.0)
    reported = rng.multinomial(n, q + truth * (p1 - q))
    e = estimate_categories(np.r_[n, reported], spec.mechanism, spec.labels)
    assert np.all(np.abs(e.value - truth) < 5 * e.stderr)
    assert d == e.d


@pytest.mark.slow
def test_interval_coverage_per_category_and_simultaneous() -> None:
    """Over 4000 seeded populations: each per-category interval covers its share about 95%
    of the time; the simultaneous ones cover all six shares at once at least 95% of the time.
    Bounds are 5 binomial SEs, so a seeded run is far from them."""
    spec = MetricSpec.build("categorical", epsilon=1.0, categories=list("abcdef"))
    truth = np.array([0.3, 0.25, 0.2, 0.15, 0.07, 0.03])
    p1, q = (float(x) for x in spec.mechanism.channel)
    rng = np.random.default_rng(7)
    trials, n = 4000, 20_000
    marginal = np.zeros(6)
    together = 0
    for _ in range(trials):
        counts = rng.multinomial(n, q + truth * (p1 - q))
        e = estimate_categories(np.r_[n, counts], spec.mechanism, spec.labels)
        marginal += (e.ci_low <= truth) & (truth <= e.ci_high)
        together += bool(np.all((e.sim_low <= truth) & (truth <= e.sim_high)))
    se = math.sqrt(0.95 * 0.05 / trials)
    assert np.all(np.abs(marginal / trials - 0.95) < 5 * se)
    assert together / trials > 0.95 - 5 * se


def test_projection_onto_the_simplex_is_the_hand_computed_one_and_never_the_default() -> None:
    # [0.6, 0.5, -0.1]: rho = 2, theta = (0.6 + 0.5 - 1) / 2 = 0.05 -> [0.55, 0.45, 0].
    assert project_to_simplex([0.6, 0.5, -0.1]).tolist() == pytest.approx([0.55, 0.45, 0.0])
    assert project_to_simplex([0.2, 0.3, 0.5]).tolist() == pytest.approx([0.2, 0.3, 0.5])
    e = estimate_categories([1000, 140, 260, 600], GRR3, ABC)
    assert e.value.min() < 0                        # the unbiased estimate, left alone
    projected = e.project_to_simplex()
    assert projected.min() >= 0 and projected.sum() == pytest.approx(1.0)
    rows = e.rows()
    assert "projected_biased" not in rows[0]       # only on request
    assert e.rows(projected=True)[0]["projected_biased"] == pytest.approx(projected[0])


def test_bad_counts_are_refused() -> None:
    with pytest.raises(InvalidParameterError):
        estimate_categories([10, 11, 0, 0], GRR3, ABC)     # a count above n
    with pytest.raises(InvalidParameterError):
        estimate_categories([10, 1, 0], GRR3, ABC)         # width 3 for d = 3
    with pytest.raises(InvalidParameterError):
        estimate_categories([10, 1, 0, 0], GRR3, ["a", "b"])


def test_mean_matches_hand_computed_values() -> None:
    # a = 1/4 on [0, 100]; n = 1000, ones = 500: s = (0.5 - 0.25) / 0.5 = 0.5, mean 50.
    m = estimate_mean(1000, 500, BM)
    assert m.mean == pytest.approx(50.0)
    # SE = (upper - lower) sqrt(r (1 - r) / n) / (1 - 2a) = 100 sqrt(0.25 / 1000) / 0.5
    assert m.stderr == pytest.approx(100 * math.sqrt(0.25 / 1000) / 0.5)   # 3.1623
    low, high = wilson(0.5, 1000, NormalDist().inv_cdf(0.975))
    assert (m.ci_low, m.ci_high) == pytest.approx((100 * (low - 0.25) / 0.5,
                                                  100 * (high - 0.25) / 0.5))
    assert m.total == pytest.approx(50_000.0)
    assert (m.total_low, m.total_high) == pytest.approx((1000 * m.ci_low, 1000 * m.ci_high))
    # ones = 300: s = (0.3 - 0.25) / 0.5 = 0.1 -> mean 10 (negative lower bound works too).
    shifted = BitMean(Fraction(1, 4), Fraction(-50), Fraction(50))
    assert estimate_mean(1000, 300, shifted).mean == pytest.approx(-40.0)


def test_mean_sampling_lands_within_5_standard_errors() -> None:
    spec = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000)
    mechanism = spec.mechanism
    rng = np.random.default_rng(3)
    values = rng.gamma(2.0, 400.0, size=100_000).clip(0, 5000)
    a = float(mechanism.a)
    p_one = a + (1 - 2 * a) * values / 5000
    ones = int((rng.random(values.size) < p_one).sum())
    m = estimate_mean(values.size, ones, mechanism)
    assert abs(m.mean - values.mean()) < 5 * m.stderr
    assert m.ci_low < values.mean() < m.ci_high


def test_estimate_mean_needs_a_bitmean() -> None:
    with pytest.raises(InvalidParameterError):
        estimate_mean(10, 5, GRR3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        estimate_mean(10, 11, BM)
