"""Soak bench: hold 80 % of the measured maximum ingest rate for 10 minutes.

One collector (`deniable serve`, gunicorn, 2 sync workers per core) on one private Redis (AOF
everysec), or on the 3-master + 3-replica cluster with ``--cluster``; auth on with an ingest
key, rate limits off. The load is bench/ingest.py's: wrk with bench/ingest.lua (batches of 100,
a fresh batch id per POST).

1. The maximum: wrk unpaced for ``--probe-seconds``.
2. Calibration: short paced runs until the rate is within 5 % of ``--load`` of the maximum
   (each connection paced by wrk's delay() hook), so the soak starts at its load.
3. The soak: wrk in back-to-back ``--interval`` runs, the delay re-tuned after each interval
   so that the rate stays at ``--load`` of the maximum. Each interval prints req/s, its share
   of the maximum, p50, p99, errors, and the Redis forks (AOF rewrites) it saw.
4. Memory at the start of the soak and at its end: the resident memory (RSS) of the collector
   (gunicorn master and workers) and of Redis; and Redis's own accounting (``used_memory``),
   split into the batch records and everything else. Whether Redis holds every acknowledged
   report.

Targets: memory flat within 10 %, p99 < 50 ms, no errors. The batch records (one per batch,
kept DENIABLE_BATCH_ID_TTL_SECONDS, 7 days by default, so that a re-sent batch counts once)
grow with every batch until the first ones expire; their memory is bounded by
``batches/s x TTL x bytes per batch``, not flat within a 10-minute soak. So the bench sets
them apart: it deletes the warm-up's records before the soak and, at the end, counts the soak's
records, deletes them and reads Redis again. "Redis without batch records" must be flat; the
records' bytes per batch are printed with the size a 7-day window would take at the held rate
(docs/scaling.md, "Sizing Redis"). It is a bench, not a test:

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

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/rediscluster.py: the cluster the tests start

from ingest import ensure_wrk, run_wrk, write_inputs  # noqa: E402  (bench/ingest.py)
from scaleout import stored as stored_reports  # noqa: E402  (bench/scaleout.py)

from deniable.collector import keys  # noqa: E402
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


BATCH_RECORD_PATTERNS = (keys.batch("*"), keys.batch_applied("*", "*"),
                         keys.BATCH_MARKERS_PATTERN)


def _primaries(url: str, cluster: bool) -> list[redis.Redis]:
    """A plain client per master (one for a single Redis)."""
    if not cluster:
        return [redis.Redis.from_url(url)]
    client = connect(url, cluster=True)
    try:
        return [redis.Redis(host=node.host, port=node.port)
                for node in client.get_primaries()]
    finally:
        client.close()


def _settled(node: redis.Redis) -> bool:
    """No lazy free, AOF rewrite or replication catch-up under way on this master: the moments
    its buffers (replica output, AOF) hold transient copies of recent writes."""
    info = node.info()
    offset = int(info.get("master_repl_offset", 0))
    replicas_behind = any(isinstance(v, dict) and int(v.get("offset", offset)) < offset
                          for k, v in info.items() if k.startswith("slave"))
    return (int(info.get("lazyfree_pending_objects", 0)) == 0 and not replicas_behind
            and int(info.get("aof_rewrite_in_progress", 0)) == 0
            and int(info.get("aof_rewrite_scheduled", 0)) == 0)


def used_memory(url: str, cluster: bool) -> tuple[int, int]:
    """Redis's own count of the bytes it holds (``used_memory``) less its replication buffers,
    and those buffers: the backlog (a ring that fills up to ``repl-backlog-size``, then stays)
    and the replicas' output buffers (bounded by ``client-output-buffer-limit replica``);
    summed over the masters, once each has settled (``_settled``, at most 60 s) and a second
    has let its cron shrink emptied tables."""
    total, backlog = 0, 0
    for node in _primaries(url, cluster):
        with node:
            deadline = time.monotonic() + 60
            while not _settled(node) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)
            info = node.info("memory")
            ring = int(info.get("mem_replication_backlog", 0)) + \
                int(info.get("mem_clients_slaves", 0))
            total += int(info["used_memory"]) - ring
            backlog += ring
    return total, backlog


def forks(url: str, cluster: bool) -> int:
    """Forks so far (AOF rewrites, replica syncs) over every Redis process: each one stalls
    its Redis for the fork's duration and competes for the cores while its child runs."""
    client = connect(url, cluster=cluster)
    try:
        if cluster:
            replies = client.info("stats", target_nodes=client.ALL_NODES)
            return sum(int(info["total_forks"]) for info in replies.values())
        return int(client.info("stats")["total_forks"])
    finally:
        client.close()


def delete_batch_records(url: str, cluster: bool) -> int:
    """Delete every batch record (claims, markers); the number of keys deleted.

    One DEL per key, pipelined: a cluster master refuses a DEL across slots."""
    deleted = 0
    for node in _primaries(url, cluster):
        with node:
            for pattern in BATCH_RECORD_PATTERNS:
                pipe = node.pipeline(transaction=False)
                for name in node.scan_iter(match=pattern, count=1000):
                    pipe.delete(name)
                    if len(pipe) == 1000:
                        deleted += sum(pipe.execute())
                deleted += sum(pipe.execute())
    return deleted


