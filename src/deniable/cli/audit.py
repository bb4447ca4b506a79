"""``deniable audit``: check the client's privacy claims empirically, against the real code.

    deniable audit                          # the mechanisms and modes the client ships
    deniable audit --trials 1000000         # tighter bounds (about ten times longer)
    deniable audit --url https://telemetry.example.com --token KEY --all
    deniable audit --metrics-file deploy/metrics.example.toml dark_mode --json
    deniable audit --redis-url redis://127.0.0.1:6379/0 --log-file collector.log
    deniable audit --client web             # the web client (node >= 18, a built web/dist)

For each boolean metric it samples the client's privacy layer (one new simulated device per
trial) and real Reporters uploading to a capturing server on loopback; a categorical,
histogram or numeric metric (GRR, OUE, 1BitMean; read from its declaration with MetricSpec)
is sampled through its mechanism's perturb with the secure system source; an open metric
(od:) through the client's privacy layer, and its exact epsilon enumerated (held to the
epsilon its entry states, or the client's default ceiling ln 9). With --client web the same
checks judge the web client's reports and samplers, drawn in node from its built code. It
prints, per
check, the claimed epsilon, an empirical lower bound (95% by default), their ratio (tightness) and a
verdict. Audit reports are never sent to a real collector: they would count as real data.
Exit status: 0 when every claim holds, 1 when any check fails, 2 for bad usage. docs/audit.md
explains the method and what a pass does and does not prove.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from deniable.cli.options import confidence_level, env_default, positive_int

HELP = "audit: check every privacy claim empirically against the real client code"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("audit", help=HELP, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="*", metavar="METRIC",
                        help="metrics to audit (default: the client's built-in mechanisms, or "
                             "with --all every metric of the catalogue)")
    parser.add_argument("--all", action="store_true",
                        help="audit every metric of the catalogue (--url or --metrics-file)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--url", metavar="URL",
                        help="take the metrics from this collector's catalogue (GET /v1/metrics)")
    source.add_argument("--metrics-file", type=Path, metavar="FILE",
                        help="take the metrics from a collector's metrics TOML file")
    parser.add_argument("--token", default=env_default("INGEST_TOKEN"),
                        help="an ingest key for --url (default: $DENIABLE_INGEST_TOKEN)")
    parser.add_argument("--trials", type=positive_int, default=100_000,
                        help="one-report samples per input (default 100000; 1000000 takes "
                             "about ten times as long and gives tighter bounds)")
    parser.add_argument("--repeats", type=positive_int, default=4,
                        help="k, reports per device in the repeated-reports check (default 4)")
    parser.add_argument("--confidence", type=confidence_level, metavar="LEVEL",
                        help="confidence of the epsilon lower bounds, in (0, 1) (default "
                             "0.95: a claim that is exactly right fails at most 1 run in 20; "
                             "0.999999 makes that 1 in a million, with looser bounds)")
    parser.add_argument("--timing-calls", type=positive_int, default=100_000,
                        help="report() calls per value in the timing check (default 100000)")
    parser.add_argument("--redis-url", metavar="URL",
                        help="also scan this collector's Redis: no key, value or expiry may "
                             "identify a batch's content or time a write finer than the hour")
    parser.add_argument("--redis-cluster", action="store_true",
                        help="--redis-url is a Redis Cluster node")
    parser.add_argument("--log-file", type=Path, action="append", default=[], metavar="FILE",
                        help="with --redis-url, also scan these collector log files")
    parser.add_argument("--client", choices=("python", "web"), default="python",
                        help="the client audited: this Python client (default), or the web "
                             "client run in node >= 18 (docs/audit.md, \"The web client\")")
    parser.add_argument("--web-client", type=Path, metavar="DIR",
                        help="with --client web: the built web client package directory "
                             "(package.json and dist/; default: the repo's web/)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=run)


def _subjects(args: argparse.Namespace) -> list[Any]:
    from deniable.audit.mechanisms import builtin_subjects, catalogue_subjects
    from deniable.cli.errors import CLIError
    if args.url:
        from deniable.client.transport import Transport
        transport = Transport(args.url, token=args.token, retries=1)
        try:
            document = transport.fetch_catalogue_document()
        finally:
            transport.close()
        entries = document.get("metrics") if isinstance(document, dict) else None
        subjects = catalogue_subjects(_catalogue(document, args.url), _epsilons(
            {e.get("name"): e for e in entries if isinstance(e, dict)}
            if isinstance(entries, list) else {}))
    elif args.metrics_file:
        subjects = catalogue_subjects(*_read_metrics_file(args.metrics_file))
    else:
        if args.all:
            raise CLIError("--all audits a catalogue: give --url or --metrics-file")
        subjects = builtin_subjects()
    if args.metrics:
        known = {s.name: s for s in subjects}
        unknown = [m for m in args.metrics if m not in known]
        if unknown:
            raise CLIError(f"unknown metric(s) {', '.join(unknown)}; known: "
                           f"{', '.join(sorted(known))}")
        return [known[m] for m in args.metrics]
    if (args.url or args.metrics_file) and not args.all:
        raise CLIError("name the metrics to audit, or pass --all")
    return subjects


def _spec(entry: dict[str, Any]) -> Any:
    """A metric's MetricSpec from a catalogue entry or a metrics-file table (``kind``, its
    declaration, and ``mechanism`` or ``epsilon``; neither: ``rr:1/2:1/2``)."""
    from deniable.client.kinds import MetricSpec, kind_of, parse_mechanism
    kind = kind_of(entry.get("kind", "boolean"))
    if "mechanism" in entry or "epsilon" not in entry:
        return MetricSpec.from_document(entry, parse_mechanism(entry.get("mechanism",
                                                                         "rr:1/2:1/2")))
    return MetricSpec.build(kind.name, epsilon=entry.get("epsilon"),
                            categories=entry.get("categories", ())
                            if "categories" in kind.declares else (),
                            edges=entry.get("edges", ()), lower=entry.get("lower"),
                            upper=entry.get("upper"), clamp=entry.get("clamp", False),
                            max_bytes=entry.get("max_bytes"))


def _epsilons(entries: dict[Any, Any]) -> dict[str, float]:
    """The epsilon each entry states (a metrics file's declaration, or what a collector
    serves): the ceiling an open metric's exact epsilon is held to."""
    return {name: float(entry["epsilon"]) for name, entry in entries.items()
            if isinstance(name, str) and isinstance(entry, dict)
            and isinstance(entry.get("epsilon"), (int, float))
            and not isinstance(entry.get("epsilon"), bool)}


