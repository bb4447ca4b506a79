"""Storage failures as HTTP answers: Redis down or failing over is 503 with Retry-After.

One guard for every route that touches Redis (the API, the admin API, the dashboard, and
authentication, which reads keys from Redis).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from deniable.collector.errors import storage_unavailable
from deniable.collector.settings import current_settings
from deniable.collector.store import UNAVAILABLE_ERRORS

STORAGE_ERRORS = UNAVAILABLE_ERRORS
"""Redis errors that mean 'storage unavailable for now' (503), not a bug (500)."""


@contextlib.contextmanager
def storage_guard() -> Iterator[None]:
    """Turn Redis being down or failing over into 503 with Retry-After."""
    try:
        yield
    except STORAGE_ERRORS as exc:
        raise storage_unavailable(exc, current_settings().redis.retry_after_seconds) from exc
