"""What nginx in front costs: ingest through deploy/vm's nginx site (TLS) against gunicorn direct.

Run as ``./dev bench proxy`` (about half a minute). One private redis-server (AOF everysec), one
collector (auth on, a real ingest key, rate limits off, DENIABLE_PROXY_FIX_X_FOR=1), and the
shipped nginx site rendered for loopback (tests/nginx_kit.py: a private CA, free ports, one
nginx worker). wrk sends batches of 100 reports (bench/ingest.lua) in alternating rounds:
straight to gunicorn over plain HTTP, and to nginx over TLS (HTTP/1.1, keep-alive), so both
see the same background load. It prints req/s and p99 of each and their ratio, and checks
that Redis holds what was acknowledged.
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
sys.path.insert(0, str(HERE.parent))  # the tests' nginx kit renders deploy/vm's site

from deniable.collector.auth import create_key  # noqa: E402
from deniable.collector.embedded import RedisServer  # noqa: E402
from deniable.collector.server import CollectorProcess, default_workers  # noqa: E402
from ingest import combine, ensure_wrk, run_wrk, stored_reports, write_inputs  # noqa: E402
from tests.nginx_kit import private_ca, vm_nginx  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="wrk time for each side")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    wrk = ensure_wrk()
    workers = default_workers()
    round_seconds = max(1, round(args.seconds / args.rounds))
    print(f"bench: {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.2f} "
          f"at start; gunicorn sync workers={workers}; nginx 1 worker; wrk -t{args.threads} "
          f"-c{args.connections}, {args.rounds} rounds of {round_seconds}s per side; batches of "
          f"{args.batch}", flush=True)
    with tempfile.TemporaryDirectory(prefix="deniable-bench-") as tmp, \
            RedisServer(Path(tmp) / "redis", appendonly=True) as store:
        metrics_file, reports_file = write_inputs(Path(tmp), args.batch)
        client = redis.Redis.from_url(store.url)
        key = create_key(client, "ingest", app="bench").secret
        env = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0",
               "DENIABLE_PROXY_FIX_X_FOR": "1"}
        tls = private_ca(Path(tmp) / "tls")
        with CollectorProcess(store.url, metrics_file, workers=workers, env=env) as collector, \
                vm_nginx(Path(tmp) / "nginx", tls, collector.port) as nginx:
            proxied_url = f"https://127.0.0.1:{nginx.port}"
            for url in (collector.url, proxied_url):  # warm up both paths
                run_wrk(wrk, url, reports_file, 1, args.connections, args.threads, key=key)
            time.sleep(0.5)
            before = stored_reports(client)
            direct_runs, proxied_runs = [], []
            for _ in range(args.rounds):
                direct_runs.append(run_wrk(wrk, collector.url, reports_file, round_seconds,
                                           args.connections, args.threads, key=key))
                proxied_runs.append(run_wrk(wrk, proxied_url, reports_file, round_seconds,
                                            args.connections, args.threads, key=key))
            time.sleep(0.5)
            in_redis = stored_reports(client) - before
        client.close()
    direct, proxied = combine(direct_runs), combine(proxied_runs)
    for name, run in (("gunicorn direct", direct), ("via nginx, TLS", proxied)):
        print(f"{name:16s} {run['req_per_s']:7.0f} req/s = "
              f"{run['accepted'] * args.batch / (run['duration_us'] / 1e6):8.0f} reports/s "
              f"(p50 {run['p50_us'] / 1000:.1f} ms, p99 {run['p99_us'] / 1000:.1f} ms); "
              f"{run['other']:.0f} other, {run['socket_errors']:.0f} socket errors")
    print(f"via nginx / direct: {proxied['req_per_s'] / direct['req_per_s']:.2f} x req/s")
    acknowledged = int(direct["accepted"] + proxied["accepted"]) * args.batch
    # wrk stops counting at each round's end with up to one request per connection in flight.
    slack = 2 * args.rounds * args.connections * args.batch
    consistent = acknowledged <= in_redis <= acknowledged + slack
    print(f"Redis holds {in_redis} reports from the measured rounds; {acknowledged} acknowledged, "
          f"plus at most {slack} in flight at round ends: "
          f"{'consistent' if consistent else 'INCONSISTENT'}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
