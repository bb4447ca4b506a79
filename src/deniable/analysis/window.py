"""Honest intervals over windows of several reporting periods, on numpy arrays (docs/analysis.md,
"Intervals over time").

The maths (the variance split, the design effect, the estimand, the partial-bucket notes) is
defined once, in plain Python, in ``deniable.core.window``, which the collector's dashboard
uses too; this module applies it to arrays of buckets and counts the reporting periods that
each bucket or rolling window pools.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy
from deniable.core import window as shared
from deniable.core.periods import hour_index
from deniable.core.window import coverage_notes, estimand

__all__ = ["bucket_periods", "count_periods", "coverage_notes", "design_effect", "estimand",
           "fresh_variance", "period_ids", "periods_in", "rolling_periods"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def fresh_variance(mechanism: RandomizedResponse, policy: CollectionPolicy,
                   share: FloatArray) -> FloatArray:
    """The fresh part of one report's variance, for a true share ``share`` of yes (clipped to
    [0, 1]), element-wise: ``deniable.core.window.fresh_variance``."""
    theta = np.clip(np.asarray(share, dtype=np.float64), 0.0, 1.0)
    return np.asarray(shared.fresh_variance(mechanism, policy, theta), dtype=np.float64)


def design_effect(mechanism: RandomizedResponse, policy: CollectionPolicy,
                  rate: FloatArray, periods: IntArray) -> FloatArray:
    """deff = (T * persistent + fresh) / r (1 - r), element-wise; in [1, T]
    (``deniable.core.window.design_effect``, applied to arrays).

    Args:
        rate: perturbed yes-rate per bucket (NaN where empty), shape (buckets,).
        periods: T, the reporting periods with reports in each bucket, shape (buckets,).
    """
    rate = np.asarray(rate, dtype=np.float64)
    periods = np.asarray(periods, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        deff = shared.design_effect(mechanism, policy, rate, periods, xp=np)
    return np.asarray(deff, dtype=np.float64)


def period_ids(starts: Sequence[datetime] | IntArray, policy: CollectionPolicy) -> IntArray:
    """The reporting period of each hour bucket (see CollectionPolicy.period_index).

    Args:
        starts: bucket starts as integer hour indexes (hours since the Unix epoch; the fast
            path), or as datetimes, shape (buckets,).
    """
    if isinstance(starts, np.ndarray) and starts.dtype.kind in "iu":
        hours = starts.astype(np.int64, copy=False)
    else:
        hours = np.array([hour_index(s) for s in starts], dtype=np.int64)
    return np.asarray(shared.period_of_hour(hours, policy), dtype=np.int64)


def periods_in(starts: Sequence[datetime] | IntArray, n: IntArray,
               policy: CollectionPolicy = DEFAULT_POLICY) -> int:
    """How many reporting periods have reports among these hour buckets (``starts``: hour
    indexes, or datetimes)."""
    return count_periods(period_ids(starts, policy)[np.asarray(n) > 0])


def count_periods(ids: IntArray) -> int:
    """How many distinct periods ``ids`` (period numbers, ``period_ids``) hold."""
    if ids.size > 1 and bool(np.all(ids[1:] >= ids[:-1])):  # hours in order: count the steps
        return int(np.count_nonzero(ids[1:] != ids[:-1])) + 1
    return int(np.unique(ids).size)


def bucket_periods(hour_starts: Sequence[datetime] | IntArray, hour_n: IntArray,
                   slots: IntArray, buckets: int,
                   policy: CollectionPolicy = DEFAULT_POLICY) -> IntArray:
    """T per bucket: the distinct periods among each bucket's non-empty hour buckets.

    Args:
        hour_starts, hour_n: the collector's hour buckets (starts as hour indexes, or
            datetimes).
        slots: the bucket index of each hour bucket (-1: outside the range).
        buckets: the number of buckets.
    """
    ids = period_ids(hour_starts, policy)
    slots = np.asarray(slots, dtype=np.int64)
    keep = (slots >= 0) & (np.asarray(hour_n) > 0)
    if not keep.any():
        return np.zeros(buckets, np.int64)
    slot, period = slots[keep], ids[keep]
    if not (bool(np.all(slot[1:] >= slot[:-1])) and bool(np.all(period[1:] >= period[:-1]))):
        order = np.lexsort((period, slot))  # hours out of order: sort the (slot, period) pairs
        slot, period = slot[order], period[order]
    # Sorted pairs: each distinct (slot, period) pair begins where either changes.
    first = np.ones(slot.size, dtype=bool)
    first[1:] = (slot[1:] != slot[:-1]) | (period[1:] != period[:-1])
    return np.bincount(slot[first], minlength=buckets).astype(np.int64)


def rolling_periods(bucket_starts: Sequence[datetime] | IntArray, n: IntArray,
                    periods: IntArray, step_seconds: float, policy: CollectionPolicy,
                    window: int) -> IntArray:
    """T for each trailing window of ``window`` buckets (``bucket_starts``: hour indexes, or
    datetimes).

    Buckets at least a period long hold whole, disjoint periods (UTC hours, days and ISO weeks
    nest), so T adds up; shorter buckets each lie inside one period, so T counts the distinct
    periods of the window's non-empty buckets.
    """
    periods = np.asarray(periods, dtype=np.int64)
    index = np.arange(1, len(periods) + 1)
    if step_seconds >= policy.period_seconds:
        cumulative = np.concatenate(([0], np.cumsum(periods)))
        return cumulative[index] - cumulative[np.maximum(index - window, 0)]
    ids = period_ids(bucket_starts, policy)
    busy = np.flatnonzero(np.asarray(n) > 0)
    busy_ids = ids[busy]
    if busy_ids.size > 1 and not bool(np.all(busy_ids[1:] >= busy_ids[:-1])):
        out = np.zeros(len(periods), np.int64)  # buckets out of order: count each window
        for i in range(len(periods)):
            lo = max(0, i - window + 1)
            out[i] = np.unique(ids[lo:i + 1][np.asarray(n)[lo:i + 1] > 0]).size
        return out
    # Periods in order: a window's distinct periods are the busy buckets that begin a period
    # in it, plus one if its first busy bucket continues a period begun before the window.
    begins = np.ones(busy.size, dtype=bool)
    begins[1:] = busy_ids[1:] != busy_ids[:-1]
    counted = np.concatenate(([0], np.cumsum(begins)))
    low = np.searchsorted(busy, np.maximum(index - window, 0), side="left")
    high = np.searchsorted(busy, index - 1, side="right")
    inside = high > low
    continues = inside & ~begins[np.minimum(low, max(busy.size - 1, 0))] if busy.size \
        else inside
    return (counted[high] - counted[low] + continues).astype(np.int64)
