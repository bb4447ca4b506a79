"""Two layers of randomized response compose, exactly, into one forced-response mechanism."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client import InvalidParameterError, RandomizedResponse
from deniable.client.composition import compose, from_probabilities, repeated_loss, split
from deniable.client.mechanism import DEFAULT

open01 = st.fractions(0, 1, max_denominator=1000).filter(lambda f: 0 < f < 1)
mechanisms = st.builds(RandomizedResponse, open01, open01)


@pytest.mark.slow
@given(first=mechanisms, second=mechanisms)
def test_composition_is_a_forced_response_mechanism_with_the_chained_probabilities(
        first: RandomizedResponse, second: RandomizedResponse) -> None:
    composed = compose(first, second)
    p1a, qa = first.p_yes_given_yes, first.p_yes_given_no
    p1b, qb = second.p_yes_given_yes, second.p_yes_given_no
    assert composed.p_yes_given_yes == p1a * p1b + (1 - p1a) * qb
    assert composed.p_yes_given_no == qa * p1b + (1 - qa) * qb
    assert composed.truth == first.truth * second.truth  # truthful iff both layers are
    assert RandomizedResponse.from_id(composed.id) == composed  # an ordinary wire id


@pytest.mark.slow
@given(first=mechanisms, second=mechanisms)
def test_split_recovers_the_first_layer_exactly(
        first: RandomizedResponse, second: RandomizedResponse) -> None:
    assert split(compose(first, second), second) == first


@pytest.mark.slow
@given(first=mechanisms, second=mechanisms)
def test_one_report_of_the_composition_leaks_no_more_than_either_layer(
        first: RandomizedResponse, second: RandomizedResponse) -> None:
    ratio = compose(first, second).likelihood_ratio
    assert ratio <= first.likelihood_ratio and ratio <= second.likelihood_ratio


@pytest.mark.slow
@given(p1=open01, q=open01)
def test_every_channel_with_q_below_p1_is_one_forced_response_mechanism(
        p1: Fraction, q: Fraction) -> None:
    if q < p1:
        rr = from_probabilities(p1, q)
        assert (rr.p_yes_given_yes, rr.p_yes_given_no) == (p1, q)
    else:
        with pytest.raises(InvalidParameterError):
            from_probabilities(p1, q)


class Enumerate:
    """A bit source replaying one fixed draw: to enumerate every outcome of the coins."""

    def __init__(self, draw: int) -> None:
        self.draw = draw

    def bits(self, k: int) -> int:
        value, self.draw = self.draw & ((1 << k) - 1), self.draw >> k
        return value


@pytest.mark.parametrize("first, second", [
    ("rr:1/2:1/2", "rr:1/2:1/2"), ("rr:3/4:1/2", "rr:1/4:3/4"), ("rr:1/8:5/8", "rr:7/8:1/4"),
])
def test_sampling_both_layers_gives_the_composed_probabilities_exactly(
        first: str, second: str) -> None:
    # Every draw of both layers' coins (power-of-two denominators: one table draw each),
    # counted exactly: the sampled channel is the composed mechanism, not just its formula.
    a, b = RandomizedResponse.from_id(first), RandomizedResponse.from_id(second)
    bits_a, bits_b = a._table_bits, b._table_bits
    for true_bit, expected in ((1, compose(a, b).p_yes_given_yes),
                               (0, compose(a, b).p_yes_given_no)):
        ones = sum(b.perturb(a.perturb(true_bit, Enumerate(da)), Enumerate(db))
                   for da in range(1 << bits_a) for db in range(1 << bits_b))
        assert Fraction(ones, 1 << (bits_a + bits_b)) == expected


def test_split_refuses_an_instantaneous_layer_noisier_than_the_wire_mechanism() -> None:
    with pytest.raises(InvalidParameterError, match=r"Q_layer < Q_wire < P1_wire < P1_layer"):
        split(DEFAULT, RandomizedResponse.from_id("rr:1/4:1/2"))  # P1 5/8 < 3/4
    with pytest.raises(InvalidParameterError):
        split(DEFAULT, DEFAULT)  # the memo layer would have to be noiseless


def test_worked_example_from_the_docs() -> None:
    # The wire mechanism rr:1/2:1/2 with the instantaneous layer rr:3/4:1/2 (P1 7/8, Q 1/8)
    # needs the permanent layer rr:2/3:1/2 (P1 5/6, Q 1/6): one report ln 3, long run ln 5.
    irr = RandomizedResponse.from_id("rr:3/4:1/2")
    memo = split(DEFAULT, irr)
    assert memo.id == "rr:2/3:1/2"
    assert (memo.p_yes_given_yes, memo.p_yes_given_no) == (Fraction(5, 6), Fraction(1, 6))
    assert memo.likelihood_ratio == 5 and compose(memo, irr).likelihood_ratio == 3


def exact_repeated_loss(memo: RandomizedResponse, irr: RandomizedResponse, n: int) -> float:
    """Max over every sequence of n reports of |ln P(seq | 1) / P(seq | 0)|, in Fractions."""
    worst = Fraction(1)
    for seq in itertools.product((0, 1), repeat=n):
        def given(memo_bit: int) -> Fraction:
            p = irr.p_yes_given_yes if memo_bit else irr.p_yes_given_no
            return math.prod((p if r else 1 - p for r in seq), start=Fraction(1))
        p1 = memo.p_yes_given_yes * given(1) + (1 - memo.p_yes_given_yes) * given(0)
        p0 = memo.p_yes_given_no * given(1) + (1 - memo.p_yes_given_no) * given(0)
        worst = max(worst, p1 / p0, p0 / p1)
    return math.log(worst)


@pytest.mark.slow
@given(memo=mechanisms, irr=mechanisms, n=st.integers(1, 6))
def test_repeated_loss_matches_enumerating_every_sequence_of_reports(
        memo: RandomizedResponse, irr: RandomizedResponse, n: int) -> None:
    assert repeated_loss(memo, irr, n) == pytest.approx(
        exact_repeated_loss(memo, irr, n), rel=1e-9, abs=1e-12)


@pytest.mark.slow
@given(memo=mechanisms, irr=mechanisms)
def test_repeated_loss_starts_at_one_report_grows_and_stays_below_the_memo_layer(
        memo: RandomizedResponse, irr: RandomizedResponse) -> None:
    assert repeated_loss(memo, irr, 0) == 0
    assert repeated_loss(memo, irr, 1) == pytest.approx(compose(memo, irr).epsilon, rel=1e-9)
    losses = [repeated_loss(memo, irr, n) for n in (1, 2, 5, 20, 100, 10_000)]
    assert all(a <= b + 1e-12 for a, b in zip(losses, losses[1:]))
    assert losses[-1] <= memo.epsilon
    assert repeated_loss(memo, None, 1_000_000) == memo.epsilon


def test_reports_sharing_a_memoized_bit_can_leak_more_than_n_times_one_report() -> None:
    # Why the ledger charges the memo layer's epsilon up front: with a sharp memo layer and a
    # very noisy instantaneous layer, 100 reports leak ~1.43 nats, not 100 * 0.0100.
    memo = from_probabilities(Fraction(1, 2), Fraction(1, 1000))
    irr = RandomizedResponse("1/100", "1/2")
    one = compose(memo, irr).epsilon
    hundred = repeated_loss(memo, irr, 100)
    assert hundred > 1.4 * 100 * one
    assert hundred < memo.epsilon
