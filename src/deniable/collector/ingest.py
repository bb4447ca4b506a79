"""``POST /v1/reports``: the collector's hot path, served in front of Flask.

``IngestEndpoint`` is a plain WSGI callable. ``create_app`` puts it in front of Flask's own
WSGI app, so a batch never pays for Flask's per-request machinery (request and app contexts,
URL matching, ``Response`` objects, before/after hooks), which costs more than the work itself
(docs/operations.md, "Speed"). Every other route, and every other method on ``/v1/reports``,
goes on to Flask.

It shares every rule with the Flask routes (one definition each): ``Gate`` for keys and rate
limits, ``RequestRecorder`` for metrics and logs, ``problem_document`` for errors, and the
registry, the store and the key layout. The checks run in this order, each answered as
problem+json, and a rejected batch changes nothing in Redis:

1. key and rate limits: 401, 403, 429 with ``Retry-After``;
2. media type ``application/json``: 415; body over ``MAX_BODY_BYTES``: 413;
3. a body in the client's compact layout is read without a JSON parser
   (``decode_compact_batch``); any other (a body whose reports carry ``dims`` is one): JSON
   400, wire format, registered mechanisms and declared dimensions 422 (naming
   ``/reports/<i>/dims/<name>``), a repeated JSON key 400; then too many distinct metrics: 422;
4. one Lua script: 202 accepted, 200 duplicate (a re-sent batch), 409 (the batch id was used
   for other content).

With ``Prefer: handling=lenient`` (``deniable.client.wire.LENIENT_PREFERENCE``) step 3 refuses
per metric: the metrics whose reports break a rule are listed in the answer's ``refused``
member and not counted, the others are (202, or 200 for a re-send); only a batch whose every
metric is refused is answered 422 (with the same ``refused`` member), and nothing is recorded.

Redis down or failing over, at any step: 503 with ``Retry-After``. Anything unexpected: 500,
logged, with no stack trace in the answer.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import orjson
from flask import Flask

from deniable.client.errors import Problem, WireFormatError
from deniable.client.kinds import payload_field
from deniable.client.wire import (LENIENT_PREFERENCE, MEDIA_TYPE, PREFER_HEADER,
                                  REPORTS_PATH, Batch, refused_document, wants_lenient)
from deniable.collector import clock
from deniable.collector.auth import Gate
from deniable.collector.errors import PROBLEM_TYPE, APIError, as_problem
from deniable.collector.jsonbody import parse_json, repeated_key
from deniable.collector.live_registry import LiveRegistry
from deniable.collector.observability import (REQUEST_ID_HEADER, RequestRecorder,
                                              current_request_id, request_id_for)
from deniable.collector.settings import settings_of
from deniable.collector.store import Outcome, Store

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
ROLES = ("ingest",)


class IngestEndpoint:
    """Accepts one batch of perturbed bits per request, whole or not at all (or per metric,
    if the client prefers ``handling=lenient``).

    Args:
        app: the collector's Flask app, already holding its store, registry and gate.
        recorder: counts and logs each answered request.
    """

    def __init__(self, app: Flask, recorder: RequestRecorder) -> None:
        settings = settings_of(app)
        self.store: Store = app.extensions["deniable.store"]
        self.registry: LiveRegistry = app.extensions["deniable.registry"]
        self.gate: Gate = app.extensions["deniable.gate"]
        self.recorder = recorder
        self.max_body_bytes = settings.limits.max_body_bytes
        self.max_reports = settings.limits.max_batch_reports
        self.max_metrics = settings.limits.max_batch_metrics
        self.default_retention_days = settings.metrics.retention_days
        self.batch_id_ttl_seconds = settings.limits.batch_id_ttl_seconds
        self.retry_after_seconds = settings.redis.retry_after_seconds
        self.demo_clock_file = settings.metrics.demo_clock_file

    def in_front_of(self, rest: WSGIApp) -> WSGIApp:
        """A WSGI app that serves ``POST /v1/reports`` here and everything else by ``rest``."""

        def dispatch(environ: dict[str, Any],
                     start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == REPORTS_PATH and environ.get("REQUEST_METHOD") == "POST":
                return self(environ, start_response)
            return rest(environ, start_response)

        return dispatch

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        request_id = request_id_for(environ.get("HTTP_X_REQUEST_ID"))
        context = current_request_id.set(request_id)
        n_reports: int | None = None  # for the report counters, once known
        n_refused = 0
        headers: dict[str, str] = {}
        lenient = wants_lenient(environ.get(_PREFER_ENVIRON))
        try:
            body = self._admit(environ)
            batch = self.registry.decode_compact(body, self.max_reports)
            if batch is None:  # not as our client writes it: the careful path
                doc = parse_json(body)
                if type(doc) is dict and type(doc.get("reports")) is list:
                    n_reports = len(doc["reports"])
                batch = self._decode(body, doc, lenient)
            n_reports = batch.n_reports
            status, payload = self._apply(batch)
            n_reports, n_refused = batch.n_accepted, batch.n_reports - batch.n_accepted
            content_type = MEDIA_TYPE
        except Exception as exc:
            problem = as_problem(exc, self.retry_after_seconds)
            status, payload, content_type = problem.status, problem.document(), PROBLEM_TYPE
            headers = problem.headers
        if lenient and (status < 300 or status == 422):
            headers = {**headers, "Preference-Applied": LENIENT_PREFERENCE}
        try:
            start_response(_STATUS_LINES[status], [
                ("Content-Type", content_type), ("Content-Length", str(len(payload))),
                (REQUEST_ID_HEADER, request_id), *headers.items()])
            self.recorder.record("POST", REPORTS_PATH, status, time.perf_counter() - started)
            self.recorder.record_batch(status, n_reports, n_refused)
        finally:
            current_request_id.reset(context)
        return [payload]

    def _admit(self, environ: dict[str, Any]) -> bytes:
        """Check the key, rate limits, media type and size; return the body."""
        self.gate.admit(environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR"), ROLES)
        media_type = environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
        if media_type != MEDIA_TYPE:
            raise APIError(415, f"the body must be {MEDIA_TYPE}")
        return self._read_body(environ)

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        """The whole body, at most MAX_BODY_BYTES (413 beyond), sized or chunked; 400 if the
        client stops sending before its end."""
        length = environ.get("CONTENT_LENGTH")
        if length:
            if not length.isdigit():
                raise APIError(400, "the Content-Length header is not a number")
            if int(length) > self.max_body_bytes:
                raise self._too_large()
            body = _read(environ, int(length))
            if len(body) < int(length):
                raise APIError(400, "the body ended before its Content-Length")
            return body
        if not environ.get("wsgi.input_terminated"):
            return b""  # no length and a stream that may not end: no body, as in werkzeug
        body = _read(environ, self.max_body_bytes + 1)  # chunked: read one byte too many
        if len(body) > self.max_body_bytes:
            raise self._too_large()
        return body

    def _too_large(self) -> APIError:
        return APIError(413, f"the body is larger than {self.max_body_bytes} bytes")

    def _decode(self, body: bytes, doc: object, lenient: bool = False) -> Batch:
        """Validate a parsed batch in any JSON layout, naming every offending field; with
        ``lenient``, refuse per metric (422 only if every metric is refused)."""
        try:
            batch = self.registry.decode(doc, max_reports=self.max_reports, lenient=lenient)
        except WireFormatError as exc:
            raise APIError(422, str(exc), exc.problems) from exc
        if batch.refused:
            if not batch.tallies:
                raise APIError(422, "every metric of the batch was refused",
                               [p for r in batch.refused.values() for p in r.problems],
                               members={"refused": refused_document(batch.refused)})
            # Refused reports may hold any fields: decide a repeated key exactly.
            if repeated_key(body) is not None:
                raise _repeated_key()
            return batch
        strings = sum(tally.n for tally in batch.tallies.values()
                      if payload_field(tally.mechanism) == "bits")
        # Valid now: every report is an object, and every dims an object of strings.
        stated = [r["dims"] for r in doc["reports"] if "dims" in r]  # type: ignore[index]
        if stated:
            strings += sum(1 + 2 * len(dims) for dims in stated)
            if any('"' in value for dims in stated for value in dims.values()):
                # A value counted as "other" may hold an escaped quote: check exactly.
                if repeated_key(body) is not None:
                    raise _repeated_key()
                return batch
        if repeats_a_key(body, batch.n_reports, strings):
            raise _repeated_key()
        return batch

    def _apply(self, batch: Batch) -> tuple[int, bytes]:
        """Apply a valid batch in one script: the status and the JSON answer."""
        n_metrics = len(batch.tallies) + len(batch.refused)
        if n_metrics > self.max_metrics:
            raise APIError(422, "the batch holds too many distinct metrics",
                           [Problem("/reports", f"holds {n_metrics} distinct metrics; "
                                    f"the most is {self.max_metrics}")])
        received_at = clock.now(self.demo_clock_file)  # the server's time, never a device's
        retention = {name: self.registry.retention_days(name, self.default_retention_days)
                     for name in batch.tallies}
        periods = {name: self.registry.period(name, tally.mechanism)
                   for name, tally in batch.tallies.items() if tally.cells}
        outcome = self.store.add_batch(batch, received_at, retention, self.batch_id_ttl_seconds,
                                       periods)
        if outcome is Outcome.CONFLICT:
            raise APIError(409, "this batch_id was already used for a batch with other content",
                           [Problem("/batch_id", "already used for other content")])
        refused = {"refused": refused_document(batch.refused)} if batch.refused else {}
        if outcome is Outcome.DUPLICATE:
            return 200, orjson.dumps({"batch_id": batch.batch_id, "accepted": 0,
                                      "duplicate": True, **refused})
        return 202, orjson.dumps({"batch_id": batch.batch_id, "accepted": batch.n_accepted,
                                  **refused})


def _repeated_key() -> APIError:
    return APIError(400, "the body repeats a JSON key; each key may appear once per object",
                    [Problem("", "repeats a key")])


def _read(environ: dict[str, Any], size: int) -> bytes:
    """Up to ``size`` bytes of the body; 400 if the client's stream breaks (a bad chunk)."""
    try:
        return bytes(environ["wsgi.input"].read(size))
    except Exception as exc:  # the server's own error type for a broken client stream
        raise APIError(400, "the body could not be read to its end") from exc


def repeats_a_key(body: bytes, n_reports: int, string_payloads: int = 0) -> bool:
    """Whether a batch that decoded cleanly had a key repeated (orjson keeps the last one).

    One count of the body's quote characters decides it exactly. A clean batch of n reports
    holds 3 + 5n strings: 2 + 3n keys, its batch_id, each report's metric and mechanism, plus
    one more per report whose payload is a string (an OUE ``bits``: ``string_payloads``), and
    a report's ``dims`` adds 1 + 2 per dimension it states (the caller adds those too). None of
    them can hold a quote (keys are fixed or declared names; values match their patterns or a
    registered id; a dimension value counted as ``other`` may, and the caller checks such a
    body otherwise), so the body has exactly twice that many quote characters. A repeated key
    adds its own quotes (and its shadowed value's, if a string), and nothing can remove any.
    """
    return body.count(b'"') != 2 * (3 + 5 * n_reports + string_payloads)


_PREFER_ENVIRON = "HTTP_" + PREFER_HEADER.upper()
_STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}
