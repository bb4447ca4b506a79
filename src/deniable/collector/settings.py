"""The collector's settings: their defaults, and the typed sections the app factory reads.

Each setting is read from the environment variable ``DENIABLE_<NAME>`` (values are parsed as
JSON when they can be, so ``DENIABLE_MAX_BATCH_REPORTS=500`` is an int), or passed to
``create_app(config)`` / ``deniable serve`` options. Only ``create_app`` and the CLI read the
environment. ``DEFAULTS`` is the flat table of names and defaults (the names operators set);
``Settings.from_config`` turns such a table into five typed, frozen sections: ``metrics``,
``redis``, ``security``, ``limits`` and ``observability`` (docs/operations.md, "Settings").
``create_app`` keeps the app's ``Settings`` in ``app.extensions["deniable.settings"]``; every
collector module reads its settings there, through ``settings_of(app)`` or
``current_settings()``, and never from the flat ``app.config`` table (which Flask still reads
for ``MAX_CONTENT_LENGTH``).
The process settings (``DENIABLE_HOST``, ``_PORT``, ``_WORKERS``, ...) are the gunicorn
config's (gunicorn.conf.py), read before any app exists.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from flask import Flask, current_app

from deniable.client.errors import PluginError
from deniable.client.plugins import split_specs
from deniable.client.wire import DEFAULT_MAX_REPORTS
from deniable.collector.cors import parse_origins
from deniable.collector.errors import CollectorError

DEFAULTS: dict[str, Any] = {
    # --- metrics: which metrics exist, and how long their counts are kept ---
    # TOML file of registered metrics (see deploy/metrics.example.toml). Required.
    "METRICS_FILE": None,
    # Default retention of hour buckets, in days, for metrics that do not set their own.
    "RETENTION_DAYS": 90,
    # Seconds each process caches the Redis registry. A report for a metric the cache does not
    # know triggers an immediate re-check, so new metrics are accepted at once; a retired metric
    # may still be accepted for at most this long.
    "REGISTRY_CACHE_SECONDS": 2,
    # Metric kinds kept outside the package, as module:attribute entries separated by commas
    # (each a Kind or a zero-argument factory), registered at start beside the entry points of
    # the group "deniable.kinds" (docs/development.md, "Shipping a kind as a package").
    "KINDS": [],
    # DEMO/TEST ONLY, off by default: a file holding seconds to shift the receive clock by,
    # read per request (see clock.py). Lets the demo fill simulated days.
    "DEMO_CLOCK_FILE": None,

    # --- redis: where the counters live ---
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    # Talk Redis Cluster: REDIS_URL names any one node; batches are applied per metric slot.
    "REDIS_CLUSTER": False,
    # Redis socket timeouts, in seconds.
    "REDIS_TIMEOUT_SECONDS": 2.0,
    # Acknowledged means replicated: a batch is answered 202 only once this many replicas
    # confirm it (Redis WAIT), else 503 and the client retries (same batch id, counted once).
    # 0: acknowledged once the master applied it (docs/scaling.md, "Recovery points").
    "REDIS_MIN_REPLICAS": 0,
    # How long WAIT may wait for those replicas, in seconds, before the batch is answered 503.
    "REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": 0.5,
    # Seconds a client is told to wait (Retry-After) when storage is unavailable.
    "RETRY_AFTER_SECONDS": 5,

    # --- security: access control (docs/collector-security.md), secrets, web origins ---
    # "on": every /v1 endpoint wants an API key of the right role (Authorization: Bearer).
    # "off": dev mode, no keys at all; the collector logs a loud WARNING at start.
    "AUTH": "on",
    # Seconds a verified key stays cached in each process; a revoked key is refused at most
    # this long after `deniable keys revoke`. 0 checks Redis on every request.
    "AUTH_CACHE_SECONDS": 5,
    # Key of the HMAC that batch-id records hold instead of the batch's content digest (never
    # written to Redis; share it between all processes of one deployment). Unset: batch
    # records hold no digest, and a batch id reused for other content answers 200 (taken as a
    # re-send) instead of 409. Rotating it: re-sends of batches made before the rotation, for
    # up to BATCH_ID_TTL_SECONDS, answer 409 instead of 200 (still counted once). docs/privacy.md.
    "BATCH_SECRET": None,
    # Secret for the keyed hash (HMAC-SHA256) of client IPs in rate-limit keys. Unset: random
    # per process start (IPs cannot be recovered from a Redis dump, but each process then
    # keeps its own per-IP buckets; `deniable serve` shares one random secret with its workers).
    "RATE_LIMIT_SECRET": None,
    # Origins whose pages may call POST /v1/reports and GET /v1/metrics, e.g.
    # ["https://app.example.com"] (or "https://a.example.com,https://b.example.com"; "*" for
    # any). Empty (the default): no CORS at all, and browsers keep other origins out
    # (src/deniable/collector/cors.py).
    "CORS_ORIGINS": [],
    # Behind N trusted reverse proxies, take the client IP from the N-th X-Forwarded-For entry
    # from the right (werkzeug ProxyFix). 0: the socket peer (remote_addr) is the client. The
    # shipped deployments set it (deploy/vm: 1, deploy/kubernetes: 2); a process logs one
    # warning when requests' X-Forwarded-For contradicts it (src/deniable/collector/proxy.py).
    "PROXY_FIX_X_FOR": 0,

    # --- limits: what one request may ask, and how fast ---
    # Largest request body accepted, in bytes; larger ones get 413.
    "MAX_BODY_BYTES": 1 << 20,
    # Most reports in one batch; more gets 422.
    "MAX_BATCH_REPORTS": DEFAULT_MAX_REPORTS,
    # Most distinct metrics in one batch; more gets 422.
    "MAX_BATCH_METRICS": 64,
    # How long a batch id is remembered for deduplication, in seconds (7 days).
    "BATCH_ID_TTL_SECONDS": 7 * 24 * 3600,
    # Longest range one counts request may span, in days.
    "COUNTS_MAX_DAYS": 400,
    # Token bucket per client IP, over every /v1 request: sustained requests per second and
    # burst size. 0 per second switches the per-IP limit off. Over it: 429 with Retry-After.
    "RATE_LIMIT_IP_PER_SECOND": 20.0,
    "RATE_LIMIT_IP_BURST": 200,
    # Token bucket per API key (all of an app's devices share its ingest key). 0 = off.
    "RATE_LIMIT_KEY_PER_SECOND": 2000.0,
    "RATE_LIMIT_KEY_BURST": 10000,

    # --- observability: logs ---
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

S = TypeVar("S")

EXTENSION: Final = "deniable.settings"
"""The key of an app's ``Settings`` in ``app.extensions``."""
OFF_VALUES: Final = frozenset({"off", "false", "0", "no"})
ON_VALUES: Final = frozenset({"on", "true", "1", "yes"})


