"""``deniable plan``: how many devices a margin of error needs, or what margin N devices give.

    deniable plan --epsilon 1.0 --margin 0.01
    deniable plan --mechanism rr:1/2:1/2 --devices 50000 --periods 7
    deniable plan --collector http://127.0.0.1:8000 --margin 0.02   # every registered metric
    deniable plan --epsilon 2 --categories 6 --margin 0.01        # each category's share
    deniable plan --epsilon 1 --range 0 5000 --margin 25          # a mean, +-25 in its units

Sizes are in devices, each sending at most one report per period. The margin is the
worst-case half-width of the interval on the share of devices over a window of --periods
periods, as ``deniable report`` computes it: for memoized metrics (the default) more periods
of the same devices add nothing, so the devices needed do not shrink with --periods. With
--collector each metric's own collection policy is used; otherwise --memoization (and
--instantaneous). --epsilon means symmetric randomized response at the largest epsilon not
above the one given (RandomizedResponse.from_epsilon); with --categories D, the categorical
mechanism chosen for D categories at that epsilon (GRR, OUE or SS, by exact variance), and the
margin is on each category's share (--simultaneous: on all D at once, Bonferroni); with
--range LOWER UPPER, 1BitMean, and the margin is on the mean, in the range's units.
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


def _categories(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 2 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"must lie in 2..1024, got {value}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be finite, got {value}")
    return value


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("plan", help=HELP, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--epsilon", type=_epsilon, help="a privacy budget per report (nats)")
    which.add_argument("--mechanism", help="a mechanism id, e.g. rr:1/2:1/2")
    which.add_argument("--collector", nargs="?", const="", metavar="URL",
                       help="plan for every metric this collector registers (the URL may "
                            "come from DENIABLE_COLLECTOR_URL)")
    goal = parser.add_mutually_exclusive_group(required=True)
    goal.add_argument("--margin", type=_epsilon,
                      help="target margin of error: a share in (0, 1), e.g. 0.01, or for a "
                           "numeric metric a distance in its units, e.g. 25")
    goal.add_argument("--devices", "--n", dest="n", type=positive_int, metavar="N",
                      help="a number of devices, each reporting once per period")
    parser.add_argument("--mean-margin", type=_epsilon, metavar="X",
                        help="with --collector and --margin: the margin on a numeric metric's "
                             "mean, in its unit (e.g. 25 for +-25 ms); without it a numeric "
                             "metric's margin is --margin times its range")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--categories", type=_categories, metavar="D",
                       help="with --epsilon: a categorical (or histogram) metric of D "
                            "categories; the margin is on each category's share")
    shape.add_argument("--range", nargs=2, type=_number, metavar=("LOWER", "UPPER"),
                       help="with --epsilon: a numeric metric on [LOWER, UPPER] (1BitMean); "
                            "the margin is on its mean, in its units")
    parser.add_argument("--simultaneous", action="store_true",
                        help="categorical: the margin holds for all D categories at once "
                             "(Bonferroni), not for each on its own")
    parser.add_argument("--periods", type=positive_int, default=1,
                        help="reporting periods in the window analysed (default %(default)s)")
    parser.add_argument("--memoization", choices=("memoized", "instantaneous", "fresh"),
                        help="without --collector: how devices perturb (default memoized)")
    parser.add_argument("--instantaneous", metavar="MECHANISM",
                        help="with --memoization instantaneous: the layer's mechanism id")
    parser.add_argument("--token", default=env_default("READ_TOKEN"),
                        help="read token for --collector (DENIABLE_READ_TOKEN)")
    parser.add_argument("--cacert", metavar="FILE",
                        help="with --collector https://...: trust this CA certificate (PEM), "
                             "e.g. a private CA's")
    parser.add_argument("--confidence", type=_margin, default=0.95,
                        help="confidence level (default %(default)s)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="output format (default %(default)s)")
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from deniable.analysis.plan import plan
    from deniable.client.mechanism import RandomizedResponse

    from deniable.client.errors import InvalidParameterError
    from deniable.client.period import CollectionPolicy

    from deniable.client.kinds import Mechanism, parse_mechanism

    targets: list[tuple[str | None, Mechanism, CollectionPolicy]]
    if args.collector is not None and (args.memoization or args.instantaneous):
        args.parser.error("--memoization/--instantaneous: with --collector each metric's "
                          "registered policy is used")
    if (args.categories or args.range) and args.epsilon is None:
        args.parser.error("--categories and --range go with --epsilon (a --mechanism id "
                          "already says its kind)")
    try:
        layer = (RandomizedResponse.from_id(args.instantaneous) if args.instantaneous
                 else None)
        policy = CollectionPolicy(args.memoization or ("instantaneous" if layer else
                                                       "memoized"), layer)
    except InvalidParameterError as exc:
        args.parser.error(str(exc))
    try:
        if args.epsilon is not None:
            targets = [(None, _from_epsilon(args), policy)]
        elif args.mechanism is not None:
            targets = [(None, parse_mechanism(args.mechanism), policy)]
    except InvalidParameterError as exc:
        args.parser.error(str(exc))
    if args.epsilon is not None or args.mechanism is not None:
        pass
    else:
        url: str = args.collector or env_default("COLLECTOR_URL") or ""
        if not url:
            args.parser.error("--collector needs a URL: --collector URL, or set "
                              "DENIABLE_COLLECTOR_URL")
        from deniable.analysis.sources import HTTPSource

        targets = [(name, info.mechanism, info.policy) for name, info in
                   sorted(HTTPSource(url, token=args.token,
                                     verify=args.cacert or True).metrics().items())]
    if args.mean_margin is not None and (args.collector is None or args.margin is None):
        args.parser.error("--mean-margin goes with --collector and --margin (with --range, "
                          "--margin is already in the metric's unit)")
    margins = {name: _margin_for(args, name, m) for name, m, _ in targets}
    try:
        plans = [plan(m, margin=margins[name], n=args.n, confidence=args.confidence,
                      metric=name, periods=args.periods, policy=p,
                      simultaneous=args.simultaneous)
                 for name, m, p in targets]
    except InvalidParameterError as exc:  # e.g. a layer that cannot produce the mechanism
        args.parser.error(str(exc))
    if args.format == "json":
        print(json.dumps({"plans": [dataclasses.asdict(p) for p in plans]}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    goal = ("a margin" if args.margin is not None else f"{args.n:,} devices")
    window = f"over {args.periods} periods" if args.periods > 1 else "in one period"
    table = Table(title=f"Plan for {goal} {window} at {args.confidence:.0%} confidence "
                        "(worst case), in devices")
    for header in ("metric", "kind", "mechanism", "epsilon", "P1", "Q", "policy",
                   "devices", "reports", "margin on"):
        table.add_column(header, justify="left" if header in ("metric", "kind", "mechanism",
                                                               "policy", "margin on")
                         else "right")
    for p in plans:
        table.add_row(p.metric or "-", p.kind + (f" (d = {p.categories})" if p.categories
                                                 else ""),
                      p.mechanism, f"{p.epsilon:.4f}", _short(p.p_yes_given_yes),
                      _short(p.p_yes_given_no), p.policy, f"{p.devices:,}", f"{p.reports:,}",
                      _margin_text(p))
    console = Console(width=160)
    console.print(table)
    console.print("Devices: distinct devices, each sending at most one report per period. "
                  "Memoized reports from the same devices on more periods add no "
                  "information: the margin depends on the devices (docs/analysis.md). "
                  "P1, Q: the chance that a report counts in a slot when the true value is, "
                  "or is not, that slot's (yes; a category; 1BitMean's top of the range).")
    return 0


def _margin_for(args: argparse.Namespace, name: str | None, mechanism: object) -> float | None:
    """The margin to plan ``mechanism`` for, in what its estimate is in: a share in (0, 1/2)
    for a share (a boolean's, each category's), the metric's unit for a numeric mean. With
    --collector a numeric metric takes --mean-margin, else --margin times its range (--margin
    is then a share of the range). A margin that makes no sense is an error naming why."""
    if args.margin is None:
        return None
    from deniable.client.kinds import is_mechanism, kind_of_mechanism

    label = name or "this mechanism"
    if not is_mechanism(mechanism) or kind_of_mechanism(mechanism).percent:
        if args.margin >= 0.5:
            args.parser.error(f"--margin {args.margin:g} is a margin on a share (0 to 1): "
                              f"{label}'s interval would span all of it. Give a share below "
                              "0.5, e.g. 0.02 for +-2 points.")
        return float(args.margin)
    lower, upper = float(mechanism.lower), float(mechanism.upper)  # type: ignore[attr-defined]
    span = upper - lower
    if args.collector is not None:
        margin = args.mean_margin if args.mean_margin is not None else args.margin * span
        if args.mean_margin is None and args.margin >= 0.5:
            args.parser.error(f"--margin {args.margin:g}: {label} is numeric on "
                              f"[{lower:g}, {upper:g}], where --margin is a share of its "
                              "range; give a share below 0.5, or --mean-margin in its unit")
    else:
        margin = args.margin
    if not margin < span / 2:
        args.parser.error(f"a margin of {margin:g} on {label}'s mean makes no sense: its "
                          f"values lie in [{lower:g}, {upper:g}], so the mean is known to "
                          f"+-{span / 2:g} without any report. Give a margin below "
                          f"{span / 2:g}, in its unit.")
    return float(margin)


def _short(fraction: str) -> str:
    """A probability as a short decimal, exact fraction when it is short."""
    from fractions import Fraction

    return fraction if len(fraction) <= 9 else f"{float(Fraction(fraction)):.6f}"


def _margin_text(p: object) -> str:
    """"+-2.0 points on the share", "+-60 ms on the mean (2 % of [0, 3000])"."""
    from deniable.analysis import plain
    from deniable.client.kinds import kind_of

    margin = float(getattr(p, "margin"))
    if not kind_of(getattr(p, "kind")).percent:
        unit = plain.unit_of(getattr(p, "metric") or "")
        lower, upper = (float(x) for x in getattr(p, "units").strip("[]").split(","))
        return (f"\u00b1{plain.number(margin)}{' ' + unit if unit else ''} on "
                f"{_on(p)} ({plain.number(margin / (upper - lower) * 100, 2)} % of its range "
                f"[{lower:g}, {upper:g}])")
    return f"\u00b1{plain.number(margin * 100, 2)} points on {_on(p)}"


def _on(p: object) -> str:
    from deniable.client.kinds import kind_of

    kind = kind_of(getattr(p, "kind"))
    if not kind.percent:
        return "the mean"
    if kind.per_category:
        return ("all categories at once" if getattr(p, "simultaneous") else
                "each category's share")
    return "the share"


def _from_epsilon(args: argparse.Namespace) -> object:
    """The mechanism --epsilon names, with --categories or --range (exact, never above)."""
    from deniable.client.categorical import choose_categorical, domain_tag
    from deniable.client.mechanism import RandomizedResponse
    from deniable.client.numeric import BitMean

    if args.categories:
        return choose_categorical(args.epsilon, args.categories,
                                  domain_tag([str(i) for i in range(args.categories)]))[0]
    if args.range:
        from fractions import Fraction

        lower, upper = (Fraction(repr(x)) for x in args.range)
        return BitMean.from_epsilon(args.epsilon, lower, upper)
    return RandomizedResponse.from_epsilon(args.epsilon)
