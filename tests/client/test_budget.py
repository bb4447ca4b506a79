"""The privacy budget ledger: sequential composition per period, tight refusals, persistence."""
from __future__ import annotations

import errno
import json
import math
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from deniable.client import RandomizedResponse
from deniable.client.budget import DAY, Budget, PrivacyLedger
from deniable.client.errors import (
    BudgetExceededError,
    DeniableError,
    InvalidParameterError,
    PrivacyStateError,
)
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.state import IN_MEMORY
from deniable.client.mechanism import DEFAULT
from deniable.client.state import StateDir

LN3 = DEFAULT.epsilon
NOON = 20_000 * DAY + DAY / 2  # some day's noon, UTC


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def accepted(guard: LongitudinalGuard, metric: str, tries: int, value: bool = True,
             mechanism: RandomizedResponse = DEFAULT) -> int:
    count = 0
    for _ in range(tries):
        try:
            guard.perturb(metric, mechanism, value)
        except BudgetExceededError:
            continue
        count += 1
    return count


def test_budget_parameters_are_checked() -> None:
    for bad in (-1.0, math.inf, math.nan, True, "1"):
        with pytest.raises(InvalidParameterError):
            Budget(bad)  # type: ignore[arg-type]
    for bad_period in (0, -5.0, math.inf):
        with pytest.raises(InvalidParameterError):
            Budget(1.0, bad_period)
    with pytest.raises(InvalidParameterError):
        LongitudinalGuard(IN_MEMORY, budgets={"m": 1.0})  # type: ignore[dict-item]


def test_budget_exceeded_is_a_deniable_error() -> None:
    assert issubclass(BudgetExceededError, DeniableError)


@pytest.mark.parametrize("budget, allowed", [
    (Budget.for_reports(3, LN3), 3),          # exactly three reports of ln 3
    (Budget(3 * LN3), 3),
    (Budget(math.log(27)), 3),                # ln 27 == 3 ln 3 up to rounding: still three
    (Budget(3 * LN3 * (1 - 1e-9)), 2),        # a hair less: only two
    (Budget(0.0), 0),
])
def test_fresh_reports_compose_sequentially_and_the_budget_is_tight_on_both_sides(
        budget: Budget, allowed: int) -> None:
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": budget}, fresh={"m"}, clock=Clock())
    assert accepted(guard, "m", 10) == allowed
    assert guard.refused == 10 - allowed
    spend = guard.stats()["m"]
    assert spend.spent == pytest.approx(allowed * LN3, rel=1e-15)
    assert spend.refused == 10 - allowed


def test_the_refusal_says_what_was_asked_spent_and_when_it_reopens() -> None:
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(LN3)}, fresh={"m"}, clock=Clock())
    guard.perturb("m", DEFAULT, True)
    with pytest.raises(BudgetExceededError, match=r"'m' refused.*1\.09861 nats") as caught:
        guard.perturb("m", DEFAULT, True)
    err = caught.value
    assert (err.metric, err.cost, err.spent, err.budget) == ("m", LN3, LN3, LN3)
    assert err.retry_at == 20_001 * DAY


def test_memoized_repeats_cost_nothing_and_a_new_value_pays_once() -> None:
    clock = Clock()
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(LN3)}, clock=clock)
    assert accepted(guard, "m", 1000, True) == 1000       # ln 3 once, then free
    assert guard.stats()["m"].spent == LN3
    paid = guard.perturb("m", DEFAULT, True)
    # A new value: ln 3 more, refused, so sent as the paid answer (free; issue 26: a silent
    # refusal would say "the value changed").
    assert [guard.perturb("m", DEFAULT, False) for _ in range(5)] == [paid] * 5
    assert guard.refused == 5 and guard.stats()["m"].spent == LN3
    assert guard.stats()["m"].paid_values == 1
    clock.now += DAY                                      # the next day
    assert accepted(guard, "m", 1000, False) == 1000
    assert accepted(guard, "m", 1000, True) == 1000       # paid yesterday: still free
    spend = guard.stats()["m"]
    assert (spend.spent, spend.total_charged, spend.paid_values) == (LN3, 2 * LN3, 2)


def test_a_new_mechanism_for_a_metric_is_a_new_answer_and_pays_again() -> None:
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(2 * LN3)}, clock=Clock())
    other = RandomizedResponse.from_id("rr:1/3:1/2")  # P1 2/3, Q 1/3: epsilon ln 2
    assert accepted(guard, "m", 3, True) == 3
    assert accepted(guard, "m", 3, True, other) == 3
    assert guard.stats()["m"].spent == pytest.approx(LN3 + math.log(2))


def test_with_an_instantaneous_layer_the_long_run_epsilon_is_charged_up_front() -> None:
    irr = RandomizedResponse.from_id("rr:3/4:1/2")
    ln5 = math.log(5)
    tight = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(ln5)}, irr={"m": irr}, clock=Clock())
    assert accepted(tight, "m", 500, True) == 500
    assert tight.stats()["m"].spent == ln5
    short = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(ln5 * (1 - 1e-9))}, irr={"m": irr},
                              clock=Clock())
    assert accepted(short, "m", 3, True) == 0  # ln 3 per report would wrongly admit it


