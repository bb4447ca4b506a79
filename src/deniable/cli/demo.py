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

The first 10,000 devices (``--other-devices``) also report three metrics of the other
kinds, through the same client calls
(``reporter.report("os", "android")``, ``reporter.report("startup_ms", 812.5)``): their OS
(categorical, six categories; on day four some Android users move to iOS), their crashes in
the past week (a histogram) and their start-up time in ms (numeric; a faster release on day
four). Their answers are memoized as the client memoizes them (``memo_key``, ``memo_answer``:
per category, and numbers by alpha-point rounding), each device from its own secret. The
demo prints each category's, bucket's and day's truth beside its estimate and interval.

The same devices also report whether they use the new editor (``new_editor``, boolean),
a metric that declares two public dimensions, ``app_version`` and ``platform``
(docs/privacy.md, "Public dimensions": sent in clear, NOT protected by local DP). Each device
states its own (``reporter.report("new_editor", True, dims={"app_version": "2.4",
"platform": "ios"})``: one Reporter stands in for every device, so each device's device-wide
values go with its calls), except the devices on 2.1, which predates dimensions. On day four
a fifth of them update to 2.5, which turns the new editor on by default; the demo prints the
last day's breakdown by app version, truth beside estimate and interval per value, with the
60 devices still on 2.2 suppressed (fewer than 100 reports).
"""
from __future__ import annotations

import argparse
import json
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
from deniable.client.config import Delivery, Privacy, Storage
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

    from deniable.client.memo import alpha_threshold, memo_answer, memo_bit, memo_key, new_secret
    from deniable.client.numeric import BitMean
    from deniable.client.reporter import Reporter

    class Population(Reporter):
        def __init__(self) -> None:
            super().__init__(*args, privacy=Privacy(one_per_period=False),  # type: ignore[arg-type]
                             **kwargs)
            self.device = 0
            self._seed = new_secret()
            self._answers: dict[str, np.ndarray] = {}
            self._secrets: dict[int, bytes] = {}
            self._alphas: dict[tuple[str, int], int] = {}        # (metric, device)
            self._values: dict[tuple[str, int, int], int] = {}  # (metric, device, key)
            self._keys: dict[tuple[str, int], tuple[Any, int]] = {}  # last value, its key

        def _secret(self) -> bytes:
            secret = self._secrets.get(self.device)
            if secret is None:
                secret = hmac.digest(self._seed, self.device.to_bytes(8, "big"), "sha256")
                self._secrets[self.device] = secret
            return secret

        def _perturb(self, metric: str, spec: Any, value: Any) -> int:
            """This device's memoized answer to an encoded value (the Reporter's one path):
            a bool's memoized bit, else a category's or number's memoized answer."""
            if value.__class__ is bool:
                return self._perturb_bit(metric, spec.mechanism, value)
            return self._perturb_value(metric, spec.mechanism, value)

        def _perturb_bit(self, metric: str, mechanism: object, true_value: bool) -> int:
            answers = self._answers.get(metric)
            if answers is None:
                answers = self._answers.setdefault(metric, np.full((devices, 2), -1, np.int8))
            bit = int(answers[self.device, int(true_value)])
            if bit < 0:
                bit = memo_bit(self._secret(), metric, mechanism,  # type: ignore[arg-type]
                               int(true_value))
                answers[self.device, int(true_value)] = bit
            return bit

        def _perturb_value(self, metric: str, mechanism: Any, value: Any) -> int:
            """A category index or an exact number: this device's memoized answer, keyed as
            the client keys it (the category, or the number's alpha-point grid point). The
            demo's devices have no cap, so no paid-answer substitute applies."""
            device = self.device
            last = self._keys.get((metric, device))
            if last is not None and last[0] == value:
                key = last[1]
            else:
                alpha = None
                if isinstance(mechanism, BitMean):  # the device's secret threshold, once
                    alpha = self._alphas.get((metric, device))
                    if alpha is None:
                        alpha = alpha_threshold(self._secret(), metric)
                        self._alphas[(metric, device)] = alpha
                key = memo_key(self._secret(), metric, mechanism, value, alpha=alpha)
                self._keys[(metric, device)] = (value, key)
            answer = self._values.get((metric, device, key))
            if answer is None:
                answer = memo_answer(self._secret(), metric, mechanism, key)
                self._values[(metric, device, key)] = answer
            return answer

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


