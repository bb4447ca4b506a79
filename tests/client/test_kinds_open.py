"""The open kind through the real client path: Reporter -> privacy layer -> queue -> upload
(to a recording collector), read back from what was POSTed.

- a declared ``kind = "open"`` metric takes a string and sends one ``cell`` in [0, cells);
- always fresh (the kind defines it): two reports of one string are independent draws, and a
  table declaring a memoized or instantaneous open metric is refused;
- refused values (not a str, too long without clamp, NUL) never reach the wire nor the ledger,
  and the message never echoes the value;
- past the budget a new and an already-reported string are dropped alike (nothing stands in);
- one report per declared period per device, the first, whatever the later values.
"""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import pytest

from deniable.client import Delivery, InvalidParameterError, Privacy, Reporter, Storage
from deniable.client.errors import BudgetExceededError, WireFormatError
from deniable.client.budget import Budget
from deniable.client.kinds import MetricSpec
from deniable.client.metrics import coerce_catalogue, describe_metric, parse_catalogue
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.period import CollectionPolicy
from deniable.client.wire import decode_batch
from tests.servers import recording_collector

SKETCH = OpenDomainSketch.from_id("od:8:1:64:10:1/2")
METRICS = {"crash_sig": MetricSpec.build("open", mechanism=SKETCH.id),
           "domain": MetricSpec.build("open", mechanism=SKETCH.id, clamp=True)}


@contextmanager
def reporter(**privacy: object) -> Iterator[tuple[Reporter, list[bytes]]]:
    """A Reporter of METRICS to a recording collector; ``privacy``: Privacy's fields."""
    with recording_collector({"metrics": []}) as (url, recorder):
        with Reporter(url, METRICS, storage=Storage(privacy_dir=":memory:"),
                      delivery=Delivery(batch_size=1000),
                      privacy=Privacy(one_per_period=False, **privacy)  # type: ignore[arg-type]
                      ) as client:
            yield client, recorder.bodies
            assert client.flush(60)


def load_table(doc: dict[str, dict[str, dict[str, str]]]) -> dict[str, CollectionPolicy]:
    """The policies a metrics table declares, as the Reporter reads them."""
    policies: dict[str, CollectionPolicy] = {}
    coerce_catalogue(doc["metrics"], None, policies)
    return policies


def cells(bodies: list[bytes], metric: str) -> list[int]:
    return [r["cell"] for body in bodies for r in json.loads(body)["reports"]
            if r["metric"] == metric]


def test_a_declared_open_metric_reports_one_cell_per_report() -> None:
    with reporter() as (client, bodies):
        for _ in range(5):
            client.report("crash_sig", "NPE@x")
        client.report("crash_sig", unicodedata.normalize("NFD", "café"))
        client.report("crash_sig", "café")
    sent = cells(bodies, "crash_sig")
    assert len(sent) == 7 and all(0 <= c < SKETCH.cells for c in sent)
    registry = {name: spec.mechanism.id for name, spec in METRICS.items()}
    batch = decode_batch(json.loads(bodies[0]), registry)   # the collector's validation
    tally = batch.tallies["crash_sig"]
    assert tally.counts == (7,) and sum(by for _, by in tally.cells) == 7
    assert all(slot == 1 + c for (slot, _), c in zip(tally.cells, sorted(set(sent))))


def test_two_reports_of_one_string_from_one_device_are_independent_draws() -> None:
    # The default (no fresh option, no declared policy): an open metric is fresh all the same.
    with reporter() as (client, bodies):
        for _ in range(40):
            client.report("crash_sig", "NPE@x")
        assert client.privacy_loss("crash_sig").after(2) == 2 * SKETCH.epsilon
    sent = cells(bodies, "crash_sig")
    # A memo would repeat one cell 40 times. Fresh: P(two draws agree) <= 1/(levels seeds)
    # + (p^2 + 9 q^2) <= 1/512, so P(all 40 equal) < 1e-100; P(>= 20 of 39 consecutive
    # pairs equal) < C(39,20) 512^-20 < 1e-42.
    assert len(sent) == 40 and len(set(sent)) > 1
    assert sum(a == b for a, b in zip(sent, sent[1:])) < 20


def test_fresh_reports_vary_and_stay_in_range() -> None:
    with reporter(fresh=("crash_sig",)) as (client, bodies):
        for _ in range(40):
            client.report("crash_sig", "NPE@x")
    sent = cells(bodies, "crash_sig")
    # 40 fresh draws over 64 x 8 x 10 cells all equal: probability < 1e-60.
    assert len(sent) == 40 and len(set(sent)) > 1


@pytest.mark.parametrize("value", [b"bytes", 12, "", "nine bytes", "a\x00b"])
def test_a_refused_value_sends_nothing_and_is_not_echoed(value: object) -> None:
    with reporter() as (client, bodies):
        with pytest.raises(InvalidParameterError) as caught:
            client.report("crash_sig", value)
    assert cells(bodies, "crash_sig") == []
    if isinstance(value, str) and value:
        assert value not in str(caught.value)


def test_clamp_cuts_a_long_string_at_a_character_boundary() -> None:
    with reporter() as (client, bodies):
        client.report("domain", "example.org")      # 11 bytes: cut to 8
        client.report("domain", "example.")         # the same 8 bytes
    sent = cells(bodies, "domain")
    assert len(sent) == 2 and all(0 <= c < SKETCH.cells for c in sent)
    spec = METRICS["domain"]
    assert spec.kind_object.encode(spec, "example.org") == b"example."


