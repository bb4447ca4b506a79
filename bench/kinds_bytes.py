"""Redis bytes per metric per day for categorical metrics of d = 2, 64 and 1024 categories.

Run as ``.venv/bin/python bench/kinds_bytes.py`` (a few seconds). On one private
redis-server, for each d (and a boolean metric, for comparison), it writes every hour of a
30-day and a 31-day month through the collector's own write path (``Store.add_hours``: the
ingest Lua script), then reads ``MEMORY USAGE <key> SAMPLES 0`` of each month's counters
string and prints bytes per day: the month's bytes divided by its days. (``INFO memory``
deltas were tried too: they move with the script cache and client buffers by more than a
small metric's month, so they are not printed.) A month string is created at its full size on its
first write, so the figures do not depend on how many hours hold reports.

The formula it checks: a month holds ``hours x (d + 1)`` unsigned 32-bit counters, so
``96 (d + 1)`` bytes per day of counters, plus the allocator's rounding and Redis' per-key
overhead (tests/collector/test_kinds_registry.py checks it for d = 64 on every run).
"""
from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone

import redis

from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding, domain_tag
from deniable.core import keys
from deniable.collector.embedded import RedisServer
from deniable.collector.store import Store

MONTHS = {30: datetime(2026, 11, 1, tzinfo=timezone.utc),
          31: datetime(2026, 12, 1, tzinfo=timezone.utc)}


def mechanism_id(d: int) -> str:
    """A GRR id for d = 2 (GRR wins there), OUE for 64 and 1024: the width is d + 1 either way."""
    tag = domain_tag([f"c{i}" for i in range(d)])
    if d == 2:
        return KaryRandomizedResponse.from_epsilon(1.0, d, tag).id
    return UnaryEncoding.from_epsilon(1.0, d, tag).id


def month_bytes(client: redis.Redis, store: Store, metric: str, mechanism: str,
                first: datetime) -> tuple[int, int]:
    """(days, MEMORY USAGE of the month string) after writing every hour of the month."""
    month = keys.month_of(first)
    width = keys.width(mechanism)
    hours = {h: (3,) + (1,) * (width - 1) for h in range(month.first_hour, month.end_hour)}
    store.add_hours(metric, mechanism, hours, 3650, f"bytes-{metric}-{month.label}",
                    datetime.now(timezone.utc), 3600)
    usage = int(client.memory_usage(keys.counters(metric, mechanism, month), samples=0))
    return month.hours // 24, usage


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        client = redis.Redis.from_url(server.url)
        version = client.info("server")["redis_version"]
        store = Store(client)
        print(f"redis-server {version}; bytes per metric per day (month's bytes / its days)")
        print(f"{'metric':>16} {'width':>6} {'96 x width':>11} {'days':>5} "
              f"{'MEMORY USAGE':>13} {'per day':>9}")
        for d in (None, 2, 64, 1024):
            mechanism = "rr:1/2:1/2" if d is None else mechanism_id(d)
            name = "boolean" if d is None else f"d = {d}"
            width = keys.width(mechanism)
            for days, first in MONTHS.items():
                got_days, usage = month_bytes(client, store, f"m{d or 0}", mechanism, first)
                assert got_days == days
                print(f"{name:>16} {width:>6} {96 * width:>11} {days:>5} {usage:>13} "
                      f"{usage / days:>9.0f}")


if __name__ == "__main__":
    main()
