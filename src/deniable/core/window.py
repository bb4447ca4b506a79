"""Windows of several reporting periods: which periods a window's reports come from, the
devices it certainly holds, and what its estimates mean, in words (the estimand, partial
buckets, epsilon for each kind); plain Python, used by the collector's dashboard and by the
analysis (which applies it to numpy arrays; docs/analysis.md, "Intervals over time").

The variance split and the design effect are in ``deniable.core.variance``, the estimators in
``deniable.core.estimators``; their names are also importable from here, where the dashboard
reads them (``window.window_estimate``). The collector never imports ``deniable.analysis``;
both import this package.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from deniable.client.kinds import kind_of
from deniable.client.mechanism import z_score
from deniable.client.period import CollectionPolicy
from deniable.core.estimators import (  # noqa: F401 (re-exported for the dashboard)
    Debiased, WindowEstimate, channel_rr, debias_categories, debias_line, scaled,
    simultaneous_level, window_estimate)
from deniable.core.periods import period_number
from deniable.core.variance import (  # noqa: F401 (re-exported for the dashboard)
    Scalars, design_effect, fresh_coefficients, fresh_variance, line)


def period_of_hour(hours: Any, policy: CollectionPolicy) -> Any:
    """The reporting period of hour index ``hours`` (hours since the Unix epoch; an int, or a
    numpy integer array element-wise): the same numbers as ``CollectionPolicy.period_index``
    (``deniable.core.periods.period_number`` of the policy's period)."""
    return period_number(hours, policy.period)


def window_devices(hours: Sequence[int] | Any, n: Sequence[int] | Any, policy: CollectionPolicy,
                   xp: Any = None) -> int:
    """The devices a window's reports certainly come from: the most reports in any one of
    its reporting periods (each device sends at most one report per period). A lower bound
    on the distinct devices, the same for a day and for a week of the same devices: what
    suppression of small breakdown cells counts, so that widening the range never shows a
    cell that a narrower one hides.

    Args:
        hours: hour indexes (hours since the Unix epoch) of the window's non-empty buckets.
        n: reports in each.
        xp: numpy, to take integer arrays at once (what the analysis does); plain Python by
            default (the collector needs no numpy).
    """
    if xp is not None:
        if not len(hours):
            return 0
        _, slot = xp.unique(period_of_hour(xp.asarray(hours, dtype=xp.int64), policy),
                            return_inverse=True)
        return int(xp.bincount(slot.ravel(), weights=xp.asarray(n, dtype=xp.float64)).max())
    per: dict[int, int] = {}
    for hour, count in zip(hours, n):
        period = int(period_of_hour(int(hour), policy))
        per[period] = per.get(period, 0) + int(count)
    return max(per.values(), default=0)


def estimand(policy: CollectionPolicy, periods: int | None,
             bucket_seconds: float | None = None, kind: str = "boolean") -> str:
    """What an estimate over ``periods`` periods is the share of, in words (``bucket_seconds``:
    the bucket length, when buckets are shorter than the period; ``periods`` None: several,
    not counted). ``kind``: the metric's kind, whose ``Kind.estimand`` words it (each
    category's share of devices, the mean value over devices, or the share answering yes)."""
    return kind_of(kind).estimand(_estimand(policy, periods, bucket_seconds))


def _estimand(policy: CollectionPolicy, periods: int | None,
              bucket_seconds: float | None = None) -> str:
    if bucket_seconds is not None and bucket_seconds < policy.period_seconds:
        return (f"share of the devices whose report of the {policy.period} arrived in the "
                f"bucket answering yes (each device sends at most one report per "
                f"{policy.period}; not a share of reports)")
    if periods is not None and periods <= 1:
        return (f"share of devices active in the {policy.period} answering yes (not a share "
                f"of reports: each device sends at most one report per {policy.period})")
    counted = "" if periods is None else f"{periods} "
    return (f"share of devices answering yes, per {policy.period}, averaged over the "
            f"{counted}{policy.period}s with reports (each weighted by its reports; with the "
            f"same devices every {policy.period}, the share of devices active in the window)")


def coverage_notes(starts: Sequence[datetime], step_seconds: float, window: int,
                   range_start: datetime | None, range_end: datetime | None) -> list[str]:
    """Per bucket: how it is cut by the range, in words ("" for a whole bucket).

    A bucket that the range's start or end cuts is partial ("partial: 14:00 to 24:00 UTC of
    this day"); in a rolling series, a window reaching before the range's start pools fewer
    buckets than it says ("partial window: 3 of 7 days").
    """
    step = timedelta(seconds=step_seconds)
    unit = {3600: "hour", 86_400: "day", 604_800: "week"}.get(int(step_seconds), "bucket")
    notes = []
    for start in starts:
        parts = []
        end = start + step
        lo = max(start, range_start) if range_start else start
        hi = min(end, range_end) if range_end else end
        if window > 1 and range_start is not None:
            first = start - (window - 1) * step
            if first < range_start:
                inside = sum(1 for k in range(window) if start - k * step + step > range_start)
                parts.append(f"partial window: {inside} of {window} {unit}s")
        if (lo, hi) != (start, end):
            parts.append(f"partial {unit}: {lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC")
        notes.append("; ".join(parts))
    return notes


def bucket_periods(hours: Sequence[int], n: Sequence[int], slots: Sequence[int], buckets: int,
                   policy: CollectionPolicy) -> list[int]:
    """T per bucket: the distinct periods among each bucket's non-empty hour buckets
    (``slots``: each hour's bucket index, -1 outside the range)."""
    seen: list[set[int]] = [set() for _ in range(buckets)]
    for hour, count, slot in zip(hours, n, slots):
        if 0 <= slot < buckets and count > 0:
            seen[slot].add(int(period_of_hour(int(hour), policy)))
    return [len(s) for s in seen]


def rolling_periods(bucket_hours: Sequence[int], n: Sequence[int], periods: Sequence[int],
                    step_seconds: float, policy: CollectionPolicy, window: int) -> list[int]:
    """T for each trailing window of ``window`` buckets (``bucket_hours``: each bucket's start
    as an hour index).

    Buckets at least a period long hold whole, disjoint periods (UTC hours, days and ISO weeks
    nest), so T adds up; shorter buckets each lie inside one period, so T counts the distinct
    periods of the window's non-empty buckets.
    """
    out = []
    for i in range(len(periods)):
        lo = max(0, i - window + 1)
        if step_seconds >= policy.period_seconds:
            out.append(sum(int(p) for p in periods[lo:i + 1]))
        else:
            out.append(len({int(period_of_hour(int(h), policy))
                            for h, c in zip(bucket_hours[lo:i + 1], n[lo:i + 1]) if c > 0}))
    return out


def in_units(text: str, lower: float | None, upper: float | None) -> str:
    """A caveat about [0, 1] said in a numeric metric's units ([lower, upper])."""
    if lower is None or upper is None:
        return text
    return text.replace("[0, 1]", f"[{lower:g}, {upper:g}]")


def worst_margin(mechanism: Any, n: int, confidence: float = 0.95) -> float:
    """The worst-case half-width of one slot's interval with n reports (normal approximation,
    on the debiased scale): z sqrt(max pi (1 - pi) / n) / (P1 - Q), pi in [Q, P1]."""
    p1, q = (float(x) for x in mechanism.channel)
    pi = min(max(0.5, q), p1)
    return z_score(confidence) * math.sqrt(pi * (1 - pi) / n) / (p1 - q)


def kind_note(mechanism: Any, n: int | None, confidence: float = 0.95,
              lower: float | None = None, upper: float | None = None) -> str:
    """What epsilon means for a categorical, histogram or numeric metric, in plain words
    (HTML-escaped text), as ``explain.epsilon_note`` says it for a boolean one; with ``n``, the
    price in precision of that many reports (None: left out)."""
    ratio = float(mechanism.likelihood_ratio)
    prefix = mechanism.id.split(":", 1)[0]
    if prefix == "grr":
        how = (f"Every device sends one of the {mechanism.d} categories: its true one with "
               f"probability {float(mechanism.p):.1%}, otherwise one of the other "
               f"{mechanism.d - 1} at random (each {float(mechanism.q):.2%}). ")
        what = "each category\u2019s share"
    elif prefix == "oue":
        how = (f"Every device sends one bit per category ({mechanism.d} bits): its true "
               f"category's bit is 1 with probability 1/2, every other bit is 1 with "
               f"probability {float(mechanism.q):.1%}. ")
        what = "each category\u2019s share"
    elif prefix == "ss":
        p1, q = (float(x) for x in mechanism.channel)
        how = (f"Every device sends a set of {mechanism.k} of the {mechanism.d} categories: it "
               f"holds the true one with probability {p1:.1%}, and each other one with "
               f"probability {q:.1%}. ")
        what = "each category\u2019s share"
    else:
        low, high = (float(mechanism.lower), float(mechanism.upper)) if lower is None \
            else (lower, upper or 0.0)
        how = (f"Every device sends one bit: 1 with probability {float(mechanism.a):.1%} at "
               f"{low:g}, rising in proportion to {float(1 - mechanism.a):.1%} at {high:g}. ")
        what = "the mean"
    text = (f"Privacy: epsilon = {mechanism.epsilon:.3f} for this metric. {how}So one report "
            f"shifts the odds between any two true values by at most e^epsilon = "
            f"{ratio:.2f}\u00d7. ")
    if n is None:
        pass
    elif n > 0:
        margin = worst_margin(mechanism, n, confidence)
        if prefix == "bm":
            margin *= float(mechanism.upper - mechanism.lower)
            shown = f"\u00b1{margin:.4g}"
        else:
            shown = f"\u00b1{margin:.4f}"
        text += (f"The price is noise: with these {n:,} reports {what} is good to {shown} at "
                 f"worst ({confidence:.0%} interval"
                 + (", per category" if prefix != "bm" else "")
                 + "); four times as many reports halve that. ")
    else:
        text += "There are no reports in this range yet. "
    text += ("A smaller epsilon protects people more and needs more reports for the same "
             "precision.")
    return html.escape(text)


INTERVAL_NOTE = ("ci: per-category {pct} interval (each category on its own); sim: "
                 "simultaneous {pct} interval (all {d} categories at once, Bonferroni)")
"""Which interval is which, for categorical metrics: every output carries it."""


def category_flags(value: float, n: int, low: float, high: float) -> str:
    """The caveats of one category's share: no reports, outside [0, 1] (noise), wide."""
    if n == 0:
        return "no reports"
    notes = []
    if not 0 <= value <= 1:
        notes.append("unbiased share outside [0, 1] (noise; not clipped)")
    if high - low >= 0.5:
        notes.append("too few reports: interval spans half of [0, 1]")
    return "; ".join(notes)


def category_estimates(mechanism: Any, policy: CollectionPolicy, counts: Sequence[int],
                       periods: int, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per category of one bucket (``counts``: n, then each category's count): the unbiased
    share, its plug-in stderr, the per-category interval and the simultaneous one (Bonferroni
    over the d categories), as JSON-ready dicts: ``debias_categories`` on each category's
    count, for the dashboard (the analysis applies it to arrays)."""
    n, d = int(counts[0]), len(counts) - 1
    out = []
    for c in counts[1:]:
        e: Debiased | WindowEstimate
        sim: Debiased | WindowEstimate
        if n == 0:  # no reports: NaN estimates, the interval [0, 1]
            e = sim = window_estimate(channel_rr(mechanism), policy, int(c), 0, periods,
                                      confidence)
        else:
            e, sim = debias_categories(mechanism, policy, int(c), n, periods, d, confidence)
        unbiased = None if e.unclipped != e.unclipped else e.unclipped
        out.append({"ones": int(c), "yes_rate": None if e.yes_rate != e.yes_rate else e.yes_rate,
                    "estimate": unbiased,
                    "stderr": None if e.stderr != e.stderr else e.stderr,
                    "ci_low": e.ci_low, "ci_high": e.ci_high, "sim_low": sim.ci_low,
                    "sim_high": sim.ci_high, "wide": e.wide,
                    "flags": category_flags(e.unclipped, n, e.ci_low, e.ci_high)})
    return out
