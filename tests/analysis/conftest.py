"""An in-memory counts source for analysis tests: hour buckets the test writes by hand."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from deniable.analysis.sources import MetricCounts, MetricInfo, SourceError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy


class MemorySource:
    """metrics() and counts() over hour buckets given as {metric: [(start, n, ones), ...]}."""

    def __init__(self, mechanisms: dict[str, str],
                 hours: dict[str, list[tuple[datetime, int, int]]],
                 policies: dict[str, CollectionPolicy] | None = None) -> None:
        self.info = {name: MetricInfo(name, f"{name} description", RandomizedResponse.from_id(m),
                                      (policies or {}).get(name, DEFAULT_POLICY), 1)
                     for name, m in mechanisms.items()}
        self.hours = hours

    def metrics(self) -> dict[str, MetricInfo]:
        return self.info

    def counts(self, metric: str, start: datetime | None = None,
               end: datetime | None = None, *, version: int | None = None) -> MetricCounts:
        if version not in (None, 1):
            raise SourceError(f"{metric} has no version {version}")
        rows = sorted(r for r in self.hours.get(metric, [])
                      if (start is None or r[0] >= start) and (end is None or r[0] < end))
        return MetricCounts(self.info[metric], [r[0] for r in rows],
                            np.array([r[1] for r in rows], np.int64),
                            np.array([r[2] for r in rows], np.int64))


@pytest.fixture()
def memory_source() -> type[MemorySource]:
    return MemorySource
