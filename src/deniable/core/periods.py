"""Hours and periods: THE definition of UTC hour indexes and of hour, day and week flooring.

Pure (standard library only, no I/O), imported by the collector (``keys``, ``rollup``,
``window``) and by the analysis, so the counters' hours and the estimates' buckets can never
disagree. It belongs with the other pure modules that both sides share, and moves with them.

Every bucket is counted in **hour indexes**: whole hours since the Unix epoch, UTC
(``hour_index``). A period of a granularity (``"hour"``, ``"day"`` or ``"week"``: UTC midnight
to midnight, ISO weeks from Monday 00:00 UTC) is numbered ``period_number(h) = (h + offset) //
span`` (span 1, 24 or 168 hours; offset 72 hours for weeks, as 1970-01-01 was a Thursday) and
starts at hour ``period_hour(h) = period_number(h) * span - offset``. Integer arithmetic only,
so the same functions take one ``int`` or a whole numpy integer array element-wise and give the
same answer; datetimes come in and go out only at the edges (``hour_index``, ``hour_start``).

The reporting period of a collection policy (``CollectionPolicy.period_index``) is
``period_number`` of its ``period``: the same numbers, on hours instead of seconds.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TypeVar

HOUR_SECONDS = 3600
HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

GRANULARITIES = ("hour", "day", "week")
SPAN_HOURS = {"hour": 1, "day": 24, "week": 168}
"""Hours per period of each granularity."""
SPAN = {g: timedelta(hours=h) for g, h in SPAN_HOURS.items()}
OFFSET_HOURS = {"hour": 0, "day": 0, "week": 72}
"""1970-01-01 00:00 UTC was a Thursday: ISO weeks (from Monday) start 72 hours off the epoch."""

Hours = TypeVar("Hours")  # an int, or a numpy integer array


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware time: naive times are UTC."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def hour_index(moment: datetime) -> int:
    """Hours since the Unix epoch of the UTC hour holding ``moment`` (naive times are UTC);
    exact (timedelta arithmetic, no float)."""
    return (utc(moment) - EPOCH) // HOUR


def hour_start(index: int) -> datetime:
    """The start (UTC, aware) of hour ``index``."""
    return EPOCH + timedelta(hours=int(index))


def first_hour_from(moment: datetime) -> int:
    """The first hour index whose start is at or after ``moment``: hour h starts in
    [start, end) iff ``first_hour_from(start) <= h < first_hour_from(end)``."""
    return -((EPOCH - utc(moment)) // HOUR)


def hour_range(start: datetime, end: datetime) -> tuple[int, int]:
    """[first, end) hour indexes of the hour buckets overlapping [start, end)."""
    first = hour_index(start)
    return first, max(first, first_hour_from(end))


def hour_floor(moment: datetime) -> datetime:
    """The start of the UTC hour holding ``moment`` (naive times are UTC), as a UTC time."""
    return hour_start(hour_index(moment))


def check_granularity(granularity: str) -> str:
    """``granularity`` itself, or ValueError naming the allowed ones."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}. "
                         f"Got {granularity!r} instead.")
    return granularity


def period_number(hours: Hours, granularity: str) -> Hours:
    """The number of the UTC hour, day or Monday-based week holding each of ``hours`` (an int
    or an integer array; floor division, so negative indexes work too). For a collection
    policy's ``period``, the same number as ``CollectionPolicy.period_index``."""
    span = SPAN_HOURS[check_granularity(granularity)]
    return (hours + OFFSET_HOURS[granularity]) // span  # type: ignore[operator,no-any-return,return-value]


def period_hour(hours: Hours, granularity: str) -> Hours:
    """The first hour index of the hour, UTC day or Monday-based week holding each of
    ``hours`` (an int or an integer array)."""
    if granularity == "hour":
        return hours
    first = period_number(hours, granularity) * SPAN_HOURS[granularity]  # type: ignore[operator]
    return first - OFFSET_HOURS[granularity]  # type: ignore[no-any-return,return-value]


def period_start(moment: datetime, granularity: str) -> datetime:
    """The start of the UTC hour, day or (Monday-based) week holding ``moment``."""
    return hour_start(period_hour(hour_index(moment), check_granularity(granularity)))


def period_end_hour(moment: datetime, granularity: str) -> int:
    """The first hour index of the first period (of ``granularity``) starting at or after
    ``moment``: period boundaries are hour boundaries, so it is the ceiling of the hour's."""
    step = SPAN_HOURS[check_granularity(granularity)]
    offset = OFFSET_HOURS[granularity]
    return -(-(first_hour_from(moment) + offset) // step) * step - offset


def grid_hours(start: datetime, end: datetime, granularity: str) -> tuple[int, int]:
    """(first period's hour index, number of periods) of the periods overlapping [start, end)."""
    step = SPAN_HOURS[check_granularity(granularity)]
    first = period_hour(hour_index(start), granularity)
    return first, max(0, (period_end_hour(end, granularity) - first) // step)


def align(start: datetime, end: datetime, granularity: str) -> tuple[datetime, datetime]:
    """Widen [start, end) to whole periods: floor ``start``, ceil ``end``."""
    return (period_start(start, granularity),
            hour_start(period_end_hour(end, granularity)))


def period_label(start_hour: int, period: str) -> str:
    """A reporting period by its start (hours since the epoch, UTC), as people read it:
    ``2026-11-23`` for a day, ``week of 2026-11-23`` (its Monday) for a week,
    ``2026-11-23 14:00`` for an hour."""
    start = hour_start(start_hour)
    if period == "hour":
        return f"{start:%Y-%m-%d %H:00}"
    return f"{'week of ' if period == 'week' else ''}{start:%Y-%m-%d}"
