"""``deniable report``: debiased estimates for analysts, pooled or as time series."""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from deniable.cli.options import confidence_level, env_default, iso_time, positive_int

HELP = "print debiased estimates per metric (table, JSON, CSV) or write an HTML report"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "report", help=HELP, description=HELP + ". Counts come from a collector's HTTP API "
        "(--collector) or straight from its Redis (--redis-url). Without "
        "--every, one pooled estimate per metric; with --every hour|day|week, a time series. "
        "Every kind: the share of yes (boolean), each category's unbiased share with "
        "per-category and simultaneous intervals (categorical, histogram), the mean in its "
        "units (numeric).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--collector", default=env_default("COLLECTOR_URL"),
                        help="collector base URL (DENIABLE_COLLECTOR_URL)")
    source.add_argument("--redis-url", help="read counters straight from this Redis")
    parser.add_argument("--metrics-file",
                        help="with --redis-url: the collector's metrics TOML file, for metrics "
                             "its Redis registry lacks (optional)")
    parser.add_argument("--token", default=env_default("READ_TOKEN"),
                        help="read token, if the collector wants one (DENIABLE_READ_TOKEN)")
    parser.add_argument("--cacert", type=Path, metavar="FILE",
                        help="with --collector https://...: trust this CA certificate (PEM), "
                             "e.g. a private CA's (default: the system's CAs)")
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
                             "--every bucket, day by default, rolled up by --rolling; changes "
                             "between the range's halves); --format still goes to stdout")
    parser.add_argument("--split", type=iso_time,
                        help="with --html: compare [split, to) with [from, split); must lie "
                             "inside the range (default: the middle of the range)")
    parser.add_argument("--correction", choices=("holm", "bonferroni", "none"),
                        help="with --html: multiple-comparison correction of the changes "
                             "(default holm)")
    parser.add_argument("--changes", action="store_true",
                        help="also print what changed between the range's halves (or "
                             "--split): one line per metric, in plain words")
    parser.add_argument("--family", choices=("metric", "report"),
                        help="with --changes or --html: the correction's family: each "
                             "metric's own comparisons (default; a categorical metric's "
                             "categories together), or every comparison of the report "
                             "together, across metrics")
    parser.add_argument("--confidence", type=confidence_level, default=0.95,
                        help="confidence level of the intervals, in (0, 1) "
                             "(default %(default)s)")
    parser.add_argument("--simplex", action="store_true",
                        help="categorical and histogram metrics: also show the projection of "
                             "the shares onto the probability simplex (non-negative, sum 1). "
                             "BIASED, flagged as such; the unbiased shares stay the estimate")
    parser.add_argument("--detailed", action="store_true",
                        help="tables as analysts read them: reports, periods, raw (perturbed) "
                             "yes-rates and counts, 4 decimals (JSON and CSV always carry "
                             "every number)")
    parser.add_argument("--by", metavar="DIMENSION",
                        help="break each metric down by a public dimension it declares (or a "
                             "declared combination, e.g. app_version,platform): an estimate "
                             "per value, pairwise comparisons (Holm), small cells suppressed; "
                             "without --metric, every metric that declares it")
    parser.add_argument("--min-devices", "--min-reports", dest="min_reports",
                        type=positive_int, metavar="K",
                        help="with --by (or --html): suppress cells with fewer than K devices "
                             "(default 100; the most reports in one period, since each device "
                             "sends at most one per period, so a cell is hidden whatever the "
                             "range): such an estimate is mostly noise and a tiny cell can "
                             "single people out")
    parser.add_argument("--version", type=positive_int, metavar="N",
                        help="with --metric: read version N of the metrics named, and their "
                             "breakdowns (older versions and retired metrics stay readable)")
    parser.set_defaults(run=run, parser=parser)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse option combinations that would otherwise be silently ignored."""
    error = args.parser.error
    if args.rolling and not args.every:
        error("--rolling needs --every hour|day|week")
    if not (args.html or args.changes):
        for option, value in (("--split", args.split), ("--correction", args.correction),
                              ("--family", args.family)):
            if value is not None:
                error(f"{option} applies to the comparisons: add --changes or --html FILE")
    if args.changes and args.by:
        error("--changes compares the range's halves of whole metrics: leave out --by")
    if args.version is not None and not args.metrics:
        error("--version needs --metric NAME: versions are per metric")
    if args.metrics_file and not args.redis_url:
        error("--metrics-file goes with --redis-url")
    if args.cacert is not None:
        if not args.collector:
            error("--cacert goes with --collector https://...")
        if not Path(args.cacert).is_file():
            error(f"--cacert {args.cacert}: no such file (a CA certificate in PEM)")
    if args.simplex and args.every:
        error("--simplex applies to pooled estimates: leave out --every")
    if args.by and (args.every or args.simplex):
        error("--by gives one pooled estimate per value: leave out --every and --simplex")
    if args.min_reports is not None and not (args.by or args.html):
        error("--min-devices applies to breakdowns: add --by DIMENSION (or --html FILE)")


def _redis_errors() -> tuple[type[BaseException], ...]:
    try:
        import redis
    except ImportError:  # an HTTP-only install
        return ()
    return (redis.RedisError,)


def _open_source(args: argparse.Namespace) -> Any:
    from deniable.analysis import HTTPSource
    from deniable.analysis.sources import SourceError

    if args.redis_url:
        from deniable.cli.sources import RedisSource  # needs the collector extra (redis)

        source: Any
        try:
            source = RedisSource(args.redis_url, args.metrics_file)
            known = source.metrics()
        except _redis_errors() as exc:
            raise SourceError(f"cannot read the collector's Redis at {args.redis_url}: "
                              f"{exc}") from exc
        return source, known
    if args.collector:
        source = HTTPSource(args.collector, token=args.token,
                            verify=str(args.cacert) if args.cacert else True)
        return source, source.metrics()
    args.parser.error("name a source: --collector URL, or --redis-url URL")


def _report_open(args: argparse.Namespace, source: Any, names: list[str], start: datetime,
                 end: datetime) -> str:
    """The discoveries of open-domain metrics (per declared period and over the window), rendered;
    with ``--html``, also written to that file (after the other metrics' sections, if any)."""
    from deniable.analysis.open_report import render_open, render_open_html, summarize_open

    summaries = []
    for name in names:
        info, starts, counters = source.open_counters(name, start, end)
        summaries.append(summarize_open(name, info.mechanism.id, starts, counters,
                                        args.confidence, period=info.policy.period))
    if args.html:
        args.open_html = render_open_html(summaries)
    return render_open(summaries, args.format)


def _write_html(args: argparse.Namespace, page: str) -> None:
    """Write ``--html``, with the open metrics' section (if any) before the page's end."""
    extra = getattr(args, "open_html", "")
    if extra:
        at = page.rfind("<script>")
        page = page[:at] + extra + page[at:] if at >= 0 else page + extra
    args.html.write_text(page, encoding="utf-8")
    print(f"wrote {args.html}", file=sys.stderr)


class _JoinedJSON:
    """stdout for one JSON document: the other metrics' document gets the open metrics'
    discoveries under ``open`` when it is written (the report writes it in one call)."""

    def __init__(self, out: Any, open_docs: list[Any]) -> None:
        self._out = out
        self._open: list[Any] | None = open_docs

    def write(self, text: str) -> int:
        try:
            doc = json.loads(text)
        except ValueError:
            return int(self._out.write(text))
        if isinstance(doc, dict) and self._open is not None:
            doc["open"], self._open = self._open, None
            text = json.dumps(doc, indent=2) + "\n"
        return int(self._out.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def _read(source: Any, name: str, start: datetime, end: datetime, version: int | None) -> Any:
    from deniable.analysis.sources import SourceError

    try:
        return source.counts(name, start, end, version=version)
    except _redis_errors() as exc:
        raise SourceError(f"cannot read counts of {name}: {exc}") from exc


def _histories(args: argparse.Namespace, source: Any, all_counts: list[Any], start: datetime,
               end: datetime) -> list[Any]:
    """Each metric's history across versions (``analysis.history``) when more than one
    version has reports in the range and no --version was asked for."""
    if args.version is not None or args.rolling:
        return []
    from deniable.analysis.history import history

    found = []
    for counts in all_counts:
        if (counts.metric.version or 1) < 2:
            continue
        h = history(source, counts.metric.name, start, end, args.every or "day",
                    args.confidence)
        if h is not None:
            found.append(h)
    return found


def _version_hint(source: Any, counts: Any, start: datetime, end: datetime) -> str | None:
    """When the current version has no reports in the range, name older versions that do."""
    current = counts.metric.version
    if counts.n.sum() > 0 or not current or current < 2:
        return None
    from deniable.analysis.sources import SourceError

    found = []
    for older in range(current - 1, 0, -1):
        try:
            n = int(_read(source, counts.metric.name, start, end, older).n.sum())
        except SourceError:
            continue
        if n:
            found.append(f"version {older} holds {n:,} reports")
    if not found:
        return None
    return (f"{counts.metric.name}: no reports of version {current} in this range, but "
            f"{'; '.join(found)}: read it with --metric {counts.metric.name} --version "
            f"{found[0].split()[1]}")


def run(args: argparse.Namespace) -> int:
    saved = sys.stdout  # _run may wrap it to join the open metrics' JSON (``_JoinedJSON``)
    try:
        return _run(args)
    finally:
        sys.stdout = saved


def _discovered(metric: object) -> bool:
    """A metric of a kind whose values are discovered (open), not estimated per slot."""
    from deniable.client.kinds import REGISTRY

    kind = REGISTRY.get(getattr(metric, "kind", ""))
    return kind is not None and kind.discovered


def _run(args: argparse.Namespace) -> int:
    from deniable.analysis import analyze, render_html, summarize
    from deniable.analysis.report import render, render_series
    from deniable.analysis.sources import default_range
    from deniable.analysis.sources import SourceError
    from deniable.analysis.timeseries import rolling, series

    _check_options(args)
    start, end = default_range(args.start, args.end)
    if start >= end:
        args.parser.error("--from must come before --to")
    if args.split is not None and not start < args.split < end:
        args.parser.error(f"--split {args.split.isoformat()} lies outside the range "
                          f"[{start.isoformat()}, {end.isoformat()})")
    source, known = _open_source(args)
    if args.by:
        return _run_by(args, source, known, start, end)
    names = args.metrics or sorted(known)
    opened = [n for n in names if n in known and _discovered(known[n])]
    if opened:
        text = _report_open(args, source, opened, start, end)
        names = [n for n in names if n not in opened]
        if not names:
            sys.stdout.write(text)
            if args.html:
                from deniable.analysis.open_report import html_page

                _write_html(args, html_page(args.open_html))
            return 0
        if args.format == "json":  # one document: the open metrics under "open"
            sys.stdout = _JoinedJSON(sys.stdout, json.loads(text)["open"])  # type: ignore[assignment]
        else:
            sys.stdout.write(text + ("\n" if args.format == "table" else ""))
    all_counts = []
    unknown = []
    for name in names:
        try:
            all_counts.append(_read(source, name, start, end, args.version))
        except SourceError as exc:
            if name in known or args.version is not None:
                raise
            unknown.append(name)  # neither active nor ever registered (retired ones read)
    if unknown:
        args.parser.error(f"unknown metric(s): {', '.join(unknown)}; known: "
                          f"{', '.join(known) or 'none'}")
    for counts in all_counts:
        hint = _version_hint(source, counts, start, end) if args.version is None else None
        if hint:
            print(f"deniable report: note: {hint}", file=sys.stderr)
    histories = _histories(args, source, all_counts, start, end)
    if args.every:
        all_series = [series(c, args.every, start, end, args.confidence) for c in all_counts]
        if args.rolling:
            all_series = [rolling(ts, args.rolling) for ts in all_series]
        if args.format == "json" and histories:
            from deniable.analysis.report import history_document, series_document

            sys.stdout.write(json.dumps({"series": [series_document(ts) for ts in all_series],
                                         "history": [history_document(h)
                                                     for h in histories]}, indent=2) + "\n")
        else:
            sys.stdout.write(render_series(all_series, args.format, detailed=args.detailed))
            if args.format == "table":
                from deniable.analysis.report import render_history_table

                for h in histories:
                    sys.stdout.write("\n" + render_history_table(h))
    else:
        summaries = [summarize(c, args.confidence, start=start, end=end) for c in all_counts]
        sys.stdout.write(render(summaries, args.format, projected=args.simplex,
                                detailed=args.detailed))
        for h in histories if args.format == "table" else ():
            print(f"{h.metric}: versions {', '.join(str(v) for v in h.versions)} have reports "
                  f"in this range; the estimate above is version {h.versions[-1]}'s. The series "
                  f"across versions: --every day")
    if args.html or args.changes:
        analysis = analyze(source, names, start=start, end=end,
                           granularity=args.every or "day", confidence=args.confidence,
                           split=args.split, correction=args.correction or "holm",
                           rolling_window=args.rolling, version=args.version,
                           min_reports=args.min_reports, family=args.family or "metric")
        if args.changes:
            sys.stdout.write(changes_text(analysis))
        if args.html:
            _write_html(args, render_html(analysis.sections, analysis.comparisons,
                                          breakdowns=analysis.breakdowns,
                                          family=analysis.family,
                                          histories=analysis.histories))
    return 0


def changes_text(analysis: Any) -> str:
    """"What changed", one line per metric, and the correction's family, as text."""
    from deniable.analysis.changes import family_note, what_changed

    if not analysis.comparisons:
        return "\nWhat changed: nothing to compare (a half of the range has no reports).\n"
    c0 = analysis.comparisons[0]
    lines = [f"\nWhat changed, {c0.b.replace('..', ' to ')} against "
             f"{c0.a.replace('..', ' to ')} UTC:"]
    for line in what_changed(analysis.comparisons):
        moved = "".join(sorted({"\u25b2" if c.difference > 0 else "\u25bc"
                                for c in line.comparisons if c.significant}))
        lines.append("  " + (moved.ljust(2) if moved else "- ") + " " + line.text)
    lines.append(family_note(analysis.comparisons, analysis.family))
    return "\n".join(lines) + "\n"


def _run_by(args: argparse.Namespace, source: Any, known: dict[str, Any], start: datetime,
            end: datetime) -> int:
    """``--by``: each metric broken down by one dimension, small cells suppressed."""
    from deniable.analysis import analyze, render_html
    from deniable.analysis.breakdown import DEFAULT_MIN_REPORTS, breakdown
    from deniable.analysis.breakdown_report import render_breakdowns
    from deniable.analysis.sources import SourceError

    by = ",".join(sorted(part.strip() for part in args.by.split(",")))
    min_reports = args.min_reports or DEFAULT_MIN_REPORTS
    if args.metrics:
        unknown = [n for n in args.metrics if n not in known]
        if unknown:
            args.parser.error(f"unknown metric(s): {', '.join(unknown)}; known: "
                              f"{', '.join(known) or 'none'}")
        names = list(args.metrics)
    else:
        names = [n for n in sorted(known) if _declares(known[n], by)]
        if not names:
            args.parser.error(f"no metric declares the dimension {by!r}")
    try:
        found = [breakdown(source, name, by, start, end, min_reports=min_reports,
                           confidence=args.confidence, version=args.version) for name in names]
    except _redis_errors() as exc:
        raise SourceError(f"cannot read counts: {exc}") from exc
    sys.stdout.write(render_breakdowns(found, args.format, detailed=args.detailed))
    if args.html:
        analysis = analyze(source, names, start=start, end=end, granularity="day",
                           confidence=args.confidence, split=args.split,
                           correction=args.correction or "holm", by=by,
                           min_reports=min_reports, version=args.version)
        args.html.write_text(render_html(analysis.sections, analysis.comparisons,
                                         breakdowns=analysis.breakdowns), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def _declares(info: Any, by: str) -> bool:
    """Whether a metric declares ``by`` (a dimension, or a combination ``a,b``)."""
    dims = getattr(info, "dimensions", None)
    if not dims:
        return False
    return dims.get(by) is not None or tuple(by.split(",")) in dims.combinations
