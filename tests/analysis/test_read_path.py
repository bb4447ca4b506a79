"""The analysis in integer hour indexes (issue 28) gives exactly what the per-hour datetime
code gave: windows, series slots, the reporting periods each bucket and each rolling window
pools, on random counters under every collection period (the old code, kept here as the
reference); and one debiasing of a report's range and its two halves is the three separate
ones."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from deniable.analysis.compare import (ComparisonError, category_changes, compare_categories,
                                       compare_windows, window_change)
from deniable.analysis.estimate import (summarize, summarize_windows, window_categories,
                                        window_estimate, window_values)
from deniable.analysis.sources import MetricCounts, MetricInfo, bucket_hours
from deniable.analysis.timeseries import floor, rolling, series
from deniable.analysis.window import bucket_periods, period_ids, periods_in, rolling_periods
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import CollectionPolicy
from deniable.core import keys

UTC = timezone.utc
POLICIES = [CollectionPolicy(period=p) for p in ("hour", "day", "week")] + \
    [CollectionPolicy(memoization="fresh", period="day")]


def _counts(rng: np.random.Generator, policy: CollectionPolicy) -> MetricCounts:
    """Random non-empty hours over about ten weeks (some runs of empty hours), random n."""
    first = keys.hour_index(datetime(2026, 9, 1, tzinfo=UTC)) + int(rng.integers(0, 200))
    hours = np.unique(first + rng.integers(0, 24 * 70, int(rng.integers(1, 600))))
    n = rng.integers(0, 40, hours.size)  # n = 0 rows too: a source may send them
    ones = rng.binomial(n, 0.4)
    info = MetricInfo("m", "", RandomizedResponse.from_id("rr:1/2:1/2"), policy, 1)
    return MetricCounts(info, hours, n, ones)


def _moment(rng: random.Random, counts: MetricCounts) -> datetime:
    lo, hi = int(counts.hours[0]) - 30, int(counts.hours[-1]) + 30
    return keys.hour_start(rng.randrange(lo, hi)) + timedelta(
        seconds=rng.choice([0, 0, 1, 1799, 3599]), microseconds=rng.choice([0, 1, 999_999]))


# The code before issue 28: a datetime per hour.

def old_window_values(counts: MetricCounts, start: datetime | None, end: datetime | None,
                      every: list[datetime]) -> tuple[list[int], int]:
    """``every``: ``counts.starts``, built once."""
    mask = np.array([(start is None or start <= s) and (end is None or s < end)
                     for s in every], dtype=bool)
    starts = [s for s, m in zip(every, mask) if m]
    values = counts.values[mask] if mask.size else counts.values
    ids = np.array([int(s.timestamp()) // 3600 for s in starts], dtype=np.int64)
    ids = period_ids(ids, counts.metric.policy)[values[:, 0] > 0]
    return values.sum(axis=0).tolist(), max(int(np.unique(ids).size), 1)


def old_bucket_periods(hours: np.ndarray, n: np.ndarray, slots: np.ndarray, buckets: int,
                       policy: CollectionPolicy) -> list[int]:
    ids = period_ids(hours, policy)
    keep = (slots >= 0) & (n > 0)
    if not keep.any():
        return [0] * buckets
    pairs = np.unique(np.stack([slots[keep], ids[keep]]), axis=1)
    return np.bincount(pairs[0], minlength=buckets).tolist()


def old_series_slots(counts: MetricCounts, granularity: str, starts: list[datetime]
                     ) -> np.ndarray:
    index = {s: i for i, s in enumerate(starts)}
    return np.array([index.get(floor(s, granularity), -1) for s in counts.starts], np.int64)


def old_rolling_periods(starts: list[datetime], n: np.ndarray, periods: np.ndarray,
                        step_seconds: float, policy: CollectionPolicy, window: int) -> list[int]:
    if step_seconds >= policy.period_seconds:
        return [int(periods[max(0, i - window + 1):i + 1].sum()) for i in range(len(periods))]
    ids = period_ids(np.array([int(s.timestamp()) // 3600 for s in starts], np.int64), policy)
    busy = n > 0
    return [int(np.unique(ids[max(0, i - window + 1):i + 1][busy[max(0, i - window + 1):i + 1]])
                .size) for i in range(len(periods))]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.memoization}-{p.period}")
def test_windows_pool_the_same_hours_and_periods(policy: CollectionPolicy) -> None:
    rng, pick = np.random.default_rng(28), random.Random(28)
    for _ in range(25):
        counts = _counts(rng, policy)
        every = counts.starts
        for _ in range(8):
            start = pick.choice([None, _moment(pick, counts)])
            end = pick.choice([None, _moment(pick, counts)])
            total, periods = window_values(counts, start, end)
            assert (total.tolist(), periods) == old_window_values(counts, start, end, every)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.memoization}-{p.period}")
@pytest.mark.parametrize("granularity", ["hour", "day", "week"])
def test_series_and_rolling_windows_pool_the_same_periods(policy: CollectionPolicy,
                                                          granularity: str) -> None:
    rng, pick = np.random.default_rng(6), random.Random(6)
    for _ in range(4 if granularity == "hour" else 10):
        counts = _counts(rng, policy)
        start, end = sorted([_moment(pick, counts), _moment(pick, counts)])
        ts = series(counts, granularity, start, end)
        slots = old_series_slots(counts, granularity, ts.starts)
        expected = old_bucket_periods(counts.hours, counts.n, slots, len(ts), policy)
        assert ts.estimates.periods.tolist() == expected  # type: ignore[union-attr]
        assert np.array_equal(ts.hours, [keys.hour_index(s) for s in ts.starts])
        for window in (1, 2, 7, 30):
            rolled = rolling(ts, window)
            assert rolled.estimates.periods.tolist() == old_rolling_periods(  # type: ignore[union-attr]
                ts.starts, ts.n, np.asarray(expected), ts.step.total_seconds(), policy, window)
        assert periods_in(counts.hours, counts.n, policy) == \
            old_window_values(counts, None, None, counts.starts)[1] or not counts.n.any()


def test_bucket_and_rolling_periods_of_hours_out_of_order() -> None:
    rng = np.random.default_rng(3)
    policy = CollectionPolicy(period="day")
    for _ in range(50):
        hours = rng.integers(490_000, 490_000 + 24 * 30, 300)
        n = rng.integers(0, 3, 300)
        slots = rng.integers(-1, 9, 300)
        assert bucket_periods(hours, n, slots, 9, policy).tolist() == \
            old_bucket_periods(hours, n, slots, 9, policy)
        starts = [keys.hour_start(int(h)) for h in hours]
        window = int(rng.integers(1, 12))
        assert rolling_periods(hours, n, np.ones(300, np.int64), 3600, policy,
                               window).tolist() == old_rolling_periods(
            starts, n, np.ones(300, np.int64), 3600, policy, window)


KINDS = {"boolean": None,
         "numeric": MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000),
         "categorical": MetricSpec.build("categorical", epsilon=2.0,
                                         categories=["a", "b", "c", "d", "e"])}


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_debiasing_of_the_range_and_its_halves_is_three_separate_ones(kind: str) -> None:
    """``summarize_windows`` (what ``analyze`` uses) against ``summarize``,
    ``window_estimate``/``window_categories`` and the comparisons made one by one: the same
    numbers, to the bit (repr: NaN equals NaN there)."""
    spec = KINDS[kind]
    rng, pick = np.random.default_rng(11), random.Random(11)
    compared = 0
    for policy in POLICIES:
        for _ in range(6):
            counts = _counts(rng, policy)
            if spec is not None:
                values = np.column_stack([counts.n, *(rng.binomial(counts.n, 0.3)
                                                      for _ in range(spec.mechanism.width - 1))])
                info = MetricInfo("m", "", spec.mechanism, policy, 1, spec)
                counts = MetricCounts(info, counts.hours, values=values)
            start, end = sorted([_moment(pick, counts), _moment(pick, counts)])
            split = start + (end - start) / 3
            windows = [(start, split), (split, end)]
            summary, found = summarize_windows(counts, windows, 0.9, start=start, end=end)
            assert repr(summary) == repr(summarize(counts, 0.9, start=start, end=end))
            one_by_one = [window_categories(counts, *w, confidence=0.9) if spec is not None
                          and kind == "categorical" else window_estimate(counts, *w, 0.9)
                          for w in windows]
            assert repr(found) == repr(one_by_one)
            try:
                expected = (compare_categories(counts, *windows, confidence=0.9,
                                               correction=None) if kind == "categorical"
                            else [compare_windows(counts, *windows, confidence=0.9)])
            except ComparisonError:
                continue
            made = (category_changes(counts.metric, *found, *windows, confidence=0.9,
                                     correction=None) if kind == "categorical"
                    else [window_change(counts.metric, *found, *windows, confidence=0.9)])
            assert repr(made) == repr(expected)
            compared += 1
    assert compared >= 10  # most ranges have reports on both sides


def test_counts_api_starts_become_the_same_hour_indexes() -> None:
    """The counts API's bucket starts, parsed by numpy at once, are the hour indexes
    ``datetime.fromisoformat`` gives one by one (other offsets take that path)."""
    rng = np.random.default_rng(5)
    hours = rng.integers(-50_000, 1_500_000, 2000)
    utc = [keys.hour_start(int(h)).isoformat() for h in hours]
    assert all(s.endswith("+00:00") for s in utc)
    assert bucket_hours(utc).tolist() == hours.tolist()
    shifted = [keys.hour_start(int(h)).astimezone(timezone(timedelta(hours=5, minutes=30)))
               .isoformat() for h in hours[:50]]
    assert bucket_hours(shifted).tolist() == hours[:50].tolist()
    assert bucket_hours([]).tolist() == []
