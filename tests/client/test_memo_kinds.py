"""Memoized answers of the kinds beyond boolean, over many device secrets: they follow their
mechanism exactly, and alpha-point rounding is unbiased.

Statistical checks at Z = 6 standard errors (a false failure below 2e-9 per cell).
"""
from __future__ import annotations

import math
import os
import random
from collections import Counter
from fractions import Fraction

import pytest

from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding
from deniable.client.errors import InvalidParameterError
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import (ALPHA_BITS, DEFAULT_GRID, Grid, alpha_threshold, grid_point,
                                  memo_answer, memo_bit, memo_key, memo_value, spend_tag,
                                  value_tag)
from deniable.client.numeric import BitMean

Z = 6.0
SECRETS = [os.urandom(32) for _ in range(20_000)]
GRR = KaryRandomizedResponse(5, Fraction(1, 2), "0123abcd")
OUE = UnaryEncoding(3, Fraction(1, 4), "0123abcd")
BM = BitMean(Fraction(1, 4), Fraction(0), Fraction(100))


def within(count: int, n: int, p: Fraction | float) -> bool:
    p = float(p)
    return abs(count / n - p) <= Z * math.sqrt(p * (1 - p) / n)


def test_memoized_categories_follow_grr_over_devices() -> None:
    answers = Counter(memo_answer(s, "os", GRR, 3) for s in SECRETS)
    for k in range(GRR.d):
        assert within(answers[k], len(SECRETS), GRR.p if k == 3 else GRR.q), (k, answers)


def test_memoized_categories_follow_oue_bit_by_bit_over_devices() -> None:
    answers = Counter(memo_answer(s, "colour", OUE, 1) for s in SECRETS)
    for bits in range(8):
        p = Fraction(1)
        for i in range(3):
            one = OUE.p if i == 1 else OUE.q
            p *= one if bits >> i & 1 else 1 - one
        assert within(answers[bits], len(SECRETS), p), (bits, answers)


@pytest.mark.slow
@pytest.mark.parametrize("point", [0, 7, DEFAULT_GRID])
def test_memoized_grid_points_follow_one_bit_mean_over_devices(point: int) -> None:
    ones = sum(memo_answer(s, "load", BM, point) for s in SECRETS)
    assert within(ones, len(SECRETS), BM.p_one(Fraction(100 * point, DEFAULT_GRID)))


def test_answers_of_different_values_and_metrics_are_independent() -> None:
    # P(both answers are the true category) = p^2 if independent (p = 1/2 for GRR here).
    both = sum(memo_answer(s, "os", GRR, 0) == 0 and memo_answer(s, "os", GRR, 1) == 1
               for s in SECRETS[:10_000])
    assert within(both, 10_000, GRR.p ** 2)
    other = sum(memo_answer(s, "os", GRR, 0) == memo_answer(s, "os2", GRR, 0)
                for s in SECRETS[:10_000])
    assert within(other, 10_000, GRR.p ** 2 + (GRR.d - 1) * GRR.q ** 2)


def test_boolean_answers_and_tags_are_unchanged_by_the_new_kinds() -> None:
    """Pinned from the client before the new kinds: devices keep their permanent answers
    (and their paid tags) across the upgrade."""
    secret = bytes(range(32))
    for mechanism, bits, tag in (
            (RandomizedResponse(), "01000001010001011101101101000101",
             "7bd0bbb24152134c675603c60ffd4ec9"),
            (RandomizedResponse.from_id("rr:3/4:1/2"), "01011101010101001101010001011000",
             "379a80c8b80d576e9018051b39b07c09")):
        assert "".join(str(memo_bit(secret, f"metric_{i}", mechanism, i % 2))
                       for i in range(32)) == bits
        assert spend_tag(secret, "dark_mode", mechanism, 1) == tag
    assert len({value_tag(secret, "os", GRR, k) for k in range(GRR.d)}) == GRR.d


# -- alpha-point rounding ---------------------------------------------------------------------

def test_alpha_point_rounding_rounds_up_exactly_when_the_fraction_exceeds_alpha() -> None:
    scaled, grid = Fraction(13, 20), 4          # position 2.6: between points 2 and 3
    threshold = Fraction(3, 5) * 2 ** ALPHA_BITS
    assert grid_point(scaled, grid, math.ceil(threshold) - 1) == 3   # alpha just below 0.6
    assert grid_point(scaled, grid, math.ceil(threshold)) == 2       # alpha at or above
    assert grid_point(Fraction(1, 2), grid, 0) == 2                  # a grid point stays put
    assert grid_point(Fraction(0), grid, 2 ** ALPHA_BITS - 1) == 0
    assert grid_point(Fraction(1), grid, 0) == grid


