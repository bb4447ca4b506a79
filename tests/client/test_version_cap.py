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
from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON, Budget
from deniable.client.errors import BudgetExceededError
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import DEFAULT, RandomizedResponse
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
    warnings = [r for r in caplog.records if "no longer reported" in r.getMessage()]
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
    one.perturb("m", version(0), True)
    with pytest.raises(MetricCapError):
        one.perturb("m", version(0), False)  # even a change of value under one version
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
