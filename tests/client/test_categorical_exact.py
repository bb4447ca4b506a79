"""The fast perturbation paths are exact: every random draw is enumerated where that is
finite, the rest is checked against the definition draw for draw, and the system source's
pooled outputs pass chi-square tests whose false-failure rate is below 1e-6.

Exactness argument (src/deniable/client/categorical.py): a ``ByteCoin`` is 1 iff a uniform number read
from bytes lies below p, so P(1) = p; each coin, keep decision, shift and fair bit reads its
own bytes, so they are independent; everything else is a fixed function of them.
"""
from __future__ import annotations

import copy
import math
import os
import pickle
import random
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from deniable.client.categorical import (ByteCoin, KaryRandomizedResponse, UnaryEncoding,
                                         mask_bytes)
from deniable.client.numeric import BitMean

TAG = "0123abcd"


# -- an exhaustive byte source ----------------------------------------------------------------

class _Need(Exception):
    pass


class _Script:
    """Replays chosen bytes, both as ``read(n)`` and as ``RandomBits.bits(k)``; asks for
    the next one when they run out."""

    def __init__(self, values: tuple[int, ...], width: int = 8) -> None:
        self.values, self.used, self.width = values, 0, width

    def take(self) -> int:
        if self.used == len(self.values):
            raise _Need
        self.used += 1
        return self.values[self.used - 1]

    def read(self, n: int) -> bytes:
        return bytes(self.take() for _ in range(n))

    def bits(self, k: int) -> int:
        assert k == self.width, f"asked for {k} bits, enumerating {self.width}-bit draws"
        return self.take()


def enumerate_outputs(run: Callable[[_Script], Any], width: int = 8,
                      max_draws: int = 6) -> tuple[dict[Any, Fraction], Fraction]:
    """Every output of ``run`` over every sequence of ``width``-bit draws, with its exact
    probability; plus the mass of sequences longer than ``max_draws`` (not followed)."""
    outputs: dict[Any, Fraction] = Counter()
    unfinished = Fraction(0)
    stack: list[tuple[int, ...]] = [()]
    while stack:
        values = stack.pop()
        weight = Fraction(1, 1 << (width * len(values)))
        try:
            out = run(_Script(values, width))
        except _Need:
            if len(values) >= max_draws:
                unfinished += weight
            else:
                stack.extend(values + (v,) for v in range(1 << width))
            continue
        outputs[out] += weight
    return dict(outputs), unfinished


# -- the coin -----------------------------------------------------------------------------

@pytest.mark.parametrize("p", [Fraction(1, 4), Fraction(3, 8), Fraction(255, 256),
                               Fraction(1, 256), Fraction(2_977_044_472, 2 ** 32),
                               Fraction(1_154_965_424, 2 ** 32), Fraction(0)])
def test_a_coin_over_every_byte_it_can_read_is_exactly_p(p: Fraction) -> None:
    coin = ByteCoin(p)
    outputs, unfinished = enumerate_outputs(
        lambda s: coin.decide(s.read(1), s.read).decode(), max_draws=5)
    assert unfinished == 0
    assert outputs.get("1", 0) == p and outputs.get("0", 0) == 1 - p


@pytest.mark.parametrize("p", [Fraction(1, 3), Fraction(5, 7), Fraction(1, 10 ** 6)])
def test_a_coin_of_any_rational_is_exact_to_within_what_is_left_unread(p: Fraction) -> None:
    coin = ByteCoin(p)
    outputs, unfinished = enumerate_outputs(
        lambda s: coin.decide(s.read(1), s.read).decode(), max_draws=3)
    assert 0 < unfinished <= Fraction(1, 256 ** 3)
    ones = outputs.get("1", Fraction(0))
    assert ones <= p <= ones + unfinished


