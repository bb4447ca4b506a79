"""The averaging attack: a device reports the same true value every day for a year.

With fresh coins every day, averaging one device's reports recovers its value. With memoized
answers every report repeats the first, so no attacker, however many reports it averages, can
beat the Bayes-optimal accuracy of ONE report: for a uniform prior, (P1 + 1 - Q) / 2, which is
3/4 for the default rr:1/2:1/2.
"""
from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from fractions import Fraction

import pytest

from deniable.client import RandomizedResponse
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.state import IN_MEMORY
from deniable.client.mechanism import DEFAULT

DEVICES = 2_000
DAYS = 365
Z = 5.5
"""Standard errors of an accuracy over DEVICES: an exact binomial tail of at most 1.1e-7 per
test, with two checks (4 SE failed 6.4e-5 of runs per check). A long-run leak is still seen:
5/6 against 3/4 is 8.6 SE, 1 against 5/6 is 20 SE."""


def one_report_bound(mechanism: RandomizedResponse) -> Fraction:
    """Bayes-optimal accuracy of guessing a uniform true bit from one report."""
    return (mechanism.p_yes_given_yes + 1 - mechanism.p_yes_given_no) / 2


def averaging_attacker(reports: list[int], mechanism: RandomizedResponse) -> int:
    """Guess 1 when the share of ones is nearer P1 than Q."""
    threshold = (mechanism.p_yes_given_yes + mechanism.p_yes_given_no) / 2
    return int(Fraction(sum(reports), len(reports)) > threshold)


def run_attack(report_day: Callable[[int, int], int]) -> tuple[float, float, list[list[int]]]:
    """The attacker's accuracy over DEVICES devices whose true bits are uniform (secure draws):
    averaging all DAYS reports, and from the first report alone; and every device's reports.
    """
    correct = first_day = 0
    histories = []
    for device in range(DEVICES):
        true_bit = secrets.randbits(1)
        reports = [report_day(device, true_bit) for _ in range(DAYS)]
        histories.append(reports)
        correct += averaging_attacker(reports, DEFAULT) == true_bit
        first_day += averaging_attacker(reports[:1], DEFAULT) == true_bit
    return correct / DEVICES, first_day / DEVICES, histories


def standard_error(p: float) -> float:
    return math.sqrt(p * (1 - p) / DEVICES)


def test_one_report_bound_of_the_default_is_three_quarters() -> None:
    assert one_report_bound(DEFAULT) == Fraction(3, 4)


@pytest.mark.slow
def test_fresh_coins_every_day_give_the_value_away() -> None:
    accuracy, first_day, _ = run_attack(lambda device, true_bit: DEFAULT.perturb(true_bit))
    assert accuracy >= 0.99
    assert abs(first_day - 0.75) <= Z * standard_error(0.75)


@pytest.mark.slow
def test_memoized_reports_keep_the_attacker_at_the_one_report_bound() -> None:
    guards = [LongitudinalGuard(IN_MEMORY) for _ in range(DEVICES)]  # one secret per device
    accuracy, first_day, histories = run_attack(
        lambda device, true_bit: guards[device].perturb("feature_x_enabled", DEFAULT, true_bit))
    # Every report repeats the first: the 365 days carry exactly one report's information.
    assert all(len(set(h)) == 1 for h in histories)
    assert accuracy == first_day
    bound = float(one_report_bound(DEFAULT))
    assert abs(accuracy - bound) <= Z * standard_error(bound)
    assert accuracy < 0.99


@pytest.mark.slow
def test_with_an_instantaneous_layer_the_attacker_reaches_the_long_run_bound_only() -> None:
    # One report follows rr:1/2:1/2 (bound 3/4). Averaging strips the instantaneous layer and
    # recovers the memoized bit, no more: the memo layer rr:2/3:1/2's bound, 5/6 (epsilon
    # ln 5, the long-run epsilon).
    irr = RandomizedResponse.from_id("rr:3/4:1/2")
    guards = [LongitudinalGuard(IN_MEMORY, irr={"m": irr}) for _ in range(DEVICES)]
    memo = guards[0].layers("m", DEFAULT).memo
    assert memo is not None and one_report_bound(memo) == Fraction(5, 6)
    accuracy, first_day, histories = run_attack(
        lambda device, true_bit: guards[device].perturb("m", DEFAULT, true_bit))
    assert all(len(set(h)) == 2 for h in histories)  # reports vary from day to day
    assert abs(first_day - 0.75) <= Z * standard_error(0.75)  # one report: the wire's bound
    bound = float(one_report_bound(memo))
    assert abs(accuracy - bound) <= Z * standard_error(bound)
