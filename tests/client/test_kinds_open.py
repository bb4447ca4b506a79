"""The open kind through the real client path: Reporter -> privacy layer -> queue -> upload
(to a recording collector), read back from what was POSTed.

- a declared ``kind = "open"`` metric takes a string and sends one ``cell`` in [0, cells);
- memoized: one string always gives the same cell (the memo is keyed by the normalised
  bytes, so an NFD spelling of the same text gives the same cell); fresh: the cell varies;
- refused values (not a str, too long without clamp, NUL) never reach the wire nor the ledger,
  and the message never echoes the value;
- the budget's substitution: once the budget refuses a new string, the paid answer with the
  lowest ledger tag is sent (an already-sent cell), never a fresh draw.
"""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import pytest

from deniable.client import InvalidParameterError, Reporter
from deniable.client.errors import WireFormatError
from deniable.client.budget import Budget
from deniable.client.kinds import MetricSpec
from deniable.client.metrics import describe_metric, parse_catalogue
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.wire import decode_batch
from tests.servers import recording_collector

SKETCH = OpenDomainSketch.from_id("od:8:1:64:10:1/2")
METRICS = {"crash_sig": MetricSpec.build("open", mechanism=SKETCH.id),
           "domain": MetricSpec.build("open", mechanism=SKETCH.id, clamp=True)}


@contextmanager
def reporter(**options: object) -> Iterator[tuple[Reporter, list[bytes]]]:
    with recording_collector({"metrics": []}) as (url, recorder):
        options = {"one_per_period": False, "privacy_dir": ":memory:", "batch_size": 1000,
                   **options}
        with Reporter(url, METRICS, **options) as client:  # type: ignore[arg-type]
            yield client, recorder.bodies
            assert client.flush(60)


def cells(bodies: list[bytes], metric: str) -> list[int]:
    return [r["cell"] for body in bodies for r in json.loads(body)["reports"]
            if r["metric"] == metric]


def test_a_declared_open_metric_reports_one_cell_per_string_and_memoizes_it() -> None:
    with reporter() as (client, bodies):
        for _ in range(5):
            client.report("crash_sig", "NPE@x")
        client.report("crash_sig", unicodedata.normalize("NFD", "café"))
        client.report("crash_sig", "café")
    sent = cells(bodies, "crash_sig")
    assert len(sent) == 7 and all(0 <= c < SKETCH.cells for c in sent)
    assert len(set(sent[:5])) == 1      # memoized: one permanent answer per string
    assert sent[5] == sent[6]           # keyed by the normalised bytes
    registry = {name: spec.mechanism.id for name, spec in METRICS.items()}
    batch = decode_batch(json.loads(bodies[0]), registry)   # the collector's validation
    tally = batch.tallies["crash_sig"]
    assert tally.counts == (7,) and sum(by for _, by in tally.cells) == 7
    assert all(slot == 1 + c for (slot, _), c in zip(tally.cells, sorted(set(sent))))


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
    assert len(sent) == 2 and sent[0] == sent[1]


def test_a_refused_new_string_is_sent_as_a_paid_answer() -> None:
    budget = {"crash_sig": Budget(epsilon=SKETCH.epsilon * 2.5, period=10 ** 9)}
    with reporter(budgets=budget) as (client, bodies):
        for i in range(2):
            client.report("crash_sig", f"sig{i}")
        for i in range(2, 30):
            client.report("crash_sig", f"sig{i}")   # refused by the budget: a paid answer
    sent = cells(bodies, "crash_sig")
    assert len(sent) == 30
    assert set(sent[2:]) <= set(sent[:2])
    assert len(set(sent[2:])) == 1


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
    assert loss.after(10) == SKETCH.epsilon      # memoized: ten reports repeat one answer
    # Two strings' answers agree only on a shared level and seed: 1 - (p^2 + 9 q^2) / 512.
    assert loss.p_answers_differ == 1 - (SKETCH.p ** 2 + 9 * SKETCH.q ** 2) / (8 * 64)


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
