"""``deniable demo``: the whole pipeline, end to end, on an embedded Redis.

Starts a private redis-server and a real collector (gunicorn) on free ports, simulates a
population of devices whose answers are perturbed by the real client library and uploaded
over HTTP, then debiases the counts and compares them with the known true rates.
"""
from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from deniable.cli.options import positive_int

HELP = "run the end-to-end demo on an embedded Redis (no set-up needed)"
DEV_MODE = {"DENIABLE_AUTH": "off"}
"""The demo's collector runs in dev mode: no API keys (docs/collector-security.md)."""


@dataclass(frozen=True)
class DemoMetric:
    name: str
    description: str
    mechanism: str
    true_rate: float


METRICS = (
    DemoMetric("crash_reporter_enabled", "Crash reporting is switched on", "rr:1/2:1/2", 0.03),
    DemoMetric("dark_mode", "Dark mode is on", "rr:1/2:1/2", 0.50),
    DemoMetric("notifications_on", "Notifications are allowed", "rr:3/4:1/2", 0.80),
)


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("demo", help=HELP, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=positive_int, default=100_000,
                        help="simulated devices (default %(default)s)")
    parser.add_argument("--batch-size", type=positive_int, default=1000,
                        help="reports per uploaded batch, at most 1000 (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for the simulated population (the perturbation is always "
                             "drawn from the secure source)")
    parser.add_argument("--workers", type=positive_int, default=2,
                        help="collector workers (default %(default)s)")
    parser.set_defaults(run=run)


def _metrics_toml(folder: Path) -> Path:
    path = folder / "metrics.toml"
    path.write_text("".join(
        f'[metrics.{m.name}]\ndescription = "{m.description}"\nmechanism = "{m.mechanism}"\n\n'
        for m in METRICS))
    return path


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from deniable.analysis import HTTPSource, summarize
    from deniable.client import Reporter
    from deniable.collector.embedded import RedisServer
    from deniable.collector.server import CollectorProcess

    if args.batch_size > 1000:
        raise SystemExit("deniable demo: error: --batch-size must be at most 1000")
    console = Console() if sys.stdout.isatty() else Console(width=110)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    population = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="deniable-demo-") as tmp, \
            RedisServer(Path(tmp) / "redis") as redis_server:
        console.print(f"[bold]1.[/] embedded Redis on {redis_server.url}")
        with CollectorProcess(redis_server.url, _metrics_toml(Path(tmp)),
                              workers=args.workers, env=DEV_MODE) as collector:
            console.print(f"[bold]2.[/] collector (gunicorn, {args.workers} workers) on "
                          f"{collector.url}")
            true_yes = {m.name: 0 for m in METRICS}
            columns = (TextColumn("[bold]3.[/] devices report"), BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn())
            with Reporter(collector.url, batch_size=args.batch_size) as reporter, \
                    Progress(*columns, console=console, transient=False,
                             disable=False) as progress:
                task = progress.add_task("devices", total=args.devices)
                for device in range(args.devices):
                    for m in METRICS:
                        truth = population.random() < m.true_rate  # the simulated person
                        true_yes[m.name] += truth
                        reporter.report(m.name, truth)  # perturbed on the "device"
                    if device % 1000 == 999:
                        progress.update(task, completed=device + 1)
                progress.update(task, completed=args.devices)
            source = HTTPSource(collector.url)
            table = Table(title=f"{args.devices:,} devices: what the collector learned")
            for header in ("metric", "epsilon", "true rate", "raw yes-rate", "estimate",
                           "95% CI", "true rate in CI"):
                table.add_column(header, justify="left" if header == "metric" else "right")
            inside = 0
            for m in METRICS:
                s = summarize(source.counts(m.name))
                true_rate = true_yes[m.name] / args.devices
                hit = s.ci_low <= true_rate <= s.ci_high
                inside += hit
                table.add_row(m.name, f"{s.epsilon:.3f}", f"{true_rate:.4f}",
                              f"{s.yes_rate:.4f}", f"{s.estimate:.4f}",
                              f"[{s.ci_low:.4f}, {s.ci_high:.4f}]",
                              "[green]yes[/]" if hit else "[red]no[/]")
            console.print(table)
            console.print(f"{inside} of {len(METRICS)} true rates fall inside their 95% "
                          f"intervals. No true answer ever left a simulated device; Redis "
                          f"holds only perturbed counters. ({time.monotonic() - started:.1f} s)")
    return 0
