"""Every number privacy_loss() states, checked by exact enumeration of small report sequences.

For a device's sequence of true values and a sequence of reported bits, the probability of
the reports is summed exactly (Fractions) over the device's permanent answers (one per value
that occurs) and, with an instantaneous layer, over its coins. The worst-case loss between two
value sequences is the largest |ln| of the ratio of those probabilities over every output.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

import pytest

from deniable.client.longitudinal import Layers, LongitudinalGuard, PrivacyLoss
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.memo import memo_bit
from deniable.client.state import IN_MEMORY

IRR = RandomizedResponse.from_id("rr:3/4:1/2")
DARK = RandomizedResponse.from_id("rr:3/4:1/2")
INF = math.inf


def p_bit(mechanism: RandomizedResponse, out: int, true_bit: int) -> Fraction:
    p1 = mechanism.p_yes_given_yes if true_bit else mechanism.p_yes_given_no
    return p1 if out else 1 - p1


def p_outputs(layers: Layers, values: Sequence[int], outputs: Sequence[int]) -> Fraction:
    """P(outputs | values), exactly, for a device reporting through ``layers``."""
    if layers.memo is None:  # fresh: independent draws of the wire mechanism
        return math.prod((p_bit(layers.wire, o, v) for o, v in zip(outputs, values)),
                         start=Fraction(1))
    memo, irr = layers.memo, layers.irr
    held = sorted(set(values))
    total = Fraction(0)
    for answers in itertools.product((0, 1), repeat=len(held)):
        answer = dict(zip(held, answers))
        weight = math.prod((p_bit(memo, answer[v], v) for v in held), start=Fraction(1))
        for o, v in zip(outputs, values):
            weight *= (p_bit(irr, o, answer[v]) if irr is not None
                       else Fraction(int(o == answer[v])))
        total += weight
    return total


def worst_loss(layers: Layers, left: Sequence[int], right: Sequence[int]) -> float:
    """max over outputs of |ln P(out | left) / P(out | right)|; inf if some output is possible
    under one and impossible under the other."""
    worst = 0.0
    for out in itertools.product((0, 1), repeat=len(left)):
        a, b = p_outputs(layers, left, out), p_outputs(layers, right, out)
        if a == 0 and b == 0:
            continue
        if a == 0 or b == 0:
            return INF
        worst = max(worst, abs(math.log(a / b)))
    return worst


def losses() -> list[PrivacyLoss]:
    guard = LongitudinalGuard(IN_MEMORY, irr={"layered": IRR, "layered_dark": IRR},
                              fresh={"fresh", "fresh_dark"})
    return [guard.privacy_loss(metric, mechanism) for metric, mechanism in (
        ("memo", DEFAULT), ("memo_dark", DARK), ("layered", DEFAULT),
        ("layered_dark", RandomizedResponse.from_id("rr:1/3:1/2")),
        ("fresh", DEFAULT), ("fresh_dark", DARK))]


@pytest.fixture(scope="module")
def stated() -> list[PrivacyLoss]:
    return losses()


def test_one_report_epsilon_and_the_composed_p1_q(stated: list[PrivacyLoss]) -> None:
    for loss in stated:
        assert (p_outputs(loss.layers, [1], [1]), p_outputs(loss.layers, [0], [1])) \
            == (loss.p_yes_given_yes, loss.p_yes_given_no)
        assert loss.one_report_epsilon == pytest.approx(worst_loss(loss.layers, [1], [0]),
                                                        rel=1e-12)


def test_long_run_epsilon_bounds_every_run_of_a_constant_value(
        stated: list[PrivacyLoss]) -> None:
    for loss in stated:
        enumerated = [worst_loss(loss.layers, [1] * n, [0] * n) for n in range(1, 9)]
        for n, value in enumerate(enumerated, start=1):
            assert loss.after(n) == pytest.approx(value, rel=1e-9)
        if loss.layers.memo is None:  # fresh: n reports lose exactly n epsilons
            assert loss.long_run_epsilon is None
            assert enumerated == pytest.approx([n * loss.one_report_epsilon
                                                for n in range(1, 9)], rel=1e-12)
            continue
        assert loss.long_run_epsilon is not None
        assert all(value <= loss.long_run_epsilon * (1 + 1e-12) for value in enumerated)
        if loss.layers.irr is None:  # memoized: every run is one report
            assert enumerated == pytest.approx([loss.long_run_epsilon] * 8, rel=1e-12)
        else:  # the supremum: runs approach the memo layer's epsilon, and never pass it
            assert enumerated == sorted(enumerated)
            assert enumerated[-1] > 0.95 * loss.long_run_epsilon
        assert loss.cost_per_new_value == loss.long_run_epsilon


def test_a_change_of_value_shows_and_no_epsilon_bounds_it(stated: list[PrivacyLoss]) -> None:
    by_metric = {loss.metric: loss for loss in stated}
    # Memoized only: (1, 1) never gives the output (1, 0); (1, 0) gives it with P1 (1 - Q).
    memo = by_metric["memo"]
    assert p_outputs(memo.layers, [1, 1], [1, 0]) == 0
    assert p_outputs(memo.layers, [1, 0], [1, 0]) == Fraction(9, 16)  # issue 22's figure
    assert worst_loss(memo.layers, [1, 1], [1, 0]) == INF
    for loss in stated:
        if loss.layers.memo is None:
            assert loss.p_answers_differ is None
            continue
        # The stated probability that the two permanent answers differ, i.e. that the change
        # shows: without an instantaneous layer, the chance that the reports before and after
        # the change differ.
        assert loss.p_answers_differ is not None
        if loss.layers.irr is None:
            assert loss.p_answers_differ == sum(
                p_outputs(loss.layers, [1, 0], out) for out in ((0, 1), (1, 0)))
        else:
            no_irr = Layers(loss.layers.memo, loss.layers.memo, None)
            assert loss.p_answers_differ == sum(
                p_outputs(no_irr, [1, 0], out) for out in ((0, 1), (1, 0)))
        assert str(loss.p_answers_differ) in loss.value_change
        assert "timing" in loss.value_change and "No epsilon" in loss.value_change
    assert memo.p_answers_differ == Fraction(5, 8)


def test_with_an_instantaneous_layer_a_change_costs_about_a_nat_per_report() -> None:
    # Issue 22: memo rr:2/3:1/2 under instant rr:3/4:1/2; 1^n against 1^(n/2) 0^(n/2).
    loss = losses()[2]
    assert loss.layers.memo == RandomizedResponse.from_id("rr:2/3:1/2")
    got = [worst_loss(loss.layers, [1] * n, [1] * (n // 2) + [0] * (n // 2)) for n in (2, 4, 8)]
    assert got == pytest.approx([1.64, 3.54, 7.42], abs=0.005)
    assert loss.long_run_epsilon is not None
    assert got[1] > 2 * loss.long_run_epsilon  # past the old "lifetime" 2 eps(M) = ln 25


def test_fresh_reports_lose_n_epsilons_even_across_changes(stated: list[PrivacyLoss]) -> None:
    for loss in stated:
        if loss.layers.memo is not None:
            continue
        for n in (1, 2, 3):
            worst = max(worst_loss(loss.layers, a, b)
                        for a in itertools.product((0, 1), repeat=n)
                        for b in itertools.product((0, 1), repeat=n))
            assert worst == pytest.approx(loss.after(n), rel=1e-12)
        assert "n times the one-report epsilon" in loss.value_change


def test_the_ledger_charges_what_is_stated_per_new_value() -> None:
    guard = LongitudinalGuard(IN_MEMORY, irr={"layered": IRR}, fresh={"fresh"})
    for metric in ("memo", "layered", "fresh"):
        stated_cost = guard.privacy_loss(metric, DEFAULT).cost_per_new_value
        guard.perturb(metric, DEFAULT, True)
        assert guard.stats()[metric].total_charged == pytest.approx(stated_cost, rel=1e-12)


def majority_recovers(irr: RandomizedResponse, k: int) -> Fraction:
    """Exact P(majority of k reports equals the permanent bit), ties broken by a fair coin; the
    instantaneous layer here is symmetric, so this holds for either permanent bit."""
    assert irr.p_yes_given_yes == 1 - irr.p_yes_given_no
    p = irr.p_yes_given_yes
    total = Fraction(0)
    for agree in range(k + 1):
        weight = math.comb(k, agree) * p**agree * (1 - p)**(k - agree)
        total += weight if 2 * agree > k else weight / 2 if 2 * agree == k else 0
    return total


@pytest.mark.slow
def test_the_instantaneous_layer_only_weakens_the_fingerprint_as_docs_privacy_md_says() -> None:
    # The table in docs/privacy.md's threat model (I = rr:3/4:1/2).
    table = {1: (0.875, 0.263), 3: (0.957, 0.645), 5: (0.984, 0.851), 7: (0.9938, 0.939),
             10: (0.9975, 0.975), 15: (0.99983, 0.998)}
    for k, (one, ten) in table.items():
        exact = majority_recovers(IRR, k)
        assert float(exact) == pytest.approx(one, abs=5e-5 if k >= 7 else 5e-4)
        assert float(exact**10) == pytest.approx(ten, abs=5e-4)
    # And through the guard: 4,000 metrics of one device (independent permanent answers),
    # 5 reports each; the majority finds the permanent answer as often as stated.
    metrics = 4_000
    guard = LongitudinalGuard(IN_MEMORY, irr={f"m{i}": IRR for i in range(metrics)})
    found = 0
    for i in range(metrics):
        metric = f"m{i}"
        votes = sum(guard.perturb(metric, DEFAULT, True) for _ in range(5))
        memo = guard.layers(metric, DEFAULT).memo
        assert memo is not None
        permanent = memo_bit(guard._secret, metric, memo, 1)  # test-only peek at the secret
        found += (votes >= 3) == bool(permanent)
    p = float(majority_recovers(IRR, 5))
    # 6 SE: exact binomial tail 3.2e-8 (p = 0.984 is skewed: 5 SE over 2,000 failed 2.9e-6).
    # Without the instantaneous layer found would be all 4,000, 8.1 SE off: always caught.
    assert abs(found / metrics - p) <= 6 * math.sqrt(p * (1 - p) / metrics)
