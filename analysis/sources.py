"""Where perturbed counts come from: the collector's HTTP API, or Redis directly.

Both return ``MetricCounts``: per UTC hour bucket, the reports ``n`` and perturbed ``ones``.
Neither ever sees a true value; there is none to see.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

import numpy as np
import requests
from numpy.typing import NDArray

from deniable.client.errors import DeniableError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.transport import DEFAULT_TIMEOUT
from deniable.collector import keys


class SourceError(DeniableError):
    """Counts could not be read."""


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric as an analyst sees it."""

    name: str
    description: str
    mechanism: RandomizedResponse
    policy: CollectionPolicy = DEFAULT_POLICY
    version: int | None = None


@dataclass(frozen=True, init=False)
class MetricCounts:
    """Perturbed counts for one metric, one row per non-empty hour bucket, oldest first.

    Buckets are integer hour indexes (hours since the Unix epoch, UTC), so a year of them is
    three integer arrays and no Python object per bucket.

    Attributes:
        metric: the metric and its mechanism.
        hours: bucket hour indexes, ascending (sorted on construction), shape (buckets,).
        n: reports per bucket, shape (buckets,).
        ones: perturbed ones per bucket, shape (buckets,).
    """

    metric: MetricInfo
    hours: NDArray[np.int64]
    n: NDArray[np.int64]
    ones: NDArray[np.int64]

    def __init__(self, metric: MetricInfo,
                 starts: Sequence[datetime] | NDArray[np.int64] | NDArray[np.datetime64],
                 n: NDArray[np.int64], ones: NDArray[np.int64]) -> None:
        """``starts``: hour bucket starts as datetimes, ``datetime64`` values, or integer
        hour indexes."""
        if isinstance(starts, np.ndarray) and starts.dtype.kind == "M":
            hours = starts.astype("datetime64[h]").astype(np.int64)
        elif isinstance(starts, np.ndarray):
            hours = starts.astype(np.int64, copy=False)
        else:
            hours = np.array([keys.hour_index(s) for s in starts], dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        ones = np.asarray(ones, dtype=np.int64)
        if len(hours) > 1 and not bool(np.all(hours[1:] > hours[:-1])):
            order = np.argsort(hours, kind="stable")
            hours, n, ones = hours[order], n[order], ones[order]
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "hours", hours)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "ones", ones)

    @property
    def starts(self) -> list[datetime]:
        """Bucket start times (UTC datetimes; built on demand, not for hot paths)."""
        return [keys.hour_start(int(h)) for h in self.hours]


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
                                                   RandomizedResponse.from_id(m["mechanism"]),
                                                   parse_policy(m), m.get("version"))
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
                              RandomizedResponse.from_id(doc["mechanism"]), parse_policy(doc),
                              doc.get("version"))
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
        redis_url: the collector's Redis, or any node of its Redis Cluster.
        metrics_file: the collector's metrics TOML file, if any.
    """

    def __init__(self, redis_url: str, metrics_file: str | Path | None = None) -> None:
        from deniable.collector.live_registry import LiveRegistry
        from deniable.collector.registry import load_metrics_file
        from deniable.collector.store import Store, connect

        self._store = Store(connect(redis_url, cluster=None))  # a Redis Cluster too
        file_metrics = load_metrics_file(metrics_file) if metrics_file else {}
        self._registry = LiveRegistry(self._store.client, file_metrics, cache_seconds=60)
        self._plan: tuple[list[str], datetime, datetime, float] | None = None
        self._ahead: dict[str, tuple[str, list[tuple[keys.Month, bytes | None]]]] = {}

    READ_AHEAD = 64
    """Metrics read per round trip after ``read_ahead``."""
    READ_AHEAD_SECONDS = 30.0
    """A read-ahead plan (and what it read) is used within this long, or dropped."""

    def read_ahead(self, names: Sequence[str], start: datetime | None,
                   end: datetime | None) -> None:
        """Announce that ``counts(name, start, end)`` follows for each of ``names`` in turn:
        their current versions' counters are then read ``READ_AHEAD`` metrics per pipelined
        round trip instead of one. Each read-ahead result is used once, or dropped after
        ``READ_AHEAD_SECONDS``. Without an announcement, the first ``counts`` of a range
        announces the active metrics in name order (what a report reads)."""
        start, end = default_range(start, end)
        self._plan = (list(names), start, end, time.monotonic())
        self._ahead.clear()

    def _read_ahead_for(self, metric: str, start: datetime, end: datetime,
                        mechanism_id: str, first: int, end_hour: int
                        ) -> list[tuple[keys.Month, bytes | None]] | None:
        """The month strings of ``metric`` from the read-ahead, fetching its chunk if due."""
        plan = self._plan
        if plan is None or (plan[1], plan[2]) != (start, end) or \
                time.monotonic() - plan[3] > self.READ_AHEAD_SECONDS:
            self._plan, self._ahead = None, {}
            return None
        if metric not in self._ahead and metric in plan[0]:
            at = plan[0].index(metric)
            chunk = []
            for name in plan[0][at:at + self.READ_AHEAD]:
                entry = self._registry.entry(name)
                if entry is not None and name not in self._ahead:
                    chunk.append((name, entry.current.mechanism.id))
            fetched = self._store.month_strings_many(chunk, first, end_hour)
            self._ahead.update({name: (mech, fetched[name]) for name, mech in chunk})
        found = self._ahead.pop(metric, None)
        if found is None or found[0] != mechanism_id:
            return None
        return found[1]

    def metrics(self) -> dict[str, MetricInfo]:
        return {m.name: MetricInfo(m.name, m.description, m.mechanism, m.policy, m.version)
                for m in self._registry.active().values()}

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts:
        """Counts of the metric's current version, or of ``version`` (retired metrics too)."""
        entry = self._registry.entry(metric)
        found = entry.version(version) if entry is not None else None
        if entry is None or found is None:
            raise SourceError(f"the collector's registry has no metric {metric!r}"
                              + (f" with a version {version}" if version is not None else ""))
        info = MetricInfo(metric, entry.description, found.mechanism, found.policy,
                          found.version)
        start, end = default_range(start, end)
        first, end_hour = keys.hour_range(start, end)
        first = max(first, keys.visible_from(datetime.now(timezone.utc), entry.retention_days))
        months = None
        if version is None:
            plan = self._plan
            if plan is None or (plan[1], plan[2]) != (start, end) or \
                    time.monotonic() - plan[3] > self.READ_AHEAD_SECONDS:
                # No plan for this range: expect the active metrics in name order (a report's
                # order), beginning with this one.
                self.read_ahead(sorted(self.metrics()), start, end)
            months = self._read_ahead_for(metric, start, end, info.mechanism.id, first,
                                          end_hour)
        if months is None:
            months = self._store.month_strings(metric, info.mechanism.id, first, end_hour)
        hours, n, ones = decode_months(months, keys.width(info.mechanism.id), first, end_hour)
        return MetricCounts(info, hours, n, ones)


