"""Subset selection (``ss:<d>:<k>:<r>:<tag>``): a report is a set of k of the d categories,
P(S) proportional to r if it holds the true category, else to 1; epsilon = ln r exactly.

- With an injected source every draw is enumerated: the output law is exactly the
  definition (up to the mass of draw sequences longer than followed, a rejection tail).
- The channel (P1, Q) the analysis debiases with is the definition's inclusion marginal.
- ``from_epsilon`` never exceeds the epsilon asked and is tight to the grid 1 / 2**32; its
  k is the one with the smallest exact variance.
- The system source's pooled reports pass chi-square tests with a false-failure rate below
  1e-6; the real client sends them as bitsets of exactly k bits, memoized per value.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from itertools import combinations
from typing import Any

import pytest

from deniable.client import (
    Delivery,
    InvalidParameterError,
    Privacy,
    Reporter,
    Storage,
    WireFormatError,
)
from deniable.client.categorical import (KaryRandomizedResponse, SubsetSelection,
                                         UnaryEncoding, choose_categorical, domain_tag,
                                         unique_share, MAX_UNIQUE_SHARE,
                                         uniform_block)
from deniable.client.kinds import MetricSpec, parse_mechanism, payload_field, width
from deniable.client.mechanism import log_ratio_exceeds
from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from tests.servers import recording_collector

TAG = "0123abcd"


def definition(ss: SubsetSelection, index: int) -> dict[int, Fraction]:
    """Every k-subset (as a bitset) with its probability under the definition."""
    z = math.comb(ss.d - 1, ss.k - 1) * ss.r + math.comb(ss.d - 1, ss.k)
    return {sum(1 << i for i in s): (ss.r if index in s else Fraction(1)) / z
            for s in combinations(range(ss.d), ss.k)}


# -- an exhaustive random source -----------------------------------------------------------

class _Need(Exception):
    def __init__(self, width: int) -> None:
        self.width = width


class _Script:
    """Replays chosen draws as ``RandomBits.bits(k)``; asks for the next one (of k bits)
    when they run out."""

    def __init__(self, values: tuple[int, ...]) -> None:
        self.values, self.used = values, 0

    def bits(self, k: int) -> int:
        if k == 0:
            return 0
        if self.used == len(self.values):
            raise _Need(k)
        self.used += 1
        return self.values[self.used - 1]


def enumerate_outputs(run: Callable[[_Script], Any], max_draws: int = 14
                      ) -> tuple[dict[Any, Fraction], Fraction]:
    """Every output of ``run`` over every sequence of draws (each uniform over its width),
    with its exact probability; plus the mass of sequences longer than ``max_draws``."""
    outputs: Counter[Any] = Counter()
    unfinished = Fraction(0)
    stack: list[tuple[tuple[int, ...], Fraction]] = [((), Fraction(1))]
    while stack:
        values, weight = stack.pop()
        try:
            out = run(_Script(values))
        except _Need as need:
            if len(values) >= max_draws:
                unfinished += weight
            else:
                share = weight / (1 << need.width)
                stack.extend((values + (v,), share) for v in range(1 << need.width))
            continue
        outputs[out] += weight
    return dict(outputs), unfinished


@pytest.mark.slow
@pytest.mark.parametrize("d, k, r", [(3, 1, Fraction(2)), (3, 2, Fraction(3, 2)),
                                     (4, 2, Fraction(3)), (5, 2, Fraction(3, 2)),
                                     (4, 1, Fraction(5, 3))])
def test_every_draw_enumerated_gives_exactly_the_definition(d: int, k: int, r: Fraction
                                                            ) -> None:
    ss = SubsetSelection(d, k, r, TAG)
    for index in range(d):
        outputs, unfinished = enumerate_outputs(lambda script: ss.perturb(index, script))
        expected = definition(ss, index)
        assert set(outputs) <= set(expected)  # only k-subsets, never anything else
        assert unfinished < Fraction(1, 1000)
        for subset, p in expected.items():
            got = outputs.get(subset, Fraction(0))
            assert got <= p <= got + unfinished, (index, bin(subset), got, p)


def test_with_no_rejection_tail_the_enumeration_is_exact_to_the_last_digit() -> None:
    # d = 3, k = 1, r = 2: the coin is 1/2 (one byte), the other member one of 2 (one bit).
    ss = SubsetSelection(3, 1, Fraction(2), TAG)
    outputs, unfinished = enumerate_outputs(lambda script: ss.perturb(0, script))
    assert unfinished == 0
    assert outputs == {0b001: Fraction(1, 2), 0b010: Fraction(1, 4), 0b100: Fraction(1, 4)}


# -- the channel and epsilon ---------------------------------------------------------------

@pytest.mark.parametrize("d", [2, 3, 4, 5, 7])
@pytest.mark.parametrize("r", [Fraction(9, 8), Fraction(3), Fraction(55)])
def test_the_channel_is_the_inclusion_marginal_and_the_ratio_is_r(d: int, r: Fraction) -> None:
    for k in range(1, d):
        ss = SubsetSelection(d, k, r, TAG)
        law = {i: definition(ss, i) for i in range(d)}
        p1 = sum(p for s, p in law[0].items() if s & 1)
        q = sum(p for s, p in law[0].items() if s & 2)
        assert ss.channel == (p1, q)
        assert p1 == k * r / (k * r + d - k)
        assert q == k * ((k - 1) * r + d - k) / ((d - 1) * (k * r + d - k))
        worst = max(law[i][s] / law[j][s] for i in range(d) for j in range(d) for s in law[i])
        assert ss.likelihood_ratio == worst == r
        assert ss.epsilon == pytest.approx(math.log(r), rel=1e-15)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 2.0, math.log(3), 4.0, 9.5])
def test_from_epsilon_never_exceeds_the_target_and_is_tight(epsilon: float) -> None:
    ss = SubsetSelection.from_epsilon(epsilon, 16, TAG)
    den = 1 << 32
    m = ss.r * den
    assert m.denominator == 1  # r = m / 2**32
    target = Fraction(epsilon)  # the float's exact value
    assert not log_ratio_exceeds(ss.r, target)                   # ln r <= epsilon, exactly
    assert log_ratio_exceeds(Fraction(int(m) + 1, den), target)  # the next one is above
    assert ss.epsilon <= epsilon


@pytest.mark.slow
@pytest.mark.parametrize("epsilon, d", [(0.5, 8), (1.0, 8), (1.0, 64), (2.0, 64), (4.0, 200)])
def test_from_epsilon_picks_the_k_of_smallest_exact_variance(epsilon: float, d: int) -> None:
    def rare(ss: SubsetSelection) -> Fraction:
        p1, q = ss.channel
        return q * (1 - q) / (p1 - q) ** 2
    best = SubsetSelection.from_epsilon(epsilon, d, TAG)
    for k in range(1, d):
        assert rare(best) <= rare(SubsetSelection.from_epsilon(epsilon, d, TAG, k=k))
    near = round(d / (math.exp(epsilon) + 1))
    assert abs(best.k - near) <= 1  # the textbook k ~ d / (e^eps + 1)
    assert SubsetSelection.from_epsilon(epsilon, d, TAG, k=1).k == 1


def test_from_epsilon_refuses_what_it_cannot_meet() -> None:
    with pytest.raises(InvalidParameterError):
        SubsetSelection.from_epsilon(1e-12, 8, TAG)
    with pytest.raises(InvalidParameterError):
        SubsetSelection.from_epsilon(0.0, 8, TAG)


@pytest.mark.parametrize("d, k, r", [(8, 0, Fraction(2)), (8, 8, Fraction(2)),
                                     (8, 3, Fraction(1)), (8, 3, Fraction(1, 2)),
                                     (1, 1, Fraction(2)), (8, True, Fraction(2))])
def test_parameters_out_of_range_are_refused(d: int, k: int, r: Fraction) -> None:
    with pytest.raises(InvalidParameterError):
        SubsetSelection(d, k, r, TAG)
    with pytest.raises(InvalidParameterError):
        SubsetSelection(8, 3, 2.0, TAG)  # type: ignore[arg-type]


# -- the automatic choice ------------------------------------------------------------------

@pytest.mark.parametrize("epsilon, d, prefix", [
    (1.0, 2, "grr"), (2.0, 8, "grr"), (4.0, 64, "grr"),   # small d: GRR
    (0.5, 8, "ss"), (1.0, 8, "ss"), (1.0, 64, "ss"),
    (4.0, 1024, "grr"), (1.0, 256, "grr")])  # large d: a larger set would identify
def test_the_choice_is_the_smallest_exact_variance_of_those_whose_answers_stay_shared(
        epsilon: float, d: int, prefix: str) -> None:
    chosen, why = choose_categorical(epsilon, d, TAG)
    assert chosen.id.startswith(prefix + ":")
    assert unique_share(chosen) <= MAX_UNIQUE_SHARE
    grr = KaryRandomizedResponse.from_epsilon(epsilon, d, TAG)
    oue = UnaryEncoding.from_epsilon(epsilon, d, TAG)
    ss = SubsetSelection.from_epsilon(epsilon, d, TAG)
    sets = [SubsetSelection(d, k, ss.r, TAG) for k in range(2, d - 1)]

    def rare(m: Any) -> Fraction:
        p1, q = m.channel
        return Fraction(q * (1 - q) / (p1 - q) ** 2)
    allowed = [m for m in [grr, oue, *sets] if unique_share(m) <= MAX_UNIQUE_SHARE]
    assert rare(chosen) == min(rare(m) for m in allowed)
    assert ("subset selection" in why) == (prefix == "ss")
    assert f"epsilon {epsilon:g}" in why


def test_the_unconstrained_best_would_identify_and_the_choice_says_what_it_costs() -> None:
    # d = 64 at epsilon 1: the best k (17) leaves nearly every device unique; k = 2 does not.
    best = SubsetSelection.from_epsilon(1.0, 64, TAG)
    chosen, why = choose_categorical(1.0, 64, TAG)
    assert best.k == 17 and unique_share(best) > 0.99
    assert isinstance(chosen, SubsetSelection) and chosen.k == 2 and chosen.r == best.r
    assert "not 17" in why and "identifier" in why
    grr, why = choose_categorical(1.0, 1024, TAG)
    assert isinstance(grr, KaryRandomizedResponse) and "single a device out" in why


# -- the id and the wire -------------------------------------------------------------------

def test_the_id_round_trips_and_names_a_bitset_payload_of_width_d_plus_one() -> None:
    ss = SubsetSelection.from_epsilon(1.0, 8, TAG)
    assert ss.id == f"ss:8:{ss.k}:5837465777/2147483648:{TAG}"
    assert parse_mechanism(ss.id) == SubsetSelection.from_id(ss.id) == ss
    assert payload_field(ss.id) == "bits"
    assert width(ss.id) == ss.width == 9


@pytest.mark.parametrize("bad", ["ss:8:02:3/2:0123abcd", "ss:08:2:3/2:0123abcd",
                                 "ss:8:2:6/4:0123abcd", "ss:8:2:3/2:0123ABCD",
                                 "ss:8:8:3/2:0123abcd", "ss:8:2:1:0123abcd",
                                 "ss:8:2:2/3:0123abcd", "ss:8:2:3/2", "ss:8:2:1.5:0123abcd"])
def test_non_canonical_or_impossible_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidParameterError):
        parse_mechanism(bad)


def test_counts_of_takes_exactly_k_bits_in_d_hex_digits() -> None:
    ss = SubsetSelection(10, 3, Fraction(2), TAG)  # 3 hex digits
    assert ss.counts_of("00b") == (1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0)
    assert ss.counts_of(ss.encode_bits(0b1100000001)) == (1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1)
    for bad in ["003", "00f", "000", "3ff", "b", "000b", "00B", " 0b", 11, None]:
        with pytest.raises(InvalidParameterError):
            ss.counts_of(bad)
    with pytest.raises(InvalidParameterError):
        ss.counts_of("c03")  # bit 11 is at or above d = 10


def test_a_batch_of_subsets_round_trips_through_the_wire() -> None:
    ss = SubsetSelection.from_epsilon(1.0, 8, TAG)
    sent = [ss.perturb(i % 8) for i in range(50)]
    doc = json.loads(json.dumps(encode_batch(
        new_batch_id(), [("os", ss.id, ss.encode_bits(bits)) for bits in sent])))
    tally = decode_batch(doc, {"os": ss.id}).tallies["os"]
    assert tally.counts == (50, *(sum(bits >> i & 1 for bits in sent) for i in range(8)))
    assert sum(tally.counts[1:]) == 50 * ss.k
    doc["reports"][3]["bits"] = ss.encode_bits(sent[3] | (sent[3] + 1) & ~sent[3])  # k + 1
    with pytest.raises(WireFormatError) as refused:
        decode_batch(doc, {"os": ss.id})
    assert [p.pointer for p in refused.value.problems] == ["/reports/3/bits"]
    assert f"exactly k = {ss.k}" in refused.value.problems[0].detail


# -- the system source ---------------------------------------------------------------------

def _chi_square_upper(dof: int) -> float:
    """A chi-square threshold with P(X > t) < 1e-6 (Wilson-Hilferty, padded)."""
    z = 4.9
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3 + 5


def _passes(counts: Counter[Any], expected: dict[Any, Fraction], n: int) -> None:
    assert set(counts) <= set(expected)
    assert sum(expected.values()) == 1
    statistic = sum((counts.get(k, 0) - n * float(p)) ** 2 / (n * float(p))
                    for k, p in expected.items())
    assert statistic < _chi_square_upper(len(expected) - 1), statistic


@pytest.mark.parametrize("d, k, index", [(5, 2, 1), (6, 3, 5), (4, 1, 0), (2, 1, 1)])
def test_pooled_reports_follow_the_definition_subset_by_subset(d: int, k: int, index: int
                                                              ) -> None:
    ss = SubsetSelection(d, k, Fraction(5, 2), TAG)
    n = 60_000  # the rarest subset expects over 1,000 reports
    _passes(Counter(ss.perturb(index) for _ in range(n)), definition(ss, index), n)


@pytest.mark.slow
@pytest.mark.parametrize("d, index", [(64, 1), (64, 40), (16, 2), (16, 11)])
def test_pooled_reports_over_many_categories_follow_the_definition(d: int, index: int) -> None:
    """The joint law of categories 0..3 (index inside or outside them), from the counts of
    subsets: d = 16 draws rows of a table of every set, d = 64 marks and corrects."""
    ss = SubsetSelection.from_epsilon(1.0, d, TAG)
    assert (ss._tables is None) == (d == 64)
    k, r = ss.k, ss.r
    z = math.comb(d - 1, k - 1) * r + math.comb(d - 1, k)

    def comb(a: int, b: int) -> int:
        return math.comb(a, b) if 0 <= b <= a else 0

    expected: dict[int, Fraction] = {}
    for low in range(16):
        a = bin(low).count("1")
        if index < 4:
            w = (r if low >> index & 1 else 1) * comb(d - 4, k - a)
        else:
            w = r * comb(d - 5, k - a - 1) + comb(d - 5, k - a)
        expected[low] = w / z
    n = 60_000
    reports = [ss.perturb(index) for _ in range(n)]
    assert all(bits.bit_count() == k and bits >> d == 0 for bits in reports)
    _passes(Counter(bits & 0b1111 for bits in reports), expected, n)
    p1, q = ss.channel
    own = sum(bits >> index & 1 for bits in reports)
    assert abs(own / n - float(p1)) <= 5.5 * math.sqrt(float(p1 * (1 - p1)) / n)


def test_a_copy_never_carries_answers_drawn_ahead() -> None:
    import copy
    import pickle
    ss = SubsetSelection(8, 3, Fraction(2), TAG)
    ss.perturb(0)
    for twin in (copy.copy(ss), copy.deepcopy(ss), pickle.loads(pickle.dumps(ss))):
        assert twin == ss and not {"_pools", "_table_pools"} & set(vars(twin))


@pytest.mark.parametrize("size", [1, 7, 21, 256, 455, 4096])
def test_uniform_blocks_map_every_accepted_draw_to_each_value_equally_often(size: int) -> None:
    # Feed every byte (or 16-bit word) once: each value in [0, size) comes out equally often.
    width = 1 if size <= 256 else 2
    every = b"".join(w.to_bytes(width, "little") for w in range(256 ** width))
    out = uniform_block(size, lambda n: every)  # more than asked: every draw, once
    if size == 1:
        assert set(out) == {0}
        return
    counts = Counter(out)
    assert set(counts) == set(range(size)) and len(set(counts.values())) == 1


# -- the real client -----------------------------------------------------------------------

FRUIT = ["apple", "pear", "plum", "fig"]
SS = MetricSpec.build("categorical", categories=FRUIT,
                      mechanism=f"ss:4:2:3:{domain_tag(FRUIT)}")


@contextmanager
def reporter(**options: object) -> Iterator[tuple[Reporter, list[bytes]]]:
    with recording_collector({"metrics": []}) as (url, recorder):
        privacy = Privacy(**{"one_per_period": False, **options})  # type: ignore[arg-type]
        with Reporter(url, {"fruit": SS}, storage=Storage(privacy_dir=":memory:"),
                      delivery=Delivery(batch_size=1000), privacy=privacy) as client:
            yield client, recorder.bodies
            assert client.flush(60)


def sent_bits(bodies: list[bytes]) -> list[str]:
    return [report["bits"] for body in bodies for report in json.loads(body)["reports"]
            if report["metric"] == "fruit"]


def test_a_declared_subset_metric_is_memoized_one_report_per_value() -> None:
    with reporter() as (client, bodies):
        for _ in range(100):
            client.report("fruit", "plum")
        loss = client.privacy_loss("fruit")
    sent = sent_bits(bodies)
    assert len(sent) == 100 and len(set(sent)) == 1  # k reports = one report, repeated
    assert SS.mechanism.counts_of(sent[0])[0] == 1   # a valid k-subset
    assert loss.long_run_epsilon == loss.one_report_epsilon == pytest.approx(math.log(3))
    # Two values' permanent answers differ unless they drew the same subset:
    # 1 - sum_S P(S | i) P(S | j), over the 6 subsets of 2 of 4.
    law = {i: definition(SS.mechanism, i) for i in (0, 1)}  # type: ignore[arg-type]
    assert loss.p_answers_differ == 1 - sum(law[0][s] * law[1][s] for s in law[0])


@pytest.mark.slow
def test_fresh_reports_through_the_client_follow_the_definition() -> None:
    n = 20_000
    with reporter(fresh={"fruit"}) as (client, bodies):
        for _ in range(n):
            client.report("fruit", "pear")
    sent = Counter(int(bits, 16) for bits in sent_bits(bodies))
    assert sum(sent.values()) == n
    _passes(sent, definition(SS.mechanism, 1), n)  # type: ignore[arg-type]
