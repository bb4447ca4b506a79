"""Prometheus metrics, JSON logs, audit lines and request ids for the collector.

``init_app(app)`` wires them into a Flask app:

- ``GET /metrics`` in the Prometheus text format. Under gunicorn every worker writes its
  counts to ``PROMETHEUS_MULTIPROC_DIR`` (``deniable serve`` sets it up before forking, see
  ``deniable.collector.server.prepare_metrics_dir``), and the endpoint adds up all workers.
  Process metrics (memory, CPU, open file descriptors, live workers) are kept per worker and
  aggregated over live workers, since prometheus_client's own process collector sees only the
  process that answers the scrape; ``deniable_redis_up`` says whether Redis would take a write.
- One JSON object per log line on stderr, with the request id of the request being served.
  Admin actions write one line each to the ``deniable.audit`` logger (``audit``).
- ``X-Request-Id``: a well-formed incoming id is kept, otherwise a fresh one is made; every
  response echoes it.

Privacy and bounds: nothing here sees a client address, a credential or a report body. Every
label value comes from a closed set fixed by the code, so no request can add a series: methods
outside ``METHODS`` are counted as ``OTHER``, routes are the app's URL rules
(``/v1/metrics/<name>/counts``, never raw paths) or ``<unmatched>``, statuses outside
``STATUSES`` are ``other``. The cache of label children is bounded as well (``CHILD_LIMIT``).
"""
from __future__ import annotations

import atexit
import logging
import os
import re
import resource
import select
import sys
import threading
import time
import traceback
import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any

import orjson
import redis
from flask import Flask, Response, g, request
from prometheus_client import (CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter,
                               Gauge, Histogram, generate_latest, multiprocess, values)

