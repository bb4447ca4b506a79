"""Time series: hour buckets rolled up into hour, day or ISO-week buckets, and rolling windows.

The collector counts reports per UTC hour of *receipt* (never a device clock). Rolling up is a
plain sum of those hour counters, so a day or week bucket is exactly the reports received in it:

- ``hour``: the collector's own buckets;
- ``day``: UTC midnight to midnight;
- ``week``: ISO weeks, Monday 00:00 UTC to the next Monday.

Every bucket of the requested range is present, with n = 0 where nothing arrived, so series are
evenly spaced. Estimates come from ``deniable.analysis.estimate.debias``, the mechanism's own
estimator applied to arrays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from deniable.analysis.estimate import Estimates, debias_values
from deniable.analysis.sources import MetricCounts, MetricInfo
from deniable.core import periods
from deniable.analysis.window import bucket_periods, rolling_periods

if TYPE_CHECKING:
    from deniable.analysis.categorical import CategoryEstimates

GRANULARITIES = periods.GRANULARITIES
STEPS = periods.SPAN


class TimeSeriesError(ValueError):
    """A granularity, range or window that makes no series."""


@dataclass(frozen=True)
class TimeSeries:
    """One metric's estimates per bucket.

    Attributes:
        metric: the metric and its mechanism.
        granularity: "hour", "day" or "week".
        starts: bucket start times (UTC), evenly spaced, shape (buckets,).
        estimates: per-bucket counts and estimates, every array of shape (buckets,): the share
            of yes (boolean) or the mean in the metric's units (numeric); for categorical and
            histogram metrics per-category shares, shape (buckets, d), with per-category
            (marginal) intervals.
        window: for a rolling series, how many buckets each value pools (1 otherwise);
            ``starts[i]`` is then the start of the *last* bucket in the window.
        range_start, range_end: the range asked for, [start, end); buckets it cuts are
            partial, and say so in every output.
    """

    metric: MetricInfo
    granularity: str
    starts: list[datetime]
    estimates: Estimates
    window: int = 1
    range_start: datetime | None = None
    range_end: datetime | None = None
    values: NDArray[np.int64] | None = None
    """The summed counter slots per bucket, shape (buckets, width)."""
    simultaneous: Estimates | None = None
    """Categorical and histogram metrics: intervals that hold for every category of a bucket
    at once (Bonferroni), shape (buckets, d)."""

    @property
    def kind(self) -> str:
        return self.metric.kind

    @property
    def n(self) -> NDArray[np.int64]:
        """Reports per bucket, shape (buckets,)."""
        if self.values is not None:
            return self.values[:, 0]
        return self.estimates.n if self.estimates.n.ndim == 1 else self.estimates.n[:, 0]

    def categories(self, i: int) -> CategoryEstimates:
        """Bucket ``i`` of a categorical or histogram series as CategoryEstimates."""
        from deniable.analysis.categorical import from_arrays

        if self.simultaneous is None or self.values is None:
            raise TimeSeriesError(f"{self.metric.name} is {self.kind}, not categorical")
        periods = self.estimates.periods
        return from_arrays(self.metric.spec.labels, self.values, self.estimates,
                           self.simultaneous, i, self.metric.mechanism,
                           int(periods[i].max()) if periods is not None else 1)

    @property
    def step(self) -> timedelta:
        return STEPS[self.granularity]

    @property
    def hours(self) -> NDArray[np.int64]:
        """Bucket starts as hour indexes (hours since the Unix epoch), shape (buckets,)."""
        return np.array([periods.hour_index(s) for s in self.starts], dtype=np.int64)

    @property
    def ends(self) -> list[datetime]:
        """Each bucket's end (exclusive)."""
        return [s + self.step for s in self.starts]

    def __len__(self) -> int:
        return len(self.starts)


def floor(moment: datetime, granularity: str) -> datetime:
    """The start of the UTC bucket holding ``moment`` (naive times are UTC)."""
    return periods.period_start(moment, _check_granularity(granularity))


def grid(start: datetime, end: datetime, granularity: str) -> list[datetime]:
    """Every bucket start overlapping [start, end), oldest first."""
    first, count = _grid_hours(start, end, _check_granularity(granularity))
    return list(_grid_starts(first, count, granularity))


def _grid_hours(start: datetime, end: datetime, granularity: str) -> tuple[int, int]:
    return periods.grid_hours(start, end, granularity)


@functools.lru_cache(maxsize=64)
def _grid_starts(first: int, count: int, granularity: str) -> tuple[datetime, ...]:
    """Bucket starts as datetimes, built once per grid (every metric of a report shares it)."""
    step = periods.SPAN_HOURS[granularity]
    return tuple(periods.hour_start(first + i * step) for i in range(count))


