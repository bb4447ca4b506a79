"""The shared test vectors (tests/vectors/vectors.json) are what the Python client says now.

The web client's tests (web/test/vectors.test.js) check the same file against the TypeScript
code, so a change on either side fails until both agree: regenerate with
``python -m tests.vectors.generate`` after a deliberate change to the Python side.
"""
from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import pytest

from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit
from deniable.client.open_domain import OpenDomainSketch, bucket, hash_constants, normalise
from deniable.client.wire import decode_batch, decode_compact_batch
from tests.vectors.generate import PATH, _source, generate, render

VECTORS = json.loads(PATH.read_text())


@pytest.mark.slow
def test_committed_vectors_equal_what_the_python_client_gives_now() -> None:
    assert PATH.read_text() == render(generate()), (
        "tests/vectors/vectors.json is stale: run python -m tests.vectors.generate, then make "
        "the web client agree (cd web && npm test)")


def test_every_kind_of_vector_is_there() -> None:
    for name in ("mechanisms", "invalid_ids", "bits", "below", "perturb", "memo", "wire",
                 "estimates"):
        assert len(VECTORS[name]) > 0, name
    kinds = {tuple(sorted(v["outputs"])) != tuple(v["outputs"]) for v in VECTORS["perturb"]}
    assert kinds == {True}  # every perturbation sequence mixes 0s and 1s


def test_mechanism_entries_hold_exactly() -> None:
    for entry in VECTORS["mechanisms"]:
        m = RandomizedResponse.from_id(entry["id"])
        assert str(m.p_yes_given_yes) == entry["p_yes_given_yes"]
        assert str(m.p_yes_given_no) == entry["p_yes_given_no"]
        assert Fraction(entry["likelihood_ratio"]) == m.likelihood_ratio
        assert m.epsilon == entry["epsilon"]


def test_memo_entries_are_the_memoized_answers() -> None:
    for entry in VECTORS["memo"]:
        m = RandomizedResponse.from_id(entry["mechanism"])
        assert memo_bit(bytes.fromhex(entry["secret"]), entry["metric"], m,
                        entry["true_bit"]) == entry["bit"]


def test_wire_bodies_take_the_collectors_fast_path_and_read_the_same_both_ways() -> None:
    for entry in VECTORS["wire"]:
        registry = {metric: mechanism for metric, mechanism, _ in entry["reports"]}
        fast = decode_compact_batch(entry["body"].encode(), registry)
        careful = decode_batch(json.loads(entry["body"]), registry)
        assert fast is not None and fast == careful
        assert fast.batch_id == entry["batch_id"]
        expected = Counter()
        for metric, _, bit in entry["reports"]:
            expected[(metric, "n")] += 1
            expected[(metric, "ones")] += bit
        assert {m: (t.n, t.ones) for m, t in fast.tallies.items()} == {
            m: (expected[(m, "n")], expected[(m, "ones")]) for m in registry}


def test_estimate_entries_match() -> None:
    for entry in VECTORS["estimates"]:
        e = RandomizedResponse.from_id(entry["mechanism"]).estimate(
            entry["ones"], entry["n"], entry["confidence"])
        assert (e.value, e.ci_low, e.ci_high) == (entry["value"], entry["ci_low"], entry["ci_high"])


def test_dims_wire_bodies_are_what_the_collector_counts_per_series() -> None:
    """Bodies with dims leave the compact fast path (decode_compact_batch declines them) and
    the careful decoder counts each stated value in its series."""
    from deniable.client.dimensions import Dimensions
    from tests.vectors.generate import COMBOS, DIMS
    declared = {"dark_mode": Dimensions.parse(DIMS, COMBOS),
                "os": Dimensions.parse({"platform": DIMS["platform"]})}
    for entry in VECTORS["dims_wire"]:
        registry = {metric: mechanism for metric, mechanism, _, _ in entry["reports"]}
        assert decode_compact_batch(entry["body"].encode(), registry) is None
        batch = decode_batch(json.loads(entry["body"]), registry, dimensions=declared)
        expected: Counter[tuple[str, str]] = Counter()
        for metric, _, _, dims in entry["reports"]:
            for label in declared[metric].series(dims or {}):
                expected[(metric, label)] += 1
        assert {(m, label): counts[0] for m, t in batch.tallies.items()
                for label, counts in t.series.items()} == dict(expected)


