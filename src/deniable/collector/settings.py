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
    # Key of the HMAC that batch-id records hold instead of the batch's content digest (never
    # written to Redis; share it between all processes of one deployment). Unset: batch
    # records hold no digest, and a batch id reused for other content answers 200 (taken as a
    # re-send) instead of 409. Rotating it: re-sends of batches made before the rotation, for
    # up to BATCH_ID_TTL_SECONDS, answer 409 instead of 200 (still counted once). docs/privacy.md.
    "BATCH_SECRET": None,
    # Default retention of hour buckets, in days, for metrics that do not set their own.
    "RETENTION_DAYS": 90,
    # Seconds a client is told to wait (Retry-After) when storage is unavailable.
    "RETRY_AFTER_SECONDS": 5,
    # Longest range one counts request may span, in days.
    "COUNTS_MAX_DAYS": 400,
    # Redis socket timeouts, in seconds.
    "REDIS_TIMEOUT_SECONDS": 2.0,
    # Acknowledged means replicated: a batch is answered 202 only once this many replicas
    # confirm it (Redis WAIT), else 503 and the client retries (same batch id, counted once).
    # 0: acknowledged once the master applied it (docs/scaling.md, "Recovery points").
    "REDIS_MIN_REPLICAS": 0,
    # How long WAIT may wait for those replicas, in seconds, before the batch is answered 503.
    "REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": 0.5,
    # DEMO/TEST ONLY, off by default: a file holding seconds to shift the receive clock by,
    # read per request (see clock.py). Lets the demo fill simulated days.
    "DEMO_CLOCK_FILE": None,

    # --- Access control (docs/collector-security.md) ---
    # "on": every /v1 endpoint wants an API key of the right role (Authorization: Bearer).
    # "off": dev mode, no keys at all; the collector logs a loud WARNING at start.
    "AUTH": "on",
    # Seconds a verified key stays cached in each process; a revoked key is refused at most
    # this long after `deniable keys revoke`. 0 checks Redis on every request.
    "AUTH_CACHE_SECONDS": 5,

    # --- Web clients (src/deniable/collector/cors.py) ---
    # Origins whose pages may call POST /v1/reports and GET /v1/metrics, e.g.
    # ["https://app.example.com"] (or "https://a.example.com,https://b.example.com"; "*" for
    # any). Empty (the default): no CORS at all, and browsers keep other origins out.
    "CORS_ORIGINS": [],

    # --- Metric registry ---
    # Seconds each process caches the Redis registry. A report for a metric the cache does not
    # know triggers an immediate re-check, so new metrics are accepted at once; a retired metric
    # may still be accepted for at most this long.
    "REGISTRY_CACHE_SECONDS": 2,

    # --- Abuse limits ---
    # Most distinct metrics in one batch; more gets 422.
    "MAX_BATCH_METRICS": 64,
    # Token bucket per client IP, over every /v1 request: sustained requests per second and
    # burst size. 0 per second switches the per-IP limit off. Over it: 429 with Retry-After.
    "RATE_LIMIT_IP_PER_SECOND": 20.0,
    "RATE_LIMIT_IP_BURST": 200,
    # Token bucket per API key (all of an app's devices share its ingest key). 0 = off.
    "RATE_LIMIT_KEY_PER_SECOND": 2000.0,
    "RATE_LIMIT_KEY_BURST": 10000,
    # Secret for the keyed hash (HMAC-SHA256) of client IPs in rate-limit keys. Unset: random
    # per process start (IPs cannot be recovered from a Redis dump, but each process then
    # keeps its own per-IP buckets; `deniable serve` shares one random secret with its workers).
    "RATE_LIMIT_SECRET": None,
    # Behind N trusted reverse proxies, take the client IP from the N-th X-Forwarded-For entry
    # from the right (werkzeug ProxyFix). 0: the socket peer (remote_addr) is the client. The
    # shipped deployments set it (deploy/vm: 1, deploy/kubernetes: 2); a process logs one
    # warning when requests' X-Forwarded-For contradicts it (src/deniable/collector/proxy.py).
    "PROXY_FIX_X_FOR": 0,

    # Write one JSON log line per request (request id, route, status, duration; never the
    # client address, credentials or body).
    "LOG_REQUESTS": True,
    # Request lines are written in batches, at most this many seconds late (one write per batch
    # instead of one per request; lines still buffered are written at exit, and lost only if
    # the process is killed outright). 0 writes each line at once.
    "LOG_REQUESTS_DELAY_SECONDS": 0.5,
    # Logging level of the collector's JSON log lines.
    "LOG_LEVEL": "INFO",
}