@dataclass(frozen=True)
class KindMetric:
    """A demo metric of a kind beyond boolean, declared as in a metrics TOML file."""

    name: str
    description: str
    declaration: dict[str, Any]

    def toml(self) -> str:
        lines = [f"[metrics.{self.name}]", f"description = {json.dumps(self.description)}"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in self.declaration.items()]
        return "\n".join(lines) + "\n\n"


OS = ("android", "ios", "windows", "macos", "linux", "other")
OS_SHARES = (0.40, 0.27, 0.15, 0.10, 0.05, 0.03)
OS_MOVE = 0.06
"""From day four, this share of all devices moves from android to ios (0.40 -> 0.34 and
0.27 -> 0.33)."""
CRASH_EDGES = (0, 1, 2, 5, 10, 100)
STARTUP_RANGE = (0, 3_000)
"""Start-up times in ms: at epsilon 2 over 10,000 devices the 20 % speed-up (about 190 ms)
is about 7 standard errors of the change, so the demo always shows it."""
STARTUP_SPEEDUP = 0.8
"""From day four a faster release multiplies every start-up time by this."""
KIND_METRICS = (
    KindMetric("os", "Operating system (from day four some Android users move to iOS)",
               {"kind": "categorical", "categories": list(OS), "epsilon": 2.0}),
    KindMetric("crashes_per_week", "Crashes in the past seven days",
               {"kind": "histogram", "edges": list(CRASH_EDGES), "clamp": True,
                "epsilon": 2.0}),
    KindMetric("startup_ms", "Start-up time in ms (a faster release on day four)",
               {"kind": "numeric", "lower": STARTUP_RANGE[0], "upper": STARTUP_RANGE[1],
                "clamp": True, "epsilon": 2.0}),
)


class KindPopulation:
    """Each simulated device's true OS, weekly crashes and start-up time, day by day.

    The OS and the crash count are constant per device (the OS changes once, on day four,
    for the devices that move); the start-up time drifts by up to 5% a day around the
    device's own typical time, and drops by 20% from day four.
    """

    def __init__(self, devices: int, seed: int | None, shift_day: int) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        self.shift_day = shift_day
        self.os = np.searchsorted(np.cumsum(OS_SHARES), rng.random(devices) * sum(OS_SHARES),
                                  side="right").astype(np.int64)
        android = self.os == 0
        self.moves = android & (rng.random(devices) < OS_MOVE / OS_SHARES[0])
        self.crashes = np.minimum(rng.geometric(0.45, devices) - 1, 150).astype(np.int64)
        self.typical_ms = np.exp(rng.normal(np.log(800.0), 0.6, devices))
        self._rng = rng

    def os_on(self, day: int) -> Any:
        return self.os if day < self.shift_day else \
            self.os + self.moves.astype(self.os.dtype)  # android (0) -> ios (1)

    def startup_on(self, day: int) -> Any:
        import numpy as np

        daily = self.typical_ms * (1 + self._rng.uniform(-0.05, 0.05, self.typical_ms.shape))
        if day >= self.shift_day:
            daily = daily * STARTUP_SPEEDUP
        return np.round(daily, 1)


FEATURE = DemoMetric("new_editor", "The new editor is on (2.5 turns it on by default)",
                     "rr:1/2:1/2", 0.25)
"""A feature's adoption: the metric that declares public dimensions, reported by the
``--other-devices`` sample; the demo breaks it down by app version."""
BY_METRIC = FEATURE.name
APP_VERSIONS = ("2.2", "2.3", "2.4", "2.5")
PLATFORMS = ("android", "ios", "web")
DIMENSIONS_TOML = (
    f"[metrics.{BY_METRIC}.dimensions.app_version]\n"
    f"values = {json.dumps(list(APP_VERSIONS))}\n"
    "other = true\n"
    f"[metrics.{BY_METRIC}.dimensions.platform]\n"
    f"values = {json.dumps(list(PLATFORMS))}\n\n")
