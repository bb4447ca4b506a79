"""Soak bench: hold 80 % of the measured maximum ingest rate for 10 minutes.

One collector (`deniable serve`, gunicorn, 2 sync workers per core) on one private Redis (AOF
everysec), or on the 3-master + 3-replica cluster with ``--cluster``; auth on with an ingest
key, rate limits off. The load is bench/ingest.py's: wrk with bench/ingest.lua (batches of 100,
a fresh batch id per POST).

1. The maximum: wrk unpaced for ``--probe-seconds``.
2. The soak: wrk in back-to-back ``--interval`` runs, each connection paced by wrk's delay()
   hook, the delay re-tuned after each interval so that the rate stays at ``--load`` of the
   maximum. Each interval prints req/s, its share of the maximum, p50, p99 and errors.
3. Resident memory (RSS) of the collector (gunicorn master and workers) and of Redis, at the
   start of the soak and at its end; and whether Redis holds every acknowledged report.

Targets: memory flat within 10 %, p99 < 50 ms, no errors. Redis's memory grows by design: each
batch id is remembered for DENIABLE_BATCH_ID_TTL_SECONDS (7 days); the bench prints the key
count and the bytes per batch. It is a bench, not a test:

    ./dev bench soak                 # 10 minutes
    ./dev bench soak --minutes 1     # shorter
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/rediscluster.py: the cluster the tests start

from ingest import METRICS, ensure_wrk, run_wrk  # noqa: E402  (bench/ingest.py)
from scaleout import stored as stored_reports, write_inputs  # noqa: E402  (bench/scaleout.py)

from deniable.collector.auth import create_key  # noqa: E402
from deniable.collector.embedded import RedisServer  # noqa: E402
from deniable.collector.server import CollectorProcess, default_workers  # noqa: E402
from deniable.collector.store import connect  # noqa: E402

TARGET_P99_MS = 50.0
TARGET_MEMORY_GROWTH = 0.10


def rss_kib(pid: int) -> int:
    """Resident memory of one process, in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, in KiB."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss_kib(pid)
        todo.extend(children.get(pid, []))
    return total


def redis_pids(url: str, cluster: bool) -> list[int]:
    """The process ids of the Redis server(s) behind ``url``."""
    client = connect(url, cluster=cluster)
    try:
        if cluster:
            replies = client.info("server", target_nodes=client.ALL_NODES)
            return [int(info["process_id"]) for info in replies.values()]
        return [int(client.info("server")["process_id"])]
    finally:
        client.close()


