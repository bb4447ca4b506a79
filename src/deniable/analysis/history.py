"""A metric's history across its versions: one series over the range, each version's part
debiased with its own mechanism, and the buckets where the version changed marked.

A new mechanism is a new version with its own counters (docs/analysis.md, "Versions"); each
version's reports can only be debiased with the mechanism they were drawn from. Both estimate
the same thing (the share of devices answering yes, or the mean over devices) as long as the
metric's kind (and a numeric metric's range) stays, so their series join:

- a bucket with reports of one version takes that version's estimate and interval;
- a bucket with reports of several (devices update at their own pace) pools them by their
  reports: estimate = sum(n_v * e_v) / sum(n_v), standard error sqrt(sum((n_v / N)^2
  se_v^2)) (the versions' reports come from different devices, so they are independent), and
  a normal interval on it, clipped to the range; the bucket is flagged ``mixed``.

Older versions of another kind (or range) are left out, and the history says so.

    h = history(source, "dark_mode", start, end, "day")
    h.estimate, h.ci_low, h.ci_high, h.version     # per bucket; version -1: mixed, 0: none
    h.changes                                      # [(bucket index, old version, new version)]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deniable.analysis.sources import SourceError
from deniable.analysis.timeseries import TimeSeries, series
from deniable.client.mechanism import z_score

MIXED = -1
"""``History.version`` of a bucket with reports of several versions."""


@dataclass(frozen=True)
class History:
    """One metric's series across its versions, on one bucket grid.

    Attributes:
        metric: the metric's name; kind: its kind ("boolean" or "numeric").
        parts: each version's own series (oldest first), debiased with its own mechanism.
        starts: the bucket starts (UTC), shape (buckets,).
        n, estimate, ci_low, ci_high, version: per bucket; ``version`` is the version whose
            reports the bucket holds, MIXED for several, 0 for none.
        changes: (bucket index, version before, version from then on) where it changed.
        left_out: older versions not joined, and why (another kind or range).
    """

    metric: str
    kind: str
    granularity: str
    parts: list[TimeSeries]
    starts: list[datetime]
    n: NDArray[np.int64]
    estimate: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    version: NDArray[np.int64]
    changes: list[tuple[int, int, int]]
    confidence: float
    left_out: list[str] = field(default_factory=list)

    @property
    def versions(self) -> list[int]:
        """The versions with reports in the range, oldest first."""
        return [int(p.metric.version or 0) for p in self.parts if int(p.n.sum())]


def _same_scale(a: Any, b: Any) -> bool:
    """Whether two versions estimate the same thing on the same scale."""
    if a.kind != b.kind:
        return False
    if a.kind == "numeric":
        return (float(a.mechanism.lower), float(a.mechanism.upper)) == \
            (float(b.mechanism.lower), float(b.mechanism.upper))
    return a.kind == "boolean"


def history(source: Any, metric: str, start: datetime, end: datetime,
            granularity: str = "day", confidence: float = 0.95) -> History | None:
    """The metric's history over [start, end) across its versions, or None when only one
    version has reports in the range (or the metric is categorical: its categories may differ
    between versions). Reads each older version with ``source.counts(..., version=N)``."""
    current = source.counts(metric, start, end)
    info = current.metric
    if info.kind not in ("boolean", "numeric") or not info.version or info.version < 2:
        return None
    parts, left_out = [series(current, granularity, start, end, confidence)], []
    for older in range(info.version - 1, 0, -1):
        try:
            counts = source.counts(metric, start, end, version=older)
        except SourceError:
            continue
        if not int(counts.n.sum()):
            continue
        if not _same_scale(counts.metric, info):
            left_out.append(f"version {older} ({counts.metric.kind}) measures on another "
                            "scale: not joined")
            continue
        parts.insert(0, series(counts, granularity, start, end, confidence))
    if sum(1 for p in parts if int(p.n.sum())) < 2:
        return None
    return _join(metric, info.kind, granularity, parts, confidence, left_out)


def _join(metric: str, kind: str, granularity: str, parts: list[TimeSeries],
          confidence: float, left_out: list[str]) -> History:
    """Join the versions' series bucket by bucket (see the module docstring)."""
    n = np.stack([p.n for p in parts]).astype(np.int64)              # (versions, buckets)
    est = np.stack([p.estimates.unclipped for p in parts])
    se = np.stack([p.estimates.stderr for p in parts])
    low = np.stack([p.estimates.ci_low for p in parts])
    high = np.stack([p.estimates.ci_high for p in parts])
    numbers = np.array([int(p.metric.version or 0) for p in parts])
    total = n.sum(axis=0)
    busy = (n > 0).sum(axis=0)
    buckets = n.shape[1]
    estimate = np.full(buckets, np.nan)
    ci_low, ci_high = np.zeros(buckets), np.ones(buckets)
    version = np.zeros(buckets, np.int64)
    lower, upper = ((float(parts[-1].metric.mechanism.lower),  # type: ignore[union-attr]
                     float(parts[-1].metric.mechanism.upper))  # type: ignore[union-attr]
                    if kind == "numeric" else (0.0, 1.0))
    ci_low[:], ci_high[:] = lower, upper
    z = z_score(confidence)
    for i in range(buckets):
        if busy[i] == 1:
            v = int(np.flatnonzero(n[:, i])[0])
            estimate[i] = min(max(est[v, i], lower), upper)
            ci_low[i], ci_high[i] = low[v, i], high[v, i]
            version[i] = numbers[v]
        elif busy[i] > 1:
            w = n[:, i] / total[i]
            has = n[:, i] > 0
            pooled = float(np.sum(w[has] * est[has, i]))
            spread = float(np.sqrt(np.sum((w[has] * se[has, i]) ** 2)))
            estimate[i] = min(max(pooled, lower), upper)
            ci_low[i] = max(lower, pooled - z * spread)
            ci_high[i] = min(upper, pooled + z * spread)
            version[i] = MIXED
    changes: list[tuple[int, int, int]] = []
    last = 0
    for i in range(buckets):
        now = int(version[i])
        if now == 0:
            continue
        newest = int(numbers[np.flatnonzero(n[:, i])[-1]]) if now == MIXED else now
        if last and newest != last:
            changes.append((i, last, newest))
        last = newest
    return History(metric, kind, granularity, parts, list(parts[-1].starts), total, estimate,
                   ci_low, ci_high, version, changes, confidence, left_out)


def history_rows(h: History) -> list[dict[str, Any]]:
    """One JSON-ready dict per bucket: start, n, version (``"mixed"`` for several), the
    estimate and its interval (NaN as None)."""
    rows = []
    for i, start in enumerate(h.starts):
        v = int(h.version[i])
        rows.append({"start": start.isoformat(), "n": int(h.n[i]),
                     "version": "mixed" if v == MIXED else (v or None),
                     "estimate": None if np.isnan(h.estimate[i]) else float(h.estimate[i]),
                     "ci_low": float(h.ci_low[i]), "ci_high": float(h.ci_high[i])})
    return rows
