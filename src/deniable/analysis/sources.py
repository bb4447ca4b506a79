"""Where perturbed counts come from: the collector's HTTP API, or its storage directly.

Both return ``MetricCounts``: per UTC hour bucket, the mechanism's counter slots (``n``
reports, then perturbed ``ones`` for boolean and numeric metrics, or one count per category).
Neither ever sees a true value; there is none to see.
"""
from __future__ import annotations

import time
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import requests
from numpy.typing import NDArray

from deniable.client.dimensions import NONE, DimensionError, Dimensions
from deniable.client.errors import DeniableError, InvalidParameterError
from deniable.client.kinds import Mechanism, MetricSpec, kind_of_mechanism, parse_mechanism
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.transport import DEFAULT_TIMEOUT
from deniable.core import keys
from deniable.core.periods import first_hour_from


class SourceError(DeniableError):
    """Counts could not be read."""


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric as an analyst sees it.

    ``spec`` says what the metric asks (its kind, categories, edges or range); a boolean
    metric's default is ``MetricSpec("boolean", mechanism)``.
    """

    name: str
    description: str
    mechanism: Mechanism
    policy: CollectionPolicy = DEFAULT_POLICY
    version: int | None = None
    spec: MetricSpec = None  # type: ignore[assignment]
    dimensions: Dimensions = NONE
    """The metric's public dimensions (current declaration; none when it declares none)."""

    def __post_init__(self) -> None:
        if self.spec is None:
            if not isinstance(self.mechanism, RandomizedResponse):
                raise SourceError(f"{self.name}: a {self.mechanism.kind} metric needs its "
                                  "spec (categories, edges or range)")
            object.__setattr__(self, "spec", MetricSpec("boolean", self.mechanism))
        elif self.spec.mechanism.id != self.mechanism.id:
            raise SourceError(f"{self.name}: spec is for {self.spec.mechanism.id}, "
                              f"not {self.mechanism.id}")

    @property
    def kind(self) -> str:
        """``boolean``, ``categorical``, ``histogram`` or ``numeric``."""
        return self.spec.kind


def spec_of(doc: Any, mechanism: Mechanism) -> MetricSpec:
    """The spec of a catalogue, registry or counts document (its kind and declaration
    fields) under ``mechanism``: lenient, so a boolean entry without them parses as today.

    Raises:
        SourceError: fields that do not fit the mechanism (e.g. a changed category list).
    """
    fields = doc if isinstance(doc, dict) else {}
    if "kind" not in fields and isinstance(mechanism, RandomizedResponse):
        return MetricSpec("boolean", mechanism)
    if "kind" not in fields:
        fields = {**fields, "kind": kind_of_mechanism(mechanism).name}
    try:
        return MetricSpec.from_document(fields, mechanism)
    except InvalidParameterError as exc:
        raise SourceError(f"cannot read the metric's declaration for {mechanism.id}: "
                          f"{exc}") from exc


def _version_spec(version: Any, entry: Any = None) -> MetricSpec:
    """The spec of a registry version: its own ``spec`` if the registry keeps one, else
    parsed from its ``describe()`` document (kind, categories, edges, lower, upper)."""
    spec = getattr(version, "spec", None)
    if isinstance(spec, MetricSpec):
        return spec
    mechanism = version.mechanism
    doc: dict[str, Any] = {}
    describe = getattr(version, "describe", None)
    if callable(describe):
        try:
            doc = dict(describe())
        except Exception:  # noqa: BLE001 - a registry without spec fields: boolean default
            doc = {}
    if "kind" not in doc and entry is not None:
        entry_spec = getattr(entry, "spec", None)
        if isinstance(entry_spec, MetricSpec) and entry_spec.mechanism.id == mechanism.id:
            return entry_spec
    return spec_of(doc, mechanism)


