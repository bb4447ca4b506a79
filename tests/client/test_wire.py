"""The v1 wire format: one shape, validated strictly, summed per metric."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client import WireFormatError
from deniable.client.wire import BATCH_ID, decode_batch, encode_batch, new_batch_id

REGISTRY = {"feature_x_enabled": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2"}
BATCH_ID_OK = "0123456789abcdef0123456789abcdef"


def pointers(doc: object, **kwargs: int) -> list[str]:
    with pytest.raises(WireFormatError) as info:
        decode_batch(doc, REGISTRY, **kwargs)
    return [p.pointer for p in info.value.problems]


def test_a_valid_batch_is_summed_per_metric() -> None:
    doc = encode_batch(BATCH_ID_OK, [("feature_x_enabled", "rr:1/2:1/2", 1),
                                     ("dark_mode", "rr:3/4:1/2", 0),
                                     ("feature_x_enabled", "rr:1/2:1/2", 0),
                                     ("feature_x_enabled", "rr:1/2:1/2", 1)])
    batch = decode_batch(doc, REGISTRY)
    assert batch.n_reports == 4
    assert batch.tallies["feature_x_enabled"].n == 3
    assert batch.tallies["feature_x_enabled"].ones == 2
    assert batch.tallies["dark_mode"].n == 1 and batch.tallies["dark_mode"].ones == 0


def test_the_digest_follows_content_not_order() -> None:
    a = decode_batch(encode_batch(BATCH_ID_OK, [("dark_mode", "rr:3/4:1/2", 1),
                                                ("feature_x_enabled", "rr:1/2:1/2", 0)]), REGISTRY)
    b = decode_batch(encode_batch(BATCH_ID_OK, [("feature_x_enabled", "rr:1/2:1/2", 0),
                                                ("dark_mode", "rr:3/4:1/2", 1)]), REGISTRY)
    c = decode_batch(encode_batch(BATCH_ID_OK, [("feature_x_enabled", "rr:1/2:1/2", 1),
                                                ("dark_mode", "rr:3/4:1/2", 1)]), REGISTRY)
    assert a.digest == b.digest != c.digest


def test_batch_ids_are_random_lowercase_hex() -> None:
    ids = {new_batch_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(BATCH_ID.match(i) for i in ids)


@pytest.mark.parametrize("bit", [True, False, 1.0, 0.0, 2, -1, "1", None, [1]])
def test_a_bit_must_be_exactly_0_or_1(bit: object) -> None:
    doc = {"batch_id": BATCH_ID_OK,
           "reports": [{"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": bit}]}
    assert pointers(doc) == ["/reports/0/bit"]


def test_every_offending_field_is_named_by_pointer() -> None:
    doc = {"batch_id": "XYZ", "extra": 1, "reports": [
        {"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": 1},
        {"metric": "nope", "mechanism": "rr:1/2:1/2", "bit": 1},
        {"metric": "dark_mode", "mechanism": "rr:1/2:1/2", "bit": 1},
        {"metric": "dark_mode", "mechanism": "rr:3/4:1/2"},
        {"metric": "dark_mode", "mechanism": "rr:3/4:1/2", "bit": 0, "device": "abc"},
        "not an object",
        {"metric": ["x"], "mechanism": "rr:1/2:1/2", "bit": 1},
    ]}
    assert pointers(doc) == ["/extra", "/batch_id"]  # top-level problems stop the check
    doc["batch_id"], _ = BATCH_ID_OK, doc.pop("extra")
    assert pointers(doc) == ["/reports/1/metric", "/reports/2/mechanism", "/reports/3/bit",
                             "/reports/4/device", "/reports/5", "/reports/6/metric"]


@pytest.mark.parametrize("doc, expected", [
    ([], [""]), ("x", [""]), ({}, ["/batch_id", "/reports"]),
    ({"batch_id": BATCH_ID_OK, "reports": []}, ["/reports"]),
    ({"batch_id": BATCH_ID_OK, "reports": {}}, ["/reports"]),
    ({"batch_id": BATCH_ID_OK.upper(), "reports": [
        {"metric": "dark_mode", "mechanism": "rr:3/4:1/2", "bit": 0}]}, ["/batch_id"]),
    ({"batch_id": BATCH_ID_OK + "\n", "reports": [
        {"metric": "dark_mode", "mechanism": "rr:3/4:1/2", "bit": 0}]}, ["/batch_id"]),
    ({"batch_id": BATCH_ID_OK, "reports": [], "a/b~c": 1}, ["/a~1b~0c", "/reports"]),
])
def test_malformed_batches(doc: object, expected: list[str]) -> None:
    assert pointers(doc) == expected


def test_too_many_reports() -> None:
    report = {"metric": "dark_mode", "mechanism": "rr:3/4:1/2", "bit": 0}
    doc = {"batch_id": BATCH_ID_OK, "reports": [report] * 11}
    assert pointers(doc, max_reports=10) == ["/reports"]
    assert decode_batch(doc, REGISTRY, max_reports=11).n_reports == 11


MECHANISM_OF = {"feature_x_enabled": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2"}
any_report = st.one_of(
    st.fixed_dictionaries({
        "metric": st.sampled_from(["feature_x_enabled", "dark_mode", "unknown", 5]),
        "mechanism": st.sampled_from(["rr:1/2:1/2", "rr:3/4:1/2", None]),
        "bit": st.sampled_from([0, 1, True, False, 1.0, 0.0, 2, -1, None, "1"]),
    }, optional={"extra": st.just(1)}),
    st.fixed_dictionaries({"metric": st.just("dark_mode"), "bit": st.just(1)}),
    st.sampled_from(["a report", 1, None, ["dark_mode", "rr:3/4:1/2", 1]]),
)


def reference_tallies(reports: list) -> dict[str, tuple[int, int]] | None:
    """The rules, one report at a time, as plainly as they can be written."""
    tallies: dict[str, tuple[int, int]] = {}
    for r in reports:
        if not isinstance(r, dict) or set(r) != {"metric", "mechanism", "bit"}:
            return None
        if not isinstance(r["metric"], str) or r["metric"] not in MECHANISM_OF:
            return None
        if r["mechanism"] != MECHANISM_OF[r["metric"]]:
            return None
        if type(r["bit"]) is not int or r["bit"] not in (0, 1):
            return None
        n, ones = tallies.get(r["metric"], (0, 0))
        tallies[r["metric"]] = (n + 1, ones + r["bit"])
    return tallies


@given(st.lists(any_report, min_size=1, max_size=30))
def test_the_fast_path_accepts_and_sums_exactly_what_the_rules_allow(reports: list) -> None:
    doc = {"batch_id": BATCH_ID_OK, "reports": reports}
    expected = reference_tallies(reports)
    if expected is None:
        with pytest.raises(WireFormatError):
            decode_batch(doc, MECHANISM_OF)
    else:
        batch = decode_batch(doc, MECHANISM_OF)
        assert {m: (t.n, t.ones) for m, t in batch.tallies.items()} == expected
        assert all(t.mechanism == MECHANISM_OF[m] for m, t in batch.tallies.items())


valid_report = st.sampled_from(sorted(MECHANISM_OF)).flatmap(
    lambda m: st.fixed_dictionaries({"metric": st.just(m), "mechanism": st.just(MECHANISM_OF[m]),
                                     "bit": st.sampled_from([0, 1])}))


@pytest.mark.slow
@given(st.lists(valid_report, min_size=1, max_size=40), st.one_of(st.none(), any_report),
       st.integers(0, 40))
def test_one_bad_report_among_good_ones_is_caught(good: list, bad: object, at: int) -> None:
    reports = list(good)
    if bad is not None:
        reports.insert(min(at, len(reports)), bad)
    test_the_fast_path_accepts_and_sums_exactly_what_the_rules_allow.hypothesis.inner_test(reports)
