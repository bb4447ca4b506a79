"""Shared fixtures: a real redis-server on a free port in a temp dir, apps and live collectors.

Tests never touch the machine's shared Redis on port 6379 and never use a Redis mock.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import secrets
import tempfile
import tomllib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings

from deniable.core import keys
from deniable.collector.app import create_app
from deniable.collector.embedded import RedisNotFoundError, RedisServer
from deniable.collector.observability import REQUEST_LOGGER
from deniable.collector.server import CollectorProcess
from deniable.collector.store import Store, decode_counters
from tests.rediscluster import redis_cluster  # noqa: F401 (a session fixture: the Redis Cluster)
from tests.servers import BATCH_SECRET, OPEN, OPEN_ENV  # noqa: F401 (re-exported to tests)
from tests.schedule import (pytest_collection_modifyitems,  # noqa: F401 (hooks: xdist's
                            pytest_configure)  # order, heaviest files first)

ROOT = Path(__file__).resolve().parent.parent
"""The source tree."""

METRICS_TOML = """\
[metrics.feature_x_enabled]
description = "Feature X is switched on"
mechanism = "rr:1/2:1/2"

[metrics.dark_mode]
description = "Dark mode is on"
mechanism = "rr:3/4:1/2"
retention_days = 30
"""
DECLARED = tomllib.loads(METRICS_TOML)["metrics"]
"""The metrics the tests' collectors register, as an app declares them (``Reporter(url,
metrics=DECLARED)``): the same tables the collector loads."""


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the per-user data directory at a fresh temp dir for every test, so a default
    Reporter's privacy state (deniable.client.state.default_state_dir) never lands in the real
    home directory. Set in os.environ, so subprocesses that inherit it follow."""
    home = tmp_path_factory.mktemp("data-home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("LOCALAPPDATA", str(home))  # the same convention on Windows
    return home


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


# A busy machine (CI shares its two cores) must not fail a property test for slowness: no
# per-example deadline and no too-slow health check. Properties and example counts are unchanged.
settings.register_profile("deniable", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("deniable")



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
                       "TESTING": True, "AUTH_CACHE_SECONDS": 0, "BATCH_SECRET": BATCH_SECRET,
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
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0",
           "DENIABLE_BATCH_SECRET": BATCH_SECRET}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        yield collector


@pytest.fixture()
def source_tree_build() -> Iterator[None]:
    """Hold the lock of builds in the source tree (setuptools writes src/deniable.egg-info and
    build/ there): a test that builds the wheel or the sdist from the tree asks for this, so
    two pytest-xdist workers never build at once. The lock is released if the process dies."""
    tree = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    lock = Path(tempfile.gettempdir()) / f"deniable-build-{tree}.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def snapshot(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key's serialized value: equal snapshots mean Redis is byte-for-byte unchanged."""
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}


def hour_counts(client: redis.Redis, metric: str, mechanism_id: str,
                hour: datetime) -> tuple[int, int]:
    """(n, ones) of one metric version in the UTC hour holding ``hour``, read through the
    key layout (0, 0 when nothing was counted)."""
    month = keys.month_of(hour)
    width = keys.width(mechanism_id)
    at = keys.counter_index(month, keys.hour_index(hour), 0, width)
    raw = client.get(keys.counters(metric, mechanism_id, month)) or b""
    values = decode_counters(raw)
    return (values[at], values[at + 1]) if at + 1 < len(values) else (0, 0)


def put_counts(client: redis.Redis, metric: str, mechanism_id: str,
               hours: dict[datetime, tuple[int, int]], retention_days: int = 90) -> None:
    """Add (n, ones) to hour buckets through the collector's own write path (the ingest
    script), as if batches had arrived in those hours."""
    Store(client).add_hours(metric, mechanism_id,
                            {keys.hour_index(h): counts for h, counts in hours.items()},
                            retention_days, f"test-{secrets.token_hex(8)}",
                            datetime.now(timezone.utc), 3600)