def _catalogue(doc: Any, where: str) -> dict[str, Any]:
    from deniable.cli.errors import CLIError
    from deniable.client.errors import DeniableError
    entries = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise CLIError(f"{where} served no list of metrics")
    try:
        return {entry["name"]: _spec(entry) for entry in entries}
    except (KeyError, TypeError, AttributeError, DeniableError) as exc:
        raise CLIError(f"{where} serves a metric the audit cannot read: {exc}") from exc


def _log_lines(paths: list[Path]) -> list[str]:
    from deniable.cli.errors import CLIError
    lines: list[str] = []
    for path in paths:
        try:
            lines.extend(path.read_text(errors="replace").splitlines())
        except OSError as exc:
            raise CLIError(f"cannot read log file {path}: {exc}") from exc
    return lines


def _read_metrics_file(path: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """(metric -> its spec, metric -> the epsilon it declares) of a metrics TOML file."""
    from deniable.cli.errors import CLIError
    from deniable.client.errors import DeniableError
    try:
        doc = tomllib.loads(path.read_text())
        tables = doc.get("metrics", {})
        return ({name: _spec(entry) for name, entry in tables.items()}, _epsilons(tables))
    except (OSError, tomllib.TOMLDecodeError, AttributeError, TypeError,
            DeniableError) as exc:
        raise CLIError(f"cannot read metrics file {path}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    from deniable.audit.mechanisms import DEFAULT_CONFIDENCE, Audit
    subjects = _subjects(args)
    if args.confidence is None:
        args.confidence = DEFAULT_CONFIDENCE
    client = None
    if args.client == "web":
        from deniable.audit.web import WebClient, WebClientError
        try:
            client = WebClient.find(args.web_client)
        except WebClientError as exc:
            print(f"deniable audit: error: {exc}", file=sys.stderr)
            return 2
    elif args.web_client is not None:
        print("deniable audit: error: --web-client goes with --client web", file=sys.stderr)
        return 2
    audit = Audit(trials=args.trials, repeats=args.repeats, timing_calls=args.timing_calls,
                  confidence=args.confidence, client=client)
    started = time.monotonic()
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("auditing", total=audit.work(subjects))

        def advance(label: str, done: int) -> None:
            bar.update(task, advance=done, description=label)
        audit.progress = advance
        results = audit.run(subjects)
    if args.redis_url:
        from deniable.audit.mechanisms import check_server
        results.append(check_server(args.redis_url, _log_lines(args.log_file),
                                    cluster=args.redis_cluster))
    failed = [r for r in results if not r.passed]
    if args.json:
        json.dump({"passed": not failed, "client": args.client, "trials": args.trials,
                   "repeats": args.repeats,
                   "confidence": args.confidence,
                   "seconds": round(time.monotonic() - started, 1),
                   "results": [r.to_dict() for r in results]}, sys.stdout, indent=2)
        print()
    else:
        _print_table(results, args, time.monotonic() - started)
    return 1 if failed else 0


def _print_table(results: list[Any], args: argparse.Namespace, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"deniable audit of the {args.client} client: {args.trials:,} trials "
                        f"per input, "
                        f"k = {args.repeats} repeated reports, {args.confidence:.6g} lower bounds")
    for column in ("subject", "check", "claim ε", "bound ε", "tightness", "verdict", "detail"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(r.subject, r.check,
                      "" if r.claim is None else f"{r.claim:.4f}",
                      "" if r.bound is None else f"{r.bound:.4f}",
                      "" if r.tightness is None else f"{r.tightness:.3f}",
                      "pass" if r.passed else "FAIL", r.detail)
    console = Console(width=160 if not sys.stdout.isatty() else None)
    console.print(table)
    failed = sum(not r.passed for r in results)
    console.print(f"{len(results) - failed} passed, {failed} failed in {seconds:.0f} s. "
                  "A pass means the check could not refute the claim; see docs/audit.md.")
