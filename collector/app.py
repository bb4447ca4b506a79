"""The collector's Flask application factory."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, Response

from deniable.collector import api, observability, openapi
from deniable.collector.errors import CollectorError, problem_response, register_error_handlers
from deniable.collector.registry import load_metrics_file
from deniable.collector.settings import DEFAULTS
from deniable.collector.store import Store, connect


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build a collector.

    Args:
        config: settings to use instead of the ``DENIABLE_*`` environment (see settings.py).

    Raises:
        CollectorError: no metrics file is configured, or it is invalid.
    """
    # An explicit instance path: Flask cannot derive one inside the deniable namespace package.
    app = Flask("deniable.collector", instance_path=str(Path(__file__).parent / "instance"),
                static_folder=None)  # no /static route: the collector serves no files
    app.config.from_mapping(DEFAULTS)
    if config is None:
        app.config.from_prefixed_env("DENIABLE")
    else:
        app.config.update(config)
    app.config["MAX_CONTENT_LENGTH"] = int(app.config["MAX_BODY_BYTES"])
    if not app.config["METRICS_FILE"]:
        raise CollectorError("no metrics file: set DENIABLE_METRICS_FILE or --metrics-file")
    metrics = load_metrics_file(app.config["METRICS_FILE"], int(app.config["RETENTION_DAYS"]))
    app.extensions["deniable.metrics"] = metrics
    app.extensions["deniable.mechanisms"] = {m.name: m.mechanism.id for m in metrics.values()}
    app.extensions["deniable.store"] = Store(
        connect(app.config["REDIS_URL"], float(app.config["REDIS_TIMEOUT_SECONDS"]),
                cluster=bool(app.config["REDIS_CLUSTER"])))
    observability.init_app(app)
    app.register_blueprint(api.bp)
    openapi.init_app(app)
    register_error_handlers(app)
    # Werkzeug's request log would write client addresses: keep it to warnings.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process answers."""
        return Response(b'{"status":"ok"}', mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: Redis answers."""
        try:
            app.extensions["deniable.store"].ping()
        except api.STORAGE_ERRORS as exc:
            observability.count_storage_error(exc)
            return problem_response(503, "storage is unavailable",
                                    headers={"Retry-After": str(app.config["RETRY_AFTER_SECONDS"])})
        return Response(b'{"status":"ready"}', mimetype="application/json")

    return app
