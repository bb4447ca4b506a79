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
    # Seconds per file (call + setup + teardown) in `CI=true ./dev test --durations=0` (2
    # workers) on the 2-core machine beside other jobs (load 1-5), 2026-11-26 23:46; heaviest
    # first (all files: 773 s, on two workers 405 s).
    "tests/collector/test_schemathesis.py",         # 47
    "tests/e2e/test_discovery_live.py",             # 32
    "tests/test_no_orphans.py",                     # 28
    "tests/analysis/test_audit_open.py",            # 27
    "tests/analysis/test_audit_power.py",           # 24
    "tests/analysis/test_audit_builtins.py",        # 24
    "tests/e2e/test_hostile_leaks.py",              # 18
    "tests/e2e/test_client_network.py",             # 17
    "tests/client/test_reporter_kinds.py",          # 17
    "tests/e2e/test_web_client.py",                 # 17
    "tests/e2e/test_demo_lifecycle.py",             # 15
    "tests/e2e/test_version_churn.py",              # 15
    "tests/e2e/test_cap_silence.py",                # 14
    "tests/analysis/test_audit.py",                 # 14
    "tests/e2e/test_fault_injection.py",            # 14
    "tests/collector/test_backup.py",               # 12
    "tests/collector/test_cluster_failover.py",     # 12
    "tests/e2e/test_hostile_catalogue.py",          # 12
    "tests/e2e/test_web_doc_samples.py",            # 11
    "tests/collector/test_vm_kit.py",               # 11
    "tests/e2e/test_demo_changes.py",               # 10
    "tests/client/test_declaration.py",             # 10
    "tests/client/test_subset_selection.py",        # 10
    "tests/client/test_guest.py",                   # 9
    "tests/client/test_reporter.py",                # 9
    "tests/collector/test_hostile_review.py",       # 9
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
