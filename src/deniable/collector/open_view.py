"""An open-domain metric's dashboard data (``GET /dashboard/data`` for an ``od:`` metric):
its periods, the strings discovered over the range or in one period, and one string's share
per period, decoded by the analysis' functions handed in (``dashboard.use_discovery``).

Cost and its bounds (docs/discovery.md, "Dashboard"):

- **Read budget.** A period's counters are 4 x width bytes (3.67 MB for ``od:16`` at
  epsilon 4), whatever its reports. One request reads at most ``OpenViewLimits.read_bytes``:
  a range with more periods with reports than that allows answers 422 naming ``from``/``to``
  and the limit (the default last-7-days range is shortened to the latest periods instead,
  and says so). Counters are read ``chunk_periods`` at a time and summed as they come.
- **Cache.** A decoded period, a window of periods and a string's share in a period are kept
  in the worker process (LRU, at most ``cache_bytes`` of their JSON) once every period they
  cover is *closed*: it ended more than ``grace_seconds`` ago. Ingest counts a batch in the
  period of its receive time, and a request lasts at most the worker timeout (30 s), so
  after the grace nothing can be added. Keys name the Redis string (metric, version's
  mechanism, period) and its report count n, so a counter deleted and re-filled never
  matches an old entry. The current period is always read and decoded afresh.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import NormalDist
from typing import Any

import orjson
from flask import current_app, request

from deniable.client.errors import InvalidParameterError
from deniable.client.open_domain import OpenDomainSketch, normalise
from deniable.collector.api import storage_guard
from deniable.collector.errors import APIError
from deniable.collector.params import time_range
from deniable.collector.registry import Metric
from deniable.core import keys
from deniable.core.periods import SPAN_HOURS, period_label

LIMITS = "deniable.open_view_limits"
"""``app.extensions`` key of the ``OpenViewLimits`` (``dashboard.use_discovery``)."""
CACHE = "deniable.open_view_cache"
"""``app.extensions`` key of the worker's ``DecodedCache`` (made on first use)."""
CONFIDENCE = 0.95


@dataclass(frozen=True)
class OpenViewLimits:
    """What one open-metric request may cost, and what a worker keeps.

    Attributes:
        read_bytes: counters read per request, at most (bytes; 128 MiB: 36 days of ``od:16``
            at epsilon 4, 256 at epsilon 2).
        cache_bytes: decoded results kept per worker process, at most (bytes of their JSON).
        grace_seconds: a period is closed (cacheable) this long after its end.
        chunk_periods: period strings fetched per Redis round trip.
    """

    read_bytes: int = 128 * 2 ** 20
    cache_bytes: int = 32 * 2 ** 20
    grace_seconds: int = 300
    chunk_periods: int = 8


class DecodedCache:
    """Least recently used entries, bounded by the bytes of their JSON (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The entry, now the most recently used; None when absent."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value``, evicting the least recently used entries beyond ``max_bytes``
        (a value larger than that is not kept)."""
        size = len(orjson.dumps(value)) + len(repr(key))
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class _Period:
    start: int  # hour index
    key: str  # the Redis string
    n: int


class _Reader:
    """Reads period strings in chunks, counting what it read."""

    def __init__(self, client: Any, width: int, chunk: int) -> None:
        self.client, self.width, self.chunk = client, width, chunk
        self.bytes = self.periods = 0

    def rows(self, periods: Sequence[_Period]) -> Iterator[tuple[_Period, Sequence[int]]]:
        from deniable.collector.store import decode_counters

        for first in range(0, len(periods), self.chunk):
            part = periods[first:first + self.chunk]
            with storage_guard():
                pipe = self.client.pipeline(transaction=False)
                for p in part:
                    pipe.get(p.key)
                raws = pipe.execute()
            for p, raw in zip(part, raws):
                if raw is None:
                    continue
                self.bytes += len(raw)
                self.periods += 1
                values = decode_counters(raw)[:self.width]
                if len(values) == self.width and values[0]:
                    yield p, values


def limits_of() -> OpenViewLimits:
    found = current_app.extensions.get(LIMITS)
    return found if isinstance(found, OpenViewLimits) else OpenViewLimits()


def cache_of() -> DecodedCache:
    found = current_app.extensions.get(CACHE)
    if not isinstance(found, DecodedCache):
        found = current_app.extensions.setdefault(CACHE, DecodedCache(limits_of().cache_bytes))
    return found  # type: ignore[no-any-return]


