"""Shared fixtures: a real redis-server on a free port in a temp dir, apps and live collectors.

Tests never touch the machine's shared Redis on port 6379 and never use a Redis mock.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from deniable.collector.app import create_app
from deniable.collector.embedded import RedisNotFoundError, RedisServer
from deniable.collector.observability import REQUEST_LOGGER
from deniable.collector.server import CollectorProcess

METRICS_TOML = """\
[metrics.feature_x_enabled]
description = "Feature X is switched on"
mechanism = "rr:1/2:1/2"

[metrics.dark_mode]
description = "Dark mode is on"
mechanism = "rr:3/4:1/2"
retention_days = 30
"""


@pytest.fixture(autouse=True)
def _request_lines_written() -> Iterator[None]:
    """In-process collectors batch their request log lines: write them within each test."""
    yield
    for handler in logging.getLogger(REQUEST_LOGGER).handlers:
        handler.flush()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
        server.start()
    except RedisNotFoundError as exc:
        pytest.fail(f"{exc}: run the README's test command, ./dev test")
    assert server.port != 6379
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture()
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def metrics_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "metrics.toml"
    path.write_text(METRICS_TOML)
    return path


OPEN = {"AUTH": "off", "RATE_LIMIT_IP_PER_SECOND": 0, "RATE_LIMIT_KEY_PER_SECOND": 0}
"""Settings of an open collector: dev mode (no keys) and no rate limits."""
OPEN_ENV = {f"DENIABLE_{k}": str(v) for k, v in OPEN.items()}


@pytest.fixture()
def app(redis_url: str, metrics_file: Path, redis_client: redis.Redis):  # type: ignore[no-untyped-def]
    """An open collector (dev mode, no rate limits), as the wire and ingest tests want."""
    return create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                       "TESTING": True, **OPEN})


@pytest.fixture()
def secure_app(redis_url: str, metrics_file: Path, redis_client: redis.Redis):  # type: ignore[no-untyped-def]
    """A collector with the production defaults: auth on (no key cache, so revocation is
    immediate here) and no rate limits unless a test sets them."""
    return create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                       "TESTING": True, "AUTH_CACHE_SECONDS": 0,
                       "RATE_LIMIT_IP_PER_SECOND": 0, "RATE_LIMIT_KEY_PER_SECOND": 0})


@pytest.fixture()
def http(app):  # type: ignore[no-untyped-def]
    """Flask's test client for ``app``."""
    return app.test_client()


@pytest.fixture(scope="session")
def live_collector(redis_url: str, metrics_file: Path) -> Iterator[CollectorProcess]:
    """A real open collector (gunicorn, 2 workers, dev mode, no rate limits) over HTTP."""
    with CollectorProcess(redis_url, metrics_file, workers=2, env=OPEN_ENV) as collector:
        yield collector


@pytest.fixture(scope="session")
def live_secure_collector(redis_url: str, metrics_file: Path) -> Iterator[CollectorProcess]:
    """A real collector with auth on (gunicorn, 2 workers): keys cached 1 s, registry 1 s."""
    env = {"DENIABLE_AUTH_CACHE_SECONDS": "1", "DENIABLE_REGISTRY_CACHE_SECONDS": "1",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        yield collector


def snapshot(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key's serialized value: equal snapshots mean Redis is byte-for-byte unchanged."""
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}
