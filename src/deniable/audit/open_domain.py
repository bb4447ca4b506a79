"""The audit of the open-domain mechanism (``od:``, ``deniable.client.open_domain``).

A report of an open metric is one cell (level, seed, bucket): the device draws a level and a
hash seed uniformly, independently of its string, hashes the string's prefix of that level to
its true bucket, and reports a bucket through GRR over g (p on the true one, q on each other).
So P(cell | value) = P(level, seed) (p if bucket = h_{level,seed}(prefix) else q), and the
worst case over two strings and every cell is p / q: epsilon = ln(p (g - 1) / (1 - p)).

- ``check_open_exact``: that claim, by enumeration, in exact Fractions. The sketch's
  ``draw_hash`` (its level and seed choice, which takes no value) is run on every sequence of
  draws it can make (each ``below(n)`` at its n equally likely values: the client's rejection
  sampler is exact, so the enumeration is finite and exact for any family; a raw word of k
  bits at its 2**k values); ``perturb_padded`` is replayed on each sequence for every audited
  string (its later draws, the GRR's, answered with zeros: the truth is kept), and must report
  that path's level and seed with the string's documented hash as its bucket. The exact
  P(cell | string) then follows for each string, and its largest ratio over every cell and
  pair of strings is the exact epsilon: it must equal what the mechanism claims, and lie
  within the ceiling (the declared epsilon, or the client's default ln 9). The GRR's coin is
  enumerated over every byte it can read, as for a categorical metric.
- ``check_open_reports``: ``trials`` reports of each audited string from the real client (a
  ``LongitudinalGuard`` through the open kind's ``answer``, the call ``Reporter.report``
  makes), against the exact distribution the id defines: an ``epsilon`` lower bound (events:
  the report is one string's bucket where the two differ, the other's, or neither) and a
  ``distribution`` check (chi-square tests of (level, bucket offset) and (seed, hit), all of
  them together at a false-failure rate of 1e-6).
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import cast

from deniable.analysis.bounds import ChiSquareTest, chi_square_test, epsilon_lower_bound
from deniable.audit.exactness import DrawPath, coin_problems, enumerate_draws, replay
from deniable.audit.results import CheckResult
from deniable.client.kinds import MetricSpec
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.mechanism import ROUNDING_SLACK, log_ratio_exceeds
from deniable.client.metrics import DEFAULT_MAX_EPSILON
from deniable.client.open_domain import OpenDomainSketch, bucket, normalise
from deniable.client.randomness import RandomBits
from deniable.client.state import IN_MEMORY

OPEN_CHI_SQUARE_ALPHA = 1e-6
"""False-failure rate of one whole ``distribution`` check of an open metric: every chi-square
test of every audited string together (Bonferroni)."""
MAX_ENUMERATED_PATHS = 1 << 18
"""Runs of ``draw_hash`` the exact check may make: levels x seeds + levels + 1 (16,401 for
16 levels x 1,024 seeds, the default; 64 x 4,096 still fits). A larger family is enumerated
heaviest paths first and the rest left to the distribution check (the detail says how much)."""
_MIN_EXPECTED = 5.0  # chi-square cells expect at least this many reports (pooled otherwise)

Progress = Callable[[str, int], None]


def _no_progress(label: str, done: int) -> None:
    pass


@dataclass(frozen=True)
class OpenSubject:
    """An open metric under audit.

    Attributes:
        name / metric: the label in the results, and the metric name reported under.
        mechanism: the ``od:`` sketch the device reports with.
        spec: the metric's declaration (its kind's ``encode`` and ``answer`` are the client's).
        ceiling: the most one report may lose, in nats: the declared epsilon, or the client's
            default ceiling (``DEFAULT_MAX_EPSILON``, ln 9) if none is declared.
        ceiling_source: where the ceiling comes from, in words.
    """

    name: str
    metric: str
    mechanism: OpenDomainSketch
    spec: MetricSpec
    ceiling: float = DEFAULT_MAX_EPSILON
    ceiling_source: str = "the client's default ceiling"

    @classmethod
    def of(cls, name: str, spec: MetricSpec, epsilon: float | None = None) -> OpenSubject:
        """The subject of an open metric's spec; ``epsilon``: the ceiling it declares."""
        assert isinstance(spec.mechanism, OpenDomainSketch)
        if epsilon is None:
            return cls(name, name, spec.mechanism, spec)
        return cls(name, name, spec.mechanism, spec, float(epsilon), "declared")

    def inputs(self) -> list[str]:
        """The strings audited: "a" and "b" (their buckets differ at every level, in about
        (g - 1) / g of the seeds) and, if it fits, a full-length string sharing "a"'s first
        byte (the same bucket at level 0, different ones after)."""
        values = ["a", "b"]
        if self.mechanism.max_bytes > 1:
            values.append("a" * (self.mechanism.max_bytes - 1) + "b")
        return values


