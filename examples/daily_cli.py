"""A once-a-day command-line tool embedding the Deniable client: the settings for a short-lived
process (docs/client.md, "A short-lived process"). It reports two metrics, waits at most about
a second for the upload, and exits promptly even when the collector is down: what it could not
send stays in its queue file and goes with the next run.

    python examples/daily_cli.py http://127.0.0.1:8000 /tmp/daily-cli

The suite type-checks this file with mypy and pyright in strict mode (tests/test_typing.py)
and runs it against a live collector and a dead one.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from deniable.client import Connection, Delivery, Reporter, Stats

METRICS = {
    "dark_mode": {"mechanism": "rr:3/4:1/2"},
    "feature_x_enabled": {"mechanism": "rr:1/2:1/2"},
}
"""What this app reports, declared in code (a metrics TOML file works the same)."""


def run(collector_url: str, data_dir: Path, dark_mode: bool, token: str | None = None) -> Stats:
    """Report today's values and return the reporter's last stats."""
    with Reporter(collector_url, metrics=METRICS, token=token,
                  queue_path=data_dir / "deniable.db",  # kept for the next run if offline
                  delivery=Delivery(close_timeout=1.0,  # the `with` block waits at most 1 s
                                    exit_timeout=0.5),  # the exit hook, for a reporter left open
                  connection=Connection(timeout=(1.0, 2.0)),  # connect and read timeouts
                  ) as reporter:
        reporter.report("dark_mode", dark_mode)
        reporter.report("feature_x_enabled", True)
    return reporter.stats()  # after close(): the last stats


def main(argv: list[str]) -> int:
    # The client logs to the "deniable.client" logger, which has a NullHandler: nothing
    # reaches the terminal unless the app configures logging (logging.basicConfig(), ...).
    url = argv[1] if len(argv) > 1 else "http://127.0.0.1:8000"
    data_dir = Path(argv[2]) if len(argv) > 2 else Path.home() / ".cache" / "daily-cli"
    stats = run(url, data_dir, dark_mode=True, token=os.environ.get("DAILY_CLI_INGEST_KEY"))
    print(f"sent {stats.sent}, queued {stats.queued}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