@pytest.mark.slow
def test_two_coins_decided_together_are_independent() -> None:
    p = Fraction(5, 1024)  # the first byte leaves coins undecided: resolution is exercised
    coin = ByteCoin(p)
    outputs, unfinished = enumerate_outputs(
        lambda s: coin.decide(s.read(2), s.read).decode(), max_draws=4)
    assert unfinished == 0
    for pair, probability in outputs.items():
        expected = math.prod(p if c == "1" else 1 - p for c in pair)
        assert probability == expected, pair


def test_a_coin_refuses_a_probability_outside_zero_to_one() -> None:
    with pytest.raises(ValueError):
        ByteCoin(Fraction(1))


# -- GRR ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("d, p", [(3, Fraction(1, 2)), (4, Fraction(40_000, 65_536)),
                                  (2, Fraction(3, 4))])
def test_grr_shifts_over_every_byte_are_exactly_the_channel(d: int, p: Fraction) -> None:
    grr = KaryRandomizedResponse(d, p, TAG)
    outputs, unfinished = enumerate_outputs(lambda s: grr.shift_block(1, s.read)[0],
                                            max_draws=4)
    assert unfinished <= Fraction(1, 256 ** 2)  # only d - 1 = 3 rejects (byte 255)
    q = (1 - p) / (d - 1)
    assert set(outputs) == set(range(d))
    for shift in range(d):
        claimed = p if shift == 0 else q
        assert outputs[shift] <= claimed <= outputs[shift] + unfinished


def test_grr_with_an_injected_source_is_exact_over_every_draw() -> None:
    grr = KaryRandomizedResponse(3, Fraction(1, 2), TAG)
    for index in range(3):
        # below(2) then below(2): two 1-bit draws (p = 1/2, d - 1 = 2).
        outputs, unfinished = enumerate_outputs(lambda s: grr.perturb(index, s), width=1)
        assert unfinished == 0
        assert outputs == {j: (grr.p if j == index else grr.q) for j in range(3)}


# -- OUE ----------------------------------------------------------------------------------

def _reference_coins(p: Fraction, stream: bytes, count: int,
                     skip: int = 0) -> tuple[list[int], int]:
    """The definition, draw for draw: coin i reads byte i, then (while still undecided)
    bytes handed out level by level to the undecided coins in index order; it is 1 iff the
    number 0.b0 b1 ... (base 256) it read is certainly below p; ``skip`` bytes after the first
    ``count`` belong to someone else. Returns (coins, bytes used)."""
    read: list[list[int]] = [[stream[i]] for i in range(count)]
    used = count + skip
    decided: list[int | None] = [None] * count
    while True:
        for i in range(count):
            if decided[i] is None:
                low = sum(Fraction(b, 256 ** (j + 1)) for j, b in enumerate(read[i]))
                high = low + Fraction(1, 256 ** len(read[i]))
                if high <= p:
                    decided[i] = 1
                elif low >= p:
                    decided[i] = 0
        pending = [i for i in range(count) if decided[i] is None]
        if not pending:
            return [int(c) for c in decided if c is not None], used
        for i in pending:
            read[i].append(stream[used])
            used += 1


@pytest.mark.parametrize("q", [Fraction(5, 1024), Fraction(1_154_965_424, 2 ** 32),
                               Fraction(1, 3)])
def test_oue_with_an_injected_source_follows_the_definition_draw_for_draw(q: Fraction) -> None:
    rng = random.Random(12)  # chooses byte streams to replay; not a source of reports
    oue = UnaryEncoding(12, q, TAG)
    for trial in range(300):
        # Streams rich in the threshold's first digit, so that resolution is exercised.
        first = ByteCoin(q).digit(0)[0]
        stream = bytes(first if rng.random() < 0.3 else rng.randrange(256) for _ in range(400))
        index = trial % 12
        script = _Script(tuple(stream))
        got = oue.perturb(index, script)
        coins, used = _reference_coins(q, stream, 12, skip=1)  # byte 12: the fair coin
        assert used == script.used
        truth_byte = stream[12]
        expected = sum(c << i for i, c in enumerate(coins))  # coin i is category i's bit
        expected = (expected & ~(1 << index)) | ((truth_byte >> 7) << index)
        assert got == expected


