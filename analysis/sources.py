"""Where perturbed counts come from: the collector's HTTP API, or Redis directly.

Both return ``MetricCounts``: per UTC hour bucket, the reports ``n`` and perturbed ``ones``.
Neither ever sees a true value; there is none to see.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

import numpy as np
import requests
from numpy.typing import NDArray

from deniable.client.errors import DeniableError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.transport import DEFAULT_TIMEOUT


class SourceError(DeniableError):
    """Counts could not be read."""


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric as an analyst sees it."""

    name: str
    description: str
    mechanism: RandomizedResponse


@dataclass(frozen=True)
class MetricCounts:
    """Perturbed counts for one metric, one row per non-empty hour bucket.

    Attributes:
        starts: bucket start times (UTC), shape (buckets,).
        n: reports per bucket, shape (buckets,).
        ones: perturbed ones per bucket, shape (buckets,).
    """

    metric: MetricInfo
    starts: list[datetime]
    n: NDArray[np.int64]
    ones: NDArray[np.int64]


class CountsSource(Protocol):
    """Anything that lists metrics and reads their perturbed counts."""

    def metrics(self) -> dict[str, MetricInfo]: ...

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts: ...


def default_range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """Fill in the default range: the 7 days up to ``end`` (now by default)."""
    end = end or datetime.now(timezone.utc)
    return start or end - timedelta(days=7), end


def _counts(info: MetricInfo, rows: list[tuple[datetime, int, int]]) -> MetricCounts:
    return MetricCounts(info, [r[0] for r in rows],
                        np.array([r[1] for r in rows], dtype=np.int64),
                        np.array([r[2] for r in rows], dtype=np.int64))


class HTTPSource:
    """Reads ``GET /v1/metrics`` and ``GET /v1/metrics/<name>/counts`` of a collector.

    Args:
        collector_url: the collector's base URL.
        token: a read token, sent as ``Authorization: Bearer``, if the collector wants one.
    """

    def __init__(self, collector_url: str, token: str | None = None,
                 timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> None:
        self.base_url = collector_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._metrics: dict[str, MetricInfo] | None = None

    def _get(self, path: str, params: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
        url = f"{self.base_url}{path}"
        try:
            response = self._session.get(url, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise SourceError(f"GET {url} failed: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise SourceError(f"GET {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()  # type: ignore[no-any-return]

    def metrics(self) -> dict[str, MetricInfo]:
        if self._metrics is None:
            doc = self._get("/v1/metrics")
            self._metrics = {m["name"]: MetricInfo(m["name"], m.get("description", ""),
                                                   RandomizedResponse.from_id(m["mechanism"]))
                             for m in doc["metrics"]}
        return self._metrics

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts:
        """Counts of the metric's current version, or of ``version``: older versions and
        retired metrics stay readable, each debiased with its own mechanism."""
        info = self.metrics().get(metric)
        start, end = default_range(start, end)
        params = {"from": start.isoformat(), "to": end.isoformat()}
        if version is not None:
            params["version"] = str(version)
        doc = self._get(f"/v1/metrics/{metric}/counts", params)
        if info is None or version is not None:
            # Not an active metric, or another version: the counts name their own mechanism.
            info = MetricInfo(metric, info.description if info else "",
                              RandomizedResponse.from_id(doc["mechanism"]))
        elif doc["mechanism"] != info.mechanism.id:
            raise SourceError(f"{metric}: counts are for {doc['mechanism']}, "
                              f"not {info.mechanism.id}")
        return _counts(info, [(datetime.fromisoformat(b["start"]), int(b["n"]), int(b["ones"]))
                              for b in doc["buckets"]])


class RedisSource:
    """Reads counters straight from Redis, through the collector's key layout and registry.

    The metrics are the collector's registry in Redis (runtime registrations included), with
    the metrics file's entries filling in for any that Redis lacks.

    Args:
        redis_url: the collector's Redis.
        metrics_file: the collector's metrics TOML file, if any.
    """

    def __init__(self, redis_url: str, metrics_file: str | Path | None = None) -> None:
        from deniable.collector.live_registry import LiveRegistry
        from deniable.collector.registry import load_metrics_file
        from deniable.collector.store import Store, connect

        self._store = Store(connect(redis_url))
        file_metrics = load_metrics_file(metrics_file) if metrics_file else {}
        self._registry = LiveRegistry(self._store.client, file_metrics, cache_seconds=60)

    def metrics(self) -> dict[str, MetricInfo]:
        return {m.name: MetricInfo(m.name, m.description, m.mechanism)
                for m in self._registry.active().values()}

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts:
        """Counts of the metric's current version, or of ``version`` (retired metrics too)."""
        entry = self._registry.entry(metric)
        found = entry.version(version) if entry is not None else None
        if entry is None or found is None:
            raise SourceError(f"the collector's registry has no metric {metric!r}"
                              + (f" with a version {version}" if version is not None else ""))
        info = MetricInfo(metric, entry.description, found.mechanism)
        start, end = default_range(start, end)
        hours = self._store.counts(metric, info.mechanism.id, start, end)
        return _counts(info, [(h.start, h.n, h.ones) for h in hours])
