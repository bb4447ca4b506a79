"""The collector's registry and raw counters, read-only, for readers outside the collector.

``RedisCounterReader`` is the Redis-backed ``CounterReader`` of ``deniable.analysis.sources``
(a structural match: the collector never imports the analysis). ``deniable.cli.sources`` wires
it into the analysis's ``ReaderSource``. It writes nothing: no metrics-file sync, no counters.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from deniable.collector.live_registry import Entry, LiveRegistry
from deniable.collector.registry import Metric, load_metrics_file
from deniable.collector.store import Store, connect, open_period_strings
from deniable.core import keys

MonthStrings = list[tuple[keys.Month, bytes | None]]

REGISTRY_CACHE_SECONDS = 60
"""How long the registry read from Redis is trusted before its generation is checked again."""


class RedisCounterReader:
    """Reads the registry and counters of a collector's Redis (or any node of its Redis
    Cluster).

    Args:
        redis_url: the collector's Redis.
        metrics_file: the collector's metrics TOML file, if any: its entries fill in for
            metrics the registry in Redis lacks.
    """

    def __init__(self, redis_url: str, metrics_file: str | Path | None = None) -> None:
        self._store = Store(connect(redis_url, cluster=None))  # a Redis Cluster too
        self._file_metrics = load_metrics_file(metrics_file) if metrics_file else {}
        self._registry = LiveRegistry(self._store.client,  # type: ignore[arg-type]
                                      self._file_metrics, cache_seconds=REGISTRY_CACHE_SECONDS)

    @property
    def file_metrics(self) -> Mapping[str, Metric]:
        return self._file_metrics

    def active(self) -> dict[str, Metric]:
        return self._registry.active()

    def entry(self, name: str) -> Entry | None:
        return self._registry.entry(name)

    def registry_json(self, name: str) -> bytes | None:
        return self._store.client.hget(keys.registry(), name)  # type: ignore[return-value]

    def month_strings(self, metric: str, mechanism_id: str, first_hour: int, end_hour: int,
                      series: str | None = None) -> MonthStrings:
        return self._store.month_strings(metric, mechanism_id, first_hour, end_hour,
                                         series=series)

    def month_strings_many(self, metrics: Sequence[tuple[str, str]], first_hour: int,
                           end_hour: int) -> dict[str, MonthStrings]:
        return self._store.month_strings_many(metrics, first_hour, end_hour)

    def month_strings_by_series(self, metric: str, mechanism_id: str, labels: Sequence[str],
                                first_hour: int, end_hour: int) -> dict[str, MonthStrings]:
        return self._store.month_strings_by_series(  # type: ignore[return-value]
            metric, mechanism_id, labels, first_hour, end_hour)

    def open_period_strings(self, metric: str, mechanism_id: str, period: str,
                            first_hour: int, end_hour: int) -> list[tuple[int, bytes | None]]:
        return open_period_strings(self._store.client, metric, mechanism_id, period,
                                   first_hour, end_hour)
