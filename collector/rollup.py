"""Roll hour buckets up to days and weeks (UTC; weeks start on Monday, as ISO 8601 weeks).

Counters are plain sums, so a day's ``n`` and ``ones`` are the sums of its hours': the
estimator works on rolled-up counts exactly as on hourly ones.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from deniable.collector.keys import bucket_start
from deniable.collector.store import HourCount

GRANULARITIES = ("hour", "day", "week")
SPAN = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


def period_start(moment: datetime, granularity: str) -> datetime:
    """The start of the UTC hour, day or (Monday-based) week holding ``moment``."""
    hour = bucket_start(moment)
    if granularity == "hour":
        return hour
    day = hour.replace(hour=0)
    if granularity == "day":
        return day
    if granularity == "week":
        return day - timedelta(days=day.weekday())
    raise ValueError(f"granularity must be one of {GRANULARITIES}. Got {granularity!r} instead.")


def align(start: datetime, end: datetime, granularity: str) -> tuple[datetime, datetime]:
    """Widen [start, end) to whole periods: floor ``start``, ceil ``end``."""
    first = period_start(start, granularity)
    last = period_start(end, granularity)
    end_utc = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
    if last < end_utc:
        last += SPAN[granularity]
    return first, last


def rollup(hours: list[HourCount], granularity: str) -> list[HourCount]:
    """Sum hour buckets per period; only non-empty periods, oldest first."""
    sums: dict[datetime, list[int]] = {}
    for h in hours:
        total = sums.setdefault(period_start(h.start, granularity), [0, 0])
        total[0] += h.n
        total[1] += h.ones
    return [HourCount(start, n, ones) for start, (n, ones) in sorted(sums.items())]
