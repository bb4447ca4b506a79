"""Backup and restore of the collector's Redis with deploy/redis.conf's AOF on, end to end, by
the shipped scripts (deploy/redis-backup.sh, deploy/redis-restore.sh): every key comes back
(counters, the metric registry, API keys, batch claims) with its value and expiry, and a
report before and after is identical. The obvious restore (the RDB copied into a new data
directory) gives an empty Redis: checked too, as the reason for the procedure."""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
import redis.cluster

from deniable.cli.main import main
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector import auth
from deniable.core import keys
from deniable.collector.app import create_app
from deniable.collector.embedded import find_redis_server, free_port
from tests.conftest import BATCH_SECRET, OPEN
from tests.rediscluster import RedisClusterNodes

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILE_METRIC, FILE_MECHANISM = "feature_x_enabled", "rr:1/2:1/2"
ADMIN_METRIC, ADMIN_MECHANISM = "backup_admin_metric", "rr:3/4:1/2"


class ProductionRedis:
    """redis-server with deploy/redis.conf (AOF everysec, RDB save points, noeviction) on a
    free loopback port and a data directory of its own."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ProductionRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Only the address, the directory and the log file differ from the shipped file; the
        # snapshot delay is 0 so that redis-cli --rdb does not wait 5 s for other replicas.
        self.process = subprocess.Popen(
            [find_redis_server(), str(DEPLOY / "redis.conf"), "--port", str(self.port),
             "--bind", "127.0.0.1", "--dir", str(self.data_dir), "--logfile", "redis.log",
             "--repl-diskless-sync-delay", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                with self.client() as client:
                    if client.ping():
                        return self
            except redis.exceptions.RedisError:
                assert time.monotonic() < deadline, "redis-server did not start"
                assert self.process.poll() is None, "redis-server exited"
                time.sleep(0.02)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        self.process = None


@pytest.fixture()
def production_redis(tmp_path: Path) -> Iterator[ProductionRedis]:
    server = ProductionRedis(tmp_path / "live").start()
    yield server
    server.stop()


@pytest.fixture()
def live_client(production_redis: ProductionRedis) -> Iterator[redis.Redis]:
    client = production_redis.client()
    yield client
    client.close()


def state(client: redis.Redis) -> dict[bytes, tuple[object, int]]:
    """Every key: its value (by type; not DUMP, whose field order in a large hash may change
    with a reload) and its absolute expiry (-1: none)."""
    return {key: (value_of(client, key), client.expiretime(key))
            for key in sorted(client.scan_iter(count=1000))}


def value_of(client: redis.Redis | redis.cluster.RedisCluster, key: bytes) -> object:
    """A key's value, read by its type (the collector writes strings, hashes and sets)."""
    kind = client.type(key)
    if kind == b"string":
        return client.get(key)
    if kind == b"hash":
        return client.hgetall(key)
    assert kind == b"set", (key, kind)
    return client.smembers(key)


