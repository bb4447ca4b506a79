"""The open-domain mechanism (``od:``): canonical ids, exact epsilon by enumeration, the
report is only the perturbed cell, normalisation, and exact expected counters."""
from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from fractions import Fraction

import pytest

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import epsilon_target, log_ratio_exceeds
from deniable.client.open_domain import (OpenDomainSketch, bucket, hash_constants, normalise,
                                         prefix_words)


class _Script:
    """Replays a fixed sequence of draws as ``bits(k)``; raises IndexError when it runs out."""

    def __init__(self, values: tuple[int, ...]) -> None:
        self.values, self.used = values, 0

    def bits(self, k: int) -> int:
        value = self.values[self.used]
        assert 0 <= value < 1 << k
        self.used += 1
        return value


class _Seeded:
    """Reproducible bits for sampling tests (random.Random, not secure: tests only)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def bits(self, k: int) -> int:
        return self._random.getrandbits(k) if k else 0


# -- ids ----------------------------------------------------------------------------------

def test_id_round_trips_and_is_canonical() -> None:
    sketch = OpenDomainSketch.from_id("od:16:1:1024:10:1/2")
    assert (sketch.max_bytes, sketch.step, sketch.seeds, sketch.g, sketch.p) == \
        (16, 1, 1024, 10, Fraction(1, 2))
    assert sketch.id == "od:16:1:1024:10:1/2"
    assert sketch.levels == 16 and sketch.cells == 16 * 1024 * 10 and sketch.width == 163_841
    assert OpenDomainSketch.from_id("od:8:2:3:5:2/5").levels == 4


@pytest.mark.parametrize("bad", [
    "od:016:1:1024:10:1/2", "od:16:1:01024:10:1/2", "od:16:1:1024:10:2/4",
    "od:16:1:1024:10:1/10",   # p not above 1/g
    "od:16:1:1024:10:1",      # p = 1: infinite epsilon
    "od:65:1:1024:10:1/2", "od:15:2:1024:10:1/2", "od:16:3:1024:10:1/2",
    "od:16:1:0:10:1/2", "od:16:1:1024:1:1/2", "od:16:1:1024:10:1/2:x", "grr:16:1/2:00000000",
    "od:16:1:1024:10: 1/2", "", None, 7,
])
def test_non_canonical_or_out_of_range_ids_are_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        OpenDomainSketch.from_id(bad)  # type: ignore[arg-type]


def test_from_epsilon_is_tight_on_both_sides() -> None:
    for epsilon in (1.0, 2.0, math.log(9), 4.0):
        sketch = OpenDomainSketch.from_epsilon(epsilon)
        assert sketch.g == round(math.exp(epsilon) + 1)
        target = epsilon_target(epsilon)
        assert not log_ratio_exceeds(sketch.likelihood_ratio, target)
        step_up = sketch.p + Fraction(1, 2**32)
        assert log_ratio_exceeds(step_up * (sketch.g - 1) / (1 - step_up), target)
        assert sketch.epsilon == pytest.approx(epsilon, abs=1e-8)


# -- exact epsilon: every draw enumerated -------------------------------------------------

SMALL = OpenDomainSketch(max_bytes=2, step=1, seeds=2, g=3, p=Fraction(1, 2))
"""Every draw is one bit: level (2), seed (2), keep coin (1/2), the other bucket (of 2)."""


def _distribution(sketch: OpenDomainSketch, value: str) -> dict[int, Fraction]:
    out: Counter[int] = Counter()
    for draws in itertools.product((0, 1), repeat=4):
        out[sketch.perturb(value, _Script(draws))] += 1
    return {cell: Fraction(count, 16) for cell, count in out.items()}


def test_perturb_enumerated_matches_the_stated_probabilities() -> None:
    values = ["a", "b", "ab", "ba", "zz", "é"]
    for value in values:
        dist = _distribution(SMALL, value)
        padded = normalise(value, SMALL.max_bytes)
        assert sum(dist.values()) == 1
        for cell in range(SMALL.cells):
            assert dist.get(cell, Fraction(0)) == SMALL.report_probability(padded, cell)


def test_epsilon_is_exact_the_worst_ratio_is_attained() -> None:
    values = ["a", "b", "c", "ab", "ba", "zz", "é", "x"]
    dists = {v: _distribution(SMALL, v) for v in values}
    worst = max(dists[a].get(c, Fraction(0)) / dists[b][c]
                for a in values for b in values for c in dists[b])
    assert all(set(d) == set(range(SMALL.cells)) for d in dists.values())  # no zero: finite
    assert worst == SMALL.likelihood_ratio == 2
    assert SMALL.epsilon == math.log(2)


def test_report_probability_bounds_every_pair_for_the_default_family() -> None:
    sketch = OpenDomainSketch.from_id("od:4:1:64:10:1/2")
    a, b = normalise("abcd", 4), normalise("zq", 4)
    ratios = {sketch.report_probability(a, c) / sketch.report_probability(b, c)
              for c in range(sketch.cells)}
    assert max(ratios) == 9 and min(ratios) == Fraction(1, 9)  # ln 9 exactly, both ways


# -- only perturbed data; normalisation ---------------------------------------------------

def test_perturb_returns_only_a_cell_index() -> None:
    sketch = OpenDomainSketch.from_epsilon(2.0)
    for _ in range(200):
        cell = sketch.perturb("secret-value")
        assert type(cell) is int and 0 <= cell < sketch.cells
        assert sketch.increments(cell) == [(0, 1), (1 + cell, 1)]
    with pytest.raises(InvalidParameterError):
        sketch.cell_of(sketch.cells)
    with pytest.raises(InvalidParameterError):
        sketch.cell_of(True)


def test_normalise_nfc_utf8_pad_clamp_and_refusals() -> None:
    assert normalise("e\u0301", 4) == "\u00e9".encode() + b"\x00\x00"  # NFC first
    assert normalise("abc", 3) == b"abc"
    with pytest.raises(InvalidParameterError) as refused:
        normalise("secret-too-long", 8)
    assert "secret" not in str(refused.value)  # the value is never echoed
    assert normalise("abcdéf", 5, clamp=True) == b"abcd\x00"  # never half a character
    assert normalise("abcdéf", 6, clamp=True) == "abcdé".encode()
    with pytest.raises(InvalidParameterError):
        normalise("日本", 2, clamp=True)  # no whole character fits
    for bad in ("", "a\x00b", "\ud800", b"bytes", 3):
        with pytest.raises(InvalidParameterError):
            normalise(bad, 8)


def test_hash_is_the_documented_multiply_add_shift() -> None:
    prefix = "ab€".encode()  # 5 bytes: two words
    words = prefix_words(prefix)
    assert words == [int.from_bytes(b"ab\xe2\x82", "little"), 0xAC]
    for level, seed, g in ((0, 0, 10), (3, 1023, 56), (15, 7, 2)):
        a = hash_constants(level, seed, 3)
        h = (a[0] + a[1] * words[0] + a[2] * words[1]) % 2**64
        assert bucket(prefix, level, seed, g) == ((h >> 32) * g) >> 32


# -- expected counters, exact -------------------------------------------------------------

def test_expected_counters_are_exact_and_the_estimate_unbiased_up_to_family_collisions() -> None:
    sketch = OpenDomainSketch.from_id("od:3:1:16:4:1/2")
    population = {"ab": Fraction(1, 2), "ac": Fraction(1, 3), "xyz": Fraction(1, 6)}
    padded = {v: normalise(v, sketch.max_bytes) for v in population}
    expected = [sum(f * sketch.report_probability(padded[v], cell) for v, f in population.items())
                for cell in range(sketch.cells)]
    assert sum(expected) == 1
    base, gain = Fraction(1, sketch.g), sketch.p - Fraction(1, sketch.g)
    for level in range(sketch.levels):
        length = sketch.prefix_length(level)
        n_level = Fraction(1, sketch.levels)  # expected reports per device at this level
        for x in {p[:length] for p in padded.values()} | {b"q\x00\x00"[:length]}:
            count = sum(expected[(level * sketch.seeds + s) * sketch.g
                                 + bucket(x, level, s, sketch.g)] for s in range(sketch.seeds))
            share = (count / n_level - base) / gain
            true = sum(f for v, f in population.items() if padded[v][:length] == x)
            collide = {v: Fraction(sum(bucket(padded[v][:length], level, s, sketch.g)
                                       == bucket(x, level, s, sketch.g)
                                       for s in range(sketch.seeds)), sketch.seeds)
                       for v in population if padded[v][:length] != x}
            bias = sum(population[v] * (c - base) for v, c in collide.items()) \
                * (sketch.p - sketch.q) / gain
            assert share == true + bias  # exactly; bias is 0 when the family splits evenly


def test_sampled_counters_match_expectations() -> None:
    """Chi-square over all 16 cells against the exact probabilities, 40,000 seeded draws:
    chi2 with 15 degrees of freedom exceeds 60 with probability 2.5e-7 under the exact law,
    and the draws are seeded, so the test is reproducible (a failure means a changed law)."""
    sketch = OpenDomainSketch.from_id("od:2:1:2:4:1/2")
    rng = _Seeded(33)
    counts: Counter[int] = Counter(sketch.perturb("hi", rng) for _ in range(40_000))
    padded = normalise("hi", 2)
    stat = 0.0
    for cell in range(sketch.cells):
        want = 40_000 * sketch.report_probability(padded, cell)
        stat += float((counts[cell] - want) ** 2 / want)
    assert stat < 60.0

