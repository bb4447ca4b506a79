"""The metric registry in Redis, shared by every collector process.

Each metric is one JSON entry in the ``keys.registry()`` hash::

    {"name": "dark_mode", "description": "...", "retention_days": 90, "retired": null,
     "versions": [{"version": 1, "mechanism": "rr:1/2:1/2",
                   "registered": "2026-11-22T03:00:00+00:00", "kind": "boolean",
                   "memoization": "memoized", "period": "day", ...},
                  {"version": 2, "mechanism": "rr:3/4:1/2", "registered": "...", ...}]}

Each version keeps its whole declaration beside its mechanism: its collection policy and its
``MetricSpec`` fields (``kind``, and ``categories``, ``edges``, ``lower``/``upper``, ``clamp``,
``choice`` as the kind has them). An entry written before kinds existed reads as boolean.

A metric's public dimensions are stored once per metric, not per version, as
``Dimensions.describe`` writes them (``"dimensions": {"platform": {"values": [...], "other":
false}}, "combinations": [["app_version", "platform"]]``; both absent when it declares none).

Rules:

- A version's mechanism and declaration never change. Registering a name with another
  mechanism adds a version (a changed category list, edges or bounds changes the mechanism id:
  its tag, or its bounds, so it is a new version too); since the mechanism id is part of every
  counter key, each version has its own counters and the old ones stay readable. A mechanism
  that an older version of the metric used cannot come back (409): versions never share
  counters.
- Description and retention may change in place (reads apply a new retention at once; a
  month's counters get the new expiry at their next write).
- Dimensions may change in place too: they are not the mechanism, so no new version. Ingest
  applies the new declaration from then on (new series start counting; a dimension or value
  taken off the list is refused from then on, and its series stop growing). Counts already
  written stay as they are: there is no re-counting. The counts API serves the series of the
  current declaration.
- Retiring is final: a retired metric accepts no reports, and its counts stay readable.
- The metrics file is written into the registry at start: a metric missing from Redis is
  created; a new mechanism in the file adds a version; a file that names a mechanism an older
  version used, or a retired metric, is logged and ignored (the registry wins). So is a file
  whose description, retention or dimensions differ for the current mechanism (the admin API
  changes those; a differing dimension declaration is logged).

Every change replaces a random generation token, so each process's cache (REGISTRY_CACHE_SECONDS)
can tell with one GET whether it is stale; a report for a metric the cache does not know
triggers that check at once.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import redis

from deniable.client.dimensions import NONE, Dimensions
from deniable.client.errors import InvalidParameterError, WireFormatError
from deniable.client.kinds import Mechanism, MetricSpec, parse_mechanism
from deniable.client.metrics import describe_metric
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.wire import Batch, decode_batch, decode_compact_batch, is_metric_name
from deniable.core import keys
from deniable.collector.errors import CollectorError
from deniable.collector.registry import (Metric, check_policy, mechanism_field, spec_for,
                                         spec_of)

log = logging.getLogger("deniable.collector")
MAX_RETENTION_DAYS = 3650
MAX_DESCRIPTION = 500


class RegistryConflictError(CollectorError):
    """The change would break a registry rule (retired metric, reused mechanism, a changed
    policy or declaration for a version); ``field`` names the registration field at fault."""

    def __init__(self, message: str, field: str = "mechanism") -> None:
        super().__init__(message)
        self.field = field


class UnknownMetricError(CollectorError):
    """No metric of that name was ever registered."""


@dataclass(frozen=True)
class Version:
    """One version of a metric: a mechanism, its declaration (``spec``: kind, categories,
    edges or bounds) and a collection policy for life, and when it was registered."""

    version: int
    mechanism: Mechanism
    registered: str
    policy: CollectionPolicy = DEFAULT_POLICY
    spec: MetricSpec = None  # type: ignore[assignment]  # None: built from the mechanism

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", spec_for(self.mechanism, self.spec))

    def describe(self) -> dict[str, Any]:
        return {"version": self.version, "registered": self.registered,
                **{k: v for k, v in describe_metric("", "", self.spec, self.policy).items()
                   if k not in ("name", "description")}}

    def stored(self) -> dict[str, Any]:
        """This version in the registry's JSON entry."""
        return {"version": self.version, "mechanism": self.mechanism.id,
                "registered": self.registered, **self.policy.describe(),
                **self.spec.describe()}

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any]) -> Version:
        """A version from its JSON (``stored``); one written before kinds is boolean."""
        mechanism = parse_mechanism(doc["mechanism"])
        return cls(int(doc["version"]), mechanism, doc["registered"], parse_policy(doc),
                   MetricSpec.from_document(doc, mechanism))


