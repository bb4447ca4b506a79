"""Categorical, histogram and numeric metrics through the real client path: Reporter ->
privacy layer -> queue -> upload (to a recording collector), read back from what was POSTed.

For each mechanism (GRR, OUE, 1BitMean):
- the output distribution of fresh reports matches the mechanism, cell by cell;
- the epsilon is tight on both sides: no output's empirical likelihood ratio is above e^eps
  beyond noise, the worst one reaches it, and a claim slightly below eps is refuted;
- an averaging attack gains nothing on memoized reports: k reports of one value are k copies
  of one report, while fresh reports of the same value give the value away.

Statistics: every check is at Z = 6 standard errors, a false failure below 2e-9 per cell;
with at most 16 cells per check and a few checks per test, below 1e-7 per test.
"""
from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from itertools import product

import pytest

from deniable.client import (
    BudgetExceededError,
    Delivery,
    InvalidParameterError,
    Privacy,
    Reporter,
    Storage,
)
from deniable.client.budget import Budget
from deniable.client.categorical import KaryRandomizedResponse, UnaryEncoding, domain_tag
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import fraction_text
from deniable.client.numeric import BitMean
from tests.servers import recording_collector

Z = 6.0
OS = ["android", "ios", "windows", "other"]
COLOURS = ["red", "green", "blue"]
EDGES = [0, 1, 2, 5, 10]
GRR = MetricSpec.build("categorical", categories=OS, mechanism=f"grr:4:1/2:{domain_tag(OS)}")
OUE = MetricSpec.build("categorical", categories=COLOURS,
                       mechanism=f"oue:3:1/4:{domain_tag(COLOURS)}")
HIST = MetricSpec.build("histogram", edges=EDGES, mechanism="grr:4:1/2:" + domain_tag(
    [fraction_text(Fraction(e)) for e in EDGES]))
LOAD = MetricSpec.build("numeric", lower=0, upper=100, mechanism="bm:1/4:0:100")
CLAMPED = MetricSpec.build("numeric", lower=0, upper=100, mechanism="bm:1/4:0:100", clamp=True)
METRICS = {"os": GRR, "colour": OUE, "crashes": HIST, "load": LOAD, "load_clamped": CLAMPED,
           "dark_mode": "rr:1/2:1/2"}
LN3 = math.log(3)


@contextmanager
def reporter(**options: object) -> Iterator[tuple[Reporter, list[bytes]]]:
    """A Reporter with METRICS declared, uploading to a recording collector; yields it and
    the POSTed bodies (complete once the block ends)."""
    with recording_collector({"metrics": []}) as (url, recorder):
        privacy = Privacy(**{"one_per_period": False, **options})  # type: ignore[arg-type]
        with Reporter(url, METRICS, storage=Storage(privacy_dir=":memory:"),
                      delivery=Delivery(batch_size=1000), privacy=privacy) as client:
            yield client, recorder.bodies
            assert client.flush(60)


def payloads(bodies: list[bytes], metric: str) -> list[int | str]:
    """The perturbed payload (bit, index or bits) of every report of ``metric`` sent."""
    out = []
    for body in bodies:
        for report in json.loads(body)["reports"]:
            if report["metric"] == metric:
                out.append(next(report[k] for k in ("bit", "index", "bits") if k in report))
    return out


def distribution(mechanism: object, value: int | Fraction) -> dict[int | str, Fraction]:
    """The exact probability of every payload the mechanism can send for ``value``."""
    if isinstance(mechanism, KaryRandomizedResponse):
        return {k: mechanism.p if k == value else mechanism.q for k in range(mechanism.d)}
    if isinstance(mechanism, UnaryEncoding):
        out = {}
        for bits in product((0, 1), repeat=mechanism.d):
            p = Fraction(1)
            for i, bit in enumerate(bits):
                one = mechanism.p if i == value else mechanism.q
                p *= one if bit else 1 - one
            out[mechanism.encode_bits(sum(b << i for i, b in enumerate(bits)))] = p
        return out
    assert isinstance(mechanism, BitMean)
    p1 = mechanism.p_one(Fraction(value))
    return {1: p1, 0: 1 - p1}


