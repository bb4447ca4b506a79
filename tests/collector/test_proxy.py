"""The proxy-count check: one warning per process when X-Forwarded-For contradicts
DENIABLE_PROXY_FIX_X_FOR, none when they agree, and the client address it yields."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from deniable.collector.app import create_app
from deniable.collector.proxy import LOGGER
from tests.conftest import OPEN


@pytest.fixture()
def warnings_logged() -> Iterator[list[str]]:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                seen.append(record.getMessage())

    handler = Keep()
    LOGGER.addHandler(handler)
    yield seen
    LOGGER.removeHandler(handler)


@pytest.fixture()
def client_for(redis_url: str, metrics_file: Path, redis_client):  # type: ignore[no-untyped-def]
    """A factory of test clients for collectors with a given PROXY_FIX_X_FOR."""
    apps = []

    def make(x_for: int):  # type: ignore[no-untyped-def]
        app = create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                          "TESTING": True, **OPEN, "PROXY_FIX_X_FOR": x_for})
        apps.append(app)
        return app.test_client()

    yield make
    for app in apps:
        app.extensions["deniable.store"].client.close()


@pytest.mark.parametrize(("x_for", "header", "expected"), [
    (0, "203.0.113.7", "is 0"),                  # a proxy in front, but the setting says none
    (2, "203.0.113.7", "holds 1 address(es)"),   # fewer hops than the setting: no client found
])
def test_a_wrong_proxy_count_warns_once(client_for, warnings_logged: list[str],  # type: ignore[no-untyped-def]
                                        x_for: int, header: str, expected: str) -> None:
    http = client_for(x_for)
    for _ in range(5):
        assert http.get("/healthz", headers={"X-Forwarded-For": header}).status_code == 200
    matching = [m for m in warnings_logged if "DENIABLE_PROXY_FIX_X_FOR" in m]
    assert len(matching) == 1 and expected in matching[0], warnings_logged


@pytest.mark.parametrize(("x_for", "header"), [(0, None), (1, "203.0.113.7"),
                                               (1, "198.51.100.1, 203.0.113.7")])
def test_a_matching_proxy_count_is_silent(client_for, warnings_logged: list[str],  # type: ignore[no-untyped-def]
                                          x_for: int, header: str | None) -> None:
    http = client_for(x_for)
    headers = {"X-Forwarded-For": header} if header else {}
    assert http.get("/healthz", headers=headers).status_code == 200
    assert [m for m in warnings_logged if "DENIABLE_PROXY_FIX_X_FOR" in m] == []
