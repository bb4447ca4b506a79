"""The live dashboard at ``/dashboard``: the registered metrics and, for a chosen range, each
one's estimate over time with its interval, the raw yes-rate and n per bucket.

Every kind: a boolean metric's share of yes, a numeric metric's mean in its units (with
``lower`` and ``upper``), and a categorical or histogram metric's share per category in each
bucket, with its per-category and simultaneous intervals (``intervals`` says which is which):
the shapes of ``deniable report --every ... --format json``.
Each document carries presentation hints asked of the metric's kind (``presentation``:
``view``, ``percent``, ``slot_word``, ``contiguous``, ``digits``, ``value_range``), so the
script names no kind. An open-domain metric (``view`` ``discovery``) gets its strings, and one
string's share per period, from functions handed in by a higher layer (``use_discovery``;
``deniable serve`` does), since its decoding is numpy, the analysis package's; its data, read
budget and cache are ``open_view``'s.

The page is static HTML plus a same-origin script and stylesheet (no CDN, no inline script or
style: it works offline and under the Content-Security-Policy of headers.py). It holds no
data at all, so it needs no key: the script fetches the catalogue (``GET /v1/metrics``) and
each metric's numbers (``GET /dashboard/data``, which the server computes with the
mechanism's debiasing line, the window interval of the metric's collection policy,
``window.py``, the same maths as the analysis package's, and the collector's periods,
``rollup.py``) with a read key, so the browser only draws. The collector never
imports ``deniable.analysis``.

Breakdowns (``GET /dashboard/breakdown``): a metric that declares public dimensions gets a
"by" choice; the server pools each value's series over the range and debiases it with the same
maths, and suppresses cells with fewer than ``min_reports`` devices (the most reports in one
period, ``window.window_devices``; default 100, as
``deniable.analysis.breakdown.DEFAULT_MIN_REPORTS``): their estimate is never sent, only n and
the reason.

Register it with ``dashboard.init_app(app)``. The read key is given in the URL fragment
(``/dashboard#token=...``, which browsers never send to the server) or typed into the page's
key form; the script keeps it in the tab's ``sessionStorage``, removes it from the URL at once
(``history.replaceState``), and sends it as ``Authorization: Bearer``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import orjson
from flask import Blueprint, Flask, Response, current_app, render_template, request

from deniable.client.kinds import MetricSpec, kind_of
from deniable.client.mechanism import RandomizedResponse
from deniable.core import keys, rollup, window
from deniable.collector import open_view
from deniable.collector.api import storage_guard
from deniable.collector.open_view import OpenViewLimits
from deniable.collector.auth import require
from deniable.collector.errors import APIError
from deniable.core.explain import bucket_flags, epsilon_note
from deniable.collector.params import time_range, whole_number
from deniable.collector.registry import Metric

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates",
               static_folder="static")
GRANULARITIES = ("hour", "day", "week")


DISCOVER = "deniable.discover"
"""``app.extensions`` key of the open-domain decoder (``use_discovery``)."""
TRACK = "deniable.track"
"""``app.extensions`` key of the open-domain string follower (``use_discovery``)."""


class Discover(Protocol):
    """Decodes an open-domain metric's counters into its discovered strings.

    Args:
        mechanism_id: the metric's ``od:`` id.
        rows: counters of one or more periods, summed before decoding: ``width`` each
            (slot 0 = n, slot 1 + cell).
        confidence: the family-wise confidence that no string shown has share 0.

    Returns:
        One period of ``deniable report --format json``'s open document: ``n``,
        ``min_share`` (the share found half the time), ``tested``, ``z`` and ``found``
        (``string``, ``share``, ``lower``, ``upper``; only strings whose lower bound is
        above 0, largest share first).
    """

    def __call__(self, mechanism_id: str, rows: Iterable[Sequence[int]],
                 confidence: float) -> dict[str, Any]: ...


class Track(Protocol):
    """One string's share in one period's counters (``width`` slots), as the decoder scores
    a complete string: ``pooled`` (the reports of the levels that count it), ``share`` and
    ``stderr`` (None with no reports)."""

    def __call__(self, mechanism_id: str, row: Sequence[int], value: str
                 ) -> dict[str, Any]: ...


def init_app(app: Flask) -> None:
    """Serve the dashboard from ``app``."""
    app.register_blueprint(bp)


def use_discovery(app: Flask, discover: Discover, track: Track | None = None,
                  limits: OpenViewLimits | None = None) -> None:
    """Let the dashboard show open-domain metrics, decoded by ``discover`` (and one string
    followed over time by ``track``), within ``limits`` (``open_view.OpenViewLimits``).

    Decoding needs numpy (``deniable.analysis.open_report``), which the collector never
    imports: the layer that may import both (``deniable serve``, in deniable.cli) hands it
    in. Without it, an open metric's data answers 422 naming ``deniable report``.
    """
    app.extensions[DISCOVER] = discover
    app.extensions[TRACK] = track
    if limits is not None:
        app.extensions[open_view.LIMITS] = limits
        app.extensions.pop(open_view.CACHE, None)


def _registry() -> dict[str, Metric]:
    return current_app.extensions["deniable.registry"].active()  # type: ignore[no-any-return]


@bp.get("")
def page() -> str:
    """The dashboard page: range controls and the script that fills in metrics and charts.
    It holds no data (no key is needed for it)."""
    return render_template("dashboard.html")


@bp.get("/data")
@require("read")
def data() -> Response:
    """One metric's time series and pooled summary over [from, to), as JSON.

    Query: ``metric`` (required), ``from``/``to`` (ISO 8601; default the last 7 days),
    ``every`` (hour, day or week; default day), ``rolling`` (buckets to pool, default 1),
    ``version`` (an older version on its own; default the current one, with ``versions`` and,
    for boolean and numeric metrics, ``history``: the older versions' buckets).
    The buckets have the shape of ``deniable report --every ... --format json``.
    """
    name = request.args.get("metric", "")
    metric = _registry().get(name)
    if metric is None:
        raise APIError(404, f"no metric named {name!r} is registered",
                       parameters={"metric": "must name a registered metric"})
    if keys.is_sparse(metric.mechanism.id) or _older_is_sparse(metric):
        # decoded by the injected analysis (numpy); each version is its own sketch
        return Response(orjson.dumps(_open(metric)), mimetype="application/json")
    every = request.args.get("every", "day")
    if every not in GRANULARITIES:
        raise APIError(422, "'every' must be hour, day or week",
                       parameters={"every": f"one of {', '.join(GRANULARITIES)}"})
    window_size = whole_number("rolling", 1, 1, 1000)
    start, end = time_range()
    number = whole_number("version", 0, 1, 10 ** 6)
    if number and number != metric.version:  # an older version, on its own
        metric = _version(metric, number)
        body = _data(metric, start, end, every, window_size)
        _add_history(body, metric, start, end, every, window_size, joined=False)
        return Response(orjson.dumps(body), mimetype="application/json")
    body = _data(metric, start, end, every, window_size)
    _add_history(body, metric, start, end, every, window_size,
                 joined=not kind_of(body["kind"]).per_category)
    return Response(orjson.dumps(body), mimetype="application/json")


def _version(metric: Metric, number: int) -> Metric:
    """Version ``number`` of ``metric`` as a Metric (its own mechanism, policy and spec).

    Raises:
        APIError: 404 naming the versions there are.
    """
    entry = getattr(current_app.extensions["deniable.registry"], "entry",
                    lambda name: None)(metric.name)
    found = entry.version(number) if entry is not None else None
    if found is None:
        known = [v.version for v in entry.versions] if entry is not None else [metric.version]
        raise APIError(404, f"metric {metric.name!r} has no version {number}",
                       parameters={"version": f"versions: {known}"})
    return Metric(metric.name, metric.description, found.mechanism, metric.retention_days,
                  found.policy, found.version, found.spec, metric.dimensions)


def _add_history(body: dict[str, Any], metric: Metric, start: Any, end: Any, every: str,
                 window_size: int, joined: bool = True) -> None:
    """The metric's versions (``versions``) and, when ``joined``, for each older version of
    the same kind (and range) with reports in the range, its buckets (``history``), each
    debiased with its own version's mechanism: the series across versions (docs/analysis.md,
    "History across versions")."""
    registry = current_app.extensions["deniable.registry"]
    entry = getattr(registry, "entry", lambda name: None)(metric.name)
    if entry is None:
        return
    body["versions"] = [{"version": v.version, "mechanism": v.mechanism.id,
                         "epsilon": v.mechanism.epsilon} for v in entry.versions]
    if not joined:
        return
    parts = []
    kind = kind_of(body["kind"])
    for v in entry.versions:
        if v.version == metric.version or v.spec.kind_object is not kind:
            continue
        scale = kind.scale(v.spec)  # a numeric version joins only with the same range
        if scale is not None and scale != (body["lower"], body["upper"]):
            continue
        older = Metric(metric.name, metric.description, v.mechanism, metric.retention_days,
                       v.policy, v.version, v.spec, metric.dimensions)
        doc = _data(older, start, end, every, window_size)
        if doc["summary"]["n"]:
            parts.append({"version": v.version, "mechanism": v.mechanism.id,
                          "epsilon": v.mechanism.epsilon, "policy": doc["policy"],
                          "buckets": doc["buckets"], "summary": doc["summary"]})
    body["history"] = parts


def _data(metric: Metric, start: Any, end: Any, every: str, window_size: int
          ) -> dict[str, Any]:
    """One version's series and pooled summary over [start, end), as a JSON-ready dict."""
    with storage_guard():
        hours = _hours(metric, start, end)
    first, count = rollup.grid_hours(start, end, every)
    step = rollup.SPAN_HOURS[every]
    policy = metric.policy
    spec = _spec(metric)
    width = metric.mechanism.width
    sums = [[0] * width for _ in range(count)]
    hour_index, hour_slot = [], []
    for h in hours:
        index = keys.hour_index(h.start)
        slot = (rollup.period_hour(index, every) - first) // step
        hour_index.append(index)
        hour_slot.append(slot if 0 <= slot < count else -1)
        if 0 <= slot < count:
            row = sums[slot]
            for j, v in enumerate(h.counts):
                row[j] += v
    # Each bucket's reporting periods: its interval holds over all of them (collector.window).
    periods = window.bucket_periods(hour_index, [h.n for h in hours], hour_slot, count, policy)
    bucket_hours = [first + i * step for i in range(count)]
    if window_size > 1:
        periods = window.rolling_periods(bucket_hours, [r[0] for r in sums], periods,
                                         step * keys.HOUR_SECONDS, policy, window_size)
        columns = [_trailing([r[j] for r in sums], window_size) for j in range(width)]
        sums = [list(r) for r in zip(*columns)] if count else []
    n = [r[0] for r in sums]
    ones = [r[1] for r in sums]
    mechanism = metric.mechanism
    confidence = 0.95
    starts = [keys.hour_start(h) for h in bucket_hours]
    partial = window.coverage_notes(starts, step * keys.HOUR_SECONDS, window_size, start, end)
    if spec.kind_object.per_category:
        return _categorical(metric, spec, hours, sums, periods, starts, bucket_hours, step,
                            partial, every, window_size, start, end, confidence)
    channel = window.channel_rr(mechanism)
    bounds = spec.kind_object.scale(spec)
    buckets = []
    for i in range(count):
        e = window.window_estimate(channel, policy, ones[i], n[i], periods[i], confidence)
        if bounds is not None:
            e = window.scaled(e, *bounds)
        buckets.append({
            "start": starts[i].isoformat(),
            "end": keys.hour_start(bucket_hours[i] + step).isoformat(),
            "n": e.n, "ones": e.ones, "yes_rate": _finite(e.yes_rate),
            "estimate": _finite(e.value), "stderr": _finite(e.stderr), "ci_low": e.ci_low,
            "ci_high": e.ci_high, "clipped": e.clipped, "interval_clipped": e.interval_clipped,
            "wide": e.wide, "unclipped": _finite(e.unclipped), "periods": periods[i],
            "partial": bool(partial[i]),
            "flags": window.in_units(bucket_flags(e.n, e.clipped, e.wide, e.unclipped,
                                                  e.interval_clipped, partial[i]),
                                     *(bounds or (None, None)))})
    # The whole range pooled: every hour the store returned, over every period with reports.
    every_period = window.bucket_periods(hour_index, [h.n for h in hours], [0] * len(hours), 1,
                                         policy)[0]
    summary = window.window_estimate(channel, policy, sum(h.ones for h in hours),
                                     sum(h.n for h in hours), max(every_period, 1), confidence)
    if bounds is not None:
        summary = window.scaled(summary, *bounds)
    body: dict[str, Any] = {
        "metric": metric.name, "version": metric.version, "description": metric.description,
        "mechanism": mechanism.id, "epsilon": mechanism.epsilon, "policy": policy.summary(),
        "estimand": window.estimand(policy, max(periods, default=1),
                                    step * keys.HOUR_SECONDS, spec.kind),
        "granularity": every, "window": window_size,
        "confidence": confidence, "kind": spec.kind, "buckets": buckets,
        "from": start.isoformat(), "to": end.isoformat(),
        "summary": {"n": summary.n, "yes_rate": _finite(summary.yes_rate),
                    "estimate": _finite(summary.value), "ci_low": summary.ci_low,
                    "ci_high": summary.ci_high, "clipped": summary.clipped,
                    "wide": summary.wide, "interval_clipped": summary.interval_clipped,
                    "periods": every_period,
                    "estimand": window.estimand(policy, every_period, kind=spec.kind)},
        "note": _note(mechanism, summary.n, summary.confidence),
    }
    if bounds is not None:
        body["lower"], body["upper"] = bounds
    body.update(presentation(spec))
    return body


