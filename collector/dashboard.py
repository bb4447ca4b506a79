"""The live dashboard at ``/dashboard``: the registered metrics and, for a chosen range, each
one's estimate over time with its interval, the raw yes-rate and n per bucket.

The page is static HTML plus a same-origin script and stylesheet (no CDN, no inline script or
style: it works offline and under the Content-Security-Policy of headers.py). It holds no
data at all, so it needs no key: the script fetches the catalogue (``GET /v1/metrics``) and
each metric's numbers (``GET /dashboard/data``, which the server computes with the
mechanism's debiasing line, the window interval of the metric's collection policy,
``window.py``, the same maths as the analysis package's, and the collector's periods,
``rollup.py``) with a read key, so the browser only draws. The collector never
imports ``deniable.analysis``.

Register it with ``dashboard.init_app(app)``. The read key is given in the URL fragment
(``/dashboard#token=...``, which browsers never send to the server) or typed into the page's
key form; the script keeps it in the tab's ``sessionStorage``, removes it from the URL at once
(``history.replaceState``), and sends it as ``Authorization: Bearer``.
"""
from __future__ import annotations

from typing import Any

import orjson
from flask import Blueprint, Flask, Response, current_app, render_template, request

from deniable.collector import keys, rollup, window
from deniable.collector.api import storage_guard
from deniable.collector.auth import require
from deniable.collector.errors import APIError
from deniable.collector.explain import bucket_flags, epsilon_note
from deniable.collector.params import time_range, whole_number
from deniable.collector.registry import Metric

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates",
               static_folder="static")
GRANULARITIES = ("hour", "day", "week")


def init_app(app: Flask) -> None:
    """Serve the dashboard from ``app``."""
    app.register_blueprint(bp)


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
    ``every`` (hour, day or week; default day), ``rolling`` (buckets to pool, default 1).
    The buckets have the shape of ``deniable report --every ... --format json``.
    """
    name = request.args.get("metric", "")
    metric = _registry().get(name)
    if metric is None:
        raise APIError(404, f"no metric named {name!r} is registered",
                       parameters={"metric": "must name a registered metric"})
    every = request.args.get("every", "day")
    if every not in GRANULARITIES:
        raise APIError(422, "'every' must be hour, day or week",
                       parameters={"every": f"one of {', '.join(GRANULARITIES)}"})
    window_size = whole_number("rolling", 1, 1, 1000)
    start, end = time_range()
    with storage_guard():
        hours = current_app.extensions["deniable.store"].counts(
            metric.name, metric.mechanism.id, start, end, metric.retention_days)
    first, count = rollup.grid_hours(start, end, every)
    step = rollup.SPAN_HOURS[every]
    policy = metric.policy
    n, ones = [0] * count, [0] * count
    hour_index, hour_slot = [], []
    for h in hours:
        index = keys.hour_index(h.start)
        slot = (rollup.period_hour(index, every) - first) // step
        hour_index.append(index)
        hour_slot.append(slot if 0 <= slot < count else -1)
        if 0 <= slot < count:
            n[slot] += h.n
            ones[slot] += h.ones
    # Each bucket's reporting periods: its interval holds over all of them (collector.window).
    periods = window.bucket_periods(hour_index, [h.n for h in hours], hour_slot, count, policy)
    bucket_hours = [first + i * step for i in range(count)]
    if window_size > 1:
        periods = window.rolling_periods(bucket_hours, n, periods, step * keys.HOUR_SECONDS,
                                         policy, window_size)
        n, ones = _trailing(n, window_size), _trailing(ones, window_size)
    mechanism = metric.mechanism
    confidence = 0.95
    starts = [keys.hour_start(h) for h in bucket_hours]
    partial = window.coverage_notes(starts, step * keys.HOUR_SECONDS, window_size, start, end)
    buckets = []
    for i in range(count):
        e = window.window_estimate(mechanism, policy, ones[i], n[i], periods[i], confidence)
        buckets.append({
            "start": starts[i].isoformat(),
            "end": keys.hour_start(bucket_hours[i] + step).isoformat(),
            "n": e.n, "ones": e.ones, "yes_rate": _finite(e.yes_rate),
            "estimate": _finite(e.value), "stderr": _finite(e.stderr), "ci_low": e.ci_low,
            "ci_high": e.ci_high, "clipped": e.clipped, "interval_clipped": e.interval_clipped,
            "wide": e.wide, "unclipped": _finite(e.unclipped), "periods": periods[i],
            "partial": bool(partial[i]),
            "flags": bucket_flags(e.n, e.clipped, e.wide, e.unclipped, e.interval_clipped,
                                  partial[i])})
    # The whole range pooled: every hour the store returned, over every period with reports.
    every_period = window.bucket_periods(hour_index, [h.n for h in hours], [0] * len(hours), 1,
                                         policy)[0]
    summary = window.window_estimate(mechanism, policy, sum(h.ones for h in hours),
                                     sum(h.n for h in hours), max(every_period, 1), confidence)
    body: dict[str, Any] = {
        "metric": metric.name, "version": metric.version, "description": metric.description,
        "mechanism": mechanism.id, "epsilon": mechanism.epsilon, "policy": policy.summary(),
        "estimand": window.estimand(policy, max(periods, default=1),
                                    step * keys.HOUR_SECONDS),
        "granularity": every, "window": window_size,
        "confidence": confidence, "buckets": buckets,
        "from": start.isoformat(), "to": end.isoformat(),
        "summary": {"n": summary.n, "yes_rate": _finite(summary.yes_rate),
                    "estimate": _finite(summary.value), "ci_low": summary.ci_low,
                    "ci_high": summary.ci_high, "clipped": summary.clipped,
                    "wide": summary.wide, "interval_clipped": summary.interval_clipped,
                    "periods": every_period,
                    "estimand": window.estimand(policy, every_period)},
        "note": epsilon_note(mechanism, summary.n, summary.confidence),
    }
    return Response(orjson.dumps(body), mimetype="application/json")


def _trailing(values: list[int], window: int) -> list[int]:
    """Each value summed with the ``window - 1`` before it (fewer at the start)."""
    out, running = [], 0
    for i, v in enumerate(values):
        running += v - (values[i - window] if i >= window else 0)
        out.append(running)
    return out


def _finite(x: float) -> float | None:
    return None if x != x else x
