"""Counts straight from a collector's Redis: the analysis's ``ReaderSource`` over the
collector's ``RedisCounterReader``.

The wiring lives here, above both: the analysis never imports the collector (the import
contract, docs/development.md). Library users import ``RedisSource`` from this module.
"""
from __future__ import annotations

from pathlib import Path

from deniable.analysis.sources import ReaderSource
from deniable.collector.reader import RedisCounterReader

__all__ = ["RedisSource"]


class RedisSource(ReaderSource):
    """Reads counters straight from a collector's Redis, through its key layout and registry.

    The metrics are the collector's registry in Redis (runtime registrations included), with
    the metrics file's entries filling in for any that Redis lacks.

    Args:
        redis_url: the collector's Redis, or any node of its Redis Cluster.
        metrics_file: the collector's metrics TOML file, if any.
    """

    def __init__(self, redis_url: str, metrics_file: str | Path | None = None) -> None:
        super().__init__(RedisCounterReader(redis_url, metrics_file))
