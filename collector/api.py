"""The v1 HTTP API: ingest perturbed batches, list metrics, read perturbed counts."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import orjson
from flask import Blueprint, Response, current_app, request

from deniable.client.errors import Problem, WireFormatError
from deniable.client.wire import API_VERSION, MEDIA_TYPE
from deniable.collector import clock, observability, rollup
from deniable.collector.auth import require
from deniable.collector.errors import APIError
from deniable.collector.live_registry import Entry, LiveRegistry, Version
from deniable.collector.store import UNAVAILABLE_ERRORS, Outcome, Store

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
        observability.count_storage_error(exc)
        current_app.logger.warning("storage unavailable: %s", type(exc).__name__)
        retry_after = str(current_app.config["RETRY_AFTER_SECONDS"])
        raise APIError(503, "storage is unavailable; retry later",
                       headers={"Retry-After": retry_after}) from exc


@bp.post("/reports")
@require("ingest")
def post_reports() -> Response:
    """Accept one batch of perturbed bits, whole or not at all."""
    body, doc = json_body()
    if type(doc) is dict and type(doc.get("reports")) is list:
        observability.note_reports(len(doc["reports"]))
    registry = _registry()
    try:
        with storage_guard():
            batch = registry.decode(doc, max_reports=current_app.config["MAX_BATCH_REPORTS"])
    except WireFormatError as exc:
        raise APIError(422, str(exc), exc.problems) from exc
    if len(batch.tallies) > current_app.config["MAX_BATCH_METRICS"]:
        raise APIError(422, "the batch holds too many distinct metrics",
                       [Problem("/reports", f"holds {len(batch.tallies)} distinct metrics; the "
                                f"most is {current_app.config['MAX_BATCH_METRICS']}")])
    if _repeats_a_key(body, batch.n_reports):
        raise APIError(400, "the body repeats a JSON key; each key may appear once per object",
                       [Problem("", "repeats a key")])
    received_at = clock.now()  # the server's receive time; never a device clock
    default_days = int(current_app.config["RETENTION_DAYS"])
    retention = {name: registry.retention_days(name, default_days) for name in batch.tallies}
    with storage_guard():
        outcome = _store().add_batch(batch, received_at, retention,
                                     current_app.config["BATCH_ID_TTL_SECONDS"])
    if outcome is Outcome.CONFLICT:
        raise APIError(409, "this batch_id was already used for a batch with other content",
                       [Problem("/batch_id", "already used for other content")])
    if outcome is Outcome.DUPLICATE:
        return _json({"batch_id": batch.batch_id, "accepted": 0, "duplicate": True}, 200)
    return _json({"batch_id": batch.batch_id, "accepted": batch.n_reports}, 202)


def _repeats_a_key(body: bytes, n_reports: int) -> bool:
    """Whether a batch that decoded cleanly had a key repeated (orjson keeps the last one).

    One count of the body's quote characters decides it exactly. A clean batch holds
    3 + 5 * n strings: 2 + 3n keys, its batch_id, and each report's metric and mechanism.
    None of them can hold a quote (keys are fixed names; values match their patterns or a
    registered id), so the body has exactly 2 * (3 + 5n) quote characters. A repeated key adds
    its own quotes (and its shadowed value's, if a string), and nothing can remove any.
    """
    return body.count(b'"') != 2 * (3 + 5 * n_reports)


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
    (retired metrics stay readable); ``granularity=day|week`` sums hours per UTC day or week."""
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
        hours = _store().counts(entry.name, version.mechanism.id, start, end)
    if granularity != "hour":
        hours = rollup.rollup(hours, granularity)
    return _json({
        "metric": entry.name,
        "mechanism": version.mechanism.id,
        "version": version.version,
        "retired": entry.retired,
        "granularity": granularity,
        "from": start.isoformat(), "to": end.isoformat(),
        "buckets": [{"start": h.start.isoformat(), "n": h.n, "ones": h.ones} for h in hours],
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


def json_body() -> tuple[bytes, object]:
    """The request's raw body and its parsed JSON: 415 if it is not JSON, 400 if malformed."""
    if request.mimetype != MEDIA_TYPE:
        raise APIError(415, f"the body must be {MEDIA_TYPE}")
    body = request.get_data(cache=False)
    try:
        return body, orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise APIError(400, "the body is not valid JSON",
                       [Problem("", str(exc).split(":")[0])]) from exc


def time_range(default_days: int = 7) -> tuple[datetime, datetime]:
    """The ``from``/``to`` query range: by default the ``default_days`` up to now.

    Raises:
        APIError: 422 naming the parameter, for a bad time, an empty or a too long range.
    """
    end = _parse_time("to", datetime.now(timezone.utc))
    start = _parse_time("from", end - timedelta(days=default_days))
    if start >= end:
        raise APIError(422, "'from' must come before 'to'", parameters={"from": "after 'to'"})
    limit = int(current_app.config["COUNTS_MAX_DAYS"])
    if end - start > timedelta(days=limit):
        raise APIError(422, "the range is too long",
                       parameters={"from": f"at most {limit} days before 'to'"})
    return start, end


def _parse_time(parameter: str, default: datetime) -> datetime:
    raw = request.args.get(parameter)
    if not raw:
        return default
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise APIError(422, f"'{parameter}' is not an ISO 8601 time",
                       parameters={parameter: "must be an ISO 8601 time"}) from exc
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