from deniable.collector.process import current_pid
from deniable.collector.store import unavailable

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}\Z")
"""Incoming request ids we keep: 8-64 letters, digits, '-' or '_' (a UUID, a hex or base64url
token). Anything else, dots included, is replaced, so an address cannot ride in on it."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UNMATCHED = "<unmatched>"
REQUEST_LOGGER = "deniable.collector.requests"
AUDIT_LOGGER = "deniable.audit"

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
"""Method label values kept as they are; any other method is counted as ``OTHER``."""
OTHER_METHOD = "OTHER"
STATUSES = frozenset(status.value for status in HTTPStatus)
"""Status label values kept as they are (the registered HTTP statuses); others are ``other``."""
CHILD_LIMIT = 4096
"""Most label children cached per process; past it, children are looked up each time."""

REASONS = {400: "malformed", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
           405: "method_not_allowed", 409: "conflict", 413: "too_large",
           415: "unsupported_media_type", 422: "invalid", 429: "rate_limited",
           500: "internal", 503: "storage_unavailable"}
"""Why a batch was rejected, by HTTP status: a small fixed set of label values."""

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

if os.environ.get(MULTIPROC_ENV):
    # Every value write checks for a fork; let it do so without a getpid system call.
    values.ValueClass = values.MultiProcessValue(process_identifier=current_pid)

REQUESTS = Counter("deniable_http_requests_total", "HTTP requests answered.",
                   ["method", "route", "status"])
LATENCY = Histogram("deniable_http_request_duration_seconds",
                    "Time to answer a request, in seconds, from the app's first look at it.",
                    ["method", "route"], buckets=LATENCY_BUCKETS)
BATCHES = Counter("deniable_batches_total",
                  "Batches posted to /v1/reports, by outcome (accepted, duplicate, rejected) "
                  "and reason for rejection.", ["outcome", "reason"])
REPORTS = Counter("deniable_reports_total",
                  "Reports in batches posted to /v1/reports, by outcome and reason (rejected "
                  "reports are counted when the body held a list of reports).",
                  ["outcome", "reason"])
STORAGE_ERRORS = Counter("deniable_storage_errors_total",
                         "Errors talking to Redis, by exception class.", ["kind"])

REDIS_UP = Gauge("deniable_redis_up",
                 "1 if every Redis master would take a write at the last scrape (a probe "
                 "that writes nothing), else 0; also set to 0 by any storage outage error "
                 "on a request (down, read-only, full, CLUSTERDOWN, MISCONF).",
                 multiprocess_mode="livemostrecent")
WORKERS = Gauge("deniable_workers", "Live worker processes serving requests.",
                multiprocess_mode="livesum")
RESIDENT_MEMORY = Gauge("deniable_process_resident_memory_bytes",
                        "Resident memory of all live workers together, in bytes.",
                        multiprocess_mode="livesum")
MAX_RESIDENT_MEMORY = Gauge("deniable_process_max_resident_memory_bytes",
                            "Resident memory of the largest live worker, in bytes.",
                            multiprocess_mode="livemax")
OPEN_FDS = Gauge("deniable_process_open_fds",
                 "Open file descriptors of all live workers together.",
                 multiprocess_mode="livesum")
MAX_OPEN_FDS = Gauge("deniable_process_max_open_fds_ratio",
                     "Highest share of its file descriptor limit any live worker uses (0-1).",
                     multiprocess_mode="livemax")
CPU_SECONDS = Counter("deniable_process_cpu_seconds",
                      "CPU time (user + system) used by the workers, dead ones included, in "
                      "seconds.")

UNMIGRATED = Gauge("deniable_unmigrated_counters",
                   "1 while layout-1 counters hashes are left in Redis (reads undercount until "
                   "`deniable migrate` moves them), else 0.", multiprocess_mode="livemax")

_STORAGE_ERROR_CLASSES = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)


class ProcessStats:
    """Keeps this worker's process gauges fresh: at most once per ``every_seconds``, on a
    request, and at each scrape. Reads ``/proc/self`` (Linux); elsewhere only the worker
    count and CPU time are kept.

    Each worker writes its own values; the gauges' multiprocess modes add them up (or take
    the largest) over live workers, and gunicorn's ``child_exit`` hook (``mark_worker_dead``)
    removes a dead worker's values.
    """

    def __init__(self, every_seconds: float = 1.0) -> None:
        self.every_seconds = every_seconds
        self._pid = -1
        self._next = 0.0
        self._cpu = 0.0
        self._lock = threading.Lock()
        self._page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.forked = False  # whether this process was forked after this module's import
        os.register_at_fork(after_in_child=self._was_forked)

    def _was_forked(self) -> None:
        self.forked = True
        self._lock = threading.Lock()  # one held by a parent's thread at fork is unusable

    def maybe_update(self) -> None:
        """Update if the last update is older than ``every_seconds`` (cheap otherwise)."""
        if time.monotonic() >= self._next or self._pid != current_pid():
            self.update()

    def update(self) -> None:
        """Read this process's memory, CPU time and descriptors into the gauges now."""
        with self._lock:
            pid = current_pid()
            if pid != self._pid:  # first update in this process (a fresh worker)
                self._pid, self._cpu = pid, 0.0
                WORKERS.set(1)
            self._next = time.monotonic() + self.every_seconds
            times = os.times()
            cpu = times.user + times.system
            if cpu > self._cpu:
                CPU_SECONDS.inc(cpu - self._cpu)
                self._cpu = cpu
            try:
                with open("/proc/self/statm", "rb") as statm:
                    rss = int(statm.read().split()[1]) * self._page_size
                fds = len(os.listdir("/proc/self/fd"))
            except OSError:
                return
            RESIDENT_MEMORY.set(rss)
            MAX_RESIDENT_MEMORY.set(rss)
            OPEN_FDS.set(fds)
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if limit > 0:
                MAX_OPEN_FDS.set(fds / limit)


_PROCESS = ProcessStats()


current_request_id: ContextVar[str | None] = ContextVar("deniable_request_id", default=None)
"""The id of the request being served, stamped on every log line written while serving it."""


def request_id_for(incoming: str | None) -> str:
    """The id for a request: its ``X-Request-Id`` if well-formed, else a fresh random one."""
    return incoming if incoming is not None and REQUEST_ID.match(incoming) else uuid.uuid4().hex