def test_oue_bits_of_a_block_follow_the_definition() -> None:
    rng = random.Random(5)
    q = Fraction(3, 1024)
    for d in (2, 8, 11, 16, 20, 33, 64, 65, 130):
        oue = UnaryEncoding(d, q, TAG)
        width = mask_bytes(d)
        n = 5
        stream = bytes(rng.choice((0, 0, 3, 200)) for _ in range(4 * n * width * 8))
        script = _Script(tuple(stream))
        block = list(oue.mask_block(n, script.read))
        coins, used = _reference_coins(q, stream, n * width * 8)
        assert used == script.used
        packed = int("".join(map(str, coins)), 2)
        for r, bits in enumerate(block):
            assert bits == (packed >> (8 * width * r)) & ((1 << d) - 1)


# -- the system source: chi-square over every output --------------------------------------

def _chi_square_upper(dof: int) -> float:
    """A chi-square threshold with P(X > t) < 1e-6 (Wilson-Hilferty, padded)."""
    z = 4.9
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3 + 5


def _passes(counts: Counter[Any], expected: dict[Any, Fraction], n: int) -> None:
    assert set(counts) <= set(expected)
    statistic = sum((counts.get(k, 0) - n * float(p)) ** 2 / (n * float(p))
                    for k, p in expected.items())
    assert statistic < _chi_square_upper(len(expected) - 1), statistic


def test_pooled_grr_reports_follow_the_channel_exactly() -> None:
    grr = KaryRandomizedResponse.from_epsilon(1.0, 5, TAG)
    n = 100_000
    counts = Counter(grr.perturb(3) for _ in range(n))
    _passes(counts, {j: grr.p if j == 3 else grr.q for j in range(5)}, n)


def test_pooled_grr_over_many_categories_follows_the_channel() -> None:
    grr = KaryRandomizedResponse(300, Fraction(1, 2), TAG)  # shifts of 16 bits
    n = 300_000
    counts = Counter(grr.perturb(7) for _ in range(n))
    expected = {j: grr.p if j == 7 else grr.q for j in range(300)}  # q n = 502 per cell
    _passes(counts, expected, n)


def test_grr_shifts_of_sixteen_bits_follow_the_definition() -> None:
    grr = KaryRandomizedResponse(300, Fraction(1, 2), TAG)
    stream = bytes([0, 200, 128]) + (65535).to_bytes(2, "little") + (298).to_bytes(2, "little") \
        + (600).to_bytes(2, "little") + (3).to_bytes(2, "little")
    script = _Script(tuple(stream))
    # keep coins: 0 < 128 keeps, 200 does not, 128 does not (p = 1/2 ends at its digit 128);
    # words: 65535 >= 65535 - 65535 mod 299 is rejected, then 1 + w mod 299 for each.
    assert grr.shift_block(3, script.read) == [0, 1 + 600 % 299, 1 + 3 % 299]


@pytest.mark.parametrize("d", [3, 9])
def test_pooled_oue_bitsets_follow_the_product_distribution(d: int) -> None:
    oue = UnaryEncoding(d, Fraction(1, 5), TAG)
    q, index, n = oue.q, 1, 60_000

    def bit(i: int, one: int) -> Fraction:
        p = Fraction(1, 2) if i == index else q
        return p if one else 1 - p
    # Cells: the low four bits jointly, and how many of the bits above are set (3 or more
    # pooled), so that every cell expects at least 5 reports.
    top = d - 4 if d > 4 else 0
    expected: dict[Any, Fraction] = {}
    for low in range(1 << min(d, 4)):
        p_low = math.prod(bit(i, low >> i & 1) for i in range(min(d, 4)))
        for k in range(min(top, 3) + 1):
            tail = (1 - sum(math.comb(top, j) * q ** j * (1 - q) ** (top - j) for j in range(3))
                    if k == 3 else math.comb(top, k) * q ** k * (1 - q) ** (top - k))
            expected[(low, k)] = p_low * tail
    counts: Counter[Any] = Counter()
    for _ in range(n):
        bits = oue.perturb(index)
        counts[(bits & 0b1111, min(bin(bits >> 4).count("1"), 3))] += 1
    assert sum(expected.values()) == 1
    _passes(counts, expected, n)


