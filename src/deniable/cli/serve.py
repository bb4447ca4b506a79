"""``deniable serve``: run the collector."""
from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from deniable.cli.options import env_default, positive_int

HELP = "run the collector (gunicorn; --dev for Flask's development server)"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "serve", help=HELP, description=HELP + ". Every option falls back to its DENIABLE_* "
        "environment variable; other settings are read from the environment (see README).")
    parser.add_argument("--host", default=env_default("HOST", "127.0.0.1"),
                        help="address to bind (DENIABLE_HOST; default %(default)s)")
    # A string default goes through `type` when used: a bad DENIABLE_PORT is a usage error of
    # `serve` (exit 2, naming --port), not a crash of every command at start.
    parser.add_argument("--port", type=positive_int, default=env_default("PORT", "8000"),
                        help="port to bind (DENIABLE_PORT; default %(default)s)")
    parser.add_argument("--redis-url", default=env_default("REDIS_URL"),
                        help="Redis holding the counters (DENIABLE_REDIS_URL)")
    parser.add_argument("--metrics-file", default=env_default("METRICS_FILE"),
                        help="TOML file of registered metrics (DENIABLE_METRICS_FILE)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="gunicorn sync workers (DENIABLE_WORKERS; default: the config "
                             "file's, two per core, at least 2)")
    parser.add_argument("--config", default=env_default("GUNICORN_CONFIG"),
                        help="gunicorn config file (DENIABLE_GUNICORN_CONFIG; default: the "
                             "packaged collector/gunicorn.conf.py)")
    parser.add_argument("--dev", action="store_true",
                        help="use Flask's development server (demo and tests only)")
    parser.set_defaults(run=run)


def collector_app() -> Any:
    """The collector app, with the dashboard's open-domain decoder when numpy (the analysis
    extra) is installed: the collector never imports the analysis package, so this layer,
    which may import both, hands it in (``dashboard.use_discovery``)."""
    from importlib.util import find_spec

    from deniable.collector.app import create_app
    from deniable.collector.dashboard import use_discovery

    app = create_app()
    if find_spec("numpy") is not None:
        use_discovery(app, discover_period, track_period)
    return app


def discover_period(mechanism_id: str, rows: Iterable[Sequence[int]],
                    confidence: float) -> dict[str, Any]:
    """``dashboard.Discover``: the rows summed one at a time (memory: one int64 total, not
    one per period), decoded by ``deniable.analysis.discovery``, in the shape of one period
    of ``deniable report --format json`` (``open_report``)."""
    import numpy as np

    from deniable.analysis.discovery import discover
    from deniable.analysis.open_report import OpenSummary, document

    counters: Any = None
    for row in rows:
        values = np.asarray(row, dtype=np.int64)
        counters = values.copy() if counters is None else counters + values
    if counters is None:
        raise ValueError("no rows to decode")
    found = discover(mechanism_id, counters, confidence=confidence)
    summary = OpenSummary("", mechanism_id, float("nan"), confidence, found, ())  # one period
    period: dict[str, Any] = document(summary)["periods"][0]
    period.pop("period", None)
    return period


def track_period(mechanism_id: str, row: Sequence[int], value: str) -> dict[str, Any]:
    """``dashboard.Track``: one string's share in one period's counters
    (``deniable.analysis.discovery.track``): ``pooled`` reports, ``share`` and ``stderr``
    (None with no reports)."""
    import math

    import numpy as np

    from deniable.analysis.discovery import track

    pooled, share, stderr = track(mechanism_id, np.asarray(row, dtype=np.int64), value)
    return {"pooled": pooled, "share": share if math.isfinite(share) else None,
            "stderr": stderr if math.isfinite(stderr) else None}


def run(args: argparse.Namespace) -> int:
    import shutil

    from deniable.collector.server import prepare_metrics_dir, serve

    if args.redis_url:
        os.environ["DENIABLE_REDIS_URL"] = args.redis_url
    if args.metrics_file:
        os.environ["DENIABLE_METRICS_FILE"] = args.metrics_file
    # One random IP-hashing secret for all workers, in memory only (collector-security.md).
    os.environ.setdefault("DENIABLE_RATE_LIMIT_SECRET", secrets.token_hex(32))
    # Before prometheus_client is first imported, so every worker writes to the shared dir.
    metrics_dir, made = (None, False) if args.dev else prepare_metrics_dir()
    owner = os.getpid()  # gunicorn's workers return through here too when they exit
    try:
        from deniable.collector.app import create_app

        create_app()  # fail fast, in the parent, on a bad metrics file or setting
        serve(args.host, args.port, workers=args.workers, dev=args.dev,
              config_file=args.config, app=collector_app)
    finally:
        if made and metrics_dir and os.getpid() == owner:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0
