"""The collection policy and the period gate: at most one report per metric per period."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from deniable.client import InvalidParameterError, Privacy, Reporter, Storage
from deniable.client.errors import BudgetExceededError
from deniable.client.mechanism import DEFAULT, RandomizedResponse
from deniable.client.metrics import describe_metric, parse_policies
from deniable.client.period import (
    DEFAULT_POLICY, CollectionPolicy, PeriodGate, follow_policies, parse_policy)
from tests.client.test_sender import wait_for
from tests.servers import recording_collector

LAYER = RandomizedResponse.from_id("rr:1/2:1/2")
WIRE = RandomizedResponse.from_id("rr:1/4:1/2")
DAY = 86_400.0


def test_the_default_is_memoized_once_a_day_and_policies_round_trip() -> None:
    assert DEFAULT_POLICY == CollectionPolicy("memoized", None, "day")
    for policy in (DEFAULT_POLICY, CollectionPolicy("instantaneous", LAYER, "hour"),
                   CollectionPolicy("fresh", None, "week")):
        assert parse_policy(policy.describe()) == policy
    assert parse_policy({}) == DEFAULT_POLICY  # an older collector states none
    with pytest.raises(InvalidParameterError, match="memoization"):
        CollectionPolicy("sometimes")
    with pytest.raises(InvalidParameterError, match="period"):
        CollectionPolicy(period="month")
    with pytest.raises(InvalidParameterError, match="instantaneous"):
        CollectionPolicy("instantaneous")  # no layer
    with pytest.raises(InvalidParameterError, match="instantaneous"):
        parse_policy({"memoization": "instantaneous", "instantaneous": "rr:0:1/2"})


def test_periods_are_utc_hours_days_and_iso_weeks() -> None:
    monday = datetime(2026, 11, 23, tzinfo=timezone.utc).timestamp()
    week = CollectionPolicy(period="week")
    assert week.period_index(monday) == week.period_index(monday + 7 * DAY - 1)
    assert week.period_index(monday - 1) == week.period_index(monday) - 1
    assert DEFAULT_POLICY.period_index(monday + DAY - 1) != DEFAULT_POLICY.period_index(
        monday + DAY)


def test_the_gate_admits_the_first_call_of_each_period_and_counts_the_rest() -> None:
    now = [1_000 * DAY + 10.0]
    gate = PeriodGate(clock=lambda: now[0])
    assert gate.admit("m", DEFAULT_POLICY) is True
    assert [gate.admit("m", DEFAULT_POLICY) for _ in range(5)] == [False] * 5
    assert gate.admit("other", DEFAULT_POLICY) is True  # per metric
    now[0] += DAY
    assert gate.admit("m", DEFAULT_POLICY) is True
    assert gate.skipped == 5


def test_the_gate_remembers_across_restarts_and_keeps_no_identifier(tmp_path) -> None:
    now = 1_000 * DAY
    assert PeriodGate(tmp_path, clock=lambda: now).admit("m", DEFAULT_POLICY) is True
    again = PeriodGate(tmp_path, clock=lambda: now)  # the app restarted the same day
    assert again.admit("m", DEFAULT_POLICY) is False
    assert PeriodGate(tmp_path, clock=lambda: now + DAY).admit("m", DEFAULT_POLICY) is True
    stored = json.loads((tmp_path / "periods.json").read_text())
    assert stored == {"m/day": 1001}  # a period number per metric: no id, no value
    assert (tmp_path / "periods.json").stat().st_mode & 0o077 == 0


def test_a_released_period_stays_open(tmp_path) -> None:
    gate = PeriodGate(tmp_path, clock=lambda: 5 * DAY)
    assert gate.admit("m", DEFAULT_POLICY)
    gate.release("m", DEFAULT_POLICY)
    assert PeriodGate(tmp_path, clock=lambda: 5 * DAY).admit("m", DEFAULT_POLICY)


def test_the_reporter_sends_one_report_per_period_and_counts_extra_calls(tmp_path) -> None:
    catalogue = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT)]}
    with recording_collector(catalogue) as (url, recorder):
        with Reporter(url, {"feature_x_enabled": DEFAULT},
                      storage=Storage(privacy_dir=tmp_path)) as reporter:
            for _ in range(100):
                reporter.report("feature_x_enabled", True)
            assert reporter.flush() is True
            stats = reporter.stats()
        assert (stats.sent, stats.period_skipped) == (1, 99)
        [body] = recorder.bodies
        assert len(json.loads(body)["reports"]) == 1


def test_a_budget_refusal_leaves_the_period_open(tmp_path) -> None:
    catalogue = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT)]}
    refuse = [True]

    class Budgeted(Reporter):
        def _perturb(self, metric, mechanism, true_value):  # type: ignore[no-untyped-def]
            if refuse[0]:
                raise BudgetExceededError("spent")
            return super()._perturb(metric, mechanism, true_value)

    with recording_collector(catalogue) as (url, _):
        with Budgeted(url, {"feature_x_enabled": DEFAULT},
                      storage=Storage(privacy_dir=tmp_path)) as reporter:
            with pytest.raises(BudgetExceededError):
                reporter.report("feature_x_enabled", True)
            refuse[0] = False
            reporter.report("feature_x_enabled", True)
            assert reporter.flush() is True
            assert reporter.stats().sent == 1


def test_the_reporter_follows_the_declaration_never_the_registry(tmp_path) -> None:
    catalogue = {"metrics": [
        describe_metric("a", "", WIRE, CollectionPolicy("fresh", period="hour")),
        describe_metric("b", "", WIRE, CollectionPolicy("instantaneous", LAYER)),
        describe_metric("c", "", WIRE, CollectionPolicy("fresh")),
        describe_metric("d", "", WIRE, CollectionPolicy(period="week"))]}
    policies = parse_policies(catalogue)
    assert policies["b"].instantaneous == LAYER
    declared = {"a": WIRE, "b": WIRE, "c": WIRE,
                "d": {"mechanism": WIRE.id, "memoization": "fresh", "period": "hour"}}
    with recording_collector(catalogue) as (url, _):
        with Reporter(url, declared, storage=Storage(privacy_dir=tmp_path),
                      privacy=Privacy(irr={"c": LAYER})) as reporter:
            wait_for(lambda: reporter.catalogue_fetched)
            guard = reporter._guard
            assert guard.layers("a", WIRE).memo == WIRE              # memoized, as declared
            assert guard.layers("b", WIRE).irr is None               # no served layer
            assert guard.layers("c", WIRE).irr == LAYER              # the app's irr=
            assert guard.layers("d", WIRE).memo is None              # its table: fresh
            assert reporter._policy("a").period == "day"             # not the served hour
            assert reporter._policy("d").period == "hour"            # its table's
            assert reporter.stats().ignored_served == {"a": 2, "b": 1, "c": 1, "d": 2}
    fresh, irr = follow_policies({"a": WIRE}, policies, {"a"}, {})
    assert (fresh, irr) == ({"a"}, {})


def test_policies_in_code_override_the_declaration_table() -> None:
    declared = {"a": {"mechanism": WIRE.id, "period": "week"}}
    policies = {"a": CollectionPolicy("fresh", period="hour")}
    with Reporter("http://127.0.0.1:9", declared, storage=Storage(privacy_dir=":memory:"),
                  privacy=Privacy(policies=policies)) as reporter:
        assert reporter._policy("a") == CollectionPolicy("fresh", period="hour")
        assert reporter._guard.layers("a", WIRE).memo is None
        reporter.close(timeout=0)


def test_skips_are_counted_exactly_across_threads_and_reads() -> None:
    import threading

    gate = PeriodGate(clock=lambda: 10 * DAY)
    assert gate.admit("m", DEFAULT_POLICY)

    def hammer() -> None:
        for _ in range(5000):
            gate.admit("m", DEFAULT_POLICY)
            gate.skipped  # reading must not disturb the count

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gate.skipped == gate.skipped == 20_000
