"""The on-device privacy budget ledger: epsilon spent per metric per period, and refusals.

Accounting (sequential composition): within a period the epsilons of a metric's reports add
up, and a report that would take the sum past the metric's ``Budget`` is refused with
``BudgetExceededError`` before anything is perturbed. A charge may carry a *tag* (an opaque
name for a memoized (metric, mechanism, value), see deniable.client.memo): a tag is paid for
once, in the period it first appears, and every later charge with that tag is free, in any
period, because it reveals nothing new.

Totals are kept exactly, as rationals of the float epsilons charged, and compared with the
budget allowing a relative 1e-12 (2**-40) for the rounding of the budget itself, so a budget
of ``k * mechanism.epsilon`` (or ``math.log(3**k)``) admits exactly k reports of epsilon
``mechanism.epsilon``.

The cap over versions (issue 19): a memoized metric's answers are keyed by its mechanism,
so each new version of a metric draws, and pays for, new answers. The charges of new memoized
answers of one metric *name* are summed over every version ever reported, and a new answer
that would take the sum past ``max_metric_epsilon`` (by default ``DEFAULT_MAX_METRIC_EPSILON``,
ln 81 = 2 ln 9) is refused with ``MetricCapError``, for good: the cap never renews. Answers
already paid for stay free (the guard then sends a paid answer in place of the refused one,
deniable.client.longitudinal). A warning says so once per metric and process, and the
refusals are counted (``capped``). Fresh charges are not summed here: their per-period budget, also
per metric name, already spans versions.

Periods are fixed windows aligned to the Unix epoch (``floor(now / period) * period``: UTC days
for the default period of 86,400 s). A clock that goes back never reopens a period already
spent. Two windows meet at a boundary, so any stretch of one period length can see up to twice
the budget.

Persistence: with a ``StateDir``, every charge that could be refused (the metric has a budget)
and every newly paid tag is written to disk *before* ``charge`` returns, so a crash can lose
no spend. Charges of unbudgeted metrics and the refusal counters are kept in memory and written
with the next write, ``flush()`` or ``close()``. Each write re-reads the file under an
exclusive lock if another process changed it, so processes sharing a state dir never
double-spend. Thread-safe; fork-safe (a child gets a fresh lock).
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from deniable.client.errors import (
    BudgetExceededError,
    InvalidParameterError,
    MetricCapError,
    PrivacyStateError,
)
from deniable.client.mechanism import ROUNDING_SLACK
from deniable.client.state import StateDir, Stamp

DAY = 86_400.0
"""Seconds in the default budget period."""

log = logging.getLogger("deniable.client")

DEFAULT_MAX_METRIC_EPSILON = math.log(81)
"""The default cap, in nats, on one metric name's memoized charges summed over every version:
ln 81 = 2 ln 9 ≈ 4.39, twice the default per-report ceiling ``max_epsilon`` of ln 9, so both
values of a metric at that ceiling fit; for the default mechanism (ln 3) it admits four
answers, e.g. both values under two versions. RAPPOR's usual long-run epsilon is the same
4 ln 3. Any guess of a value held constant, from everything the device sent, is then right
with probability at most 81/82 (uniform prior); see docs/privacy.md."""


_VERSION = 1


@dataclass(frozen=True)
class Budget:
    """At most ``epsilon`` nats of privacy loss per ``period`` seconds, for one metric.

    Raises:
        InvalidParameterError: epsilon is not a finite number >= 0, or period not > 0.
    """

    epsilon: float
    period: float = DAY

    def __post_init__(self) -> None:
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)) \
                or not math.isfinite(self.epsilon) or self.epsilon < 0:
            raise InvalidParameterError(
                f"a budget's epsilon must be a finite number >= 0 (nats per period). "
                f"Got {self.epsilon!r} instead.")
        if isinstance(self.period, bool) or not isinstance(self.period, (int, float)) \
                or not math.isfinite(self.period) or self.period <= 0:
            raise InvalidParameterError(
                f"a budget's period must be a finite number of seconds above 0. "
                f"Got {self.period!r} instead.")

    @classmethod
    def for_reports(cls, n_reports: int, epsilon_per_report: float,
                    period: float = DAY) -> Budget:
        """The budget admitting exactly ``n_reports`` reports of ``epsilon_per_report`` each."""
        if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
            raise InvalidParameterError(
                f"n_reports must be a non-negative integer. Got {n_reports!r} instead.")
        return cls(n_reports * epsilon_per_report, period)

    def period_start(self, now: float) -> float:
        """Start (Unix seconds) of the period containing ``now``."""
        return math.floor(now / self.period) * self.period


@dataclass(frozen=True)
class MetricSpend:
    """What one metric has spent. Epsilons in nats; times in Unix seconds.

    ``spent`` is within the current period (from ``period_start``); ``total_charged`` is the
    sum of every charge since this state was created. It is an accounting figure, not an
    epsilon over value sequences: what a change of value reveals is not bounded by it (see
    ``PrivacyLoss``). ``memoized_charged`` is the part paid for new memoized answers, over
    every version: what ``cap`` (``max_metric_epsilon``; inf when off) limits. ``refused``
    counts reports refused by the budget, ``cap_refused`` those refused by the cap;
    ``paid_values`` how many memoized (mechanism, value) pairs have been paid for.
    """

    metric: str
    budget: Budget | None
    period_start: float
    spent: float
    remaining: float | None
    total_charged: float
    memoized_charged: float
    cap: float
    refused: int
    cap_refused: int
    paid_values: int


@dataclass
class _Entry:
    period_start: float | None = None
    spent: Fraction = Fraction(0)
    lifetime: Fraction = Fraction(0)
    refused: int = 0
    paid: set[str] = field(default_factory=set)
    memoized: Fraction = Fraction(0)
    capped: int = 0

    def spent_at(self, start: float) -> Fraction:
        # A newer period starts from zero; a current or *later* stored period (the clock
        # went back) keeps what it spent.
        if self.period_start is None or self.period_start < start:
            return Fraction(0)
        return self.spent

    def add(self, start: float, amount: Fraction) -> None:
        if self.period_start is None or self.period_start < start:
            self.period_start, self.spent = start, amount
        else:
            self.spent += amount
        self.lifetime += amount

    def to_json(self) -> dict[str, Any]:
        # "lifetime" keeps its on-disk name (it is total_charged); "memoized" and "capped"
        # were added without a layout change: a ledger without them reads conservatively.
        return {"period_start": self.period_start, "spent": str(self.spent),
                "lifetime": str(self.lifetime), "refused": self.refused,
                "paid": sorted(self.paid), "memoized": str(self.memoized),
                "capped": self.capped}

    @classmethod
    def from_json(cls, name: str, doc: Any) -> _Entry:
        try:
            start = doc["period_start"]
            if start is not None and (isinstance(start, bool)
                                      or not isinstance(start, (int, float))):
                raise TypeError("period_start")
            refused = doc["refused"]
            if isinstance(refused, bool) or not isinstance(refused, int) or refused < 0:
                raise TypeError("refused")
            paid = doc["paid"]
            if not isinstance(paid, list) or not all(isinstance(t, str) for t in paid):
                raise TypeError("paid")
            spent, lifetime = Fraction(doc["spent"]), Fraction(doc["lifetime"])
            # Written before the cap existed: count every charge of a metric with paid
            # answers as memoized (an overestimate, so the cap errs on the private side).
            memoized = Fraction(doc["memoized"]) if "memoized" in doc \
                else (lifetime if paid else Fraction(0))
            capped = doc.get("capped", 0)
            if isinstance(capped, bool) or not isinstance(capped, int) or capped < 0:
                raise TypeError("capped")
            if spent < 0 or lifetime < 0 or memoized < 0:
                raise ValueError("negative spend")
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise PrivacyStateError(
                f"the privacy ledger's entry for metric {name!r} is corrupt ({exc})") from exc
        return cls(None if start is None else float(start), spent, lifetime, refused, set(paid),
                   memoized, capped)


class PrivacyLedger:
    """Per-metric privacy spend against per-period budgets, persisted in a ``StateDir``.

    Args:
        state: where to persist; None keeps everything in memory (lost at exit).
        budgets: metric -> Budget. Metrics without one are accounted but never refused.
        clock: Unix time in seconds.
        max_metric_epsilon: the cap, in nats, on each metric's memoized charges summed over
            every version; ``math.inf`` turns it off.

    Raises:
        PrivacyStateError: the ledger file is corrupt.
    """

    _instances: weakref.WeakSet[PrivacyLedger] = weakref.WeakSet()

    def __init__(self, state: StateDir | None, budgets: Mapping[str, Budget] | None = None,
                 clock: Callable[[], float] | None = None, *,
                 max_metric_epsilon: float = DEFAULT_MAX_METRIC_EPSILON) -> None:
        self._cap = check_max_metric_epsilon(max_metric_epsilon)
        self._warned_capped: set[str] = set()
        budgets = dict(budgets or {})
        for name, budget in budgets.items():
            if not isinstance(budget, Budget):
                raise InvalidParameterError(
                    f"budgets[{name!r}] must be a Budget. Got {type(budget).__name__} instead.")
        self._state = state
        self._budgets = budgets
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._stamp: Stamp | None = None
        self._pending_spend: dict[tuple[str, float], Fraction] = {}
        self._pending_refused: dict[str, int] = {}
        self._pending_capped: dict[str, int] = {}
        self._tally: dict[tuple[str, float, float], int] = {}
        if state is not None:
            with state.locked():
                self._reload()
        PrivacyLedger._instances.add(self)

    # -- charging ------------------------------------------------------------------------

    def is_paid(self, metric: str, tag: str) -> bool:
        """Whether ``tag`` has been paid for under ``metric`` (by this or another process)."""
        with self._lock:
            entry = self._entries.get(metric)
            return entry is not None and tag in entry.paid

    def charge(self, metric: str, epsilon: float, tag: str | None = None) -> float:
        """Spend ``epsilon`` nats for one report of ``metric``, or refuse it.

        Args:
            metric: the metric reported.
            epsilon: the report's privacy cost, >= 0.
            tag: the memoized (mechanism, value) the report repeats, if any; a tag already
                paid for makes the report free.

        Returns:
            The epsilon actually charged: 0 for a tag already paid for.

        Raises:
            MetricCapError: a tag not yet paid for would take the metric's memoized charges,
                over every version, past the cap; nothing is spent, the refusal is counted.
            BudgetExceededError: the charge would take the metric past its budget for the
                current period; nothing is spent and the refusal is counted.
        """
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
            raise InvalidParameterError(
                f"epsilon must be a finite number >= 0. Got {epsilon!r} instead.")
        budget = self._budgets.get(metric)
        if budget is None and tag is None:
            # The hot path of unbudgeted fresh reports: tally now, add up exactly later.
            key = (metric, math.floor(self._clock() / DAY) * DAY, float(epsilon))
            with self._lock:
                self._tally[key] = self._tally.get(key, 0) + 1
            return float(epsilon)
        cost = Fraction(epsilon)
        with self._lock:
            entry = self._entries.get(metric)
            if tag is not None and entry is not None and tag in entry.paid:
                return 0.0
            self._fold()
            start = (budget or Budget(0.0)).period_start(self._clock())
            if self._state is None:
                return self._charge_locked(metric, budget, start, cost, tag)
            with self._state.locked():
                if self._state.stamp() != self._stamp:
                    self._reload()
                paid_before = tag is not None and tag in self._entries.get(metric, _Entry()).paid
                charged = self._charge_locked(metric, budget, start, cost, tag)
                if not paid_before:
                    self._write()
                return charged

    def _charge_locked(self, metric: str, budget: Budget | None, start: float, cost: Fraction,
                       tag: str | None) -> float:
        entry = self._entries.setdefault(metric, _Entry())
        if tag is not None and tag in entry.paid:
            return 0.0
        if tag is not None and entry.memoized + cost > self._cap_bound:
            entry.capped += 1
            if self._state is not None:
                self._pending_capped[metric] = self._pending_capped.get(metric, 0) + 1
            message = (
                f"metric {metric!r} takes no new answer on this device: one would spend "
                f"{float(cost):.6g} nats, and {float(entry.memoized):.6g} of its cap of "
                f"{self._cap:.6g} over every version (max_metric_epsilon) are spent. A value "
                f"whose answer is paid for is still sent; any other is sent as a paid answer "
                f"(the nearest paid number or bucket, else the lowest paid category or "
                f"boolean value), or not at all while none is paid. If its mechanism must "
                f"change, report under a new metric name (docs/privacy.md).")
            if metric not in self._warned_capped:
                self._warned_capped.add(metric)
                log.warning("deniable: %s", message)
            raise MetricCapError(message, metric=metric, cost=float(cost),
                                 spent=float(entry.memoized), budget=self._cap,
                                 retry_at=None)
        if budget is not None:
            spent = entry.spent_at(start)
            if spent + cost > Fraction(budget.epsilon) * (1 + ROUNDING_SLACK):
                entry.refused += 1
                if self._state is not None:
                    self._pending_refused[metric] = self._pending_refused.get(metric, 0) + 1
                retry_at = start + budget.period
                raise BudgetExceededError(
                    f"report for metric {metric!r} refused: it would spend {float(cost):.6g} "
                    f"nats of epsilon, but {float(spent):.6g} of the budget of "
                    f"{budget.epsilon:.6g} per {budget.period:g} s are already spent. The next "
                    f"period starts at {_iso(retry_at)}.",
                    metric=metric, cost=float(cost), spent=float(spent),
                    budget=budget.epsilon, retry_at=retry_at)
        entry.add(start, cost)
        if tag is not None:
            entry.paid.add(tag)
            entry.memoized += cost
        return float(cost)

    @property
    def _cap_bound(self) -> Fraction | float:
        return math.inf if self._cap == math.inf \
            else Fraction(self._cap) * (1 + ROUNDING_SLACK)

    def _apply(self, metric: str, start: float, cost: Fraction) -> None:
        self._entries.setdefault(metric, _Entry()).add(start, cost)

    def _fold(self) -> None:
        # Caller holds self._lock. Move tallied unbudgeted charges into the entries, exactly.
        for (metric, start, epsilon), count in self._tally.items():
            cost = count * Fraction(epsilon)
            self._apply(metric, start, cost)
            if self._state is not None:
                key = (metric, start)
                self._pending_spend[key] = self._pending_spend.get(key, Fraction(0)) + cost
        self._tally.clear()

    # -- reading -------------------------------------------------------------------------

    @property
    def refused(self) -> int:
        """Reports refused by a budget, over every metric, since this state was created."""
        with self._lock:
            self._fold()
            return sum(entry.refused for entry in self._entries.values())

    @property
    def cap_refused(self) -> int:
        """Reports refused by the cap over versions, over every metric, since this state was
        created (by every process sharing it, as of this ledger's last read)."""
        with self._lock:
            return sum(entry.capped for entry in self._entries.values())

    @property
    def max_metric_epsilon(self) -> float:
        """The cap on each metric's memoized charges over every version (inf: off)."""
        return self._cap

    def stats(self) -> dict[str, MetricSpend]:
        """What each metric has spent, including charges not yet written to disk."""
        now = self._clock()
        with self._lock:
            self._fold()
            out = {}
            for name in sorted(set(self._entries) | set(self._budgets)):
                entry = self._entries.get(name, _Entry())
                budget = self._budgets.get(name)
                start = (budget or Budget(0.0)).period_start(now)
                spent = entry.spent_at(start)
                out[name] = MetricSpend(
                    metric=name, budget=budget, period_start=start, spent=float(spent),
                    remaining=None if budget is None
                    else max(0.0, float(Fraction(budget.epsilon) - spent)),
                    total_charged=float(entry.lifetime),
                    memoized_charged=float(entry.memoized), cap=self._cap,
                    refused=entry.refused, cap_refused=entry.capped,
                    paid_values=len(entry.paid))
            return out

    # -- persistence ---------------------------------------------------------------------

    def flush(self) -> None:
        """Write in-memory charges and refusal counts to disk (if persisted)."""
        with self._lock:
            self._fold()
            if self._state is None or not (self._pending_spend or self._pending_refused
                                           or self._pending_capped):
                return
            with self._state.locked():
                if self._state.stamp() != self._stamp:
                    self._reload()
                self._write()

    def _reload(self) -> None:
        # Caller holds the directory lock. Disk is the truth; re-apply what is only in memory.
        assert self._state is not None
        doc = self._state.read_json()
        self._stamp = self._state.stamp()
        entries: dict[str, _Entry] = {}
        if doc is not None:
            if doc.get("version") != _VERSION or not isinstance(doc.get("metrics"), dict):
                raise PrivacyStateError(
                    f"the privacy ledger in {self._state.path} has an unknown layout "
                    f"(version {doc.get('version')!r}, expected {_VERSION})")
            entries = {name: _Entry.from_json(name, e) for name, e in doc["metrics"].items()}
        self._entries = entries
        for (metric, start), cost in self._pending_spend.items():
            self._apply(metric, start, cost)
        for metric, count in self._pending_refused.items():
            self._entries.setdefault(metric, _Entry()).refused += count
        for metric, count in self._pending_capped.items():
            self._entries.setdefault(metric, _Entry()).capped += count

    def _write(self) -> None:
        # Caller holds both locks.
        assert self._state is not None
        self._state.write_json({
            "version": _VERSION,
            "metrics": {name: entry.to_json() for name, entry in sorted(self._entries.items())},
        })
        self._stamp = self._state.stamp()
        self._pending_spend.clear()
        self._pending_refused.clear()
        self._pending_capped.clear()

    def _after_fork(self) -> None:
        self._lock = threading.Lock()


def check_max_metric_epsilon(value: object) -> float:
    """``value`` as a cap in nats: a number > 0 (``math.inf`` turns the cap off)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or math.isnan(value) or value <= 0:
        raise InvalidParameterError(
            f"max_metric_epsilon must be a number of nats > 0 (math.inf turns the cap off). "
            f"Got {value!r} instead.")
    return float(value)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def _reset_locks_after_fork() -> None:
    for ledger in list(PrivacyLedger._instances):
        ledger._after_fork()


os.register_at_fork(after_in_child=_reset_locks_after_fork)