def assert_follows(sent: list[int | str], expected: dict[int | str, Fraction]) -> None:
    """Every cell's share within Z standard errors of its exact probability."""
    n, counts = len(sent), Counter(sent)
    assert set(counts) <= set(expected)
    for payload, p in expected.items():
        se = math.sqrt(float(p * (1 - p)) / n)
        assert abs(counts[payload] / n - float(p)) <= Z * se, (payload, counts[payload], n, p)


def log_ratios(a: list[int | str], b: list[int | str]) -> dict[int | str, tuple[float, float]]:
    """Per output: the empirical ln P(o | a) / P(o | b) and its standard error (delta method)."""
    ca, cb = Counter(a), Counter(b)
    out = {}
    for o in set(ca) | set(cb):
        pa, pb = ca[o] / len(a), cb[o] / len(b)
        assert pa > 0 and pb > 0, "every output has positive probability under both values"
        se = math.sqrt((1 - pa) / (len(a) * pa) + (1 - pb) / (len(b) * pb))
        out[o] = (math.log(pa / pb), se)
    return out


def epsilon_holds(ratios: dict[int | str, tuple[float, float]], claim: float) -> bool:
    """No output's likelihood ratio is above e^claim beyond Z standard errors."""
    return all(abs(r) <= claim + Z * se for r, se in ratios.values())


# -- (a) and (b): fresh reports, per mechanism ----------------------------------------------

FRESH_CASES = {
    # metric: (true values to compare, n reports of each)
    "os": (("android", "ios"), 40_000),
    "colour": (("red", "green"), 30_000),
    "load": ((100, 0), 40_000),
}


Sent = dict[str, dict[object, list[int | str]]]
"""metric -> true value -> the payloads sent for it."""


@pytest.fixture(scope="module")
def fresh_reports() -> Sent:
    """n fresh reports of each compared value of each metric, as the collector received them."""
    sent: dict[str, dict[object, list[int | str]]] = {}
    with recording_collector({"metrics": []}) as (url, recorder):
        for metric, (values, n) in FRESH_CASES.items():
            sent[metric] = {}
            for value in values:
                recorder.bodies.clear()
                with Reporter(url, METRICS, storage=Storage(privacy_dir=":memory:"),
                              delivery=Delivery(batch_size=1000),
                              privacy=Privacy(one_per_period=False,
                                              fresh=set(FRESH_CASES))) as client:
                    for _ in range(n):
                        client.report(metric, value)
                    assert client.flush(60)
                sent[metric][value] = payloads(recorder.bodies, metric)
                assert len(sent[metric][value]) == n
    return sent


@pytest.mark.slow
@pytest.mark.parametrize("metric", list(FRESH_CASES))
def test_fresh_reports_follow_the_mechanism_cell_by_cell(fresh_reports: Sent, metric: str
                                                         ) -> None:
    spec = METRICS[metric]
    assert isinstance(spec, MetricSpec)
    for value, sent in fresh_reports[metric].items():
        assert_follows(sent, distribution(spec.mechanism, spec.encode(value)))


@pytest.mark.slow
@pytest.mark.parametrize("metric", list(FRESH_CASES))
def test_the_epsilon_is_tight_on_both_sides(fresh_reports: Sent, metric: str) -> None:
    spec = METRICS[metric]
    assert isinstance(spec, MetricSpec)
    epsilon = spec.mechanism.epsilon
    assert epsilon == pytest.approx(LN3, rel=1e-12)
    first, second = (fresh_reports[metric][v] for v in FRESH_CASES[metric][0])
    ratios = log_ratios(first, second)
    assert epsilon_holds(ratios, epsilon)                  # never above e^eps beyond noise
    worst, se = max(ratios.values())
    assert worst >= epsilon - Z * se                        # and e^eps is reached
    assert not epsilon_holds(ratios, epsilon - 2 * Z * se)  # a smaller claim is refuted


