"""A cluster-only failure that is our bug is answered 500 and logged with its traceback; a
cluster that cannot be reached is 503 with Retry-After, as a single Redis that is down."""
from __future__ import annotations

import logging

import pytest
import redis.cluster

from deniable.collector.embedded import free_port
from deniable.collector.errors import as_problem
from deniable.collector.store import connect, unavailable
from tests.rediscluster import RedisClusterNodes


@pytest.mark.slow
def test_a_script_in_a_cluster_pipeline_is_a_logged_bug_not_an_outage(
        redis_cluster: RedisClusterNodes, caplog: pytest.LogCaptureFixture) -> None:
    client = connect(redis_cluster.url, cluster=True)
    try:
        pipe = client.pipeline(transaction=False)
        with pytest.raises(redis.exceptions.RedisClusterException) as caught:
            pipe.evalsha("0" * 40, 1, "k", 1)  # what ratelimit.py once did: redis-py refuses
            pipe.execute()
        with caplog.at_level(logging.ERROR, logger="deniable.collector"):
            problem = as_problem(caught.value, retry_after_seconds=5)
        assert (problem.status, problem.headers) == (500, {})
        assert not unavailable(caught.value)
        logged = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert logged and logged[-1].exc_info is not None  # the traceback is in the log
    finally:
        client.close()


def test_a_cluster_without_a_reachable_node_is_503_with_retry_after() -> None:
    with pytest.raises(redis.exceptions.RedisClusterException) as caught:
        redis.cluster.RedisCluster(host="127.0.0.1", port=free_port(), socket_timeout=0.5,
                                   socket_connect_timeout=0.5)
    problem = as_problem(caught.value, retry_after_seconds=7)
    assert (problem.status, problem.headers) == (503, {"Retry-After": "7"})
    cross_slot = redis.exceptions.RedisClusterException(
        "MGET - all keys must map to the same key slot")
    assert as_problem(cross_slot, retry_after_seconds=7).status == 500


def test_the_compose_file_runs_the_files_the_tests_start() -> None:
    """docker-compose.yaml (not run here: no container engine) starts every node from
    node.conf and joins them with create-cluster.sh, the two files tests/rediscluster.py runs."""
    import yaml

    from tests.rediscluster import DEPLOY

    services = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text())["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("redis-")}
    assert len(nodes) == 6
    ports = []
    for service in nodes.values():
        assert "./node.conf:/etc/redis/node.conf:ro" in service["volumes"]
        assert service["command"][:2] == ["redis-server", "/etc/redis/node.conf"]
        ports.append(service["command"][service["command"].index("--port") + 1])
    create = " ".join(services["create-cluster"]["command"])
    assert "/create-cluster.sh " + " ".join(f"127.0.0.1:{p}" for p in ports) in create
    assert "--cluster-replicas 1" in (DEPLOY / "create-cluster.sh").read_text()
    assert "cluster-enabled yes" in (DEPLOY / "node.conf").read_text()