VERSION_SHARES = {"2.1": 0.03, "2.3": 0.30, "2.4": 0.63, "2.6-beta": 0.04}
"""App versions before day four. 2.1 predates dimensions: its reports state none ("not
stated"); 2.6-beta is off the list, so it counts as ``other``."""
RARE_DEVICES = 60
"""Devices still on 2.2: fewer than the breakdown's default 100 reports, so suppressed."""
UPDATED = 0.20
"""From day four this share of all devices runs 2.5 (updated from 2.4)."""
ON_2_5 = 0.70
"""2.5 turns the new editor on by default: 70% of its users keep it on, against
``FEATURE.true_rate`` (25%) on every other version."""
PLATFORM_SHARES = (0.55, 0.35, 0.10)


class VersionPopulation:
    """Each simulated device's app version and platform (its public dimensions), and
    whether it uses the new editor, day by day (its standing propensity against its
    version's rate, as for the boolean metrics)."""

    def __init__(self, devices: int, seed: int | None, shift_day: int) -> None:
        import numpy as np

        rng = np.random.default_rng(None if seed is None else (seed, 13))
        self.shift_day = shift_day
        names = list(VERSION_SHARES)
        shares = np.array(list(VERSION_SHARES.values()))
        picked = np.searchsorted(np.cumsum(shares), rng.random(devices) * shares.sum(),
                                 side="right")
        before = np.array(names, dtype=object)[picked]
        before[rng.choice(devices, min(RARE_DEVICES, devices), replace=False)] = "2.2"
        self.before = before
        on_2_4 = before == "2.4"
        self.updates = on_2_4 & (rng.random(devices) < UPDATED / VERSION_SHARES["2.4"])
        self.platform = np.array(PLATFORMS, dtype=object)[rng.choice(
            len(PLATFORMS), devices, p=PLATFORM_SHARES)]
        self.propensity = rng.random(devices)

    def versions_on(self, day: int) -> Any:
        """Each device's app version on ``day`` (an object array of str)."""
        import numpy as np

        if day < self.shift_day:
            return self.before
        return np.where(self.updates, "2.5", self.before).astype(object)

    def uses_on(self, day: int) -> Any:
        """Whether each device uses the new editor on ``day`` (a bool array)."""
        import numpy as np

        rate = np.where(self.versions_on(day) == "2.5", ON_2_5, FEATURE.true_rate)
        return self.propensity < rate

    def dims_on(self, day: int) -> list[dict[str, str] | None]:
        """Each device's ``dims`` on ``day``: one shared dict per (version, platform); None
        on 2.1 (no dimensions)."""
        shared: dict[tuple[str, str], dict[str, str] | None] = {}
        for key in set(zip(self.versions_on(day).tolist(), self.platform.tolist())):
            version, platform = key
            shared[key] = None if version == "2.1" else {"app_version": version,
                                                         "platform": platform}
        return [shared[key] for key in zip(self.versions_on(day).tolist(),
                                           self.platform.tolist())]


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("demo", help=HELP, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=positive_int, default=100_000,
                        help="simulated devices (default %(default)s)")
    parser.add_argument("--other-devices", type=positive_int, default=10_000,
                        help="how many of the devices also report the categorical, histogram "
                             "and numeric metrics, and new_editor with public dimensions "
                             "(default %(default)s; at most --devices)")
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
    parser.add_argument("--keep", action="store_true",
                        help="keep the collector and its Redis running after the report, "
                             "print the commands to explore them (deniable report, the "
                             "dashboard), and stop them only on Ctrl-C")
    parser.set_defaults(run=run)