def calibrate(wrk: str, url: str, reports_file: Path, args: argparse.Namespace, key: str,
              target: float, delay_ms: float) -> float:
    """Re-tune the pacing delay in short runs until the rate is within 5 % of ``target``."""
    for _ in range(8):
        run = run_wrk(wrk, url, reports_file, 3, args.connections, args.threads, delay_ms, key)
        print(f"calibrating: delay {delay_ms:.1f} ms -> {run['req_per_s']:.0f} req/s "
              f"({run['req_per_s'] / target:.0%} of the target)", flush=True)
        if abs(run["req_per_s"] / target - 1) <= 0.05:
            break
        delay_ms = retuned(delay_ms, target, run["req_per_s"], args.connections)
    return delay_ms


def retuned(delay_ms: float, target: float, measured: float, connections: int) -> float:
    """The pacing delay that moves a connection's cycle (its latency plus the delay) from the
    measured rate's to the target rate's."""
    wanted_cycle, actual_cycle = connections * 1000 / target, connections * 1000 / max(measured, 1.0)
    return max(0.1, round(delay_ms + wanted_cycle - actual_cycle, 1))


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
                delay_ms = calibrate(wrk, collector.url, reports_file, args, key, target,
                                     max(0.1, round(cycle_ms - probe["p50_us"] / 1000, 1)))
                redis_processes = redis_pids(url, args.cluster)
                delete_batch_records(url, args.cluster)  # the warm-up's, probe's, calibration's
                start_memory = (tree_rss_kib(collector.process.pid),
                                sum(rss_kib(p) for p in redis_processes))
                start_used, start_backlog = used_memory(url, args.cluster)
                start_keys = redis_keys(url, args.cluster)
                acknowledged, errors, worst_p99, started = 0, 0, 0.0, time.monotonic()
                before = stored_reports(url)
                print(f"{'t (s)':>6} {'req/s':>7} {'of max':>6} {'p50 ms':>7} {'p99 ms':>7} "
                      f"{'errors':>6} {'delay ms':>8} {'forks':>5}")
                forks_before = forks(url, args.cluster)
                while time.monotonic() - started < args.minutes * 60:
                    seconds = min(args.interval, args.minutes * 60 - (time.monotonic() - started))
                    if seconds < 1:  # wrk runs whole seconds: no 1-second run for a remainder
                        break
                    run = run_wrk(wrk, collector.url, reports_file, max(1, round(seconds)),
                                  args.connections, args.threads, delay_ms, key)
                    acknowledged += int(run["accepted"]) * args.batch
                    errors += int(run["other"] + run["socket_errors"])
                    worst_p99 = max(worst_p99, run["p99_us"] / 1000)
                    forks_now = forks(url, args.cluster)
                    print(f"{time.monotonic() - started:6.0f} {run['req_per_s']:7.0f} "
                          f"{run['req_per_s'] / maximum:6.0%} {run['p50_us'] / 1000:7.1f} "
                          f"{run['p99_us'] / 1000:7.1f} {run['other'] + run['socket_errors']:6.0f}"
                          f" {delay_ms:8.1f} {forks_now - forks_before:5d}", flush=True)
                    forks_before = forks_now
                    delay_ms = retuned(delay_ms, target, run["req_per_s"], args.connections)
                end_memory = (tree_rss_kib(collector.process.pid),
                              sum(rss_kib(p) for p in redis_processes))
                soak_seconds = time.monotonic() - started
                time.sleep(0.5)
                held = stored_reports(url) - before
                end_keys = redis_keys(url, args.cluster)
                end_used, _ = used_memory(url, args.cluster)
                records = delete_batch_records(url, args.cluster)
                end_used_without, end_backlog = used_memory(url, args.cluster)
        finally:
            backend.stop()  # type: ignore[attr-defined]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    growth = [(end - start) / start for start, end in zip(start_memory, end_memory)]
    rest_growth = (end_used_without - start_used) / start_used
    batches = max(1, acknowledged // args.batch)
    per_batch = (end_used - end_used_without) / batches
    week_gib = per_batch * batches / soak_seconds * 7 * 86400 / 2**30
    print(f"collector RSS (master + workers): {start_memory[0] / 1024:.1f} -> "
          f"{end_memory[0] / 1024:.1f} MiB ({growth[0]:+.1%})   target within "
          f"{TARGET_MEMORY_GROWTH:.0%}  {verdict(abs(growth[0]) <= TARGET_MEMORY_GROWTH)}")
    print(f"Redis without batch records (used_memory less replication buffers): "
          f"{start_used / 2**20:.1f} -> "
          f"{end_used_without / 2**20:.1f} MiB ({rest_growth:+.1%}, "
          f"{(end_used_without - start_used) / 2**20:+.2f} MiB)   target within "
          f"{TARGET_MEMORY_GROWTH:.0%}  {verdict(abs(rest_growth) <= TARGET_MEMORY_GROWTH)}")
    print(f"Redis batch records: {records} keys for {batches} acknowledged batches, "
          f"{(end_used - end_used_without) / 2**20:.1f} MiB = {per_batch:.0f} B each; kept "
          f"for the batch-id TTL, so at this rate ({batches / soak_seconds:.0f} batches/s) a "
          f"7-day window holds {week_gib:.1f} GiB (bounded, not a leak)")
    if args.cluster:
        print(f"Redis replication buffers (masters): {start_backlog / 2**20:.1f} -> "
              f"{end_backlog / 2**20:.1f} MiB (the backlog is a ring, at most "
              f"repl-backlog-size each)")
    print(f"Redis RSS, all processes: {start_memory[1] / 1024:.1f} -> {end_memory[1] / 1024:.1f}"
          f" MiB (with the records); keys {start_keys} -> {end_keys}")
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
