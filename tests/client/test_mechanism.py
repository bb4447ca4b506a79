"""The mechanism: exact probabilities, exact epsilon, secure integer sampling."""
from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client import InvalidParameterError, RandomizedResponse
from deniable.client.mechanism import DEFAULT

open01 = st.fractions(0, 1, max_denominator=1000).filter(lambda f: 0 < f < 1)


class CountingBits:
    """A deterministic bit source that cycles through every k-bit value in order."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self._next: dict[int, int] = {}

    def bits(self, k: int) -> int:
        self.calls.append(k)
        value = self._next.get(k, 0)
        self._next[k] = (value + 1) % (1 << k)
        return value


def test_default_is_the_two_coin_scheme() -> None:
    assert DEFAULT.id == "rr:1/2:1/2"
    assert DEFAULT.p_yes_given_yes == Fraction(3, 4)
    assert DEFAULT.p_yes_given_no == Fraction(1, 4)
    assert DEFAULT.likelihood_ratio == 3


def test_default_epsilon_is_ln3_tight_on_both_sides() -> None:
    assert DEFAULT.epsilon == math.log(3)
    assert not DEFAULT.epsilon <= math.log(2.999)
    assert DEFAULT.epsilon <= math.log(3.0)


def test_general_epsilon_uses_the_worse_of_both_ratios() -> None:
    rr = RandomizedResponse("1/3", "1/4")  # P1 = 1/3 + 2/3*1/4 = 1/2, Q = 1/6
    assert rr.p_yes_given_yes == Fraction(1, 2)
    assert rr.p_yes_given_no == Fraction(1, 6)
    assert rr.likelihood_ratio == max(Fraction(3), Fraction(5, 6) / Fraction(1, 2))
    assert rr.epsilon == pytest.approx(math.log(3), abs=0)


@pytest.mark.parametrize("truth, forced", [
    (0, "1/2"), (1, "1/2"), ("1/2", 0), ("1/2", 1), ("-1/2", "1/2"), ("3/2", "1/2"),
    ("1/2", "5/4"), (0.5, "1/2"), ("1/2", 0.5), ("abc", "1/2"), ("1/0", "1/2"), (True, "1/2"),
])
def test_parameters_with_infinite_epsilon_no_information_or_inexact_are_refused(
        truth: object, forced: object) -> None:
    with pytest.raises(InvalidParameterError):
        RandomizedResponse(truth, forced)  # type: ignore[arg-type]


def test_ids_round_trip_and_must_be_canonical() -> None:
    rr = RandomizedResponse("3/4", "1/3")
    assert rr.id == "rr:3/4:1/3"
    assert RandomizedResponse.from_id(rr.id) == rr
    for bad in ("rr:2/4:1/2", "rr:1/2", "rr:0.5:0.5", "xx:1/2:1/2", "rr:1/2:1/2 ", "", None):
        with pytest.raises(InvalidParameterError):
            RandomizedResponse.from_id(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 1.0, math.log(3), 2.0, 4.0, 8.0])
def test_from_epsilon_never_exceeds_and_is_tight(epsilon: float) -> None:
    rr = RandomizedResponse.from_epsilon(epsilon)
    assert rr.forced_yes == Fraction(1, 2)
    assert rr.epsilon <= epsilon
    den = rr.truth.denominator
    assert den <= 1 << 16
    # One step more keep-probability would break the bound (or reach truth = 1).
    step = rr.truth + Fraction(1, 1 << 16)
    assert step >= 1 or RandomizedResponse(step, Fraction(1, 2)).epsilon > epsilon


@pytest.mark.parametrize("epsilon", [0, -1, math.inf, math.nan, 1e-9, "1", True, False, None,
                                     1 + 0j, [1.0], 3.05e-5])
def test_from_epsilon_refuses_unusable_targets(epsilon: object) -> None:
    with pytest.raises(InvalidParameterError):
        RandomizedResponse.from_epsilon(epsilon)  # type: ignore[arg-type]


def _exact_warner_exceeds(k: int, den: int, request: float) -> bool:
    """ln((den + k) / (den - k)) > request, checked independently in 60-digit decimal; the
    difference must be far above the arithmetic's error or the check itself fails."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        diff = (Decimal(den + k) / Decimal(den - k)).ln() - Decimal(request)  # exact float
        assert abs(diff) > Decimal(10) ** -50
        return diff > 0