MIN_REPORTS = 100
"""Cells with fewer reports than this show no estimate (the analysis' default too)."""


@bp.get("/breakdown")
@require("read")
def breakdown() -> Response:
    """One metric broken down by a dimension it declares, pooled over [from, to), as JSON.

    Query: ``metric``, ``by`` (a dimension, or a declared combination ``a,b``),
    ``from``/``to``, ``min_reports`` (default 100). Each cell: ``label``, ``value``, ``n``,
    ``devices`` (the most reports in one period), ``suppressed`` (fewer than ``min_reports``
    devices) and ``reason``, and (shown cells only) the estimate of the metric's kind;
    then ``not_stated`` (total n - the cells' n) and ``note`` naming what was suppressed.
    """
    from deniable.client.dimensions import DimensionError, series_values
    from deniable.collector.store import hour_counts

    name = request.args.get("metric", "")
    metric = _registry().get(name)
    if metric is None:
        raise APIError(404, f"no metric named {name!r} is registered",
                       parameters={"metric": "must name a registered metric"})
    dims = getattr(metric, "dimensions", None)
    by = ",".join(sorted(request.args.get("by", "").split(",")))
    try:
        if not dims:
            raise DimensionError("none", by)
        labels = dims.all_series(by)
    except DimensionError as exc:
        declared = ", ".join(dims.names) if dims else "none"
        raise APIError(404, f"metric {name!r} has no dimension or declared combination {by!r}",
                       parameters={"by": f"dimensions: {declared}"}) from exc
    min_reports = whole_number("min_reports", MIN_REPORTS, 1, 10 ** 9)
    start, end = time_range()
    store = current_app.extensions["deniable.store"]
    first, end_hour = keys.hour_range(start, end)
    if metric.retention_days is not None:
        from datetime import datetime, timezone

        first = max(first, keys.visible_from(datetime.now(timezone.utc), metric.retention_days))
    mechanism, policy, spec = metric.mechanism, metric.policy, _spec(metric)
    with storage_guard():
        read = store.month_strings_by_series(metric.name, mechanism.id, [None, *labels], first,
                                             end_hour)
    confidence = 0.95
    categorical = spec.kind_object.per_category
    bounds = spec.kind_object.scale(spec)
    cells, stated = [], 0
    total_n = sum(h.n for h in hour_counts(read[None], first, end_hour, mechanism.width))
    for label in labels:
        hours = hour_counts(read[label], first, end_hour, mechanism.width)
        n = sum(h.n for h in hours)
        stated += n
        values = series_values(label)
        # Devices, not reports: the most reports in one period (each device sends at most
        # one), so the same cell is hidden whatever the range (window.window_devices).
        devices = window.window_devices([keys.hour_index(h.start) for h in hours],
                                        [h.n for h in hours], policy)
        cell: dict[str, Any] = {"label": label, "value": ", ".join(values.values()), "n": n,
                                "devices": devices, "suppressed": devices < min_reports,
                                "reason": None}
        if devices < min_reports:
            cell["reason"] = (f"fewer than {min_reports:,} devices ({devices:,} in its "
                              f"busiest {policy.period}, {n:,} reports): such an estimate is "
                              "mostly noise and a tiny cell can single people out")
            cells.append(cell)
            continue
        periods = max(window.bucket_periods([keys.hour_index(h.start) for h in hours],
                                            [h.n for h in hours], [0] * len(hours), 1,
                                            policy)[0], 1)
        total = [sum(h.counts[j] for h in hours) for j in range(mechanism.width)]
        if categorical:
            cats = window.category_estimates(mechanism, policy, total, periods, confidence)
            cell["categories"] = [{"category": c, **k} for c, k in zip(spec.labels, cats)]
        else:
            e = window.window_estimate(window.channel_rr(mechanism), policy, total[1], n,
                                       periods, confidence)
            if bounds is not None:
                e = window.scaled(e, *bounds)
            cell.update(estimate=_finite(e.value), ci_low=e.ci_low, ci_high=e.ci_high,
                        clipped=e.clipped, wide=e.wide)
        cells.append(cell)
    hidden = [c for c in cells if c["suppressed"]]
    note = (f"{len(hidden)} cell{'s' if len(hidden) != 1 else ''} suppressed ("
            + ", ".join(f"{c['value']}: n = {c['n']:,}, {c['devices']:,} "
                        f"{'device' if c['devices'] == 1 else 'devices'}" for c in hidden)
            + f"): each has fewer than {min_reports:,} devices (the most reports in one "
            "period); such an estimate is mostly noise and a tiny cell can single people out."
            if hidden else "")
    body: dict[str, Any] = {
        "metric": metric.name, "kind": spec.kind, "by": by, "min_reports": min_reports,
        "confidence": confidence, "from": start.isoformat(), "to": end.isoformat(),
        "n": total_n, "not_stated": max(total_n - stated, 0), "cells": cells, "note": note,
        "dimensions": f"{by} is a public dimension: sent and counted in clear, not protected "
                      "by local differential privacy (the metric's value is, in every cell).",
        "categories": list(spec.labels) if categorical else None, **presentation(spec)}
    if bounds is not None:
        body["lower"], body["upper"] = bounds
    return Response(orjson.dumps(body), mimetype="application/json")


