"""Scale-out bench: reports/s through Debian's nginx in front of 1, 2 and 4 collector processes,
against one Redis and against a 3-shard Redis Cluster (3 masters + 3 replicas, from
deploy/redis-cluster), measured side by side in one run.

Each collector is one `deniable serve` (gunicorn, ``--workers`` sync workers: one "pod"); nginx
balances keep-alive connections over them (least_conn). The load is bench/ingest.py's: wrk
with bench/ingest.lua, batches of 100 reports, a fresh batch id per POST, auth on with an
ingest key, rate limits off. Rounds alternate between configurations, so each sees the same
background load; the figures are the sums over the rounds.

    ./dev bench scaleout [--seconds 4] [--rounds 2] [--workers 2]
    ./dev bench scaleout --wait       # the cost of DENIABLE_REDIS_MIN_REPLICAS=1 instead

``--wait`` compares acknowledgement after the master applied a batch (min replicas 0) with
acknowledgement after WAIT saw one replica confirm it (1), for one Redis with one replica and
for the cluster, 2 collectors behind nginx.

Every figure is one machine's: collectors, nginx, Redis and wrk share its cores (see
docs/scaling.md for what changes on bigger machines).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/rediscluster.py: the cluster the tests start

from ingest import METRICS, combine, ensure_wrk, run_wrk, write_inputs  # noqa: E402  (bench/ingest.py)

from deniable.collector.auth import create_key  # noqa: E402
from deniable.collector.embedded import RedisServer, find_redis_server, free_port  # noqa: E402
from deniable.collector.server import CollectorProcess  # noqa: E402
from deniable.collector.store import connect  # noqa: E402
from tests.rediscluster import RedisClusterNodes  # noqa: E402

NGINX_CONF = """\
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream collectors {{
    least_conn;
{servers}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://collectors;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $remote_addr;
    }}
  }}
}}
"""


def ensure_nginx() -> str:
    """nginx's path; installed from Debian's packages if missing and we are root."""
    found = shutil.which("nginx") or (Path("/usr/sbin/nginx").is_file() and "/usr/sbin/nginx")
    if found:
        return str(found)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench: installing nginx (apt-get install -y nginx-light) ...", file=sys.stderr)
        for command in (["apt-get", "install", "-y", "nginx-light"], ["apt-get", "update"],
                        ["apt-get", "install", "-y", "nginx-light"]):
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            found = shutil.which("nginx") or (Path("/usr/sbin/nginx").is_file()
                                              and "/usr/sbin/nginx")
            if found:
                return str(found)
    sys.exit("bench: nginx is needed: apt-get install nginx-light")


@contextmanager
def nginx_in_front(nginx: str, ports: list[int], folder: Path) -> Iterator[str]:
    """nginx on a free loopback port, balancing over the collectors on ``ports``."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=0;" for p in ports)
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=folder, servers=servers, port=port))
    process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(folder), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import socket

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None:
                sys.exit(f"bench: nginx exited: {(folder / 'error.log').read_text()[-500:]}")
            time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def redis_with_replica(folder: Path) -> Iterator[str]:
    """One Redis (AOF everysec) with one replica; yields the master's URL."""
    with RedisServer(folder / "master", appendonly=True) as master:
        replica_dir = folder / "replica"
        replica_dir.mkdir(parents=True, exist_ok=True)
        replica = subprocess.Popen(
            [find_redis_server(), "--bind", "127.0.0.1", "--port", str(free_port()),
             "--dir", str(replica_dir), "--save", "", "--replicaof", "127.0.0.1",
             str(master.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=master.port)
            client.config_set("repl-diskless-sync-delay", 0)
            deadline = time.monotonic() + 20
            while client.info("replication").get("connected_slaves", 0) < 1:
                if time.monotonic() > deadline:
                    sys.exit("bench: the replica did not connect")
                time.sleep(0.05)
            client.close()
            yield master.url
        finally:
            replica.terminate()
            replica.wait(timeout=10)


def collectors(stack: ExitStack, url: str, cluster: bool, count: int, workers: int,
               metrics_file: Path, extra: dict[str, str] | None = None) -> list[int]:
    """Start ``count`` collectors on ``url``; their ports."""
    env = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0",
           "DENIABLE_REDIS_CLUSTER": "true" if cluster else "false",
           "DENIABLE_LOG_REQUESTS": "false", **(extra or {})}
    ports = []
    for _ in range(count):
        process = stack.enter_context(CollectorProcess(url, metrics_file, workers=workers,
                                                       env=env))
        ports.append(process.port)
    return ports


def stored(url: str) -> int:
    """Reports Redis holds for the bench's metrics, through RedisSource (any layout)."""
    from deniable.cli.sources import RedisSource

    source = RedisSource(url)
    return sum(int(source.counts(m).n.sum()) for m in METRICS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="wrk time per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per collector")
    parser.add_argument("--batch", type=int, default=100, help="reports per POST")
    parser.add_argument("--wait", action="store_true",
                        help="measure DENIABLE_REDIS_MIN_REPLICAS=1 against 0 instead")
    args = parser.parse_args()
    wrk, nginx = ensure_wrk(), ensure_nginx()
    print(f"bench: {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.2f} "
          f"at start; nginx least_conn in front; {args.workers} sync workers per collector; "
          f"wrk -t{args.threads} -c{args.connections}, {args.rounds} rounds of "
          f"{args.seconds:g} s per configuration; batches of {args.batch}", flush=True)

    with tempfile.TemporaryDirectory(prefix="deniable-scaleout-") as tmp_name, \
            ExitStack() as stack:
        tmp = Path(tmp_name)
        metrics_file, reports_file = write_inputs(tmp, args.batch)
        cluster = RedisClusterNodes(tmp / "cluster")
        stack.callback(cluster.stop)
        cluster.start()
        single = stack.enter_context(redis_with_replica(tmp / "single")) if args.wait else \
            stack.enter_context(RedisServer(tmp / "single", appendonly=True)).url
        backends = {"1 Redis": (single, False), "3 shards": (cluster.url, True)}
        keys = {}
        for label, (url, is_cluster) in backends.items():
            client = connect(url, cluster=is_cluster)
            keys[label] = create_key(client, "ingest", app="bench").secret
            client.close()

        configs: dict[str, tuple[str, str]] = {}  # label -> (nginx URL, backend)
        if args.wait:
            for label, (url, is_cluster) in backends.items():
                for replicas in (0, 1):
                    ports = collectors(stack, url, is_cluster, 2, args.workers, metrics_file,
                                       {"DENIABLE_REDIS_MIN_REPLICAS": str(replicas)})
                    front = stack.enter_context(nginx_in_front(
                        nginx, ports, tmp / f"nginx-{label}-{replicas}".replace(" ", "")))
                    configs[f"{label}, min replicas {replicas}"] = (front, label)
        else:
            for label, (url, is_cluster) in backends.items():
                for count in (1, 2, 4):
                    ports = collectors(stack, url, is_cluster, count, args.workers, metrics_file)
                    front = stack.enter_context(nginx_in_front(
                        nginx, ports, tmp / f"nginx-{label}-{count}".replace(" ", "")))
                    configs[f"{label}, {count} collector{'s' if count > 1 else ''}"] = \
                        (front, label)
        for front, label in configs.values():  # warm up: connections, caches, scripts
            run_wrk(wrk, front, reports_file, 1, args.connections, args.threads, key=keys[label])
        runs: dict[str, list[dict[str, float]]] = {label: [] for label in configs}
        for _ in range(args.rounds):
            for label, (front, backend) in configs.items():
                runs[label].append(run_wrk(wrk, front, reports_file, args.seconds,
                                           args.connections, args.threads, key=keys[backend]))
        results = {label: combine(r) for label, r in runs.items()}
        time.sleep(0.5)
        acknowledged = {b: 0 for b in backends}
        for label, result in results.items():
            acknowledged[configs[label][1]] += int(result["accepted"]) * args.batch
        held = {b: stored(url) for b, (url, _) in backends.items()}

    base_label = next(iter(results))
    base = results[base_label]["accepted"] * args.batch / (results[base_label]["duration_us"] / 1e6)
    print(f"{'configuration':34} {'reports/s':>10} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'errors':>6}")
    for label, result in results.items():
        rate = result["accepted"] * args.batch / (result["duration_us"] / 1e6)
        errors = result["other"] + result["socket_errors"]
        print(f"{label:34} {rate:10.0f} {rate / base:6.2f} {result['p50_us'] / 1000:7.1f} "
              f"{result['p99_us'] / 1000:7.1f} {errors:6.0f}")
    print(f"ratios against '{base_label}', measured in one run")
    for backend in backends:
        # Warm-up runs and requests in flight at each round's end are applied, not counted.
        print(f"{backend}: Redis holds {held[backend]} reports; {acknowledged[backend]} "
              f"acknowledged in the measured rounds (the rest: warm-up and requests in flight)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
