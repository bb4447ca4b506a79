"""Runs of an app with a default Reporter (no queue, no privacy_dir), each in its own process.

    python -m tests.client.restart_child URL --runs N [--fork]

Each run creates a default Reporter (its one-report-per-period gate off), reports True for
feature_x_enabled and False for dark_mode twice each, closes (waiting for the upload) and exits. Without ``--fork`` this process is one
run. With ``--fork`` it is a zygote: it imports the client once, creates nothing, and forks one
child per run, one after the other, each a separate process with its own fresh Reporter (what
a fresh interpreter pays to import the client is then paid once). Exit status 0 when every run
sent everything.
"""
from __future__ import annotations

import argparse
import os
import sys

from deniable.client import Connection, Delivery, Privacy, Reporter

METRICS = {"feature_x_enabled": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2"}


def one_run(url: str) -> bool:
    # The one-report-per-period gate is off: every run must send, to show its memoized answer
    # (with the gate, the state's period record would keep all but the first run of the day).
    reporter = Reporter(url, metrics=METRICS, delivery=Delivery(backoff=0.05),
                        privacy=Privacy(one_per_period=False),
                        connection=Connection(timeout=(2.0, 5.0)))
    for _ in range(2):
        reporter.report("feature_x_enabled", True)
        reporter.report("dark_mode", False)
    return reporter.close(timeout=20.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fork", action="store_true")
    args = parser.parse_args(argv)
    if not args.fork:
        return 0 if all(one_run(args.url) for _ in range(args.runs)) else 1
    failures = 0
    for _ in range(args.runs):
        pid = os.fork()
        if pid == 0:  # the run: a fresh Reporter in a process of its own
            code = 1
            try:
                code = 0 if one_run(args.url) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        failures += os.waitstatus_to_exitcode(status) != 0
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