class RequestRecorder:
    """Counts and logs each answered request: the one definition, for Flask's routes and for
    the ingest endpoint that runs in front of Flask.

    Args:
        log_requests: write one JSON line per request (the ``LOG_REQUESTS`` setting).
    """

    def __init__(self, log_requests: bool, lines: RequestLineHandler) -> None:
        self.log_requests = log_requests
        self._lines = lines
        self._log = logging.getLogger(REQUEST_LOGGER)

    def record(self, method: str, route: str, status: int, elapsed_seconds: float) -> None:
        """Count one answered request and log it (never its address, credentials or body).

        The line goes straight to its handler: the logging machinery (a record, its handlers,
        the formatter's scrubbing of a message that is always "request") would cost more than
        the line.
        """
        method = method if method in METHODS else OTHER_METHOD
        _child(REQUESTS, method, route, str(status) if status in STATUSES else "other").inc()
        _child(LATENCY, method, route).observe(elapsed_seconds)
        _PROCESS.maybe_update()
        if self.log_requests and self._log.isEnabledFor(logging.INFO):
            self._lines.add_line(json_line(time.time(), "info", REQUEST_LOGGER, "request", {
                "method": method, "route": route, "status": status,
                "duration_ms": round(elapsed_seconds * 1000, 3)}))

    def record_batch(self, status: int, n_reports: int | None, n_refused: int = 0) -> None:
        """Count one batch posted to /v1/reports, and its reports, by outcome and reason;
        ``n_refused`` reports of a batch accepted per metric count as rejected, invalid."""
        if status == 202:
            outcome, reason = "accepted", ""
        elif status == 200:
            outcome, reason = "duplicate", ""
        else:
            outcome, reason = "rejected", REASONS.get(status, "other")
        _child(BATCHES, outcome, reason).inc()
        if n_reports:
            _child(REPORTS, outcome, reason).inc(n_reports)
        if n_refused:
            _child(REPORTS, "rejected", REASONS[422]).inc(n_refused)


def init_app(app: Flask, log_requests: bool, lines: RequestLineHandler) -> RequestRecorder:
    """Add request ids, per-request metrics and JSON request logs, and ``GET /metrics``.

    Args:
        app: the collector's app.
        log_requests: write one JSON line per request (the ``observability.log_requests``
            setting; settings.py imports errors.py, which imports this module, so the app
            factory passes its typed values in).
        lines: the handler of request lines, from ``configure_logging``.

    Returns the recorder, for endpoints served in front of Flask.
    """
    recorder = RequestRecorder(log_requests, lines)
    if _PROCESS.forked:
        # A gunicorn worker loading the app (no preload): it counts itself at once, idle or
        # not. The app `deniable serve` builds in the master only to fail fast does not.
        _PROCESS.update()

    @app.before_request
    def _start() -> None:
        g.request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        g.request_id_token = current_request_id.set(g.request_id)
        g.started = time.perf_counter()

    @app.after_request
    def _finish(response: Response) -> Response:
        request_id = g.get("request_id") or uuid.uuid4().hex
        response.headers[REQUEST_ID_HEADER] = request_id
        elapsed = time.perf_counter() - g.get("started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
        recorder.record(request.method, route, response.status_code, elapsed)
        return response

    @app.teardown_request
    def _forget(_: BaseException | None) -> None:
        token = g.pop("request_id_token", None)
        if token is not None:
            current_request_id.reset(token)

    @app.get("/metrics")
    def prometheus_metrics() -> Response:
        """Prometheus text format; under gunicorn, the sum over all workers."""
        _PROCESS.update()
        check_redis(app.extensions["deniable.store"])
        recheck = app.extensions.get("deniable.unmigrated")
        if recheck is not None:  # layout-1 counters were left at start: migrated since?
            recheck()
        if os.environ.get(MULTIPROC_ENV):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            body = generate_latest(registry)
        else:
            body = generate_latest(REGISTRY)
        return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return recorder


ALERT_STATUSES = ("401", "500")
"""Statuses that alerts read from ``deniable_http_requests_total`` (deploy/prometheus/alerts.yml):
made at 0 for every route at start-up (``start_series``)."""


def start_series(app: Flask) -> None:
    """Make at 0, now, every labelled series an alert reads (deploy/prometheus/alerts.yml).

    A labelled counter otherwise appears only at its first increment: until then an alert on
    it evaluates to nothing rather than 0 ("no reports" after a restart never fired), and
    ``increase()`` misses the step from nothing to 1 (a first 500). Call once the app's routes
    are registered. Adds about 90 series: batches and reports by every outcome and reason,
    requests of every route with the ``ALERT_STATUSES``, the ingest route's latency.
    """
    outcomes = [("accepted", ""), ("duplicate", ""),
                *(("rejected", reason) for reason in sorted(set(REASONS.values())))]
    for outcome, reason in outcomes:
        _child(BATCHES, outcome, reason)
        _child(REPORTS, outcome, reason)
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) & METHODS - {"HEAD", "OPTIONS"}):
            for status in ALERT_STATUSES:
                _child(REQUESTS, method, rule.rule, status)
    _child(LATENCY, "POST", "/v1/reports")


