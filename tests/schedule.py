"""The order pytest-xdist hands test files to its workers: the heaviest first.

With ``--dist loadfile`` a file is a unit of work that one worker runs whole, and xdist by
default queues files by their number of tests, most first; the heavy files (a few end-to-end
tests of a minute each) then come last, and one worker runs them while the other idles. Here
the files measured heaviest are queued first (longest-processing-time-first scheduling), and the
rest after them in xdist's usual order, so the two workers finish within a file of each other.
Only the order changes: every test still runs, each file on one worker, its tests in order.
A run in one process (no xdist) is left in collection order.

Refresh ``HEAVIEST`` from a whole run's ``--durations=80``, summing the seconds per file.
"""
from __future__ import annotations

from collections import Counter

import pytest

HEAVIEST = (
    # Seconds per file (call + setup + teardown) in `./dev test --durations=0` (2 workers)
    # on the 2-core machine beside other jobs (load 3-7), 2026-11-26 23:25; heaviest first.
    # Idle, a little over half.
    "tests/collector/test_schemathesis.py",         # 106
    "tests/e2e/test_discovery_live.py",             # 59
    "tests/test_no_orphans.py",                     # 46
    "tests/e2e/test_web_client.py",                 # 35
    "tests/analysis/test_audit.py",                 # 33
    "tests/e2e/test_cap_silence.py",                # 33
    "tests/e2e/test_web_version_churn.py",          # 28
    "tests/e2e/test_demo_lifecycle.py",             # 28
    "tests/e2e/test_hostile_catalogue.py",          # 27
    "tests/client/test_reporter_kinds.py",          # 26
    "tests/e2e/test_open_period_live.py",           # 25
    "tests/e2e/test_hostile_leaks.py",              # 25
    "tests/analysis/test_audit_builtins.py",        # 21
    "tests/analysis/test_audit_open.py",            # 20
    "tests/analysis/test_audit_power.py",           # 20
    "tests/e2e/test_client_network.py",             # 19
    "tests/client/test_memo_unique.py",             # 18
    "tests/e2e/test_demo_changes.py",               # 18
    "tests/client/test_categorical_exact.py",       # 17
    "tests/e2e/test_dashboard_open_browser.py",     # 16
    "tests/e2e/test_version_churn.py",              # 15
    "tests/e2e/test_fault_injection.py",            # 15
    "tests/client/test_longitudinal.py",            # 15
    "tests/e2e/test_web_doc_samples.py",            # 14
    "tests/client/test_mechanism.py",               # 13
    "tests/collector/test_cluster_failover.py",     # 13
)
"""Test files, heaviest first: xdist queues these before every other file."""


def file_of(item: pytest.Item) -> str:
    """The test file of ``item`` as its node id spells it (``tests/...py``)."""
    return item.nodeid.split("::", 1)[0]


def heaviest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the files of ``HEAVIEST`` first in its order, then the
    others by their number of tests, most first (xdist's own order); a file's tests keep
    their order and stay together."""
    rank = {path: at for at, path in enumerate(HEAVIEST)}
    tests = Counter(file_of(item) for item in items)
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(file_of(item), len(first_seen))

    def key(item: pytest.Item) -> tuple[int, int, int]:
        path = file_of(item)
        if path in rank:
            return (0, rank[path], 0)
        return (1, -tests[path], first_seen[path])

    items.sort(key=key)


def pytest_configure(config: pytest.Config) -> None:
    """On the xdist controller: queue files in the order the workers collected them (the
    order ``heaviest_first`` gives), not re-sorted by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (whose collection the controller schedules from): heaviest first."""
    if hasattr(config, "workerinput"):
        heaviest_first(items)
