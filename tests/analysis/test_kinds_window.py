"""Honest intervals for categorical and numeric metrics over windows of several periods.

A memoized device sends the same perturbed report every period, so seven days of its reports
are one noisy draw, not seven. The window interval (design effect, ``deniable.analysis.window``)
must still cover the share of devices in each category, or the devices' mean; counting the
days as independent reports must not.

Each simulated device's permanent answer is drawn with numpy from the distribution the client's
``memo.memo_value`` follows over device secrets: the mechanism's own exact channel (GRR keeps
the category with p, else each other with q; OUE sets the true bit with p, each other with q),
and for a number α-point rounding to the grid under a uniform α, then a 1BitMean bit at the grid
point. ``tests/client/test_memo_kinds.py`` proves ``memo_value`` follows exactly these over
20,000 secrets (and ``test_alpha_point_rounding_is_unbiased_over_devices`` the rounding), so
drawing them here in numpy (instead of 360,000 HMACs per test) tests the same property.

False failures: each coverage share is a mean of 500 independent trials. At the nominal 95 %
one standard error is 0.97 points, so 0.89 lies over 6 below (below 1e-9 per cell); the naive
interval covers about half the time (seven copies of one draw: sqrt(7) too narrow), so 0.8
lies over 10 standard errors above it. Seeded, so a run is also reproducible."""
from __future__ import annotations


import numpy as np
import pytest

from deniable.analysis.categorical import estimate_categories
from deniable.analysis.numeric import estimate_mean
from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding, domain_tag
from deniable.client.kinds import MetricSpec
from deniable.client.memo import DEFAULT_GRID
from deniable.client.numeric import BitMean
from deniable.client.period import CollectionPolicy

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

MEMO = CollectionPolicy("memoized")
LABELS = ["android", "ios", "linux", "macos", "windows", "other"]
SHARES = np.array([0.35, 0.25, 0.05, 0.1, 0.2, 0.05])
PERIODS, DEVICES = 7, 600


def _window(values: np.ndarray, answer_rows: np.ndarray, rng: np.random.Generator,
            replaced: bool) -> tuple[np.ndarray, np.ndarray]:
    """The summed answer rows of a 7-period window and the mean true value over its reports.
    ``values`` and ``answer_rows`` are per device; the first DEVICES report in period 0 and,
    with ``replaced``, half of the reporters are new devices in each later period."""
    active = np.arange(DEVICES)
    fresh, counts, truth = DEVICES, 0, 0
    for period in range(PERIODS):
        if replaced and period:
            active = active.copy()
            active[rng.choice(DEVICES, DEVICES // 2, replace=False)] = \
                np.arange(fresh, fresh + DEVICES // 2)
            fresh += DEVICES // 2
        counts = counts + answer_rows[active].sum(axis=0)
        truth = truth + values[active].sum(axis=0)
    return counts, truth / (PERIODS * DEVICES)


def _population(replaced: bool) -> int:
    return DEVICES + (PERIODS - 1) * (DEVICES // 2) if replaced else DEVICES


TRIALS = 500


def memo_rows(mechanism: KaryRandomizedResponse | UnaryEncoding, true: np.ndarray,
              rng: np.random.Generator) -> np.ndarray:
    """Each device's permanent answer as its counter row (n, then per category), drawn from
    the mechanism's channel (P1 for the true category, P0 for each other), as ``memo_value``
    follows it over device secrets; ``true`` holds the devices' category indexes."""
    d, (p1, p0) = mechanism.d, (float(x) for x in mechanism.channel)
    own = np.eye(d, dtype=bool)[true]
    if isinstance(mechanism, KaryRandomizedResponse):  # one category: the true one, or another
        keep = rng.random(len(true)) < p1 / (p1 + (d - 1) * p0)
        other = rng.integers(0, d - 1, len(true))
        answer = np.where(keep, true, other + (other >= true))
        chosen = np.eye(d, dtype=np.int64)[answer]
    else:  # unary encoding: each bit on its own
        chosen = (rng.random((len(true), d)) < np.where(own, p1, p0)).astype(np.int64)
    return np.hstack([np.ones((len(true), 1), dtype=np.int64), chosen])


def memo_bits(mechanism: BitMean, true: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each device's permanent 1BitMean bit for a number in [lower, upper]: α-point rounding
    of its position on the DEFAULT_GRID under a uniform α, then 1 with probability p_one of
    the grid point's value (``memo_key`` then ``memo_answer``, as over device secrets)."""
    lower, upper, a = float(mechanism.lower), float(mechanism.upper), float(mechanism.a)
    position = (true - lower) / (upper - lower) * DEFAULT_GRID
    point = np.floor(position) + (position - np.floor(position) > rng.random(len(true)))
    p_one = a + (1 - 2 * a) * point / DEFAULT_GRID
    return (rng.random(len(true)) < p_one).astype(np.int64)


@pytest.mark.parametrize("family", [KaryRandomizedResponse, UnaryEncoding])
@pytest.mark.parametrize("replaced", [False, True], ids=["same devices", "half replaced"])
def test_memoized_categorical_windows_cover_the_device_shares(family: type, replaced: bool
                                                              ) -> None:
    mechanism = family.from_epsilon(1.0, len(LABELS), domain_tag(LABELS))
    rng = np.random.default_rng(20261123 + replaced)
    covered = np.zeros(len(LABELS))
    naive_covered = np.zeros(len(LABELS))
    for _ in range(TRIALS):
        true = rng.choice(len(LABELS), size=_population(replaced), p=SHARES)
        rows = memo_rows(mechanism, true, rng)
        counts, target = _window(np.eye(len(LABELS))[true], rows, rng, replaced)
        honest = estimate_categories(counts, mechanism, LABELS, policy=MEMO, periods=PERIODS)
        naive = estimate_categories(counts, mechanism, LABELS)
        covered += (honest.ci_low <= target) & (target <= honest.ci_high)
        naive_covered += (naive.ci_low <= target) & (target <= naive.ci_high)
    assert (covered / TRIALS >= 0.89).all(), covered / TRIALS
    if not replaced:  # seven copies of one draw are not seven draws
        assert (naive_covered / TRIALS < 0.8).all(), naive_covered / TRIALS


@pytest.mark.parametrize("replaced", [False, True], ids=["same devices", "half replaced"])
def test_memoized_numeric_windows_cover_the_devices_mean(replaced: bool) -> None:
    mechanism = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=100).mechanism
    assert isinstance(mechanism, BitMean)
    rng = np.random.default_rng(20261124 + replaced)
    covered, naive_covered = 0, 0
    for _ in range(TRIALS):
        # Startup times in ms: most near 20, a tail near 80, not on the rounding grid.
        population = _population(replaced)
        true = np.where(rng.random(population) < 0.8, rng.normal(20, 5, population),
                        rng.normal(80, 10, population)).clip(0, 100)
        bits = memo_bits(mechanism, true, rng)
        ones, target = _window(true, bits, rng, replaced)
        n = PERIODS * DEVICES
        honest = estimate_mean(n, int(ones), mechanism, policy=MEMO, periods=PERIODS)
        naive = estimate_mean(n, int(ones), mechanism)
        covered += honest.ci_low <= target <= honest.ci_high
        naive_covered += naive.ci_low <= target <= naive.ci_high
    assert covered / TRIALS >= 0.89, covered / TRIALS  # the α-point rounding included
    if not replaced:
        assert naive_covered / TRIALS < 0.8, naive_covered / TRIALS