def test_the_integer_rounding_the_guard_uses_is_the_definition_exactly() -> None:
    rng = random.Random(5)
    for mechanism in (BM, BitMean(Fraction(1, 3), Fraction(-7, 3), Fraction(22, 7))):
        for grid in (1, 7, DEFAULT_GRID, 1000):
            fast = Grid(mechanism, grid)
            for _ in range(300):
                value = mechanism.lower + (mechanism.upper - mechanism.lower) * Fraction(
                    rng.randrange(10 ** 6 + 1), 10 ** 6)
                alpha = rng.getrandbits(ALPHA_BITS)
                assert fast.point(value, alpha) == grid_point(mechanism.scaled(value), grid,
                                                              alpha)
            for outside in (mechanism.lower - Fraction(1, 10 ** 9), mechanism.upper + 1):
                with pytest.raises(InvalidParameterError):
                    fast.point(outside, 0)


def test_alpha_point_rounding_is_unbiased_over_devices() -> None:
    """E[rounded position] = s m, up to 2**-64, over the devices' alphas. Here s m = 25.6:
    rounding to the nearest point would give 26 on every device, rounding down 25."""
    s = BM.scaled(Fraction(80))
    assert s * DEFAULT_GRID == Fraction(128, 5)
    points = [grid_point(s, DEFAULT_GRID, alpha_threshold(secret, "load")) for secret in SECRETS]
    assert set(points) == {25, 26}
    assert within(points.count(26), len(points), Fraction(3, 5))


def test_a_device_rounds_a_constant_value_to_one_point_and_nearby_values_to_two() -> None:
    secret = os.urandom(32)
    alpha = alpha_threshold(secret, "load")
    assert alpha == alpha_threshold(secret, "load") != alpha_threshold(secret, "other")
    cell = [Fraction(3125 * 12, 1000) + Fraction(i, 100) for i in range(300)]  # [37.5, 40.49]
    keys = {memo_key(secret, "load", BM, v, alpha=alpha) for v in cell}
    assert keys <= {12, 13}
    assert len({memo_key(secret, "load", BM, Fraction(39)) for _ in range(5)}) == 1
    with LongitudinalGuard(":memory:") as guard:  # the guard answers as memo_value derives
        secret = guard._secret  # noqa: SLF001 - the test reads the device secret
        for value in (Fraction(39), Fraction(40), Fraction(77, 3)):
            assert guard.perturb_value("load", BM, value) == memo_value(secret, "load", BM, value)
        assert guard.perturb_value("os", GRR, 2) == memo_value(secret, "os", GRR, 2)


def test_the_guard_charges_each_category_and_grid_point_once() -> None:
    with LongitudinalGuard(":memory:") as guard:
        first = [guard.perturb_value("os", GRR, 2) for _ in range(10)]
        assert len(set(first)) == 1
        guard.perturb_value("os", GRR, 4)
        spent = guard.stats()["os"]
        assert spent.total_charged == pytest.approx(2 * GRR.epsilon) and spent.paid_values == 2
        for value in (Fraction(50), 50, Fraction(50)):
            guard.perturb_value("load", BM, value)
        assert guard.stats()["load"].total_charged == pytest.approx(BM.epsilon)
        for bad in (5, -1, True, 2.0):
            with pytest.raises(InvalidParameterError):
                guard.perturb_value("os", GRR, bad)  # type: ignore[arg-type]
        for bad in (Fraction(101), 50.5, "50"):
            with pytest.raises(InvalidParameterError):
                guard.perturb_value("load", BM, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="perturb"):
            guard.perturb_value("dark_mode", RandomizedResponse(), 1)  # type: ignore[arg-type]
    with LongitudinalGuard(":memory:", irr={"os": RandomizedResponse()}) as guard:
        with pytest.raises(InvalidParameterError, match="boolean metrics only"):
            guard.perturb_value("os", GRR, 1)
    with pytest.raises(InvalidParameterError, match="grid"):
        LongitudinalGuard(":memory:", grid=0)


def test_privacy_loss_is_stated_for_every_kind() -> None:
    with LongitudinalGuard(":memory:", fresh={"fresh_os"}) as guard:
        grr = guard.privacy_loss("os", GRR)
        assert grr.long_run_epsilon == grr.one_report_epsilon == GRR.epsilon
        assert grr.p_answers_differ == 1 - (2 * GRR.p * GRR.q + 3 * GRR.q ** 2)
        oue = guard.privacy_loss("colour", OUE)
        q = OUE.q
        assert oue.p_answers_differ == 1 - Fraction(1, 4) * (q * q + (1 - q) ** 2)
        bm = guard.privacy_loss("load", BM)
        assert (bm.p_yes_given_yes, bm.p_yes_given_no) == (Fraction(3, 4), Fraction(1, 4))
        assert bm.p_answers_differ == Fraction(3, 4) ** 2 + Fraction(1, 4) ** 2
        assert "grid point" in bm.value_change
        fresh = guard.privacy_loss("fresh_os", GRR)
        assert fresh.long_run_epsilon is None and fresh.after(3) == 3 * GRR.epsilon
