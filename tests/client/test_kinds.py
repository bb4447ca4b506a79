"""Metric kinds and their mechanisms: ids, exact epsilons, encodings and the wire shapes."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from deniable.client.categorical import (KaryRandomizedResponse, UnaryEncoding,
                                         choose_categorical, domain_tag)
from deniable.client.errors import InvalidParameterError, WireFormatError
from deniable.client.kinds import MetricSpec, parse_mechanism, payload_field, width
from deniable.client.mechanism import RandomizedResponse
from deniable.client.numeric import BitMean
from deniable.client.wire import decode_batch, encode_batch

OS = ["android", "ios", "windows", "macos", "linux", "other"]
TAG = domain_tag(OS)


class Seeded:
    """A reproducible RandomBits for tests (never for real reports)."""

    def __init__(self, seed: int = 7) -> None:
        self._random = random.Random(seed)

    def bits(self, k: int) -> int:
        return self._random.getrandbits(k) if k else 0


def test_every_kind_has_one_canonical_id_that_round_trips() -> None:
    for mechanism in (RandomizedResponse(), KaryRandomizedResponse(6, Fraction(1, 2), TAG),
                      UnaryEncoding(64, Fraction(1, 8), "0123abcd"),
                      BitMean(Fraction(1, 4), Fraction(-5), Fraction(10001, 2))):
        assert parse_mechanism(mechanism.id) == mechanism
    assert BitMean(Fraction(1, 4), Fraction(-5), Fraction(10001, 2)).id == "bm:1/4:-5:10001/2"
    for bad in ("grr:6:2/4:" + TAG, "grr:06:1/2:" + TAG, "grr:6:1/2:" + TAG.upper(),
                "grr:1:1/2:" + TAG, "grr:1025:1/2:" + TAG, "grr:6:1/6:" + TAG,
                "oue:6:1/2:" + TAG, "oue:6:0/1:" + TAG, "bm:1/2:0:1", "bm:1/4:1:1",
                "bm:1/4:0:2/1", "bm:1/4:-0:1", "xx:1/2", "", "rr:1/2:1/2 "):
        with pytest.raises(InvalidParameterError):
            parse_mechanism(bad)


def test_epsilons_are_the_exact_closed_forms() -> None:
    grr = KaryRandomizedResponse(6, Fraction(1, 2), TAG)
    assert grr.q == Fraction(1, 10) and grr.epsilon == pytest.approx(math.log(5), rel=1e-15)
    oue = UnaryEncoding(6, Fraction(1, 4), TAG)
    assert oue.epsilon == pytest.approx(math.log(3), rel=1e-15)
    assert BitMean(Fraction(1, 4), 0, 1).epsilon == pytest.approx(math.log(3), rel=1e-15)
    # For d = 2, GRR with p = 3/4 is the seed's two-coin scheme.
    two = KaryRandomizedResponse(2, Fraction(3, 4), TAG)
    assert two.channel == RandomizedResponse().channel and two.epsilon == RandomizedResponse().epsilon


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0, math.log(3)])
def test_from_epsilon_never_exceeds_the_target_and_is_tight(epsilon: float) -> None:
    den = Fraction(1, 2 ** 32)
    for d in (2, 8, 64, 1024):
        grr = KaryRandomizedResponse.from_epsilon(epsilon, d, TAG)
        assert grr.likelihood_ratio <= Fraction(math.exp(epsilon)) * (1 + Fraction(1, 10 ** 12))
        assert grr.epsilon <= epsilon
        up = KaryRandomizedResponse(d, grr.p + den, TAG)  # one step more keeps no promise
        assert up.epsilon > epsilon - 1e-9
    oue = UnaryEncoding.from_epsilon(epsilon, 8, TAG)
    assert oue.epsilon <= epsilon < UnaryEncoding(8, oue.q - den, TAG).epsilon + 1e-9
    bm = BitMean.from_epsilon(epsilon, 0, 100)
    assert bm.epsilon <= epsilon < BitMean(bm.a - den, 0, 100).epsilon + 1e-9


def test_the_automatic_choice_follows_the_variance_crossover() -> None:
    # Between GRR and OUE, GRR wins while d < 3 e^eps + 2: at eps = 1 that is d < 10.15.
    for d, grr_wins in ((10, True), (11, False)):
        grr, oue = (KaryRandomizedResponse.from_epsilon(1.0, d, TAG),
                    UnaryEncoding.from_epsilon(1.0, d, TAG))
        assert (grr.variance(0.0, 1) < oue.variance(0.0, 1)) == grr_wins
    # Subset selection beats both from d = 5 at eps = 1 (tests/client/test_subset_selection.py).
    assert isinstance(choose_categorical(1.0, 4, TAG)[0], KaryRandomizedResponse)
    # From d = 256 at eps = 1 every set of 2 or more would single a device out (test_memo_unique.py).
    mechanism, why = choose_categorical(1.0, 1024, TAG)
    assert mechanism.id.startswith("grr:1024:") and "1024" in why


def test_perturbed_outputs_take_only_legal_values() -> None:
    rng = Seeded()
    grr = KaryRandomizedResponse(6, Fraction(1, 2), TAG)
    assert {grr.perturb(2, rng) for _ in range(500)} == set(range(6))
    oue = UnaryEncoding(6, Fraction(1, 4), TAG)
    assert all(0 <= oue.perturb(5, rng) < 64 for _ in range(200))
    bm = BitMean(Fraction(1, 4), 0, 10)
    assert {bm.perturb(Fraction(5), rng) for _ in range(100)} == {0, 1}
    with pytest.raises(InvalidParameterError):
        grr.perturb(6, rng)
    with pytest.raises(InvalidParameterError):
        bm.perturb(Fraction(11), rng)


def test_specs_encode_values_and_refuse_what_they_do_not_declare() -> None:
    os_spec = MetricSpec.build("categorical", epsilon=2.0, categories=OS)
    assert os_spec.encode("ios") == 1 and os_spec.mechanism.id.endswith(TAG)
    for bad in ("iOS", 1, None, True):
        with pytest.raises(InvalidParameterError, match="declared categories"):
            os_spec.encode(bad)
    hist = MetricSpec.build("histogram", epsilon=1.0, edges=[0, 1, 2, 5, 10])
    assert hist.categories == ("[0, 1)", "[1, 2)", "[2, 5)", "[5, 10]")
    assert [hist.encode(v) for v in (0, 0.5, 1, 4.99, 5, 10)] == [0, 0, 1, 2, 3, 3]
    with pytest.raises(InvalidParameterError, match="clamp"):
        hist.encode(10.5)
    clamped = MetricSpec.build("histogram", epsilon=1.0, edges=[0, 1, 2], clamp=True)
    assert clamped.encode(-3) == 0 and clamped.encode(99) == 1
    num = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=0.1)
    assert num.mechanism.upper == Fraction(1, 10)  # a declared 0.1 means 1/10
    for bad in (math.nan, math.inf, "5", True, 0.2):
        with pytest.raises(InvalidParameterError):
            num.encode(bad)
    for secret in ("4.25 hours asleep", [4.25]):  # a refused value is never echoed
        with pytest.raises(InvalidParameterError) as refused:
            num.encode(secret)
        assert "4.25" not in str(refused.value) and type(secret).__name__ in str(refused.value)
    with pytest.raises(InvalidParameterError, match="does not match"):
        MetricSpec.build("categorical", mechanism="grr:6:1/2:00000000", categories=OS)
    with pytest.raises(InvalidParameterError):
        MetricSpec.build("categorical", epsilon=1.0, categories=["a", "a"])
    assert MetricSpec.from_document(os_spec.describe(), os_spec.mechanism) == os_spec


def test_width_and_payload_field_follow_the_kind() -> None:
    assert width("rr:1/2:1/2") == 2 and width("bm:1/4:0:1") == 2
    assert width(f"grr:6:1/2:{TAG}") == 7 and width(f"oue:1024:1/8:{TAG}") == 1025
    assert [payload_field(i) for i in ("rr:1/2:1/2", f"grr:6:1/2:{TAG}",
                                       f"oue:6:1/4:{TAG}", "bm:1/4:0:1")] == \
        ["bit", "index", "bits", "bit"]


def test_the_wire_carries_an_index_a_bitset_or_a_bit_and_sums_per_slot() -> None:
    grr = f"grr:6:1/2:{TAG}"
    oue = UnaryEncoding(6, Fraction(1, 4), TAG)
    registry = {"os": grr, "theme": oue.id, "startup_ms": "bm:1/4:0:10000"}
    doc = encode_batch("ab" * 16, [("os", grr, 1), ("os", grr, 1), ("os", grr, 5),
                                   ("theme", oue.id, oue.encode_bits(0b100101)),
                                   ("theme", oue.id, "01"), ("startup_ms", "bm:1/4:0:10000", 1)])
    assert doc["reports"][3] == {"metric": "theme", "mechanism": oue.id, "bits": "25"}
    batch = decode_batch(doc, registry)
    assert batch.tallies["os"].counts == (3, 0, 2, 0, 0, 0, 1)
    assert batch.tallies["theme"].counts == (2, 2, 0, 1, 0, 0, 1)
    assert batch.tallies["startup_ms"].counts == (1, 1)


@pytest.mark.parametrize("report, pointer", [
    ({"index": 6}, "/reports/0/index"), ({"index": -1}, "/reports/0/index"),
    ({"index": True}, "/reports/0/index"), ({"index": 1.0}, "/reports/0/index"),
    ({"bit": 1}, "/reports/0/index"), ({"index": 1, "bit": 1}, "/reports/0/bit"),
])
def test_a_bad_categorical_payload_names_its_field(report: dict, pointer: str) -> None:
    grr = f"grr:6:1/2:{TAG}"
    doc = {"batch_id": "ab" * 16, "reports": [{"metric": "os", "mechanism": grr, **report}]}
    with pytest.raises(WireFormatError) as caught:
        decode_batch(doc, {"os": grr})
    assert pointer in [p.pointer for p in caught.value.problems]


@pytest.mark.parametrize("bits", ["4", "040", "4G", "ZZ", "40", 4])
def test_a_bad_bitset_is_refused(bits: object) -> None:
    oue = f"oue:6:1/4:{TAG}"
    doc = {"batch_id": "ab" * 16,
           "reports": [{"metric": "theme", "mechanism": oue, "bits": bits}]}
    with pytest.raises(WireFormatError) as caught:
        decode_batch(doc, {"theme": oue})
    assert [p.pointer for p in caught.value.problems] == ["/reports/0/bits"]