def test_past_the_budget_a_new_and_a_reported_string_are_dropped_alike() -> None:
    budget = {"crash_sig": Budget(epsilon=SKETCH.epsilon * 2.5, period=10 ** 9)}
    with reporter(budgets=budget) as (client, bodies):
        client.report("crash_sig", "sig0")
        client.report("crash_sig", "sig1")          # the budget now holds 0.5 report
        refusals = []
        for value in ("sig0", "sig2", "sig1"):    # reported before, new, reported before
            with pytest.raises(BudgetExceededError) as caught:
                client.report("crash_sig", value)
            refusals.append(caught.value.args[0])
    assert len(cells(bodies, "crash_sig")) == 2
    assert len(set(refusals)) == 1                 # the same refusal whatever the value


@pytest.mark.parametrize("period", ["hour", "day", "week"])
def test_one_report_per_declared_period_the_first_whatever_the_value(period: str) -> None:
    """With the period gate on (the default), a second and third ``report()`` in the period
    send nothing and charge nothing, for a new string and the same string alike (a budget of
    1.5 reports would refuse a second charge with BudgetExceededError)."""
    table = {"kind": "open", "mechanism": SKETCH.id, "period": period}
    budget = {"crash_sig": Budget(epsilon=SKETCH.epsilon * 1.5, period=10 ** 9)}
    with recording_collector({"metrics": []}) as (url, recorder):
        with Reporter(url, {"crash_sig": table}, storage=Storage(privacy_dir=":memory:"),
                      delivery=Delivery(batch_size=1000),
                      privacy=Privacy(budgets=budget)) as client:
            client.report("crash_sig", "sig0")
            client.report("crash_sig", "sig1")      # a new string
            client.report("crash_sig", "sig0")      # the same string
            assert client.flush(60)
            stats = client.stats()
    assert len(cells(recorder.bodies, "crash_sig")) == 1
    assert stats.period_skipped == 2 and stats.budget_refused == 0


@pytest.mark.parametrize(("table", "field"), [
    ({"memoization": "memoized"}, "memoization"),
    ({"memoization": "instantaneous", "instantaneous": "rr:3/4:1/4"}, "memoization"),
    ({"instantaneous": "rr:3/4:1/4"}, "instantaneous"),
])
def test_a_table_declaring_a_memoized_open_metric_is_refused(table: dict[str, str],
                                                             field: str) -> None:
    doc = {"metrics": {"crash_sig": {"kind": "open", "mechanism": SKETCH.id, **table}}}
    with pytest.raises(InvalidParameterError, match=f"{field}:.*always draws fresh coins"):
        load_table(doc)


def test_an_open_table_is_fresh_unstated_or_stated() -> None:
    for table in ({}, {"memoization": "fresh", "period": "week"}):
        doc = {"metrics": {"crash_sig": {"kind": "open", "mechanism": SKETCH.id, **table}}}
        policy = load_table(doc)["crash_sig"]
        assert policy.memoization == "fresh" and policy.instantaneous is None
        assert policy.period == table.get("period", "day")


def test_the_catalogue_entry_round_trips_and_states_the_inner_channel() -> None:
    spec = METRICS["crash_sig"]
    entry = describe_metric("crash_sig", "", spec)
    assert entry["kind"] == "open" and entry["max_bytes"] == 8 and entry["mechanism"] == SKETCH.id
    assert (Fraction(entry["p1"]), Fraction(entry["q"])) == (SKETCH.p, SKETCH.q)
    assert parse_catalogue({"metrics": [entry]}) == {"crash_sig": spec}


def test_privacy_loss_of_an_open_metric() -> None:
    with reporter() as (client, _):
        loss = client.privacy_loss("crash_sig")
    assert loss.one_report_epsilon == SKETCH.epsilon
    assert loss.after(10) == 10 * SKETCH.epsilon  # fresh: every report is charged
    assert loss.p_answers_differ is None         # no memoized answer to compare


@pytest.mark.parametrize(("cell", "problem"), [
    (SKETCH.cells, "an open-domain report is an int in"), (-1, "an open-domain report is an int"),
    (1.0, "an open-domain report is an int"), (True, "an open-domain report is an int"),
    ("7", "an open-domain report is an int")])
def test_the_wire_refuses_a_cell_outside_the_sketch(cell: object, problem: str) -> None:
    registry = {"crash_sig": SKETCH.id}
    doc = {"batch_id": "0" * 32, "reports": [
        {"metric": "crash_sig", "mechanism": SKETCH.id, "cell": cell}]}
    with pytest.raises(WireFormatError) as caught:
        decode_batch(doc, registry)
    assert [p.pointer for p in caught.value.problems] == ["/reports/0/cell"]
    assert problem in caught.value.problems[0].detail


def test_the_wire_sums_cells_sparsely() -> None:
    registry = {"crash_sig": SKETCH.id}
    reports = [{"metric": "crash_sig", "mechanism": SKETCH.id, "cell": c} for c in (5, 9, 5)]
    batch = decode_batch({"batch_id": "1" * 32, "reports": reports}, registry)
    assert batch.tallies["crash_sig"].counts == (3,)
    assert batch.tallies["crash_sig"].cells == ((6, 2), (10, 1))