def redis_keys(url: str, cluster: bool) -> int:
    """Keys in Redis (all masters of a cluster)."""
    client = connect(url, cluster=cluster)
    try:
        if cluster:
            sizes = client.dbsize(target_nodes=client.PRIMARIES)
            return sum(sizes.values()) if isinstance(sizes, dict) else int(sizes)
        return int(client.dbsize())
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="soak length")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds per printed interval")
    parser.add_argument("--load", type=float, default=0.8, help="share of the maximum to hold")
    parser.add_argument("--probe-seconds", type=float, default=8.0,
                        help="wrk time to measure the maximum")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, default=None,
                        help="gunicorn workers (default: 2 per core)")
    parser.add_argument("--batch", type=int, default=100, help="reports per POST")
    parser.add_argument("--cluster", action="store_true",
                        help="soak on a 3-master + 3-replica Redis Cluster")
    args = parser.parse_args()
    wrk = ensure_wrk()
    workers = args.workers or default_workers()

    with tempfile.TemporaryDirectory(prefix="deniable-soak-") as tmp_name:
        tmp = Path(tmp_name)
        metrics_file, reports_file = write_inputs(tmp, args.batch)
        if args.cluster:
            from tests.rediscluster import RedisClusterNodes

            backend: object = RedisClusterNodes(tmp / "cluster")
            backend.start()  # type: ignore[attr-defined]
            url = backend.url  # type: ignore[attr-defined]
        else:
            backend = RedisServer(tmp / "redis", appendonly=True)
            url = backend.start()  # type: ignore[attr-defined]
        try:
            client = connect(url, cluster=args.cluster)
            key = create_key(client, "ingest", app="soak").secret
            client.close()
            env = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
                   "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0",
                   "DENIABLE_REDIS_CLUSTER": "true" if args.cluster else "false"}
            with CollectorProcess(url, metrics_file, workers=workers, env=env) as collector:
                assert collector.process is not None
                print(f"soak: {len(os.sched_getaffinity(0))} cores, load average "
                      f"{os.getloadavg()[0]:.2f}; {'cluster (3+3)' if args.cluster else '1 Redis'}"
                      f"; {workers} gunicorn workers; wrk -t{args.threads} -c{args.connections}; "
                      f"batches of {args.batch}", flush=True)
                run_wrk(wrk, collector.url, reports_file, 2, args.connections, args.threads,
                        key=key)  # warm-up
                probe = run_wrk(wrk, collector.url, reports_file, args.probe_seconds,
                                args.connections, args.threads, key=key)
                maximum = probe["req_per_s"]
                target = args.load * maximum
                print(f"maximum: {maximum:.0f} req/s = {maximum * args.batch:.0f} reports/s "
                      f"(p99 {probe['p99_us'] / 1000:.1f} ms); holding {args.load:.0%}: "
                      f"{target:.0f} req/s", flush=True)
                cycle_ms = args.connections * 1000 / target  # each connection: one per cycle
                delay_ms = max(1, round(cycle_ms - probe["p50_us"] / 1000))
                redis_processes = redis_pids(url, args.cluster)
                start_memory = (tree_rss_kib(collector.process.pid),
                                sum(rss_kib(p) for p in redis_processes))
                start_keys = redis_keys(url, args.cluster)
                acknowledged, errors, worst_p99, started = 0, 0, 0.0, time.monotonic()
                before = stored_reports(url)
                print(f"{'t (s)':>6} {'req/s':>7} {'of max':>6} {'p50 ms':>7} {'p99 ms':>7} "
                      f"{'errors':>6} {'delay ms':>8}")
                while time.monotonic() - started < args.minutes * 60:
                    seconds = min(args.interval, args.minutes * 60 - (time.monotonic() - started))
                    run = run_wrk(wrk, collector.url, reports_file, max(1, round(seconds)),
                                  args.connections, args.threads, delay_ms, key)
                    acknowledged += int(run["accepted"]) * args.batch
                    errors += int(run["other"] + run["socket_errors"])
                    worst_p99 = max(worst_p99, run["p99_us"] / 1000)
                    print(f"{time.monotonic() - started:6.0f} {run['req_per_s']:7.0f} "
                          f"{run['req_per_s'] / maximum:6.0%} {run['p50_us'] / 1000:7.1f} "
                          f"{run['p99_us'] / 1000:7.1f} {run['other'] + run['socket_errors']:6.0f}"
                          f" {delay_ms:8d}", flush=True)
                    # Re-tune the pacing: a connection's cycle is its latency plus the delay.
                    actual_cycle = args.connections * 1000 / max(run["req_per_s"], 1.0)
                    delay_ms = max(1, round(delay_ms + cycle_ms - actual_cycle))
                end_memory = (tree_rss_kib(collector.process.pid),
                              sum(rss_kib(p) for p in redis_processes))
                time.sleep(0.5)
                held = stored_reports(url) - before
                end_keys = redis_keys(url, args.cluster)
        finally:
            backend.stop()  # type: ignore[attr-defined]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    growth = [(end - start) / start for start, end in zip(start_memory, end_memory)]
    print(f"memory (RSS): collector {start_memory[0] / 1024:.1f} -> {end_memory[0] / 1024:.1f} "
          f"MiB ({growth[0]:+.1%}); Redis {start_memory[1] / 1024:.1f} -> "
          f"{end_memory[1] / 1024:.1f} MiB ({growth[1]:+.1%})   target within "
          f"{TARGET_MEMORY_GROWTH:.0%}  {verdict(max(abs(g) for g in growth) <= TARGET_MEMORY_GROWTH)}")
    batches = max(1, acknowledged // args.batch)
    print(f"Redis keys {start_keys} -> {end_keys}: each batch id is kept for "
          f"DENIABLE_BATCH_ID_TTL_SECONDS (7 days), so Redis grows by design, "
          f"{(end_memory[1] - start_memory[1]) * 1024 / batches:.0f} B of RSS per batch here")
    print(f"worst p99 {worst_p99:.1f} ms   target < {TARGET_P99_MS:g} ms  "
          f"{verdict(worst_p99 < TARGET_P99_MS)}")
    print(f"errors {errors}   target 0  {verdict(errors == 0)}")
    slack = args.connections * args.batch * (1 + int(args.minutes * 60 / args.interval))
    print(f"Redis holds {held} reports of the soak; {acknowledged} acknowledged (plus at most "
          f"{slack} in flight at interval ends): "
          f"{'consistent' if acknowledged <= held <= acknowledged + slack else 'INCONSISTENT'}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
