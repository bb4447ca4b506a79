"""Ingest bench: reports/s through the real collector, side by side with its ceilings.

Run as ``./dev bench ingest`` (about a minute). In one run, on one private redis-server (AOF
everysec, as deploy/redis.conf):

1. the collector under gunicorn (collector/gunicorn.conf.py, 2 sync workers per core), driven by wrk
   with batches of 100 reports, each POST with a fresh random batch_id (bench/ingest.lua);
2. a no-op Flask POST endpoint (bench/noop_app.py) served the same way: the framework ceiling;
3. the raw Redis ceiling: one Lua EVALSHA applying one HINCRBY per report, 1000 reports per
   call, from as many Python processes as there are workers;
4. p99 latency at half the collector's maximum rate: wrk again, each connection paced by
   wrk's ``delay()`` hook (a closed loop with think time; wrk2 is not packaged).

It prints absolute reports/s, ingest req/s / no-op req/s (target >= 0.6), the ratio to the raw
ceiling, p99 at half load (target < 50 ms), and checks that Redis holds exactly the reports
the collector acknowledged.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from deniable.core import keys
from deniable.collector.auth import create_key
from deniable.collector.embedded import RedisServer, free_port
from deniable.collector.server import CollectorProcess, default_config_file, default_workers
from deniable.collector.store import Store

HERE = Path(__file__).resolve().parent
METRICS = {"app_opened": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2",
           "feature_x_enabled": "rr:1/2:1/2", "crash_seen": "rr:1/4:1/2"}
TARGET_REPORTS_PER_S = 150_000
TARGET_NOOP_RATIO = 0.6
TARGET_P99_MS = 50.0


def write_inputs(tmp: Path, batch: int) -> tuple[Path, Path]:
    """The bench's metrics file and one batch body of ``batch`` reports, written in ``tmp``."""
    metrics_file = tmp / "metrics.toml"
    metrics_file.write_text("".join(f'[metrics.{name}]\nmechanism = "{mech}"\n\n'
                                    for name, mech in METRICS.items()))
    names = list(METRICS)
    reports_file = tmp / "reports.json"
    reports_file.write_text(json.dumps(
        [{"metric": names[i % len(names)], "mechanism": METRICS[names[i % len(names)]],
          "bit": (i * 7) % 3 % 2} for i in range(batch)], separators=(",", ":")))
    return metrics_file, reports_file


def combine(runs: list[dict[str, float]]) -> dict[str, float]:
    """Several wrk runs as one: summed counts and time; the worst p50/p99 of the rounds."""
    total: dict[str, float] = {key: sum(run[key] for run in runs)
                               for key in ("requests", "duration_us", "accepted", "duplicate",
                                           "other", "socket_errors")}
    for key in ("p50_us", "p99_us", "max_us"):
        total[key] = max(run[key] for run in runs)
    total["req_per_s"] = total["requests"] / (total["duration_us"] / 1e6)
    return total


def ensure_wrk() -> str:
    """wrk's path; installed from Debian's packages if missing and we are root."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench: installing wrk (apt-get install -y wrk) ...", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if shutil.which("wrk") is None:  # the package lists may be stale
            subprocess.run(["apt-get", "update"], check=False, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "wrk"], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = shutil.which("wrk")
    if not found:
        sys.exit("bench: wrk is needed: apt-get install wrk")
    return found


def run_wrk(wrk: str, url: str, reports_file: Path, seconds: float, connections: int,
            threads: int, delay_ms: float = 0, key: str = "") -> dict[str, float]:
    """One wrk run with bench/ingest.lua; returns its JSON summary plus req/s.

    wrk takes whole seconds only (``-d1.5s`` fails), so ``seconds`` is rounded up, to 1 at
    least; req/s comes from wrk's own measured duration, so the rounding skews nothing."""
    whole = max(1, math.ceil(seconds))
    command = [wrk, f"-t{threads}", f"-c{connections}", f"-d{whole}s", "--timeout", "5s",
               "-s", str(HERE / "ingest.lua"), f"{url}/v1/reports", "--",
               str(reports_file), f"{delay_ms:g}", key]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"bench: wrk failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-500:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["req_per_s"] = summary["requests"] / (summary["duration_us"] / 1e6)
    return summary