def presentation(spec: MetricSpec) -> dict[str, Any]:
    """How the page draws a metric, asked of its kind (the script names no kind).

    Returns:
        ``view``: ``series`` (one estimate per bucket), ``categories`` (one per declared
        category or bucket) or ``discovery`` (strings found, no declared slots);
        ``percent``: estimates are shares, shown in percent (else a mean in the unit);
        ``slot_word``: the word for what is counted ("yes", "category", "bucket", "mean",
        "cell"); ``contiguous``: the slots are adjacent buckets of a number line (bars
        touch); ``digits``: decimals of a raw estimate in tables (4 for a share, 2 for a
        mean); ``value_range``: [low, high] an estimate is shown in (the unit's for a mean).
    """
    kind = spec.kind_object
    view = ("discovery" if keys.is_sparse(spec.mechanism.id)
            else "categories" if kind.per_category else "series")
    low, high = kind.value_range(spec)
    return {"view": view, "percent": kind.percent, "slot_word": kind.slot_word,
            "contiguous": kind.buckets, "digits": 4 if kind.percent else 2,
            "value_range": [low, high]}


def _note(mechanism: Any, n: int, confidence: float) -> str:
    # A mechanism test, not a kind test: core's two notes are per mechanism (epsilon_note
    # explains randomized response and its layers; kind_note the categorical and 1BitMean).
    if isinstance(mechanism, RandomizedResponse):
        return epsilon_note(mechanism, n, confidence)
    return window.kind_note(mechanism, n, confidence)


