"""The cap over versions: one metric name's memoized answers cost at most max_metric_epsilon,
summed over every mechanism it was ever reported under (issue 19, version churn)."""
from __future__ import annotations

import json
import logging
import math
from fractions import Fraction
from pathlib import Path

import pytest

from deniable.client import InvalidParameterError, MetricCapError
from deniable.client.categorical import KaryRandomizedResponse
from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON, Budget
from deniable.client.errors import BudgetExceededError
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.randomness import SecureBits
from deniable.client.state import IN_MEMORY

LN3 = math.log(3)


def version(j: int) -> RandomizedResponse:
    """The j-th of a family of distinct mechanisms with epsilon exactly ln 3 (P1 / Q = 3):
    truth t = 1/2 - j/1000 and forced_yes t / (2 (1 - t)), so P1 = 3t/2 and Q = t/2."""
    t = Fraction(1, 2) - Fraction(j, 1000)
    return RandomizedResponse(t, t / (2 * (1 - t)))


def test_the_version_family_has_epsilon_ln3_and_distinct_ids() -> None:
    assert len({version(j).id for j in range(25)}) == 25
    assert all(version(j).likelihood_ratio == 3 and version(j).epsilon == LN3
               for j in range(25))


def test_the_default_cap_is_twice_the_default_ceiling_and_admits_four_ln3_answers() -> None:
    assert DEFAULT_MAX_METRIC_EPSILON == math.log(81)
    assert math.isclose(DEFAULT_MAX_METRIC_EPSILON, 2 * math.log(9))
    guard = LongitudinalGuard(IN_MEMORY)
    sent = []
    for j in range(25):
        try:
            sent.append(guard.perturb("m", version(j), True))
        except MetricCapError as exc:
            assert exc.retry_at is None and exc.budget == DEFAULT_MAX_METRIC_EPSILON
    assert len(sent) == 4
    spend = guard.stats()["m"]
    assert (spend.paid_values, spend.cap_refused, guard.cap_refused) == (4, 21, 21)
    assert spend.memoized_charged == pytest.approx(4 * LN3, rel=1e-12)


def test_past_the_cap_new_answers_are_refused_and_paid_ones_stay_free(
        caplog: pytest.LogCaptureFixture) -> None:
    guard = LongitudinalGuard(IN_MEMORY)
    with caplog.at_level(logging.WARNING, logger="deniable.client"):
        # Both values under two versions: 4 ln 3, exactly the cap.
        first = {(j, v): guard.perturb("m", version(j), v) for j in (0, 1) for v in (True, False)}
        for _ in range(3):
            with pytest.raises(MetricCapError, match="new metric name"):
                guard.perturb("m", version(2), True)
        with pytest.raises(BudgetExceededError):  # a MetricCapError is a budget refusal too
            guard.perturb("m", version(3), False)
        assert all(guard.perturb("m", version(j), v) == bit for (j, v), bit in first.items())
        guard.perturb("other", version(2), True)  # the cap is per metric name
    warnings = [r for r in caplog.records if "takes no new answer" in r.getMessage()]
    assert len(warnings) == 1  # once per metric and process
    assert guard.stats()["m"].cap_refused == 4 and guard.stats()["other"].cap_refused == 0


def test_fresh_metrics_are_bounded_by_their_budget_not_the_cap() -> None:
    guard = LongitudinalGuard(IN_MEMORY, fresh={"f", "g"},
                              budgets={"g": Budget.for_reports(3, LN3)})
    for j in range(25):
        guard.perturb("f", version(j), True)
    assert guard.cap_refused == 0
    for j in range(3):  # the budget is per metric name, so it spans versions too
        guard.perturb("g", version(j), True)
    with pytest.raises(BudgetExceededError) as refused:
        guard.perturb("g", version(3), True)
    assert not isinstance(refused.value, MetricCapError)


def test_the_cap_can_be_set_or_turned_off() -> None:
    off = LongitudinalGuard(IN_MEMORY, max_metric_epsilon=math.inf)
    for j in range(25):
        off.perturb("m", version(j), True)
    assert off.cap_refused == 0 and off.stats()["m"].paid_values == 25
    one = LongitudinalGuard(IN_MEMORY, max_metric_epsilon=LN3)
    paid = one.perturb("m", version(0), True)
    # Even a change of value under one version is refused a new answer: it is sent as the
    # paid one (free), so the device reports alike whatever its value.
    assert one.perturb("m", version(0), False) == paid
    assert (one.cap_refused, one.stats()["m"].paid_values) == (1, 1)
    assert one.stats()["m"].memoized_charged == pytest.approx(LN3, rel=1e-12)
    with pytest.raises(MetricCapError):  # nothing paid under a new version: silent for all
        one.perturb("m", version(1), False)
    for bad in (0, -1.0, math.nan, True, "4", None):
        with pytest.raises(InvalidParameterError):
            LongitudinalGuard(IN_MEMORY, max_metric_epsilon=bad)  # type: ignore[arg-type]


def test_the_cap_holds_across_restarts_and_processes_sharing_the_state(tmp_path: Path) -> None:
    for j in range(6):  # one app run per version
        with LongitudinalGuard(tmp_path) as guard:
            try:
                guard.perturb("m", version(j), True)
            except MetricCapError:
                pass
    with LongitudinalGuard(tmp_path) as guard:
        spend = guard.stats()["m"]
    assert (spend.paid_values, spend.cap_refused) == (4, 2)
    doc = json.loads((tmp_path / "ledger.json").read_text())["metrics"]["m"]
    assert Fraction(doc["memoized"]) == 4 * Fraction(LN3) and doc["capped"] == 2