def _metrics_toml(folder: Path) -> Path:
    path = folder / "metrics.toml"
    path.write_text("".join(
        f'[metrics.{m.name}]\ndescription = "{m.description}"\nmechanism = "{m.mechanism}"\n\n'
        for m in (*METRICS, FEATURE)) + DIMENSIONS_TOML
        + "".join(m.toml() for m in KIND_METRICS))
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
    from deniable.analysis.breakdown import breakdown
    from deniable.analysis import plain
    from deniable.analysis.report import estimate_text, sparkline, zoomed_axis
    from deniable.analysis.timeseries import floor
    from deniable.collector.embedded import RedisServer
    from deniable.collector.server import CollectorProcess
    # Imported before the Ctrl-C handler is set: an interrupt raised while an extension
    # module runs its init (numpy.random's does, on first use) can be swallowed there, and
    # the demo would then run on.
    import numpy.random  # noqa: F401
    import deniable.client.memo  # noqa: F401
    import deniable.client.reporter  # noqa: F401

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
        # One metrics file: the collector registers it, and the app declares it (its
        # privacy contract: the app follows it, whatever the collector serves).
        metrics_file = _metrics_toml(Path(tmp))
        with CollectorProcess(redis_server.url, metrics_file, workers=args.workers,
                              env=env) as collector:
            console.print(f"[bold]2.[/] collector (gunicorn, {args.workers} workers) on "
                          f"{collector.url}, with the demo clock on")
            # Each simulated person's standing propensity per metric: a true answer is
            # "yes" on a day when it falls below that day's true rate.
            propensity = {m.name: [population.random() for _ in range(args.devices)]
                          for m in METRICS}
            true_yes = {m.name: 0 for m in METRICS}
            others = min(args.other_devices, args.devices)
            kinds = KindPopulation(others, args.seed, shift_day)
            versions = VersionPopulation(others, args.seed, shift_day)
            truth: dict[str, list[Any]] = {m.name: [] for m in KIND_METRICS}  # per day
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
                    uses, dims = versions.uses_on(day).tolist(), versions.dims_on(day)
                    os_today, startup_today = kinds.os_on(day), kinds.startup_on(day)
                    keep_truth(truth, os_today, kinds.crashes, startup_today)
                    os_labels = [OS[i] for i in os_today.tolist()]
                    crashes, startup = kinds.crashes.tolist(), startup_today.tolist()
                    for device in range(args.devices):
                        reporter.device = device  # type: ignore[attr-defined]
                        for name, rate in rates:
                            true_bit = propensity[name][device] < rate  # the simulated person
                            true_yes[name] += true_bit
                            reporter.report(name, true_bit)  # perturbed on the "device"
                        if device < others:  # a sample also reports the other kinds
                            reporter.report("os", os_labels[device])
                            reporter.report("crashes_per_week", crashes[device])
                            reporter.report("startup_ms", startup[device])
                            # Public dimensions travel in clear beside the perturbed bit.
                            reporter.report(BY_METRIC, uses[device], dims=dims[device])
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
            reporter: Any = _population_reporter(
                args.devices, collector.url, metrics_file,
                delivery=Delivery(batch_size=args.batch_size),
                storage=Storage(privacy_dir=Path(tmp) / "privacy"))
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
            for header in ("metric", "epsilon", "true share",
                           f"estimate ({pct.replace('%', ' %')} interval)", "in it",
                           "daily trend (axis zoomed)"):
                table.add_column(header, justify="left" if header in ("metric", "daily trend")
                                 else "right", no_wrap=header == "metric")
            inside = 0
            for m, section in zip(METRICS, analysis.sections):
                s = section.summary
                true_rate = true_yes[m.name] / reports
                hit = s.ci_low <= true_rate <= s.ci_high
                inside += hit
                daily = [float(v) for v in section.series.estimates.estimate]
                low, high = zoomed_axis(daily)
                table.add_row(m.name, f"{s.epsilon:.3f}", plain.percent(true_rate, 1),
                              estimate_text(s), "[green]yes[/]" if hit else "[red]no[/]",
                              f"{plain.percent(low)} {sparkline(daily, low, high)} "
                              f"{plain.percent(high)}")
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
            by_version = breakdown(source, BY_METRIC, "app_version",
                                   floor(day_starts[-1], "hour"), end)
            # The HTML report shows every metric, the other kinds too (bar charts with
            # intervals, the mean over time); each metric's change is corrected in its own
            # family (a categorical metric's categories together).
            everything = analyze(source, [m.name for m in (*METRICS, FEATURE, *KIND_METRICS)],
                                 start=start, end=end, granularity="day",
                                 split=floor(day_starts[shift_day], "day"))
            print_changes(console, everything, shift_day)
            args.html.write_text(render_html(everything.sections, everything.comparisons,
                                             title=f"Deniable demo: {args.devices:,} devices "
                                                   f"over {days} days",
                                             breakdowns=[by_version]), encoding="utf-8")
            print_other_kinds(console, source, truth, day_starts, shift_day, start, end,
                              others)
            print_breakdown(console, by_version, versions, days - 1, others)
            console.print(f"[bold]4.[/] HTML report: {args.html.resolve()} "
                          f"({time.monotonic() - started:.1f} s)")
            if args.keep:
                keep_running(console, collector.url, redis_server.url)
    return 0