def closed(start_hour: int, period: str, now: float, grace_seconds: int) -> bool:
    """Whether the period starting at ``start_hour`` ended ``grace_seconds`` or more before
    ``now`` (Unix seconds): no report can be added to it any more."""
    return (start_hour + SPAN_HOURS[period]) * keys.HOUR_SECONDS + grace_seconds <= now


def open_data(metric: Metric, decode: Callable[..., dict[str, Any]],
              track: Callable[..., dict[str, Any]] | None, spec_doc: dict[str, Any]
              ) -> dict[str, Any]:
    """The data document of an open metric version (``dashboard.data``'s query): ``days``
    (each period with reports: ``day`` its key in the query, ``label``, ``start``, ``end``,
    ``n``), and ``discovery`` over the range, or with ``day=`` that period alone; with
    ``string=`` instead ``trend``, the string's share in each period (no decode). ``cost`` says what was
    read and whether it came from the cache.

    Raises:
        APIError: 422 naming ``from``/``to`` (over the read budget), ``day`` (no reports
            then) or ``string`` (not a value of this metric, or no decoder for it).
    """
    began = time.perf_counter()
    limits, cache = limits_of(), cache_of()
    explicit = bool(request.args.get("from") or request.args.get("to"))
    start, end = time_range()
    first, end_hour = keys.hour_range(start, end)
    if metric.retention_days is not None:
        first = max(first, keys.visible_from(datetime.now(timezone.utc), metric.retention_days))
    mechanism, period = metric.mechanism, metric.policy.period
    width = keys.width(mechanism.id)
    store = current_app.extensions["deniable.store"]
    present = _present(store.client, metric.name, mechanism.id, period, first, end_hour)
    period_bytes = keys.COUNTER_BYTES * width
    most = max(1, limits.read_bytes // period_bytes)
    shortened = False
    if len(present) > most:
        budget = (f"at most {most:,} {period}s with reports per request "
                  f"({most * period_bytes / 2 ** 20:.0f} MiB of counters at "
                  f"{period_bytes / 2 ** 20:.2f} MiB each)")
        if explicit:
            raise APIError(422, f"the range holds {len(present):,} {period}s with reports of "
                           f"{metric.name!r}; {budget}: narrow 'from'/'to'",
                           parameters={"from": budget, "to": budget})
        present, shortened = present[-most:], True
        start = keys.hour_start(present[0].start)
    now = time.time()
    is_closed = {p.start: closed(p.start, period, now, limits.grace_seconds) for p in present}
    reader = _Reader(store.client, width, limits.chunk_periods)
    labels = {_key_label(p.start, period): p for p in present}
    picked = request.args.get("day", "")
    if picked and picked not in labels:
        raise APIError(422, f"{metric.name!r} has no reports on {picked!r} in this range",
                       parameters={"day": f"one of: {', '.join(labels) or 'none'}"})
    chosen = [labels[picked]] if picked else present
    value = request.args.get("string")
    hits = 0
    found = None
    if chosen and value is None:  # with string=, the trend alone: no decode
        found, hit = _decoded(cache, reader, decode, mechanism.id, period, chosen,
                              all(is_closed[p.start] for p in chosen))
        hits += hit
    body: dict[str, Any] = {
        "metric": metric.name, "version": metric.version, "description": metric.description,
        "mechanism": mechanism.id, "epsilon": mechanism.epsilon,
        "policy": metric.policy.summary(), "granularity": period, "confidence": CONFIDENCE,
        "kind": spec_doc["kind"], "from": start.isoformat(), "to": end.isoformat(),
        "days": [{"day": _key_label(p.start, period), "label": period_label(p.start, period),
                  "start": keys.hour_start(p.start).isoformat(),
                  "end": keys.hour_start(p.start + SPAN_HOURS[period]).isoformat(),
                  "n": p.n, "closed": is_closed[p.start]} for p in present],
        "period": picked or "window", "discovery": found, "shortened": shortened,
        "read_budget": {"bytes": limits.read_bytes, "periods": most,
                        "period_bytes": period_bytes},
    }
    if value is not None:
        del body["discovery"]
        trend, trend_hits = _trend(cache, reader, track, mechanism, period, present, is_closed,
                                   value)
        body["trend"] = trend
        hits += trend_hits
    body["cost"] = {"periods_read": reader.periods, "bytes_read": reader.bytes,
                    "cache_hits": hits, "seconds": round(time.perf_counter() - began, 3)}
    return body


def _present(client: Any, metric: str, mechanism_id: str, period: str, first: int,
             end_hour: int) -> list[_Period]:
    """The periods overlapping [first, end_hour) with reports, oldest first, with their n:
    4 bytes read per period (GETRANGE of slot 0), in one round trip."""
    starts = keys.open_period_starts(first, end_hour, period)
    if not starts:
        return []
    names = [keys.open_counters(metric, mechanism_id, s, period) for s in starts]
    with storage_guard():
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.getrange(name, 0, keys.COUNTER_BYTES - 1)
        heads = pipe.execute()
    out = []
    for s, name, head in zip(starts, names, heads):
        n = int.from_bytes(head, "big") if head and len(head) == keys.COUNTER_BYTES else 0
        if n:
            out.append(_Period(s, name, n))
    return out


def _key_label(hour: int, period: str) -> str:
    """A period's ``day=`` value: its start date (a week's Monday), with the hour for an
    hourly metric (``2026-11-23T14:00``)."""
    start = keys.hour_start(hour)
    return start.strftime("%Y-%m-%dT%H:00") if period == "hour" else start.date().isoformat()


def _decoded(cache: DecodedCache, reader: _Reader, decode: Callable[..., dict[str, Any]],
             mechanism_id: str, period: str, chosen: Sequence[_Period], cacheable: bool
             ) -> tuple[dict[str, Any], int]:
    """The discovery over ``chosen`` pooled, from the cache when every period is closed
    (1 hit), else decoded from their counters (and kept when closed)."""
    key = ("decode", CONFIDENCE, tuple((p.key, p.n) for p in chosen))
    if cacheable:
        hit = cache.get(key)
        if hit is not None:
            return hit, 1
    found = decode(mechanism_id, (row for _, row in reader.rows(chosen)), CONFIDENCE)
    if cacheable:
        cache.put(key, found)
    return found, 0


def _trend(cache: DecodedCache, reader: _Reader, track: Callable[..., dict[str, Any]] | None,
           mechanism: Any, period: str, present: Sequence[_Period],
           is_closed: dict[int, bool], value: str) -> tuple[dict[str, Any], int]:
    """``value``'s share in each period with reports, with an interval simultaneous over
    them (two-sided, Bonferroni over the periods shown)."""
    if track is None:
        raise APIError(422, "this collector's decoder cannot follow a string over time",
                       parameters={"string": "needs `deniable serve`'s decoder"})
    sketch = mechanism if isinstance(mechanism, OpenDomainSketch) else \
        OpenDomainSketch.from_id(mechanism.id)
    try:
        normalise(value, sketch.max_bytes)
    except InvalidParameterError as exc:
        raise APIError(422, f"'string' is not a value of this metric: {exc}",
                       parameters={"string": f"a non-empty string of at most "
                                             f"{sketch.max_bytes} UTF-8 bytes"}) from exc
    shares: dict[int, dict[str, Any]] = {}
    missing, hits = [], 0
    for p in present:
        hit = cache.get(("track", p.key, p.n, value)) if is_closed[p.start] else None
        if hit is not None:
            shares[p.start], hits = hit, hits + 1
        else:
            missing.append(p)
    for p, row in reader.rows(missing):
        one = track(sketch.id, row, value)
        shares[p.start] = one
        if is_closed[p.start]:
            cache.put(("track", p.key, p.n, value), one)
    k = max(len(present), 1)
    z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / (2 * k))
    periods = []
    for p in present:
        one = shares.get(p.start, {"pooled": 0, "share": None, "stderr": None})
        share, se = one["share"], one["stderr"]
        periods.append({
            "day": _key_label(p.start, period), "label": period_label(p.start, period),
            "start": keys.hour_start(p.start).isoformat(),
            "end": keys.hour_start(p.start + SPAN_HOURS[period]).isoformat(), "n": p.n,
            "pooled": one["pooled"], "share": share, "stderr": se,
            "lower": None if share is None else share - z * se,
            "upper": None if share is None else share + z * se})
    return {"string": value, "z": z, "confidence": CONFIDENCE, "periods": periods,
            "intervals": f"{CONFIDENCE:.0%} simultaneous over the {k} {period}"
                         f"{'s' if k != 1 else ''} shown (two-sided, Bonferroni)"}, hits
