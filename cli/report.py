"""``deniable report``: debiased estimates for analysts."""
from __future__ import annotations

import argparse
import sys

from deniable.cli.options import env_default, iso_time

HELP = "print debiased estimates per metric, as a table, JSON or CSV"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "report", help=HELP, description=HELP + ". Counts come from a collector's HTTP API "
        "(--collector) or straight from its Redis (--redis-url with --metrics-file).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--collector", default=env_default("COLLECTOR_URL"),
                        help="collector base URL (DENIABLE_COLLECTOR_URL)")
    source.add_argument("--redis-url", help="read counters straight from this Redis")
    parser.add_argument("--metrics-file", help="metrics TOML file (with --redis-url)")
    parser.add_argument("--token", default=env_default("READ_TOKEN"),
                        help="read token, if the collector wants one (DENIABLE_READ_TOKEN)")
    parser.add_argument("--metric", action="append", dest="metrics", metavar="NAME",
                        help="a metric to report (repeatable; default: all)")
    parser.add_argument("--from", dest="start", type=iso_time,
                        help="start of the range, ISO 8601 (default: 7 days before --to)")
    parser.add_argument("--to", dest="end", type=iso_time,
                        help="end of the range, ISO 8601 (default: now)")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default %(default)s)")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="confidence level of the intervals (default %(default)s)")
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from deniable.analysis import HTTPSource, RedisSource, summarize
    from deniable.analysis.report import render

    if args.redis_url:
        if not args.metrics_file:
            args.parser.error("--redis-url needs --metrics-file")
        source = RedisSource(args.redis_url, args.metrics_file)
    elif args.collector:
        source = HTTPSource(args.collector, token=args.token)
    else:
        args.parser.error("name a source: --collector URL, or --redis-url with --metrics-file")
    known = source.metrics()
    names = args.metrics or sorted(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        args.parser.error(f"unknown metric(s): {', '.join(unknown)}; known: {', '.join(known)}")
    if not 0 < args.confidence < 1:
        args.parser.error(f"--confidence must lie in (0, 1), got {args.confidence}")
    summaries = [summarize(source.counts(n, args.start, args.end), args.confidence)
                 for n in names]
    sys.stdout.write(render(summaries, args.format))
    return 0