def _spec(metric: Metric) -> MetricSpec:
    """The metric's spec: the registry's own, else from its catalogue entry's fields."""
    spec = getattr(metric, "spec", None)
    if isinstance(spec, MetricSpec):
        return spec
    try:
        return MetricSpec.from_document(metric.describe(), metric.mechanism)
    except Exception as exc:  # noqa: BLE001 - a registry entry without its declaration
        raise APIError(500, f"metric {metric.name!r} has no readable declaration") from exc


def _hours(metric: Metric, start: Any, end: Any) -> list[rollup.HourCount]:
    """The non-empty hours of ``metric`` in [start, end) with every counter slot."""
    from datetime import datetime, timezone

    from deniable.collector.store import hour_counts

    store = current_app.extensions["deniable.store"]
    first, end_hour = keys.hour_range(start, end)
    if metric.retention_days is not None:
        first = max(first, keys.visible_from(datetime.now(timezone.utc), metric.retention_days))
    return hour_counts(store.month_strings(metric.name, metric.mechanism.id, first, end_hour),
                       first, end_hour, metric.mechanism.width)


def _categorical(metric: Metric, spec: MetricSpec, hours: list[rollup.HourCount],
                 sums: list[list[int]], periods: list[int], starts: list[Any],
                 bucket_hours: list[int], step: int, partial: list[str], every: str,
                 window_size: int, start: Any, end: Any, confidence: float) -> dict[str, Any]:
    """The data of a categorical or histogram metric: per bucket, each category's share."""
    mechanism, policy = metric.mechanism, metric.policy
    labels = spec.labels
    note = window.INTERVAL_NOTE.format(pct=f"{confidence:.0%}", d=len(labels))
    buckets = []
    for i, row in enumerate(sums):
        cats = window.category_estimates(mechanism, policy, row, periods[i], confidence)
        for label, c in zip(labels, cats):
            c["flags"] = "; ".join(x for x in (partial[i], c["flags"], note if row[0] else "")
                                   if x)
        buckets.append({
            "start": starts[i].isoformat(),
            "end": keys.hour_start(bucket_hours[i] + step).isoformat(), "n": row[0],
            "periods": periods[i], "partial": bool(partial[i]),
            "categories": [{"category": label, **c} for label, c in zip(labels, cats)]})
    hour_index = [keys.hour_index(h.start) for h in hours]
    every_period = window.bucket_periods(hour_index, [h.n for h in hours], [0] * len(hours), 1,
                                         policy)[0]
    total = [sum(h.counts[j] for h in hours) for j in range(mechanism.width)]
    pooled = window.category_estimates(mechanism, policy, total, max(every_period, 1),
                                       confidence)
    body: dict[str, Any] = {
        "metric": metric.name, "version": metric.version, "description": metric.description,
        "mechanism": mechanism.id, "epsilon": mechanism.epsilon, "policy": policy.summary(),
        "estimand": window.estimand(policy, max(periods, default=1),
                                    step * keys.HOUR_SECONDS, spec.kind),
        "granularity": every, "window": window_size, "confidence": confidence,
        "kind": spec.kind, "categories": list(labels), "intervals": note,
        "buckets": buckets, "from": start.isoformat(), "to": end.isoformat(),
        "summary": {"n": total[0], "periods": every_period,
                    "estimand": window.estimand(policy, every_period, kind=spec.kind),
                    "categories": [{"category": label, **c}
                                   for label, c in zip(labels, pooled)]},
        "note": _note(mechanism, total[0], confidence),
        **presentation(spec),
    }
    return body


