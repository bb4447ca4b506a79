"""This process's id, read once and refreshed in the child after every ``os.fork``.

``os.getpid()`` is a system call (glibc no longer caches it), and the hot path checks for forks
several times per request: in the Prometheus values and in each thread's Redis connection.
"""
from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """This process's id, without a system call."""
    return _pid
