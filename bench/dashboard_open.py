"""What one dashboard request costs for an open metric (``od:16`` at epsilon 4: 3.67 MB of
counters per day), through the real Flask app, the analysis' decoder and a redis-server of
its own:

    ./dev bench dashboard_open               # 90 days of counters, the ranges below
    PYTHONPATH=/path/to/old/src python bench/dashboard_open.py   # the same against older code

Each day holds 20,000 reports of a Zipf(1.1) population over 2,000 strings, perturbed by the
real client (three such days, repeated: decoding cost does not depend on the counts). Printed
per request: HTTP status, wall seconds, counters read (bytes; from the answer's ``cost`` when
the code reports it, else every period of the range) and the process' peak RSS so far.
"""
from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import redis

from deniable.cli.serve import discover_period
from deniable.client.open_domain import OpenDomainSketch, normalise
from deniable.client.randomness import SecureBits
from deniable.collector.app import create_app
from deniable.collector.dashboard import use_discovery
from deniable.collector.embedded import RedisServer
from deniable.core import keys

METRICS = """\
[metrics.crash_sig]
kind = "open"
epsilon = 4.0
max_bytes = 16
period = "day"
"""


def day_counters(sketch: OpenDomainSketch, devices: int, seed: int) -> np.ndarray:
    rng = random.Random(seed)
    strings = [f"sig-{rng.getrandbits(40):010x}"[:16] for _ in range(2_000)]
    weights = np.arange(1, 2_001, dtype=np.float64) ** -1.1
    counts = np.random.default_rng(seed).multinomial(devices, weights / weights.sum())
    cells = np.zeros(sketch.width, dtype=np.int64)
    bits = SecureBits()
    for value, times in zip(strings, counts):
        padded = normalise(value, sketch.max_bytes)
        for _ in range(int(times)):
            cells[1 + sketch.perturb_padded(padded, bits)] += 1
    cells[0] = devices
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--devices", type=int, default=20_000, help="reports per day")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        path = Path(tmp) / "metrics.toml"
        path.write_text(METRICS)
        app = create_app({"REDIS_URL": server.url, "METRICS_FILE": str(path), "AUTH": "off",
                          "RATE_LIMIT_IP_PER_SECOND": 0, "RATE_LIMIT_KEY_PER_SECOND": 0,
                          "LOG_REQUESTS": False})
        try:
            from deniable.cli.serve import track_period
            use_discovery(app, discover_period, track_period)  # type: ignore[call-arg]
            new = True
        except ImportError:
            use_discovery(app, discover_period)
            new = False
        http = app.test_client()
        entry = next(m for m in http.get("/v1/metrics").json["metrics"]
                     if m["name"] == "crash_sig")
        sketch = OpenDomainSketch.from_id(entry["mechanism"])
        started = time.perf_counter()
        made = [day_counters(sketch, args.devices, seed) for seed in range(3)]
        client = redis.Redis.from_url(server.url)
        today = keys.hour_index(datetime.now(timezone.utc)) // 24
        for ago in range(1, args.days + 1):
            client.set(keys.open_counters("crash_sig", sketch.id, (today - ago) * 24),
                       made[ago % 3].astype(keys.COUNTER_DTYPE).tobytes())
        client.close()
        print(f"{sketch.id}: {4 * sketch.width:,} bytes a day; {args.days} days written in "
              f"{time.perf_counter() - started:.1f} s; code: {'this branch' if new else 'old'}")
        midnight = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0,
                                                      microsecond=0)
        cases = [(f"{args.days} days", args.days), ("30 days", 30), ("30 days, again", 30),
                 ("7 days", 7)]
        for label, days in cases:
            query = {"metric": "crash_sig",
                     "from": (midnight - timedelta(days=days)).isoformat(),
                     "to": midnight.isoformat()}
            began = time.perf_counter()
            answer = http.get("/dashboard/data", query_string=query)
            seconds = time.perf_counter() - began
            body = answer.json or {}
            read = body.get("cost", {}).get("bytes_read",
                                            days * 4 * sketch.width if answer.status_code == 200 else 0)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            found = len((body.get("discovery") or {}).get("found", []))
            print(f"{label:>20}: {answer.status_code} in {seconds:6.2f} s, "
                  f"{read / 1e6:7.1f} MB of counters read, {found:3d} strings found, "
                  f"peak RSS {peak:,.0f} MiB"
                  + (f"  [{body.get('detail', '')[:110]}]" if not answer.status_code == 200 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