def _raw_worker(url: str, seconds: float, batch: int, out: multiprocessing.Queue) -> None:
    client = redis.Redis.from_url(url)
    script = client.register_script(
        "for i = 1, #ARGV, 3 do redis.call('HINCRBY', KEYS[1], ARGV[i + 1], ARGV[i + 2]) end")
    args: list[str | int] = []
    for i in range(batch):
        args.extend(("x", "ones" if i % 2 else "n", 1))
    key = f"bench:raw:{os.getpid()}"
    done, deadline = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        script(keys=[key], args=args)
        done += batch
    out.put(done / (time.perf_counter() - started))
    client.close()


def raw_ceiling(url: str, processes: int, seconds: float, batch: int = 1000) -> float:
    """Reports/s that Python processes can push into Redis: one HINCRBY per report in Lua."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_raw_worker, args=(url, seconds, batch, queue))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    rates = [queue.get(timeout=seconds + 30) for _ in workers]
    for worker in workers:
        worker.join()
    return sum(rates)


def start_noop(workers: int, app: str = "noop_app:app",
               env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Serve a bench/ WSGI app with the collector's gunicorn config; return it and its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", default_config_file(), "-b",
         f"127.0.0.1:{port}", "-w", str(workers), "--chdir", str(HERE), app],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(urllib.request.Request(f"{url}/v1/reports", data=b"{}"),
                                   timeout=1).close()
            return process, url
        except urllib.error.HTTPError:
            return process, url  # it answered (an error, to an empty batch): it is up
        except OSError:
            time.sleep(0.05)
    process.kill()
    sys.exit("bench: the no-op app did not start")


def stored_reports(client: redis.Redis) -> int:
    return sum(n for n, _ in Store(client).totals().values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="total wrk time for each of ingest and no-op")
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternating ingest / no-op rounds that share --seconds")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, default=None,
                        help="gunicorn workers (default: collector/gunicorn.conf.py's, 2 per core)")
    parser.add_argument("--batch", type=int, default=100, help="reports per POST")
    args = parser.parse_args()
    wrk = ensure_wrk()
    cores = len(os.sched_getaffinity(0))
    workers = args.workers or default_workers()
    load = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="deniable-bench-") as tmp, \
            RedisServer(Path(tmp) / "redis", appendonly=True) as store:
        metrics_file, reports_file = write_inputs(Path(tmp), args.batch)
        client = redis.Redis.from_url(store.url)
        # The production path: auth on, with a real ingest key. Rate limits are off, since
        # every request comes from one address and one key (bench/auth_overhead.py measures
        # their cost).
        key = create_key(client, "ingest", app="bench").secret
        open_limits = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
                       "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}

        print(f"bench: {cores} cores, load average {load[0]:.2f} at start; auth on (one ingest "
              "key), rate limits off; gunicorn sync "
              f"workers={workers}; wrk -t{args.threads} -c{args.connections} "
              f"-d{args.seconds:g}s; batches of {args.batch}", flush=True)
        noop_process, noop_url = start_noop(workers)
        try:
            with CollectorProcess(store.url, metrics_file, workers=workers,
                                  env=open_limits) as collector:
                run_wrk(wrk, collector.url, reports_file, 2, args.connections, args.threads,
                        key=key)
                run_wrk(wrk, noop_url, reports_file, 2, args.connections, args.threads)
                time.sleep(0.5)  # let the warm-up's last requests land before counting
                for pattern in (keys.COUNTERS_PATTERN, f"{keys.PREFIX}:b:*"):
                    for stale in client.scan_iter(pattern):
                        client.delete(stale)  # the warm-up's counters and batch ids only
                # Alternate short rounds, so both sides see the same background load.
                ingest_runs, noop_runs = [], []
                for _ in range(args.rounds):
                    ingest_runs.append(run_wrk(wrk, collector.url, reports_file,
                                               args.seconds / args.rounds, args.connections,
                                               args.threads, key=key))
                    noop_runs.append(run_wrk(wrk, noop_url, reports_file,
                                             args.seconds / args.rounds, args.connections,
                                             args.threads))
                ingest, noop = combine(ingest_runs), combine(noop_runs)
                time.sleep(0.5)
                in_redis = stored_reports(client)
                half_rate = ingest["req_per_s"] / 2
                delay_ms = max(1, round(args.connections * 1000 / half_rate))
                half = run_wrk(wrk, collector.url, reports_file, args.seconds / 2,
                               args.connections, args.threads, delay_ms, key)
            bare_process, bare_url = start_noop(workers, "bare_ingest_app:app", {
                "DENIABLE_REDIS_URL": store.url, "BENCH_REGISTRY": json.dumps(METRICS)})
            try:
                bare_runs, noop_again = [], []
                for _ in range(2):
                    bare_runs.append(run_wrk(wrk, bare_url, reports_file, args.seconds / 4,
                                             args.connections, args.threads))
                    noop_again.append(run_wrk(wrk, noop_url, reports_file, args.seconds / 4,
                                              args.connections, args.threads))
                bare, noop_bare = combine(bare_runs), combine(noop_again)
            finally:
                bare_process.terminate()
                bare_process.wait(timeout=30)
        finally:
            noop_process.terminate()
            noop_process.wait(timeout=30)
        client.flushdb()
        raw = raw_ceiling(store.url, workers, min(args.seconds, 5.0))
        client.close()

    reports_per_s = ingest["accepted"] * args.batch / (ingest["duration_us"] / 1e6)
    noop_ratio = ingest["req_per_s"] / noop["req_per_s"]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"ingest:      {ingest['req_per_s']:9.0f} req/s = {reports_per_s:9.0f} reports/s "
          f"(p50 {ingest['p50_us'] / 1000:.1f} ms, p99 {ingest['p99_us'] / 1000:.1f} ms); "
          f"{ingest['accepted']:.0f} accepted, {ingest['duplicate']:.0f} duplicate, "
          f"{ingest['other']:.0f} other, {ingest['socket_errors']:.0f} socket errors")
    acknowledged = int(ingest["accepted"]) * args.batch
    # wrk stops counting at each round's end with up to one request per connection in flight:
    # those are applied but not counted as accepted.
    slack = args.rounds * args.connections * args.batch
    consistent = acknowledged <= in_redis <= acknowledged + slack
    print(f"  Redis holds {in_redis} reports; {acknowledged} acknowledged to wrk, plus at most "
          f"{slack} in flight at round ends: {'consistent' if consistent else 'INCONSISTENT'}")
    print(f"no-op Flask: {noop['req_per_s']:9.0f} req/s (p99 {noop['p99_us'] / 1000:.1f} ms)")
    print(f"bare WSGI:   {bare['req_per_s']:9.0f} req/s: read, validate, EVALSHA and nothing "
          f"else ({bare['accepted']:.0f} accepted); {bare['req_per_s'] / noop_bare['req_per_s']:.2f}"
          f"x the no-op measured beside it: the floor without auth, metrics, logs or ids")
    print(f"raw Redis:   {raw:9.0f} reports/s (Lua HINCRBY per report, {workers} processes)")
    print(f"half load:   {half['req_per_s']:9.0f} req/s paced by wrk delay() of {delay_ms} ms "
          f"per connection: p99 {half['p99_us'] / 1000:.1f} ms, {half['other']} errors")
    print(f"absolute     {reports_per_s:9.0f} reports/s        target >= {TARGET_REPORTS_PER_S}"
          f"  {verdict(reports_per_s >= TARGET_REPORTS_PER_S)}")
    print(f"vs no-op     {noop_ratio:9.2f} x req/s             target >= {TARGET_NOOP_RATIO}"
          f"      {verdict(noop_ratio >= TARGET_NOOP_RATIO)}")
    print(f"vs raw Redis {reports_per_s / raw:9.2f} x reports/s")
    print(f"p99 at half  {half['p99_us'] / 1000:9.1f} ms               target < {TARGET_P99_MS:g} ms"
          f"   {verdict(half['p99_us'] / 1000 < TARGET_P99_MS)}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end (other work on the machine skews "
          "absolute figures; the ratios were measured side by side)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