# -- exact: enumeration ---------------------------------------------------------------------

Distribution = dict[tuple[int, int], dict[int, Fraction]]
"""(level, seed) -> the true bucket the GRR is given -> probability (one audited string)."""


def _replayed(mechanism: OpenDomainSketch, reference: OpenDomainSketch, padded: bytes,
              paths: list[DrawPath]) -> tuple[Distribution, list[str]]:
    """``perturb_padded`` on every path ``draw_hash`` read (then zeros: the GRR keeps the
    truth): the distribution of (level, seed, true bucket), and how it differs from the
    path's (level, seed) and the documented hash."""
    dist: Distribution = defaultdict(dict)
    wrong: list[str] = []
    for path in paths:
        level, seed = cast(tuple[int, int], path.outcome)  # checked by check_open_exact
        try:
            cell = replay(lambda source: mechanism.perturb_padded(padded, source), path.draws)
            got = reference.split_cell(cast(int, cell))
        except Exception as exc:  # any failure is a finding, not a crash
            return dist, [f"perturb_padded does not make the draws draw_hash makes ({exc})"]
        want = (level, seed, bucket(padded[:reference.prefix_length(level)], level, seed,
                                    reference.g))
        if got != want and len(wrong) < 3:
            wrong.append(f"reports (level, seed, bucket) {got} where draw_hash drew "
                         f"({level}, {seed}) and the hash gives bucket {want[2]}")
        row = dist[got[:2]]
        row[got[2]] = row.get(got[2], Fraction(0)) + path.probability
    return dist, wrong


def _pair_ratio(a: Distribution, b: Distribution, p: Fraction, q: Fraction, g: int
                ) -> Fraction | None:
    """The largest P(cell | one string) / P(cell | the other), both ways, over every cell;
    None for an infinite ratio (a cell one string can give and the other cannot).

    P(level, seed, y) = q W + (p - q) w_y, with W the (level, seed)'s probability and w_y
    that of true bucket y. Cells are grouped by the shape of their two rows (the ratio
    depends only on the weights and which buckets coincide)."""
    worst = Fraction(1)
    seen: set[tuple[object, ...]] = set()
    for key in set(a) | set(b):
        row_a, row_b = a.get(key, {}), b.get(key, {})
        buckets = sorted(set(row_a) | set(row_b))
        shape = (tuple((row_a.get(y), row_b.get(y)) for y in buckets), len(buckets) < g)
        if shape in seen:
            continue
        seen.add(shape)
        total_a, total_b = sum(row_a.values(), Fraction(0)), sum(row_b.values(), Fraction(0))
        weights = [(row_a.get(y, Fraction(0)), row_b.get(y, Fraction(0))) for y in buckets]
        if len(buckets) < g:  # a bucket neither string's truth is: q W under both
            weights.append((Fraction(0), Fraction(0)))
        for w_a, w_b in weights:
            pa, pb = q * total_a + (p - q) * w_a, q * total_b + (p - q) * w_b
            if (pa == 0) != (pb == 0):
                return None
            if pa:
                worst = max(worst, pa / pb, pb / pa)
    return worst


def _ratio_text(ratio: Fraction) -> str:
    exact = str(ratio)
    return exact if len(exact) <= 24 else f"{float(ratio):.10g} (exact: {exact})"