def decode_months(months: Sequence[tuple[keys.Month, bytes | None]], width: int,
                  first_hour: int, end_hour: int) -> tuple[NDArray[np.int64],
                                                          NDArray[np.int64], NDArray[np.int64]]:
    """Month counters strings (``Store.month_strings``) to (hours, n, ones) arrays of the
    non-empty hours in [first_hour, end_hour): ``numpy.frombuffer`` per month, no loop per hour.
    """
    empty = np.zeros(0, np.int64)
    if not months or all(raw is None for _, raw in months):
        return empty, empty.copy(), empty.copy()
    # Months are consecutive: their strings, each padded to its full size, are the hours in
    # order. One frombuffer over the joined bytes; no loop per hour, none per month's values.
    chunks = []
    for month, raw in months:
        size = month.size_bytes(width)
        raw = raw or b""
        chunks.append(raw[:size] + bytes(size - len(raw)) if len(raw) != size else raw)
    values = np.frombuffer(b"".join(chunks), dtype=keys.COUNTER_DTYPE).reshape(-1, width)
    base = months[0][0].first_hour
    block = values[max(first_hour - base, 0):max(end_hour - base, 0)]
    present = np.flatnonzero(block[:, 0])
    return (present + max(first_hour, base), block[present, 0].astype(np.int64),
            block[present, 1].astype(np.int64))