def keep_running(console: Any, collector_url: str, redis_url: str) -> None:
    """``--keep``: print the commands that explore the demo's data, then wait for Ctrl-C (or
    SIGTERM); the caller's context managers then stop the collector and Redis and delete the
    data, as without ``--keep``."""
    console.print(
        "[bold]5.[/] The collector and its data stay up until you press Ctrl-C. Explore them:\n"
        f"  deniable report --collector {collector_url}\n"
        f"  deniable report --collector {collector_url} --every day\n"
        f"  deniable report --collector {collector_url} --metric {BY_METRIC} --by app_version\n"
        f"  deniable report --collector {collector_url} --html report.html\n"
        f"  deniable report --redis-url {redis_url} --format json\n"
        f"  deniable plan --collector {collector_url} --margin 0.02\n"
        f"  the live dashboard: {collector_url}/dashboard\n"
        "(The demo's collector runs without keys, on 127.0.0.1 only.)", highlight=False)
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print("stopping the demo's collector and Redis")


INJECTED = (("dark_mode", None), ("new_editor", None), ("os", "android"), ("os", "ios"),
            ("startup_ms", None))
"""The changes the demo injects from its shift day on (metric, category): each must show."""


def print_changes(console: Any, analysis: Any, shift_day: int) -> None:
    """What changed from day ``shift_day + 1`` on: one line per metric, the correction's
    family, and the truth beside it."""
    from deniable.analysis.changes import family_note, what_changed

    console.print(f"[bold]What changed[/] (days {shift_day + 1} on against the days before):",
                  highlight=False)
    for line in what_changed(analysis.comparisons):
        moved = {"\u25b2" if c.difference > 0 else "\u25bc"
                 for c in line.comparisons if c.significant}
        console.print(f"  [bold]{''.join(sorted(moved)):2}[/] " if line.changed else
                      "  \u2013  ", line.text, sep="", highlight=False)
    console.print(family_note(analysis.comparisons, analysis.family), highlight=False)
    console.print(
        f"The truth from day {shift_day + 1}: dark_mode 50 % -> 56 %; new_editor 25 % -> about "
        f"34 % (2.5 turns it on by default); os android {OS_SHARES[0]:.0%} -> "
        f"{OS_SHARES[0] - OS_MOVE:.0%}, ios {OS_SHARES[1]:.0%} -> {OS_SHARES[1] + OS_MOVE:.0%}; "
        f"start-up times x{STARTUP_SPEEDUP} (20 % faster); nothing else changes.",
        highlight=False)


