"""gunicorn settings for the collector: the one shipped config, used by ``deniable serve``.

It ships in the package (deniable/collector/gunicorn.conf.py); ``deniable serve`` loads it, and
its ``--host``/``--port``/``--workers`` override ``bind`` and ``workers``. Run directly, it binds
the same default as ``deniable serve``, ``127.0.0.1:8000`` (``DENIABLE_HOST``/``DENIABLE_PORT``)::

    gunicorn -c "$(python -c 'from deniable.collector.server import default_config_file as f; print(f())')" \\
        deniable.collector.wsgi:app

Sizing, as measured on 2-core machines (docs/operations.md, "Speed"): sync workers, two per
core, one thread each: while one worker waits on its Redis round trip, the other keeps the core
busy. Sync workers block on slow clients, so every shipped deployment puts nginx in front
(deploy/vm/, deploy/kubernetes/), which buffers whole requests before passing them on.
"""
from __future__ import annotations

import os

from gunicorn.glogging import Logger

if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Run directly by gunicorn: set up the shared metrics directory before any worker forks
    # (``deniable serve`` has done this already).
    from deniable.collector.server import prepare_metrics_dir

    prepare_metrics_dir()

from deniable.collector.server import (  # noqa: E402 (after the metrics dir)
    DEFAULT_HOST,
    DEFAULT_PORT,
    close_listeners_on_term,
    default_workers,
)
from deniable.collector.settings import DEFAULTS  # noqa: E402 (after the metrics dir)

bind = (f"{os.environ.get('DENIABLE_HOST') or DEFAULT_HOST}:"
        f"{os.environ.get('DENIABLE_PORT') or DEFAULT_PORT}")
workers = int(os.environ.get("DENIABLE_WORKERS") or default_workers())
worker_class = "sync"
threads = 1
# Seconds a worker may spend on one request before the master kills and replaces it.
timeout = int(os.environ.get("DENIABLE_WORKER_TIMEOUT", "30"))
# On SIGTERM, in-flight requests get this long to finish (keep it below Kubernetes'
# terminationGracePeriodSeconds minus the preStop sleep, and systemd's TimeoutStopSec).
graceful_timeout = int(os.environ.get("DENIABLE_GRACEFUL_TIMEOUT", "25"))
keepalive = 5
# Worker heartbeats in memory, not on a (possibly read-only) disk.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
proc_name = "deniable-collector"
# gunicorn's control socket (gunicornc) defaults to one path per user ($HOME/.gunicorn), which
# two collectors on one host share and clobber: off, unless DENIABLE_CONTROL_SOCKET names a path
# of this instance's own (the systemd unit uses its RuntimeDirectory).
control_socket_disable = not os.environ.get("DENIABLE_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["DENIABLE_CONTROL_SOCKET"]
# No access log: it would record client addresses. The app logs each request as JSON instead.
accesslog = None


class _NoAccessLog(Logger):
    """gunicorn's logger, minus the access log. With ``logconfig_dict`` set, gunicorn would
    build every request's access-log fields (client address included) only to drop them."""

    def access(self, resp, req, environ, request_time) -> None:  # noqa: ANN001 (gunicorn's)
        return None


logger_class = _NoAccessLog
errorlog = "-"
# The app's own setting (DENIABLE_LOG_LEVEL, settings.py), with its one default.
loglevel = str(os.environ.get("DENIABLE_LOG_LEVEL") or DEFAULTS["LOG_LEVEL"]).lower()
# Request line and headers: gunicorn's defaults (4094 bytes per line, 100 headers).
limit_request_line = 4094
limit_request_fields = 100


def _logconfig() -> dict:
    from deniable.collector.observability import gunicorn_logconfig

    return gunicorn_logconfig(loglevel)


logconfig_dict = _logconfig()


def post_worker_init(worker) -> None:  # noqa: ANN001 (gunicorn hook signature)
    """Drain promptly on SIGTERM, then say when a worker serves (CollectorProcess waits)."""
    close_listeners_on_term(worker)
    worker.log.info("worker ready")


def child_exit(server, worker) -> None:  # noqa: ANN001 (gunicorn hook signature)
    """Let the Prometheus multiprocess collector forget a worker that exited."""
    from deniable.collector.observability import mark_worker_dead

    mark_worker_dead(worker.pid)