def _setting(name: str) -> Any:
    """A field read from the setting ``name`` (``DENIABLE_<name>``); no default: every value
    comes from a table such as ``DEFAULTS``, the one place defaults are written."""
    return field(metadata={"setting": name})


@dataclass(frozen=True)
class MetricsSettings:
    """Which metrics exist, and how long their counts are kept."""

    metrics_file: str | None = _setting("METRICS_FILE")
    """TOML file of registered metrics; required by ``create_app``."""
    retention_days: int = _setting("RETENTION_DAYS")
    """Days of hour buckets kept, for metrics that set no retention of their own."""
    registry_cache_seconds: float = _setting("REGISTRY_CACHE_SECONDS")
    """Seconds each process caches the Redis registry (a retired metric is accepted at most
    this long)."""
    kinds: tuple[str, ...] = _setting("KINDS")
    """Kind plugins as ``module:attribute`` entries, registered at start (a bad one stops it)."""
    demo_clock_file: str | None = _setting("DEMO_CLOCK_FILE")
    """Demo and tests only: a file of seconds to shift the receive clock by."""


@dataclass(frozen=True)
class RedisSettings:
    """Where the counters live, and what an acknowledged batch means."""

    url: str = _setting("REDIS_URL")
    cluster: bool = _setting("REDIS_CLUSTER")
    """Talk Redis Cluster; ``url`` names any one node."""
    timeout_seconds: float = _setting("REDIS_TIMEOUT_SECONDS")
    min_replicas: int = _setting("REDIS_MIN_REPLICAS")
    """A batch is answered 202 only once this many replicas confirm it (Redis WAIT)."""
    min_replicas_timeout_seconds: float = _setting("REDIS_MIN_REPLICAS_TIMEOUT_SECONDS")
    retry_after_seconds: int = _setting("RETRY_AFTER_SECONDS")
    """``Retry-After`` sent with a 503 while storage is unavailable."""


@dataclass(frozen=True)
class SecuritySettings:
    """Access control, the deployment's secrets and the web origins allowed in."""

    auth: bool = _setting("AUTH")
    """True ("on"): every /v1 endpoint wants an API key of the right role."""
    auth_cache_seconds: float = _setting("AUTH_CACHE_SECONDS")
    """Seconds a verified key stays cached per process: the revocation delay's bound."""
    batch_secret: str | None = _setting("BATCH_SECRET")
    rate_limit_secret: str | None = _setting("RATE_LIMIT_SECRET")
    cors_origins: frozenset[str] = _setting("CORS_ORIGINS")
    """Origins whose pages may call the ingest and catalogue routes (``cors.parse_origins``:
    a list, or a string of origins separated by commas or spaces; ``*`` for any)."""
    proxy_fix_x_for: int = _setting("PROXY_FIX_X_FOR")
    """Trusted reverse proxies in front that add to X-Forwarded-For."""


