"""The Reporter's fast path: answers drawn ahead must follow the mechanism exactly."""
from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.pool import BLOCK_BYTES, PerturbationPool, outcome_table

dyadic = st.builds(lambda k, e: Fraction(k, 2 ** e), st.integers(1, 255), st.integers(1, 8)) \
    .filter(lambda f: 0 < f < 1)


@given(truth=dyadic, forced=dyadic)
def test_the_outcome_table_has_exactly_the_mechanisms_probabilities(
        truth: Fraction, forced: Fraction) -> None:
    mechanism = RandomizedResponse(truth, forced)
    table = outcome_table(mechanism)
    bits = (truth.denominator.bit_length() - 1) + (forced.denominator.bit_length() - 1)
    if bits > 8:
        assert table is None  # too many coins for a pool: the plain path is used
        return
    assert table is not None
    no, yes, width = table
    assert Fraction(sum(yes), 2 ** width) == mechanism.p_yes_given_yes
    assert Fraction(sum(no), 2 ** width) == mechanism.p_yes_given_no


def test_mechanisms_with_rejection_sampling_get_no_pool() -> None:
    assert PerturbationPool.create(RandomizedResponse("1/3", "1/2")) is None
    assert PerturbationPool.create(DEFAULT) is not None


def test_every_draw_of_a_block_is_spent_once_in_order() -> None:
    blocks: list[bytes] = []

    def read(n: int) -> bytes:
        blocks.append(bytes(range(256)) * (n // 256))
        return blocks[-1]

    pool = PerturbationPool(DEFAULT, read=read)
    answers = [pool.perturb(True) for _ in range(4 * BLOCK_BYTES)]
    assert len(blocks) == 1  # 4 two-bit draws per byte: one block, no more
    # The two-coin scheme answers 0 for a true 1 only on the draw "lie, then forced no".
    no, yes, width = outcome_table(DEFAULT)  # type: ignore[misc]
    expected = [yes[(b >> (i * width)) & 3] for i in range(4) for b in blocks[0]]
    assert answers == expected
    pool.perturb(True)
    assert len(blocks) == 2


def test_answers_follow_the_mechanism_within_5_5_standard_errors() -> None:
    pool = PerturbationPool(RandomizedResponse("3/4", "1/2"))
    n = 200_000
    for true_bit, p in ((1, 7 / 8), (0, 1 / 8)):
        ones = sum(pool.perturb(true_bit) for _ in range(n))
        # 5.5 SE: exact binomial tail 3.8e-8 per check, 2 checks: 7.6e-8 (5 SE was 1.15e-6)
        assert abs(ones / n - p) < 5.5 * math.sqrt(p * (1 - p) / n)


def test_a_forked_child_never_reuses_the_parents_answers() -> None:
    pool = PerturbationPool(DEFAULT)
    pool.perturb(True)  # a block is drawn ahead and held in memory
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.write(write_end, bytes(pool.perturb(True) for _ in range(256)))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = bytes(pool.perturb(True) for _ in range(256))
    assert len(child) == 256
    assert child != parent  # equal by chance with probability (5/8)**256


@pytest.mark.parametrize("true_value", [True, False, 1, 0])
def test_true_values_may_be_bools_or_ints(true_value: int) -> None:
    assert PerturbationPool(DEFAULT).perturb(true_value) in (0, 1)
