"""The packed month layout: overflow, retention, migration from layout-1 keys, and rollups that
give the same numbers as the per-bucket code they replaced."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from deniable.cli.main import main
from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.core import keys, rollup
from deniable.collector.app import create_app
from deniable.core.rollup import HourCount
from deniable.collector.store import CounterOverflowError, Outcome, Store
from tests.conftest import OPEN, hour_counts, put_counts, snapshot

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"
DARK, DARK_MECH = "dark_mode", "rr:3/4:1/2"
UTC = timezone.utc
V1_INGEST = (Path(__file__).parent / "v1_ingest.lua").read_text()


def test_a_month_string_has_its_full_size_from_its_first_write(redis_client) -> None:
    hour = datetime(2026, 2, 3, 4, tzinfo=UTC)
    put_counts(redis_client, X, X_MECH, {hour: (5, 2)}, retention_days=3650)
    month = keys.month_of(hour)
    assert month.hours == 28 * 24
    assert redis_client.strlen(keys.counters(X, X_MECH, hour)) == 28 * 24 * 2 * 4
    assert hour_counts(redis_client, X, X_MECH, hour) == (5, 2)
    assert hour_counts(redis_client, X, X_MECH, hour + timedelta(hours=1)) == (0, 0)


def test_an_overflowing_batch_fails_loudly_and_writes_nothing(redis_client) -> None:
    now = datetime.now(UTC)
    store = Store(redis_client, "secret")
    near = 2 ** 32 - 2
    put_counts(redis_client, X, X_MECH, {now: (near, 0)})
    before = snapshot(redis_client)
    reports = [(DARK, DARK_MECH, 1), (X, X_MECH, 1), (X, X_MECH, 0), (X, X_MECH, 1)]
    batch = decode_batch(encode_batch(new_batch_id(), reports), {X: X_MECH, DARK: DARK_MECH})
    with pytest.raises(CounterOverflowError):
        store.add_batch(batch, now, {X: 90, DARK: 30}, 3600)
    assert snapshot(redis_client) == before  # not the claim, not dark_mode's counters
    fits = decode_batch(encode_batch(new_batch_id(), reports[:2]), {X: X_MECH, DARK: DARK_MECH})
    assert store.add_batch(fits, now, {X: 90, DARK: 30}, 3600) is Outcome.APPLIED
    assert hour_counts(redis_client, X, X_MECH, now) == (2 ** 32 - 1, 1)


def test_reads_leave_out_hours_past_retention(redis_client) -> None:
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=31), now - timedelta(days=29)
    put_counts(redis_client, DARK, DARK_MECH, {old: (7, 3), recent: (4, 1)}, retention_days=30)
    store = Store(redis_client)
    everything = store.counts(DARK, DARK_MECH, now - timedelta(days=60), now)
    kept = store.counts(DARK, DARK_MECH, now - timedelta(days=60), now, retention_days=30)
    assert [h.n for h in everything] == [7, 4]
    assert [h.n for h in kept] == [4]
    # The month strings expire a retention after their month ends, on an hour boundary.
    for moment in (old, recent):
        month = keys.month_of(moment)
        assert redis_client.expiretime(keys.counters(DARK, DARK_MECH, moment)) == \
            month.end_hour * 3600 + 30 * 86400


def _v1_write(client: redis.Redis, metric: str, mechanism: str, hour: datetime, n: int,
              ones: int, retention_days: int) -> None:
    """One batch through the layout-1 collector's own ingest script (its keys, its TTLs)."""
    client.eval(V1_INGEST, 2, f"dn:v1:b:{new_batch_id()}", keys.counters_v1(metric, mechanism, hour),
                "digest", 604800, n, ones, retention_days * 86400)


def test_migrate_converts_layout_1_keys_in_place(redis_client, redis_url: str,
                                                 metrics_file: Path, capsys) -> None:
    now = keys.bucket_start(datetime.now(UTC))
    rng = random.Random(7)
    written: dict[tuple[str, str, datetime], list[int]] = {}
    # Hours across a month boundary, two metrics and an unregistered one, two batches per hour.
    hours = [now - timedelta(hours=h) for h in (1, 2, 30, 24 * 20, 24 * 35)]
    for metric, mechanism, retention in ((X, X_MECH, 90), (DARK, DARK_MECH, 30),
                                         ("gone_metric", X_MECH, 60)):
        for hour in hours:
            for _ in range(2):
                n = rng.randint(1, 50)
                ones = rng.randint(0, n)
                _v1_write(redis_client, metric, mechanism, hour, n, ones, retention)
                # Layout 1 wrote each hash within its own hour: its TTL ran from then.
                redis_client.expireat(keys.counters_v1(metric, mechanism, hour),
                                      hour + timedelta(days=retention, minutes=17))
                total = written.setdefault((metric, mechanism, hour), [0, 0])
                total[0] += n
                total[1] += ones
            if hour + timedelta(days=retention) < now:  # expired, as layout 1 would have
                written.pop((metric, mechanism, hour))
    # An upgraded collector already wrote to the current month: migration adds to it.
    put_counts(redis_client, X, X_MECH, {now - timedelta(hours=1): (1000, 500)})
    written[(X, X_MECH, now - timedelta(hours=1))][0] += 1000
    written[(X, X_MECH, now - timedelta(hours=1))][1] += 500

    assert main(["migrate", "--redis-url", redis_url, "--metrics-file", str(metrics_file)]) == 0
    assert f"moved {len(written)} hour hashes" in capsys.readouterr().out
    assert len(written) == 14  # dark_mode's hour 35 days ago is past its 30 days
    assert list(redis_client.scan_iter(match=keys.V1_COUNTERS_PATTERN)) == []
    for (metric, mechanism, hour), (n, ones) in written.items():
        assert hour_counts(redis_client, metric, mechanism, hour) == (n, ones)
    for key in redis_client.scan_iter(match=keys.COUNTERS_PATTERN):
        metric, _, label = keys.parse_counters(key.decode())  # type: ignore[misc]
        expires = redis_client.expiretime(key)
        assert expires % 3600 == 0
        month_end = keys.month_of(datetime.strptime(label, "%Y%m").replace(tzinfo=UTC)).end_hour
        retention = {X: 90, DARK: 30, "gone_metric": 60}[metric]  # registry, or the TTL's
        assert expires == month_end * 3600 + retention * 86400
    # Run again: nothing left to move, nothing changes.
    before = snapshot(redis_client)
    assert main(["migrate", "--redis-url", redis_url, "--metrics-file", str(metrics_file)]) == 0
    assert "moved 0 hour hashes" in capsys.readouterr().out
    assert snapshot(redis_client) == before