@pytest.mark.slow
def test_a_histogram_value_is_reported_as_its_bucket() -> None:
    buckets = {0: 0, 0.5: 0, 1: 1, 4.99: 2, 5: 3, 10: 3}  # [0,1) [1,2) [2,5) [5,10]
    assert {value: HIST.encode(value) for value in buckets} == buckets
    with reporter(fresh={"crashes"}) as (client, bodies):
        for _ in range(20_000):
            client.report("crashes", 3)
    assert_follows(payloads(bodies, "crashes"), distribution(HIST.mechanism, 2))


# -- (c) the averaging attack -----------------------------------------------------------------

def majority(reports: list[int | str]) -> int | str:
    return Counter(reports).most_common(1)[0][0]


@pytest.mark.slow
@pytest.mark.parametrize("metric, value", [("os", "windows"), ("colour", "blue"),
                                           ("crashes", 7), ("load", 37.5)])
def test_memoized_reports_of_one_value_are_copies_of_one_report(metric: str, value: object
                                                                ) -> None:
    with reporter() as (client, bodies):
        for _ in range(200):
            client.report(metric, value)
        loss = client.privacy_loss(metric)
    sent = payloads(bodies, metric)
    assert len(sent) == 200 and len(set(sent)) == 1  # k reports = one report, repeated
    assert loss.long_run_epsilon == loss.one_report_epsilon == pytest.approx(LN3, rel=1e-12)
    assert loss.after(200) == loss.after(1)


@pytest.mark.slow
def test_averaging_k_memoized_reports_guesses_no_better_than_one_and_fresh_ones_do() -> None:
    """Per device, an attacker takes the most frequent of its k reports as the true category.
    Memoized, that is the device's one permanent answer: right with probability p = 1/2 (GRR,
    d = 4, eps = ln 3). Fresh, the k reports vote the truth in nearly every time."""
    devices, k = 150, 25
    hits = {"memoized": 0, "fresh": 0}
    with recording_collector({"metrics": []}) as (url, recorder):
        for mode in hits:
            for _ in range(devices):  # a Reporter with its own device secret each
                recorder.bodies.clear()
                with Reporter(url, {"os": GRR}, storage=Storage(privacy_dir=":memory:"),
                              privacy=Privacy(one_per_period=False,
                                              fresh={"os"} if mode == "fresh" else ())) as client:
                    for _ in range(k):
                        client.report("os", "ios")
                    assert client.flush(10)
                sent = payloads(recorder.bodies, "os")
                assert len(sent) == k
                if mode == "memoized":
                    assert len(set(sent)) == 1
                hits[mode] += majority(sent) == 1
    p = float(GRR.mechanism.p)
    bound = p + Z * math.sqrt(p * (1 - p) / devices)
    assert hits["memoized"] / devices <= bound      # no better than one report
    assert hits["memoized"] / devices >= p - Z * math.sqrt(p * (1 - p) / devices)
    assert hits["fresh"] / devices > bound           # while fresh reports average out


@pytest.mark.slow
def test_a_slowly_changing_number_stays_memoized_through_alpha_point_rounding() -> None:
    """A load drifting from 38 to 40 over 30 days stays inside one grid cell (width 100/32 =
    3.125): its reports use at most two grid points, so at most two memoized answers, each paid
    once. A budget of two answers is never exceeded; the same drift reported fresh is refused
    at the third report."""
    days = [38 + 2 * i / 29 for i in range(30)]
    assert int(min(days) * 32 / 100) == int(max(days) * 32 / 100)  # one cell: [37.5, 40.625)
    budget = {"load": Budget.for_reports(2, LOAD.mechanism.epsilon)}
    with reporter(budgets=budget) as (client, bodies):
        for value in days:
            client.report("load", value)
    assert len(payloads(bodies, "load")) == 30
    with reporter(budgets=budget, fresh={"load"}) as (client, bodies):
        client.report("load", days[0])
        client.report("load", days[1])
        with pytest.raises(BudgetExceededError):
            client.report("load", days[2])
        assert client.stats().budget_refused == 1


