"""Mechanism ids are bounded in the one mechanism module, so collector and client refuse the
same ids, with a DeniableError, and every accepted id can be drawn from (issue 20 part 6)."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deniable.client.errors import DeniableError, InvalidParameterError, WireFormatError
from deniable.client.mechanism import MAX_ID_DENOMINATOR, RandomizedResponse
from deniable.client.metrics import parse_catalogue
from deniable.client.randomness import SecureBits
from deniable.collector.live_registry import validate

HUGE = "rr:1/" + "9" * 955 + ":1/2"


def catalogue_of(mechanism_id: str) -> dict:
    mechanism = RandomizedResponse(Fraction(1, 2), Fraction(1, 2))
    return {"metrics": [{"name": "m", "mechanism": mechanism_id,
                         "p_yes_given_yes": str(mechanism.p_yes_given_yes),
                         "p_yes_given_no": str(mechanism.p_yes_given_no)}]}


@pytest.mark.parametrize("mechanism_id", [
    HUGE, f"rr:1/{2**64 + 1}:1/2", f"rr:1/2:1/{2**64 + 1}", f"rr:1/{10**20}:1/2",
    "rr:1/" + "0" * 30 + "3:1/2", "rr:1/3:1/2\n"])
def test_ids_past_the_bound_are_refused_on_both_sides(mechanism_id: str) -> None:
    with pytest.raises(InvalidParameterError) as raised:
        RandomizedResponse.from_id(mechanism_id)
    assert len(str(raised.value)) < 400  # a 955-digit id is not echoed whole
    with pytest.raises(InvalidParameterError, match="^mechanism: "):  # the collector's registry
        validate("m", mechanism_id)
    with pytest.raises(WireFormatError) as client_side:  # the client's catalogue
        parse_catalogue(catalogue_of(mechanism_id))
    assert isinstance(client_side.value, DeniableError)


@given(truth_den=st.integers(2, MAX_ID_DENOMINATOR), forced_den=st.integers(2, MAX_ID_DENOMINATOR),
       data=st.data())
def test_every_id_within_the_bound_parses_and_draws(truth_den: int, forced_den: int,
                                                    data: st.DataObject) -> None:
    truth = Fraction(data.draw(st.integers(1, truth_den - 1)), truth_den)
    forced = Fraction(data.draw(st.integers(1, forced_den - 1)), forced_den)
    mechanism = RandomizedResponse(truth, forced)
    assert RandomizedResponse.from_id(mechanism.id) == mechanism
    assert mechanism.perturb(True, SecureBits()) in (0, 1)  # one draw of at most 64 bits


def test_the_largest_denominator_is_2_to_the_64() -> None:
    edge = RandomizedResponse.from_id(f"rr:1/{2**64}:{2**64 - 1}/{2**64}")
    assert edge.truth.denominator == MAX_ID_DENOMINATOR == 2**64
    assert {edge.perturb(b, SecureBits()) for b in (0, 1) for _ in range(50)} <= {0, 1}
    wide = RandomizedResponse.from_epsilon(1.0, denominator_bits=62)
    assert RandomizedResponse.from_id(wide.id) == wide  # still round-trips
