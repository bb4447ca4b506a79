"""Breakdowns by public dimension: one estimate per dimension value, small cells suppressed.

    b = breakdown(source, "dark_mode", "app_version", min_reports=100)
    for cell in b.cells:
        print(cell.value, cell.n, cell.reason if cell.suppressed else cell.summary.estimate)

Each row (a *cell*) is one value of the dimension ``by`` (``app_version=2.4``), or of a
declared combination (``by="app_version,platform"``): the reports that stated it, pooled over
the range and debiased as the metric's kind is (``estimate.summarize``): a boolean metric's
share of yes, a categorical or histogram metric's share per category (per-category and
simultaneous intervals), a numeric metric's mean in its units.

**Small cells are suppressed.** A cell with fewer than ``min_reports`` reports (default
``DEFAULT_MIN_REPORTS``) shows its ``n`` and no estimate at all (``summary`` is None, never
computed): such an estimate is mostly noise, and a tiny cell can single people out. Every
output says which cells it suppressed and why (``Cell.reason``, ``Breakdown.note``).

**Not stated.** A report that left the dimension out counts in the metric's total only; the
breakdown shows their number, ``total n - sum of the cells' n``, without an estimate (a
combination counts a report only when it stated every dimension of it).

**Comparisons** (``Breakdown.comparisons``): every pair of shown cells, ``b - a`` with the
method of ``analysis.compare`` (for a categorical or histogram metric, each category's share),
Holm-corrected across the whole family: all pairs, and all categories. Suppressed cells are
never compared. Dimensions are not protected by local DP (they travel in clear); the metric's
value still is, in every cell.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import combinations
from typing import Any, Protocol

import numpy as np

from deniable.client.dimensions import Dimensions, series_values
from deniable.client.mechanism import Estimate
from deniable.analysis.compare import Comparison, _category_estimate, correct, difference
from deniable.analysis.estimate import MetricSummary, summarize
from deniable.analysis.sources import MetricCounts, MetricInfo, SourceError, default_range
from deniable.core.window import window_devices

DEFAULT_MIN_REPORTS = 100
"""Cells with fewer reports than this show no estimate (``--min-reports`` changes it)."""
NOT_STATED = "not stated"


def suppression_reason(n: int, min_reports: int, devices: int | None = None,
                       period: str = "day") -> str:
    """Why a cell shows no estimate, in words: fewer than ``min_reports`` devices (the most
    reports in one ``period``, ``collector.window.window_devices``) behind its ``n``
    reports."""
    if devices is None:
        return (f"fewer than {min_reports:,} reports ({n:,}): such an estimate is mostly "
                "noise and a tiny cell can single people out")
    return (f"fewer than {min_reports:,} devices ({devices:,} in its busiest {period}, "
            f"{n:,} reports): such an estimate is mostly noise and a tiny cell can single "
            "people out")


class BreakdownSource(Protocol):
    """A counts source that also reads dimension series (``RedisSource``, ``HTTPSource``)."""

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts: ...

    def dimensions(self, metric: str) -> Dimensions: ...

    def breakdown_counts(self, metric: str, by: str, start: datetime | None = None,
                         end: datetime | None = None, *, version: int | None = None
                         ) -> dict[str, MetricCounts]: ...


@dataclass(frozen=True)
class Cell:
    """One value of the breakdown's dimension (or combination).

    Attributes:
        label: the series label, ``platform=ios`` or ``app_version=2.4,platform=ios``.
        values: the dimension values, ``{"platform": "ios"}``.
        n: reports that stated this value.
        summary: the pooled estimate of the metric's kind; None when suppressed.
        suppressed: fewer than ``min_reports`` devices (``devices``): no estimate shown.
        reason: why it was suppressed, in words ("" when shown).
    """

    label: str
    values: dict[str, str]
    n: int
    summary: MetricSummary | None
    suppressed: bool
    reason: str = ""
    devices: int = 0
    """The devices its reports certainly come from: the most reports in one period."""

    @property
    def value(self) -> str:
        """The value(s) as shown in a table: ``ios``, or ``2.4, ios`` for a combination."""
        return ", ".join(self.values.values())


@dataclass(frozen=True)
class Breakdown:
    """A metric broken down by one dimension (or declared combination) over a range.

    Attributes:
        metric, kind: the metric and its kind; by: the dimension (``a,b`` for a combination).
        total: the whole metric's pooled estimate (every report, stated or not).
        cells: one per value, in the declaration's order (``other`` last, if declared).
        not_stated: reports that did not state the dimension: total n - the cells' n.
        comparisons: every pair of shown cells (per category for categorical metrics),
            Holm-corrected over the family.
        min_reports: the suppression threshold; confidence: the intervals' level.
    """

    metric: str
    kind: str
    by: str
    start: datetime
    end: datetime
    min_reports: int
    confidence: float
    total: MetricSummary
    cells: tuple[Cell, ...]
    not_stated: int
    comparisons: tuple[Comparison, ...] = ()
    info: MetricInfo | None = field(default=None, compare=False, repr=False)

    @property
    def suppressed(self) -> list[Cell]:
        """The cells that show no estimate."""
        return [c for c in self.cells if c.suppressed]

    @property
    def note(self) -> str:
        """What was suppressed and why, in words ("" when nothing was)."""
        hidden = self.suppressed
        if not hidden:
            return ""
        which = ", ".join(f"{c.value} (n = {c.n:,}, {c.devices:,} "
                          f"{'device' if c.devices == 1 else 'devices'})" for c in hidden)
        return (f"{self.metric} by {self.by}: {len(hidden)} cell"
                f"{'s' if len(hidden) > 1 else ''} suppressed, {which}: each has fewer than "
                f"{self.min_reports:,} devices (the most reports in one period: each device "
                "sends at most one per period); such an estimate is mostly noise and a tiny "
                "cell can single people out. Suppressed cells are not compared.")

    @property
    def dimensions_note(self) -> str:
        """The plain statement every output carries about what the dimensions are."""
        names = self.by.replace(",", ", ")
        return (f"{names} {'are public dimensions' if ',' in self.by else 'is a public dimension'}"
                ": sent and counted in clear, NOT protected by local differential privacy; the "
                "metric's value is, in every cell.")

    @property
    def not_stated_reason(self) -> str:
        """What the "not stated" row counts, in words."""
        if "," in self.by:
            return (f"reports that did not state every one of {self.by.replace(',', ', ')}: "
                    "counted in the total only")
        return f"reports that did not state {self.by}: counted in the total only"


class BreakdownError(SourceError):
    """A breakdown that cannot be made: ``by`` not declared, a bad threshold."""


def breakdown(source: BreakdownSource, metric: str, by: str, start: datetime | None = None,
              end: datetime | None = None, *, min_reports: int = DEFAULT_MIN_REPORTS,
              confidence: float = 0.95, alpha: float = 0.05,
              correction: str = "holm", version: int | None = None) -> Breakdown:
    """Break ``metric`` down by ``by`` over [start, end) (default: the last 7 days), in its
    current version or in ``version`` (an older one, debiased with its own mechanism; the
    dimensions are the metric's, declared once for every version).

    Raises:
        BreakdownError: ``min_reports`` below 1, or ``by`` not a declared dimension or
            combination of the metric (the message names what it declares).
        SourceError: counts that cannot be read.
    """
    if isinstance(min_reports, bool) or not isinstance(min_reports, int) or min_reports < 1:
        raise BreakdownError(f"min_reports must be a whole number >= 1. Got {min_reports!r}.")
    start, end = default_range(start, end)
    by = ",".join(sorted(part.strip() for part in by.split(",")))
    dims = source.dimensions(metric)
    if dims.get(by) is None and tuple(by.split(",")) not in dims.combinations:
        declared = (", ".join(dims.names) + "".join(
            f", {','.join(c)}" for c in dims.combinations)) if dims else ""
        raise BreakdownError(
            f"{metric}: {by!r} is not a dimension or declared combination of this metric"
            + (f" (it declares {declared})" if declared else " (it declares no dimensions)"))
    total_counts = source.counts(metric, start, end, version=version)
    by_series = source.breakdown_counts(metric, by, start, end, version=version)
    total = summarize(total_counts, confidence, start=start, end=end)
    cells = tuple(_cell(label, counts, min_reports, confidence, start, end)
                  for label, counts in by_series.items())
    not_stated = max(total.n - sum(c.n for c in cells), 0)
    shown = [c for c in cells if not c.suppressed and c.n > 0]
    found = compare_cells(shown, metric, alpha=alpha, confidence=confidence)
    return Breakdown(metric=metric, kind=total_counts.metric.kind, by=by, start=start, end=end,
                     min_reports=min_reports, confidence=confidence, total=total, cells=cells,
                     not_stated=not_stated,
                     comparisons=tuple(correct(found, correction, alpha)) if found else (),
                     info=total_counts.metric)


def _cell(label: str, counts: MetricCounts, min_reports: int, confidence: float,
          start: datetime, end: datetime) -> Cell:
    n = int(counts.n.sum())
    values = series_values(label)
    policy = counts.metric.policy
    devices = window_devices(counts.hours, counts.n, policy, xp=np)
    if devices < min_reports:  # devices, not reports: the same cell hidden at any range
        return Cell(label, values, n, None, True,
                    suppression_reason(n, min_reports, devices, policy.period), devices)
    return Cell(label, values, n, summarize(counts, confidence, start=start, end=end), False,
                devices=devices)


def summary_estimate(s: MetricSummary) -> Estimate:
    """A boolean or numeric summary as an ``Estimate`` (what ``compare.difference`` takes)."""
    return Estimate(n=s.n, ones=s.ones, yes_rate=s.yes_rate, value=s.estimate,
                    unclipped=s.unclipped, stderr=s.stderr, ci_low=s.ci_low,
                    ci_high=s.ci_high, confidence=s.confidence, clipped=s.clipped,
                    wide=s.wide, interval_clipped=s.interval_clipped)


def compare_cells(cells: Sequence[Cell], metric: str, *, alpha: float = 0.05,
                  confidence: float = 0.95) -> list[Comparison]:
    """``b - a`` for every pair of shown cells (a before b in the declaration's order), raw
    (uncorrected): one per pair, or one per pair and category of a categorical metric."""
    found = []
    scalar = {c.label: summary_estimate(c.summary) for c in cells
              if c.summary is not None and c.summary.categories is None}
    for a, b in combinations(cells, 2):
        sa, sb = a.summary, b.summary
        if sa is None or sb is None or a.suppressed or b.suppressed:
            continue  # never: suppressed cells have no summary, and are not compared
        if sa.categories is not None and sb.categories is not None:
            for i, category in enumerate(sa.categories.labels):
                found.append(difference(
                    _category_estimate(sa.categories, i), _category_estimate(sb.categories, i),
                    label=f"{metric}: {category}", name_a=a.label, name_b=b.label,
                    alpha=alpha, confidence=confidence, metric=metric, category=category,
                    kind=sa.kind))
        else:
            found.append(difference(scalar[a.label], scalar[b.label], label=metric,
                                    name_a=a.label, name_b=b.label, alpha=alpha,
                                    confidence=confidence, metric=metric, kind=sa.kind))
    return found


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def cell_row(b: Breakdown, cell: Cell) -> dict[str, Any]:
    """One cell as a JSON-ready dict: label, values, n, suppressed, reason, and (shown cells)
    the estimate as ``report.summary_row`` writes it."""
    from deniable.analysis.report import summary_row

    row: dict[str, Any] = {"by": b.by, "label": cell.label, "value": cell.value,
                           "values": cell.values, "n": cell.n, "devices": cell.devices,
                           "suppressed": cell.suppressed,
                           "reason": cell.reason or None}
    if cell.summary is not None:
        estimate = summary_row(cell.summary)
        for key in ("metric", "description", "mechanism", "epsilon", "start", "end",
                    "version", "policy", "kind", "confidence", "n"):
            estimate.pop(key, None)
        row["estimate"] = estimate
    else:
        row["estimate"] = None
    return row