@pytest.mark.slow
def test_memoized_categories_are_paid_once_each_and_fresh_reports_every_time() -> None:
    budget = {"os": Budget.for_reports(2, GRR.mechanism.epsilon)}
    with reporter(budgets=budget) as (client, bodies):
        for _ in range(10):
            client.report("os", "android")
            client.report("os", "ios")
        # A third category: a new answer to pay for, refused, so sent as the lowest paid
        # category's answer (android, index 0), free (issue 26: never silent for one value).
        client.report("os", "other")
        assert client.stats().budget_refused == 0
        assert client._guard.refused == 1  # the ledger counts the refusal
    sent = payloads(bodies, "os")
    assert len(sent) == 21 and sorted(sent) == sorted(sent[:20] + [sent[0]])
    with reporter(budgets=budget, fresh={"os"}) as (client, _):
        client.report("os", "android")
        client.report("os", "android")
        with pytest.raises(BudgetExceededError):
            client.report("os", "android")


# -- values checked at the call ----------------------------------------------------------------

BAD = [
    ("os", "beos", "declared categories"),          # unknown category
    ("os", 2, "declared categories"),               # wrong type: an index is not a label
    ("os", None, "declared categories"),
    ("crashes", 10.5, "does not declare clamp"),    # out of range
    ("crashes", -1, "does not declare clamp"),
    ("crashes", "3", "takes a number"),             # wrong type
    ("load", float("nan"), "finite"),
    ("load", float("inf"), "finite"),
    ("load", 100.0001, "does not declare clamp"),
    ("load", True, "takes a number"),               # a bool is not a number here
    ("load", "812.5", "takes a number"),
    ("load_clamped", float("nan"), "finite"),       # clamp never turns NaN into a number
]


@pytest.mark.slow
@pytest.mark.parametrize("metric, value, reason", BAD)
def test_bad_values_raise_at_the_call_are_never_queued_and_never_echoed(
        metric: str, value: object, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="deniable")
    with reporter() as (client, bodies):
        with pytest.raises(InvalidParameterError, match=reason) as info:
            client.report(metric, value)
        assert client.stats().queued == 0 and client.ledger() == {}
    assert bodies == []
    if isinstance(value, str) or (isinstance(value, float) and math.isfinite(value)):
        assert str(value) not in str(info.value)
        assert all(str(value) not in r.getMessage() for r in caplog.records)
    assert info.value.__context__ is None  # no chained message carries the value either


def test_clamping_only_where_the_metric_declares_it() -> None:
    two_answers = {"load_clamped": Budget.for_reports(2, CLAMPED.mechanism.epsilon)}
    with reporter(budgets=two_answers) as (client, bodies):
        for _ in range(5):
            client.report("load_clamped", 1e9)      # clamped to 100
            client.report("load_clamped", 100)
            client.report("load_clamped", -5)       # clamped to 0
        with pytest.raises(InvalidParameterError):
            client.report("load", 1e9)
    sent = payloads(bodies, "load_clamped")
    assert len(sent) == 15  # 1e9 is reported as 100 (one answer), -5 as 0 (the other)
    assert len(set(sent[0::3] + sent[1::3])) == 1 and len(set(sent[2::3])) == 1


def test_booleans_keep_their_path_and_wire_bytes() -> None:
    with reporter() as (client, bodies):
        client.report("dark_mode", True)
        with pytest.raises(InvalidParameterError, match="bool"):
            client.report("dark_mode", "android")
    (report,) = json.loads(bodies[0])["reports"]
    assert set(report) == {"metric", "mechanism", "bit"} and report["mechanism"] == "rr:1/2:1/2"


def test_an_instantaneous_layer_is_refused_for_other_kinds() -> None:
    with pytest.raises(InvalidParameterError, match="boolean metrics only"):
        Reporter("http://127.0.0.1:9", {"os": GRR}, storage=Storage(privacy_dir=":memory:"),
                 privacy=Privacy(irr={"os": "rr:3/4:1/2"}))