def check_open_exact(subject: OpenSubject,
                     max_paths: int = MAX_ENUMERATED_PATHS) -> CheckResult:
    """The claimed epsilon is the exact worst case of the report's distribution, found by
    enumerating the level and seed choice over every draw and replaying the sampler
    (module docstring), and it lies within the subject's ceiling."""
    started = time.monotonic()
    mechanism = subject.mechanism
    problems: list[str] = []
    reference = OpenDomainSketch.from_id(mechanism.id)  # the id's own definition
    fields = ("max_bytes", "step", "seeds", "g", "p")
    differ = [f for f in fields if getattr(mechanism, f) != getattr(reference, f)]
    if differ:
        problems.append(f"its {', '.join(differ)} differ from its id's")
    levels, seeds, g, p, q = (reference.levels, reference.seeds, reference.g, reference.p,
                              reference.q)
    paths, unfinished = enumerate_draws(mechanism.draw_hash, max_paths)
    mass: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
    for path in paths:
        outcome = path.outcome
        if not (isinstance(outcome, tuple) and len(outcome) == 2
                and all(isinstance(x, int) for x in outcome)
                and 0 <= outcome[0] < levels and 0 <= outcome[1] < seeds):
            return CheckResult(subject.name, "exact", False,
                               f"{mechanism.id}: draw_hash gave {outcome!r}, not a (level, "
                               f"seed) in range", claim=mechanism.epsilon,
                               seconds=time.monotonic() - started, mechanism=mechanism.id)
        mass[outcome] += path.probability
    uniform = Fraction(1, levels * seeds)
    dists: list[Distribution] = []
    for value in subject.inputs():
        padded = normalise(value, reference.max_bytes)
        dist, wrong = _replayed(mechanism, reference, padded, paths)
        problems.extend(f"for {value!r}, {text}" for text in wrong)
        dists.append(dist)
        if not unfinished and not wrong:
            for level in range(levels):  # the client's stated P(cell | value), spot-checked
                for seed in range(min(seeds, 4)):
                    true_bucket = next(iter(dist[(level, seed)]))
                    for y in {true_bucket, (true_bucket + 1) % g}:
                        cell = (level * seeds + seed) * g + y
                        exact = uniform * (p if y == true_bucket else q)
                        if mechanism.report_probability(padded, cell) != exact:
                            problems.append(f"report_probability({value!r}, {cell}) is "
                                            f"{mechanism.report_probability(padded, cell)}, "
                                            f"the enumeration gives {exact}")
    found, noted = coin_problems(p, g)
    problems.extend(f"its GRR: {text}" for text in found)
    return judge_open_exact(subject, OpenEnumeration(mass, unfinished, dists, len(paths)),
                            problems, (mechanism.likelihood_ratio, mechanism.epsilon),
                            f"GRR {noted[0]}", started)


@dataclass(frozen=True)
class OpenEnumeration:
    """What an enumeration of a client's open sketch found, for ``judge_open_exact``.

    Attributes:
        mass: (level, seed) -> the probability the sampler drew it.
        unfinished: the probability of the draws not followed to the end.
        dists: per audited string, (level, seed) -> true bucket -> probability.
        paths: the sequences of draws followed.
    """

    mass: dict[tuple[int, int], Fraction]
    unfinished: Fraction
    dists: list[Distribution]
    paths: int