def test_a_forked_child_never_reuses_the_parents_pool() -> None:
    oue = UnaryEncoding(64, Fraction(1, 5), TAG)
    oue.perturb(0)  # fill the pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, oue.perturb(0).to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = int.from_bytes(os.read(read, 8), "little")
    parent = oue.perturb(0)
    os.close(read)
    os.close(write)
    # The child's first report came from a new block; equal by chance with P ~ 1e-12.
    assert child != parent


# -- 1BitMean ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [Fraction(1), 2, 0.5, Fraction(3), 0])
def test_bitmean_draws_its_exact_probability(value: object) -> None:
    bm = BitMean(Fraction(1, 4), Fraction(0), Fraction(3))
    claimed = bm.p_one(Fraction(value))  # type: ignore[arg-type]
    # 1/4 + (1/2) x / 3 has denominators 12 (or 24 for 0.5): 4- or 5-bit rejection draws.
    width = 5 if isinstance(value, float) else 4
    outputs, unfinished = enumerate_outputs(lambda s: bm.perturb(value, s),  # type: ignore[arg-type]
                                            width=width, max_draws=4)
    ones = outputs.get(1, Fraction(0))
    assert ones <= claimed <= ones + unfinished and unfinished <= Fraction(1, 256)


def test_bitmean_refuses_values_out_of_range_as_before() -> None:
    bm = BitMean(Fraction(1, 4), Fraction(-1), Fraction(3))
    for bad in (-2, Fraction(7, 2), 3.5, float("nan"), True, "1"):
        with pytest.raises(ValueError):
            bm.perturb(bad)  # type: ignore[arg-type]


# -- copies ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", [KaryRandomizedResponse(300, Fraction(1, 2), TAG),
                                       UnaryEncoding(64, Fraction(1, 5), TAG)],
                         ids=["grr", "oue"])
def test_a_copy_or_pickle_never_carries_answers_drawn_ahead(mechanism: Any) -> None:
    mechanism.perturb(0)  # the pool now holds answers drawn ahead
    for twin in (copy.deepcopy(mechanism), copy.copy(mechanism),
                 pickle.loads(pickle.dumps(mechanism))):
        assert twin == mechanism and twin.id == mechanism.id
        ours = [mechanism.perturb(0) for _ in range(20)]
        theirs = [twin.perturb(0) for _ in range(20)]
        assert ours != theirs  # the same 20 answers by chance: P < 1e-12


def test_a_subclass_that_overrides_perturb_is_not_bypassed() -> None:
    class Always(KaryRandomizedResponse):
        def perturb(self, index: int, rng: Any = None) -> int:
            return 0
    assert Always(6, Fraction(1, 2), TAG).perturb(3) == 0


def test_pools_and_tables_are_built_on_the_first_report_only() -> None:
    oue = UnaryEncoding(1024, Fraction(1, 5), TAG)
    assert "_placement" not in vars(oue) and "_pools" not in vars(oue)
    oue.perturb(3)
    assert "_placement" in vars(oue) and "_pools" in vars(oue)


def test_a_perturb_kept_before_the_first_report_reuses_one_fast_path() -> None:
    grr = KaryRandomizedResponse(6, Fraction(1, 2), TAG)
    kept = grr.perturb  # before any report: the builder
    kept(0)
    installed = vars(grr)["perturb"]
    assert installed is not kept
    for _ in range(100):
        kept(1)
    assert vars(grr)["perturb"] is installed  # built once, not once per call
