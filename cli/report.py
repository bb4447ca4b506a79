"""``deniable report``: debiased estimates for analysts, pooled or as time series."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deniable.cli.options import env_default, iso_time, positive_int

HELP = "print debiased estimates per metric (table, JSON, CSV) or write an HTML report"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "report", help=HELP, description=HELP + ". Counts come from a collector's HTTP API "
        "(--collector) or straight from its Redis (--redis-url). Without "
        "--every, one pooled estimate per metric; with --every hour|day|week, a time series.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--collector", default=env_default("COLLECTOR_URL"),
                        help="collector base URL (DENIABLE_COLLECTOR_URL)")
    source.add_argument("--redis-url", help="read counters straight from this Redis")
    parser.add_argument("--metrics-file",
                        help="with --redis-url: the collector's metrics TOML file, for metrics "
                             "its Redis registry lacks (optional)")
    parser.add_argument("--token", default=env_default("READ_TOKEN"),
                        help="read token, if the collector wants one (DENIABLE_READ_TOKEN)")
    parser.add_argument("--metric", action="append", dest="metrics", metavar="NAME",
                        help="a metric to report (repeatable; default: all)")
    parser.add_argument("--from", dest="start", type=iso_time,
                        help="start of the range, ISO 8601 (default: 7 days before --to)")
    parser.add_argument("--to", dest="end", type=iso_time,
                        help="end of the range, ISO 8601 (default: now)")
    parser.add_argument("--every", choices=("hour", "day", "week"),
                        help="a time series with one bucket per UTC hour, day or ISO week")
    parser.add_argument("--rolling", type=positive_int, metavar="BUCKETS",
                        help="with --every: pool each bucket with the BUCKETS-1 before it "
                             "(e.g. --every day --rolling 7)")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default %(default)s)")
    parser.add_argument("--html", metavar="FILE", type=Path,
                        help="also write a self-contained HTML report to FILE (charts per "
                             "--every bucket, day by default; changes between the range's "
                             "halves)")
    parser.add_argument("--split", type=iso_time,
                        help="with --html: compare [split, to) with [from, split) (default: "
                             "the middle of the range)")
    parser.add_argument("--correction", choices=("holm", "bonferroni", "none"), default="holm",
                        help="multiple-comparison correction in the HTML report "
                             "(default %(default)s)")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="confidence level of the intervals (default %(default)s)")
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from deniable.analysis import HTTPSource, RedisSource, analyze, render_html, summarize
    from deniable.analysis.report import render, render_series
    from deniable.analysis.sources import default_range
    from deniable.analysis.timeseries import rolling, series

    if args.redis_url:
        source = RedisSource(args.redis_url, args.metrics_file)
    elif args.collector:
        source = HTTPSource(args.collector, token=args.token)
    else:
        args.parser.error("name a source: --collector URL, or --redis-url URL")
    if not 0 < args.confidence < 1:
        args.parser.error(f"--confidence must lie in (0, 1), got {args.confidence}")
    if args.rolling and not args.every:
        args.parser.error("--rolling needs --every hour|day|week")
    known = source.metrics()
    names = args.metrics or sorted(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        args.parser.error(f"unknown metric(s): {', '.join(unknown)}; known: {', '.join(known)}")
    start, end = default_range(args.start, args.end)
    if start >= end:
        args.parser.error("--from must come before --to")
    if args.html:
        analysis = analyze(source, names, start=start, end=end,
                           granularity=args.every or "day", confidence=args.confidence,
                           split=args.split, correction=args.correction)
        args.html.write_text(render_html(analysis.sections, analysis.comparisons),
                             encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
        return 0
    if args.every:
        all_series = [series(source.counts(n, start, end), args.every, start, end,
                             args.confidence) for n in names]
        if args.rolling:
            all_series = [rolling(ts, args.rolling) for ts in all_series]
        sys.stdout.write(render_series(all_series, args.format))
        return 0
    summaries = [summarize(source.counts(n, start, end), args.confidence) for n in names]
    sys.stdout.write(render(summaries, args.format))
    return 0
