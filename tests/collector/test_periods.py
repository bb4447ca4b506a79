"""Hour indexes and period flooring, defined once (``src/deniable/core/periods.py``): the same answers
as the datetime formulas they replaced (issue 28), on random times of many years, for one
``int`` and for numpy arrays alike, and the places that use them agree."""
from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from deniable.client.period import CollectionPolicy
from deniable.core import keys, periods, rollup, window

UTC = timezone.utc
SPAN = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


def _random_times(count: int, seed: int) -> list[datetime]:
    """Random aware and naive times from 1960 to 2100, with minutes, seconds and microseconds,
    plus every hour boundary of a stretch around a year end."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        moment = datetime(1960, 1, 1, tzinfo=UTC) + timedelta(
            seconds=rng.randrange(0, 140 * 365 * 86_400), microseconds=rng.randrange(10 ** 6))
        offset = rng.choice([None, 0, 5.5, -8, 13])
        if offset is None:
            found.append(moment.replace(tzinfo=None))
        else:
            found.append(moment.astimezone(timezone(timedelta(hours=offset))))
    edge = datetime(2026, 12, 28, tzinfo=UTC)
    found += [edge + timedelta(hours=h) for h in range(-24, 24 * 9)]
    return found


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


# The formulas before issue 28 (keys.py, rollup.py, window.py), as references.

def old_hour_index(moment: datetime) -> int:
    return int(_utc(moment).timestamp() // 3600)


def old_hour_start(index: int) -> datetime:
    return datetime.fromtimestamp(index * 3600, UTC)


def old_period_hour(hours: int, granularity: str) -> int:
    if granularity == "hour":
        return hours
    days = hours // 24
    if granularity == "day":
        return days * 24
    return ((days + 3) // 7 * 7 - 3) * 24


def old_period_start(moment: datetime, granularity: str) -> datetime:
    return old_hour_start(old_period_hour(old_hour_index(moment), granularity))


def old_align(start: datetime, end: datetime, granularity: str) -> tuple[datetime, datetime]:
    first = old_period_start(start, granularity)
    last = old_period_start(end, granularity)
    if last < _utc(end):
        last += SPAN[granularity]
    return first, last


def old_grid_hours(start: datetime, end: datetime, granularity: str) -> tuple[int, int]:
    step = {"hour": 1, "day": 24, "week": 168}[granularity]
    first = old_period_hour(old_hour_index(start), granularity)
    last = old_period_hour(old_hour_index(_utc(end)), granularity)
    if old_hour_start(last) < _utc(end):
        last += step
    return first, max(0, (last - first) // step)


def old_hour_range(start: datetime, end: datetime) -> tuple[int, int]:
    first = old_hour_index(start)
    last = old_hour_index(_utc(end))
    if old_hour_start(last) < _utc(end):
        last += 1
    return first, max(first, last)


def old_first_hour_from(moment: datetime) -> int:
    return -(-int(math.ceil(_utc(moment).timestamp())) // 3600)


TIMES = _random_times(3000, 28)


def test_hour_indexes_and_starts_are_the_datetime_formulas() -> None:
    for moment in TIMES:
        index = periods.hour_index(moment)
        assert index == old_hour_index(moment) == keys.hour_index(moment), moment
        assert periods.hour_start(index) == old_hour_start(index)
        assert periods.hour_start(index).tzinfo is UTC
        assert periods.first_hour_from(moment) == old_first_hour_from(moment), moment
        assert periods.hour_floor(moment) == keys.bucket_start(moment) == old_hour_start(index)


@pytest.mark.parametrize("granularity", ["hour", "day", "week"])
def test_period_flooring_is_the_datetime_formulas(granularity: str) -> None:
    rng = random.Random(granularity)
    for moment in TIMES:
        assert periods.period_start(moment, granularity) == \
            old_period_start(moment, granularity) == rollup.period_start(moment, granularity)
        end = moment + timedelta(seconds=rng.randrange(-86_400, 40 * 86_400))
        assert periods.align(moment, end, granularity) == old_align(moment, end, granularity)
        assert periods.grid_hours(moment, end, granularity) == \
            old_grid_hours(moment, end, granularity)
        assert periods.hour_range(moment, end) == old_hour_range(moment, end) == \
            keys.hour_range(moment, end)
    if granularity == "week":  # weeks start on Monday 00:00 UTC
        assert all(periods.period_start(m, "week").weekday() == 0 for m in TIMES)


@pytest.mark.parametrize("granularity", ["hour", "day", "week"])
def test_arrays_floor_as_single_hours_do(granularity: str) -> None:
    hours = np.random.default_rng(28).integers(-200_000, 1_200_000, 20_000)
    floored = periods.period_hour(hours, granularity)
    numbers = periods.period_number(hours, granularity)
    assert floored.tolist() == [old_period_hour(int(h), granularity) for h in hours]
    assert numbers.tolist() == [periods.period_number(int(h), granularity) for h in hours]
    # A period's number and its first hour say the same thing.
    assert np.array_equal(numbers * periods.SPAN_HOURS[granularity]
                          - periods.OFFSET_HOURS[granularity], floored)


@pytest.mark.parametrize("period", ["hour", "day", "week"])
def test_the_reporting_period_of_an_hour_is_the_policys_own(period: str) -> None:
    policy = CollectionPolicy(period=period)
    hours = np.random.default_rng(7).integers(0, 1_200_000, 5_000)
    by_policy = [policy.period_index(int(h) * 3600 + 1800) for h in hours]
    assert window.period_of_hour(hours, policy).tolist() == by_policy
    assert [window.period_of_hour(int(h), policy) for h in hours] == by_policy


def test_an_unknown_granularity_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="hour.*day.*week"):
        periods.period_hour(5, "month")
    with pytest.raises(ValueError, match="granularity"):
        periods.grid_hours(TIMES[0], TIMES[1], "fortnight")
