"""The collector's clock: the receive time that picks a report's hour bucket.

Always the real UTC time, unless the DEMO/TEST-ONLY setting ``DEMO_CLOCK_FILE``
(``DENIABLE_DEMO_CLOCK_FILE``) names a file. Then each request reads a number of seconds from
that file and shifts the clock by it, so ``deniable demo`` and the tests can fill simulated
days (e.g. ``-86400`` files reports under yesterday). Never set it in production: buckets would
no longer say when reports arrived. Devices never set the time; their clocks are not trusted.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

log = logging.getLogger("deniable.collector")
_warned: set[str] = set()


def now(demo_clock_file: str | None = None) -> datetime:
    """The receive time of a request (UTC), shifted by ``demo_clock_file`` if one is set."""
    real = datetime.now(timezone.utc)
    path = demo_clock_file
    if not path:
        return real
    if path not in _warned:
        _warned.add(path)
        log.warning("DEMO CLOCK in use (%s): buckets follow a simulated time", path)
    try:
        offset = float(Path(path).read_text().strip() or 0)
    except (OSError, ValueError):
        return real  # a missing or half-written file: the real time, never a crash
    return real + timedelta(seconds=offset)
