"""Periods and rollups: THE definition of hour, day and week buckets (UTC; weeks start on
Monday, as ISO 8601 weeks), used by the collector's counts endpoint and by the analysis.

Periods are computed on integer hour indexes (hours since the Unix epoch, ``keys.hour_index``)
with integer arithmetic only, so the same functions floor one ``int`` or a whole numpy array
of them (the analysis' hot path) and give the same answer.

Counters are plain sums, so a day's ``n`` and ``ones`` are the sums of its hours': the
estimator works on rolled-up counts exactly as on hourly ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from deniable.collector.keys import hour_index, hour_start

GRANULARITIES = ("hour", "day", "week")
SPAN = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
SPAN_HOURS = {"hour": 1, "day": 24, "week": 168}
_EPOCH_WEEKDAY = 3
"""1970-01-01 was a Thursday: weekday 3 with Monday = 0."""



@dataclass(frozen=True)
class HourCount:
    """Perturbed counts for one metric in one UTC hour (or rolled-up period) bucket."""

    start: datetime
    n: int
    ones: int
    counts: tuple[int, ...] = ()
    """Every counter slot (n, then ones or one count per category); () means (n, ones)."""

    def __post_init__(self) -> None:
        if not self.counts:
            object.__setattr__(self, "counts", (self.n, self.ones))


Hours = TypeVar("Hours")  # an int, or a numpy integer array


def check_granularity(granularity: str) -> str:
    """``granularity`` itself, or ValueError naming the allowed ones."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}. "
                         f"Got {granularity!r} instead.")
    return granularity


def period_hour(hours: Hours, granularity: str) -> Hours:
    """The first hour index of the hour, UTC day or Monday-based week holding each of
    ``hours`` (an int or an integer array; floor division, so negative indexes work too)."""
    if granularity == "hour":
        return hours
    days = hours // 24  # type: ignore[operator]
    if granularity == "day":
        return days * 24  # type: ignore[no-any-return,return-value]
    if granularity == "week":
        return ((days + _EPOCH_WEEKDAY) // 7 * 7 - _EPOCH_WEEKDAY) * 24  # type: ignore[no-any-return,return-value]
    check_granularity(granularity)
    raise AssertionError("unreachable")


def period_start(moment: datetime, granularity: str) -> datetime:
    """The start of the UTC hour, day or (Monday-based) week holding ``moment``."""
    return hour_start(period_hour(hour_index(moment), check_granularity(granularity)))


def align(start: datetime, end: datetime, granularity: str) -> tuple[datetime, datetime]:
    """Widen [start, end) to whole periods: floor ``start``, ceil ``end``."""
    first = period_start(start, granularity)
    last = period_start(end, granularity)
    end_utc = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
    if last < end_utc:
        last += SPAN[granularity]
    return first, last


def grid_hours(start: datetime, end: datetime, granularity: str) -> tuple[int, int]:
    """(first period's hour index, number of periods) of the periods overlapping [start, end)."""
    step = SPAN_HOURS[check_granularity(granularity)]
    first = period_hour(hour_index(start), granularity)
    end_utc = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
    last = period_hour(hour_index(end_utc), granularity)
    if hour_start(last) < end_utc:
        last += step
    return first, max(0, (last - first) // step)


def rollup(hours: list[HourCount], granularity: str) -> list[HourCount]:
    """Sum hour buckets per period, every counter slot; only non-empty periods, oldest
    first."""
    check_granularity(granularity)
    sums: dict[int, list[int]] = {}
    for h in hours:
        total = sums.setdefault(period_hour(hour_index(h.start), granularity),
                                [0] * len(h.counts))
        for j, v in enumerate(h.counts):
            total[j] += v
    return [HourCount(hour_start(first), total[0], total[1], tuple(total))
            for first, total in sorted(sums.items())]
