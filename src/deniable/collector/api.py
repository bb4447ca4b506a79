"""The v1 HTTP API: ingest perturbed batches, list metrics, read perturbed counts."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import orjson
from flask import Blueprint, Response, current_app, request

from deniable.client.dimensions import SERIES, DimensionError
from deniable.client.wire import API_VERSION, MEDIA_TYPE
from deniable.core import keys, rollup
from deniable.collector.auth import require
from deniable.collector.errors import APIError
from deniable.collector.guard import STORAGE_ERRORS, storage_guard  # noqa: F401 (re-exported)
from deniable.collector.live_registry import Entry, LiveRegistry, Version
from deniable.collector.params import json_body, time_range  # noqa: F401 (json_body: re-exported)
from deniable.core.rollup import HourCount
from deniable.collector.store import Store, decode_counters, hour_counts, open_period_strings

bp = Blueprint("v1", __name__, url_prefix=f"/{API_VERSION}")



def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=MEDIA_TYPE)


def _store() -> Store:
    return current_app.extensions["deniable.store"]


def _registry() -> LiveRegistry:
    return current_app.extensions["deniable.registry"]


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


def _open_counts(entry: Entry, version: Version, start: datetime, end: datetime) -> Response:
    """An open-domain metric's counts: one bucket per reporting period the version declares
    (``period``: hour, UTC day or week) overlapping [start, end) that has reports (its
    counters are per period), each ``n`` and ``cells``: the non-zero counters as [slot, count]
    pairs (slot 1 + cell; ``keys.open_counters``). ``granularity`` names the period."""
    first_hour, end_hour = keys.hour_range(start, end)
    first_hour = max(first_hour, keys.visible_from(datetime.now(timezone.utc),
                                                   entry.retention_days))
    width = keys.width(version.mechanism.id)
    period = version.policy.period
    with storage_guard():
        strings = open_period_strings(_store().client, entry.name, version.mechanism.id, period,
                                      first_hour, end_hour)
    buckets = []
    for first, raw in strings:
        if raw is None:
            continue
        values = decode_counters(raw)[:width]
        if values[0]:
            buckets.append({"start": keys.hour_start(first).isoformat(), "n": values[0],
                            "cells": [[slot, values[slot]] for slot in range(1, width)
                                      if values[slot]]})
    return _json({"metric": entry.name, **version.spec.describe(),
                  "mechanism": version.mechanism.id, "version": version.version,
                  "current_version": entry.current.version, **version.policy.describe(),
                  "retired": entry.retired, "granularity": period,
                  "from": start.isoformat(), "to": end.isoformat(), "buckets": buckets})


@bp.get("/metrics/<name>/counts")
@require("read")
def metric_counts(name: str) -> Response:
    """Perturbed counts per hour, day or week bucket over [from, to); by default the last
    7 days of the current version. ``version=N`` or ``mechanism=<id>`` reads an older version
    (retired metrics stay readable); ``granularity=day|week`` sums hours per UTC day or week.

    Every bucket holds ``counts``: all of the hour's counter slots, ``n`` (reports) first, then
    one per ``labels`` entry (a boolean's perturbed ones; a categorical metric's count per
    category). One-bit kinds also keep ``n`` and ``ones``; others ``n``. The document states the
    version's kind and declaration (``MetricSpec.describe``) and its slot ``labels``.

    Public dimensions (the metric's current declaration): ``series=platform=ios`` serves that
    one series' buckets instead of the total's (the document then states ``series``);
    ``by=platform`` (or a declared combination, ``by=app_version,platform``) serves the total's
    buckets and, under ``series``, every series of that dimension (``other`` included, empty
    ones too), read in one round trip. A report that did not state the dimension is in the
    total only."""
    with storage_guard():
        entry = _registry().entry(name)
    if entry is None:
        raise APIError(404, f"no metric named {name!r} is registered")
    version = _parse_version(entry)
    granularity = request.args.get("granularity", "hour")
    if granularity not in rollup.GRANULARITIES:
        raise APIError(422, "unknown granularity",
                       parameters={"granularity": f"one of {', '.join(rollup.GRANULARITIES)}"})
    series, by, labels = _parse_series(entry)
    start, end = time_range()
    if granularity != "hour":
        start, end = rollup.align(start, end, granularity)
    mechanism_id = version.mechanism.id
    if keys.is_sparse(mechanism_id):
        return _open_counts(entry, version, start, end)
    by_series: dict[str, list[HourCount]] = {}
    with storage_guard():
        if by is None:
            hours = _store().counts(entry.name, mechanism_id, start, end, entry.retention_days,
                                    series=series)
        else:
            first, end_hour = keys.hour_range(start, end)
            first = max(first, keys.visible_from(datetime.now(timezone.utc),
                                                 entry.retention_days))
            read = _store().month_strings_by_series(entry.name, mechanism_id, [None, *labels],
                                                    first, end_hour)
            width = version.mechanism.width
            hours = hour_counts(read[None], first, end_hour, width)
            by_series = {label: hour_counts(read[label], first, end_hour, width)
                         for label in labels}
    if granularity != "hour":
        hours = rollup.rollup(hours, granularity)
        by_series = {label: rollup.rollup(found, granularity)
                     for label, found in by_series.items()}
    one_bit = version.mechanism.width == 2

    def buckets(found: list[HourCount]) -> list[dict[str, object]]:
        return [{"start": h.start.isoformat(), "n": h.n, "ones": h.ones, "counts": h.counts}
                if one_bit else {"start": h.start.isoformat(), "n": h.n, "counts": h.counts}
                for h in found]

    chosen: dict[str, object] = {}
    if series is not None:
        chosen = {"series": series}
    elif by is not None:
        chosen = {"by": by, "series": {label: buckets(found)
                                       for label, found in by_series.items()}}
    return _json({
        "metric": entry.name,
        **version.spec.describe(),
        "labels": list(version.spec.labels),
        "mechanism": version.mechanism.id,
        "version": version.version,
        "current_version": entry.current.version,
        **version.policy.describe(),
        "retired": entry.retired,
        **entry.dimensions.describe(),
        "granularity": granularity,
        "from": start.isoformat(), "to": end.isoformat(),
        **chosen,
        "buckets": buckets(hours),
    })


BY = re.compile(r"^[a-z][a-z0-9_]{0,31}(?:,[a-z][a-z0-9_]{0,31}){0,2}\Z")
"""A ``by`` parameter: a dimension name, or two or three joined by commas."""


def _parse_series(entry: Entry) -> tuple[str | None, str | None, list[str]]:
    """The ``series`` label or the ``by`` dimension (normalized: names sorted) a counts request
    names, and with ``by`` the labels of its series; (None, None, []) for the total.

    Raises:
        APIError: 422 for both, or a malformed one; 404 for one the metric does not declare.
    """
    series, by = request.args.get("series") or None, request.args.get("by") or None
    if series is not None and by is not None:
        raise APIError(422, "give 'series' or 'by', not both",
                       parameters={"by": "not with 'series'"})
    dimensions = entry.dimensions
    declared = (f"dimensions: {', '.join(dimensions.names)}" if dimensions else
                "the metric declares no dimensions")
    if series is not None:
        if not SERIES.match(series):
            raise APIError(422, "'series' is not a series label",
                           parameters={"series": "a series label such as platform=ios or "
                                                 "app_version=2.4,platform=ios"})
        parts = sorted(series.split(","), key=lambda part: part.partition("=")[0])
        series = ",".join(parts)  # the one spelling: names sorted, as the store writes it
        names = ",".join(part.partition("=")[0] for part in parts)
        try:
            if series not in dimensions.all_series(names):
                raise DimensionError(f"{series!r} is not a series", names)
        except DimensionError as exc:
            raise APIError(404, f"metric {entry.name!r} has no series {series!r}",
                           parameters={"series": declared}) from exc
        return series, None, []
    if by is not None:
        if not BY.match(by):
            raise APIError(422, "'by' is not a dimension name",
                           parameters={"by": "a dimension name, or a declared combination "
                                             "such as app_version,platform"})
        by = ",".join(sorted(by.split(",")))
        try:
            return None, by, dimensions.all_series(by)
        except DimensionError as exc:
            raise APIError(404, f"metric {entry.name!r} has no dimension or declared "
                                f"combination {by!r}", parameters={"by": declared}) from exc
    return None, None, []


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