def report(url: str, start: datetime, end: datetime,
           capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["report", "--redis-url", url, "--format", "json",
                 "--from", start.isoformat(), "--to", end.isoformat()]) == 0
    return capsys.readouterr().out


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_backup_restores_every_key_with_aof_on_and_the_report_is_identical(
        production_redis: ProductionRedis, live_client: redis.Redis, metrics_file: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("redis-cli") is None or shutil.which("redis-check-rdb") is None:
        pytest.fail("redis-cli and redis-check-rdb are needed: install Debian's redis-tools")
    live = live_client
    ingest = auth.create_key(live, "ingest", app="backup-app")
    read = auth.create_key(live, "read")
    admin = auth.create_key(live, "admin")
    config = {"REDIS_URL": production_redis.url, "METRICS_FILE": str(metrics_file),
              "TESTING": True, "AUTH_CACHE_SECONDS": 0, "BATCH_SECRET": BATCH_SECRET,
              "RATE_LIMIT_IP_PER_SECOND": 0, "RATE_LIMIT_KEY_PER_SECOND": 0}
    app = create_app(config)
    http = app.test_client()
    bearer = {role: {"Authorization": f"Bearer {key.secret}"}
              for role, key in (("ingest", ingest), ("read", read), ("admin", admin))}
    registered = http.post("/v1/admin/metrics", headers=bearer["admin"],
                           json={"name": ADMIN_METRIC, "mechanism": ADMIN_MECHANISM})
    assert registered.status_code == 201, registered.text
    for i in range(20):
        batch = encode_batch(new_batch_id(), [(FILE_METRIC, FILE_MECHANISM, i % 2),
                                              (ADMIN_METRIC, ADMIN_MECHANISM, int(i % 3 == 0))] * 5)
        assert http.post("/v1/reports", json=batch, headers=bearer["ingest"]).status_code == 202
    now = datetime.now(timezone.utc)
    start, end = now - timedelta(days=2), now + timedelta(hours=2)
    before = report(production_redis.url, start, end, capsys)
    assert ADMIN_METRIC in before and FILE_METRIC in before
    saved = state(live)
    kinds = {key.decode().split(":")[2] for key in saved}
    assert {"{feature_x_enabled}", "{backup_admin_metric}", "{registry}", "{auth}",
            "b"} <= kinds
    assert live.info("persistence")["aof_enabled"] == 1

    backup = tmp_path / "backups" / "collector.rdb"
    backup.parent.mkdir()
    run("sh", str(DEPLOY / "redis-backup.sh"), str(backup), "-p", str(production_redis.port))
    assert state(live) == saved  # a backup changes nothing

    # The obvious restore: the RDB in a new directory under redis.conf. AOF on: Redis loads
    # only the AOF, and there is none: an empty Redis (every device would get 401).
    naive = ProductionRedis(tmp_path / "naive")
    naive.data_dir.mkdir()
    shutil.copy(backup, naive.data_dir / "dump.rdb")
    naive.start()
    try:
        with naive.client() as client:
            assert client.dbsize() == 0
    finally:
        naive.stop()

    restored_dir = tmp_path / "restored"
    out = run("sh", str(DEPLOY / "redis-restore.sh"), str(backup), str(restored_dir),
              str(DEPLOY / "redis.conf"))
    assert f"restore: {len(saved)} keys" in out
    assert sorted(p.name for p in restored_dir.iterdir()) == ["appendonlydir"]
    production_redis.stop()  # the old server is gone: its directory is not read again
    restored = ProductionRedis(restored_dir).start()  # redis.conf as shipped: AOF on
    try:
        with restored.client() as client:
            assert client.info("persistence")["aof_enabled"] == 1
            assert state(client) == saved  # every key, value and expiry
        assert report(restored.url, start, end, capsys) == before
        # The collector works on it as before: keys, registry and counters.
        app.extensions["deniable.store"].client.close()
        app = create_app({**config, "REDIS_URL": restored.url})
        http = app.test_client()
        counts = http.get(f"/v1/metrics/{ADMIN_METRIC}/counts", headers=bearer["read"])
        assert counts.status_code == 200 and sum(b["n"] for b in counts.json["buckets"]) == 100
        batch = encode_batch(new_batch_id(), [(ADMIN_METRIC, ADMIN_MECHANISM, 1)])
        assert http.post("/v1/reports", json=batch, headers=bearer["ingest"]).status_code == 202
    finally:
        app.extensions["deniable.store"].client.close()
        restored.stop()
    assert keys.PREFIX == "dn:v1"  # the kinds checked above are of this layout


def cluster_state(url: str) -> dict[bytes, tuple[object, int]]:
    """``state`` of every key of a cluster, less the rate-limit buckets (they expire within
    seconds, by design)."""
    client = redis.cluster.RedisCluster.from_url(url, socket_timeout=5)
    try:
        return {key: (value_of(client, key), client.expiretime(key))
                for key in sorted(client.scan_iter(count=1000))
                if not key.startswith(f"{keys.PREFIX}:rl:".encode())}
    finally:
        client.close()


@pytest.mark.slow
def test_every_masters_backup_loads_into_a_new_cluster_with_every_key(
        redis_cluster: RedisClusterNodes, metrics_file: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The cluster procedure of docs/operations.md: back up each master of the suite's
    cluster, load each file into a new cluster (deploy/redis-cluster/import-backup.sh): every
    key, value and expiry is there, and the report is identical."""
    config = {"REDIS_URL": redis_cluster.url, "REDIS_CLUSTER": True,
              "METRICS_FILE": str(metrics_file), "TESTING": True, **OPEN}
    app = create_app(config)
    http = app.test_client()
    for i in range(12):
        batch = encode_batch(new_batch_id(), [(FILE_METRIC, FILE_MECHANISM, i % 2),
                                              ("dark_mode", "rr:3/4:1/2", 1)])
        assert http.post("/v1/reports", json=batch).status_code == 202
    with redis.cluster.RedisCluster.from_url(redis_cluster.url) as client:
        auth.create_key(client, "ingest", app="cluster-backup")  # type: ignore[arg-type]
    app.extensions["deniable.store"].client.close()
    now = datetime.now(timezone.utc)
    start, end = now - timedelta(days=2), now + timedelta(hours=2)
    before = report(redis_cluster.url, start, end, capsys)
    saved = cluster_state(redis_cluster.url)
    backups = []
    for port in redis_cluster.masters():
        backups.append(tmp_path / f"master-{port}.rdb")
        run("sh", str(DEPLOY / "redis-backup.sh"), str(backups[-1]), "-p", str(port))
    fresh = RedisClusterNodes(tmp_path / "new-cluster")
    fresh.start()
    try:
        for backup in backups:
            run("sh", str(DEPLOY / "redis-cluster" / "import-backup.sh"), str(backup),
                f"127.0.0.1:{fresh.ports[0]}", str(free_port()))
        assert cluster_state(fresh.url) == saved
        assert report(fresh.url, start, end, capsys) == before
    finally:
        fresh.stop()
