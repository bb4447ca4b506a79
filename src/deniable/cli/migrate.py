"""``deniable migrate``: convert a Redis from counters layout 1 (a hash per hour) to packed
month strings, in place, while collectors keep running."""
from __future__ import annotations

import argparse
import sys

from deniable.cli.options import env_default

HELP = "convert layout-1 counters (a hash per metric and hour) to packed month strings"
DESCRIPTION = """\
Convert a collector's Redis from the layout-1 counters (one hash per metric and UTC hour) to the
packed month layout (one string per metric version and UTC month). Each hour is added to its
month and deleted in one atomic step: the command can be interrupted and run again, and it can
run while upgraded collectors take traffic. Retention comes from the metric registry (the
metrics file fills in for metrics Redis lacks); unknown metrics keep the retention their keys'
TTLs imply."""


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("migrate", help=HELP, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default=env_default("REDIS_URL", "redis://127.0.0.1:6379/0"),
                        help="the collector's Redis (DENIABLE_REDIS_URL; default %(default)s)")
    parser.add_argument("--cluster", action="store_true", help="the Redis is a Redis Cluster")
    parser.add_argument("--metrics-file", default=env_default("METRICS_FILE"),
                        help="the collector's metrics TOML file (DENIABLE_METRICS_FILE)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import redis

    from deniable.collector.errors import CollectorError
    from deniable.collector.live_registry import LiveRegistry
    from deniable.collector.migrate import migrate_v1
    from deniable.collector.registry import load_metrics_file
    from deniable.collector.store import CounterOverflowError, connect

    client = connect(args.redis_url, timeout_seconds=30.0, cluster=args.cluster)
    try:
        file_metrics = load_metrics_file(args.metrics_file) if args.metrics_file else {}
        registry = LiveRegistry(client, file_metrics, cache_seconds=60)

        def retention(metric: str) -> int | None:
            entry = registry.entry(metric)
            return entry.retention_days if entry is not None else None

        report = migrate_v1(client, retention,
                            lambda moved: print(f"  {moved:,} hours moved", file=sys.stderr))
    except redis.RedisError as exc:
        raise CollectorError(f"Redis at {args.redis_url}: {type(exc).__name__}: {exc}") from exc
    except CounterOverflowError as exc:
        raise CollectorError(str(exc)) from exc
    finally:
        client.close()
    print(f"moved {report.moved:,} hour hashes into month strings"
          + (f"; {report.already_gone:,} were gone already" if report.already_gone else "")
          + (f"; left {len(report.skipped)} keys that are not counters" if report.skipped else ""))
    return 0

