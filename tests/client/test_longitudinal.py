"""LongitudinalGuard: every report follows the wire mechanism; the guarantees it states."""
from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import pytest

from deniable.client import InvalidParameterError, RandomizedResponse
from deniable.client.composition import compose
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.state import IN_MEMORY
from deniable.client.mechanism import DEFAULT

IRR = RandomizedResponse.from_id("rr:3/4:1/2")


def within(ones: int, n: int, p: Fraction) -> bool:
    # 5.5 SE: exact binomial tail <= 4.2e-8 per check, 2 checks: 7.5e-8 per test
    # (5 SE gave 1.17e-6 per test).
    return abs(ones / n - float(p)) <= 5.5 * math.sqrt(float(p * (1 - p)) / n)


@pytest.mark.slow
@pytest.mark.parametrize("irr", [None, IRR])
def test_one_report_per_device_follows_the_wire_mechanism_exactly(
        irr: RandomizedResponse | None) -> None:
    # Over devices (secrets) and instantaneous coins, a report is 1 with probability P1 / Q of
    # the wire mechanism: the collector debiases with it and needs to know nothing else.
    n = 10_000
    layers = {"m": irr} if irr else None
    ones_true = sum(LongitudinalGuard(IN_MEMORY, irr=layers).perturb("m", DEFAULT, True)
                    for _ in range(n))
    ones_false = sum(LongitudinalGuard(IN_MEMORY, irr=layers).perturb("m", DEFAULT, False)
                     for _ in range(n))
    assert within(ones_true, n, DEFAULT.p_yes_given_yes)
    assert within(ones_false, n, DEFAULT.p_yes_given_no)


def test_fresh_metrics_draw_new_coins_every_report() -> None:
    guard = LongitudinalGuard(IN_MEMORY, fresh={"f"})
    reports = [guard.perturb("f", DEFAULT, True) for _ in range(4_000)]
    assert within(sum(reports), 4_000, DEFAULT.p_yes_given_yes)
    assert guard.privacy_loss("f", DEFAULT).after(10) == 10 * DEFAULT.epsilon


def test_the_layers_of_each_mode() -> None:
    guard = LongitudinalGuard(IN_MEMORY, irr={"i": IRR}, fresh={"f"})
    assert guard.layers("m", DEFAULT).memo == DEFAULT
    assert guard.layers("f", DEFAULT).memo is None
    layers = guard.layers("i", DEFAULT)
    assert layers.memo is not None and layers.irr == IRR
    assert compose(layers.memo, IRR) == layers.wire == DEFAULT


def test_privacy_loss_of_the_worked_example() -> None:
    guard = LongitudinalGuard(IN_MEMORY, irr={"i": IRR})
    plain = guard.privacy_loss("m", DEFAULT)
    assert plain.one_report_epsilon == plain.long_run_epsilon == math.log(3)
    assert plain.p_answers_differ == Fraction(5, 8) and "timing" in plain.value_change
    assert plain.after(1000) == math.log(3)
    layered = guard.privacy_loss("i", DEFAULT)
    assert layered.one_report_epsilon == math.log(3)
    assert layered.long_run_epsilon == math.log(5) == layered.cost_per_new_value
    assert (layered.p_yes_given_yes, layered.p_yes_given_no) == (Fraction(3, 4), Fraction(1, 4))
    assert layered.after(1) == pytest.approx(math.log(3))
    assert math.log(3) < layered.after(2) < layered.after(5) < layered.after(10) < math.log(5)
    assert layered.after(2) == pytest.approx(1.5163, abs=1e-4)  # the table in docs/privacy.md
    assert layered.after(5) == pytest.approx(1.6092, abs=1e-4)


def test_configurations_that_cannot_work_are_refused_with_the_metric_named() -> None:
    with pytest.raises(InvalidParameterError, match="both fresh and given"):
        LongitudinalGuard(IN_MEMORY, irr={"m": IRR}, fresh={"m"})
    with pytest.raises(InvalidParameterError, match="collection of metric names"):
        LongitudinalGuard(IN_MEMORY, fresh="m")
    with pytest.raises(InvalidParameterError, match="must be a RandomizedResponse"):
        LongitudinalGuard(IN_MEMORY, irr={"m": "rr:3/4:1/2"})  # type: ignore[dict-item]
    guard = LongitudinalGuard(IN_MEMORY, irr={"m": RandomizedResponse.from_id("rr:1/4:1/2")})
    with pytest.raises(InvalidParameterError, match="metric 'm'.*cannot produce"):
        guard.check({"m": DEFAULT})
    with pytest.raises(InvalidParameterError):
        guard.perturb("m", DEFAULT, True)
    assert guard.stats() == {}  # nothing was spent


def test_equal_mechanism_objects_share_one_memoized_answer() -> None:
    guard = LongitudinalGuard(IN_MEMORY)
    first = guard.perturb("m", DEFAULT, True)
    for _ in range(50):
        assert guard.perturb("m", RandomizedResponse.from_id("rr:1/2:1/2"), True) == first
    assert guard.stats()["m"].paid_values == 1


def test_the_privacy_layer_imports_nothing_heavy() -> None:
    code = ("import sys, deniable.client.longitudinal; "
            "print(sorted({'numpy', 'flask', 'redis', 'requests'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