@pytest.mark.slow
def test_from_epsilon_returns_the_largest_admissible_mechanism_on_a_dense_grid() -> None:
    # Every 7th mechanism of the 2**-16 grid (9,365), asked for with its own float epsilon,
    # and every 49th also with the floats either side: the answer's exact epsilon never
    # exceeds the request and the next grid point's does (issue 22: 2,886 overshoots and
    # 2,049 short answers before).
    den = 1 << 16
    checked = 0
    for k in [1, 2, 3, *range(4, den, 7), den - 2, den - 1]:
        own = RandomizedResponse(Fraction(k, den), Fraction(1, 2)).epsilon
        requests = (math.nextafter(own, 0), own, math.nextafter(own, math.inf)) \
            if k % 49 in (1, 2, 3) else (own,)
        for request in requests:
            if _exact_warner_exceeds(1, den, request):
                with pytest.raises(InvalidParameterError):
                    RandomizedResponse.from_epsilon(request)
                continue
            answer = RandomizedResponse.from_epsilon(request)
            got = answer.truth * den
            assert answer.forced_yes == Fraction(1, 2) and got.denominator == 1
            assert not _exact_warner_exceeds(int(got), den, request)
            assert got == den - 1 or _exact_warner_exceeds(int(got) + 1, den, request)
            assert abs(got - k) <= 1
            checked += 1
    assert checked > 9_000


def test_from_epsilon_handles_the_smallest_and_largest_grid_points() -> None:
    den = 1 << 16
    tiny = RandomizedResponse(Fraction(1, den), Fraction(1, 2)).epsilon  # about 3.05e-5
    # The float rounds below the exact ln(65537/65535), so k = 1 itself needs the next float.
    assert _exact_warner_exceeds(1, den, tiny)
    assert RandomizedResponse.from_epsilon(math.nextafter(tiny, 1)).truth == Fraction(1, den)
    assert RandomizedResponse.from_epsilon(Fraction(1, 32767)).truth == Fraction(1, den)
    assert RandomizedResponse.from_epsilon(1e300).truth == Fraction(den - 1, den)
    assert RandomizedResponse.from_epsilon(10**400).truth == Fraction(den - 1, den)
    assert RandomizedResponse.from_epsilon(math.log(2 * den - 1)).truth \
        == Fraction(den - 2, den)  # the float rounds below ln(2 den - 1): den - 1 is too much
    assert RandomizedResponse.from_epsilon(math.log(3)).id == "rr:1/2:1/2"
    wide = RandomizedResponse.from_epsilon(1, denominator_bits=62)
    assert wide.epsilon <= 1 and wide.truth.denominator == 1 << 62
    for bits in (0, 63, True, 16.0, "16"):
        with pytest.raises(InvalidParameterError):
            RandomizedResponse.from_epsilon(1.0, bits)  # type: ignore[arg-type]


def test_small_epsilons_keep_their_relative_precision() -> None:
    # ln(1 + x) for tiny x: the float must be within a few ulps of the exact value.
    for k in (1, 2, 3, 1000):
        rr = RandomizedResponse(Fraction(k, 1 << 16), Fraction(1, 2))
        with decimal.localcontext() as ctx:
            ctx.prec = 50
            exact = (Decimal((1 << 16) + k) / Decimal((1 << 16) - k)).ln()
        assert abs(Decimal(rr.epsilon) - exact) <= 4 * Decimal(math.ulp(rr.epsilon))


def test_two_coin_perturbation_spends_exactly_two_bits_and_every_draw_is_exact() -> None:
    source = CountingBits()
    outputs = {true_bit: [DEFAULT.perturb(true_bit, source) for _ in range(4)]
               for true_bit in (0, 1)}
    assert source.calls == [2] * 8
    # Draws 0..3: the low bit is the truth coin (0: report the truth), the high bit the
    # forced coin (0: forced yes). Draw 1 forces a yes, draw 3 forces a no.
    assert outputs[1] == [1, 1, 1, 0]
    assert outputs[0] == [0, 1, 0, 0]
    assert sum(outputs[1]) / 4 == DEFAULT.p_yes_given_yes
    assert sum(outputs[0]) / 4 == DEFAULT.p_yes_given_no


