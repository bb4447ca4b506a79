"""gunicorn settings for the collector: the single source, used by ``deniable serve``.

``deniable serve`` loads this file (a copy ships in the package as
deniable/collector/gunicorn.conf.py); ``--host``/``--port``/``--workers`` override ``bind`` and
``workers``. Run it directly with::

    gunicorn -c deploy/gunicorn.conf.py deniable.collector.wsgi:app

Sizing, as measured on 2-core machines (docs/operations.md, "Speed"): sync workers, two per
core, one thread each: while one worker waits on its Redis round trip, the other keeps the core
busy. Sync workers must sit behind a buffering reverse proxy (an ingress, nginx, a cloud load
balancer), which absorbs slow clients.
"""
from __future__ import annotations

import os

from gunicorn.glogging import Logger

if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Run directly by gunicorn: set up the shared metrics directory before any worker forks
    # (``deniable serve`` has done this already).
    from deniable.collector.server import prepare_metrics_dir

    prepare_metrics_dir()

from deniable.collector.server import default_workers  # noqa: E402 (after the metrics dir)

bind = os.environ.get("DENIABLE_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("DENIABLE_WORKERS") or default_workers())
worker_class = "sync"
threads = 1
# Seconds a worker may spend on one request before the master kills and replaces it.
timeout = int(os.environ.get("DENIABLE_WORKER_TIMEOUT", "30"))
# On SIGTERM, in-flight requests get this long to finish (keep it below Kubernetes'
# terminationGracePeriodSeconds minus the preStop sleep).
graceful_timeout = int(os.environ.get("DENIABLE_GRACEFUL_TIMEOUT", "25"))
keepalive = 5
# Worker heartbeats in memory, not on a (possibly read-only) disk.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
proc_name = "deniable-collector"
# No access log: it would record client addresses. The app logs each request as JSON instead.
accesslog = None


class _NoAccessLog(Logger):
    """gunicorn's logger, minus the access log. With ``logconfig_dict`` set, gunicorn would
    build every request's access-log fields (client address included) only to drop them."""

    def access(self, resp, req, environ, request_time) -> None:  # noqa: ANN001 (gunicorn's)
        return None


logger_class = _NoAccessLog
errorlog = "-"
loglevel = os.environ.get("DENIABLE_LOG_LEVEL", "info").lower()
# Request line and headers: gunicorn's defaults (4094 bytes per line, 100 headers).
limit_request_line = 4094
limit_request_fields = 100


def _logconfig() -> dict:
    from deniable.collector.observability import gunicorn_logconfig

    return gunicorn_logconfig(loglevel)


logconfig_dict = _logconfig()


def post_worker_init(worker) -> None:  # noqa: ANN001 (gunicorn hook signature)
    """Say when a worker has loaded the app and serves (CollectorProcess waits for this)."""
    worker.log.info("worker ready")


def child_exit(server, worker) -> None:  # noqa: ANN001 (gunicorn hook signature)
    """Let the Prometheus multiprocess collector forget a worker that exited."""
    from deniable.collector.observability import mark_worker_dead

    mark_worker_dead(worker.pid)
