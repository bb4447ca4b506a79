"""``deniable plan``: how many reports a margin of error needs, or what margin n reports give.

    deniable plan --epsilon 1.0 --margin 0.01
    deniable plan --mechanism rr:1/2:1/2 --n 50000
    deniable plan --collector http://127.0.0.1:8000 --margin 0.02   # every registered metric

The margin is the worst-case half-width of the interval on the true share (a perturbed
yes-rate of 1/2). --epsilon means symmetric randomized response at the largest epsilon not
above the one given (RandomizedResponse.from_epsilon).
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from deniable.cli.options import env_default, positive_int

HELP = "plan: reports needed for a margin of error, or the margin n reports give"


def _epsilon(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {value}")
    return value


def _margin(text: str) -> float:
    value = _epsilon(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {value}")
    return value


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("plan", help=HELP, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--epsilon", type=_epsilon, help="a privacy budget per report (nats)")
    which.add_argument("--mechanism", help="a mechanism id, e.g. rr:1/2:1/2")
    which.add_argument("--collector", nargs="?", const=env_default("COLLECTOR_URL"),
                       metavar="URL", help="plan for every metric this collector registers")
    goal = parser.add_mutually_exclusive_group(required=True)
    goal.add_argument("--margin", type=_margin, help="target margin of error, e.g. 0.01")
    goal.add_argument("--n", type=positive_int, help="a number of reports")
    parser.add_argument("--token", default=env_default("READ_TOKEN"),
                        help="read token for --collector (DENIABLE_READ_TOKEN)")
    parser.add_argument("--confidence", type=_margin, default=0.95,
                        help="confidence level (default %(default)s)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="output format (default %(default)s)")
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from deniable.analysis.plan import plan
    from deniable.client.mechanism import RandomizedResponse

    targets: list[tuple[str | None, RandomizedResponse]]
    if args.epsilon is not None:
        targets = [(None, RandomizedResponse.from_epsilon(args.epsilon))]
    elif args.mechanism is not None:
        targets = [(None, RandomizedResponse.from_id(args.mechanism))]
    else:
        if not args.collector:
            args.parser.error("--collector needs a URL (or DENIABLE_COLLECTOR_URL)")
        from deniable.analysis.sources import HTTPSource

        targets = [(name, info.mechanism) for name, info in
                   sorted(HTTPSource(args.collector, token=args.token).metrics().items())]
    plans = [plan(m, margin=args.margin, n=args.n, confidence=args.confidence, metric=name)
             for name, m in targets]
    if args.format == "json":
        print(json.dumps({"plans": [dataclasses.asdict(p) for p in plans]}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    goal = (f"margin {args.margin}" if args.margin is not None else f"{args.n:,} reports")
    table = Table(title=f"Plan for {goal} at {args.confidence:.0%} confidence (worst case)")
    for header in ("metric", "mechanism", "epsilon", "P(yes|yes)", "P(yes|no)", "reports",
                   "margin"):
        table.add_column(header, justify="left" if header in ("metric", "mechanism")
                         else "right")
    for p in plans:
        table.add_row(p.metric or "-", p.mechanism, f"{p.epsilon:.4f}", p.p_yes_given_yes,
                      p.p_yes_given_no, f"{p.n:,}", f"\u00b1{p.margin:.5f}")
    Console(width=120).print(table)
    return 0
