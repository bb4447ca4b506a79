"""Rollups of hour buckets into hour, day and week periods (UTC; weeks start on Monday, as
ISO 8601 weeks), for the collector's counts endpoint and dashboard.

The periods themselves (flooring, grids, alignment, on integer hour indexes) are defined once,
in ``deniable.core.periods``, which the analysis uses too; their names are re-exported
here for the collector's callers.

Counters are plain sums, so a day's ``n`` and ``ones`` are the sums of its hours': the
estimator works on rolled-up counts exactly as on hourly ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from deniable.core.periods import (GRANULARITIES, SPAN, SPAN_HOURS, align,  # noqa: F401
                                        check_granularity, grid_hours, hour_index, hour_start,
                                        period_hour, period_start)

__all__ = ["GRANULARITIES", "SPAN", "SPAN_HOURS", "HourCount", "align", "check_granularity",
           "grid_hours", "period_hour", "period_start", "rollup"]


@dataclass(frozen=True)
class HourCount:
    """Perturbed counts for one metric in one UTC hour (or rolled-up period) bucket."""

    start: datetime
    n: int
    ones: int
    counts: tuple[int, ...] = ()
    """Every counter slot (n, then ones or one count per category); () means (n, ones)."""

    def __post_init__(self) -> None:
        if not self.counts:
            object.__setattr__(self, "counts", (self.n, self.ones))


def rollup(hours: list[HourCount], granularity: str) -> list[HourCount]:
    """Sum hour buckets per period, every counter slot; only non-empty periods, oldest
    first."""
    check_granularity(granularity)
    sums: dict[int, list[int]] = {}
    for h in hours:
        total = sums.setdefault(period_hour(hour_index(h.start), granularity),
                                [0] * len(h.counts))
        for j, v in enumerate(h.counts):
            total[j] += v
    return [HourCount(hour_start(first), total[0], total[1], tuple(total))
            for first, total in sorted(sums.items())]