def test_ledger_tags_are_the_python_ledgers_hmac_tags() -> None:
    from deniable.client.kinds import parse_mechanism
    from deniable.client.memo import spend_tag, value_tag

    entries = VECTORS["ledger_tags"]
    assert {e["mechanism"].split(":")[0] for e in entries} == {"rr", "grr", "oue", "ss", "bm"}
    for entry in entries:
        secret = bytes.fromhex(entry["secret"])
        if entry["mechanism"].startswith("rr:"):
            tag = spend_tag(secret, entry["metric"],
                            RandomizedResponse.from_id(entry["mechanism"]), entry["key"])
        else:
            tag = value_tag(secret, entry["metric"], parse_mechanism(entry["mechanism"]),
                            entry["key"])
        assert tag == entry["tag"] and len(tag) == 32


def test_period_vectors_replay_through_pythons_gate_across_restarts(tmp_path) -> None:
    from deniable.client.period import CollectionPolicy, PeriodGate

    for entry in VECTORS["periods"]["indexes"]:
        policy = CollectionPolicy(period=entry["period"])
        assert policy.period_index(entry["ms"] / 1000) == entry["index"]
    clock = [0.0]
    gate = PeriodGate(tmp_path, clock=lambda: clock[0])
    sequence = VECTORS["periods"]["sequence"]
    for entry in sequence:
        if entry["restart"]:
            gate = PeriodGate(tmp_path, clock=lambda: clock[0])
        clock[0] = entry["ms"] / 1000
        assert gate.admit(entry["metric"], CollectionPolicy(period=entry["period"])) \
            == entry["admitted"], entry
    assert {e["admitted"] for e in sequence} == {True, False}
    assert any(e["restart"] and not e["admitted"] for e in sequence)  # a restart kept its gate


def test_instantaneous_vectors_replay_through_pythons_guard(tmp_path) -> None:
    """Each layered entry, reported through a real LongitudinalGuard holding the entry's secret
    and drawing its fresh coins from the entry's words: the same layers, the same permanent
    answers (paid for under the memo layer's tags), the same reports, draw for draw."""
    import os

    from deniable.client.longitudinal import LongitudinalGuard
    from deniable.client.memo import spend_tag
    from deniable.client.state import SECRET_FILE
    from tests.vectors.generate import _source

    section = VECTORS["instantaneous"]
    assert {e["answers"][0] != e["answers"][1] for e in section["layered"]} == {True, False}
    for i, entry in enumerate(section["layered"]):
        state = tmp_path / str(i)
        state.mkdir(mode=0o700)
        (state / SECRET_FILE).write_bytes(bytes.fromhex(entry["secret"]))
        os.chmod(state / SECRET_FILE, 0o600)
        wire = RandomizedResponse.from_id(entry["wire"])
        irr = RandomizedResponse.from_id(entry["instantaneous"])
        guard = LongitudinalGuard(state, irr={entry["metric"]: irr},
                                  rng=_source(entry["words"]), max_metric_epsilon=float("inf"))
        memo = guard.layers(entry["metric"], wire).memo
        assert memo is not None and memo.id == entry["memo"]
        secret = bytes.fromhex(entry["secret"])
        assert [spend_tag(secret, entry["metric"], memo, b) for b in (0, 1)] == entry["tags"]
        sent = [guard.perturb(entry["metric"], wire, bool(b)) for b in entry["true_bits"]]
        assert sent == entry["outputs"], entry["wire"]
        assert [memo_bit(secret, entry["metric"], memo, b) for b in (0, 1)] == entry["answers"]
    for pair in section["unreachable"]:
        guard = LongitudinalGuard(
            tmp_path / "u", irr={"m": RandomizedResponse.from_id(pair["instantaneous"])})
        with pytest.raises(InvalidParameterError, match="instantaneous layer"):
            guard.layers("m", RandomizedResponse.from_id(pair["wire"]))


