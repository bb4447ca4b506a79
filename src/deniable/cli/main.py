"""The ``deniable`` command: one entry point, a subcommand per job."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from deniable.client.errors import DeniableError
from deniable.client.plugins import load_plugins, split_specs
from deniable.cli import audit, demo, keys, metrics, migrate, plan, report, serve
from deniable.cli.errors import CLIError  # noqa: F401 (re-exported: deniable.cli.main.CLIError)

SUBCOMMANDS = (demo, serve, report, plan, keys, metrics, migrate, audit)


EXTRAS = {"numpy": "analysis", "rich": "analysis", "matplotlib": "analysis",
          "pandas": "analysis", "flask": "collector", "redis": "collector",
          "gunicorn": "collector", "orjson": "collector", "prometheus_client": "collector"}
"""The package extra that installs each optional dependency (pyproject.toml)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deniable",
        description="App telemetry under local differential privacy: randomized response on "
                    "the device, perturbed counters on the server, debiased reports.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (0 ok, 1 failed, 2 bad usage, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # Kind plugins first: every subcommand then reads their metrics (docs/development.md).
        load_plugins(split_specs(os.environ.get("DENIABLE_KINDS")), setting="DENIABLE_KINDS")
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # an optional dependency this install lacks
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        print(f"deniable {args.command}: error: this command needs {top}, which this install "
              f"lacks: pip install 'deniable[{EXTRAS[top]}]'", file=sys.stderr)
        return 1
    except (DeniableError, OSError) as exc:
        print(f"deniable {args.command}: error: {exc}", file=sys.stderr)
        return 1