def test_periods_are_epoch_aligned_and_a_clock_going_back_reopens_nothing() -> None:
    clock = Clock(20_000 * DAY + DAY - 0.001)  # one millisecond before midnight
    guard = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(LN3)}, fresh={"m"}, clock=clock)
    assert accepted(guard, "m", 2) == 1
    clock.now = 20_001 * DAY                  # midnight: a new period
    assert accepted(guard, "m", 2) == 1
    clock.now = 20_000 * DAY + DAY / 2        # the clock goes back a day
    assert accepted(guard, "m", 2) == 0
    hourly = LongitudinalGuard(IN_MEMORY, budgets={"m": Budget(LN3, 3600)}, fresh={"m"}, clock=clock)
    assert accepted(hourly, "m", 2) == 1
    clock.now += 3600
    assert accepted(hourly, "m", 2) == 1


def test_unbudgeted_metrics_are_accounted_but_never_refused() -> None:
    guard = LongitudinalGuard(IN_MEMORY, fresh={"f"}, clock=Clock())
    assert accepted(guard, "f", 1000) == 1000
    assert accepted(guard, "m", 1000) == 1000
    stats = guard.stats()
    assert stats["f"].total_charged == pytest.approx(1000 * LN3, rel=1e-12)
    assert stats["f"].remaining is None and stats["m"].total_charged == LN3


def test_spending_and_refusals_persist_across_restarts(tmp_path: Path) -> None:
    clock = Clock()
    budgets = {"f": Budget.for_reports(3, LN3), "m": Budget(LN3)}
    with LongitudinalGuard(tmp_path, budgets=budgets, fresh={"f"}, clock=clock) as guard:
        assert accepted(guard, "f", 2) == 2
        assert accepted(guard, "m", 10, True) == 10
        # Refused by the budget, so sent as True's paid answer (free), but counted refused.
        assert accepted(guard, "m", 4, False) == 4
        assert accepted(guard, "u", 7) == 7  # unbudgeted: kept in memory until close
    with LongitudinalGuard(tmp_path, budgets=budgets, fresh={"f"}, clock=clock) as guard:
        assert accepted(guard, "f", 5) == 1               # two of three were spent
        assert accepted(guard, "m", 10, True) == 10       # paid before the restart: free
        assert accepted(guard, "m", 1, False) == 1        # substituted, as before
        stats = guard.stats()
        assert stats["m"].refused == 5 and stats["f"].refused == 4
        assert stats["m"].paid_values == 1 and stats["m"].total_charged == LN3
        assert stats["u"].total_charged == LN3
    doc = json.loads((tmp_path / "ledger.json").read_text())
    assert doc["metrics"]["f"]["refused"] == 4


def test_a_budgeted_spend_is_on_disk_before_the_bit_is_returned(tmp_path: Path) -> None:
    guard = LongitudinalGuard(tmp_path, budgets={"f": Budget.for_reports(2, LN3)},
                              fresh={"f"}, clock=Clock())
    guard.perturb("f", DEFAULT, True)  # no close(): as if the app were killed now
    other = LongitudinalGuard(tmp_path, budgets={"f": Budget.for_reports(2, LN3)},
                              fresh={"f"}, clock=Clock())
    assert accepted(other, "f", 3) == 1


def test_a_corrupt_ledger_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ledger.json").write_text("{not json")
    with pytest.raises(PrivacyStateError, match="not valid JSON"):
        LongitudinalGuard(tmp_path)
    (tmp_path / "ledger.json").write_text('{"version": 1, "metrics": {"m": {"spent": "x"}}}')
    with pytest.raises(PrivacyStateError, match="'m' is corrupt"):
        LongitudinalGuard(tmp_path)
    (tmp_path / "ledger.json").write_text('{"version": 7, "metrics": {}}')
    with pytest.raises(PrivacyStateError, match="unknown layout"):
        PrivacyLedger(StateDir(tmp_path))


@pytest.mark.parametrize("persisted", [False, True])
def test_threads_racing_for_a_budget_never_overspend(tmp_path: Path, persisted: bool) -> None:
    guard = LongitudinalGuard(tmp_path if persisted else IN_MEMORY, fresh={"f"}, clock=Clock(),
                              budgets={"f": Budget.for_reports(50, LN3)})
    counts = [0] * 8

    def work(i: int) -> None:
        counts[i] = accepted(guard, "f", 40)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 50
    assert guard.refused == 8 * 40 - 50
    guard.close()


@pytest.mark.slow
def test_processes_sharing_a_state_dir_never_overspend(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from deniable.client.budget import Budget
        from deniable.client.errors import BudgetExceededError
        from deniable.client.longitudinal import LongitudinalGuard
        from deniable.client.mechanism import DEFAULT
        guard = LongitudinalGuard(sys.argv[1], fresh={{"f"}}, clock=lambda: {NOON},
                                  budgets={{"f": Budget.for_reports(30, DEFAULT.epsilon)}})
        ok = 0
        for _ in range(25):
            try:
                guard.perturb("f", DEFAULT, True)
                ok += 1
            except BudgetExceededError:
                pass
        guard.close()
        print(ok)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(int(out) for out in outputs) == 30
    doc = json.loads((tmp_path / "ledger.json").read_text())
    assert doc["metrics"]["f"]["refused"] == 3 * 25 - 30


def test_a_ledger_that_cannot_be_written_releases_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = LongitudinalGuard(tmp_path, budgets={"f": Budget(10.0)}, fresh={"f"}, clock=Clock())

    def disk_full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("deniable.client.state.os.replace", disk_full)
    with pytest.raises(PrivacyStateError, match="nothing is released"):
        guard.perturb("f", DEFAULT, True)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
