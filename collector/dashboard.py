"""The live dashboard at ``/dashboard``: the registered metrics and, for a chosen range, each
one's estimate over time with its interval, the raw yes-rate and n per bucket.

The page is static HTML plus a small same-origin script (no CDN; it works offline). Its numbers
come from ``GET /dashboard/data``, which the server computes with ``deniable.analysis`` (the
mechanism's one estimator), so the browser only draws. numpy is imported on the first data
request, never at the collector's import.

Register it with ``dashboard.init_app(app)``. The data endpoint wants a read token, like every
other read endpoint. The page itself holds no counts, only the names and descriptions of the
active metrics (which every ingest client can list too); it forwards a token given in its URL
fragment (``/dashboard#token=...``, which browsers never send to the server) as
``Authorization: Bearer`` on its data requests.
"""
from __future__ import annotations

from typing import Any

import orjson
from flask import Blueprint, Flask, Response, current_app, render_template, request

from deniable.collector.api import storage_guard, time_range
from deniable.collector.auth import require
from deniable.collector.errors import APIError
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
    """The dashboard page: metric list, range controls, one chart per metric."""
    metrics = [m.describe() for m in _registry().values()]
    return render_template("dashboard.html", metrics=metrics)


@bp.get("/data")
@require("read")
def data() -> Response:
    """One metric's time series and pooled summary over [from, to), as JSON.

    Query: ``metric`` (required), ``from``/``to`` (ISO 8601; default the last 7 days),
    ``every`` (hour, day or week; default day), ``rolling`` (buckets to pool, default 1).
    The buckets have the shape of ``deniable report --every ... --format json``.
    """
    from deniable.analysis.estimate import summarize
    from deniable.analysis.html import epsilon_note
    from deniable.analysis.report import series_document
    from deniable.analysis.sources import MetricCounts, MetricInfo
    from deniable.analysis.timeseries import rolling, series

    name = request.args.get("metric", "")
    metric = _registry().get(name)
    if metric is None:
        raise APIError(404, f"no metric named {name!r} is registered",
                       parameters={"metric": "must name a registered metric"})
    every = request.args.get("every", "day")
    if every not in GRANULARITIES:
        raise APIError(422, "'every' must be hour, day or week",
                       parameters={"every": f"one of {', '.join(GRANULARITIES)}"})
    window = _whole("rolling", 1, 1, 1000)
    start, end = time_range()
    with storage_guard():
        hours = current_app.extensions["deniable.store"].counts(
            metric.name, metric.mechanism.id, start, end)
    import numpy as np

    info = MetricInfo(metric.name, metric.description, metric.mechanism)
    counts = MetricCounts(info, [h.start for h in hours],
                          np.array([h.n for h in hours], dtype=np.int64),
                          np.array([h.ones for h in hours], dtype=np.int64))
    ts = series(counts, every, start, end)
    if window > 1:
        ts = rolling(ts, window)
    summary = summarize(counts)
    body: dict[str, Any] = {
        **series_document(ts), "from": start.isoformat(), "to": end.isoformat(),
        "summary": {"n": summary.n, "yes_rate": _finite(summary.yes_rate),
                    "estimate": _finite(summary.estimate), "ci_low": summary.ci_low,
                    "ci_high": summary.ci_high, "clipped": summary.clipped,
                    "wide": summary.wide},
        "note": epsilon_note(metric.mechanism, summary.n, summary.confidence),
    }
    return Response(orjson.dumps(body), mimetype="application/json")


def _finite(x: float) -> float | None:
    return None if x != x else x


def _whole(parameter: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(parameter)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise APIError(422, f"'{parameter}' must be a whole number in [{low}, {high}]",
                       parameters={parameter: f"a whole number in [{low}, {high}]"})
    return int(raw)
