"""History across versions, exactly: each version's part debiased with its own mechanism, a
bucket with both versions pooled by reports, the change marked, another kind left out."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from deniable.analysis.history import MIXED, history
from deniable.analysis.sources import MetricCounts, MetricInfo, SourceError
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse, z_score

UTC = timezone.utc
START = datetime(2026, 11, 16, tzinfo=UTC)
END = START + timedelta(days=4)
V1, V2 = RandomizedResponse.from_id("rr:1/2:1/2"), RandomizedResponse.from_id("rr:3/4:1/2")


class Versions:
    """Version 1 (rr:1/2:1/2) on days 0-2 at share 0.3, version 2 (rr:3/4:1/2) on days 2-3
    at share 0.5: day 2 holds both. Exact expected counts, no noise. ``numeric_v1``: version
    1 is numeric instead (another scale: not joined)."""

    def __init__(self, numeric_v1: bool = False) -> None:
        self.numeric_v1 = numeric_v1

    def counts(self, metric: str, start: datetime | None = None, end: datetime | None = None,
               *, version: int | None = None) -> MetricCounts:
        number = version or 2
        if number not in (1, 2):
            raise SourceError("no such version")
        if number == 1 and self.numeric_v1:
            spec = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10)
            info = MetricInfo(metric, "", spec.mechanism, version=1, spec=spec)
            return MetricCounts(info, [START + timedelta(hours=5)],
                                values=np.array([[1000, 500]]))
        rr, share, days = (V1, 0.3, (0, 1, 2)) if number == 1 else (V2, 0.5, (2, 3))
        info = MetricInfo(metric, "", rr, version=number)
        rate = float(rr.p_yes_given_no) + share * float(rr.p_yes_given_yes - rr.p_yes_given_no)
        n = 4000 if number == 1 else 2000
        return MetricCounts(info, [START + timedelta(days=d, hours=5) for d in days],
                            np.array([n] * len(days)), np.array([round(n * rate)] * len(days)))


def test_the_parts_join_with_the_mixed_day_pooled_by_reports() -> None:
    h = history(Versions(), "m", START, END, "day")
    assert h is not None and h.versions == [1, 2]
    assert h.version.tolist() == [1, 1, MIXED, 2]
    assert h.changes == [(2, 1, 2)]
    assert h.estimate[:2] == pytest.approx([0.3, 0.3]) and h.estimate[3] == pytest.approx(0.5)
    one, two = h.parts
    # Day 2: 4,000 reports of version 1 at 0.3 and 2,000 of version 2 at 0.5.
    assert h.n[2] == 6000 and h.estimate[2] == pytest.approx((4000 * 0.3 + 2000 * 0.5) / 6000)
    se = math.hypot(4000 / 6000 * one.estimates.stderr[2], 2000 / 6000 * two.estimates.stderr[2])
    assert h.ci_high[2] - h.estimate[2] == pytest.approx(z_score(0.95) * se)
    # Each part is its own version's series, debiased with its own mechanism.
    assert one.metric.mechanism == V1 and two.metric.mechanism == V2


def test_another_scale_is_left_out_and_one_version_is_no_history() -> None:
    assert history(Versions(numeric_v1=True), "m", START, END) is None
    only = Versions()
    assert history(only, "m", START + timedelta(days=3), END) is None  # version 2 alone
