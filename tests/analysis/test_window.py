"""Honest intervals over windows of several periods: the variance split, the periods counted,
coverage by simulation through the client's tables (a fast version of bench/coverage.py),
comparisons, the planner in devices, and the clipped-interval flag."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import numpy as np
import pytest

from bench.coverage import LAYER, WIRE, simulate
from deniable.analysis.compare import compare_windows
from deniable.analysis.estimate import debias, summarize, window_estimate
from deniable.analysis.plan import margin_for, plan
from deniable.analysis.sources import MetricCounts, MetricInfo
from deniable.analysis.timeseries import rolling, series
from deniable.analysis.window import (
    bucket_periods, design_effect, fresh_variance, periods_in, rolling_periods)
from deniable.client.composition import split
from deniable.client.mechanism import DEFAULT
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy

MEMO = CollectionPolicy("memoized")
IRR = CollectionPolicy("instantaneous", LAYER)
FRESH = CollectionPolicy("fresh")
DAY0 = datetime(2026, 11, 2, tzinfo=timezone.utc)  # a Monday


def _one_device_variance_split(policy: CollectionPolicy, value: int) -> tuple[Fraction, Fraction]:
    """(persistent, fresh) variance of one device's report, exactly, by enumeration."""
    if policy.memoization == "fresh":
        p = WIRE.p_yes_given_yes if value else WIRE.p_yes_given_no
        return Fraction(0), p * (1 - p)
    if policy.memoization == "memoized":
        p = WIRE.p_yes_given_yes if value else WIRE.p_yes_given_no
        return p * (1 - p), Fraction(0)
    memo = split(WIRE, LAYER)
    m = memo.p_yes_given_yes if value else memo.p_yes_given_no
    s1, s0 = LAYER.p_yes_given_yes, LAYER.p_yes_given_no
    persistent = (s1 - s0) ** 2 * m * (1 - m)
    fresh = m * s1 * (1 - s1) + (1 - m) * s0 * (1 - s0)
    return persistent, fresh


@pytest.mark.parametrize("policy", [MEMO, IRR, FRESH], ids=lambda p: p.memoization)
def test_the_variance_splits_exactly_into_persistent_and_fresh(policy) -> None:  # type: ignore[no-untyped-def]
    # Population with share theta: r (1 - r) = between-devices + E[persistent] + E[fresh].
    for theta in (Fraction(0), Fraction(3, 10), Fraction(1, 2), Fraction(1)):
        r = WIRE.p_yes_given_no + theta * (WIRE.p_yes_given_yes - WIRE.p_yes_given_no)
        between = (WIRE.p_yes_given_yes - WIRE.p_yes_given_no) ** 2 * theta * (1 - theta)
        splits = [_one_device_variance_split(policy, v) for v in (0, 1)]
        fresh = (1 - theta) * splits[0][1] + theta * splits[1][1]
        persistent = (1 - theta) * splits[0][0] + theta * splits[1][0]
        assert r * (1 - r) == between + persistent + fresh
        got = fresh_variance(WIRE, policy, np.array([float(theta)]))[0]
        assert got == pytest.approx(float(fresh), abs=1e-12)
        # deff over T periods = (T (r(1-r) - fresh) + fresh) / r(1-r)
        deff = design_effect(WIRE, policy, np.array([float(r)]), np.array([7]))[0]
        assert deff == pytest.approx(float((7 * (r * (1 - r) - fresh) + fresh) / (r * (1 - r))))


def test_one_period_is_todays_interval_and_memoized_counts_devices() -> None:
    ones, n = np.array([3000]), np.array([10_000])
    today = debias(DEFAULT, ones, n)
    assert debias(DEFAULT, ones, n, policy=MEMO, periods=np.array([1])).ci_low == today.ci_low
    # Seven days of 10,000 memoized devices = one day of them, not 70,000 reports.
    week = debias(DEFAULT, ones * 7, n * 7, policy=MEMO, periods=np.array([7]))
    assert week.ci_low[0] == pytest.approx(today.ci_low[0])
    assert week.design_effect[0] == 7  # type: ignore[index]
    naive = debias(DEFAULT, ones * 7, n * 7)
    assert naive.ci_high[0] - naive.ci_low[0] < 0.4 * (week.ci_high[0] - week.ci_low[0])