def test_a_collector_says_loudly_while_layout_1_counters_are_left(
        redis_client, redis_url: str, metrics_file: Path,  # type: ignore[no-untyped-def]
        capsys: pytest.CaptureFixture[str]) -> None:
    """Until `deniable migrate` runs after the upgrade, reads undercount: an ERROR at start and
    deniable_unmigrated_counters 1 (an alert), back to 0 at the next scrape after migrating.
    A Redis without layout-1 hashes is marked once, then each start costs one GET."""
    config = {"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), "TESTING": True,
              **OPEN}

    def errors() -> list[str]:
        lines = capsys.readouterr().err.splitlines()
        return [line for line in lines if '"level":"error"' in line and "deniable migrate" in line]

    create_app(config)
    assert redis_client.get(keys.layout_marker()) == b"2"  # none found: marked
    redis_client.delete(keys.layout_marker())  # a Redis from before the packed layout
    _v1_write(redis_client, X, X_MECH, datetime.now(UTC), 10, 4, 90)
    errors()
    http = create_app(config).test_client()
    assert len(errors()) == 1
    assert "deniable_unmigrated_counters 1.0" in http.get("/metrics").text
    assert main(["migrate", "--redis-url", redis_url, "--metrics-file", str(metrics_file)]) == 0
    assert "moved 1 hour hashes" in capsys.readouterr().out
    assert redis_client.get(keys.layout_marker()) == b"2"
    assert "deniable_unmigrated_counters 0.0" in http.get("/metrics").text
    create_app(config)
    assert errors() == []


# -- one definition of periods: the numbers are those of the code it replaced --------------

def _old_period_start(moment: datetime, granularity: str) -> datetime:
    """The per-bucket flooring both modules had before (datetime.replace)."""
    hour = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if granularity == "hour":
        return hour
    day = hour.replace(hour=0)
    return day if granularity == "day" else day - timedelta(days=day.weekday())


def _old_rollup(hours: list[HourCount], granularity: str) -> list[HourCount]:
    sums: dict[datetime, list[int]] = {}
    for h in hours:
        total = sums.setdefault(_old_period_start(h.start, granularity), [0, 0])
        total[0] += h.n
        total[1] += h.ones
    return [HourCount(start, n, ones) for start, (n, ones) in sorted(sums.items())]


@pytest.mark.parametrize("granularity", rollup.GRANULARITIES)
def test_rollups_match_the_per_bucket_code_they_replaced(granularity: str) -> None:
    rng = random.Random(granularity)
    base = datetime(1969, 12, 1, tzinfo=UTC)  # before and after the epoch, across weeks
    starts = sorted({base + timedelta(hours=rng.randrange(24 * 500)) for _ in range(600)})
    hours = [HourCount(s, rng.randint(1, 99), rng.randint(0, 1)) for s in starts]
    assert rollup.rollup(hours, granularity) == _old_rollup(hours, granularity)
    for h in hours[:50]:
        moment = h.start + timedelta(minutes=rng.randrange(60), seconds=rng.randrange(60))
        assert rollup.period_start(moment, granularity) == _old_period_start(moment, granularity)


def test_analysis_series_match_the_per_bucket_code_they_replaced() -> None:
    np = pytest.importorskip("numpy")
    from deniable.analysis.sources import MetricCounts, MetricInfo
    from deniable.analysis.timeseries import rollup as series_rollup
    from deniable.client.mechanism import RandomizedResponse

    rng = random.Random(3)
    base = datetime(2026, 10, 29, 5, tzinfo=UTC)
    starts = sorted({base + timedelta(hours=rng.randrange(24 * 40)) for _ in range(300)})
    rows = [(s, rng.randint(1, 99), rng.randint(0, 1)) for s in starts]
    counts = MetricCounts(MetricInfo(X, "", RandomizedResponse.from_id(X_MECH)),
                          [r[0] for r in rows], np.array([r[1] for r in rows]),
                          np.array([r[2] for r in rows]))
    start, end = base + timedelta(hours=7, minutes=30), base + timedelta(days=33, minutes=1)
    for granularity in rollup.GRANULARITIES:
        grid_starts, n, ones = series_rollup(counts, granularity, start, end)
        moment, old_grid = _old_period_start(start, granularity), []
        while moment < end:
            old_grid.append(moment)
            moment += rollup.SPAN[granularity]
        expected = {h.start: (h.n, h.ones) for h in _old_rollup([HourCount(*r) for r in rows],
                                                                granularity)}
        assert grid_starts == old_grid
        assert [(int(a), int(b)) for a, b in zip(n, ones)] == \
            [expected.get(s, (0, 0)) for s in old_grid]
