"""The kind registry: one table of kinds, each module defining its declaration, families,
encoding, substitute rule, payload, width, estimator and presentation hints in one place."""
from __future__ import annotations

import ast
import re
from fractions import Fraction
from pathlib import Path

import pytest

from deniable.client import kinds
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds import (KINDS, REGISTRY, MetricSpec, kind_of, kind_of_mechanism,
                                   parse_mechanism, payload, payload_field, spec_of_mechanism,
                                   width)
from deniable.client.kinds.base import Kind
from deniable.client.mechanism import RandomizedResponse
from deniable.client.numeric import BitMean

SRC = Path(__file__).resolve().parents[2] / "src" / "deniable"

SPECS = {
    "boolean": MetricSpec.build("boolean", epsilon=1.0),
    "categorical": MetricSpec.build("categorical", epsilon=1.0, categories=["a", "b", "c"]),
    "histogram": MetricSpec.build("histogram", epsilon=1.0, edges=[0, 10, 20]),
    "numeric": MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10),
    "open": MetricSpec.build("open", epsilon=1.0, max_bytes=8),
}


def test_the_registry_holds_the_kinds_in_their_historical_order() -> None:
    assert KINDS == ("boolean", "categorical", "histogram", "numeric", "open")
    assert all(isinstance(k, Kind) and k.name == name for name, k in REGISTRY.items())


def test_an_unregistered_kind_is_refused_by_name() -> None:
    with pytest.raises(InvalidParameterError, match="kind must be one of boolean, categorical"):
        kind_of("string")


@pytest.mark.parametrize("name", KINDS)
def test_a_spec_delegates_to_its_kind(name: str) -> None:
    spec = SPECS[name]
    kind = kind_of(name)
    assert spec.kind_object is kind
    assert spec.mechanism.id.split(":", 1)[0] in {f.prefix for f in kind.families}
    assert spec.labels == kind.slot_labels(spec)
    assert MetricSpec.from_document(spec.describe(), spec.mechanism) == spec


@pytest.mark.parametrize(("name", "field", "slots"), [
    ("boolean", "bit", 2), ("categorical", "index", 4), ("histogram", "index", 3),
    ("numeric", "bit", 2), ("open", "cell", 1 + 8 * 1024 * 4)])
def test_payload_field_and_width_come_from_the_family(name: str, field: str,
                                                      slots: int) -> None:
    mechanism_id = SPECS[name].mechanism.id
    assert payload_field(mechanism_id) == field
    assert width(mechanism_id) == slots


def test_a_bitset_answer_travels_as_hex_and_every_other_as_the_int() -> None:
    spec = MetricSpec.build("categorical", epsilon=1.0,
                            categories=[f"c{i}" for i in range(40)])
    assert payload_field(spec.mechanism.id) == "bits"  # OUE or SS at this size
    assert payload(spec.mechanism, 0b101) == spec.mechanism.encode_bits(0b101)  # type: ignore[union-attr]
    assert payload(SPECS["boolean"].mechanism, 1) == 1
    assert payload(SPECS["histogram"].mechanism, 1) == 1


@pytest.mark.parametrize(("name", "substitute", "percent", "per_category", "word"), [
    ("boolean", "other", True, False, "yes"),
    ("categorical", "lowest", True, True, "category"),
    ("histogram", "nearest", True, True, "bucket"),
    ("numeric", "nearest", False, False, "mean")])
def test_each_kind_states_its_rules_and_presentation(name: str, substitute: str, percent: bool,
                                                     per_category: bool, word: str) -> None:
    kind = kind_of(name)
    assert (kind.substitute, kind.percent, kind.per_category, kind.slot_word) == \
        (substitute, percent, per_category, word)
    assert kind.layered == (name == "boolean")
    assert kind.buckets == (name == "histogram")


def test_the_estimator_inverts_the_expected_count_exactly_in_fractions() -> None:
    # Exact identities, no sampling: expected ones = n (Q + share (P1 - Q)).
    for name in ("boolean", "categorical", "histogram"):
        spec = SPECS[name]
        p1, q = spec.mechanism.channel
        for share in (Fraction(0), Fraction(1, 3), Fraction(1)):
            n = Fraction(1000)
            ones = n * (q + share * (p1 - q))
            assert kind_of(name).estimate(spec, float(ones), float(n)) == pytest.approx(
                float(share), abs=1e-12)
    spec = SPECS["numeric"]
    p1, q = spec.mechanism.channel
    ones = 1000 * (q + Fraction(3, 10) * (p1 - q))  # mean 3 in [0, 10]
    assert kind_of("numeric").estimate(spec, float(ones), 1000.0) == pytest.approx(3.0, abs=1e-9)
    assert kind_of("numeric").scale(spec) == (0.0, 10.0)
    assert kind_of("boolean").scale(SPECS["boolean"]) is None