def judge_open_exact(subject: OpenSubject, found: OpenEnumeration, problems: list[str],
                     claimed: tuple[Fraction, float], coin_note: str,
                     started: float) -> CheckResult:
    """The ``exact`` verdict of an open metric from an enumeration of either client: the
    (level, seed) choice is uniform, the exact worst-case ratio over every cell and pair of
    strings is the one the client claims (``claimed``: its likelihood ratio and epsilon), and
    lies within the subject's ceiling. ``problems``: what the caller already found."""
    mechanism = subject.mechanism
    reference = OpenDomainSketch.from_id(mechanism.id)
    levels, seeds, g, p, q = (reference.levels, reference.seeds, reference.g, reference.p,
                              reference.q)
    uniform = Fraction(1, levels * seeds)
    mass, unfinished, dists = found.mass, found.unfinished, found.dists
    uneven = [key for key, w in mass.items() if not w <= uniform <= w + unfinished]
    if uneven or (not unfinished and len(mass) != levels * seeds):
        problems.insert(0, f"the (level, seed) choice is not uniform: {len(mass):,} of "
                           f"{levels * seeds:,} pairs drawn, {len(uneven):,} off "
                           f"1/{levels * seeds}")
    ratios = [_pair_ratio(dists[i], dists[j], p, q, g)
              for i in range(len(dists)) for j in range(i + 1, len(dists))]
    ratio = None if None in ratios else max(r for r in ratios if r is not None)
    exact_epsilon = math.inf if ratio is None else math.log(ratio)
    claimed_ratio, claimed_epsilon = claimed
    if ratio is None:
        problems.append("a cell one audited string can report and another cannot: epsilon "
                        "is infinite")
    elif claimed_ratio != ratio:
        problems.append(f"claims likelihood ratio {_ratio_text(claimed_ratio)}, "
                        f"the enumeration gives {_ratio_text(ratio)}")
    if ratio is not None and not math.isclose(claimed_epsilon, exact_epsilon, rel_tol=1e-12):
        problems.append(f"claims epsilon {claimed_epsilon}, the enumeration gives "
                        f"{exact_epsilon}")
    if ratio is not None and log_ratio_exceeds(
            ratio, Fraction(subject.ceiling) * (1 + ROUNDING_SLACK)):
        problems.append(f"exact epsilon {exact_epsilon:.6f} exceeds the ceiling "
                        f"{subject.ceiling:.6f} ({subject.ceiling_source})")
    if problems:
        detail = f"{mechanism.id}: " + "; ".join(problems)
    else:
        assert ratio is not None
        coverage = ("every draw" if not unfinished else
                    f"all but {float(unfinished):.1e} of the draws (left to the distribution "
                    f"check)")
        detail = (f"{mechanism.id}: (level, seed) uniform over {levels} x {seeds:,} and the "
                  f"same for {len(dists)} strings, over {coverage} ({found.paths:,} paths); "
                  f"exact epsilon ln({_ratio_text(ratio)}) = {exact_epsilon:.6f} <= "
                  f"{subject.ceiling:.6f} ({subject.ceiling_source}); {coin_note}")
    return CheckResult(subject.name, "exact", not problems, detail, claim=claimed_epsilon,
                       bound=exact_epsilon, seconds=time.monotonic() - started,
                       mechanism=mechanism.id)


# -- the real client's reports --------------------------------------------------------------