@dataclass(frozen=True)
class Entry:
    """A registered metric with every version it ever had, and its public dimensions (one
    declaration for all versions: the current one)."""

    name: str
    description: str
    retention_days: int
    versions: tuple[Version, ...]
    retired: str | None = None
    dimensions: Dimensions = NONE

    @property
    def current(self) -> Version:
        return self.versions[-1]

    def metric(self) -> Metric:
        """The current version as a Metric (what ingest and ``GET /v1/metrics`` use)."""
        return Metric(self.name, self.description, self.current.mechanism, self.retention_days,
                      self.current.policy, self.current.version, self.current.spec,
                      self.dimensions)

    def version(self, number: int | None = None, mechanism_id: str | None = None) -> Version | None:
        """The version numbered ``number`` or using ``mechanism_id``; the current by default."""
        if number is None and mechanism_id is None:
            return self.current
        for v in self.versions:
            if (number is None or v.version == number) and \
                    (mechanism_id is None or v.mechanism.id == mechanism_id):
                return v
        return None

    def describe(self) -> dict[str, Any]:
        """This metric's entry in ``GET /v1/admin/metrics``."""
        return {"name": self.name, "description": self.description,
                "retention_days": self.retention_days, "retired": self.retired,
                "version": self.current.version, "mechanism": self.current.mechanism.id,
                **self.current.spec.describe(), **self.dimensions.describe(),
                "versions": [v.describe() for v in self.versions]}

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "description": self.description,
                           "retention_days": self.retention_days, "retired": self.retired,
                           **self.dimensions.describe(),
                           "versions": [v.stored() for v in self.versions]},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Entry:
        """An entry from its JSON (``to_json``); one written before dimensions declares none."""
        doc = json.loads(text)
        return cls(doc["name"], doc["description"], int(doc["retention_days"]),
                   tuple(Version.from_stored(v) for v in doc["versions"]),
                   doc.get("retired"),
                   Dimensions.parse(doc.get("dimensions"), doc.get("combinations", ())))


@dataclass(frozen=True)
class _Snapshot:
    generation: bytes | None
    entries: dict[str, Entry]
    active: dict[str, Metric]
    mechanisms: dict[str, str]
    older: dict[str, frozenset[str]]   # unretired metric -> its earlier versions' mechanisms
    expires: float
    dimensions: dict[str, Dimensions]  # unretired metric that declares any -> its dimensions


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def validate_policy(mechanism: Mechanism, doc: Mapping[str, Any]) -> CollectionPolicy:
    """Check a registration's collection policy (memoization, instantaneous, period).

    Raises:
        InvalidParameterError: naming the offending field.
    """
    return check_policy(mechanism, doc)


def validate(name: object, mechanism: object, description: object = "",
             retention_days: object = 90) -> tuple[str, Mechanism, str, int]:
    """Check a registration; return (name, mechanism, description, retention_days).

    Raises:
        InvalidParameterError: naming the offending field.
    """
    if not is_metric_name(name):
        raise InvalidParameterError("name: lowercase letters, digits and '_', at most 64 "
                                    "characters, starting with a letter")
    parsed = mechanism_field(mechanism)
    check_about(description, retention_days)
    return name, parsed, description, retention_days  # type: ignore[return-value]


def check_about(description: object, retention_days: object) -> None:
    """Check a registration's description and retention.

    Raises:
        InvalidParameterError: naming the offending field.
    """
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise InvalidParameterError(f"description: a string of at most {MAX_DESCRIPTION} "
                                    "characters")
    if isinstance(retention_days, bool) or not isinstance(retention_days, int) \
            or not 1 <= retention_days <= MAX_RETENTION_DAYS:
        raise InvalidParameterError(f"retention_days: a whole number of days in "
                                    f"[1, {MAX_RETENTION_DAYS}]")


