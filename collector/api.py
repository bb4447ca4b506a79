"""The v1 HTTP API: ingest perturbed batches, list metrics, read perturbed counts."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import orjson
from flask import Blueprint, Response, current_app, request

from deniable.client.errors import Problem, WireFormatError
from deniable.client.wire import API_VERSION, MEDIA_TYPE, decode_batch
from deniable.collector.errors import APIError
from deniable.collector.registry import Metric
from deniable.collector import observability
from deniable.collector.store import UNAVAILABLE_ERRORS, Outcome, Store

bp = Blueprint("v1", __name__, url_prefix=f"/{API_VERSION}")

STORAGE_ERRORS = UNAVAILABLE_ERRORS
"""Redis errors that mean 'storage unavailable for now' (503), not a bug (500)."""


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=MEDIA_TYPE)


def _store() -> Store:
    return current_app.extensions["deniable.store"]


def _registry() -> dict[str, Metric]:
    return current_app.extensions["deniable.metrics"]


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
def post_reports() -> Response:
    """Accept one batch of perturbed bits, whole or not at all."""
    if request.mimetype != MEDIA_TYPE:
        raise APIError(415, f"the body must be {MEDIA_TYPE}")
    try:
        body = request.get_data(cache=False)
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise APIError(400, "the body is not valid JSON",
                       [Problem("", str(exc).split(":")[0])]) from exc
    if type(doc) is dict and type(doc.get("reports")) is list:
        observability.note_reports(len(doc["reports"]))
    registry = _registry()
    try:
        batch = decode_batch(doc, current_app.extensions["deniable.mechanisms"],
                             max_reports=current_app.config["MAX_BATCH_REPORTS"])
    except WireFormatError as exc:
        raise APIError(422, str(exc), exc.problems) from exc
    if _repeats_a_key(body, batch.n_reports):
        raise APIError(400, "the body repeats a JSON key; each key may appear once per object",
                       [Problem("", "repeats a key")])
    received_at = datetime.now(timezone.utc)
    retention = {name: registry[name].retention_days for name in batch.tallies}
    with storage_guard():
        outcome = _store().add_batch(batch, received_at, retention,
                                     current_app.config["BATCH_ID_TTL_SECONDS"])
    if outcome is Outcome.CONFLICT:
        raise APIError(409, "this batch_id was already used for a batch with other content",
                       [Problem("/batch_id", "already used for other content")])
    if outcome is Outcome.DUPLICATE:
        return _json({"batch_id": batch.batch_id, "accepted": 0, "duplicate": True}, 200)
    return _json({"batch_id": batch.batch_id, "accepted": batch.n_reports}, 202)


_KEY_END = re.compile(rb'"[ \t\n\r]*:')
_QUOTE_THEN_SPACE = (b'" ', b'"\n', b'"\t', b'"\r')


def _repeats_a_key(body: bytes, n_reports: int) -> bool:
    """Whether a batch that decoded cleanly had a key repeated (orjson keeps the last one).

    A valid batch has exactly 2 + 3 * n_reports keys, and none of its string values can hold
    a quote (ids, names and mechanism ids are checked against their patterns), so each
    ``"`` followed by ``:`` ends a key. More of them than keys means a key was repeated:
    one regex scan, instead of a second, duplicate-detecting parse.
    """
    if not any(gap in body for gap in _QUOTE_THEN_SPACE):
        return body.count(b'":') != 2 + 3 * n_reports  # compact JSON: one fast count
    return len(_KEY_END.findall(body)) != 2 + 3 * n_reports


@bp.get("/metrics")
def list_metrics() -> Response:
    """The registered metrics, each with its mechanism, exact P1 and Q, and epsilon."""
    return _json({"metrics": [m.describe() for m in _registry().values()]})


@bp.get("/metrics/<name>/counts")
def metric_counts(name: str) -> Response:
    """Perturbed counts per hour bucket over [from, to); by default the last 7 days."""
    metric = _registry().get(name)
    if metric is None:
        raise APIError(404, f"no metric named {name!r} is registered")
    now = datetime.now(timezone.utc)
    end = _parse_time("to", now)
    start = _parse_time("from", end - timedelta(days=7))
    if start >= end:
        raise APIError(422, "'from' must come before 'to'", parameters={"from": "after 'to'"})
    if end - start > timedelta(days=current_app.config["COUNTS_MAX_DAYS"]):
        raise APIError(422, "the range is too long",
                       parameters={"from": f"at most {current_app.config['COUNTS_MAX_DAYS']} "
                                           "days before 'to'"})
    with storage_guard():
        hours = _store().counts(metric.name, metric.mechanism.id, start, end)
    return _json({
        "metric": metric.name,
        "mechanism": metric.mechanism.id,
        "from": start.isoformat(), "to": end.isoformat(),
        "buckets": [{"start": h.start.isoformat(), "n": h.n, "ones": h.ones} for h in hours],
    })


def _parse_time(parameter: str, default: datetime) -> datetime:
    raw = request.args.get(parameter)
    if raw is None:
        return default
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise APIError(422, f"'{parameter}' is not an ISO 8601 time",
                       parameters={parameter: "must be an ISO 8601 time"}) from exc
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
