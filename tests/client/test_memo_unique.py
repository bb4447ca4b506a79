"""Memoized answers are not device identifiers (issue 26, item 3).

For every kind and the automatic choice, 20,000 devices holding the same value derive their
permanent answers through the real memo code (``memo_bit``, ``memo_value``: HMAC-SHA256 of a
device secret, then the mechanism's exact draws), and the share of devices whose answer no
other device has must stay at most 1 % (``MAX_UNIQUE_SHARE``; the docs' ten boolean metrics
make 0.6 %). The measured shares are also checked against ``unique_share``'s formula, which is
itself checked exactly against an enumeration of every answer.

The secrets come from a seeded generator so the test is reproducible; as keys of HMAC they
stand for random secrets. False-failure rates (over the secrets' randomness) are stated at
each assertion.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from fractions import Fraction

import pytest

from deniable.client import InvalidParameterError, Privacy, Storage
from deniable.client.categorical import (MAX_UNIQUE_SHARE, UNIQUE_SHARE_DEVICES,
                                         KaryRandomizedResponse, SubsetSelection,
                                         UnaryEncoding, choose_categorical, unique_share)
from deniable.client.kinds import MetricSpec
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit, memo_value
from deniable.client.numeric import BitMean
from deniable.client.state import IN_MEMORY

TAG = "0a1b2c3d"
N = UNIQUE_SHARE_DEVICES


def _secrets(seed: int, n: int = N) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


def _unique(answers: list[object]) -> int:
    counts = Counter(answers)
    return sum(1 for a in answers if counts[a] == 1)


def _measured(mechanism: KaryRandomizedResponse | UnaryEncoding | SubsetSelection | BitMean,
              value: int | Fraction, seed: int) -> int:
    return _unique([memo_value(s, "m", mechanism, value) for s in _secrets(seed)])


# -- the formula, exactly ------------------------------------------------------------------

def _enumerated(mechanism: KaryRandomizedResponse | UnaryEncoding | SubsetSelection,
                index: int, devices: int) -> Fraction:
    """sum_y P(y) (1 - P(y))^(devices - 1) over every answer y, in Fractions."""
    d = mechanism.d
    if isinstance(mechanism, KaryRandomizedResponse):
        probs = [mechanism.p if y == index else mechanism.q for y in range(d)]
    elif isinstance(mechanism, SubsetSelection):
        sets = list(itertools.combinations(range(d), mechanism.k))
        weights = [mechanism.r if index in s else Fraction(1) for s in sets]
        probs = [w / sum(weights) for w in weights]
    else:
        probs = []
        for bits in range(1 << d):
            p = Fraction(1, 2)
            for j in range(d):
                if j != index:
                    p *= mechanism.q if bits >> j & 1 else 1 - mechanism.q
            probs.append(p)
    assert sum(probs) == 1
    return sum((p * (1 - p) ** (devices - 1) for p in probs), Fraction(0))


@pytest.mark.parametrize("mechanism", [
    KaryRandomizedResponse(5, Fraction(1, 2), TAG), UnaryEncoding(5, Fraction(1, 5), TAG),
    SubsetSelection(6, 2, Fraction(3), TAG), SubsetSelection(6, 3, Fraction(7, 2), TAG)])
@pytest.mark.parametrize("devices", [1, 2, 7, 40])
def test_the_formula_equals_the_enumeration_of_every_answer(mechanism: object,
                                                            devices: int) -> None:
    exact = _enumerated(mechanism, 1, devices)  # type: ignore[arg-type]
    assert unique_share(mechanism, devices) == pytest.approx(float(exact), rel=1e-9)  # type: ignore[arg-type]


# -- the measurement through the real memo code -----------------------------------------------

@pytest.mark.slow
def test_ten_boolean_metrics_the_reference_figure() -> None:
    # The docs' example: ten metrics at the default rr:1/2:1/2, a device's ten permanent bits.
    # Exactly: sum_j C(10, j) p_j (1 - p_j)^(N - 1), p_j = (1/4)^j (3/4)^(10 - j) = 0.63 %.
    rr = RandomizedResponse()
    expected = sum(math.comb(10, j) * p * (1 - p) ** (N - 1)
                   for j in range(11) for p in [0.25 ** j * 0.75 ** (10 - j)])
    assert 0.0060 < expected < 0.0066
    answers = [tuple(memo_bit(s, f"flag{i}", rr, True) for i in range(10))
               for s in _secrets(10)]
    unique = _unique(answers)
    # Unique devices are nearly Poisson (mean 126, sd ~ 11): 126 +- 70 is a 6-sd band, a
    # false failure rate below 1e-8 (Chebyshev with the Poisson variance would give 1/36;
    # the count is a sum of weakly dependent indicators whose tail is Poisson-like).
    assert abs(unique - expected * N) < 70
    assert unique / N < MAX_UNIQUE_SHARE


# (kind, epsilon, d): the automatic choice at each, every kind and the cases.
AUTOMATIC = [("categorical", 2.0, 6), ("categorical", 1.0, 64), ("categorical", 2.0, 64),
             ("categorical", 2.0, 1024), ("categorical", 1.0, 1024), ("histogram", 1.0, 10)]


@pytest.mark.parametrize("kind, epsilon, d", AUTOMATIC)
def test_the_automatic_choice_leaves_at_most_one_percent_unique(kind: str, epsilon: float,
                                                                d: int) -> None:
    if kind == "histogram":
        spec = MetricSpec.build("histogram", epsilon=epsilon, edges=list(range(d + 1)))
    else:
        spec = MetricSpec.build("categorical", epsilon=epsilon,
                                categories=[f"c{i}" for i in range(d)])
    mechanism = spec.mechanism
    assert not isinstance(mechanism, (RandomizedResponse, BitMean))
    expected = unique_share(mechanism)
    assert expected <= MAX_UNIQUE_SHARE / 20  # at most 2.1e-4 for every case here
    unique = _measured(mechanism, spec.encode("c3" if kind == "categorical" else 3), seed=d)
    # E[unique] <= 4.2 devices. A count of 200 (1 %) or more needs at least 100 distinct
    # answers held by one device each, from answer classes whose expected number of
    # singletons is 4.2: by Markov on the number of singletons over its mean,
    # P(>= 200) <= 4.2 / 200 would be loose; the singletons are (nearly) Poisson, and
    # P(Poisson(4.2) >= 200) < 1e-200. Likewise unique <= 40 (P(Poisson(4.2) >= 40) < 1e-20).
    assert unique <= 40
    assert unique / N <= MAX_UNIQUE_SHARE


@pytest.mark.slow
def test_a_numeric_value_held_constant_repeats_one_bit() -> None:
    # One grid point, one 1BitMean bit: two answers in all, so none is unique among 20,000
    # (each is held by a share a or 1 - a >= 0.27 at epsilon 1: expected singletons ~ 0).
    mechanism = BitMean.from_epsilon(1.0, 0, 10000)
    assert _measured(mechanism, Fraction(4321), seed=7) == 0


@pytest.mark.slow
@pytest.mark.parametrize("mechanism, at_least", [
    (UnaryEncoding.from_epsilon(2.0, 64, TAG), 0.99),
    (SubsetSelection.from_epsilon(2.0, 64, TAG), 0.99)])
def test_the_former_choices_single_nearly_every_device_out(mechanism: object,
                                                           at_least: float) -> None:
    # The figures: OUE at d = 64, epsilon 2, 99.75 %; the best subset, 100 %. The
    # measurement can therefore fail: these are what the automatic choice used to make.
    # Expected shares >= 0.9975: fewer than 99 % unique is 80+ devices short, 9 sd of the
    # at most ~sqrt(50) spread of the non-unique count (false failure < 1e-15).
    assert unique_share(mechanism) > 0.997  # type: ignore[arg-type]
    unique = _measured(mechanism, 3, seed=64)  # type: ignore[arg-type]
    assert unique / N >= at_least


# -- what the client does with an identifying mechanism -------------------------------------

def test_the_guard_refuses_to_memoize_an_identifying_mechanism_whatever_the_value() -> None:
    oue = UnaryEncoding.from_epsilon(2.0, 64, TAG)
    guard = LongitudinalGuard(IN_MEMORY)
    messages = set()
    for value in (0, 3, 63):
        with pytest.raises(InvalidParameterError, match="single this device out") as info:
            guard.perturb_value("m", oue, value)
        messages.add(str(info.value))
    assert len(messages) == 1  # the same refusal for every value: it says nothing of it
    assert all(s.total_charged == 0 for s in guard.stats().values())
    # Fresh reports carry no permanent answer: they are not refused (each costs epsilon).
    assert 0 <= LongitudinalGuard(IN_MEMORY, fresh={"m"}).perturb_value("m", oue, 3) < 1 << 64
    # The app can lift the limit knowingly.
    lifted = LongitudinalGuard(IN_MEMORY, max_unique_share=1.0)
    assert lifted.perturb_value("m", oue, 3) == lifted.perturb_value("m", oue, 3)


def test_the_guard_keeps_memoizing_what_the_automatic_choice_makes() -> None:
    guard = LongitudinalGuard(IN_MEMORY)
    for d, epsilon in ((64, 1.0), (64, 2.0), (1024, 1.0), (6, 2.0)):
        mechanism, _ = choose_categorical(epsilon, d, TAG)
        answer = guard.perturb_value(f"m{d}:{epsilon}", mechanism, 1)
        assert answer == guard.perturb_value(f"m{d}:{epsilon}", mechanism, 1)


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.01", math.nan])
def test_max_unique_share_is_a_share(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="max_unique_share"):
        LongitudinalGuard(IN_MEMORY, max_unique_share=bad)  # type: ignore[arg-type]



# -- the estimates stay unbiased with the new choice ----------------------------------------

@pytest.mark.parametrize("epsilon, d", [(2.0, 64), pytest.param(2.0, 1024, marks=pytest.mark.slow)])
def test_estimates_from_memoized_answers_of_the_choice_are_unbiased(epsilon: float,
                                                                     d: int) -> None:
    # 20,000 devices, each its own secret, one memoized answer each (one period): the counts
    # the collector would hold, debiased by the analysis. Same mechanism families as before,
    # so the estimator is unchanged; this checks it end to end on the new parameters.
    from deniable.analysis.categorical import estimate_categories
    mechanism, _ = choose_categorical(epsilon, d, TAG)
    shares = [0.4, 0.2, 0.1] + [0.3 / (d - 3)] * (d - 3)
    rng = random.Random(d)
    truth = [0] * d
    counts = [0] * (d + 1)
    for secret in _secrets(d + 1):
        index = rng.choices(range(d), weights=shares)[0]
        truth[index] += 1
        row = mechanism.counts_of(memo_value(secret, "m", mechanism, index)
                                  if isinstance(mechanism, KaryRandomizedResponse)
                                  else mechanism.encode_bits(memo_value(secret, "m", mechanism,
                                                                        index)))
        counts = [c + r for c, r in zip(counts, row)]
    estimates = estimate_categories(counts, mechanism)
    z = [(estimates.value[i] - truth[i] / N) / estimates.stderr[i] for i in range(d)]
    # Each z is close to standard normal (n = 20,000 devices): P(|z| > 6) ~ 2e-9, so a false
    # failure for any of d <= 1024 categories has probability below 1024 * 2e-9 = 2e-6 (and
    # below 1.3e-7 at d = 64).
    assert max(abs(x) for x in z) < 6


def test_the_reporter_withholds_a_served_identifying_metric_and_reports_the_rest() -> None:
    from deniable.client import Reporter
    from deniable.client.metrics import describe_metric
    from tests.client.test_sender import wait_for
    from tests.servers import recording_collector
    labels = [f"c{i}" for i in range(64)]
    wide = MetricSpec.build("categorical", categories=labels,
                            mechanism=UnaryEncoding.from_epsilon(2.0, 64, "00000000").id
                            .replace("00000000", MetricSpec.build(
                                "categorical", categories=labels, epsilon=2.0).mechanism.tag))
    narrow = MetricSpec.build("categorical", categories=labels, epsilon=2.0)
    doc = {"metrics": [describe_metric("wide", "W", wide), describe_metric("narrow", "N", narrow)]}
    with recording_collector(doc) as (url, recorder):
        # Both declared alike; the collector serves "wide" under OUE, a version of the same
        # question at the same epsilon, which the declaration lets it choose.
        declared = {name: {"kind": "categorical", "categories": labels, "epsilon": 2.0}
                    for name in ("wide", "narrow")}
        with Reporter(url, metrics=declared, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            assert "single this device out" in reporter.stats().withheld_metrics["wide"]
            assert set(reporter.metrics) == {"narrow"}
            for value in ("c0", "c5", "c63"):
                reporter.report("wide", value)  # the same for every value: counted, not sent
            reporter.report("narrow", "c5")
            assert reporter.flush(10) is True
            assert reporter.stats().withheld == 3
    sent = [json.loads(body) for body in recorder.bodies]
    assert [r["metric"] for batch in sent for r in batch["reports"]] == ["narrow"]