def test_a_ledger_written_before_the_cap_reads_conservatively(tmp_path: Path) -> None:
    with LongitudinalGuard(tmp_path, fresh={"f"}) as guard:
        for v in (True, False):
            guard.perturb("m", DEFAULT, v)
        guard.perturb("f", DEFAULT, True)
    path = tmp_path / "ledger.json"
    doc = json.loads(path.read_text())
    for entry in doc["metrics"].values():
        del entry["memoized"], entry["capped"]
    path.write_text(json.dumps(doc))
    with LongitudinalGuard(tmp_path, fresh={"f"}) as guard:
        stats = guard.stats()
    assert stats["m"].memoized_charged == pytest.approx(2 * LN3)  # every charge, as memoized
    assert stats["f"].memoized_charged == 0  # no paid answers: fresh charges only


def _capped_guard(state: Path | str = IN_MEMORY, **kwargs: object) -> LongitudinalGuard:
    """A guard whose metric "m" spent its whole cap (4 ln 3) on versions 0 and 1 of a hostile
    collector, then paid True under version 2 at no cost to spare: a cap of 5 ln 3."""
    guard = LongitudinalGuard(state, max_metric_epsilon=5 * LN3, **kwargs)  # type: ignore[arg-type]
    for j in (0, 1):
        for v in (True, False):
            guard.perturb("m", version(j), v)
    return guard


def test_a_refused_boolean_value_is_sent_as_the_other_paid_answer_never_silent() -> None:
    """Issue 26: past the cap, silence would say "the value changed". The refused value is
    sent as the other value's paid answer instead, free; the ledger never passes the cap."""
    guard = _capped_guard()
    paid = guard.perturb("m", version(2), True)  # the fifth ln 3: the cap exactly
    for _ in range(5):
        assert guard.perturb("m", version(2), False) == paid  # refused: the paid answer
        assert guard.perturb("m", version(2), True) == paid
    spend = guard.stats()["m"]
    assert (spend.paid_values, spend.cap_refused, guard.cap_refused) == (5, 5, 5)
    assert spend.memoized_charged == pytest.approx(5 * LN3, rel=1e-12)
    with pytest.raises(MetricCapError):  # a version with nothing paid: silent for each value
        guard.perturb("m", version(3), True)
    with pytest.raises(MetricCapError):
        guard.perturb("m", version(3), False)


def test_the_substitute_is_the_answer_paid_in_another_process(tmp_path: Path) -> None:
    with _capped_guard(tmp_path) as first:
        paid = first.perturb("m", version(2), False)
    with LongitudinalGuard(tmp_path, max_metric_epsilon=5 * LN3) as second:
        assert second.perturb("m", version(2), True) == paid
        assert second.stats()["m"].cap_refused == 1


def test_with_an_instantaneous_layer_the_substitute_goes_through_the_layer() -> None:
    """The refused value's report is the paid answer re-perturbed by the layer: fresh coins
    read from a source that counts them, as for the paid value's own reports."""
    layer = RandomizedResponse(Fraction(3, 4), Fraction(1, 2))
    memo = LongitudinalGuard(IN_MEMORY, irr={"m": layer}).layers("m", DEFAULT).memo
    assert memo is not None
    counted = _CountingBits()
    guard = LongitudinalGuard(IN_MEMORY, max_metric_epsilon=memo.epsilon, irr={"m": layer},
                              rng=counted)
    guard.perturb("m", DEFAULT, True)
    before = counted.calls
    assert guard.perturb("m", DEFAULT, False) in (0, 1)  # substituted, not refused
    assert counted.calls > before  # through the layer's fresh coins
    assert guard.cap_refused == 1 and guard.stats()["m"].paid_values == 1


class _CountingBits:
    """The secure source, counting the calls that draw coins."""

    def __init__(self) -> None:
        self._bits = SecureBits()
        self.calls = 0

    def bits(self, k: int) -> int:
        self.calls += 1
        return self._bits.bits(k)

    def below(self, bound: int) -> int:
        self.calls += 1
        return self._bits.below(bound)


def test_a_refused_category_is_sent_as_the_lowest_paid_index() -> None:
    grr = KaryRandomizedResponse(5, Fraction(1, 2), "0123abcd")
    guard = LongitudinalGuard(IN_MEMORY, max_metric_epsilon=2 * grr.epsilon)
    answers = {i: guard.perturb_value("os", grr, i) for i in (3, 1)}  # the cap, exactly
    for value in (0, 2, 4):  # refused: the lowest paid index (1), whatever the value
        assert guard.perturb_value("os", grr, value) == answers[1]
    assert guard.perturb_value("os", grr, 3) == answers[3]  # paid: its own answer
    assert guard.cap_refused == 3 and guard.stats()["os"].paid_values == 2


def test_a_budget_refusal_is_substituted_too() -> None:
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(epsilon=LN3)})
    paid = guard.perturb("m", version(0), True)
    assert guard.perturb("m", version(0), False) == paid  # the budget refused it: substituted
    assert guard.refused == 1 and guard.stats()["m"].paid_values == 1