@dataclass(frozen=True, init=False)
class MetricCounts:
    """Perturbed counts for one metric, one row per non-empty hour bucket, oldest first.

    Buckets are integer hour indexes (hours since the Unix epoch, UTC), so a year of them is
    a few integer arrays and no Python object per bucket.

    Attributes:
        metric: the metric and its mechanism.
        hours: bucket hour indexes, ascending (sorted on construction), shape (buckets,).
        values: the counter slots per bucket, shape (buckets, width): slot 0 is ``n``, then
            ``ones`` (boolean, numeric) or one count per category (categorical, histogram).
        n: reports per bucket, ``values[:, 0]``, shape (buckets,).
        ones: perturbed ones per bucket, ``values[:, 1]`` (for a categorical metric, the first
            category's count), shape (buckets,).
    """

    metric: MetricInfo
    hours: NDArray[np.int64]
    values: NDArray[np.int64]
    n: NDArray[np.int64]
    ones: NDArray[np.int64]

    def __init__(self, metric: MetricInfo,
                 starts: Sequence[datetime] | NDArray[np.int64] | NDArray[np.datetime64],
                 n: NDArray[np.int64] | None = None, ones: NDArray[np.int64] | None = None,
                 *, values: NDArray[np.int64] | None = None) -> None:
        """``starts``: hour bucket starts as datetimes, ``datetime64`` values, or integer
        hour indexes. Give either ``n`` and ``ones`` (width-2 kinds) or ``values``
        (shape (buckets, width), any kind).

        Raises:
            SourceError: counts of the wrong shape for the metric's mechanism.
        """
        if isinstance(starts, np.ndarray) and starts.dtype.kind == "M":
            hours = starts.astype("datetime64[h]").astype(np.int64)
        elif isinstance(starts, np.ndarray):
            hours = starts.astype(np.int64, copy=False)
        else:
            hours = np.array([keys.hour_index(s) for s in starts], dtype=np.int64)
        width = metric.mechanism.width
        if values is None:
            if n is None or ones is None:
                raise SourceError("give n and ones, or values")
            values = np.stack([np.asarray(n, dtype=np.int64).reshape(-1),
                               np.asarray(ones, dtype=np.int64).reshape(-1)], axis=1)
        values = np.asarray(values, dtype=np.int64).reshape(-1, width) if np.size(values) \
            else np.zeros((0, width), np.int64)
        if values.shape != (len(hours), width):
            raise SourceError(f"{metric.name}: counts of shape {values.shape} for "
                              f"{len(hours)} buckets of width {width}")
        if len(hours) > 1 and not bool(np.all(hours[1:] > hours[:-1])):
            order = np.argsort(hours, kind="stable")
            hours, values = hours[order], values[order]
        # Column-major: each slot's counts lie together, so sums over buckets (a window's,
        # a day's) read memory in order (about 50x faster than row-major for width 2).
        values = np.asfortranarray(values)
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "hours", hours)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "n", values[:, 0])
        object.__setattr__(self, "ones", values[:, 1])

    @property
    def width(self) -> int:
        """Counter slots per bucket: 2, or d + 1 for a categorical or histogram metric."""
        return int(self.values.shape[1])

    @property
    def starts(self) -> list[datetime]:
        """Bucket start times (UTC datetimes; built on demand, not for hot paths)."""
        return [keys.hour_start(int(h)) for h in self.hours]

    def between(self, start: datetime | None = None, end: datetime | None = None) -> slice:
        """The rows of the hour buckets that start in [start, end) (None: unbounded), as a
        slice of ``hours`` and ``values``: two binary searches on the sorted hour indexes."""
        lo = 0 if start is None else int(np.searchsorted(self.hours, first_hour_from(start)))
        hi = len(self.hours) if end is None else \
            int(np.searchsorted(self.hours, first_hour_from(end)))
        return slice(lo, max(lo, hi))


class CountsSource(Protocol):
    """Anything that lists metrics and reads their perturbed counts."""

    def metrics(self) -> dict[str, MetricInfo]: ...

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts: ...


def default_range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """Fill in the default range: the 7 days up to ``end`` (now by default)."""
    end = end or datetime.now(timezone.utc)
    return start or end - timedelta(days=7), end


def _bucket_values(bucket: dict[str, Any], width: int) -> list[int]:
    """One counts-API bucket's slots: ``counts`` (every slot), else ``n`` and ``ones``."""
    found = bucket.get("counts")
    if found is None and width == 2:
        found = [bucket["n"], bucket["ones"]]
    if not isinstance(found, list) or len(found) != width:
        raise SourceError(f"a bucket of {bucket.get('start')} has no counts of width {width}")
    return [int(v) for v in found]


