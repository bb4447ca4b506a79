"""Honest intervals for categorical and numeric metrics over windows of several periods.

A memoized device sends the same perturbed report every period, so seven days of its reports
are one noisy draw, not seven. The window interval (design effect, ``deniable.analysis.window``)
must still cover the share of devices in each category, or the devices' mean; counting the
days as independent reports must not. Each simulated device has its own secret, and its
answer is derived exactly as the client derives it (``memo.memo_value``: the HMAC-keyed
permanent answer, after α-point rounding for a number)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from deniable.analysis.categorical import estimate_categories
from deniable.analysis.numeric import estimate_mean
from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding, domain_tag
from deniable.client.kinds import MetricSpec
from deniable.client.memo import memo_value, new_secret
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


@pytest.mark.parametrize("family", [KaryRandomizedResponse, UnaryEncoding])
@pytest.mark.parametrize("replaced", [False, True], ids=["same devices", "half replaced"])
def test_memoized_categorical_windows_cover_the_device_shares(family: type, replaced: bool
                                                              ) -> None:
    mechanism = family.from_epsilon(1.0, len(LABELS), domain_tag(LABELS))
    rng = np.random.default_rng(20261123 + replaced)
    trials = 150
    covered = np.zeros(len(LABELS))
    naive_covered = np.zeros(len(LABELS))
    for _ in range(trials):
        true = rng.choice(len(LABELS), size=_population(replaced), p=SHARES)
        rows = np.array([mechanism.counts_of(_payload(mechanism, memo_value(
            new_secret(), "os", mechanism, int(v)))) for v in true], dtype=np.int64)
        counts, target = _window(np.eye(len(LABELS))[true], rows, rng, replaced)
        honest = estimate_categories(counts, mechanism, LABELS, policy=MEMO, periods=PERIODS)
        naive = estimate_categories(counts, mechanism, LABELS)
        covered += (honest.ci_low <= target) & (target <= honest.ci_high)
        naive_covered += (naive.ci_low <= target) & (target <= naive.ci_high)
    # 95 % nominal; at 150 trials one standard error is 1.8 points, so 0.89 is over 3 below.
    assert (covered / trials >= 0.89).all(), covered / trials
    if not replaced:  # seven copies of one draw are not seven draws
        assert (naive_covered / trials < 0.8).all(), naive_covered / trials


def _payload(mechanism: KaryRandomizedResponse | UnaryEncoding, answer: int) -> object:
    return answer if isinstance(mechanism, KaryRandomizedResponse) else \
        mechanism.encode_bits(answer)


@pytest.mark.parametrize("replaced", [False, True], ids=["same devices", "half replaced"])
def test_memoized_numeric_windows_cover_the_devices_mean(replaced: bool) -> None:
    mechanism = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=100).mechanism
    rng = np.random.default_rng(20261124 + replaced)
    trials, covered, naive_covered = 150, 0, 0
    for _ in range(trials):
        # Startup times in ms: most near 20, a tail near 80, not on the rounding grid.
        true = np.where(rng.random(_population(replaced)) < 0.8, rng.normal(20, 5),
                        rng.normal(80, 10)).clip(0, 100)
        bits = np.array([memo_value(new_secret(), "startup_ms", mechanism, Fraction(float(v)))
                         for v in true], dtype=np.int64)
        ones, target = _window(true, bits, rng, replaced)
        n = PERIODS * DEVICES
        honest = estimate_mean(n, int(ones), mechanism, policy=MEMO, periods=PERIODS)
        naive = estimate_mean(n, int(ones), mechanism)
        covered += honest.ci_low <= target <= honest.ci_high
        naive_covered += naive.ci_low <= target <= naive.ci_high
    assert covered / trials >= 0.89, covered / trials  # the α-point rounding included
    if not replaced:
        assert naive_covered / trials < 0.8, naive_covered / trials
