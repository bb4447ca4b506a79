"""The collector's settings and their defaults.

Each setting is read from the environment variable ``DENIABLE_<NAME>`` (values are parsed as
JSON when they can be, so ``DENIABLE_MAX_BATCH_REPORTS=500`` is an int), or passed to
``create_app(config)`` / ``deniable serve`` options. Only ``create_app`` and the CLI read the
environment.
"""
from __future__ import annotations

from typing import Any

from deniable.client.wire import DEFAULT_MAX_REPORTS

DEFAULTS: dict[str, Any] = {
    # Where the counters live.
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    # Talk Redis Cluster: REDIS_URL names any one node; batches are applied per metric slot.
    "REDIS_CLUSTER": False,
    # TOML file of registered metrics (see deploy/metrics.example.toml). Required.
    "METRICS_FILE": None,
    # Largest request body accepted, in bytes; larger ones get 413.
    "MAX_BODY_BYTES": 1 << 20,
    # Most reports in one batch; more gets 422.
    "MAX_BATCH_REPORTS": DEFAULT_MAX_REPORTS,
    # How long a batch id is remembered for deduplication, in seconds (7 days).
    "BATCH_ID_TTL_SECONDS": 7 * 24 * 3600,
    # Default retention of hour buckets, in days, for metrics that do not set their own.
    "RETENTION_DAYS": 90,
    # Seconds a client is told to wait (Retry-After) when storage is unavailable.
    "RETRY_AFTER_SECONDS": 5,
    # Longest range one counts request may span, in days.
    "COUNTS_MAX_DAYS": 400,
    # Redis socket timeouts, in seconds.
    "REDIS_TIMEOUT_SECONDS": 2.0,
    # Write one JSON log line per request (request id, route, status, duration; never the
    # client address, credentials or body).
    "LOG_REQUESTS": True,
    # Logging level of the collector's JSON log lines.
    "LOG_LEVEL": "INFO",
}
