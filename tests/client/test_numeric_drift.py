"""A drifting number never makes the device go silent (issue 26, item 7).

A start-up time drifting +150 ms a day on [0, 10000] at epsilon 1, memoized: every ~2 days it
reaches a new grid point (32 steps of 312.5 ms), and the cap over versions (ln 81 = 4.39 nats)
pays for four. Before the fix, reports per day fell from 2,000 to 51 on day 10 and to 0 from
day 15, and a missing report said "moved to a new grid cell". Now a refused new point is
reported as the nearest paid one: every device reports every day, whatever its value, and the
ledger never charges past the cap.
"""
from __future__ import annotations

import random
from fractions import Fraction

import pytest

from deniable.client import BudgetExceededError, Privacy, Storage
from deniable.client.budget import Budget, DEFAULT_MAX_METRIC_EPSILON
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.memo import Grid, alpha_threshold, memo_answer, value_tag
from deniable.client.numeric import BitMean
from deniable.client.state import IN_MEMORY

MECHANISM = BitMean.from_epsilon(1.0, 0, 10000)
DEVICES, DAYS, DRIFT = 300, 30, 150


@pytest.mark.slow
def test_a_drifting_population_reports_every_day_and_the_ledger_stays_under_the_cap() -> None:
    truth = random.Random(26)
    guards = [LongitudinalGuard(IN_MEMORY) for _ in range(DEVICES)]
    starts = [truth.randrange(0, 5000) for _ in range(DEVICES)]
    for day in range(DAYS):
        for guard, start in zip(guards, starts):
            value = min(start + DRIFT * day, 10000)
            # Returns a bit every day: no device is ever silent, so silence cannot depend on
            # the value (a BudgetExceededError here would fail the test).
            assert guard.perturb_value("startup_ms", MECHANISM, value) in (0, 1)
    for guard in guards:
        spend = guard.stats()["startup_ms"]
        assert spend.memoized_charged <= DEFAULT_MAX_METRIC_EPSILON + 1e-9
        assert spend.paid_values == 4  # 4 * epsilon 1 fits ln 81 = 4.39; a fifth does not
    assert sum(g.cap_refused for g in guards) > 0  # the cap was reached: the case is tested


def test_the_substitute_is_the_nearest_paid_point_and_costs_nothing() -> None:
    guard = LongitudinalGuard(IN_MEMORY, max_metric_epsilon=2.0)  # two points of epsilon 1
    secret = guard._secret  # noqa: SLF001 - to recompute the answers the test expects
    alpha = alpha_threshold(secret, "t")
    grid = Grid(MECHANISM)
    step = Fraction(10000, 32)
    first, second = grid.point(step * 3, alpha), grid.point(step * 10, alpha)
    assert (first, second) == (3, 10)  # grid values round to themselves
    guard.perturb_value("t", MECHANISM, step * 3)
    guard.perturb_value("t", MECHANISM, step * 10)
    spent = guard.stats()["t"].total_charged
    for point, nearest in ((0, 3), (5, 3), (6, 3), (7, 10), (8, 10), (20, 10), (32, 10)):
        got = guard.perturb_value("t", MECHANISM, step * point)
        assert got == memo_answer(secret, "t", MECHANISM, nearest), point
    # Ties (6.5 is 3.5 from both) go to the lower point; nothing more is charged, no new tag.
    assert guard.stats()["t"].total_charged == spent
    assert guard.stats()["t"].paid_values == 2
    assert not guard._ledger.is_paid("t", value_tag(secret, "t", MECHANISM, 5))  # noqa: SLF001


def test_with_no_point_paid_every_value_is_refused_alike() -> None:
    # A budget smaller than one answer: the first report of any value is refused, so the
    # silence is the same for every value.
    for value in (0, 4321, 10000):
        guard = LongitudinalGuard(IN_MEMORY, budgets={"t": Budget(epsilon=0.5)})
        with pytest.raises(BudgetExceededError):
            guard.perturb_value("t", MECHANISM, value)


def test_a_budget_refusal_substitutes_too_and_a_new_period_pays_again() -> None:
    now = [0.0]
    guard = LongitudinalGuard(IN_MEMORY, budgets={"t": Budget(epsilon=1.0)},
                              clock=lambda: now[0])
    step = Fraction(10000, 32)
    paid = guard.perturb_value("t", MECHANISM, step * 4)
    assert guard.perturb_value("t", MECHANISM, step * 9) == paid  # refused today: point 4
    now[0] += 2 * 86400.0  # a new period: point 9 is paid for now, with its own answer
    secret = guard._secret  # noqa: SLF001
    assert guard.perturb_value("t", MECHANISM, step * 9) == memo_answer(secret, "t", MECHANISM, 9)
    assert guard.stats()["t"].paid_values == 2


def test_a_drifting_histogram_value_keeps_reporting_through_the_reporter() -> None:
    # A histogram is a number in buckets: a new bucket past the cap is sent as the nearest
    # paid bucket. 20 buckets of 500 ms at epsilon 1 (the automatic choice); the cap pays for
    # four buckets, the drift crosses twelve.
    import json

    from deniable.client import Reporter
    from deniable.client.kinds import MetricSpec
    from deniable.client.metrics import describe_metric
    from tests.servers import recording_collector
    spec = MetricSpec.build("histogram", epsilon=1.0, edges=list(range(0, 10001, 500)))
    with recording_collector({"metrics": [describe_metric("startup", "S", spec)]}) \
            as (url, recorder):
        with Reporter(url, metrics={"startup": spec}, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(one_per_period=False)) as reporter:
            for day in range(DAYS):
                reporter.report("startup", 1000 + 200 * day)
            assert reporter.flush(10) is True
            stats = reporter.stats()
    sent = [r for body in recorder.bodies for r in json.loads(body)["reports"]]
    assert len(sent) == DAYS  # every day, none silent
    assert stats.cap_refused > 0  # the cap was reached: the case is tested
