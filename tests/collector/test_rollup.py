"""Hour buckets rolled up to UTC days and Monday-based weeks, with hand-checked sums."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
import redis

from deniable.core.rollup import align, period_start
from tests.conftest import put_counts

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"
UTC = timezone.utc

# 2026-11-01 is a Sunday; 2026-11-02 a Monday.
HOURS = {
    datetime(2026, 11, 1, 22, tzinfo=UTC): (10, 3),   # Sun, week of Mon 10-26
    datetime(2026, 11, 1, 23, tzinfo=UTC): (5, 5),    # Sun
    datetime(2026, 11, 2, 0, tzinfo=UTC): (7, 1),     # Mon, week of Mon 11-02
    datetime(2026, 11, 2, 13, tzinfo=UTC): (20, 8),   # Mon
    datetime(2026, 11, 4, 9, tzinfo=UTC): (4, 2),     # Wed
    datetime(2026, 11, 9, 0, tzinfo=UTC): (100, 60),  # Mon, week of Mon 11-09
}


@pytest.fixture()
def read_http(app, redis_client: redis.Redis):  # type: ignore[no-untyped-def]
    put_counts(redis_client, X, X_MECH, HOURS, retention_days=100_000)
    return app.test_client()


def buckets(http, **query: str) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    doc = http.get(f"/v1/metrics/{X}/counts", query_string=query).json
    return [(b["start"], b["n"], b["ones"]) for b in doc["buckets"]]


def test_hours_roll_up_to_days(read_http) -> None:
    assert buckets(read_http, granularity="day", **{"from": "2026-11-01T00:00:00+00:00",
                                                    "to": "2026-11-10T00:00:00+00:00"}) == [
        ("2026-11-01T00:00:00+00:00", 15, 8),     # 10 + 5, 3 + 5
        ("2026-11-02T00:00:00+00:00", 27, 9),     # 7 + 20, 1 + 8
        ("2026-11-04T00:00:00+00:00", 4, 2),
        ("2026-11-09T00:00:00+00:00", 100, 60),
    ]


def test_hours_roll_up_to_monday_weeks(read_http) -> None:
    assert buckets(read_http, granularity="week", **{"from": "2026-10-26T00:00:00+00:00",
                                                     "to": "2026-11-16T00:00:00+00:00"}) == [
        ("2026-10-26T00:00:00+00:00", 15, 8),     # Sunday 11-01 closes the week of 10-26
        ("2026-11-02T00:00:00+00:00", 31, 11),    # 7 + 20 + 4, 1 + 8 + 2
        ("2026-11-09T00:00:00+00:00", 100, 60),
    ]


def test_a_rolled_up_range_widens_to_whole_periods(read_http) -> None:
    doc = read_http.get(f"/v1/metrics/{X}/counts", query_string={
        "granularity": "day", "from": "2026-11-02T12:30:00+00:00",
        "to": "2026-11-02T13:10:00+00:00"}).json
    assert (doc["from"], doc["to"]) == ("2026-11-02T00:00:00+00:00", "2026-11-03T00:00:00+00:00")
    assert [(b["n"], b["ones"]) for b in doc["buckets"]] == [(27, 9)]  # the whole day
    hourly = buckets(read_http, **{"from": "2026-11-02T12:30:00+00:00",
                                   "to": "2026-11-02T13:10:00+00:00"})
    assert hourly == [("2026-11-02T13:00:00+00:00", 20, 8)]


def test_day_and_week_totals_equal_the_hourly_total(read_http) -> None:
    span = {"from": "2026-10-26T00:00:00+00:00", "to": "2026-11-16T00:00:00+00:00"}
    totals = {g: tuple(map(sum, zip(*[(n, o) for _, n, o in buckets(read_http, granularity=g,
                                                                       **span)])))
              for g in ("hour", "day", "week")}
    assert totals["hour"] == totals["day"] == totals["week"] == (146, 79)


def test_an_unknown_granularity_is_422(read_http) -> None:
    response = read_http.get(f"/v1/metrics/{X}/counts", query_string={"granularity": "month"})
    assert response.status_code == 422
    assert response.json["errors"][0]["parameter"] == "granularity"


def test_period_starts_and_alignment() -> None:
    moment = datetime(2026, 11, 4, 9, 41, tzinfo=UTC)  # a Wednesday
    assert period_start(moment, "hour") == datetime(2026, 11, 4, 9, tzinfo=UTC)
    assert period_start(moment, "day") == datetime(2026, 11, 4, tzinfo=UTC)
    assert period_start(moment, "week") == datetime(2026, 11, 2, tzinfo=UTC)
    exact = datetime(2026, 11, 9, tzinfo=UTC)
    assert align(moment, exact, "week") == (datetime(2026, 11, 2, tzinfo=UTC), exact)