@dataclass(frozen=True)
class LimitSettings:
    """What one request may carry, and how many requests a client or key may make."""

    max_body_bytes: int = _setting("MAX_BODY_BYTES")
    max_batch_reports: int = _setting("MAX_BATCH_REPORTS")
    max_batch_metrics: int = _setting("MAX_BATCH_METRICS")
    batch_id_ttl_seconds: int = _setting("BATCH_ID_TTL_SECONDS")
    counts_max_days: int = _setting("COUNTS_MAX_DAYS")
    rate_limit_ip_per_second: float = _setting("RATE_LIMIT_IP_PER_SECOND")
    rate_limit_ip_burst: int = _setting("RATE_LIMIT_IP_BURST")
    rate_limit_key_per_second: float = _setting("RATE_LIMIT_KEY_PER_SECOND")
    rate_limit_key_burst: int = _setting("RATE_LIMIT_KEY_BURST")


@dataclass(frozen=True)
class ObservabilitySettings:
    """The collector's JSON logs."""

    log_requests: bool = _setting("LOG_REQUESTS")
    log_requests_delay_seconds: float = _setting("LOG_REQUESTS_DELAY_SECONDS")
    log_level: str = _setting("LOG_LEVEL")


@dataclass(frozen=True)
class Settings:
    """Every setting ``create_app`` reads, in five typed sections."""

    metrics: MetricsSettings
    redis: RedisSettings
    security: SecuritySettings
    limits: LimitSettings
    observability: ObservabilitySettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """The typed settings of ``config``, a flat table keyed by setting name (as Flask's
        ``app.config`` holds them: ``DEFAULTS`` overlaid with the environment or the
        ``create_app`` argument). Numbers given as text are converted, as they always were.

        Raises:
            CollectorError: a setting is missing, or its value does not convert (e.g.
                ``DENIABLE_AUTH=maybe``), naming the variable.
        """
        return cls(metrics=_read(MetricsSettings, config), redis=_read(RedisSettings, config),
                   security=_read(SecuritySettings, config),
                   limits=_read(LimitSettings, config),
                   observability=_read(ObservabilitySettings, config))

    @classmethod
    def default(cls) -> Settings:
        """The settings of ``DEFAULTS`` (no metrics file)."""
        return cls.from_config(DEFAULTS)


def settings_of(app: Flask) -> Settings:
    """The typed settings ``create_app`` gave ``app``.

    Raises:
        CollectorError: ``app`` was not built by ``create_app`` (it holds no settings).
    """
    settings = app.extensions.get(EXTENSION)
    if not isinstance(settings, Settings):
        raise CollectorError(f"the app holds no Settings in app.extensions[{EXTENSION!r}]: "
                             f"build it with create_app. Got {settings!r} instead.")
    return settings


def current_settings() -> Settings:
    """The typed settings of the app serving the current request (``settings_of``)."""
    return settings_of(current_app)


SECTIONS: Final = (MetricsSettings, RedisSettings, SecuritySettings, LimitSettings,
                   ObservabilitySettings)
"""The sections, in ``Settings``' order."""


def setting_names(section: type) -> list[str]:
    """The setting names (``DENIABLE_`` + name) a section's fields read, in field order."""
    return [f.metadata["setting"] for f in dataclasses.fields(section)]


def _read(section: type[S], config: Mapping[str, Any]) -> S:
    """``section`` with each field read from ``config`` and converted to its type."""
    values = {}
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        key = f.metadata["setting"]
        if key not in config:
            raise CollectorError(f"the setting DENIABLE_{key} is missing")
        values[f.name] = _convert(key, str(f.type), config[key])
    return section(**values)


_CONVERTERS: Final[Mapping[str, tuple[Callable[[Any], Any], str]]] = {
    "int": (int, "an integer"), "float": (float, "a number"), "bool": (bool, "true or false"),
    "str": (str, "text")}


def _convert(key: str, kind: str, value: Any) -> Any:
    """``value`` as ``kind`` (a field's annotation), converted as the collector always did."""
    if key == "AUTH":
        return auth_enabled(value)  # raises CollectorError naming DENIABLE_AUTH
    if kind == "str | None":
        return _text_or_none(value)
    if key == "CORS_ORIGINS":
        return parse_origins(value)  # raises CollectorError naming CORS_ORIGINS
    if key == "KINDS":
        try:
            return split_specs(value, "DENIABLE_KINDS")
        except PluginError as exc:
            raise CollectorError(str(exc)) from None
    convert, expected = _CONVERTERS[kind]
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise CollectorError(
            f"DENIABLE_{key} must be {expected}. Got {value!r} instead.") from None


def auth_enabled(value: object) -> bool:
    """Parse the AUTH setting ("on"/"off", also true/false/1/0/yes/no).

    Raises:
        CollectorError: any other value.
    """
    text = str(value).strip().lower()
    if text in ON_VALUES:
        return True
    if text in OFF_VALUES:
        return False
    raise CollectorError(f"DENIABLE_AUTH must be 'on' or 'off'. Got {value!r} instead.")


def _text_or_none(value: object) -> str | None:
    """A text setting (DENIABLE_* values arrive JSON-parsed: digits as a number); unset or
    empty is None."""
    return None if value is None or value == "" else str(value)
