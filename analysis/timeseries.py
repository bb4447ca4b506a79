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

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
from numpy.typing import NDArray

from deniable.analysis.estimate import Estimates, debias
from deniable.analysis.sources import MetricCounts, MetricInfo

GRANULARITIES = ("hour", "day", "week")
STEPS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


class TimeSeriesError(ValueError):
    """A granularity, range or window that makes no series."""


@dataclass(frozen=True)
class TimeSeries:
    """One metric's estimates per bucket.

    Attributes:
        metric: the metric and its mechanism.
        granularity: "hour", "day" or "week".
        starts: bucket start times (UTC), evenly spaced, shape (buckets,).
        estimates: per-bucket counts and estimates, every array of shape (buckets,).
        window: for a rolling series, how many buckets each value pools (1 otherwise);
            ``starts[i]`` is then the start of the *last* bucket in the window.
    """

    metric: MetricInfo
    granularity: str
    starts: list[datetime]
    estimates: Estimates
    window: int = 1

    @property
    def step(self) -> timedelta:
        return STEPS[self.granularity]

    @property
    def ends(self) -> list[datetime]:
        """Each bucket's end (exclusive)."""
        return [s + self.step for s in self.starts]

    def __len__(self) -> int:
        return len(self.starts)


def floor(moment: datetime, granularity: str) -> datetime:
    """The start of the UTC bucket holding ``moment`` (naive times are UTC)."""
    _check_granularity(granularity)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
    if granularity == "hour":
        return moment
    moment = moment.replace(hour=0)
    if granularity == "week":
        moment -= timedelta(days=moment.weekday())  # ISO weeks start on Monday
    return moment


def grid(start: datetime, end: datetime, granularity: str) -> list[datetime]:
    """Every bucket start overlapping [start, end), oldest first."""
    step = STEPS[_check_granularity(granularity)]
    end = end.replace(tzinfo=timezone.utc) if end.tzinfo is None else end
    moment, starts = floor(start, granularity), []
    while moment < end:
        starts.append(moment)
        moment += step
    return starts


def rollup(counts: MetricCounts, granularity: str = "day", start: datetime | None = None,
           end: datetime | None = None) -> tuple[list[datetime], NDArray[np.int64],
                                                 NDArray[np.int64]]:
    """Sum hour buckets into evenly spaced buckets; return (starts, n, ones).

    The range defaults to the span of the hour buckets present; buckets with no reports have
    n = ones = 0.
    """
    _check_granularity(granularity)
    if start is None or end is None:
        if not counts.starts:
            return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
        start = start or counts.starts[0]
        end = end or counts.starts[-1] + timedelta(hours=1)
    starts = grid(start, end, granularity)
    index = {s: i for i, s in enumerate(starts)}
    n = np.zeros(len(starts), np.int64)
    ones = np.zeros(len(starts), np.int64)
    slots = np.array([index.get(floor(s, granularity), -1) for s in counts.starts], np.int64)
    inside = slots >= 0
    np.add.at(n, slots[inside], counts.n[inside])
    np.add.at(ones, slots[inside], counts.ones[inside])
    return starts, n, ones


def series(counts: MetricCounts, granularity: str = "day", start: datetime | None = None,
           end: datetime | None = None, confidence: float = 0.95) -> TimeSeries:
    """Estimates and intervals per hour, day or week bucket over [start, end)."""
    starts, n, ones = rollup(counts, granularity, start, end)
    return TimeSeries(counts.metric, granularity, starts,
                      debias(counts.metric.mechanism, ones, n, confidence))


def rolling(ts: TimeSeries, window: int) -> TimeSeries:
    """Pool each bucket with the ``window - 1`` before it (e.g. window=7 on days: 7 days).

    Counts are summed, then debiased, so each value is the estimate over the whole window, with
    its own interval and n. The first ``window - 1`` values pool fewer buckets (what exists).
    """
    if window < 1:
        raise TimeSeriesError(f"window must be at least 1 bucket. Got {window} instead.")
    e = ts.estimates
    n = _trailing_sum(e.n, window)
    ones = _trailing_sum(e.ones, window)
    return TimeSeries(ts.metric, ts.granularity, list(ts.starts),
                      debias(ts.metric.mechanism, ones, n, e.confidence), window * ts.window)


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
    mask = np.array([start <= s < end for s in counts.starts], dtype=bool)
    if not mask.any():
        return 0, 0
    return int(counts.n[mask].sum()), int(counts.ones[mask].sum())