def client_reports(subject: OpenSubject, value: str, n: int, rng: RandomBits | None = None,
                   progress: Progress = _no_progress) -> list[int]:
    """``n`` reports of ``value`` as ``Reporter.report`` makes them: the spec's ``encode``,
    then the open kind's ``answer`` on a new device's privacy layer (fresh coins, the secure
    system source unless ``rng`` is given; the ceiling lifted, unbudgeted)."""
    guard = LongitudinalGuard(IN_MEMORY, rng=rng, max_metric_epsilon=math.inf,
                              warn_in_memory=False)
    spec, metric, mechanism = subject.spec, subject.metric, subject.mechanism
    answer, encoded = spec.kind_object.answer, spec.encode(value)
    label = f"{subject.name}: {value[:12]!r}"
    chunk = max(1, n // 100)
    out: list[int] = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        out.extend(answer(guard, metric, mechanism, encoded) for _ in range(size))
        progress(label, size)
    return out


class _Buckets:
    """h_{level,seed}(prefix) of one string under the id's hash, computed once per pair."""

    def __init__(self, reference: OpenDomainSketch, value: str) -> None:
        self._reference = reference
        self._padded = normalise(value, reference.max_bytes)
        self._cache: dict[tuple[int, int], int] = {}

    def __call__(self, level: int, seed: int) -> int:
        key = (level, seed)
        found = self._cache.get(key)
        if found is None:
            prefix = self._padded[:self._reference.prefix_length(level)]
            found = self._cache[key] = bucket(prefix, level, seed, self._reference.g)
        return found


def _pooled(cells: list[tuple[str, float, int]], n: int
            ) -> tuple[dict[str, int], dict[str, float]]:
    """Consecutive cells (name, probability, count) merged until each expects >= 5."""
    observed: dict[str, int] = {}
    expected: dict[str, float] = {}
    names: list[str] = []
    mass, count = 0.0, 0
    for name, probability, seen in cells:
        names.append(name)
        mass += probability
        count += seen
        if n * mass >= _MIN_EXPECTED:
            key = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
            observed[key], expected[key] = count, mass
            names, mass, count = [], 0.0, 0
    if names:  # the short tail joins the last group
        if not expected:
            key = f"{names[0]}..{names[-1]}"
            observed[key], expected[key] = count, mass
        else:
            last = next(reversed(expected))
            observed[last] += count
            expected[last] += mass
    return observed, expected


def _fit(reference: OpenDomainSketch, value: str, outputs: list[int]
         ) -> list[tuple[str, ChiSquareTest]]:
    """Chi-square tests of one string's reports against the id's exact distribution:
    (level, offset of the reported bucket from the true one) over levels x g cells, and
    (seed, whether the report hit the true bucket) over seeds x 2 (pooled to >= 5 expected)."""
    levels, seeds, g = reference.levels, reference.seeds, reference.g
    p, q = float(reference.p), float(reference.q)
    true_bucket = _Buckets(reference, value)
    by_level = [[0] * g for _ in range(levels)]
    by_seed = [[0, 0] for _ in range(seeds)]
    for cell in outputs:
        level, seed, y = reference.split_cell(cell)
        offset = (y - true_bucket(level, seed)) % g
        by_level[level][offset] += 1
        by_seed[seed][offset == 0] += 1
    n = len(outputs)
    level_cells = [(f"level {level} offset {offset}", (p if offset == 0 else q) / levels,
                    by_level[level][offset]) for level in range(levels) for offset in range(g)]
    seed_cells = [(f"seed {seed} {'hit' if hit else 'miss'}",
                   (p if hit else 1 - p) / seeds, by_seed[seed][hit])
                  for hit in (1, 0) for seed in range(seeds)]
    return [(f"(level, offset) of {value[:12]!r}", chi_square_test(*_pooled(level_cells, n))),
            (f"(seed, hit) of {value[:12]!r}", chi_square_test(*_pooled(seed_cells, n)))]


def _pair_events(reference: OpenDomainSketch, first: _Buckets, second: _Buckets,
                 outputs: list[int]) -> dict[str, int]:
    """How often the report was the first string's bucket where the two differ (probability
    p f under the first string, q f under the second: the ratio p / q), the second's, or
    neither."""
    ours = theirs = 0
    for cell in outputs:
        level, seed, y = reference.split_cell(cell)
        a, b = first(level, seed), second(level, seed)
        if a != b:
            ours += y == a
            theirs += y == b
    return {"report = a's bucket (buckets differ)": ours,
            "report = b's bucket (buckets differ)": theirs,
            "report = neither": len(outputs) - ours - theirs}


OpenReports = Callable[[OpenSubject, str, int, Progress], list[int]]
"""reports(subject, string, n, progress): n reports (cells) of one string by a client."""


def check_open_reports(subject: OpenSubject, trials: int, confidence: float,
                       rng: RandomBits | None = None, progress: Progress = _no_progress,
                       reports: OpenReports | None = None) -> list[CheckResult]:
    """The ``epsilon`` and ``distribution`` checks of an open metric, from ``trials`` reports
    of each audited string by the real client (module docstring): the Python client's, or
    those ``reports`` draws (the web client's, ``deniable.audit.web``)."""
    started = time.monotonic()
    mechanism = subject.mechanism
    reference = OpenDomainSketch.from_id(mechanism.id)
    values = subject.inputs()
    samples = {v: client_reports(subject, v, trials, rng, progress) if reports is None
               else reports(subject, v, trials, progress) for v in values}
    first, second = (_Buckets(reference, v) for v in values[:2])
    events = [_pair_events(reference, first, second, samples[v]) for v in values[:2]]
    bound = epsilon_lower_bound(events[0], trials, events[1], trials, confidence)
    claim = mechanism.epsilon
    epsilon = CheckResult(
        subject.name, "epsilon", claim >= bound.epsilon,
        f"{trials:,} reports of a = {values[0]!r} and b = {values[1]!r}; most distinguishing "
        f"output: {bound.event}", claim, bound.epsilon, time.monotonic() - started,
        mechanism=mechanism.id)
    tests = [test for v in values for test in _fit(reference, v, samples[v])]
    alpha = OPEN_CHI_SQUARE_ALPHA / len(tests)
    failed = [(name, t) for name, t in tests if t.p_value < alpha]
    worst_name, worst = min(tests, key=lambda item: item[1].p_value)
    detail = (f"{len(tests)} chi-square tests ({trials:,} reports of each of {len(values)} "
              f"strings) at {alpha:.1e} each: "
              + ("; ".join(f"{name} p = {t.p_value:.2g} (worst cell {t.worst[0]}: "
                           f"{t.worst[1]:+.1f} SE)" for name, t in failed) if failed else
                 f"all fit; smallest p = {worst.p_value:.2g} ({worst_name}, {worst.dof} dof)"))
    distribution = CheckResult(subject.name, "distribution", not failed, detail,
                               seconds=time.monotonic() - started, mechanism=mechanism.id)
    return [epsilon, distribution]
