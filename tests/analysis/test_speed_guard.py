"""The guard of issue 28: the analysis stays within 10x of the numpy floor, measured in one run.

Sizes: 400 boolean metrics, or 80 categorical ones of 16 categories, a year each: about half
a second of analysis each on a 2-core machine, several times the timer's and the load's noise.

A year of hourly counts per metric goes from a real Redis (written by the collector's ingest
script, ``Store.add_hours``) to a finished report: ``analyze(RedisSource(url), granularity=
"day")`` (every metric's daily series with its window intervals, its whole-range estimate and
the Holm-corrected change between the two halves) and the summary table. The *numpy floor* is
the same sums and the same debiasing over arrays already in memory. The promise is a ratio,
not a time: the machines are shared and noisy, and both sides are measured side by side in
this run, each the best of a few tries. Today's code is about 3x its floor (with the Redis
read); the code before issue 28 built a datetime per hour and was 79x to 89x (boolean) and
23x to 28x (categorical).

Both cases use the default collection policy (memoized, one report per device per day), so
every interval is a window interval with its design effect; the categorical case also has one
comparison per category in the corrected family.
"""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import redis

from deniable.analysis import analyze
from deniable.cli.sources import RedisSource
from deniable.analysis.report import render_table
from deniable.client.kinds import MetricSpec
from deniable.client.period import DEFAULT_POLICY
from deniable.core import keys
from deniable.collector.store import Outcome, Store

from bench.storage import kind_floor  # the numpy floor, as the bench measures it

LIMIT = 10.0
"""The analysis may take at most this many times the numpy floor."""
TRIES = 3
DAYS = 365

BOOLEAN = MetricSpec.build("boolean", mechanism="rr:1/2:1/2")
CATEGORICAL = MetricSpec.build("categorical", epsilon=2.0,
                               categories=[f"c{i}" for i in range(16)])


def _register(client: redis.Redis, names: list[str], spec: MetricSpec) -> None:
    """Registry entries (the live registry's JSON, as the admin API writes them) under the
    default collection policy."""
    assert DEFAULT_POLICY.memoization == "memoized" and DEFAULT_POLICY.period == "day"
    for name in names:
        version = {"version": 1, "mechanism": spec.mechanism.id,
                   "registered": "2026-01-01T00:00:00+00:00", "memoization": "memoized",
                   "instantaneous": None, "period": "day", **spec.describe()}
        client.hset(keys.registry(), name, json.dumps({
            "name": name, "description": f"guard metric {name}", "retention_days": DAYS + 40,
            "retired": None, "versions": [version]}))
    client.set(keys.registry_generation(), secrets.token_hex(8))


def _year(client: redis.Redis, names: list[str], spec: MetricSpec, first_hour: int) -> None:
    """A year of hourly counts for ``names[0]`` through the ingest script (every hour has
    reports), then the same month strings under every other name (Redis COPY): each metric
    is read and analysed on its own."""
    rng = np.random.default_rng(28)
    hours = DAYS * 24
    n = rng.poisson(120, hours) + 1
    width = spec.mechanism.width
    slots = [rng.binomial(n, 0.5 if width == 2 else 1.5 / width) for _ in range(width - 1)]
    rows = np.column_stack([n, *slots]).tolist()
    outcome = Store(client).add_hours(
        names[0], spec.mechanism.id, {first_hour + i: tuple(r) for i, r in enumerate(rows)},
        DAYS + 40, secrets.token_hex(8), datetime.now(timezone.utc), 3600)
    assert outcome is Outcome.APPLIED
    for month in keys.months(first_hour, first_hour + hours):
        source = keys.counters(names[0], spec.mechanism.id, month)
        for name in names[1:]:
            assert client.copy(source, keys.counters(name, spec.mechanism.id, month))


def _timed(run: Callable[[], object]) -> float:
    """Seconds ``run`` takes."""
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "count"), [(BOOLEAN, 400), (CATEGORICAL, 80)],
                         ids=["boolean", "categorical-16"])
def test_the_analysis_stays_within_ten_times_the_numpy_floor(redis_client: redis.Redis,
                                                              redis_url: str, spec: MetricSpec,
                                                              count: int) -> None:
    names = [f"guard_{i:03d}" for i in range(count)]
    end = keys.bucket_start(datetime.now(timezone.utc))
    start = end - timedelta(days=DAYS)
    split = start + (end - start) / 2
    first_hour, _ = keys.hour_range(start, end)
    _register(redis_client, names, spec)
    _year(redis_client, names, spec, first_hour)

    def report() -> None:
        source = sources.pop()  # a fresh source each time: nothing read is reused
        analysis = analyze(source, names, start=start, end=end, granularity="day",
                           split=split)
        assert len(analysis.sections) == count
        assert all(len(s.series) in (DAYS, DAYS + 1) for s in analysis.sections)
        assert analysis.comparisons and render_table([s.summary for s in analysis.sections])

    source = RedisSource(redis_url)
    arrays = [(c.hours, c.values) for c in (source.counts(name, start, end) for name in names)]
    assert all(len(h) == DAYS * 24 for h, _ in arrays)  # every hour read back
    sources = [RedisSource(redis_url) for _ in range(TRIES)]
    for each in sources:  # the registry read once, as a report does before its loop
        each.metrics()
    # Floor and report in turn, so both see the machine's load of the moment; the best of
    # each. A try within the limit ends it; a failure is TRIES tries past it.
    floor = seconds = float("inf")
    for _ in range(TRIES):
        floor = min(floor, _timed(lambda: kind_floor(arrays, spec, first_hour,
                                                 keys.hour_index(split))))
        seconds = min(seconds, _timed(report))
        if seconds <= LIMIT * floor:
            break
    print(f"{count} {spec.kind} metrics: report {seconds:.3f} s, floor {floor:.3f} s, "
          f"ratio {seconds / floor:.1f}x")
    assert seconds <= LIMIT * floor, (
        f"{count} {spec.kind} metrics x {DAYS} days, Redis -> report: {seconds:.3f} s, "
        f"{seconds / floor:.1f}x the numpy floor ({floor:.3f} s); the limit is {LIMIT:g}x")
