"""The collector's settings in typed sections (collector/settings.py): the same variable names
and defaults as before, read from the real environment by a real app, converted to their
types, and a value that does not convert refused at start, naming its variable."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import redis
from flask import Flask

from deniable.collector.app import create_app
from deniable.collector.errors import CollectorError
from deniable.collector.settings import (
    DEFAULTS,
    EXTENSION,
    SECTIONS,
    LimitSettings,
    Settings,
    current_settings,
    setting_names,
    settings_of,
)

SHARED_REDIS_PORT = 6379
"""Redis's own default port: the default REDIS_URL names it (tests never connect to it)."""
DEFAULT_REDIS_URL = f"redis://127.0.0.1:{SHARED_REDIS_PORT}/0"

# The variables and defaults operators relied on before the sections (src/deniable/collector/
# settings.py at commit 8a1051e), written out: none may change name or default.
OLD_DEFAULTS = {
    "REDIS_URL": DEFAULT_REDIS_URL, "REDIS_CLUSTER": False, "METRICS_FILE": None,
    "MAX_BODY_BYTES": 1048576, "MAX_BATCH_REPORTS": 1000, "BATCH_ID_TTL_SECONDS": 604800,
    "BATCH_SECRET": None, "RETENTION_DAYS": 90, "RETRY_AFTER_SECONDS": 5,
    "COUNTS_MAX_DAYS": 400, "REDIS_TIMEOUT_SECONDS": 2.0, "REDIS_MIN_REPLICAS": 0,
    "REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": 0.5, "DEMO_CLOCK_FILE": None, "AUTH": "on",
    "AUTH_CACHE_SECONDS": 5, "CORS_ORIGINS": [], "REGISTRY_CACHE_SECONDS": 2,
    "MAX_BATCH_METRICS": 64, "RATE_LIMIT_IP_PER_SECOND": 20.0, "RATE_LIMIT_IP_BURST": 200,
    "RATE_LIMIT_KEY_PER_SECOND": 2000.0, "RATE_LIMIT_KEY_BURST": 10000,
    "RATE_LIMIT_SECRET": None, "PROXY_FIX_X_FOR": 0, "LOG_REQUESTS": True,
    "LOG_REQUESTS_DELAY_SECONDS": 0.5, "LOG_LEVEL": "INFO",
}
NEW_DEFAULTS = {"KINDS": []}
"""Settings added since, each with a default that changes nothing (no kind plugin)."""


def test_the_variables_and_defaults_are_unchanged() -> None:
    assert DEFAULTS == {**OLD_DEFAULTS, **NEW_DEFAULTS}


def test_every_setting_is_read_by_exactly_one_section_field() -> None:
    read = [name for section in SECTIONS for name in setting_names(section)]
    assert sorted(read) == sorted(DEFAULTS)  # no setting twice, none left out, none invented
    assert [f.name for f in dataclasses.fields(Settings)] == [
        "metrics", "redis", "security", "limits", "observability"]


def test_the_default_settings_are_typed() -> None:
    settings = Settings.default()
    assert settings.redis.url == DEFAULT_REDIS_URL and settings.redis.cluster is False
    assert settings.security.auth is True and settings.security.cors_origins == frozenset()
    assert settings.limits == LimitSettings(
        max_body_bytes=1 << 20, max_batch_reports=1000, max_batch_metrics=64,
        batch_id_ttl_seconds=7 * 24 * 3600, counts_max_days=400, rate_limit_ip_per_second=20.0,
        rate_limit_ip_burst=200, rate_limit_key_per_second=2000.0, rate_limit_key_burst=10000)
    assert settings.metrics.metrics_file is None and settings.metrics.retention_days == 90
    assert (settings.observability.log_level, settings.observability.log_requests) == (
        "INFO", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.redis.url = "redis://elsewhere"  # type: ignore[misc]


def test_the_app_reads_the_environment_into_typed_sections(
        monkeypatch: pytest.MonkeyPatch, redis_url: str, metrics_file: Path,
        redis_client: redis.Redis) -> None:
    environment = {
        "REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
        "MAX_BATCH_REPORTS": "500",            # JSON: an int
        "RATE_LIMIT_IP_PER_SECOND": "0",       # off
        "BATCH_SECRET": "123456",              # digits arrive as a number: kept as text
        "CORS_ORIGINS": "https://a.example.com, https://b.example.com:8443",
        "AUTH": "off", "REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": "1", "LOG_REQUESTS": "false",
    }
    for name, value in environment.items():
        monkeypatch.setenv(f"DENIABLE_{name}", value)
    app = create_app()
    settings = app.extensions["deniable.settings"]
    assert settings == Settings.from_config(app.config)
    assert settings.limits.max_batch_reports == 500
    assert settings.limits.rate_limit_ip_per_second == 0.0
    assert settings.security.batch_secret == "123456"
    assert settings.security.cors_origins == frozenset(
        {"https://a.example.com", "https://b.example.com:8443"})
    assert settings.security.auth is False and settings.observability.log_requests is False
    assert settings.redis.min_replicas_timeout_seconds == 1.0
    assert settings.redis.url == redis_url and settings.metrics.metrics_file == str(metrics_file)
    assert app.config["MAX_CONTENT_LENGTH"] == settings.limits.max_body_bytes == 1 << 20
    # Redis from the environment, reached: the app is ready.
    with app.test_client() as client:
        assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("RETENTION_DAYS", "ninety", "an integer"),
    ("REDIS_TIMEOUT_SECONDS", "soon", "a number"),
    ("AUTH", "maybe", "'on' or 'off'"),
    ("KINDS", 5, "module:attribute entries"),
])
def test_a_value_that_does_not_convert_is_refused_naming_its_variable(
        name: str, value: str, expected: str, redis_url: str, metrics_file: Path) -> None:
    with pytest.raises(CollectorError, match=f"DENIABLE_{name} must be {expected}"):
        create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), name: value})


def test_the_collector_reads_its_settings_through_one_typed_accessor(
        redis_url: str, metrics_file: Path) -> None:
    app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                      "COUNTS_MAX_DAYS": 3, "AUTH": "off"})
    assert settings_of(app) is app.extensions[EXTENSION]
    with app.test_request_context():
        assert current_settings() is settings_of(app)
    # The route reads the typed value (3 days), not a default of its own.
    with app.test_client() as client:
        answer = client.get("/v1/metrics/dark_mode/counts?from=2026-01-01T00:00:00Z"
                            "&to=2026-01-05T00:00:00Z")
    assert answer.status_code == 422 and "at most 3 days" in answer.get_data(as_text=True)
    with pytest.raises(CollectorError, match="holds no Settings"):
        settings_of(Flask("bare"))
