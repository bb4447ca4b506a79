"""``deniable metrics json FILE.toml``: the app's declaration for the web client, from the
metrics file the collector loads and the Python client declares (one file serves both)."""
from __future__ import annotations

import argparse
import json
import sys

HELP = "print a metrics file's declaration as the web client's JSON"
DESCRIPTION = """\
Print the declaration of every metric in a metrics TOML file (the collector's file, which the
Python client takes as Reporter(url, metrics="metrics.toml")) as the JSON object the web client
takes as new Reporter(url, {metrics: ...}): the same tables, the same keys (kind, categories,
edges, lower, upper, clamp, mechanism or epsilon, memoization, instantaneous, period,
dimensions, combinations). Fields that are the collector's business only (description,
retention_days) are left out. The file is checked as the Python client reads it first."""


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("metrics", help=HELP, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    to_json = actions.add_parser("json", help=HELP, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    to_json.add_argument("file", help="the metrics TOML file")
    to_json.add_argument("-o", "--output", help="write the JSON here instead of stdout")
    to_json.set_defaults(run=run_json)


def run_json(args: argparse.Namespace) -> int:
    from deniable.client.metrics import declaration_document

    text = json.dumps(declaration_document(args.file), indent=2, sort_keys=True) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0
