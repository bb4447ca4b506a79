"""The Reporter's privacy layer, as an app uses it: memoized by default, budgets, IRR."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from deniable.client import BudgetExceededError, Privacy, Reporter
from deniable.client.budget import Budget
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.metrics import describe_metric
from tests.conftest import DECLARED
from tests.servers import recording_collector

CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT),
                         describe_metric("dark_mode", "Dark", RandomizedResponse("3/4", "1/2"))]}


def sent_bits(recorder, metric: str) -> list[int]:  # type: ignore[no-untyped-def]
    return [r["bit"] for body in recorder.bodies for r in json.loads(body)["reports"]
            if r["metric"] == metric]


def test_repeats_of_a_value_send_the_same_memoized_answer_by_default() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED, privacy=Privacy(one_per_period=False)) as reporter:
            for _ in range(50):
                reporter.report("feature_x_enabled", True)
                reporter.report("dark_mode", False)
        assert len(set(sent_bits(recorder, "feature_x_enabled"))) == 1
        assert len(set(sent_bits(recorder, "dark_mode"))) == 1
        loss = reporter.privacy_loss("feature_x_enabled")
        assert loss.one_report_epsilon == loss.long_run_epsilon == math.log(3)


@pytest.mark.slow
def test_memoized_answers_survive_a_restart_beside_the_queue(tmp_path: Path) -> None:
    queue = tmp_path / "deniable.db"
    answers = []
    with recording_collector(CATALOGUE) as (url, recorder):
        for _ in range(3):  # three app runs
            with Reporter(url, DECLARED, privacy=Privacy(one_per_period=False),
                          queue_path=queue) as reporter:
                for _ in range(20):
                    reporter.report("dark_mode", True)
            answers.append(set(sent_bits(recorder, "dark_mode")))
        assert len(set.union(*answers)) == 1
    state = tmp_path / "deniable.db.privacy"
    assert state.is_dir() and state.stat().st_mode & 0o077 == 0  # private to the app


def test_fresh_metrics_spend_their_budget_and_refusals_are_counted() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        budget = Budget.for_reports(3, DEFAULT.epsilon)
        with Reporter(url, DECLARED,
                      privacy=Privacy(one_per_period=False, fresh={"feature_x_enabled"},
                                      budgets={"feature_x_enabled": budget})) as reporter:
            for _ in range(3):
                reporter.report("feature_x_enabled", True)
            with pytest.raises(BudgetExceededError):
                reporter.report("feature_x_enabled", True)
            assert reporter.stats().budget_refused == 1
        assert len(sent_bits(recorder, "feature_x_enabled")) == 3


def test_an_instantaneous_layer_keeps_the_wire_mechanism_exact() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        with Reporter(url, DECLARED,
                      privacy=Privacy(one_per_period=False,
                                      irr={"feature_x_enabled": "rr:3/4:1/2"})) as reporter:
            for _ in range(2000):
                reporter.report("feature_x_enabled", True)
            loss = reporter.privacy_loss("feature_x_enabled")
        bits = sent_bits(recorder, "feature_x_enabled")
        assert len(set(bits)) == 2  # re-perturbed on every report
        assert all(json.loads(b)["reports"][0]["mechanism"] == "rr:1/2:1/2"
                   for b in recorder.bodies)
        assert loss.long_run_epsilon is not None and loss.long_run_epsilon > loss.one_report_epsilon
