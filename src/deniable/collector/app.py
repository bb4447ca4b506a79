"""The collector's Flask application factory."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, Response

from deniable.client.errors import PluginError
from deniable.client.plugins import load_plugins
from deniable.collector import admin, api, auth, dashboard, headers, migrate, observability, openapi
from deniable.core import keys
from deniable.collector.cors import cors_in_front_of
from deniable.collector.ingest import IngestEndpoint
from deniable.collector.errors import CollectorError, problem_response, register_error_handlers
from deniable.collector.live_registry import LiveRegistry
from deniable.collector.proxy import client_address_app
from deniable.collector.registry import load_metrics_file
from deniable.collector.settings import DEFAULTS, EXTENSION, Settings
from deniable.collector.store import Store, connect


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build a collector.

    Args:
        config: settings to use instead of the ``DENIABLE_*`` environment (see settings.py).
            The app reads them as a typed ``Settings`` (``app.extensions["deniable.settings"]``).

    Raises:
        CollectorError: no metrics file is configured, or it is invalid; a setting does not
            convert to its type (naming its variable); a kind plugin does not load (naming
            its entry).
    """
    # An explicit instance path: Flask cannot derive one inside the deniable namespace package.
    app = Flask("deniable.collector", instance_path=str(Path(__file__).parent / "instance"),
                static_folder=None)  # no /static route: the collector serves no files
    app.config.from_mapping(DEFAULTS)
    if config is None:
        app.config.from_prefixed_env("DENIABLE")
    else:
        app.config.update(config)
    settings = Settings.from_config(app.config)
    app.extensions[EXTENSION] = settings
    app.config["MAX_CONTENT_LENGTH"] = settings.limits.max_body_bytes
    # JSON log lines from the first one on (the start-up warnings below included).
    logs = settings.observability
    lines = observability.configure_logging(logs.log_level, logs.log_requests_delay_seconds)
    _load_kinds(settings.metrics.kinds)
    if not settings.metrics.metrics_file:
        raise CollectorError("no metrics file: set DENIABLE_METRICS_FILE or --metrics-file")
    metrics = load_metrics_file(settings.metrics.metrics_file, settings.metrics.retention_days)
    stored = settings.redis
    client = connect(stored.url, stored.timeout_seconds, cluster=stored.cluster)
    app.extensions["deniable.store"] = Store(
        client, settings.security.batch_secret, min_replicas=stored.min_replicas,
        replicas_timeout_seconds=stored.min_replicas_timeout_seconds)
    _init_security(app, client, metrics, settings.metrics.registry_cache_seconds)
    _check_layout(app, client)
    recorder = observability.init_app(app, logs.log_requests, lines)
    app.register_blueprint(api.bp)
    app.register_blueprint(admin.bp)
    dashboard.init_app(app)
    openapi.init_app(app)
    headers.init_app(app)
    register_error_handlers(app, stored.retry_after_seconds)
    # The hot path runs in front of Flask; a trusted proxy's client address, in front of both.
    wsgi: Any = IngestEndpoint(app, recorder).in_front_of(app.wsgi_app)
    # Web pages of the allowed origins may call the ingest and registry routes (cors.py).
    wsgi = cors_in_front_of(wsgi, settings.security.cors_origins)
    wsgi = client_address_app(wsgi, settings.security.proxy_fix_x_for)
    app.wsgi_app = wsgi  # type: ignore[method-assign]
    # The development server's request and error lines start with the client's address.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process answers."""
        return Response(b'{"status":"ok"}', mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: every Redis master would take a write now (Store.write_refusals): not
        when Redis is down, a read-only replica, full, refusing writes (MISCONF,
        NOREPLICAS) or a cluster is down (CLUSTERDOWN)."""
        if observability.check_redis(app.extensions["deniable.store"]):
            return problem_response(503, "storage is unavailable",
                                    headers={"Retry-After": str(stored.retry_after_seconds)})
        return Response(b'{"status":"ready"}', mimetype="application/json")

    observability.start_series(app)  # every series an alert reads, at 0 from start-up
    return app


def _load_kinds(specs: tuple[str, ...]) -> None:
    """Register the kind plugins (entry points of ``deniable.kinds`` and ``DENIABLE_KINDS``)
    before the metrics file is read, once per process.

    Raises:
        CollectorError: a bad entry, named; the collector does not start.
    """
    try:
        load_plugins(specs, setting="DENIABLE_KINDS")
    except PluginError as exc:
        raise CollectorError(f"{exc}; the collector does not start") from exc


def _init_security(app: Flask, client: Any, metrics: Mapping[str, Any],
                   registry_cache_seconds: float) -> None:
    """Auth, rate limits and the Redis metric registry (collector-security.md)."""
    auth.init_app(app, client)
    registry = LiveRegistry(client, metrics, registry_cache_seconds)
    app.extensions["deniable.registry"] = registry
    try:
        registry.sync_file()
    except api.STORAGE_ERRORS as exc:
        # Redis may come later: the registry syncs the file once it can read Redis.
        app.logger.warning("metric registry not synced at start: %s", type(exc).__name__)


def _check_layout(app: Flask, client: Any) -> None:
    """Say loudly (an ERROR at start, ``deniable_unmigrated_counters`` 1, an alert) while
    layout-1 counters are left: reads and reports undercount until ``deniable migrate`` has
    moved them. Cheap once a Redis is known to hold none (``migrate.unmigrated``)."""
    try:
        left = migrate.unmigrated(client)
    except api.STORAGE_ERRORS as exc:
        app.logger.warning("counters layout not checked at start: %s", type(exc).__name__)
        return
    observability.set_unmigrated(left)
    if not left:
        return
    app.logger.error("LAYOUT-1 COUNTERS ARE LEFT IN REDIS (hashes dn:v1:{<metric>}:c:...): "
                     "counts, reports and the dashboard UNDERCOUNT until `deniable migrate` "
                     "moves them. Run it now; it is safe while collectors take traffic.")

    def recheck() -> None:
        try:
            done = client.get(keys.layout_marker()) == migrate.LAYOUT
        except api.STORAGE_ERRORS:
            return
        if done:
            observability.set_unmigrated(False)
            app.extensions.pop("deniable.unmigrated", None)

    app.extensions["deniable.unmigrated"] = recheck
