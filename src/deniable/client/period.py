"""How a metric is collected: its memoization policy and its reporting period, and the
on-device gate that sends at most one report per metric per period.

A metric's **collection policy** is declared by the app (its metrics file, or ``metrics=`` /
``policies=`` in code): the device follows the app's declaration only. The collector's
registry declares it too (the same metrics file) and serves it in its catalogue
(``GET /v1/metrics``) for the analysis, which reads it to give intervals that hold over time
(docs/analysis.md); a served policy that differs from the app's is ignored by the device and
counted (``Reporter.stats().ignored_served``). It has three parts:

- ``memoization``: ``"memoized"`` (the default: a device sends the same perturbed answer for
  the same true value every time; a numeric metric's, for the same grid point of its value),
  ``"instantaneous"`` (memoized, then re-perturbed with fresh
  coins by the instantaneous layer ``instantaneous`` on every report) or ``"fresh"`` (fresh
  coins every report);
- ``instantaneous``: the instantaneous layer's mechanism, only with ``"instantaneous"``
  (boolean metrics only: a device withholds a metric of another kind served with one);
- ``period``: ``"hour"``, ``"day"`` (the default) or ``"week"``: at most one report per device
  per UTC period.

**Which report of a period is sent: the first.** The first call of a period is perturbed and
queued at once, and later calls of the same period are cheap no-ops (counted in
``Reporter.stats().period_skipped``). Keeping the last instead would mean holding the true
value (or its perturbed bit) on the device until the period ends, and a report that never
leaves if the app stops before then: the first is sent at once and costs nothing to keep.
With memoization the bit sent for one value is the same whichever call sends it. So the
estimate is the share of devices whose first report of the period was "yes".

The gate keeps, per metric, only the index of the last period it admitted a report in (in
memory, and in ``periods.json`` in the privacy directory when there is one, so restarts do not
reset it). No identifier and no true value is stored, and nothing of it leaves the device.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse

MEMOIZATIONS = ("memoized", "instantaneous", "fresh")
POLICY_FIELDS = frozenset({"memoization", "instantaneous", "period"})
"""The fields of a declaration table (or catalogue entry) that state its collection policy."""
PERIODS = {"hour": 3600, "day": 86_400, "week": 7 * 86_400}
"""Reporting periods and their length in seconds. Weeks are ISO weeks (Monday 00:00 UTC)."""
_WEEK_OFFSET = 3 * 86_400  # 1970-01-01 was a Thursday; ISO weeks start on Monday
_FILE = "periods.json"
log = logging.getLogger("deniable.client")


@dataclass(frozen=True)
class CollectionPolicy:
    """How a metric is collected on every device.

    Attributes:
        memoization: "memoized", "instantaneous" or "fresh" (see the module docstring).
        instantaneous: the instantaneous layer, with "instantaneous" only.
        period: "hour", "day" or "week": at most one report per device per UTC period.

    Raises:
        InvalidParameterError: an unknown memoization or period, or a layer given (or
            missing) against the memoization.
    """

    memoization: str = "memoized"
    instantaneous: RandomizedResponse | None = None
    period: str = "day"

    def __post_init__(self) -> None:
        if self.memoization not in MEMOIZATIONS:
            raise InvalidParameterError(f"memoization: must be one of {MEMOIZATIONS}. "
                                        f"Got {self.memoization!r} instead.")
        if self.period not in PERIODS:
            raise InvalidParameterError(f"period: must be one of {tuple(PERIODS)}. "
                                        f"Got {self.period!r} instead.")
        if (self.memoization == "instantaneous") != (self.instantaneous is not None):
            raise InvalidParameterError(
                "instantaneous: give a layer's mechanism id exactly when memoization is "
                f"'instantaneous'. Got memoization {self.memoization!r} and layer "
                f"{self.instantaneous!r} instead.")
        if self.instantaneous is not None and not isinstance(self.instantaneous,
                                                             RandomizedResponse):
            raise InvalidParameterError("instantaneous: must be a RandomizedResponse. "
                                        f"Got {type(self.instantaneous).__name__} instead.")

    @property
    def period_seconds(self) -> int:
        return PERIODS[self.period]

    def period_index(self, unix_time: float) -> int:
        """The number of the UTC period holding ``unix_time`` (weeks start on Monday)."""
        offset = _WEEK_OFFSET if self.period == "week" else 0
        return int((unix_time + offset) // self.period_seconds)

    def describe(self) -> dict[str, Any]:
        """The policy's fields in the catalogue (``GET /v1/metrics``)."""
        return {"memoization": self.memoization,
                "instantaneous": None if self.instantaneous is None else self.instantaneous.id,
                "period": self.period}

    def summary(self) -> str:
        """In words, e.g. "memoized, at most one report per device per day"."""
        how = (f"memoized + instantaneous {self.instantaneous.id}" if self.instantaneous
               else self.memoization + (" coins" if self.memoization == "fresh" else ""))
        return f"{how}, at most one report per device per {self.period}"


DEFAULT_POLICY = CollectionPolicy()
"""Memoized, at most one report per device per day: the default of every metric."""


