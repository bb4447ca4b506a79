"""Exact checks of the estimator, rollups, comparisons and corrections against hand-computed
values (the arithmetic is written out in the comments)."""
from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
import pytest

from deniable.analysis import bonferroni, correct, difference, holm, plan, rolling, series
from deniable.analysis.timeseries import floor, rollup
from deniable.client.mechanism import DEFAULT, RandomizedResponse

UTC = timezone.utc


def test_estimate_and_wilson_interval_match_hand_computation() -> None:
    # rr:1/2:1/2, 300 ones of 1000: rate 0.3, estimate 2 * 0.3 - 0.5 = 0.1,
    # se = sqrt(0.3 * 0.7 / 1000) / 0.5 = 0.0289828. Wilson with z = 1.959964:
    # centre = (0.3 + z^2/2000) / (1 + z^2/1000) = 0.3007637, half = 0.0283588,
    # so [0.2724068, 0.3291239] on the rate, and 2x - 0.5 gives [0.0448137, 0.1582477].
    e = DEFAULT.estimate(300, 1000)
    assert e.value == 0.1 and not e.clipped and not e.wide
    assert e.stderr == pytest.approx(0.0289828, abs=1e-7)
    assert e.ci_low == pytest.approx(0.0448137, abs=1e-7)
    assert e.ci_high == pytest.approx(0.1582477, abs=1e-7)


def test_a_bucket_below_q_is_clipped_and_flagged() -> None:
    # 20 ones of 100 under rr:1/2:1/2: 2 * 0.2 - 0.5 = -0.1, clipped to 0.
    e = DEFAULT.estimate(20, 100)
    assert (e.value, e.unclipped, e.clipped) == (0.0, pytest.approx(-0.1), True)


def test_day_and_iso_week_rollups_sum_hours_and_keep_empty_buckets(memory_source) -> None:
    # Sun 2026-11-15 23:00, Mon 16 00:00 and 05:00, Wed 18 10:00 (UTC).
    hours = [(datetime(2026, 11, 15, 23, tzinfo=UTC), 10, 4),
             (datetime(2026, 11, 16, 0, tzinfo=UTC), 20, 5),
             (datetime(2026, 11, 16, 5, tzinfo=UTC), 30, 6),
             (datetime(2026, 11, 18, 10, tzinfo=UTC), 40, 7)]
    src = memory_source({"m": "rr:1/2:1/2"}, {"m": hours})
    counts = src.counts("m")
    start, end = datetime(2026, 11, 15, tzinfo=UTC), datetime(2026, 11, 19, tzinfo=UTC)
    starts, n, ones = rollup(counts, "day", start, end)
    assert [s.day for s in starts] == [15, 16, 17, 18]
    assert n.tolist() == [10, 50, 0, 40] and ones.tolist() == [4, 11, 0, 7]
    starts, n, ones = rollup(counts, "week", start, end)
    assert starts == [datetime(2026, 11, 9, tzinfo=UTC), datetime(2026, 11, 16, tzinfo=UTC)]
    assert n.tolist() == [10, 90] and ones.tolist() == [4, 18]
    assert floor(datetime(2026, 11, 22, 23, 59), "week") == datetime(2026, 11, 16, tzinfo=UTC)
    ts = series(counts, "day", start, end)
    assert math.isnan(ts.estimates.estimate[2]) and ts.estimates.n[2] == 0
    # 2 * 11/50 - 0.5 = -0.06: clipped to 0 and flagged.
    assert ts.estimates.unclipped[1] == pytest.approx(-0.06)
    assert ts.estimates.estimate[1] == 0.0 and ts.estimates.clipped[1]


def test_rolling_pools_the_trailing_window(memory_source) -> None:
    hours = [(datetime(2026, 11, d, 12, tzinfo=UTC), 100 * d, 50 * d) for d in range(1, 6)]
    src = memory_source({"m": "rr:1/2:1/2"}, {"m": hours})
    ts = rolling(series(src.counts("m"), "day"), 3)
    assert ts.estimates.n.tolist() == [100, 300, 600, 900, 1200]
    assert ts.estimates.ones.tolist() == [50, 150, 300, 450, 600]
    assert ts.window == 3


def test_difference_matches_hand_computation() -> None:
    # a: 300/1000 -> 0.1, se_a = 0.0289828; b: 350/1000 -> 0.2, se_b = 2 sqrt(0.35*0.65/1000)
    # = 0.0301662. se = sqrt(se_a^2 + se_b^2) = 0.0418330; z = 0.1 / se = 2.390457;
    # p = 2 (1 - Phi(2.390457)) = 0.016827; CI = 0.1 -/+ 1.959964 * se = [0.018009, 0.181991].
    c = difference(DEFAULT.estimate(300, 1000), DEFAULT.estimate(350, 1000))
    assert c.difference == pytest.approx(0.1)
    assert c.stderr == pytest.approx(0.0418330, abs=1e-7)
    assert c.z == pytest.approx(2.390457, abs=1e-6)
    assert c.p_value == pytest.approx(0.016827, abs=1e-6)
    assert (c.ci_low, c.ci_high) == (pytest.approx(0.018009, abs=1e-6),
                                     pytest.approx(0.181991, abs=1e-6))
    assert c.significant


def test_holm_and_bonferroni_match_hand_computation() -> None:
    # Holm, sorted 0.01, 0.03, 0.04, 0.5 (m = 4): 4*0.01 = 0.04, 3*0.03 = 0.09,
    # max(0.09, 2*0.04) = 0.09, max(0.09, 1*0.5) = 0.5. Bonferroni: 4p capped at 1.
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert bonferroni([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.16, 0.12, 1.0])
    adjusted = holm([0.2, math.nan, 0.01])
    assert adjusted[0] == pytest.approx(0.2) and math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.02)


def test_correction_turns_a_lone_borderline_change_insignificant() -> None:
    raw = [difference(DEFAULT.estimate(300, 1000), DEFAULT.estimate(350, 1000), label="x")]
    raw += [difference(DEFAULT.estimate(500, 1000), DEFAULT.estimate(500, 1000), label=str(i))
            for i in range(3)]
    assert raw[0].significant  # p = 0.0168 alone
    held = correct(raw, "holm")
    assert held[0].p_adjusted == pytest.approx(4 * 0.016827, abs=1e-5)
    assert not held[0].significant and held[0].correction == "holm"


def test_plan_matches_hand_computation() -> None:
    # eps 1: t = tanh(1/2) = 0.462117 (to 2^-16), margin 0.01 needs
    # n = ceil((1.959964 * 0.5 / (0.01 * t))^2) = 44,972.
    p = plan(RandomizedResponse.from_epsilon(1.0), margin=0.01)
    assert p.n == 44_972 and p.margin <= 0.01
    # rr:1/2:1/2, 50,000 reports: 1.959964 * 0.5 / (sqrt(50000) * 0.5) = 0.0087652.
    assert plan(DEFAULT, n=50_000).margin == pytest.approx(0.0087652, abs=1e-7)
    with pytest.raises(ValueError):
        plan(DEFAULT)
    assert np.isfinite(plan(DEFAULT, n=1).margin)
