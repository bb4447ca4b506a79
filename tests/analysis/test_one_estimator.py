"""One estimator: the dashboard's plain-Python estimates (``deniable.core.window``) and the
analysis's numpy arrays (``deniable.analysis.debias``, ``.categorical``) are the same
functions, ``core.estimators.debias_line`` and ``debias_categories``, applied to floats or to
arrays. Exact identities, no sampling."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.coverage import LAYER, WIRE
from deniable.analysis.categorical import estimate_categories
from deniable.analysis.debias import debias
from deniable.client.categorical import KaryRandomizedResponse
from deniable.client.period import CollectionPolicy
from deniable.core.estimators import window_estimate
from deniable.core.window import category_estimates

POLICIES = (CollectionPolicy("memoized"), CollectionPolicy("fresh"),
            CollectionPolicy("instantaneous", LAYER), CollectionPolicy("memoized", period="week"))
MECHANISM = KaryRandomizedResponse.from_epsilon(1.5, 4, "0123abcd")
FIELDS = {"yes_rate": "yes_rate", "value": "estimate", "unclipped": "unclipped",
          "stderr": "stderr", "ci_low": "ci_low", "ci_high": "ci_high", "clipped": "clipped",
          "wide": "wide", "interval_clipped": "interval_clipped",
          "design_effect": "design_effect"}


def _same(a: float, b: float) -> bool:
    """Equal to the last bit, or within 4 ulp: Python's float ``** 0.5`` (C pow) and numpy's
    (a square root) may round the last bit differently; every other step is the same IEEE
    operation on both sides."""
    if isinstance(a, (bool, np.bool_)):
        return bool(a) == bool(b)
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= 4 * math.ulp(max(abs(a), abs(b)))


@settings(max_examples=300, deadline=None)
@given(n=st.lists(st.integers(0, 10_000), min_size=1, max_size=8), data=st.data(),
       policy=st.sampled_from(POLICIES), confidence=st.sampled_from((0.9, 0.95, 0.99)))
def test_the_dashboards_floats_and_the_analysis_arrays_agree_field_by_field(
        n: list[int], data: st.DataObject, policy: CollectionPolicy, confidence: float) -> None:
    ones = [data.draw(st.integers(0, k)) for k in n]
    periods = [data.draw(st.integers(1, 30)) for _ in n]
    arrays = debias(WIRE, np.array(ones), np.array(n), confidence, policy=policy,
                    periods=np.array(periods))
    for i, (k, m, t) in enumerate(zip(ones, n, periods)):
        one = window_estimate(WIRE, policy, k, m, t, confidence)
        for name, column in FIELDS.items():
            assert _same(getattr(one, name), getattr(arrays, column)[i]), (name, k, m, t)


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 500), min_size=4, max_size=4), extra=st.integers(0, 500),
       periods=st.integers(1, 7), policy=st.sampled_from(POLICIES[:2]))
def test_category_shares_are_the_same_in_the_dashboard_and_the_analysis(
        counts: list[int], extra: int, periods: int, policy: CollectionPolicy) -> None:
    mechanism = MECHANISM
    n = max(counts) + extra
    row = [n, *counts]
    dashboard = category_estimates(mechanism, policy, row, periods)
    analysis = estimate_categories(row, mechanism, policy=policy, periods=periods)
    for i, shown in enumerate(dashboard):
        pairs = [("estimate", analysis.value[i]), ("stderr", analysis.stderr[i]),
                 ("ci_low", analysis.ci_low[i]), ("ci_high", analysis.ci_high[i]),
                 ("sim_low", analysis.sim_low[i]), ("sim_high", analysis.sim_high[i])]
        for name, value in pairs:
            got = shown[name]
            assert _same(math.nan if got is None else got, value), (name, row, i)
