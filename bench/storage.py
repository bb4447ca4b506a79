"""Storage bench: a year of a thousand boolean metrics, from Redis to a finished report.

Run as ``./dev bench storage`` (about two minutes at full size; ``--metrics 100 --days 60`` for
a quick look). In one run, on one private redis-server:

1. builds the data set through the collector's own write path: ``Store.add_hours``, which is
   the ingest Lua script (``src/deniable/collector/ingest.lua``) adding a whole year of hourly counts of
   one metric in one script call (a claim per call, exactly as a batch);
2. times ``analyze(RedisSource(url), granularity="day")`` (every metric's daily series, its
   whole-range estimate with its interval, and the Holm-corrected before/after changes) plus
   the terminal summary table: the time from Redis to a finished report;
3. times the numpy floor: the same sums (per day and over the range) and the same debiasing
   over arrays already in memory, and prints the ratio (target <= 3x);
4. prints Redis bytes per metric per day (INFO used_memory delta, and the counters strings'
   MEMORY USAGE; target <= 2 KB for a boolean metric);
5. times the HTML report (``render_html``) and prints its size.

Breakdowns (issue 13; ``--breakdown-metrics 100 --values 10``, ``--only-breakdown`` to skip
the above): a second set of boolean metrics, each with a year of hourly counts in its total
and in one series per value of one public dimension (``app_version=v0`` ... ``v9``, written by
the same ingest script into ``keys.series_counters`` strings), then

6. times ``breakdown(RedisSource(url), metric, "app_version")`` for every metric plus the
   terminal breakdown tables (estimates per value, suppression, not stated, Holm-corrected
   pairs): the time from Redis to the breakdown report;
7. prints Redis bytes per metric per day per value (MEMORY USAGE of the series strings; the
   same target per counted series as per metric: <= 2 KB).

Every kind (issue 28; ``--numeric-metrics``, ``--categorical-metrics``, 0 skips): a year of
numeric metrics (1BitMean on [0, 5000]) and of categorical metrics of d = 64 categories (the
registry's default mechanism for them), each kind's Redis -> report time beside its own numpy
floor (the same sums; the same debiasing, both intervals of a categorical metric). Ten distinct
years per kind go through the ingest script; the other metrics get copies of their month
strings (Redis COPY): each metric is still read and analysed on its own.

Every ratio is printed again at the end, all measured side by side in this one run (the
machine may be shared: compare ratios, not times across runs). ``--profile`` prints the top of
a cProfile of one boolean analysis.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
from concurrent.futures import ThreadPoolExecutor
import secrets
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import redis

from deniable.analysis import RedisSource, analyze, render_html
from deniable.analysis.breakdown import breakdown
from deniable.analysis.breakdown_report import render_breakdowns
from deniable.analysis.categorical import category_arrays
from deniable.analysis.estimate import debias, slot_channel
from deniable.analysis.report import render_table
from deniable.client.dimensions import Dimensions
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse
from deniable.core import keys
from deniable.collector.embedded import RedisServer
from deniable.collector.store import Outcome, Store, connect

MECHANISM = "rr:1/2:1/2"
NUMERIC = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000)
CATEGORICAL = MetricSpec.build("categorical", epsilon=2.0,
                               categories=[f"c{i}" for i in range(64)])
RATIOS: list[str] = []
"""Every ratio of the run, printed again at its end."""


def metric_names(count: int) -> list[str]:
    return [f"metric_{i:04d}" for i in range(count)]


def write_metrics_file(path: Path, names: list[str], retention_days: int) -> None:
    path.write_text("".join(f'[metrics.{name}]\ndescription = "bench metric {i}"\n'
                            f'mechanism = "{MECHANISM}"\nretention_days = {retention_days}\n\n'
                            for i, name in enumerate(names)))


def build(store: Store, names: list[str], first_hour: int, hours: int,
          retention_days: int, seed: int) -> float:
    """Write every metric's hours through the ingest script (a year of one metric per script
    call, two calls in flight: Python packs one while Redis runs the other); seconds taken."""
    rng = np.random.default_rng(seed)
    now = datetime.now(timezone.utc)
    index = np.arange(first_hour, first_hour + hours).tolist()

    def write(i: int) -> None:
        truth = 0.1 + 0.8 * (i / max(1, len(names) - 1))
        n = rng_for[i].poisson(120, hours) + 1
        ones = rng_for[i].binomial(n, 0.25 + 0.5 * truth)
        counts = dict(zip(index, zip(n.tolist(), ones.tolist())))
        outcome = store.add_hours(names[i], MECHANISM, counts, retention_days,
                                  f"bench-{secrets.token_hex(8)}", now, 3600)
        assert outcome is Outcome.APPLIED

    rng_for = [np.random.default_rng(s) for s in rng.integers(0, 2 ** 63, len(names))]
    began = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, range(len(names))))
    return time.perf_counter() - began


DIMENSION = "app_version"


def register_breakdown_metrics(client: redis.Redis, names: list[str], retention_days: int,
                               values: int) -> None:
    """Registry entries (the live registry's JSON, as the admin API stores them) for metrics
    that declare one public dimension of ``values`` values (v0, v1, ...)."""
    dims = Dimensions.parse({DIMENSION: {"values": [f"v{v}" for v in range(values)]}})
    spec = MetricSpec.build("boolean", mechanism=MECHANISM)
    for i, name in enumerate(names):
        version = {"version": 1, "mechanism": MECHANISM,
                   "registered": "2026-01-01T00:00:00+00:00", "memoization": "memoized",
                   "instantaneous": None, "period": "day", **spec.describe()}
        client.hset(keys.registry(), name, json.dumps({
            "name": name, "description": f"bench breakdown metric {i}",
            "retention_days": retention_days, "retired": None, "versions": [version],
            **dims.describe()}))
    client.set(keys.registry_generation(), secrets.token_hex(8))


def add_hours_to(store: Store, key_of: Any, metric: str, counts: dict[int, tuple[int, int]],
                 retention_days: int, now: datetime) -> None:
    """``Store.add_hours`` into any counters strings of one metric (``key_of(month)``: the
    total's or a series'): the ingest script's own write, one call, claimed once."""
    width = keys.width(MECHANISM)
    by_month: dict[keys.Month, list[int]] = {}
    for hour, increments in counts.items():
        month = keys.month_of(hour)
        first = keys.counter_index(month, hour, 0, width)
        pairs = by_month.setdefault(month, [])
        for slot, by in enumerate(increments):
            pairs.extend((first + slot, by))
    script_keys = [keys.batch_applied(metric, f"bench-{secrets.token_hex(8)}")]
    args: list[str | int] = ["1", keys.expire_at_hour(now, 3600), ""]
    for month, pairs in by_month.items():
        script_keys.append(key_of(month))
        args.extend((month.size_bytes(width), keys.counters_expire_at(month, retention_days),
                     len(pairs) // 2, *pairs))
    outcome = store._ingest(keys=script_keys, args=args)  # the ingest script (ingest.lua)
    assert int(outcome) in (0, 1), outcome


def build_breakdown(store: Store, names: list[str], first_hour: int, hours: int,
                    retention_days: int, values: int, seed: int) -> float:
    """Each metric: per hour, Poisson(12) reports per value (value v3 says yes more often)
    and Poisson(6) that state no value; the total is their sum. Seconds taken."""
    now = datetime.now(timezone.utc)
    index = np.arange(first_hour, first_hour + hours).tolist()

    def write(i: int) -> None:
        rng = np.random.default_rng(seed * 100_003 + i)
        total_n = np.zeros(hours, np.int64)
        total_ones = np.zeros(hours, np.int64)
        for v in range(values):
            truth = 0.6 if v == 3 else 0.3
            n = rng.poisson(12, hours)
            ones = rng.binomial(n, 0.25 + 0.5 * truth)
            total_n += n
            total_ones += ones
            label = f"{DIMENSION}=v{v}"
            add_hours_to(store, lambda month, label=label: keys.series_counters(
                names[i], MECHANISM, label, month), names[i],
                {h: (a, b) for h, a, b in zip(index, n.tolist(), ones.tolist()) if a},
                retention_days, now)
        silent = rng.poisson(6, hours)
        total_n += silent
        total_ones += rng.binomial(silent, 0.4)
        add_hours_to(store, lambda month: keys.counters(names[i], MECHANISM, month), names[i],
                     {h: (a, b) for h, a, b in zip(index, total_n.tolist(),
                                                   total_ones.tolist()) if a},
                     retention_days, now)

    began = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, range(len(names))))
    return time.perf_counter() - began


def bench_breakdown(server: RedisServer, tmp: str, count: int, values: int, days: int,
                    start: datetime, end: datetime, seed: int) -> None:
    """Steps 6 and 7 of the module docstring."""
    names = [f"by_metric_{i:04d}" for i in range(count)]
    hours = days * 24
    first_hour, _ = keys.hour_range(start, end)
    retention = days + 40
    client = redis.Redis.from_url(server.url)
    register_breakdown_metrics(client, names, retention, values)
    store = Store(connect(server.url))
    print(f"breakdown bench: {count} boolean metrics x {hours} hourly buckets ({days} days) x "
          f"{values} values of {DIMENSION}")
    built = build_breakdown(store, names, first_hour, hours, retention, values, seed)
    print(f"  built through the ingest script in {built:.1f} s")
    series = total = 0
    for key in client.scan_iter(match=f"{keys.PREFIX}:{{by_metric_*", count=1000):
        size = int(client.memory_usage(key, samples=0) or 0)
        if b"}:d:" in key:
            series += size
        elif keys.parse_counters(key.decode()) is not None:
            total += size
    print(f"  Redis bytes per metric per day per value: {series / count / days / values:.0f} B "
          f"(MEMORY USAGE of the series strings; the total's: {total / count / days:.0f} B per "
          f"metric per day); target <= 2048 B per counted series")
    runs = []
    for _ in range(3):  # a fresh source each time: nothing read is reused
        source = RedisSource(server.url)
        source.metrics()
        began = time.perf_counter()
        found = [breakdown(source, name, DIMENSION, start, end, min_reports=100)
                 for name in names]
        table = render_breakdowns(found, "table")
        runs.append(time.perf_counter() - began)
    assert all(len(b.cells) == values for b in found) and table
    differs = sum(any(c.significant and "v3" in (c.a + c.b) for c in b.comparisons)
                  for b in found)
    print(f"  Redis -> breakdown report ({count} metrics x {values} values: per-value "
          f"estimates with intervals, not stated, {len(found[0].comparisons)} Holm-corrected "
          f"pairs each, tables): {min(runs):.2f} s (best of 3; first {runs[0]:.2f} s); "
          f"{min(runs) / count * 1000:.1f} ms per metric; v3 found to differ in "
          f"{differs}/{count} metrics")
    RATIOS.append(f"{count} boolean metrics x {days} days x {values} values, Redis -> "
                  f"breakdown report: {min(runs):.2f} s (target < 2 s)")
    client.close()


def register_specs(client: redis.Redis, names: list[str], spec: MetricSpec,
                   retention_days: int) -> None:
    """Registry entries (the live registry's JSON) for metrics of ``spec``, default policy."""
    for i, name in enumerate(names):
        version = {"version": 1, "mechanism": spec.mechanism.id,
                   "registered": "2026-01-01T00:00:00+00:00", "memoization": "memoized",
                   "instantaneous": None, "period": "day", **spec.describe()}
        client.hset(keys.registry(), name, json.dumps({
            "name": name, "description": f"bench {spec.kind} metric {i}",
            "retention_days": retention_days, "retired": None, "versions": [version]}))
    client.set(keys.registry_generation(), secrets.token_hex(8))


def build_copies(store: Store, client: redis.Redis, names: list[str], spec: MetricSpec,
                 first_hour: int, hours: int, retention_days: int, seed: int) -> float:
    """Ten distinct years through the ingest script (Poisson(120) reports per hour; each
    slot a binomial share of them), every other metric a COPY of one; seconds taken."""
    width = spec.mechanism.width
    now = datetime.now(timezone.utc)
    began = time.perf_counter()
    distinct = names[:10]
    for i, name in enumerate(distinct):
        rng = np.random.default_rng(seed * 1_000_003 + i)
        n = rng.poisson(120, hours) + 1
        share = 0.2 + 0.6 * rng.random() if width == 2 else 1.5 / width
        slots = [rng.binomial(n, share) for _ in range(width - 1)]
        rows = np.column_stack([n, *slots]).tolist()
        outcome = store.add_hours(name, spec.mechanism.id,
                                  {first_hour + h: tuple(r) for h, r in enumerate(rows)},
                                  retention_days, f"bench-{secrets.token_hex(8)}", now, 3600)
        assert outcome is Outcome.APPLIED
    months = keys.months(first_hour, first_hour + hours)
    pipe = client.pipeline(transaction=False)
    for i, name in enumerate(names[len(distinct):]):
        for month in months:
            pipe.copy(keys.counters(distinct[i % len(distinct)], spec.mechanism.id, month),
                      keys.counters(name, spec.mechanism.id, month))
    assert all(pipe.execute())
    return time.perf_counter() - began


def kind_floor(arrays: list[tuple[np.ndarray, np.ndarray]], spec: MetricSpec, first_hour: int,
               split_hour: int) -> float:
    """The numpy floor of any kind: per metric, the daily sums and the sums over the range
    and its two halves of every slot, debiased (both intervals of a categorical metric, a
    numeric metric's scaled mean left in [0, 1]); seconds taken."""
    channel = slot_channel(spec.mechanism)
    categorical = spec.mechanism.width > 2

    def estimate(values: np.ndarray) -> None:
        if categorical:
            category_arrays(values, spec.mechanism)
        else:
            debias(channel, values[:, 1], values[:, 0])

    began = time.perf_counter()
    for hours, values in arrays:
        day = (hours - first_hour) // 24
        edges = np.flatnonzero(np.concatenate(([True], day[1:] != day[:-1])))
        estimate(np.add.reduceat(values, edges, axis=0))
        estimate(values.sum(axis=0, keepdims=True))
        before = int(np.searchsorted(hours, split_hour))
        estimate(np.stack([values[:before].sum(axis=0), values[before:].sum(axis=0)]))
    return time.perf_counter() - began


def bench_kind(server: RedisServer, spec: MetricSpec, count: int, days: int, start: datetime,
               end: datetime, seed: int) -> None:
    """A year of ``count`` metrics of ``spec``'s kind: Redis -> report beside its floor."""
    label = f"{spec.kind}" + (f" d = {spec.mechanism.width - 1}"
                              if spec.mechanism.width > 2 else "")
    names = [f"{spec.kind}_{i:04d}" for i in range(count)]
    hours = days * 24
    first_hour, _ = keys.hour_range(start, end)
    client = redis.Redis.from_url(server.url)
    register_specs(client, names, spec, days + 40)
    # A year of d = 64 is one script call of a million arguments: no 2 s socket timeout.
    built = build_copies(Store(connect(server.url, timeout_seconds=120)), client, names, spec,
                         first_hour, hours, days + 40, seed)
    print(f"{label} bench: {count} metrics x {hours} hourly buckets ({days} days), "
          f"{spec.mechanism.id}; built in {built:.1f} s")
    split = start + (end - start) / 2
    runs, cpu = [], []
    for _ in range(3):
        source = RedisSource(server.url)
        source.metrics()
        began, began_cpu = time.perf_counter(), time.process_time()
        analysis = analyze(source, names, start=start, end=end, granularity="day",
                           split=split)
        table = render_table([s.summary for s in analysis.sections])
        runs.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    assert len(analysis.sections) == count and table and analysis.comparisons
    arrays = [(c.hours, c.values) for c in (source.counts(name, start, end) for name in names)]
    assert all(len(h) == hours for h, _ in arrays)  # every hour read back
    floor = min(kind_floor(arrays, spec, first_hour, keys.hour_index(split)) for _ in range(3))
    best = min(runs)
    print(f"  Redis -> report: {best:.2f} s (best of 3; first {runs[0]:.2f} s; this "
          f"process's CPU {min(cpu):.2f} s); numpy floor {floor:.3f} s; ratio "
          f"{best / floor:.1f}x; {len(analysis.comparisons)} Holm-corrected comparisons")
    RATIOS.append(f"{count} {label} metrics x {days} days, Redis -> report: {best:.2f} s "
                  f"(CPU of this process {min(cpu):.2f} s), {best / floor:.1f}x its numpy "
                  f"floor ({floor:.3f} s)")
    for key in client.scan_iter(match=f"{keys.PREFIX}:{{{spec.kind}_*", count=1000):
        client.unlink(key)  # free the memory before the next kind
    client.hdel(keys.registry(), *names)
    client.close()


def numpy_floor(arrays: list[tuple[np.ndarray, np.ndarray, np.ndarray]], first_hour: int,
                end_hour: int, split_hour: int) -> float:
    """The same sums and debiasing over arrays already in memory; seconds taken."""
    mechanism = RandomizedResponse.from_id(MECHANISM)
    days = (end_hour - first_hour + 23) // 24
    began = time.perf_counter()
    for hours, n, ones in arrays:
        slot = (hours - first_hour) // 24
        debias(mechanism, np.bincount(slot, ones, days).astype(np.int64),
               np.bincount(slot, n, days).astype(np.int64))
        debias(mechanism, np.array([ones.sum()]), np.array([n.sum()]))
        before = hours < split_hour
        debias(mechanism, np.array([ones[before].sum(), ones[~before].sum()]),
               np.array([n[before].sum(), n[~before].sum()]))
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=int, default=1000, help="boolean metrics (1000)")
    parser.add_argument("--days", type=int, default=365, help="days of hourly data (365)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--breakdown-metrics", type=int, default=100,
                        help="metrics broken down by one dimension (100; 0 skips)")
    parser.add_argument("--values", type=int, default=10, help="values of that dimension (10)")
    parser.add_argument("--only-breakdown", action="store_true",
                        help="run only the breakdown bench")
    parser.add_argument("--numeric-metrics", type=int, default=1000,
                        help="numeric metrics (1000; 0 skips)")
    parser.add_argument("--categorical-metrics", type=int, default=100,
                        help="categorical metrics of d = 64 (100, about 230 MB of Redis; "
                             "0 skips)")
    parser.add_argument("--profile", action="store_true",
                        help="print the top of a cProfile of one boolean analysis")
    args = parser.parse_args()
    names = metric_names(args.metrics)
    hours = args.days * 24
    end = keys.bucket_start(datetime.now(timezone.utc))
    start = end - timedelta(hours=hours)
    first_hour, end_hour = keys.hour_range(start, end)
    retention = args.days + 40
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        if args.breakdown_metrics:
            bench_breakdown(server, tmp, args.breakdown_metrics, args.values, args.days, start,
                            end, args.seed)
        if args.only_breakdown:
            return 0
        metrics_file = Path(tmp) / "metrics.toml"
        write_metrics_file(metrics_file, names, retention)
        client = redis.Redis.from_url(server.url)
        store = Store(connect(server.url))
        used_before = int(client.info("memory")["used_memory"])
        print(f"storage bench: {args.metrics} boolean metrics x {hours} hourly buckets "
              f"({args.days} days), redis-server on {server.url}")
        built = build(store, names, first_hour, hours, retention, args.seed)
        print(f"  built through the ingest script in {built:.1f} s "
              f"({args.metrics * hours * 2 / built / 1e6:.2f} M counter increments/s)")
        used_after = int(client.info("memory")["used_memory"])
        usage = sum(int(client.memory_usage(k, samples=0) or 0)
                    for k in client.scan_iter(match=keys.COUNTERS_PATTERN, count=1000))
        per_day_info = (used_after - used_before) / args.metrics / args.days
        per_day_keys = usage / args.metrics / args.days
        print(f"  Redis bytes per metric per day: {per_day_info:.0f} B (INFO used_memory delta), "
              f"{per_day_keys:.0f} B (MEMORY USAGE of the counters strings); target <= 2048 B")

        split = start + (end - start) / 2
        runs, cpu = [], []
        for _ in range(3):  # a fresh source each time: nothing read is reused
            source = RedisSource(server.url, metrics_file)
            source.metrics()  # the registry read once, as a report does before its loop
            began, began_cpu = time.perf_counter(), time.process_time()
            analysis = analyze(source, names, start=start, end=end, granularity="day",
                               split=split)
            table = render_table([s.summary for s in analysis.sections])
            runs.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
        report_seconds = min(runs)
        assert len(analysis.sections) == args.metrics and table
        assert all(len(s.series) in (args.days, args.days + 1) for s in analysis.sections)
        print(f"  Redis -> report (daily series, whole-range estimates with intervals, changes, "
              f"summary table): {report_seconds:.2f} s (best of 3; first {runs[0]:.2f} s; "
              f"this process's CPU {min(cpu):.2f} s); target < 2 s")

        arrays = []
        for name in names:
            counts = source.counts(name, start, end)
            arrays.append((counts.hours, counts.n, counts.ones))
        floor = min(numpy_floor(arrays, first_hour, end_hour, keys.hour_index(split))
                    for _ in range(3))
        print(f"  numpy floor (same sums and debiasing over arrays in memory): {floor:.3f} s; "
              f"ratio {report_seconds / floor:.1f}x (target <= 3x)")
        boolean = MetricSpec("boolean", RandomizedResponse.from_id(MECHANISM))
        by_kind = [(c.hours, c.values) for c in (source.counts(name, start, end)
                                                 for name in names)]
        reduceat_floor = min(kind_floor(by_kind, boolean, first_hour, keys.hour_index(split))
                             for _ in range(3))
        print(f"  the other kinds' floor (daily sums by reduceat, not bincount): "
              f"{reduceat_floor:.3f} s; ratio {report_seconds / reduceat_floor:.1f}x")
        RATIOS.insert(0, f"{args.metrics} boolean metrics x {args.days} days, Redis -> report: "
                         f"{report_seconds:.2f} s (target < 2 s; CPU of this process "
                         f"{min(cpu):.2f} s), {report_seconds / floor:.1f}x the numpy floor "
                         f"({floor:.3f} s; target <= 3x), {report_seconds / reduceat_floor:.1f}x "
                         f"the other kinds' floor ({reduceat_floor:.3f} s)")

        began = time.perf_counter()
        document = render_html(analysis.sections, analysis.comparisons)
        html_seconds = time.perf_counter() - began
        size = len(document.encode())
        print(f"  HTML report: {html_seconds:.2f} s, {size / 1e6:.2f} MB")
        RATIOS.insert(1, f"HTML report of the {args.metrics} boolean metrics: {html_seconds:.2f} s "
                         f"({html_seconds / report_seconds:.1f}x the Redis -> report time), "
                         f"{size / 1e6:.2f} MB")
        if args.profile:
            profile = cProfile.Profile()
            source = RedisSource(server.url, metrics_file)
            source.metrics()
            profile.runcall(analyze, source, names, start=start, end=end, granularity="day",
                            split=split)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        client.close()
        for spec, count in ((NUMERIC, args.numeric_metrics),
                            (CATEGORICAL, args.categorical_metrics)):
            if count:
                bench_kind(server, spec, count, args.days, start, end, args.seed)
    print("side by side, in this run:")
    for line in RATIOS:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