class LiveRegistry:
    """The registry in Redis, with a short per-process cache.

    Args:
        client: the collector's Redis.
        file_metrics: the metrics file's metrics, written into Redis at start, and served
            from memory should Redis lose them (e.g. a flushed or replaced Redis).
        cache_seconds: how long this process trusts its copy before checking the generation.
    """

    def __init__(self, client: redis.Redis, file_metrics: Mapping[str, Metric],
                 cache_seconds: float) -> None:
        self.client = client
        self.file_metrics = dict(file_metrics)
        self.cache_seconds = float(cache_seconds)
        self._snapshot: _Snapshot | None = None

    # --- reading -----------------------------------------------------------------------

    def _current(self) -> _Snapshot:
        snap = self._snapshot
        if snap is None or snap.expires <= time.monotonic():
            snap = self._reload() if snap is None else self._revalidate(snap)
        return snap

    def _revalidate(self, snap: _Snapshot) -> _Snapshot:
        if self.client.get(keys.registry_generation()) == snap.generation and \
                snap.generation is not None:
            snap = replace(snap, expires=time.monotonic() + self.cache_seconds)
            self._snapshot = snap
            return snap
        return self._reload()

    def _reload(self) -> _Snapshot:
        pipe = self.client.pipeline(transaction=True)
        pipe.get(keys.registry_generation())
        pipe.hgetall(keys.registry())
        generation, raw = pipe.execute()
        entries = {}
        for key, value in raw.items():
            try:
                entries[key.decode()] = Entry.from_json(value)
            except InvalidParameterError as exc:
                # E.g. a mechanism id past the bound that an older collector accepted: serve
                # every other metric rather than fail every request.
                log.error("registry entry %s skipped: %s", key.decode()[:80], exc)
        for name, metric in self.file_metrics.items():
            # Written at start; if Redis lost it since, serve it from the file without
            # writing on the request path (the next start writes it again).
            entries.setdefault(name, _file_entry(metric))
        active = {n: e.metric() for n, e in sorted(entries.items()) if e.retired is None}
        older = {n: frozenset(v.mechanism.id for v in entries[n].versions[:-1])
                 for n in active if len(entries[n].versions) > 1}
        snap = _Snapshot(generation, entries, active,
                         {n: m.mechanism.id for n, m in active.items()}, older,
                         time.monotonic() + self.cache_seconds,
                         {n: m.dimensions for n, m in active.items() if m.dimensions})
        self._snapshot = snap
        return snap

    def refresh_if_changed(self) -> bool:
        """Check the generation now; reload if it moved. Whether anything changed."""
        snap = self._snapshot
        if snap is None:
            self._reload()
            return True
        fresh = self._revalidate(snap)
        return fresh is not snap and fresh.generation != snap.generation

    def entries(self) -> dict[str, Entry]:
        """Every metric ever registered, retired ones included."""
        return self._current().entries

    def entry(self, name: str) -> Entry | None:
        """One metric, re-checking Redis at once if this process does not know it yet."""
        found = self.entries().get(name)
        if found is None and self.refresh_if_changed():
            found = self.entries().get(name)
        return found

    def active(self) -> dict[str, Metric]:
        """The metrics accepting reports now: name -> current version."""
        return self._current().active

    def retention_days(self, name: str, default: int) -> int:
        """The retention of ``name`` (retired or not), or ``default`` if it is unknown."""
        entry = self._current().entries.get(name)
        return entry.retention_days if entry is not None else default

    def period(self, name: str, mechanism_id: str) -> str:
        """The reporting period (``hour``, ``day``, ``week``) that version ``mechanism_id`` of
        ``name`` declares; ``day`` (the default) if either is unknown."""
        entry = self._current().entries.get(name)
        version = None if entry is None else entry.version(mechanism_id=mechanism_id)
        return "day" if version is None else version.policy.period

    def decode_compact(self, body: bytes, max_reports: int) -> Batch | None:
        """decode_compact_batch against the current registry: the batch, or None if the body
        needs the careful path (parse it, then ``decode``). A report carrying ``dims`` never
        fits the compact layout, so a body with dimensions always takes the careful path; a
        report without them counts in its metric's total alone, whatever the metric declares."""
        snap = self._current()
        return decode_compact_batch(body, snap.mechanisms, max_reports=max_reports,
                                    older=snap.older)

    def decode(self, doc: Any, max_reports: int, *, lenient: bool = False) -> Batch:
        """decode_batch against the current registry (mechanisms, older versions and each
        metric's dimensions); on a miss (a refused batch, or with ``lenient`` a refused
        metric), re-check Redis once.

        Raises:
            WireFormatError: as decode_batch.
        """
        try:
            snap = self._current()
            batch = decode_batch(doc, snap.mechanisms, max_reports=max_reports,
                                 older=snap.older, dimensions=snap.dimensions, lenient=lenient)
            if not batch.refused or not self.refresh_if_changed():
                return batch
        except WireFormatError:
            if not self.refresh_if_changed():
                raise
        snap = self._current()
        return decode_batch(doc, snap.mechanisms, max_reports=max_reports, older=snap.older,
                            dimensions=snap.dimensions, lenient=lenient)

    # --- changing --------------------------------------------------------------------------

    def register(self, name: str, mechanism: Mechanism | MetricSpec, description: str,
                 retention_days: int, *, from_file: bool = False,
                 policy: CollectionPolicy = DEFAULT_POLICY,
                 dimensions: Dimensions = NONE) -> tuple[Entry, str]:
        """Create a metric, add a version, or update description/retention/dimensions in place.

        ``mechanism`` is the version's whole declaration (a MetricSpec), or a bare boolean
        or numeric mechanism (``registry.spec_of``). A version's collection policy and
        declaration are fixed with it: its counters were collected under them. Registering
        the current mechanism with another policy or declaration is a conflict.

        Returns:
            The entry and what happened: "created", "new_version", "updated" or "unchanged".

        Raises:
            RegistryConflictError: the metric is retired, or an older version used
                ``mechanism``.
        """
        outcome: dict[str, Any] = {}
        spec = spec_of(mechanism)

        def change(pipe: redis.client.Pipeline) -> None:
            raw = pipe.hget(keys.registry(), name)
            old = Entry.from_json(raw) if raw else None
            entry, what = _apply(old, name, spec, description, retention_days, from_file,
                                 policy, dimensions)
            outcome.update(entry=entry, what=what)
            if what != "unchanged":
                pipe.multi()
                pipe.hset(keys.registry(), name, entry.to_json())
                pipe.set(keys.registry_generation(), secrets.token_hex(16))

        self.client.transaction(change, keys.registry(), keys.registry_generation())
        if outcome["what"] != "unchanged":
            self._snapshot = None
        return outcome["entry"], outcome["what"]

    def retire(self, name: str) -> Entry:
        """Retire a metric for good (idempotent).

        Raises:
            UnknownMetricError: no such metric.
        """
        outcome: dict[str, Entry] = {}

        def change(pipe: redis.client.Pipeline) -> None:
            raw = pipe.hget(keys.registry(), name)
            if not raw:
                raise UnknownMetricError(f"no metric named {name!r} is registered")
            entry = Entry.from_json(raw)
            outcome["entry"] = entry
            if entry.retired is None:
                outcome["entry"] = replace(entry, retired=_now())
                pipe.multi()
                pipe.hset(keys.registry(), name, outcome["entry"].to_json())
                pipe.set(keys.registry_generation(), secrets.token_hex(16))

        self.client.transaction(change, keys.registry(), keys.registry_generation())
        self._snapshot = None
        return outcome["entry"]

    def sync_file(self) -> None:
        """Write the metrics file's metrics into Redis (see the module docstring).

        Each difference between the file and the registry is logged once per start: a
        gunicorn worker forked from a master that built the app (``deniable serve``) does not
        repeat the master's lines (``_note_once``).
        """
        for metric in self.file_metrics.values():
            old = self.entries().get(metric.name)
            stale = old.version(mechanism_id=metric.mechanism.id) if old is not None else None
            if old is not None and old.retired is None and stale is not None \
                    and stale.version < old.current.version:
                # The admin API published a newer version after the file was written.
                _note_once(f"metrics file: {metric.name} names version {stale.version} "
                           f"({metric.mechanism.id}); the registry's current version is "
                           f"{old.current.version} ({old.current.mechanism.id}), registered "
                           f"through the admin API, and wins. To silence this, set its "
                           f"mechanism in the file to {old.current.mechanism.id}")
                continue
            try:
                entry, what = self.register(metric.name, metric.spec, metric.description,
                                            metric.retention_days, from_file=True,
                                            policy=metric.policy, dimensions=metric.dimensions)
            except RegistryConflictError as exc:
                _note_once(f"metrics file ignored for {metric.name}: {exc}")
                continue
            if entry.dimensions != metric.dimensions:
                _note_once(f"metric {metric.name}: the metrics file's dimensions differ from "
                           "the registry's, which win (change them with the admin API)")
            if what == "new_version":
                _note_once(f"metric {metric.name}: the metrics file's mechanism "
                           f"{metric.mechanism.id} is registered as a new version")


