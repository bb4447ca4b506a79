"""``deniable audit``: check every privacy claim of the client against the real code.

    results = run_audit(builtin_subjects(), trials=100_000)
    all(result.passed for result in results)

Each ``Subject`` is a metric as a device reports it: its wire mechanism and how the device
reports it (memoized, memoized with an instantaneous layer, or fresh coins). The claims come
from the client itself (``LongitudinalGuard.privacy_loss``); the samples come from the
client's privacy layer, one new simulated device (a new device secret from the OS CSPRNG)
per trial, exactly the code ``Reporter.report`` runs; the timing and traffic checks run real
``Reporter`` objects that upload over HTTP to a capturing server on loopback.

Checks, per subject (docs/audit.md has the method and how to read the results):

- ``epsilon``: a 95% (``Audit.confidence``) Clopper-Pearson lower bound on epsilon from one report of each of two
  neighbouring inputs; passes when the claimed one-report epsilon is at least the bound.
- ``distribution``: each input's observed P(report 1) is within 5 standard errors of the
  exact probability the mechanism claims.
- ``repeated``: k reports of one value against k of its neighbour, per device; the bound
  must not exceed what the client states for k reports (one report's epsilon when memoized,
  at most the long-run epsilon with an instantaneous layer, k times epsilon when fresh).
- ``exact``: every layer's probabilities equal its id's fractions, and enumerating every
  random word the sampler can draw gives exactly those probabilities.
- ``no-float``: no module that perturbs imports a float random source or calls one.
- ``randomness``: the random source is the OS CSPRNG, not an injected generator.
- ``timing``: Welch's t over interleaved ``report()`` calls of the two values, compared within
  each perturbed output (winsorized at the pooled 99th percentile); fails when |t| > 5 and
  the means differ by more than 1%, in two runs in a row.
- ``redis scan`` (with a Redis URL): what a collector holds identifies no batch's content and
  times no write more finely than the hour.
- ``traffic``: what leaves the device (request count, batch sizes, headers, bytes) does not
  depend on the true values: each body is exactly the canonical encoding of its perturbed
  reports, and both values' uploads look the same.

Categorical, histogram and numeric metrics (``KindSubject``: GRR, OUE, 1BitMean) get the
``epsilon`` check over their worst-case events, a ``distribution`` check (chi-square at a
false-failure rate of 1e-6, or 5 standard errors for 1BitMean) and an ``exact`` check: the
claimed likelihood ratio is the worst case of the output distributions the id defines, and
the sampler's coin, enumerated over every byte it can read, has the id's probability.

Open metrics (``OpenSubject``: the ``od:`` sketch) get the same three: ``epsilon`` and
``distribution`` from the real client's privacy layer, and an ``exact`` check that enumerates
the level and seed choice over every random word, replays the sampler, and finds the exact
worst-case ratio, held to the declared epsilon (``deniable.audit.open_domain``).

Another client is audited by the same checks with ``Audit(client=...)``: its reports and its
enumerations come from it (``deniable.audit.web``: the web client in node), the verdicts from
the functions here and in ``deniable.audit.open_domain``.

This module runs the checks; the exact enumerations and the source scan are in
``deniable.audit.exactness``, the loopback upload harness in ``deniable.audit.traffic``, and
the scan of a collector's Redis in ``deniable.audit.privacy_scan``.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Protocol

from deniable.analysis.bounds import (chi_square_test, count_events, epsilon_lower_bound,
                                      welch_t)
from deniable.client.categorical import (BITSET_MECHANISMS, KaryRandomizedResponse,
                                         SubsetSelection, UnaryEncoding, domain_tag,
                                         parse_categorical_id)
from deniable.client.config import Delivery, Privacy, Storage
from deniable.client.kinds import Mechanism, MetricSpec
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import RandomizedResponse
from deniable.client.numeric import BitMean
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.randomness import RandomBits
from deniable.client.reporter import Reporter
from deniable.client.state import IN_MEMORY
from deniable.audit.open_domain import OpenSubject, check_open_exact, check_open_reports
from deniable.audit.results import CheckResult
from deniable.audit.exactness import (PERTURBING_MODULES, coin_problems, enumerate_ones,
                                      float_random_uses, random_source_problems)
from deniable.audit.traffic import Upload, capturing_collector, traffic_problems, uploaded_bits

# The isinstance tests below are on mechanism families, not kinds: the audit checks each
# family's exact distribution (GRR, OUE, subset selection, 1BitMean), and two kinds
# (categorical, histogram) share three families; the subject's kind is its spec's.

Mode = Literal["memoized", "instantaneous", "fresh"]
DEFAULT_TRIALS = 100_000
DEFAULT_REPEATS = 4
DEFAULT_TIMING_CALLS = 100_000
TIMING_T_LIMIT = 5.0
TIMING_RELATIVE_LIMIT = 0.01
DISTRIBUTION_SE_LIMIT = 5.0
CHI_SQUARE_ALPHA = 1e-6
"""False-failure rate of each chi-square distribution check (categorical kinds)."""
DEFAULT_CONFIDENCE = 0.95
"""The epsilon checks' confidence: a claim that is exactly right fails one of them in less
than 1 run in 20 (Bonferroni is conservative: 3 of 1,500 runs of ``os_grr_ln5`` failed).
Tests that need a correct mechanism to pass ask for 1 - 1e-6 (docs/audit.md)."""
_UNDECIDED_MASS = Fraction(1, 10 ** 9)
_MIN_TIMING_STRATUM = 1000


class Device(Protocol):
    """One simulated device: turns a true value into a reported bit, as the client does."""

    def __call__(self, true_value: bool) -> int: ...


@dataclass(frozen=True)
class Subject:
    """One metric configuration under audit.

    Attributes:
        name: the label shown in the results (a metric name, or a built-in's name).
        metric: the metric name the device reports under.
        mechanism: the wire mechanism, as registered at the collector.
        mode: how the device reports: memoized (the client's default), memoized with the
            instantaneous layer ``irr``, or fresh coins every report.
        irr: the instantaneous layer, for mode "instantaneous".
    """

    name: str
    metric: str
    mechanism: RandomizedResponse
    mode: Mode = "memoized"
    irr: RandomizedResponse | None = None

    def guard(self, rng: RandomBits | None = None) -> LongitudinalGuard:
        """A new device's privacy layer for this subject: a fresh secret, state in memory
        (on purpose: each trial is a new device, so the client's warning is not logged)."""
        with _simulated_devices():
            return LongitudinalGuard(
                IN_MEMORY, rng=rng, max_metric_epsilon=math.inf,
                fresh={self.metric} if self.mode == "fresh" else (),
                irr={self.metric: self.irr} if self.mode == "instantaneous" and self.irr
                else None)

    def reporter_privacy(self) -> Privacy:
        """The Reporter's privacy options that give this subject's mode. The client's epsilon
        ceiling is lifted: the audit checks the mechanism's claims whatever its epsilon."""
        # Every call must reach the mechanism: the audit draws many reports on one device,
        # so the one-report-per-period gate is off.
        return Privacy(max_epsilon=math.inf, one_per_period=False,
                       fresh={self.metric} if self.mode == "fresh" else (),
                       irr=({self.metric: self.irr}
                            if self.mode == "instantaneous" and self.irr is not None else {}))


class _InMemoryWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "privacy state is in memory only" not in record.getMessage()


_IN_MEMORY_WARNING = _InMemoryWarning()


@contextmanager
def _simulated_devices() -> Iterator[None]:
    """Simulated devices keep their state in memory by design: hold the client's warning."""
    logger = logging.getLogger("deniable.client")
    logger.addFilter(_IN_MEMORY_WARNING)
    try:
        yield
    finally:
        logger.removeFilter(_IN_MEMORY_WARNING)


DeviceFactory = Callable[[Subject], Device]
ReporterFactory = Callable[..., Any]


def client_device(subject: Subject, rng: RandomBits | None = None) -> Device:
    """A new device as the client builds it: ``Reporter.report`` calls exactly this guard's
    ``perturb`` with the metric's wire mechanism (src/deniable/client/reporter.py ``_perturb``)."""
    guard = subject.guard(rng)

    def report(true_value: bool) -> int:
        return guard.perturb(subject.metric, subject.mechanism, true_value)
    return report


OS_LABELS = ("android", "ios", "windows", "macos", "linux", "other")


def builtin_subjects() -> list[AnySubject]:
    """The mechanisms and modes the client ships: the audit's default subjects."""
    two_coin = RandomizedResponse.from_id("rr:1/2:1/2")
    ln7 = RandomizedResponse.from_id("rr:3/4:1/2")
    return [
        Subject("two_coin", "two_coin", two_coin),
        Subject("two_coin_irr", "two_coin_irr", two_coin, "instantaneous", ln7),
        Subject("two_coin_fresh", "two_coin_fresh", two_coin, "fresh"),
        Subject("warner_ln7", "warner_ln7", ln7),
        KindSubject.of("os_grr_ln5", MetricSpec.build(
            "categorical", mechanism=f"grr:6:1/2:{domain_tag(OS_LABELS)}", categories=OS_LABELS)),
        KindSubject.of("oue_d64_eps2", MetricSpec.build(
            "categorical", mechanism=UnaryEncoding.from_epsilon(
                2.0, 64, domain_tag([f"c{i}" for i in range(64)])),
            categories=[f"c{i}" for i in range(64)])),
        KindSubject.of("ss_d8_eps1", MetricSpec.build(
            "categorical", epsilon=1.0, categories=[f"c{i}" for i in range(8)])),
        KindSubject.of("bitmean_ln3", MetricSpec.build("numeric", mechanism="bm:1/4:0:1000",
                                                       lower=0, upper=1000)),
        OpenSubject.of("open_16b_ln9", MetricSpec.build("open", epsilon=math.log(9),
                                                        max_bytes=16), epsilon=math.log(9)),
    ]


def catalogue_subjects(catalogue: Mapping[str, RandomizedResponse | Mechanism | MetricSpec],
                       epsilons: Mapping[str, float] | None = None) -> list[AnySubject]:
    """One subject per metric: a boolean one reported as the client does by default
    (memoized); a categorical, histogram or numeric one by its mechanism's ``perturb``; an
    open one through the client's privacy layer, its exact epsilon held to ``epsilons[name]``
    (the epsilon its entry states) or, if none, the client's default ceiling."""
    subjects: list[AnySubject] = []
    for name, entry in sorted(catalogue.items()):
        spec = entry if isinstance(entry, MetricSpec) else None
        mechanism = spec.mechanism if spec is not None else entry
        if isinstance(mechanism, RandomizedResponse):
            subjects.append(Subject(name, name, mechanism))
        elif isinstance(mechanism, OpenDomainSketch):
            assert spec is not None
            subjects.append(OpenSubject.of(name, spec, (epsilons or {}).get(name)))
        else:
            assert not isinstance(mechanism, MetricSpec)
            subjects.append(KindSubject(name, name, mechanism, spec))
    return subjects


KindMechanism = KaryRandomizedResponse | UnaryEncoding | SubsetSelection | BitMean


@dataclass(frozen=True)
class KindSubject:
    """A categorical, histogram or numeric metric under audit: reports come from its
    mechanism's ``perturb`` with the client's secure system source, fresh coins per report
    (these kinds have no memoized layer yet).

    Attributes:
        name / metric: as for ``Subject``.
        mechanism: a GRR, OUE or 1BitMean mechanism.
        spec: the metric's declaration, if known (names its categories in the results).
    """

    name: str
    metric: str
    mechanism: KindMechanism
    spec: MetricSpec | None = None

    @classmethod
    def of(cls, name: str, spec: MetricSpec) -> KindSubject:
        mechanism = spec.mechanism
        assert isinstance(mechanism, (KaryRandomizedResponse, UnaryEncoding, SubsetSelection,
                                      BitMean))
        return cls(name, name, mechanism, spec)

    def inputs(self) -> list[Fraction | int]:
        """The true values sampled: two categories (any two are neighbours, by symmetry), or
        a numeric range's two ends and its midpoint."""
        if isinstance(self.mechanism, BitMean):
            low, high = self.mechanism.lower, self.mechanism.upper
            return [low, high, (low + high) / 2]
        return [0, 1]


AnySubject = Subject | KindSubject | OpenSubject
"""A subject of any kind: boolean (``Subject``), categorical, histogram or numeric
(``KindSubject``), open (``OpenSubject``)."""


Progress = Callable[[str, int], None]
"""progress(label, units done since the last call): the audit's progress reports."""


def _no_progress(label: str, done: int) -> None:
    pass


class ClientUnderAudit(Protocol):
    """Another client than this Python one, audited with the same checks
    (``deniable.audit.web``: the web client). It draws reports with its own code and
    enumerates its own samplers; the checks that judge them are this module's."""

    @property
    def name(self) -> str:
        """The client, in words (``web``)."""
        ...

    def boolean_reports(self, subject: Subject, value: bool, devices: int, k: int,
                        progress: Progress) -> list[int]:
        """The ones among k reports of ``value`` by each of ``devices`` new devices."""
        ...

    def kind_reports(self, subject: KindSubject, value: Fraction | int, n: int,
                     progress: Progress) -> list[int]:
        """``n`` fresh reports of ``value`` (an index, or a number) as the Python ones read."""
        ...

    def open_reports(self, subject: OpenSubject, value: str, n: int,
                     progress: Progress) -> list[int]:
        """``n`` reports (cells) of the string ``value``."""
        ...

    def client_checks(self) -> list[CheckResult]:
        """The client-wide checks: ``no-float`` and ``randomness``."""
        ...

    def check_exact(self, subject: AnySubject) -> CheckResult:
        """The ``exact`` check of one subject, over the client's own samplers."""
        ...


@dataclass
class Audit:
    """Runs the checks. Every argument has the default the ``deniable audit`` command uses.

    Args:
        trials: one-report samples per neighbouring input (devices, for memoized modes).
        repeats: k, reports per device in the repeated-reports check.
        repeat_devices: devices per input in that check (default: trials // 10).
        timing_calls: report() calls per value in the timing check.
        device_factory: builds a simulated device for a subject; tests hand in broken ones.
        reporter_factory: builds a Reporter (keyword arguments as Reporter's); tests hand in
            broken ones.
        rng: a random source to inject into every device and reporter (None: the client's
            secure default). The randomness check fails for anything but the OS CSPRNG.
        confidence: of the epsilon lower bounds (all of one check's bounds hold at once with
            at least this probability, so a true claim fails with at most 1 - confidence).
        progress: called as work advances.
        client: another client to audit (the web client, ``deniable.audit.web``); None: this
            Python client. The same checks judge its reports; timing and traffic run the
            Python Reporter, so they are not run for another client.
    """

    trials: int = DEFAULT_TRIALS
    repeats: int = DEFAULT_REPEATS
    repeat_devices: int | None = None
    timing_calls: int = DEFAULT_TIMING_CALLS
    device_factory: Callable[[Subject, RandomBits | None], Device] = client_device
    reporter_factory: ReporterFactory = Reporter
    rng: RandomBits | None = None
    confidence: float = DEFAULT_CONFIDENCE
    progress: Progress = field(default=_no_progress)
    client: ClientUnderAudit | None = None

    def work(self, subjects: Sequence[AnySubject]) -> int:
        """Units of work ``run`` will report through ``progress`` (for a progress bar)."""
        devices = self.repeat_devices if self.repeat_devices is not None else self.trials // 10
        units = 0
        for subject in subjects:
            if isinstance(subject, (KindSubject, OpenSubject)):
                units += len(subject.inputs()) * self.trials
            else:
                units += 2 * self.trials + 2 * devices + (
                    2 * self.timing_calls if self.client is None else 0)
        return units

    def run(self, subjects: Sequence[AnySubject]) -> list[CheckResult]:
        """Every check of every subject, in order."""
        client = self.client
        results: list[CheckResult] = ([self.check_no_float(), self.check_randomness()]
                                      if client is None else client.client_checks())
        for subject in subjects:
            rows: list[CheckResult] = []
            if isinstance(subject, OpenSubject):
                rows.extend(check_open_reports(
                    subject, self.trials, self.confidence, self.rng, self.progress,
                    None if client is None else client.open_reports))
                rows.append(check_open_exact(subject) if client is None
                            else client.check_exact(subject))
            elif isinstance(subject, KindSubject):
                rows.extend(self.check_kind_reports(subject))
                rows.append(check_kind_exact(subject) if client is None
                            else client.check_exact(subject))
            else:
                rows.extend(self.check_one_report(subject))
                rows.append(self.check_repeated(subject))
                if client is not None:
                    rows.append(client.check_exact(subject))
                    results.extend(dataclasses.replace(row, mechanism=subject.mechanism.id)
                                   for row in rows)
                    continue
                rows.append(self.check_exact(subject))
                rows.append(self.check_timing(subject))
                rows.append(self.check_traffic(subject))
            results.extend(dataclasses.replace(row, mechanism=subject.mechanism.id)
                           for row in rows)
        return results

    # -- sampling --------------------------------------------------------------------------

    def _device(self, subject: Subject) -> Device:
        return self.device_factory(subject, self.rng)

    def _sample(self, subject: Subject, value: bool, devices: int, k: int) -> list[int]:
        """Ones among k reports of ``value``, for each of ``devices`` new devices. Fresh
        reporting draws independent coins per report, so one device serves every trial
        when k == 1 (the same code path, much faster)."""
        label = f"{subject.name}: {'yes' if value else 'no'}"
        if self.client is not None:
            return self.client.boolean_reports(subject, value, devices, k, self.progress)
        chunk = max(1, devices // 100)
        out: list[int] = []
        shared = self._device(subject) if subject.mode == "fresh" and k == 1 else None
        for start in range(0, devices, chunk):
            for _ in range(min(chunk, devices - start)):
                device = shared or self._device(subject)
                out.append(sum(device(value) for _ in range(k)))
            self.progress(label, min(chunk, devices - start))
        return out

    def _claims(self, subject: Subject) -> tuple[float, float]:
        """(one report's epsilon, k reports' epsilon), as the client states them."""
        loss = subject.guard().privacy_loss(subject.metric, subject.mechanism)
        return loss.one_report_epsilon, loss.after(self.repeats)

    # -- the checks ------------------------------------------------------------------------

    def check_one_report(self, subject: Subject) -> list[CheckResult]:
        """The ``epsilon`` and ``distribution`` checks, from one report per trial."""
        started = time.monotonic()
        claim, _ = self._claims(subject)
        yes = sum(self._sample(subject, True, self.trials, 1))
        no = sum(self._sample(subject, False, self.trials, 1))
        n = self.trials
        bound = epsilon_lower_bound({"1": yes, "0": n - yes}, n,
                                    {"1": no, "0": n - no}, n, self.confidence)
        elapsed = time.monotonic() - started
        epsilon = CheckResult(
            subject.name, "epsilon", claim >= bound.epsilon,
            f"{n:,} reports per input; most distinguishing output: {bound.event}",
            claim, bound.epsilon, elapsed)
        worst = 0.0
        for ones, p in ((yes, subject.mechanism.p_yes_given_yes),
                        (no, subject.mechanism.p_yes_given_no)):
            se = math.sqrt(float(p * (1 - p)) / n)
            worst = max(worst, abs(ones / n - float(p)) / se)
        distribution = CheckResult(
            subject.name, "distribution", worst <= DISTRIBUTION_SE_LIMIT,
            f"P(1|yes) observed {yes / n:.5f} vs {float(subject.mechanism.p_yes_given_yes):.5f}, "
            f"P(1|no) {no / n:.5f} vs {float(subject.mechanism.p_yes_given_no):.5f}; "
            f"worst {worst:.1f} SE (limit {DISTRIBUTION_SE_LIMIT:g})")
        return [epsilon, distribution]

    def check_repeated(self, subject: Subject) -> CheckResult:
        """k reports of one value per device against k of its neighbour."""
        started = time.monotonic()
        devices = self.repeat_devices if self.repeat_devices is not None else self.trials // 10
        k = self.repeats
        _, claim = self._claims(subject)
        yes = count_events(self._sample(subject, True, devices, k), k)
        no = count_events(self._sample(subject, False, devices, k), k)
        bound = epsilon_lower_bound(yes, devices, no, devices, self.confidence)
        return CheckResult(
            subject.name, f"repeated x{k}", claim >= bound.epsilon,
            f"{devices:,} devices per input, {k} reports each ({subject.mode}); most "
            f"distinguishing: {bound.event}", claim, bound.epsilon, time.monotonic() - started)

    def check_exact(self, subject: Subject) -> CheckResult:
        """Every layer's probabilities are its id's fractions, and the sampler's outcomes
        over every random word it can draw have exactly those probabilities."""
        guard = subject.guard()
        layers = guard.layers(subject.metric, subject.mechanism)
        problems: list[str] = []
        notes: list[str] = []
        for label, layer in (("wire", layers.wire), ("memo", layers.memo), ("irr", layers.irr)):
            if layer is None:
                continue
            if not isinstance(layer, RandomizedResponse):
                problems.append(f"{label} layer {layer.id} is not randomized response")
                continue
            parsed = RandomizedResponse.from_id(layer.id)
            if (parsed.p_yes_given_yes, parsed.p_yes_given_no) != (layer.p_yes_given_yes,
                                                                  layer.p_yes_given_no):
                problems.append(f"{label} {layer.id}: probabilities differ from its id")
            for true_bit, claimed in ((1, layer.p_yes_given_yes), (0, layer.p_yes_given_no)):
                ones, unfinished = enumerate_ones(layer, true_bit)
                if unfinished == 0 and ones != claimed:
                    problems.append(f"{label} {layer.id}: P(1|{true_bit}) is {ones}, "
                                    f"claimed {claimed}")
                elif unfinished and not ones <= claimed <= ones + unfinished:
                    problems.append(f"{label} {layer.id}: P(1|{true_bit}) lies in "
                                    f"[{ones}, {ones + unfinished}], claimed {claimed}")
                elif unfinished > _UNDECIDED_MASS:
                    notes.append(f"{label}: {float(unfinished):.1e} of the draws not enumerated, "
                                 f"left to the distribution check")
                elif unfinished:
                    notes.append(f"{label} within {float(unfinished):.1e}")
        detail = "; ".join(problems) if problems else (
            "exact over every random word" + (f" ({', '.join(sorted(set(notes)))})"
                                              if notes else ""))
        return CheckResult(subject.name, "exact", not problems, detail)

    def check_no_float(self) -> CheckResult:
        """No perturbing module imports or calls a float random source."""
        findings = float_random_uses()
        return CheckResult(
            "client", "no-float", not findings,
            "; ".join(findings) if findings else
            f"no float random source in deniable.client.{{{','.join(PERTURBING_MODULES)}}}")

    def check_randomness(self) -> CheckResult:
        """The random source is the OS CSPRNG."""
        problems = random_source_problems(self.rng)
        return CheckResult(
            "client", "randomness", not problems,
            "; ".join(problems) if problems else
            "os.urandom (the OS CSPRNG) for device secrets, coins and batch ids")

    def check_timing(self, subject: Subject) -> CheckResult:
        """report() takes no measurably different time for the two true values: a
        difference must show in two runs in a row (one run of a busy machine can mislead).
        """
        first = self._timing_run(subject)
        if first.passed:
            return first
        second = self._timing_run(subject)
        return dataclasses.replace(
            second, detail=f"{second.detail}; failed twice in a row (first: {first.detail})",
            seconds=first.seconds + second.seconds)

    def _timing_run(self, subject: Subject) -> CheckResult:
        """One timing measurement (see ``check_timing``).

        Only a dependence on the *true* value is a leak: the perturbed bit is sent anyway,
        and it is correlated with the true value by design, so times are compared within
        each perturbed output (read back, in call order, from the captured uploads). A
        memoized device gives one fixed output per value, so the check uses a device whose
        two memoized answers happen to agree.
        """
        calls = self.timing_calls
        started = time.monotonic()
        metric = subject.metric
        with capturing_collector({metric: subject.mechanism}) as (url, uploads), \
                tempfile.TemporaryDirectory() as root:
            for attempt in range(64):
                del uploads[:]
                reporter = self.reporter_factory(
                    url, {metric: subject.mechanism}, rng=self.rng,
                    storage=Storage(privacy_dir=os.path.join(root, str(attempt)),
                                    max_queued_reports=4 * calls + 10_000),
                    delivery=Delivery(batch_size=1000), privacy=subject.reporter_privacy())
                for _ in range(200):  # first reports pay the ledger; warm both values up
                    reporter.report(metric, True)
                    reporter.report(metric, False)
                reporter.flush(timeout=30)
                warm = uploaded_bits(uploads)
                if subject.mode != "memoized" or warm[0] == warm[1]:
                    break
                reporter.close(timeout=10)
            try:
                values: list[bool] = []
                times: list[int] = []
                report, clock = reporter.report, time.perf_counter_ns
                chunk = max(1, calls // 50)
                for start in range(0, calls, chunk):
                    order = secrets.randbits(chunk)
                    for i in range(min(chunk, calls - start)):
                        first = bool(order >> i & 1)
                        for value in (first, not first):
                            t0 = clock()
                            report(metric, value)
                            times.append(clock() - t0)
                            values.append(value)
                    self.progress(f"{subject.name}: timing", 2 * min(chunk, calls - start))
                reporter.flush(timeout=60)
            finally:
                reporter.close(timeout=10)
            outputs = uploaded_bits(uploads)[len(warm):]
        if len(outputs) != len(values):
            return CheckResult(subject.name, "timing", False,
                               f"{len(values)} calls but {len(outputs)} reports uploaded",
                               seconds=time.monotonic() - started)
        # Preemption by other processes adds rare, huge delays to random calls of either
        # value; winsorizing at the pooled 99th percentile keeps them from drowning a real
        # difference (and cannot create one: the cap is the same for both values).
        cap = sorted(times)[int(0.99 * (len(times) - 1))]
        findings: list[str] = []
        leaks = False
        for output in (0, 1):
            yes = [float(min(t, cap)) for t, v, o in zip(times, values, outputs)
                   if v and o == output]
            no = [float(min(t, cap)) for t, v, o in zip(times, values, outputs)
                  if not v and o == output]
            if min(len(yes), len(no)) < _MIN_TIMING_STRATUM:
                continue
            test = welch_t(yes, no)
            mean = (test.mean_a + test.mean_b) / 2
            relative = abs(test.difference) / mean if mean else 0.0
            leaks |= abs(test.t) > TIMING_T_LIMIT and relative > TIMING_RELATIVE_LIMIT
            findings.append(f"output {output}: yes {test.mean_a / 1000:.2f} us "
                            f"({len(yes):,}), no {test.mean_b / 1000:.2f} us ({len(no):,}), "
                            f"t = {test.t:+.1f}, {relative:.2%}")
        if not findings:
            return CheckResult(subject.name, "timing", False,
                               "too few calls with the same output for both values",
                               seconds=time.monotonic() - started)
        return CheckResult(
            subject.name, "timing", not leaks,
            f"{calls:,} interleaved calls per value; " + "; ".join(findings) +
            f" (fails if |t| > {TIMING_T_LIMIT:g} and > {TIMING_RELATIVE_LIMIT:.0%})",
            seconds=time.monotonic() - started)

    def check_traffic(self, subject: Subject, reports: int = 2500) -> CheckResult:
        """Uploads of a device that reports only yes look like those of one that says no."""
        started = time.monotonic()
        seen: list[list[Upload]] = []
        for value in (True, False):
            with capturing_collector({subject.metric: subject.mechanism}) as (url, uploads), \
                    tempfile.TemporaryDirectory() as state:
                reporter = self.reporter_factory(
                    url, {subject.metric: subject.mechanism}, rng=self.rng,
                    storage=Storage(privacy_dir=state), delivery=Delivery(batch_size=500),
                    privacy=subject.reporter_privacy())
                try:
                    for _ in range(reports):
                        reporter.report(subject.metric, value)
                    reporter.flush(timeout=30)
                finally:
                    reporter.close(timeout=10)
                seen.append(list(uploads))
        problems = traffic_problems(seen[0], seen[1])
        return CheckResult(
            subject.name, "traffic", not problems,
            "; ".join(problems[:3]) if problems else
            f"{len(seen[0])} uploads per value: same sizes, headers and lengths; bodies are "
            f"exactly their perturbed reports",
            seconds=time.monotonic() - started)


    # -- categorical, histogram and numeric kinds -------------------------------------

    def _kind_samples(self, subject: KindSubject, value: Fraction | int) -> list[int]:
        """``trials`` reports of ``value`` from the mechanism's ``perturb`` (fresh coins)."""
        label = f"{subject.name}: {value}"
        if self.client is not None:
            return self.client.kind_reports(subject, value, self.trials, self.progress)
        perturb = subject.mechanism.perturb
        chunk = max(1, self.trials // 100)
        out: list[int] = []
        for start in range(0, self.trials, chunk):
            size = min(chunk, self.trials - start)
            out.extend(perturb(value, self.rng) for _ in range(size))  # type: ignore[arg-type]
            self.progress(label, size)
        return out

    def check_kind_reports(self, subject: KindSubject) -> list[CheckResult]:
        """The ``epsilon`` and ``distribution`` checks of a categorical or numeric metric.

        ``epsilon``: a lower bound (at ``confidence``) from ``trials`` reports of each of two neighbouring
        inputs, over the events that decide the worst case (GRR: the report is category 0,
        1 or another; OUE: bits 0 and 1; 1BitMean: the bit, at the range's two ends).
        ``distribution``: each input's outputs against the exact probabilities the id
        claims: a chi-square test at a false-failure rate of 1e-6 (GRR: every category,
        small ones pooled; OUE: every bit's count, and bits 0 and 1 jointly), or each
        P(1 | x) within 5 standard errors (1BitMean).
        """
        started = time.monotonic()
        mechanism, n = subject.mechanism, self.trials
        samples = {value: self._kind_samples(subject, value) for value in subject.inputs()}
        first, second = subject.inputs()[:2]
        events = [kind_events(mechanism, samples[v]) for v in (first, second)]
        bound = epsilon_lower_bound(events[0], n, events[1], n, self.confidence)
        claim = mechanism.epsilon
        epsilon = CheckResult(
            subject.name, "epsilon", claim >= bound.epsilon,
            f"{n:,} reports per input; most distinguishing output: {bound.event}",
            claim, bound.epsilon, time.monotonic() - started)
        passed, findings = True, []
        for value, outputs in samples.items():
            ok, text = kind_distribution(mechanism, value, outputs)
            passed &= ok
            findings.append(text)
        distribution = CheckResult(subject.name, "distribution", passed, "; ".join(findings),
                                   seconds=time.monotonic() - started)
        return [epsilon, distribution]


def kind_events(mechanism: KindMechanism, outputs: list[int]) -> dict[str, int]:
    """How often each worst-case event occurred among one input's reports."""
    n = len(outputs)
    if isinstance(mechanism, KaryRandomizedResponse):
        zero, one = outputs.count(0), outputs.count(1)
        return {"report=0": zero, "report=1": one, "report other": n - zero - one}
    if isinstance(mechanism, BITSET_MECHANISMS):
        pairs = [0, 0, 0, 0]
        for bits in outputs:
            pairs[bits & 3] += 1
        return {f"bit0={k & 1},bit1={k >> 1}": pairs[k] for k in range(4)}
    ones = sum(outputs)
    return {"bit=1": ones, "bit=0": n - ones}


def _bit_counts(outputs: list[int], d: int) -> list[int]:
    """How often each of d bits was set among bitsets (numpy's unpackbits, for speed)."""
    import numpy as np
    width = -(-d // 8)
    raw = b"".join(bits.to_bytes(width, "little") for bits in outputs)
    unpacked = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(len(outputs), width),
                             axis=1, bitorder="little")
    return [int(c) for c in unpacked.sum(axis=0)[:d]]


def kind_distribution(mechanism: KindMechanism, value: Fraction | int,
                      outputs: list[int]) -> tuple[bool, str]:
    """Whether one input's outputs fit the exact probabilities the id claims, and how."""
    n = len(outputs)
    if isinstance(mechanism, BitMean):
        p = mechanism.p_one(Fraction(value))
        ones = sum(outputs)
        z = (ones / n - float(p)) / math.sqrt(float(p * (1 - p)) / n)
        return (abs(z) <= DISTRIBUTION_SE_LIMIT,
                f"P(1|{value}) observed {ones / n:.5f} vs {float(p):.5f} ({z:+.1f} SE)")
    assert isinstance(value, int)
    d = mechanism.d
    if isinstance(mechanism, KaryRandomizedResponse):
        p, q = mechanism.channel
        counts = [0] * d
        for j in outputs:
            counts[j] += 1
        observed = {f"={value}": counts[value]}
        expected = {f"={value}": float(p)}
        others = [j for j in range(d) if j != value]
        # Pool the other categories into groups expected to hold >= 5 reports each.
        per_group = max(1, math.ceil(5 / max(n * float(q), 1e-300)))
        for g in range(0, len(others), per_group):
            group = others[g:g + per_group]
            key = f"={group[0]}" if len(group) == 1 else f"in {group[0]}..{group[-1]}"
            observed[key] = sum(counts[j] for j in group)
            expected[key] = float(q) * len(group)
        test = chi_square_test(observed, expected)
        ok = test.p_value >= CHI_SQUARE_ALPHA
        return ok, (f"true {value}: P(own) observed {counts[value] / n:.5f} vs {float(p):.5f}; "
                    f"chi-square {test.statistic:.1f} on {test.dof} dof, p = {test.p_value:.2g}"
                    f" (worst cell {test.worst[0]}: {test.worst[1]:+.1f} SE)")
    if isinstance(mechanism, SubsetSelection):
        return _subset_distribution(mechanism, value, outputs)
    half, q = mechanism.channel
    bits = _bit_counts(outputs, d)
    statistic = 0.0
    worst = (0, 0.0)
    for i, count in enumerate(bits):
        rate = float(half if i == value else q)
        z = (count - n * rate) / math.sqrt(n * rate * (1 - rate))
        statistic += z * z
        if abs(z) > abs(worst[1]):
            worst = (i, z)
    from deniable.analysis.bounds import chi_square_sf  # the bits are independent: dof = d
    p_bits = chi_square_sf(statistic, d)
    pairs = kind_events(mechanism, outputs)
    joint = {}
    for key in pairs:
        b0, b1 = int(key[5]), int(key[12])
        p0 = float(half if value == 0 else q)
        p1 = float(half if value == 1 else q)
        joint[key] = (p0 if b0 else 1 - p0) * (p1 if b1 else 1 - p1)
    pair_test = chi_square_test(pairs, joint)
    ok = min(p_bits, pair_test.p_value) >= CHI_SQUARE_ALPHA / 2
    return ok, (f"true {value}: bit {value} observed {bits[value] / n:.5f} vs 0.5, others' mean "
                f"{(sum(bits) - bits[value]) / (n * (d - 1)):.5f} vs {float(q):.5f}; per-bit "
                f"chi-square p = {p_bits:.2g} (worst bit {worst[0]}: {worst[1]:+.1f} SE), "
                f"bits 0 and 1 jointly p = {pair_test.p_value:.2g}")


def exact_ratio(mechanism_id: str) -> Fraction:
    """The worst-case likelihood ratio of a grr/oue/bm id, from its fractions alone: the
    largest P(output | x) / P(output | x') over every output and every pair of inputs."""
    if mechanism_id.startswith("bm:"):
        bm = BitMean.from_id(mechanism_id)
        ends = [bm.a, 1 - bm.a]  # P(1 | lower) = a, P(1 | upper) = 1 - a; linear between
        return max(max(ends) / min(ends), max(1 - e for e in ends) / min(1 - e for e in ends))
    if mechanism_id.startswith("ss:"):
        # P(S | i) = w / Z with w = r if i is in S, else 1, and the same Z for every i (each
        # input has C(d-1, k-1) subsets holding it): the ratio is r or 1/r or 1.
        r = SubsetSelection.from_id(mechanism_id).r
        return max(r, 1 / r)
    prefix, d, probability, _ = parse_categorical_id(mechanism_id)
    if prefix == "grr":
        p, q = probability, (1 - probability) / (d - 1)
        return max(p, q) / min(p, q)  # each output j: p under input j, q under any other
    q, half = probability, Fraction(1, 2)
    # Inputs i, i' differ only in how bits i and i' are drawn; every other bit cancels.
    ratios = []
    for bit_i in (0, 1):
        for bit_other in (0, 1):
            under_i = half * (q if bit_other else 1 - q)
            under_other = (q if bit_i else 1 - q) * half
            ratios.append(under_i / under_other)
    return max(ratios)


def check_kind_exact(subject: KindSubject) -> CheckResult:
    """The claimed epsilon is exactly the worst case of the output distributions the id
    defines, and the sampler's parts draw exactly the id's probabilities: each coin
    (``ByteCoin``) over every byte it can read, GRR's other-category map, OUE's fair bit."""
    mechanism = subject.mechanism
    problems: list[str] = []
    ratio = exact_ratio(mechanism.id)
    if mechanism.likelihood_ratio != ratio:
        problems.append(f"claims likelihood ratio {mechanism.likelihood_ratio}, the id's "
                        f"distributions give {ratio}")
    if not math.isclose(mechanism.epsilon, math.log(ratio), rel_tol=1e-12):
        problems.append(f"claims epsilon {mechanism.epsilon}, ln of the id's ratio is "
                        f"{math.log(ratio)}")
    notes = [f"worst-case ratio {ratio} = e^{math.log(ratio):.6f}"]
    if isinstance(mechanism, BitMean):
        span = mechanism.upper - mechanism.lower
        for x in (mechanism.lower, mechanism.upper, mechanism.lower + span / 3):
            s = (x - mechanism.lower) / span
            if mechanism.p_one(x) != mechanism.a + (1 - 2 * mechanism.a) * s:
                problems.append(f"P(1|{x}) is {mechanism.p_one(x)}, not a + (1 - 2a) s")
    else:
        if isinstance(mechanism, SubsetSelection):
            problems.extend(_subset_channel_problems(mechanism))
        p = mechanism.p if isinstance(mechanism, KaryRandomizedResponse) else \
            mechanism.q if isinstance(mechanism, UnaryEncoding) else mechanism.channel[0]
        found, noted = coin_problems(p, mechanism.d if isinstance(
            mechanism, KaryRandomizedResponse) else None)
        problems.extend(found)
        notes.extend(noted)
        if isinstance(mechanism, UnaryEncoding):
            ones = sum(b >> 7 for b in range(256))
            if ones != 128:
                problems.append("the fair bit is not fair")
    return CheckResult(subject.name, "exact", not problems,
                       "; ".join(problems) if problems else "; ".join(notes))


def _subset_weight(mechanism: SubsetSelection, value: int, b0: int, b1: int) -> Fraction:
    """P(bits 0 and 1 of a subset are b0, b1 | true ``value``), counted from the definition
    (P(S) = r or 1 over Z = C(d-1, k-1) r + C(d-1, k))."""
    d, k, r = mechanism.d, mechanism.k, mechanism.r

    def comb(n: int, m: int) -> int:
        return math.comb(n, m) if 0 <= m <= n else 0
    rest = k - b0 - b1  # members among the other d - 2 categories
    if value in (0, 1):
        weight = (r if (b0, b1)[value] else 1) * comb(d - 2, rest)
    else:
        weight = r * comb(d - 3, rest - 1) + comb(d - 3, rest)
    return weight / (comb(d - 1, k - 1) * r + comb(d - 1, k))


def _subset_channel_problems(mechanism: SubsetSelection) -> list[str]:
    """The channel the mechanism debiases with against the counts of the definition."""
    own = sum(_subset_weight(mechanism, 0, 1, b1) for b1 in (0, 1))
    other = sum(_subset_weight(mechanism, 0, b0, 1) for b0 in (0, 1))
    if mechanism.channel != (own, other):
        return [f"claims channel {mechanism.channel}, the definition gives ({own}, {other})"]
    return []


def _subset_distribution(mechanism: SubsetSelection, value: int,
                         outputs: list[int]) -> tuple[bool, str]:
    """Subset selection: every report sets exactly k bits; each category's inclusion count
    fits its marginal (P1 or Q; the bits are dependent, so Bonferroni over the d normal
    tests); bits 0 and 1 jointly fit their exact probabilities (chi-square)."""
    n, d = len(outputs), mechanism.d
    p1, q = mechanism.channel
    wrong_size = sum(bits.bit_count() != mechanism.k for bits in outputs)
    bits = _bit_counts(outputs, d)
    worst = (0, 0.0)
    for i, count in enumerate(bits):
        p = float(p1 if i == value else q)
        z = (count - n * p) / math.sqrt(n * p * (1 - p))
        if abs(z) > abs(worst[1]):
            worst = (i, z)
    p_bits = min(1.0, d * math.erfc(abs(worst[1]) / math.sqrt(2)))
    pairs = kind_events(mechanism, outputs)
    joint = {key: float(_subset_weight(mechanism, value, int(key[5]), int(key[12])))
             for key in pairs}
    pair_test = chi_square_test({k: v for k, v in pairs.items() if joint[k] > 0},
                                {k: v for k, v in joint.items() if v > 0})
    ok = not wrong_size and min(p_bits, pair_test.p_value) >= CHI_SQUARE_ALPHA / 2
    return ok, (f"true {value}: {wrong_size} reports not of size {mechanism.k}; category "
                f"{value} included {bits[value] / n:.5f} vs {float(p1):.5f}, others' mean "
                f"{(sum(bits) - bits[value]) / (n * (d - 1)):.5f} vs {float(q):.5f}; per-"
                f"category Bonferroni p = {p_bits:.2g} (worst {worst[0]}: {worst[1]:+.1f} SE), "
                f"categories 0 and 1 jointly p = {pair_test.p_value:.2g}")


def check_server(redis_url: str, log_lines: Sequence[str] = (),
                 cluster: bool = False) -> CheckResult:
    """What a collector holds: every Redis key, value and expiry, and the given log lines,
    scanned for anything that identifies a batch's content or times a write more finely
    than the hour (``deniable.audit.privacy_scan``)."""
    from deniable.audit.privacy_scan import scan  # needs redis: only when asked for
    started = time.monotonic()
    findings = scan(redis_url, log_lines, cluster=cluster)
    detail = ("; ".join(f"{f.kind} {f.where}: {f.problem}" for f in findings[:5])
              + (f" (and {len(findings) - 5} more)" if len(findings) > 5 else "")
              if findings else f"nothing identifies a batch or times a write finer than the "
                               f"hour ({len(log_lines):,} log lines scanned)")
    return CheckResult("server", "redis scan", not findings, detail,
                       seconds=time.monotonic() - started)


def run_audit(subjects: Sequence[Subject], **options: Any) -> list[CheckResult]:
    """Run every check on ``subjects``; ``options`` are ``Audit``'s arguments."""
    return Audit(**options).run(subjects)