def test_the_estimator_is_plain_arithmetic_that_takes_arrays() -> None:
    np = pytest.importorskip("numpy")
    spec = SPECS["categorical"]
    ones = np.array([100.0, 200.0, 300.0])
    got = kind_of("categorical").estimate(spec, ones, np.array([600.0, 600.0, 600.0]))
    expected = [kind_of("categorical").estimate(spec, float(o), 600.0) for o in ones]
    assert got.tolist() == pytest.approx(expected, rel=1e-15)


def test_a_bare_mechanism_declares_a_boolean_or_numeric_metric_only() -> None:
    rr = RandomizedResponse()
    assert kind_of_mechanism(rr).name == "boolean"
    assert spec_of_mechanism(rr) == MetricSpec("boolean", rr)
    bm = parse_mechanism(SPECS["numeric"].mechanism.id)
    assert isinstance(bm, BitMean) and spec_of_mechanism(bm).kind == "numeric"
    with pytest.raises(InvalidParameterError, match="needs its declared categories"):
        spec_of_mechanism(SPECS["categorical"].mechanism)


@pytest.mark.parametrize(("name", "value", "encoded"), [
    ("boolean", True, True), ("boolean", 0, False), ("categorical", "c", 2),
    ("histogram", 10, 1), ("histogram", 20, 1), ("numeric", 2.5, Fraction(5, 2))])
def test_each_kind_encodes_its_true_value(name: str, value: object, encoded: object) -> None:
    assert SPECS[name].encode(value) == encoded


@pytest.mark.parametrize(("name", "value"), [
    ("boolean", "yes"), ("categorical", "d"), ("histogram", 21), ("numeric", -1)])
def test_a_refused_value_is_never_echoed(name: str, value: object) -> None:
    spec = SPECS[name]
    with pytest.raises(InvalidParameterError) as info:
        spec.encode(value)
    message = spec.kind_object.refusal_message("m", spec, value)
    for text in (str(info.value), message):
        assert repr(value) not in text and f" {value} " not in text


NAMES = "|".join(KINDS)
NAMED = re.compile(
    rf'kind"?\)? ?[!=]= ?"(?:{NAMES})"'  # kind == "numeric", getattr(p, "kind") != "open"
    rf'|kind in \("(?:{NAMES})"'  # kind in ("categorical", "histogram")
    rf'|kinds ?(?:&|<=|>=|==) ?\{{"(?:{NAMES})"'  # kinds & {"categorical", ...}
    rf'|"(?:{NAMES})" (?:not )?in kinds')  # "numeric" in kinds
OUTSIDE = sorted(str(p.relative_to(SRC)) for package in ("analysis", "core", "cli", "collector",
                                                          "client", "audit")
                 for p in (SRC / package).rglob("*.py") if "kinds" not in p.parts)


@pytest.mark.parametrize("module", OUTSIDE)
def test_code_outside_the_kinds_package_asks_the_kind_instead_of_naming_it(module: str) -> None:
    text = (SRC / module).read_text()
    ast.parse(text)  # a real module, read whole
    assert NAMED.findall(text) == []


def test_the_name_check_sees_each_way_of_naming_a_kind() -> None:
    assert len(OUTSIDE) > 100 and "core/window.py" in OUTSIDE and "cli/plan.py" in OUTSIDE
    for line in ('if kind == "numeric":', 'getattr(p, "kind") != "open"',
                 'kind in ("categorical", "histogram")', 'if kinds & {"histogram"}:',
                 'if "numeric" in kinds:', 'kinds <= {"boolean"}', 'memo.kind == "numeric"'):
        assert NAMED.findall(line), line
    assert not NAMED.findall('if kind in ("batch", "batch_applied"):')  # a key kind, not a kind


def test_the_dashboard_script_names_no_kind() -> None:
    """dashboard.js draws from the hints the server takes from the kind (``view``,
    ``percent``, ``slot_word``, ``contiguous``, ``digits``, ``value_range``): it reads no
    ``kind`` field and spells no kind's name as a string."""
    text = (SRC / "collector" / "static" / "dashboard.js").read_text()
    assert re.findall(r"\.kind\b|\bkind\s*[!=]==?", text) == []
    assert re.findall(r"""["'`](?:%s)["'`]""" % "|".join(KINDS), text) == []


def test_the_kinds_package_holds_one_module_per_registered_kind() -> None:
    modules = {p.stem for p in (SRC / "client" / "kinds").glob("*.py")} - {"__init__", "base"}
    assert modules == set(KINDS)
    assert kinds.__all__ and all(hasattr(kinds, name) for name in kinds.__all__)