def rollup(counts: MetricCounts, granularity: str = "day", start: datetime | None = None,
           end: datetime | None = None) -> tuple[list[datetime], NDArray[np.int64],
                                                 NDArray[np.int64]]:
    """Sum hour buckets into evenly spaced buckets; return (starts, n, ones) (for a
    categorical metric ``ones`` is the first category's count: see ``rollup_values``).

    The range defaults to the span of the hour buckets present; buckets with no reports have
    n = ones = 0. Periods are ``collector.rollup``'s, computed on the hour indexes in numpy.
    """
    starts, values = rollup_values(counts, granularity, start, end)
    return starts, values[:, 0].copy(), values[:, 1].copy()


def rollup_values(counts: MetricCounts, granularity: str = "day",
                  start: datetime | None = None, end: datetime | None = None
                  ) -> tuple[list[datetime], NDArray[np.int64]]:
    """Sum hour buckets' counter slots into evenly spaced buckets: (starts, values of shape
    (buckets, width)), every slot summed as ``rollup`` sums n and ones."""
    starts, values, _ = _rolled(counts, granularity, start, end)
    return starts, values


def _rolled(counts: MetricCounts, granularity: str, start: datetime | None,
            end: datetime | None) -> tuple[list[datetime], NDArray[np.int64], NDArray[np.int64]]:
    """``rollup_values``, and the index of the bucket holding each hour (-1: outside)."""
    _check_granularity(granularity)
    if start is None or end is None:
        if not len(counts.hours):
            return [], np.zeros((0, counts.width), np.int64), np.zeros(0, np.int64)
        start = start or periods.hour_start(int(counts.hours[0]))
        end = end or periods.hour_start(int(counts.hours[-1]) + 1)
    first, count = _grid_hours(start, end, granularity)
    step = periods.SPAN_HOURS[granularity]
    # Hours are sorted (MetricCounts sorts them), so their slots are too: the grid's hours are
    # one slice, and each slot's sum one reduceat over the run where it starts.
    slots = (periods.period_hour(counts.hours, granularity) - first) // step
    lo, hi = np.searchsorted(slots, [0, count])
    inside = slots[lo:hi]
    values = np.zeros((count, counts.width), np.int64)
    if len(inside):
        edges = np.flatnonzero(np.concatenate(([True], inside[1:] != inside[:-1])))
        values[inside[edges]] = np.add.reduceat(counts.values[lo:hi], edges, axis=0)
    held = np.full(len(slots), -1, np.int64)
    held[lo:hi] = inside
    return list(_grid_starts(first, count, granularity)), values, held


def series(counts: MetricCounts, granularity: str = "day", start: datetime | None = None,
           end: datetime | None = None, confidence: float = 0.95) -> TimeSeries:
    """Estimates and intervals per hour, day or week bucket over [start, end)."""
    starts, values, slots = _rolled(counts, granularity, start, end)
    # Each bucket's reporting periods: its interval holds over all of them (analysis.window).
    pooled = bucket_periods(counts.hours, counts.n, slots, len(starts), counts.metric.policy)
    estimates, simultaneous = debias_values(counts.metric, values, confidence, pooled)
    return TimeSeries(counts.metric, granularity, starts, estimates, 1, start, end, values,
                      simultaneous)


def rolling(ts: TimeSeries, window: int) -> TimeSeries:
    """Pool each bucket with the ``window - 1`` before it (e.g. window=7 on days: 7 days).

    Counts are summed, then debiased, so each value is the estimate over the whole window, with
    its own interval and n. The first ``window - 1`` values pool fewer buckets (what exists).
    """
    if window < 1:
        raise TimeSeriesError(f"window must be at least 1 bucket. Got {window} instead.")
    e = ts.estimates
    n = ts.n
    values = ts.values if ts.values is not None else np.stack([e.n, e.ones], axis=1)
    rolled = np.stack([_trailing_sum(values[:, j], window) for j in range(values.shape[1])],
                      axis=1) if len(values) else values
    own = e.periods if e.periods is None or e.periods.ndim == 1 else e.periods[:, 0]
    pooled = rolling_periods(ts.hours, n, own if own is not None
                             else (n > 0).astype(np.int64), ts.step.total_seconds(),
                             ts.metric.policy, window)
    estimates, simultaneous = debias_values(ts.metric, rolled, e.confidence, pooled)
    return TimeSeries(ts.metric, ts.granularity, list(ts.starts), estimates,
                      window * ts.window, ts.range_start, ts.range_end, rolled, simultaneous)


def _trailing_sum(values: NDArray[np.int64], window: int) -> NDArray[np.int64]:
    cumulative = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    index = np.arange(1, len(values) + 1)
    return cumulative[index] - cumulative[np.maximum(index - window, 0)]


def _check_granularity(granularity: str) -> str:
    if granularity not in GRANULARITIES:
        raise TimeSeriesError(f"granularity must be one of {GRANULARITIES}. "
                              f"Got {granularity!r} instead.")
    return granularity


def window_counts(counts: MetricCounts, start: datetime, end: datetime) -> tuple[int, int]:
    """(n, ones) summed over the hour buckets that start in [start, end)."""
    within = counts.between(start, end)
    return int(counts.n[within].sum()), int(counts.ones[within].sum())