def _info(name: str, description: str, doc: dict[str, Any]) -> MetricInfo:
    """A MetricInfo from a catalogue entry or a counts document (mechanism, policy, spec)."""
    try:
        mechanism = parse_mechanism(doc["mechanism"])
        policy = parse_policy(doc)
    except (InvalidParameterError, KeyError) as exc:
        raise SourceError(f"{name}: {exc}") from exc
    return MetricInfo(name, description, mechanism, policy, doc.get("version"),
                      spec_of(doc, mechanism), dimensions_of(doc))


def _version_info(name: str, active: MetricInfo | None, doc: dict[str, Any]) -> MetricInfo:
    """The MetricInfo of the version a counts document is for (it names its own mechanism),
    with the active metric's description and dimensions: declared once for every version."""
    found = _info(name, active.description if active else "", doc)
    return replace(found, dimensions=active.dimensions) if active else found


def dimensions_of(doc: Any) -> Dimensions:
    """The public dimensions of a catalogue, registry or counts document (its ``dimensions``
    and ``combinations`` fields, ``Dimensions.describe``'s shape): lenient, absent = none.

    Raises:
        SourceError: a declaration that does not parse.
    """
    if not isinstance(doc, dict) or not doc.get("dimensions"):
        return NONE
    try:
        return Dimensions.parse(doc.get("dimensions"), doc.get("combinations") or ())
    except InvalidParameterError as exc:
        raise SourceError(f"cannot read the metric's dimensions: {exc}") from exc


def series_labels(dimensions: Dimensions, metric: str, by: str) -> list[str]:
    """Every series label of ``by`` (a dimension, or a declared combination ``a,b``).

    Raises:
        SourceError: ``by`` is neither; the message names what the metric declares.
    """
    try:
        return dimensions.all_series(by)
    except DimensionError as exc:
        declared = (f"it declares {', '.join(dimensions.names)}"
                    + (f" and the combinations "
                       f"{', '.join(','.join(c) for c in dimensions.combinations)}"
                       if dimensions.combinations else "")
                    if dimensions else "it declares no dimensions")
        raise SourceError(f"{metric}: {by!r} is not a dimension or declared combination "
                          f"of this metric ({declared})") from exc


def _by(by: str) -> str:
    """A ``by`` in its one spelling: dimension names sorted."""
    return ",".join(sorted(part.strip() for part in by.split(",")))