_NOTED: dict[str, int] = {}
"""Warnings logged, each with the process id that logged it (forks inherit the dict)."""


def _note_once(message: str) -> None:
    """Log a WARNING unless the process this one was forked from logged it (gunicorn workers
    of ``deniable serve``, whose master built the app first); the same process logs it at
    each sync, as before."""
    pid = os.getpid()
    if _NOTED.get(message, pid) == pid:
        _NOTED[message] = pid
        log.warning("%s", message)


def _file_entry(metric: Metric) -> Entry:
    return Entry(metric.name, metric.description, metric.retention_days,
                 (Version(1, metric.mechanism, _now(), metric.policy, metric.spec),),
                 dimensions=metric.dimensions)


def _apply(old: Entry | None, name: str, spec: MetricSpec, description: str,
           retention_days: int, from_file: bool,
           policy: CollectionPolicy = DEFAULT_POLICY,
           dimensions: Dimensions = NONE) -> tuple[Entry, str]:
    mechanism = spec.mechanism
    if old is None:
        return Entry(name, description, retention_days,
                     (Version(1, mechanism, _now(), policy, spec),),
                     dimensions=dimensions), "created"
    if old.retired is not None:
        raise RegistryConflictError(f"metric {name!r} was retired at {old.retired}; retired "
                                    "metrics stay retired (register a new name)", "name")
    if mechanism.id == old.current.mechanism.id:
        if policy != old.current.policy:
            raise RegistryConflictError(
                f"metric {name!r} version {old.current.version} is collected as "
                f"{old.current.policy.summary()!r}; a version's collection policy never "
                "changes (register a new mechanism for a new version, or a new name)",
                "memoization")
        if _declared(spec) != _declared(old.current.spec):
            changed = sorted(k for k in _declared(spec).keys() | _declared(old.current.spec)
                             if _declared(spec).get(k) != _declared(old.current.spec).get(k))
            raise RegistryConflictError(
                f"metric {name!r} version {old.current.version} declares "
                f"{', '.join(f'{k} = {_declared(old.current.spec).get(k)!r}' for k in changed)}; "
                "a version's declaration never changes (register a new mechanism for a new "
                "version, or a new name)", changed[0])
        if from_file or (description, retention_days, dimensions) == \
                (old.description, old.retention_days, old.dimensions):
            return old, "unchanged"
        return replace(old, description=description, retention_days=retention_days,
                       dimensions=dimensions), "updated"
    used = old.version(mechanism_id=mechanism.id)
    if used is not None:
        raise RegistryConflictError(
            f"metric {name!r} used mechanism {mechanism.id} in version {used.version}; "
            "versions never share counters (choose another mechanism or a new name)")
    new = Version(old.current.version + 1, mechanism, _now(), policy, spec)
    return replace(old, description=description, retention_days=retention_days,
                   versions=old.versions + (new,), dimensions=dimensions), "new_version"


def _declared(spec: MetricSpec) -> dict[str, Any]:
    """What a spec declares, without ``choice`` (which only explains an automatic choice)."""
    doc = spec.describe()
    doc.pop("choice", None)
    return doc