def print_breakdown(console: Any, b: Any, versions: VersionPopulation, day: int,
                    devices: int) -> None:
    """new_editor by app_version on simulated ``day`` (``b``, its ``Breakdown``): truth
    beside estimate and interval per value, the suppressed cell and why, the "not stated"
    count and the Holm-corrected differences between versions.

    One day's reports are one report per device, which the intervals assume (memoized
    devices repeat their answer every day: pooling days would add reports, not information).
    """
    import numpy as np
    from rich.table import Table

    from deniable.analysis.breakdown import NOT_STATED
    from deniable.client.dimensions import OTHER

    stated = versions.versions_on(day)
    counted = np.where(np.isin(stated, APP_VERSIONS), stated,
                       np.where(stated == "2.1", NOT_STATED, OTHER))
    truth = versions.uses_on(day)

    from deniable.analysis import plain
    from deniable.analysis.report import estimate_text

    def true_share(value: str) -> str:
        mine = counted == value
        return plain.percent(float(truth[mine].mean()), 1) if mine.any() else "-"

    pct = f"{b.confidence:.0%}"
    table = Table(title=f"{BY_METRIC} ({FEATURE.mechanism}) by app_version, a public "
                        f"dimension: share of devices, day {day + 1}")
    for header in ("app_version", "reports", "true share",
                   f"estimate ({pct.replace('%', ' %')} interval)", "in it"):
        table.add_column(header, justify="left" if header == "app_version" else "right",
                         no_wrap=True)
    inside = shown = 0
    for cell in b.cells:
        value = cell.values["app_version"]
        if cell.summary is None:
            table.add_row(value, f"{cell.n:,}", true_share(value), "[yellow]suppressed[/]",
                          "-")
            continue
        s = cell.summary
        hit = s.ci_low <= float(truth[counted == value].mean()) <= s.ci_high
        inside, shown = inside + hit, shown + 1
        table.add_row(value, f"{cell.n:,}", true_share(value), estimate_text(s),
                      "[green]yes[/]" if hit else "[red]no[/]")
    table.add_row(f"{NOT_STATED} (2.1)", f"{b.not_stated:,}", true_share(NOT_STATED), "-", "-")
    console.print(f"The same {devices:,} devices also reported whether they use the new "
                  f"editor, with their app version and platform as public dimensions.")
    console.print(table)
    differs = []
    for c in (c for c in b.comparisons if c.significant):
        (low, high), d = ((c.a, c.b), c.difference) if c.difference > 0 else \
            ((c.b, c.a), -c.difference)
        differs.append(f"{high.split('=', 1)[1]} above {low.split('=', 1)[1]} by "
                       f"{plain.number(d * 100, 2)} points")
    console.print(
        f"{inside} of {shown} true shares fall inside their {pct} intervals. "
        + (f"{b.note} " if b.note else "")
        + f"Differences between versions, Holm-corrected over {len(b.comparisons)} pairs "
        f"(alpha 0.05): {'; '.join(differs) or 'none significant'}. The truth: from day "
        f"{versions.shift_day + 1}, 2.5 turns the new editor on by default, {ON_2_5:.0%} of "
        f"its users keep it, against {FEATURE.true_rate:.0%} on every other version. "
        f"{b.dimensions_note} 2.1 predates dimensions: its reports count in the total only "
        f"({NOT_STATED}); 2.6-beta is off the list, so it counts as {OTHER}.")


def keep_truth(truth: dict[str, list[Any]], os_today: Any, crashes: Any, startup: Any) -> None:
    """Record one day's true category shares, bucket shares and mean (as reported: clamped)."""
    import numpy as np

    devices = len(os_today)
    truth["os"].append(np.bincount(os_today, minlength=len(OS)) / devices)
    buckets = np.clip(np.searchsorted(CRASH_EDGES, crashes, side="right") - 1,
                      0, len(CRASH_EDGES) - 2)
    truth["crashes_per_week"].append(np.bincount(buckets, minlength=len(CRASH_EDGES) - 1)
                                     / devices)
    truth["startup_ms"].append(float(np.clip(startup, *STARTUP_RANGE).mean()))


def daily_counts(counts: Any, day_starts: list[Any]) -> Any:
    """The metric's counters summed per simulated day, shape (days, width): each hour bucket
    goes to the day whose (shifted) upload hour is nearest."""
    import numpy as np

    from deniable.core.keys import hour_index

    day_hours = np.array([hour_index(s) for s in day_starts], dtype=np.int64)
    values = np.asarray(counts.values, dtype=np.int64)
    per_day = np.zeros((len(day_starts), values.shape[1]), dtype=np.int64)
    nearest = np.abs(np.asarray(counts.hours)[:, None] - day_hours[None, :]).argmin(axis=1)
    np.add.at(per_day, nearest, values)
    return per_day