def test_non_power_of_two_denominators_sample_exactly_by_rejection() -> None:
    rr = RandomizedResponse("1/3", "2/5")
    source = CountingBits()
    # Enumerate: truth coin draws 2 bits (reject 3), forced coin 3 bits (reject 5..7).
    outputs = [rr.perturb(1, source) for _ in range(60)]
    assert all(k in (2, 3) for k in source.calls)
    assert set(outputs) <= {0, 1}


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", [DEFAULT, RandomizedResponse("3/4", "1/2"),
                                       RandomizedResponse("1/3", "2/5")], ids=str)
def test_output_distribution_matches_p1_and_q_within_5_5_standard_errors(
        mechanism: RandomizedResponse) -> None:
    draws = 200_000
    for true_bit, expected in ((1, mechanism.p_yes_given_yes), (0, mechanism.p_yes_given_no)):
        ones = sum(mechanism.perturb(true_bit) for _ in range(draws))
        p = float(expected)
        se = math.sqrt(p * (1 - p) / draws)
        # 5.5 SE: exact binomial tail <= 3.9e-8 per check, 2 checks: < 8e-8 per case
        # (5 SE was 1.15e-6 per case). A wrong P1 or Q by 0.005 still fails.
        assert abs(ones / draws - p) < 5.5 * se, (true_bit, ones / draws, p)


@given(truth=open01, forced=open01, pi=st.fractions(0, 1, max_denominator=1000))
def test_debiasing_inverts_the_expected_yes_rate_exactly(
        truth: Fraction, forced: Fraction, pi: Fraction) -> None:
    rr = RandomizedResponse(truth, forced)
    expected_rate = rr.p_yes_given_no + pi * (rr.p_yes_given_yes - rr.p_yes_given_no)
    assert rr.debias(expected_rate) == pi


@given(ones=st.integers(0, 10_000), extra=st.integers(0, 10_000))
def test_default_estimate_is_the_quarter_plus_half_inversion(ones: int, extra: int) -> None:
    n = ones + extra
    if n == 0:
        return
    assert DEFAULT.debias(Fraction(ones, n)) == 2 * Fraction(ones, n) - Fraction(1, 2)


def test_estimate_against_hand_computed_values() -> None:
    # 2,600 ones of 10,000 under the default: rate .26, p = 2*.26 - .5 = .02.
    est = DEFAULT.estimate(ones=2600, n=10_000)
    assert est.value == pytest.approx(0.02, abs=1e-12)
    assert est.stderr == pytest.approx(math.sqrt(0.26 * 0.74 / 10_000) * 2, rel=1e-12)
    # Wilson on r = .26, n = 10,000, z = 1.959964: centre .2600922, half-width .0085959,
    # so [.2514962, .2686881] on the yes-rate; mapped through 2r - 1/2.
    assert est.ci_low == pytest.approx(2 * 0.2514962 - 0.5, abs=2e-6)
    assert est.ci_high == pytest.approx(2 * 0.2686881 - 0.5, abs=2e-6)
    assert not est.clipped and not est.wide


def test_estimate_outside_0_1_is_clipped_and_flagged() -> None:
    est = DEFAULT.estimate(ones=20, n=100)  # rate .2 -> -0.1
    assert est.unclipped == pytest.approx(-0.1)
    assert est.value == 0.0 and est.clipped
    assert est.ci_low == 0.0 and est.ci_high > 0
    assert DEFAULT.estimate(ones=0, n=0).wide


def test_margin_planning_is_consistent() -> None:
    n = DEFAULT.reports_for_margin(0.01)
    assert DEFAULT.margin_of_error(n) <= 0.01 < DEFAULT.margin_of_error(n - 1)
    # Worst case z * 0.5 / (sqrt(n) * 0.5) = z / sqrt(n): n = (1.96 / .01)^2 = 38,415.
    assert n == 38_415
