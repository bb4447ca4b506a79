"""Public dimensions: declarations, values as counted, series, and their wire field."""
from __future__ import annotations

import pytest

from deniable.client.dimensions import Dimension, DimensionError, Dimensions, series_values
from deniable.client.errors import InvalidParameterError, WireFormatError
from deniable.client.wire import decode_batch, encode_batch

DECLARED = {"app_version": {"values": ["2.3", "2.4"], "other": True},
            "platform": {"values": ["android", "ios"]}}
DIMS = Dimensions.parse(DECLARED, [["platform", "app_version"]])
RR = "rr:1/2:1/2"


def test_values_are_counted_as_listed_or_as_other_where_declared() -> None:
    assert DIMS.normalize({"app_version": "2.5", "platform": "ios"}) == \
        {"app_version": "other", "platform": "ios"}
    with pytest.raises(DimensionError) as caught:
        DIMS.normalize({"platform": "web"})
    assert caught.value.field == "platform" and "android, ios" in str(caught.value)
    with pytest.raises(DimensionError, match="not a dimension"):
        DIMS.normalize({"channel": "beta"})
    with pytest.raises(DimensionError, match="declares none"):
        Dimensions().normalize({"platform": "ios"})


def test_marginals_are_counted_and_the_cross_product_only_when_declared() -> None:
    assert DIMS.series({"app_version": "2.4", "platform": "ios"}) == \
        ["app_version=2.4", "platform=ios", "app_version=2.4,platform=ios"]
    assert DIMS.series({"platform": "ios"}) == ["platform=ios"]  # no combination without both
    plain = Dimensions.parse(DECLARED)
    assert plain.series({"app_version": "2.4", "platform": "ios"}) == \
        ["app_version=2.4", "platform=ios"]
    assert DIMS.all_series("app_version") == ["app_version=2.3", "app_version=2.4",
                                              "app_version=other"]
    assert len(DIMS.all_series("platform,app_version")) == 3 * 2
    assert series_values("app_version=2.4,platform=ios") == {"app_version": "2.4",
                                                             "platform": "ios"}
    assert Dimensions.parse(DIMS.describe()["dimensions"],
                            DIMS.describe()["combinations"]) == DIMS


@pytest.mark.parametrize("declaration, combinations", [
    ({f"d{i}": {"values": ["a"]} for i in range(4)}, []),          # too many dimensions
    ({"Platform": {"values": ["a"]}}, []),                          # bad name
    ({"platform": {"values": []}}, []),                             # no values
    ({"platform": {"values": ["a", "a"]}}, []),                     # repeated value
    ({"platform": {"values": ["other"]}}, []),                      # reserved value
    ({"platform": {"values": ["a:b"]}}, []),                        # breaks a key
    ({"platform": {"values": [f"v{i}" for i in range(101)]}}, []),  # too many values
    ({"platform": {"values": ["a"], "colour": 1}}, []),             # unknown field
    ({"platform": {"values": ["a"]}}, [["platform", "nope"]]),      # undeclared combination
    ({"platform": {"values": ["a"]}}, [["platform"]]),              # a combination of one
    ({"platform": {"values": ["a"]}, "app": {"values": ["b"]}}, [[1, "app"]]),  # a non-name
])
def test_bad_declarations_are_refused(declaration: dict, combinations: list) -> None:
    with pytest.raises(InvalidParameterError):
        Dimensions.parse(declaration, combinations)
    assert isinstance(Dimension("platform", ("a",)), Dimension)


def test_the_wire_counts_each_report_in_its_total_and_its_series() -> None:
    doc = encode_batch("ab" * 16, [("dark_mode", RR, 1, {"platform": "ios", "app_version": "9"}),
                                   ("dark_mode", RR, 0, {"platform": "ios"}),
                                   ("dark_mode", RR, 1)])
    assert "dims" not in doc["reports"][2]
    batch = decode_batch(doc, {"dark_mode": RR}, dimensions={"dark_mode": DIMS})
    tally = batch.tallies["dark_mode"]
    assert tally.counts == (3, 2)
    assert dict(tally.series) == {"platform=ios": (2, 1), "app_version=other": (1, 1),
                                  "app_version=other,platform=ios": (1, 1)}
    plain = decode_batch(encode_batch("ab" * 16, [("dark_mode", RR, 1)]), {"dark_mode": RR})
    assert batch.digest != plain.digest  # the series are part of what a batch id claims


@pytest.mark.parametrize("dims, pointer", [
    ({"platform": "web"}, "/reports/0/dims/platform"),
    ({"channel": "beta"}, "/reports/0/dims/channel"),
    ({"platform": 3}, "/reports/0/dims/platform"),
    (["ios"], "/reports/0/dims"),
])
def test_a_bad_dimension_names_its_field_and_counts_nothing(dims: object, pointer: str) -> None:
    doc = {"batch_id": "ab" * 16,
           "reports": [{"metric": "dark_mode", "mechanism": RR, "bit": 1, "dims": dims}]}
    with pytest.raises(WireFormatError) as caught:
        decode_batch(doc, {"dark_mode": RR}, dimensions={"dark_mode": DIMS})
    assert [p.pointer for p in caught.value.problems] == [pointer]


def test_dimensions_on_a_metric_that_declares_none_are_refused() -> None:
    doc = encode_batch("ab" * 16, [("dark_mode", RR, 1, {"platform": "ios"})])
    with pytest.raises(WireFormatError) as caught:
        decode_batch(doc, {"dark_mode": RR})
    assert "declares none" in caught.value.problems[0].detail
