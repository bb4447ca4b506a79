"""``deniable demo``: the whole pipeline, end to end, on an embedded Redis.

Starts a private redis-server and a real collector (gunicorn) on free ports, simulates a
population of devices that report every day for several simulated days, their answers
perturbed by the real client library and uploaded over HTTP; then debiases the counts, compares
them with the known true rates, tests for changes, and writes an HTML report.

Simulated days: buckets always come from the collector's receive time, never from a device.
To fill past days the demo turns on the collector's demo-only clock (DENIABLE_DEMO_CLOCK_FILE,
off by default) and steps it back one day at a time: day 1 is filed (days - 1) days ago, the
last day today. One metric (dark_mode) shifts half-way, as after a release, so the report
shows a time series and a detected change.

The devices follow the default client policy: memoized answers, one report per device per day.
Each simulated device has its own device secret, and its answer for a value is the one the
client derives from it (``deniable.client.memo.memo_bit``): the same bit every day. The
intervals therefore count devices, not reports (docs/analysis.md), and the demo checks that
they cover the true shares.
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
from typing import Any

from deniable.cli.options import positive_int
from deniable.client.errors import DeniableError

class DemoError(DeniableError):
    """The demo could not finish its simulation."""


def _population_reporter(devices: int, *args: object, **kwargs: object) -> object:
    """A Reporter standing in for ``devices`` simulated devices (simulation only).

    Each device has its own 32-byte secret (HMAC-SHA256 of a fresh demo secret and the
    device's number, so a million devices need no million-entry list), and its report for a
    value is its memoized answer, derived exactly as the client derives it (``memo_bit``).
    Set ``.device`` before each ``report()``. Every device reports once per simulated day, so the period gate, which
    would see one Reporter, is off.
    """
    import hmac

    import numpy as np

    from deniable.client.memo import memo_bit, new_secret
    from deniable.client.reporter import Reporter

    class Population(Reporter):
        def __init__(self) -> None:
            super().__init__(*args, one_per_period=False, **kwargs)  # type: ignore[arg-type]
            self.device = 0
            self._seed = new_secret()
            self._answers: dict[str, np.ndarray] = {}

        def _perturb(self, metric: str, mechanism: object, true_value: bool) -> int:
            answers = self._answers.get(metric)
            if answers is None:
                answers = self._answers.setdefault(metric, np.full((devices, 2), -1, np.int8))
            bit = int(answers[self.device, int(true_value)])
            if bit < 0:
                secret = hmac.digest(self._seed, self.device.to_bytes(8, "big"), "sha256")
                bit = memo_bit(secret, metric, mechanism, int(true_value))  # type: ignore[arg-type]
                answers[self.device, int(true_value)] = bit
            return bit

    return Population()


HELP = "run the end-to-end demo on an embedded Redis (no set-up needed)"
DEV_MODE = {"DENIABLE_AUTH": "off", "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
            "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
"""The demo's collector runs in dev mode: no API keys, and no rate limits, since one process
on one address stands in for every device (docs/collector-security.md)."""


@dataclass(frozen=True)
class DemoMetric:
    name: str
    description: str
    mechanism: str
    true_rate: float
    rate_after_shift: float | None = None

    def rate(self, day: int, shift_day: int) -> float:
        """The true rate on simulated day ``day`` (0-based)."""
        if self.rate_after_shift is not None and day >= shift_day:
            return self.rate_after_shift
        return self.true_rate


METRICS = (
    DemoMetric("crash_reporter_enabled", "Crash reporting is switched on", "rr:1/2:1/2", 0.03),
    DemoMetric("dark_mode", "Dark mode is on (a release half-way makes it the default for "
               "some)", "rr:1/2:1/2", 0.50, 0.56),
    DemoMetric("notifications_on", "Notifications are allowed", "rr:3/4:1/2", 0.80),
)
DAY = 86_400


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
    parser.add_argument("--days", type=positive_int, default=7,
                        help="simulated days; every device reports once a day "
                             "(default %(default)s)")
    parser.add_argument("--html", type=Path, default=Path("deniable-demo-report.html"),
                        help="where to write the HTML report (default %(default)s)")
    parser.set_defaults(run=run)


def _metrics_toml(folder: Path) -> Path:
    path = folder / "metrics.toml"
    path.write_text("".join(
        f'[metrics.{m.name}]\ndescription = "{m.description}"\nmechanism = "{m.mechanism}"\n\n'
        for m in METRICS))
    return path


class _Interrupts:
    """Ctrl-C and SIGTERM: raise KeyboardInterrupt at once, except while the client is busy.

    An exception raised by a signal handler can strike inside the client's locks (Python
    raises it between any two bytecodes) and leave one held. While ``deferred`` the handler
    only takes note; the simulation loop checks ``pending`` between reports and stops there.
    """

    def __init__(self) -> None:
        self.deferred = False
        self.pending = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.deferred:
            self.pending = True
        else:
            raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from datetime import datetime, timedelta, timezone

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from deniable.analysis import HTTPSource, analyze, render_html
    from deniable.analysis.report import render_comparisons_table, sparkline
    from deniable.analysis.timeseries import floor
    from deniable.collector.embedded import RedisServer
    from deniable.collector.server import CollectorProcess

    if args.batch_size > 1000:
        raise SystemExit("deniable demo: error: --batch-size must be at most 1000")
    console = Console() if sys.stdout.isatty() else Console(width=110)
    interrupts = _Interrupts()
    signal.signal(signal.SIGINT, interrupts)
    signal.signal(signal.SIGTERM, interrupts)
    population = random.Random(args.seed)
    started = time.monotonic()
    days, shift_day = args.days, args.days // 2
    with tempfile.TemporaryDirectory(prefix="deniable-demo-") as tmp, \
            RedisServer(Path(tmp) / "redis") as redis_server:
        console.print(f"[bold]1.[/] embedded Redis on {redis_server.url}")
        clock_file = Path(tmp) / "clock"
        clock_file.write_text(str(-(days - 1) * DAY))
        env = {**DEV_MODE, "DENIABLE_DEMO_CLOCK_FILE": str(clock_file)}
        with CollectorProcess(redis_server.url, _metrics_toml(Path(tmp)), workers=args.workers,
                              env=env) as collector:
            console.print(f"[bold]2.[/] collector (gunicorn, {args.workers} workers) on "
                          f"{collector.url}, with the demo clock on")
            # Each simulated person's standing propensity per metric: a true answer is
            # "yes" on a day when it falls below that day's true rate.
            propensity = {m.name: [population.random() for _ in range(args.devices)]
                          for m in METRICS}
            true_yes = {m.name: 0 for m in METRICS}
            day_starts = []
            columns = (TextColumn("[bold]3.[/] devices report, day by day"), BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn())
            def simulate(reporter: Any, progress: Progress,
                         interrupts: _Interrupts) -> None:
                task = progress.add_task("devices", total=args.devices * days)
                for day in range(days):
                    offset = -(days - 1 - day) * DAY
                    clock_file.write_text(str(offset))  # the collector files today's reports here
                    day_starts.append(datetime.now(timezone.utc) + timedelta(seconds=offset))
                    rates = [(m.name, m.rate(day, shift_day)) for m in METRICS]
                    for device in range(args.devices):
                        reporter.device = device  # type: ignore[attr-defined]
                        for name, rate in rates:
                            truth = propensity[name][device] < rate  # the simulated person
                            true_yes[name] += truth
                            reporter.report(name, truth)  # perturbed on the "device"
                        if device % 1000 == 999:
                            progress.update(task, completed=day * args.devices + device + 1)
                            if interrupts.pending:
                                raise KeyboardInterrupt
                    # Every batch of this day lands before the clock moves on.
                    if not reporter.flush(timeout=60):
                        raise DemoError(f"the collector did not take day {day + 1}'s reports "
                                        f"in time: {reporter.last_error}")
                progress.update(task, completed=args.devices * days)

            # One Reporter stands in for the whole population; each simulated device keeps
            # its own secret and memoized answers (the default policy), see above.
            reporter: Any = _population_reporter(args.devices, collector.url,
                                                 batch_size=args.batch_size,
                                                 privacy_dir=Path(tmp) / "privacy")
            if not reporter.wait_ready(30):  # the catalogue comes on a background thread
                reporter.close(timeout=0)
                raise DemoError(f"no catalogue from the collector: {reporter.last_error}")
            interrupts.deferred = True
            try:
                with Progress(*columns, console=console, transient=False) as progress:
                    simulate(reporter, progress, interrupts)
            except BaseException:
                reporter.close(timeout=0)  # stop at once; the demo's reports are disposable
                raise
            finally:
                interrupts.deferred = False
            reporter.close()
            source = HTTPSource(collector.url)
            start = floor(day_starts[0], "day")
            end = datetime.now(timezone.utc) + timedelta(hours=1)
            analysis = analyze(source, [m.name for m in METRICS], start=start, end=end,
                               granularity="day", split=floor(day_starts[shift_day], "day"))
            reports = args.devices * days
            table = Table(title=f"{args.devices:,} devices x {days} days (memoized, one report "
                                "per device per day): what the collector learned")
            pct = f"{analysis.sections[0].summary.confidence:.0%}"
            for header in ("metric", "epsilon", "true share", "raw yes-rate", "estimate",
                           f"{pct} CI", "in CI", "daily trend"):
                table.add_column(header, justify="left" if header in ("metric", "daily trend")
                                 else "right", no_wrap=header == "metric")
            inside = 0
            for m, section in zip(METRICS, analysis.sections):
                s = section.summary
                true_rate = true_yes[m.name] / reports
                hit = s.ci_low <= true_rate <= s.ci_high
                inside += hit
                table.add_row(m.name, f"{s.epsilon:.3f}", f"{true_rate:.4f}",
                              f"{s.yes_rate:.4f}", f"{s.estimate:.4f}",
                              f"[{s.ci_low:.4f}, {s.ci_high:.4f}]",
                              "[green]yes[/]" if hit else "[red]no[/]",
                              sparkline([float(v) for v in section.series.estimates.estimate]))
            console.print(table)
            console.print(
                f"Each estimate is the share of devices answering yes per day, averaged over "
                f"the {days} days (not a share of reports). Memoized devices send the same "
                f"answer every day, so {days} days of reports carry one day's noise: the "
                f"intervals count {args.devices:,} devices, not {reports:,} reports. "
                f"{inside} of {len(METRICS)} true shares fall inside their {pct} intervals"
                + (" (as they should: each does with probability at least "
                   f"{pct})." if inside == len(METRICS) else
                   f"; a {pct} interval misses now and then, but check this if it repeats.")
                + " No true answer ever left a simulated device; Redis holds only perturbed "
                  "counters.")
            console.print(render_comparisons_table(analysis.comparisons, width=console.width),
                          end="")
            shifted = [c.label for c in analysis.comparisons if c.significant]
            console.print(f"Significant changes from day {shift_day + 1} on (Holm-corrected, "
                          f"alpha 0.05): {', '.join(shifted) or 'none'}. The true shift: "
                          f"dark_mode 0.50 -> 0.56.")
            args.html.write_text(render_html(analysis.sections, analysis.comparisons,
                                             title=f"Deniable demo: {args.devices:,} devices "
                                                   f"over {days} days"), encoding="utf-8")
            console.print(f"[bold]4.[/] HTML report: {args.html.resolve()} "
                          f"({time.monotonic() - started:.1f} s)")
    return 0