class HTTPSource:
    """Reads ``GET /v1/metrics`` and ``GET /v1/metrics/<name>/counts`` of a collector.

    Args:
        collector_url: the collector's base URL.
        token: a read token, sent as ``Authorization: Bearer``, if the collector wants one.
        verify: how to check the collector's TLS certificate: True (the system's CAs), or
            the path of a CA bundle (PEM), e.g. a private CA's certificate; as requests'
            ``verify``.
    """

    def __init__(self, collector_url: str, token: str | None = None,
                 timeout: tuple[float, float] = DEFAULT_TIMEOUT, *,
                 verify: bool | str = True) -> None:
        self.base_url = collector_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self.verify = verify  # passed on each request: REQUESTS_CA_BUNDLE would override the
        if token:             # session's own (requests reads it when a request says nothing)
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._metrics: dict[str, MetricInfo] | None = None

    def _get(self, path: str, params: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
        url = f"{self.base_url}{path}"
        try:
            response = self._session.get(url, params=params, timeout=self.timeout,
                                         verify=self.verify)
        except requests.exceptions.SSLError as exc:
            raise SourceError(f"GET {url} failed: the collector's TLS certificate could not be "
                              "verified (a private CA? pass its certificate: --cacert FILE, or "
                              f"HTTPSource(..., verify=FILE)): {exc}") from exc
        except requests.RequestException as exc:
            raise SourceError(f"GET {url} failed: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise SourceError(f"GET {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()  # type: ignore[no-any-return]

    def metrics(self) -> dict[str, MetricInfo]:
        if self._metrics is None:
            doc = self._get("/v1/metrics")
            self._metrics = {m["name"]: _info(m["name"], m.get("description", ""), m)
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
            info = _version_info(metric, info, doc)
        elif doc["mechanism"] != info.mechanism.id:
            raise SourceError(f"{metric}: counts are for {doc['mechanism']}, "
                              f"not {info.mechanism.id}")
        return _counts_of(info, doc["buckets"])

    def open_counters(self, metric: str, start: datetime | None = None,
                      end: datetime | None = None) -> tuple[MetricInfo, list[int],
                                                            NDArray[np.int64]]:
        """``RedisSource.open_counters`` over HTTP: the collector's period buckets of an
        open-domain metric (``cells``: its non-zero counters), as dense rows with the start
        hour of each."""
        info = self._active(metric)
        if not keys.is_sparse(info.mechanism.id):
            raise SourceError(f"metric {metric!r} is not an open-domain metric")
        start, end = default_range(start, end)
        doc = self._get(f"/v1/metrics/{metric}/counts",
                        {"from": start.isoformat(), "to": end.isoformat()})
        self._check_mechanism(info, doc)
        width = keys.width(info.mechanism.id)
        rows = np.zeros((len(doc["buckets"]), width), dtype=np.int64)
        starts = []
        for i, bucket in enumerate(doc["buckets"]):
            starts.append(keys.hour_index(datetime.fromisoformat(bucket["start"])))
            rows[i, 0] = int(bucket["n"])
            pairs = np.asarray(bucket["cells"], dtype=np.int64).reshape(-1, 2)
            if pairs.size and (pairs[:, 0].min() < 1 or pairs[:, 0].max() >= width):
                raise SourceError(f"{metric}: a cell outside [1, {width})")
            rows[i, pairs[:, 0]] = pairs[:, 1]
        return info, starts, rows

    def dimensions(self, metric: str) -> Dimensions:
        """The metric's public dimensions, as the catalogue declares them (none if absent)."""
        info = self.metrics().get(metric)
        if info is None:
            raise SourceError(f"the collector lists no active metric {metric!r}")
        return info.dimensions

    def series_counts(self, metric: str, label: str, start: datetime | None = None,
                      end: datetime | None = None) -> MetricCounts:
        """Counts of one dimension series (``platform=ios``) of the current version."""
        info = self._active(metric)
        start, end = default_range(start, end)
        doc = self._get(f"/v1/metrics/{metric}/counts",
                        {"from": start.isoformat(), "to": end.isoformat(), "series": label})
        self._check_mechanism(info, doc)
        return _counts_of(info, doc["buckets"])

    def breakdown_counts(self, metric: str, by: str, start: datetime | None = None,
                         end: datetime | None = None, *, version: int | None = None
                         ) -> dict[str, MetricCounts]:
        """Counts of every series of ``by`` (a dimension or a declared combination ``a,b``)
        of the current version, or of ``version``: label -> counts, in the declaration's
        order, from one ``?by=`` request."""
        info = self._active(metric)
        by = _by(by)
        labels = series_labels(info.dimensions, metric, by)
        start, end = default_range(start, end)
        params = {"from": start.isoformat(), "to": end.isoformat(), "by": by}
        if version is None:
            doc = self._get(f"/v1/metrics/{metric}/counts", params)
            self._check_mechanism(info, doc)
        else:  # another version: the counts name their own mechanism
            doc = self._get(f"/v1/metrics/{metric}/counts", {**params, "version": str(version)})
            info = _version_info(metric, info, doc)
        found = doc.get("series")
        if not isinstance(found, dict):
            raise SourceError(f"{metric}: the collector sent no series for by={by}")
        return {label: _counts_of(info, found.get(label, [])) for label in labels}

    def _active(self, metric: str) -> MetricInfo:
        info = self.metrics().get(metric)
        if info is None:
            raise SourceError(f"the collector lists no active metric {metric!r}")
        return info

    @staticmethod
    def _check_mechanism(info: MetricInfo, doc: dict[str, Any]) -> None:
        if doc.get("mechanism") != info.mechanism.id:
            raise SourceError(f"{info.name}: counts are for {doc.get('mechanism')}, "
                              f"not {info.mechanism.id}")


def _counts_of(info: MetricInfo, buckets: list[dict[str, Any]]) -> MetricCounts:
    """MetricCounts of a counts document's buckets."""
    width = info.mechanism.width
    return MetricCounts(info, bucket_hours([b["start"] for b in buckets]),
                        values=np.array([_bucket_values(b, width) for b in buckets],
                                        dtype=np.int64).reshape(-1, width))


UTC_SUFFIX = "+00:00"


def bucket_hours(starts: Sequence[str]) -> NDArray[np.int64]:
    """Hour indexes of ISO 8601 bucket starts (the counts API's ``start``), shape (buckets,):
    numpy parses the UTC times the collector writes (``2026-11-02T13:00:00+00:00``) at once,
    and ``datetime.fromisoformat`` any other spelling, one by one."""
    if all(len(s) == 25 and s.endswith(UTC_SUFFIX) for s in starts):
        seconds = np.array([s[:19] for s in starts], dtype="datetime64[s]").astype(np.int64)
        return seconds // keys.HOUR_SECONDS
    return np.array([keys.hour_index(datetime.fromisoformat(s)) for s in starts], np.int64)


class RegistryVersion(Protocol):
    """One version of a registered metric, as a ``CounterReader``'s registry gives it (it may
    also carry a ``spec``, or a ``describe()`` document with the spec's fields)."""

    @property
    def mechanism(self) -> Mechanism: ...

    @property
    def policy(self) -> CollectionPolicy: ...

    @property
    def version(self) -> int: ...


class RegistryEntry(Protocol):
    """A registered metric with every version it had (it may also carry ``spec`` and
    ``dimensions``)."""

    @property
    def description(self) -> str: ...

    @property
    def retention_days(self) -> int: ...

    @property
    def current(self) -> RegistryVersion: ...

    def version(self, number: int | None = None) -> RegistryVersion | None: ...


class ActiveMetric(Protocol):
    """A metric accepting reports: its current version's declaration."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def mechanism(self) -> Mechanism: ...

    @property
    def policy(self) -> CollectionPolicy: ...

    @property
    def version(self) -> int | None: ...


MonthStrings = list[tuple[keys.Month, bytes | None]]
"""The raw counters string of each month overlapping a read (None: no such key), oldest first:
the layout of ``deniable.core.keys``."""


class CounterReader(Protocol):
    """Reads a collector's registry and its raw counters; ``ReaderSource`` debiases nothing it
    has not read through one. The collector provides the Redis-backed one
    (``deniable.collector.reader.RedisCounterReader``); ``deniable.cli.sources.RedisSource``
    wires the two together. Every read is of perturbed counts only.
    """

    @property
    def file_metrics(self) -> Mapping[str, Any]:
        """The metrics file's declarations by name (empty without a file)."""
        ...

    def active(self) -> Mapping[str, ActiveMetric]:
        """The metrics accepting reports, by name."""
        ...

    def entry(self, name: str) -> RegistryEntry | None:
        """A metric's registry entry, retired ones included; None if it was never registered."""
        ...

    def registry_json(self, name: str) -> bytes | None:
        """A metric's registry entry as stored (JSON), or None."""
        ...

    def month_strings(self, metric: str, mechanism_id: str, first_hour: int, end_hour: int,
                      series: str | None = None) -> MonthStrings:
        """One metric version's (or one of its series') months over [first_hour, end_hour)."""
        ...

    def open_period_strings(self, metric: str, mechanism_id: str, period: str,
                            first_hour: int, end_hour: int) -> list[tuple[int, bytes | None]]:
        """An open-domain metric version's raw period strings (its declared ``period``) for
        every period overlapping the hours [first_hour, end_hour): (start hour, string or
        None: no reports), oldest first."""
        ...

    def month_strings_many(self, metrics: Sequence[tuple[str, str]], first_hour: int,
                           end_hour: int) -> dict[str, MonthStrings]:
        """``month_strings`` of many (metric, mechanism id) pairs, in one round trip."""
        ...

    def month_strings_by_series(self, metric: str, mechanism_id: str, labels: Sequence[str],
                                first_hour: int, end_hour: int) -> dict[str, MonthStrings]:
        """``month_strings`` of many series of one metric version, in one round trip."""
        ...


class ReaderSource:
    """Reads counters straight from the collector's storage, through a ``CounterReader``: the
    collector's key layout and registry, without its HTTP API.

    The metrics are the collector's registry (runtime registrations included), with the
    metrics file's entries filling in for any that the registry lacks. To read a collector's
    Redis: ``deniable.cli.sources.RedisSource(redis_url, metrics_file)``.

    Args:
        reader: the registry and raw counters to read.
    """

    def __init__(self, reader: CounterReader) -> None:
        if isinstance(reader, (str, Path)):
            raise SourceError("ReaderSource takes a CounterReader. Got a URL instead: "
                              "read a collector's Redis with "
                              "deniable.cli.sources.RedisSource(redis_url, metrics_file)")
        self._reader = reader
        self._plan: tuple[list[str], datetime, datetime, float] | None = None
        self._ahead: dict[str, tuple[str, MonthStrings]] = {}

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
                entry = self._reader.entry(name)
                if entry is not None and name not in self._ahead:
                    chunk.append((name, entry.current.mechanism.id))
            fetched = self._reader.month_strings_many(chunk, first, end_hour)
            self._ahead.update({name: (mech, fetched[name]) for name, mech in chunk})
        found = self._ahead.pop(metric, None)
        if found is None or found[0] != mechanism_id:
            return None
        return found[1]

    def metrics(self) -> dict[str, MetricInfo]:
        found = {}
        for m in self._reader.active().values():
            entry = self._reader.entry(m.name)
            version = entry.version(m.version) if entry is not None else None
            spec = getattr(m, "spec", None)
            if not isinstance(spec, MetricSpec):
                spec = _version_spec(version, entry) if version is not None \
                    else spec_of({}, m.mechanism)
            found[m.name] = MetricInfo(m.name, m.description, m.mechanism, m.policy,
                                       m.version, spec, self._dimensions_of(m.name, entry))
        return found

    def _dimensions_of(self, metric: str, entry: Any) -> Dimensions:
        """A metric's dimensions: its registry entry's (``dimensions``/``combinations`` in
        the entry's JSON), else the metrics file's; none when neither declares any."""
        found = getattr(entry, "dimensions", None)
        if isinstance(found, Dimensions) and found:
            return found
        if entry is not None and not isinstance(found, Dimensions):
            # A registry that does not parse dimensions itself: read its JSON leniently.
            raw = self._reader.registry_json(metric)
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            parsed = dimensions_of(doc)
            if parsed:
                return parsed
        declared = getattr(self._reader.file_metrics.get(metric), "dimensions", None)
        return declared if isinstance(declared, Dimensions) else NONE

    def dimensions(self, metric: str) -> Dimensions:
        """The metric's public dimensions (current declaration; none if it declares none)."""
        entry = self._reader.entry(metric)
        if entry is None:
            raise SourceError(f"the collector's registry has no metric {metric!r}")
        return self._dimensions_of(metric, entry)

    def _current(self, metric: str, start: datetime | None, end: datetime | None,
                 version: int | None = None) -> tuple[MetricInfo, int, int]:
        """(the MetricInfo of the current version, or of ``version``; first hour; end hour)
        of a read."""
        entry = self._reader.entry(metric)
        found = entry.version(version) if entry is not None else None
        if entry is None or found is None:
            raise SourceError(f"the collector's registry has no metric {metric!r}"
                              + (f" with a version {version}" if version is not None else ""))
        info = self._info(metric, entry, found)
        return (info, *_visible_hours(start, end, entry.retention_days))

    def _info(self, metric: str, entry: Any, found: Any) -> MetricInfo:
        """The MetricInfo of one version of a registry entry."""
        return MetricInfo(metric, entry.description, found.mechanism, found.policy,
                          found.version, _version_spec(found, entry),
                          self._dimensions_of(metric, entry))

    def series_counts(self, metric: str, label: str, start: datetime | None = None,
                      end: datetime | None = None) -> MetricCounts:
        """Counts of one dimension series (``platform=ios``) of the current version."""
        info, first, end_hour = self._current(metric, start, end)
        months = self._reader.month_strings(metric, info.mechanism.id, first, end_hour,
                                           series=label)
        hours, values = decode_months(months, keys.width(info.mechanism.id), first, end_hour)
        return MetricCounts(info, hours, values=values)

    def breakdown_counts(self, metric: str, by: str, start: datetime | None = None,
                         end: datetime | None = None, *, version: int | None = None
                         ) -> dict[str, MetricCounts]:
        """Counts of every series of ``by`` (a dimension or a declared combination ``a,b``)
        of the current version or of ``version``, label -> counts in the declaration's order:
        every series' months in one pipelined round trip (``CounterReader.month_strings_by_series``).

        Raises:
            SourceError: an unknown metric or version, or ``by`` it does not declare.
        """
        info, first, end_hour = self._current(metric, start, end, version)
        labels = series_labels(info.dimensions, metric, _by(by))
        width = keys.width(info.mechanism.id)
        read = self._reader.month_strings_by_series(metric, info.mechanism.id, labels, first,
                                                   end_hour)
        found = {}
        for label in labels:
            hours, values = decode_months(read[label], width, first, end_hour)
            found[label] = MetricCounts(info, hours, values=values)
        return found

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts:
        """Counts of the metric's current version, or of ``version`` (retired metrics too)."""
        info, first, end_hour = self._current(metric, start, end, version)
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
            months = self._reader.month_strings(metric, info.mechanism.id, first, end_hour)
        hours, values = decode_months(months, keys.width(info.mechanism.id), first, end_hour)
        return MetricCounts(info, hours, values=values)


    def open_counters(self, metric: str, start: datetime | None = None,
                      end: datetime | None = None) -> tuple[MetricInfo, list[int],
                                                            NDArray[np.int64]]:
        """An open-domain metric's period counters (``keys.open_counters``) over the periods
        its version declares (``info.policy.period``: hour, UTC day or week) overlapping
        [start, end): (its MetricInfo, the start hour (hours since the epoch) of each period
        with reports, counters of shape (periods, width): slot 0 = n, slot 1 + cell).

        Raises:
            SourceError: no such metric, or not an open-domain one.
        """
        info, first, end_hour = self._current(metric, start, end)
        if not keys.is_sparse(info.mechanism.id):
            raise SourceError(f"metric {metric!r} is not an open-domain metric")
        width = keys.width(info.mechanism.id)
        starts, rows = [], []
        for period_start, raw in self._reader.open_period_strings(
                metric, info.mechanism.id, info.policy.period, first, end_hour):
            if raw is None:
                continue
            values = np.frombuffer(raw, dtype=keys.COUNTER_DTYPE)[:width].astype(np.int64)
            if values[0]:
                starts.append(period_start)
                rows.append(values)
        return info, starts, (np.stack(rows) if rows else np.zeros((0, width), np.int64))


def _visible_hours(start: datetime | None, end: datetime | None,
                   retention_days: int) -> tuple[int, int]:
    """[first, end) hour indexes of a read over [start, end) (default: the last 7 days), the
    hours past the metric's retention left out."""
    start, end = default_range(start, end)
    first, end_hour = keys.hour_range(start, end)
    return max(first, keys.visible_from(datetime.now(timezone.utc), retention_days)), end_hour


def decode_months(months: Sequence[tuple[keys.Month, bytes | None]], width: int,
                  first_hour: int, end_hour: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Month counters strings (``CounterReader.month_strings``) to (hours, values) arrays of the
    non-empty hours in [first_hour, end_hour): hours of shape (buckets,), values of shape
    (buckets, width) (slot 0 is n). ``numpy.frombuffer`` per month, no loop per hour.
    """
    if not months or all(raw is None for _, raw in months):
        return np.zeros(0, np.int64), np.zeros((0, width), np.int64)
    # Months are consecutive: their strings, each padded to its full size, are the hours in
    # order. One frombuffer over the joined bytes; no loop per hour, none per month's values.
    chunks = []
    for month, raw in months:
        size = month.size_bytes(width)
        raw = raw or b""
        chunks.append(raw[:size] + bytes(size - len(raw)) if len(raw) != size else raw)
    values = np.frombuffer(b"".join(chunks), dtype=keys.COUNTER_DTYPE).reshape(-1, width)
    base = months[0][0].first_hour
    # Native integers first, column-major (as MetricCounts keeps them): picking rows out of
    # big-endian counters directly is about 20x slower.
    block = values[max(first_hour - base, 0):max(end_hour - base, 0)].astype(np.int64,
                                                                             order="F")
    present = np.flatnonzero(block[:, 0])
    if present.size != len(block):
        block = np.asfortranarray(block[present])
    return present + max(first_hour, base), block
