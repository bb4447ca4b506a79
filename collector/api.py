"""The v1 HTTP API: ingest perturbed batches, list metrics, read perturbed counts."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import orjson
from flask import Blueprint, Response, current_app, request

from deniable.client.wire import API_VERSION, MEDIA_TYPE
from deniable.collector import rollup
from deniable.collector.auth import require
from deniable.collector.errors import APIError, storage_unavailable
from deniable.collector.live_registry import Entry, LiveRegistry, Version
from deniable.collector.params import json_body, time_range  # noqa: F401 (json_body: re-exported)
from deniable.collector.store import UNAVAILABLE_ERRORS, Store

bp = Blueprint("v1", __name__, url_prefix=f"/{API_VERSION}")

STORAGE_ERRORS = UNAVAILABLE_ERRORS
"""Redis errors that mean 'storage unavailable for now' (503), not a bug (500)."""


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=MEDIA_TYPE)


def _store() -> Store:
    return current_app.extensions["deniable.store"]


def _registry() -> LiveRegistry:
    return current_app.extensions["deniable.registry"]


@contextlib.contextmanager
def storage_guard() -> Iterator[None]:
    """Turn Redis being down or failing over into 503 with Retry-After."""
    try:
        yield
    except STORAGE_ERRORS as exc:
        raise storage_unavailable(exc, current_app.config["RETRY_AFTER_SECONDS"]) from exc


@bp.post("/reports")
def post_reports() -> Response:
    """Accept one batch of perturbed bits, whole or not at all.

    Served by ``IngestEndpoint`` (ingest.py), which runs in front of Flask: this rule gives the
    route its place in the URL map (405 for other methods, the OpenAPI check) and is never
    reached through ``create_app``'s WSGI app.
    """
    raise RuntimeError("POST /v1/reports is served by IngestEndpoint, in front of Flask")


@bp.get("/metrics")
@require("ingest", "read", "admin")
def list_metrics() -> Response:
    """The metrics accepting reports, each with its current mechanism, exact P1 and Q, and
    epsilon (retired metrics and older versions: GET /v1/admin/metrics)."""
    with storage_guard():
        active = _registry().active()
    return _json({"metrics": [m.describe() for m in active.values()]})


@bp.get("/metrics/<name>/counts")
@require("read")
def metric_counts(name: str) -> Response:
    """Perturbed counts per hour, day or week bucket over [from, to); by default the last
    7 days of the current version. ``version=N`` or ``mechanism=<id>`` reads an older version
    (retired metrics stay readable); ``granularity=day|week`` sums hours per UTC day or week.

    Every bucket holds ``counts``: all of the hour's counter slots, ``n`` (reports) first, then
    one per ``labels`` entry (a boolean's perturbed ones; a categorical metric's count per
    category). One-bit kinds also keep ``n`` and ``ones``; others ``n``. The document states the
    version's kind and declaration (``MetricSpec.describe``) and its slot ``labels``."""
    with storage_guard():
        entry = _registry().entry(name)
    if entry is None:
        raise APIError(404, f"no metric named {name!r} is registered")
    version = _parse_version(entry)
    granularity = request.args.get("granularity", "hour")
    if granularity not in rollup.GRANULARITIES:
        raise APIError(422, "unknown granularity",
                       parameters={"granularity": f"one of {', '.join(rollup.GRANULARITIES)}"})
    start, end = time_range()
    if granularity != "hour":
        start, end = rollup.align(start, end, granularity)
    with storage_guard():
        hours = _store().counts(entry.name, version.mechanism.id, start, end,
                               entry.retention_days)
    if granularity != "hour":
        hours = rollup.rollup(hours, granularity)
    one_bit = version.mechanism.width == 2
    return _json({
        "metric": entry.name,
        **version.spec.describe(),
        "labels": list(version.spec.labels),
        "mechanism": version.mechanism.id,
        "version": version.version,
        "current_version": entry.current.version,
        **version.policy.describe(),
        "retired": entry.retired,
        "granularity": granularity,
        "from": start.isoformat(), "to": end.isoformat(),
        "buckets": [{"start": h.start.isoformat(), "n": h.n, "ones": h.ones, "counts": h.counts}
                    if one_bit else {"start": h.start.isoformat(), "n": h.n, "counts": h.counts}
                    for h in hours],
    })


def _parse_version(entry: Entry) -> Version:
    """The version a counts request names by ``version`` or ``mechanism``; the current one."""
    raw_version, mechanism = request.args.get("version"), request.args.get("mechanism")
    number = None
    if raw_version is not None:
        if not (raw_version.isascii() and raw_version.isdigit() and len(raw_version) < 10):
            raise APIError(422, "'version' is not a version number",
                           parameters={"version": "must be a whole number"})
        number = int(raw_version)
    found = entry.version(number, mechanism)
    if found is None:
        raise APIError(404, f"metric {entry.name!r} has no such version",
                       parameters={"version" if number is not None else "mechanism":
                                   f"versions: {[(v.version, v.mechanism.id) for v in entry.versions]}"})
    return found