_CHILDREN: dict[tuple[object, ...], Any] = {}


def _child(metric: Counter | Histogram, *labels: str) -> Any:
    """``metric.labels(*labels)``, cached (at most CHILD_LIMIT entries). Callers pass label
    values from closed sets only: prometheus_client keeps every child it ever made."""
    key = (metric, *labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = metric.labels(*labels)
        if len(_CHILDREN) < CHILD_LIMIT:
            _CHILDREN[key] = child
    return child


def count_storage_error(exc: BaseException) -> None:
    """Count an error from Redis (other exceptions are ignored); one that means storage is
    unavailable (store.unavailable: down, read-only, full, CLUSTERDOWN, MISCONF...) also sets
    ``deniable_redis_up`` to 0."""
    if isinstance(exc, _STORAGE_ERROR_CLASSES):
        # The class name comes from redis-py's closed set of exception classes (and ours).
        _child(STORAGE_ERRORS, type(exc).__name__).inc()
        if unavailable(exc):
            REDIS_UP.set(0)


def check_redis(store: Any) -> list[Exception]:
    """Whether Redis would take a write (``store.write_refusals()``), recorded in
    ``deniable_redis_up`` (each refusal is counted as a storage error).

    Returns:
        The refusals: empty when every master takes writes.
    """
    try:
        refusals = store.write_refusals()
    except Exception as exc:  # noqa: BLE001 (any failure means "not writable")
        refusals = [exc]
    for refusal in refusals:
        count_storage_error(refusal)
    REDIS_UP.set(0 if refusals else 1)
    return refusals


def set_unmigrated(left: bool) -> None:
    """Record whether layout-1 counters are left (``deniable_unmigrated_counters``). The
    master of ``deniable serve``, which builds the app only to fail fast, records nothing: it
    never scrapes again, and under multiprocess mode its value would outlive every worker."""
    if os.environ.get(MULTIPROC_ENV) and not _PROCESS.forked:
        return
    UNMIGRATED.set(1 if left else 0)


def audit(action: str, **fields: Any) -> None:
    """Write one audit line for an admin action to the ``deniable.audit`` logger.

    Pass identifiers only: the metric, the mechanism, the acting key's *id* (``key_id``),
    never a key or its hash.
    """
    logging.getLogger(AUDIT_LOGGER).info("audit", extra={"fields": {"action": action,
                                                                    **fields}})


def mark_worker_dead(pid: int) -> None:
    """Tell prometheus_client a worker exited (gunicorn's ``child_exit`` hook)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)


_ADDRESS = re.compile(
    # IPv6 ending in an IPv4 address (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d), whole
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,6}\d{1,3}(?:\.\d{1,3}){3}(?![\w.])"
    r"|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])"   # IPv4
    r"|(?<=ip=)\S*?(?=: |\s|$)"                      # gunicorn's "ip=<address>: ..."
    r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"  # IPv6, in full
    r"|(?<![\w:])[0-9A-Fa-f:]*::[0-9A-Fa-f:]*(?![\w:])")  # IPv6, compressed


def redact_addresses(text: str) -> str:
    """Replace every IP address in a log message with ``<address>``.

    The collector never logs one itself, but gunicorn does (``Invalid request from
    ip=...``, on malformed HTTP): this keeps addresses out of every line all the same.
    """
    return _ADDRESS.sub("<address>", text)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id and extra fields.

    Pass fields with ``extra={"fields": {...}}``. Never pass a client address, a credential
    or a report body.
    """

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        extra: dict[str, Any] = dict(fields) if isinstance(fields, dict) else {}
        if record.exc_info and record.exc_info[1] is not None:
            extra["error"] = type(record.exc_info[1]).__name__
            extra["traceback"] = redact_addresses(
                "".join(traceback.format_exception(*record.exc_info)))
        return json_line(record.created, record.levelname.lower(), record.name,
                         redact_addresses(record.getMessage()), extra)


def json_line(created: float, level: str, logger: str, message: str,
              fields: dict[str, Any] | None = None) -> str:
    """One log line: ts (UTC, ms), level, logger, message, the request id if any, fields."""
    line: dict[str, Any] = {
        "ts": datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds"),
        "level": level, "logger": logger, "message": message}
    request_id = current_request_id.get()
    if request_id:
        line["request_id"] = request_id
    if fields:
        line.update(fields)
    return orjson.dumps(line, default=str).decode()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class RequestLineHandler(logging.Handler):
    """Writes request lines to stderr in batches: one write per ``delay_seconds`` (or per
    ``select.PIPE_BUF`` bytes) instead of one per request.

    A line reaches stderr at most ``delay_seconds`` after its request was answered, in order.
    Each write holds whole lines and at most PIPE_BUF bytes, so lines of several workers that
    share one pipe never interleave. Lines still buffered are written when the process exits
    (``logging.shutdown``); a process killed outright (SIGKILL) loses at most its last
    ``delay_seconds`` of request lines. ``delay_seconds`` 0 writes every line at once.
    """

    def __init__(self, delay_seconds: float, stream: Any = None) -> None:
        super().__init__()
        self.delay_seconds = float(delay_seconds)
        self.stream = stream  # None: whatever sys.stderr is at each write
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._since = 0.0
        self._flusher_pid = -1
        os.register_at_fork(after_in_child=self._forget_parents_lines)
        # Also at exit on our own: gunicorn's logging.config.dictConfig drops the handlers that
        # existed before it from the list logging.shutdown flushes.
        atexit.register(self.flush)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add_line(self.format(record))
        except Exception:  # noqa: BLE001 (logging's contract: report, never raise)
            self.handleError(record)

    def add_line(self, line: str) -> None:
        """Queue one formatted line (without its newline) for writing."""
        text = line + "\n"
        size = len(text.encode())
        with self.lock:  # type: ignore[union-attr]
            if self._pending_bytes + size > select.PIPE_BUF:
                self._write()
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(text)
            self._pending_bytes += size
            if time.monotonic() - self._since >= self.delay_seconds:
                self._write()
            elif self._flusher_pid != current_pid():  # one flusher thread per process
                self._flusher_pid = current_pid()
                threading.Thread(target=self._flush_forever, name="deniable-request-log",
                                 daemon=True).start()

    def flush(self) -> None:
        """Write every buffered line now."""
        with self.lock:  # type: ignore[union-attr]
            self._write()

    def _write(self) -> None:
        if self._pending:
            stream = self.stream or sys.stderr
            stream.write("".join(self._pending))
            stream.flush()
            self._pending, self._pending_bytes = [], 0

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self.delay_seconds)
            self.flush()

    def _forget_parents_lines(self) -> None:
        self._pending, self._pending_bytes = [], 0  # the parent writes them


