"""Storage bench: a year of a thousand boolean metrics, from Redis to a finished report.

Run as ``./dev bench storage`` (about two minutes at full size; ``--metrics 100 --days 60`` for
a quick look). In one run, on one private redis-server:

1. builds the data set through the collector's own write path: ``Store.add_hours``, which is
   the ingest Lua script (``collector/ingest.lua``) adding a whole year of hourly counts of
   one metric in one script call (a claim per call, exactly as a batch);
2. times ``analyze(RedisSource(url), granularity="day")`` (every metric's daily series, its
   whole-range estimate with its interval, and the Holm-corrected before/after changes) plus
   the terminal summary table: the time from Redis to a finished report;
3. times the numpy floor: the same sums (per day and over the range) and the same debiasing
   over arrays already in memory, and prints the ratio (target <= 3x);
4. prints Redis bytes per metric per day (INFO used_memory delta, and the counters strings'
   MEMORY USAGE; target <= 2 KB for a boolean metric);
5. times the HTML report (``render_html``) and prints its size.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import secrets
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import redis

from deniable.analysis import RedisSource, analyze, render_html
from deniable.analysis.estimate import debias
from deniable.analysis.report import render_table
from deniable.client.mechanism import RandomizedResponse
from deniable.collector import keys
from deniable.collector.embedded import RedisServer
from deniable.collector.store import Outcome, Store, connect

MECHANISM = "rr:1/2:1/2"


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
    args = parser.parse_args()
    names = metric_names(args.metrics)
    hours = args.days * 24
    end = keys.bucket_start(datetime.now(timezone.utc))
    start = end - timedelta(hours=hours)
    first_hour, end_hour = keys.hour_range(start, end)
    retention = args.days + 40
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
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
        runs = []
        for _ in range(3):  # a fresh source each time: nothing read is reused
            source = RedisSource(server.url, metrics_file)
            source.metrics()  # the registry read once, as a report does before its loop
            began = time.perf_counter()
            analysis = analyze(source, names, start=start, end=end, granularity="day",
                               split=split)
            table = render_table([s.summary for s in analysis.sections])
            runs.append(time.perf_counter() - began)
        report_seconds = min(runs)
        assert len(analysis.sections) == args.metrics and table
        assert all(len(s.series) in (args.days, args.days + 1) for s in analysis.sections)
        print(f"  Redis -> report (daily series, whole-range estimates with intervals, changes, "
              f"summary table): {report_seconds:.2f} s (best of 3; first {runs[0]:.2f} s); "
              f"target < 2 s")

        arrays = []
        for name in names:
            counts = source.counts(name, start, end)
            arrays.append((counts.hours, counts.n, counts.ones))
        floor = min(numpy_floor(arrays, first_hour, end_hour, keys.hour_index(split))
                    for _ in range(3))
        print(f"  numpy floor (same sums and debiasing over arrays in memory): {floor:.3f} s; "
              f"ratio {report_seconds / floor:.1f}x (target <= 3x)")

        began = time.perf_counter()
        document = render_html(analysis.sections, analysis.comparisons)
        html_seconds = time.perf_counter() - began
        size = len(document.encode())
        print(f"  HTML report: {html_seconds:.2f} s, {size / 1e6:.2f} MB")
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