def _older_is_sparse(metric: Metric) -> bool:
    """Whether the query picks an older version that is open-domain (``version=N``)."""
    raw = request.args.get("version", "")
    if not raw.isdigit() or int(raw) == metric.version:
        return False
    return keys.is_sparse(_version(metric, int(raw)).mechanism.id)


def _open(metric: Metric) -> dict[str, Any]:
    """An open-domain metric's data over [from, to) (query as ``data``, plus ``day=`` a
    period alone and ``string=`` that string's share per period): ``open_view.open_data``,
    with the version picked by ``version=`` and the metric's ``versions``.

    Raises:
        APIError: 422 when no decoder was handed in (``use_discovery``); those of
            ``open_view.open_data``.
    """
    decode: Discover | None = current_app.extensions.get(DISCOVER)
    if decode is None:
        raise APIError(422, f"{metric.name!r} is an open-domain metric and this collector "
                       "has no decoder (it needs the analysis extra, numpy, and `deniable "
                       "serve`): its discovered strings are in `deniable report "
                       "--collector ...`",
                       parameters={"metric": "must name a metric with per-slot estimates"})
    current = metric.version
    number = whole_number("version", 0, 1, 10 ** 6)
    if number and number != metric.version:
        metric = _version(metric, number)
    spec = _spec(metric)
    body = open_view.open_data(metric, decode, current_app.extensions.get(TRACK),
                               {"kind": spec.kind})
    body["current_version"] = current
    body["joins_versions"] = False  # each version is its own sketch: picked, never joined
    _add_history(body, metric, None, None, "day", 1, joined=False)
    body["estimand"] = (f"share of reports holding each string, per {metric.policy.period} "
                        f"and pooled over the range's {metric.policy.period}s (a device "
                        f"reports at most once a {metric.policy.period})")
    body["note"] = _open_note(metric.mechanism.epsilon, body["confidence"])
    body.update(presentation(spec))
    return body


def _open_note(epsilon: float, confidence: float) -> str:
    """What epsilon and the confidence mean for an open metric's list."""
    return (f"Privacy: epsilon = {epsilon:.3g} per report, with fresh coins each time "
            "(an open metric is never memoized). Each device sends one cell of a sketch of "
            "its string; the collector keeps only per-period counters, never a string. A string "
            f"is listed only when its share's lower bound is above 0 at {confidence:.0%} "
            "family-wise confidence (Bonferroni over every string tested), so with that "
            "probability no string held by no device is shown (up to the sketch's small "
            "collision bias, docs/discovery.md). A string rarer than the "
            "smallest discoverable share is usually missed: absence from the list is not "
            "evidence of absence.")


def _trailing(values: list[int], window: int) -> list[int]:
    """Each value summed with the ``window - 1`` before it (fewer at the start)."""
    out, running = [], 0
    for i, v in enumerate(values):
        running += v - (values[i - window] if i >= window else 0)
        out.append(running)
    return out


def _finite(x: float) -> float | None:
    return None if x != x else x
