"""The only module that talks to Redis: one round trip per batch, perturbed counters only."""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

import redis

from deniable.client.wire import Batch
from deniable.collector import keys

_INGEST_LUA = resources.files("deniable.collector").joinpath("ingest.lua").read_text()


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


def connect(url: str, timeout_seconds: float = 2.0) -> redis.Redis:
    """A Redis client with its own connection pool and socket timeouts."""
    return redis.Redis.from_url(url, socket_timeout=timeout_seconds,
                                socket_connect_timeout=timeout_seconds,
                                health_check_interval=30, decode_responses=False)


class Store:
    """Perturbed counters in Redis.

    Args:
        client: a redis-py client (one connection pool per process).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._ingest = client.register_script(_INGEST_LUA)

    def add_batch(self, batch: Batch, received_at: datetime,
                  retention_days: Mapping[str, int], batch_id_ttl_seconds: int) -> Outcome:
        """Add a validated batch to the counters of the hour holding ``received_at``.

        One atomic script, together with the batch's idempotency keys: the batch is counted
        exactly once or not at all. A batch id already seen with the same content is a
        DUPLICATE (nothing changes); with other content, a CONFLICT (nothing changes).
        """
        script_keys: list[str] = []
        args: list[str | int] = [batch.digest, batch_id_ttl_seconds]
        for metric, tally in batch.tallies.items():
            script_keys.append(keys.batch(metric, batch.batch_id))
            script_keys.append(keys.counters(metric, tally.mechanism, received_at))
            args.extend((tally.n, tally.ones, retention_days[metric] * 86400))
        return Outcome(int(self._ingest(keys=script_keys, args=args)))

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