def test_layered_privacy_loss_vectors_are_what_the_guard_states() -> None:
    """The ``privacy_loss`` entries with an instantaneous layer, from a guard given that layer
    (not only from PrivacyLoss.of, which the generator calls)."""
    from deniable.client.longitudinal import LongitudinalGuard
    from deniable.client.state import IN_MEMORY

    entries = [e for e in VECTORS["privacy_loss"] if e.get("instantaneous")]
    assert len(entries) >= 5
    for entry in entries:
        guard = LongitudinalGuard(
            IN_MEMORY, irr={"m": RandomizedResponse.from_id(entry["instantaneous"])},
            warn_in_memory=False)
        loss = guard.privacy_loss("m", RandomizedResponse.from_id(entry["mechanism"]))
        assert (loss.one_report_epsilon, loss.long_run_epsilon, loss.cost_per_new_value,
                str(loss.p_answers_differ), loss.value_change) == (
            entry["one_report_epsilon"], entry["long_run_epsilon"],
            entry["cost_per_new_value"], entry["p_answers_differ"], entry["value_change"])
        assert [loss.after(n) for n in (0, 1, 2, 3, 10, 100)] == entry["after"]
        assert loss.after(1) < loss.after(100) <= loss.long_run_epsilon


def test_budget_vectors_replay_through_pythons_ledger() -> None:
    import math

    from deniable.client.budget import Budget, PrivacyLedger
    from deniable.client.errors import BudgetExceededError

    section = VECTORS["budgets"]
    budgets = {name: Budget(b["epsilon"], b["period"]) for name, b in section["budgets"].items()}
    clock = [0.0]
    ledger = PrivacyLedger(None, budgets, clock=lambda: clock[0], max_metric_epsilon=math.inf)
    for entry in section["sequence"]:
        clock[0] = entry["ms"] / 1000
        try:
            ledger.charge(entry["metric"], entry["epsilon"])
            admitted = True
        except BudgetExceededError:
            admitted = False
        assert admitted == entry["admitted"], entry
    assert {e["admitted"] for e in section["sequence"]} == {True, False}


def test_open_domain_entries_hold_in_python() -> None:
    section = VECTORS["open_domain"]
    for entry in section["mechanisms"]:
        m = OpenDomainSketch.from_id(entry["id"])
        assert (str(m.p), str(m.q), str(m.likelihood_ratio), m.epsilon, m.width) == (
            entry["p"], entry["q"], entry["likelihood_ratio"], entry["epsilon"], entry["width"])
    for mechanism_id in section["invalid_ids"]:
        with pytest.raises(InvalidParameterError):
            OpenDomainSketch.from_id(mechanism_id)
    for entry in section["normalise"]:
        if entry["padded"] is None:
            with pytest.raises(InvalidParameterError):
                normalise(entry["value"], entry["max_bytes"], entry["clamp"])
        else:
            assert normalise(entry["value"], entry["max_bytes"], entry["clamp"]).hex() == \
                entry["padded"]
    for entry in section["hashes"]:
        prefix = bytes.fromhex(entry["prefix"])
        assert [f"{a:016x}" for a in hash_constants(entry["level"], entry["seed"],
                                                   len(entry["constants"]))] == entry["constants"]
        for g, expected in entry["buckets"].items():
            assert bucket(prefix, entry["level"], entry["seed"], int(g)) == expected
    for entry in section["perturb"]:
        m = OpenDomainSketch.from_id(entry["mechanism"])
        source = _source(entry["words"])
        assert [m.perturb(v, source) for v in entry["values"]] == entry["cells"]
        assert source._offset == 8 * len(entry["words"])  # every word read, none more