def parse_policy(doc: Mapping[str, Any]) -> CollectionPolicy:
    """The policy of one catalogue or registry entry; absent fields take their defaults.

    Raises:
        InvalidParameterError: naming the offending field.
    """
    memoization = doc.get("memoization", DEFAULT_POLICY.memoization)
    layer = doc.get("instantaneous")
    period = doc.get("period", DEFAULT_POLICY.period)
    if not isinstance(memoization, str):
        raise InvalidParameterError(f"memoization: must be one of {MEMOIZATIONS}")
    if not isinstance(period, str):
        raise InvalidParameterError(f"period: must be one of {tuple(PERIODS)}")
    if layer is not None:
        if not isinstance(layer, str):
            raise InvalidParameterError("instantaneous: must be a mechanism id such as "
                                        "'rr:3/4:1/2'")
        try:
            layer = RandomizedResponse.from_id(layer)
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"instantaneous: {exc}") from exc
    return CollectionPolicy(memoization, layer, period)


class PeriodGate:
    """Admits the first report of each metric in each period; counts the rest.

    Args:
        state_dir: the privacy directory, to remember across restarts which period each
            metric last reported in; None keeps that in memory only.
        clock: Unix time in seconds (the device's clock).

    Thread-safe; several processes sharing ``state_dir`` agree through a lock file.
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._path = None if state_dir is None else Path(state_dir) / _FILE
        self._clock = clock
        self._last: dict[str, int] = {}
        # (metric, period name) -> [start, end) in Unix seconds of the period already
        # reported: the fast path of a repeated call is one dict lookup and two comparisons.
        self._closed: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._skips = itertools.count()  # next() is atomic under the GIL
        self._reads = 0

    def erase(self) -> None:
        """Forget every period reported, in memory and on disk (its state file, lock file and
        temporary file are deleted); from then on it keeps periods in memory only."""
        with self._lock:
            path, self._path = self._path, None
            self._last.clear()
            self._closed.clear()
        if path is not None:
            for leftover in (path, path.with_suffix(".tmp"), path.with_suffix(".lock")):
                leftover.unlink(missing_ok=True)

    @property
    def skipped(self) -> int:
        """Calls turned into no-ops because their period was already reported."""
        with self._lock:  # each read takes one number from the counter too: subtract them
            value = next(self._skips) - self._reads
            self._reads += 1
        return value

    def admit(self, metric: str, policy: CollectionPolicy) -> bool:
        """True for the first call of ``metric`` in the current period, else False (counted
        in ``skipped``)."""
        now = self._clock()
        closed = self._closed.get((metric, policy.period))
        if closed is not None and closed[0] <= now < closed[1]:
            next(self._skips)  # atomic under the GIL: no lock on the fast path
            return False
        period = policy.period_index(now)
        key = f"{metric}/{policy.period}"
        with self._lock:
            if self._last.get(key) == period:
                self._close(metric, policy, period)
                next(self._skips)
                return False
            if self._path is not None:
                try:
                    claimed = self._claim_on_disk(key, period)
                except OSError as exc:  # never drop a report over the state file
                    log.warning("deniable: period state unwritable (%s); memory only", exc)
                    self._path = None
                    claimed = True
                if not claimed:
                    self._last[key] = period
                    self._close(metric, policy, period)
                    next(self._skips)
                    return False
            self._last[key] = period
            self._close(metric, policy, period)
            return True

    def _close(self, metric: str, policy: CollectionPolicy, period: int) -> None:
        offset = _WEEK_OFFSET if policy.period == "week" else 0
        start = period * policy.period_seconds - offset
        self._closed[(metric, policy.period)] = (start, start + policy.period_seconds)

    def release(self, metric: str, policy: CollectionPolicy) -> None:
        """Undo the last ``admit`` of ``metric`` (its report was refused, e.g. by a budget):
        the period stays open for a later call."""
        key = f"{metric}/{policy.period}"
        with self._lock:
            self._last.pop(key, None)
            self._closed.pop((metric, policy.period), None)
            if self._path is not None:
                try:
                    self._claim_on_disk(key, None)
                except OSError:
                    pass

    def _claim_on_disk(self, key: str, period: int | None) -> bool:
        """Record ``period`` for ``key`` in the state file unless it is there already."""
        from deniable.client.locking import exclusive

        path = self._path
        assert path is not None
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with exclusive(path.with_suffix(".lock")):
            try:
                seen = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(seen, dict):
                    seen = {}
            except (OSError, ValueError):
                seen = {}
            if period is None:
                seen.pop(key, None)
            elif seen.get(key) == period:
                return False
            else:
                seen[key] = period
            tmp = path.with_suffix(".tmp")
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(out, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(seen, sort_keys=True))
            os.replace(tmp, path)
            return True


def follow_policies(catalogue: Collection[str],
                    policies: Mapping[str, CollectionPolicy], fresh: Any,
                    irr: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The app's ``fresh`` and ``irr`` with the memoization of its declared policies filled in.

    A metric the app names in ``fresh`` or ``irr`` keeps that choice; any other metric named
    in ``catalogue`` (metric names, or a mapping keyed by them) follows its declared policy:
    "fresh" joins ``fresh``, "instantaneous" gets its layer in ``irr``. A ``fresh`` that is a
    string is passed on as is, to be refused.
    """
    if isinstance(fresh, str):
        return fresh, dict(irr)
    named = set(fresh) | set(irr)
    fresh_out, irr_out = set(fresh), dict(irr)
    for metric in catalogue:
        policy = policies.get(metric)
        if policy is None or metric in named:
            continue
        if policy.memoization == "fresh":
            fresh_out.add(metric)
        elif policy.instantaneous is not None:
            irr_out[metric] = policy.instantaneous
    return fresh_out, irr_out