def configure_logging(level: str = "INFO",
                      request_log_delay_seconds: float = 0.0) -> RequestLineHandler:
    """Send the ``deniable`` loggers to stderr as JSON lines (idempotent).

    Args:
        level: the lowest level written.
        request_log_delay_seconds: request lines (``deniable.collector.requests``) are written
            in batches at most this late (see RequestLineHandler); 0 writes each at once.

    Returns:
        The handler of request lines.
    """
    root = logging.getLogger("deniable")
    root.setLevel(level.upper())
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    root.propagate = False
    requests_log = logging.getLogger(REQUEST_LOGGER)
    lines = next((h for h in requests_log.handlers if isinstance(h, RequestLineHandler)), None)
    if lines is None:
        lines = RequestLineHandler(request_log_delay_seconds)
        lines.setFormatter(JsonFormatter())
        requests_log.addHandler(lines)
    lines.flush()
    lines.delay_seconds = float(request_log_delay_seconds)
    requests_log.propagate = False
    # JSON lines never show a caller, thread or process: skip computing them for every record
    # (the "Optimization" section of Python's logging HOWTO).
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    return lines


def gunicorn_logconfig(level: str = "info") -> dict[str, Any]:
    """A ``logconfig_dict`` that makes gunicorn's own log lines JSON too (no access log)."""
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json",
                                "stream": "ext://sys.stderr"}},
        "loggers": {"gunicorn.error": {"handlers": ["stderr"], "level": level.upper(),
                                       "propagate": False},
                    "gunicorn.access": {"handlers": [], "level": "CRITICAL",
                                        "propagate": False}},
        "root": {"handlers": [], "level": "WARNING"},
    }