def test_periods_are_counted_per_bucket_and_per_rolling_window() -> None:
    hours = [DAY0 + timedelta(days=d, hours=h) for d in range(10) for h in (3, 15)]
    n = np.array([5] * len(hours))
    assert periods_in(hours, n, DEFAULT_POLICY) == 10
    assert periods_in(hours, n, CollectionPolicy(period="hour")) == 20
    assert periods_in(hours, n, CollectionPolicy(period="week")) == 2
    slots = np.array([i // 2 for i in range(len(hours))])
    assert list(bucket_periods(hours, n, slots, 10, DEFAULT_POLICY)) == [1] * 10
    days = [DAY0 + timedelta(days=d) for d in range(10)]
    got = rolling_periods(days, np.ones(10, np.int64), np.ones(10, np.int64), 86_400,
                          DEFAULT_POLICY, 7)
    assert list(got) == [1, 2, 3, 4, 5, 6, 7, 7, 7, 7]
    # Hour buckets under a daily period: 48 hours span 2 periods, whatever the hours.
    hourly = [DAY0 + timedelta(hours=h) for h in range(48)]
    got = rolling_periods(hourly, np.ones(48, np.int64), np.ones(48, np.int64), 3600,
                          DEFAULT_POLICY, 30)
    assert got[23] == 1 and got[24] == 2 and got[47] == 2


def _counts(days: int, n: int, ones: int, policy: CollectionPolicy = MEMO) -> MetricCounts:
    starts = [DAY0 + timedelta(days=d, hours=12) for d in range(days)]
    return MetricCounts(MetricInfo("m", "", DEFAULT, policy, 1), starts,
                        np.full(days, n, np.int64), np.full(days, ones, np.int64))


def test_series_summaries_and_rolling_windows_use_the_policy() -> None:
    counts = _counts(14, 2000, 800)
    week = series(counts, "week", DAY0, DAY0 + timedelta(days=14))
    assert list(week.estimates.periods) == [7, 7]  # type: ignore[arg-type]
    daily = series(counts, "day", DAY0, DAY0 + timedelta(days=14))
    rolled = rolling(daily, 7)
    assert list(rolled.estimates.periods[:8]) == [1, 2, 3, 4, 5, 6, 7, 7]  # type: ignore[index]
    one_day = daily.estimates.ci_high[0] - daily.estimates.ci_low[0]
    assert rolled.estimates.ci_high[10] - rolled.estimates.ci_low[10] == pytest.approx(one_day)
    s = summarize(counts)
    assert (s.periods, s.design_effect) == (14, 14.0)
    assert "share of devices" in s.estimand
    fresh = summarize(_counts(14, 2000, 800, FRESH))
    assert 1 < fresh.design_effect < 14


def test_comparing_two_memoized_windows_counts_devices() -> None:
    counts = _counts(14, 2000, 800)
    before, after = (DAY0, DAY0 + timedelta(days=7)), (DAY0 + timedelta(days=7),
                                                        DAY0 + timedelta(days=14))
    c = compare_windows(counts, before, after)
    one = window_estimate(counts, *before)
    assert one.stderr == pytest.approx(DEFAULT.estimate(800, 2000).stderr)  # one day's worth
    assert c.stderr == pytest.approx(np.hypot(one.stderr, one.stderr))


@pytest.mark.slow
def test_memoized_7_day_windows_cover_the_device_share() -> None:
    # The fast version of bench/coverage.py: 300 trials (the bench runs 500 per cell), so a
    # wider tolerance: 0.91 is over 3 standard errors below the 95% nominal.
    rng = np.random.default_rng(20261123)
    for population in ("same devices", "half replaced"):
        cell = simulate("memoized", population, 7, trials=300, devices=1000, share=0.3, rng=rng)
        assert cell.coverage >= 0.91, (population, cell)
    cell = simulate("memoized", "many calls", 7, trials=100, devices=1000, share=0.3, rng=rng,
                    gate_check_devices=50)  # through real PeriodGates
    assert cell.coverage >= 0.88, cell
    same = simulate("memoized", "same devices", 7, trials=150, devices=1000, share=0.3,
                    rng=rng)
    assert same.naive_coverage < 0.8  # what pooling 7 days as independent reports gave


def test_the_planner_speaks_in_devices_and_agrees_with_the_intervals() -> None:
    p1 = plan(DEFAULT, margin=0.02)
    p7 = plan(DEFAULT, margin=0.02, periods=7)
    assert p1.devices == p7.devices == 9604 and p7.reports == 7 * 9604  # memoized
    # The interval a window of that many devices gets, at the worst case (rate 1/2):
    n = np.array([p7.devices * 7])
    e = debias(DEFAULT, n // 2, n, policy=MEMO, periods=np.array([7]))
    assert (e.ci_high[0] - e.ci_low[0]) / 2 == pytest.approx(p7.margin, rel=0.01)
    # Fresh coins average their noise over periods: fewer devices for the same margin.
    fresh = plan(WIRE, margin=0.02, periods=7, policy=FRESH)
    assert fresh.devices < plan(WIRE, margin=0.02, periods=7).devices
    assert margin_for(WIRE, fresh.devices, periods=7, policy=FRESH) <= 0.02
    irr = plan(WIRE, margin=0.02, periods=7, policy=IRR)
    assert fresh.devices < irr.devices < plan(WIRE, margin=0.02, periods=7).devices


def test_a_clipped_interval_is_flagged_apart_from_a_clipped_estimate() -> None:
    e = DEFAULT.estimate(ones=2550, n=10_000)
    assert e.clipped is False and e.interval_clipped is True and e.ci_low == 0.0
    assert DEFAULT.estimate(ones=5000, n=10_000).interval_clipped is False
    assert DEFAULT.estimate(ones=2000, n=10_000).clipped is True
    arrays = debias(DEFAULT, np.array([2550, 5000, 0]), np.array([10_000, 10_000, 0]))
    assert list(arrays.interval_clipped) == [True, False, False]  # type: ignore[arg-type]
    assert list(arrays.clipped) == [False, False, False]
