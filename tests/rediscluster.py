"""A real Redis Cluster for the tests: 3 masters + 3 replicas on loopback, from deploy/redis-cluster.

Each node is ``redis-server deploy/redis-cluster/node.conf`` on a free port in its own temp dir
(with a 1.5 s node timeout, so a failover takes seconds), joined by
``deploy/redis-cluster/create-cluster.sh``: the tests start the deploy files for real. The
``redis_cluster`` fixture (session-scoped, registered in tests/conftest.py) starts it once; a
test that kills or stops a node calls ``wait_healthy()`` before it ends, so the next test finds
three masters, each with a replica in sync.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from deniable.collector.embedded import die_with_parent, find_redis_server, free_port

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "redis-cluster"
NODE_TIMEOUT_MS = 1500


def _cluster_port() -> int:
    while (port := free_port()) > 55000:  # the cluster bus listens on port + 10000
        pass
    return port


class RedisClusterNodes:
    """Six cluster-enabled redis-server processes: call ``start()``, then ``stop()``.

    Args:
        root: a directory for the nodes' data (one subdirectory each).
        size: number of nodes, half masters and half replicas.
    """

    def __init__(self, root: Path, size: int = 6) -> None:
        self.root = root
        self.ports = [_cluster_port() for _ in range(size)]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """A URL naming the first node; redis-py discovers the rest."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 30.0) -> None:
        """Start every node, create the cluster, and wait until it is healthy."""
        for port in self.ports:
            self.start_node(port)
        for port in self.ports:
            self._wait_ping(port, timeout)
        done = subprocess.run(["sh", str(DEPLOY / "create-cluster.sh"),
                               *[f"127.0.0.1:{port}" for port in self.ports]],
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"create-cluster.sh failed: {done.stdout[-800:]} {done.stderr}")
        self.wait_healthy(timeout)

    def start_node(self, port: int) -> None:
        """Start (or restart, on its old data) the node on ``port``."""
        folder = self.root / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        self.processes[port] = subprocess.Popen(
            [find_redis_server(), str(DEPLOY / "node.conf"), "--port", str(port),
             "--dir", str(folder), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             "--repl-diskless-sync-delay", "0"],  # a restarted replica syncs at once
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent())

    def kill(self, port: int, sig: int = signal.SIGKILL) -> None:
        """Stop one node with ``sig`` (SIGKILL: a crash) and reap it."""
        process = self.processes.pop(port)
        process.send_signal(sig)
        process.wait(timeout=10)

    def restart(self, port: int, timeout: float = 20.0) -> None:
        """Start a stopped node again and wait until it answers."""
        self.start_node(port)
        self._wait_ping(port, timeout)

    def client(self, port: int) -> redis.Redis:
        """A plain (non-cluster) client of one node."""
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def roles(self) -> dict[int, tuple[str, int | None]]:
        """Each running node's role and, for a replica, its master's port (CLUSTER NODES)."""
        with self.client(self.ports[0]) as one:
            nodes = one.cluster("NODES")  # redis-py parses it: {"ip:port": {...}}
        by_id = {info["node_id"]: int(address.split("@")[0].rsplit(":", 1)[1])
                 for address, info in nodes.items()}
        found: dict[int, tuple[str, int | None]] = {}
        for node_id, port in by_id.items():
            info = next(i for i in nodes.values() if i["node_id"] == node_id)
            flags = info["flags"].split(",")
            if "fail" in flags or "fail?" in flags or port not in self.processes:
                continue
            if "master" in flags:
                found[port] = ("master", None)
            else:
                found[port] = ("replica", by_id.get(info["master_id"]))
        return found

    def masters(self) -> list[int]:
        return sorted(p for p, (role, _) in self.roles().items() if role == "master")

    def replica_of(self, master: int) -> int:
        """The port of ``master``'s replica."""
        return next(p for p, (role, of) in self.roles().items() if of == master)

    def master_for(self, key: str) -> int:
        """The port of the master now serving ``key``'s slot."""
        with self.client(self.ports[0]) as one:
            slot = int(one.execute_command("CLUSTER KEYSLOT", key))
            for start, end, master, *_ in one.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        raise RuntimeError(f"slot of {key!r} is not covered")

    def healthy(self) -> bool:
        """Every node up, in cluster_state:ok, 3 masters each with a replica in sync."""
        try:
            for port in self.ports:
                if port not in self.processes:
                    return False
                with self.client(port) as node:
                    if node.cluster("INFO").get("cluster_state") != "ok":
                        return False
                    info = node.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
                    replicas = [v for k, v in info.items() if k.startswith("slave")
                                and isinstance(v, dict)]
                    if info["role"] == "master" and (not replicas or any(
                            r.get("state") != "online"
                            or r.get("offset", -1) < info["master_repl_offset"]
                            for r in replicas)):
                        return False  # WAIT counts a replica once it is online and has acked
            roles = self.roles()
            masters = [p for p, (role, _) in roles.items() if role == "master"]
            return (len(roles) == len(self.ports) and len(masters) == len(self.ports) // 2
                    and all(any(of == m for _, of in roles.values()) for m in masters))
        except (redis.exceptions.RedisError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster is not healthy after {timeout}s: {self.roles()}")
            time.sleep(0.1)

    def _wait_ping(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.client(port) as node:
                    if node.ping():
                        return
            except (redis.exceptions.RedisError, OSError):
                time.sleep(0.02)
        raise RuntimeError(f"cluster node {port} did not answer in {timeout}s")

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL)."""
        for port, process in list(self.processes.items()):
            process.terminate()
        for port, process in list(self.processes.items()):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """A healthy 3-master + 3-replica cluster from deploy/redis-cluster, for the session."""
    if shutil.which(os.environ.get("REDIS_CLI", "redis-cli")) is None:
        pytest.fail("redis-cli is needed to create a cluster: install Debian's redis-tools")
    nodes = RedisClusterNodes(tmp_path_factory.mktemp("rediscluster"))
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()