def print_other_kinds(console: Any, source: Any, truth: dict[str, list[Any]],
                      day_starts: list[Any], shift_day: int, start: Any, end: Any,
                      devices: int) -> None:
    """Truth beside estimate and interval for the categorical, histogram and numeric metrics.

    Categories and buckets: the reports of one day before the change (the last day before
    it) and of the last day. Memoized devices with an unchanged value repeat the same answer
    every day, so pooling more days would add reports but no information; one day's
    reports are one report per device, which the intervals assume. Numbers: each day's mean.
    """
    from rich.table import Table

    from deniable.analysis import plain
    from deniable.analysis.categorical import estimate_categories
    from deniable.analysis.numeric import estimate_mean

    days = len(day_starts)
    before, after = shift_day - 1, days - 1
    inside = total = 0
    console.print(f"{devices:,} of the devices also reported, every day, their OS (categorical), "
                  "their crashes in the past week (histogram) and their start-up time "
                  "(numeric), memoized: per category, and numbers by alpha-point rounding.")
    for metric in KIND_METRICS[:2]:
        counts = source.counts(metric.name, start=start, end=end)
        spec = counts.metric.spec
        per_day = daily_counts(counts, day_starts)
        estimates = [estimate_categories(per_day[d], spec.mechanism, spec.labels)
                     for d in (before, after)]
        family = spec.mechanism.id.split(":")[0].upper()
        table = Table(title=f"{metric.name} ({spec.kind}, {family}, "
                            f"epsilon {spec.mechanism.epsilon:.3f}): share of devices, day "
                            f"{before + 1} and day {after + 1}")
        for header in (spec.kind_object.slot_word,
                       f"true, day {before + 1}", "estimate (95 % interval)",
                       f"true, day {after + 1}", "estimate (95 % interval)"):
            table.add_column(header, justify="left" if header in ("category", "bucket")
                             else "right", no_wrap=True)
        for i, label in enumerate(spec.labels):
            cells = [label]
            for d, e in zip((before, after), estimates):
                true_share = float(truth[metric.name][d][i])
                hit = e.ci_low[i] <= true_share <= e.ci_high[i]
                inside, total = inside + hit, total + 1
                cells += [plain.percent(true_share, 1),
                          plain.share(min(max(float(e.value[i]), 0.0), 1.0),
                                      float(e.ci_low[i]), float(e.ci_high[i]))
                          + ("" if hit else " [red]miss[/]")]
            table.add_row(*cells)
        console.print(table)
    counts = source.counts("startup_ms", start=start, end=end)
    mechanism = counts.metric.spec.mechanism
    per_day = daily_counts(counts, day_starts)
    table = Table(title=f"startup_ms (numeric, 1BitMean, epsilon {mechanism.epsilon:.3f}): "
                        f"mean per day, ms in [{STARTUP_RANGE[0]}, {STARTUP_RANGE[1]}]")
    for header in ("day", "reports", "true mean", "estimate (95 % interval)"):
        table.add_column(header, justify="right", no_wrap=True)
    for d in range(days):
        e = estimate_mean(int(per_day[d, 0]), int(per_day[d, 1]), mechanism)
        true_mean = truth["startup_ms"][d]
        hit = e.ci_low <= true_mean <= e.ci_high
        inside, total = inside + hit, total + 1
        table.add_row(f"{d + 1}", f"{e.n:,}", f"{plain.fixed(true_mean, 0)} ms",
                      plain.mean(e.mean, e.ci_low, e.ci_high, "ms")
                      + ("" if hit else " [red]miss[/]"))
    console.print(table)
    console.print(
        f"{inside} of {total} true values fall inside their 95% intervals (marginal: each "
        f"holds with probability 95%, so about one in twenty may miss; an unchanged category's "
        f"two days repeat the same memoized answers, so its misses come in pairs). The true "
        f"changes from day {shift_day + 1}: os android {OS_SHARES[0]:.2f} -> "
        f"{OS_SHARES[0] - OS_MOVE:.2f}, ios {OS_SHARES[1]:.2f} -> {OS_SHARES[1] + OS_MOVE:.2f}; "
        f"start-up times x{STARTUP_SPEEDUP}. A device's start-up time drifts a little every "
        "day, yet mostly repeats one memoized answer: the daily estimates move together.")
