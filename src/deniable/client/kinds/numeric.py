"""The numeric kind: a number in [lower, upper] under 1BitMean (``bm:``, wire field ``bit``);
the bounds are in the mechanism id. The estimate is the mean, in the metric's unit.

A memoized number is keyed by its alpha-rounded grid point (client/memo.py); a refused new
point is sent as the nearest grid point paid for.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import (BM, Declaration, Declared, Family, Kind, Mechanism, Num,
                                        Substitute, in_range, number, out_of_range)
from deniable.client.mechanism import fraction_text
from deniable.client.numeric import BitMean

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec


class Numeric(Kind):
    """An exact number in range; one estimate, the mean over reports."""

    name: ClassVar[str] = "numeric"
    families: ClassVar[tuple[Family, ...]] = (BM,)
    declares: ClassVar[frozenset[Declared]] = frozenset({"lower", "upper", "clamp"})
    requires: ClassVar[tuple[Declared, ...]] = ("lower", "upper")
    substitute: ClassVar[Substitute] = "nearest"
    percent: ClassVar[bool] = False
    slot_word: ClassVar[str] = "mean"
    memo_note: ClassVar[str] = " (numeric: each grid point of alpha-point rounding)"

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        return BitMean.from_epsilon(epsilon, number("lower", declared.lower),
                                    number("upper", declared.upper)), ""

    def check_mechanism(self, mechanism: Mechanism, declared: Declaration) -> None:
        if isinstance(mechanism, BitMean) and (mechanism.lower, mechanism.upper) != (
                number("lower", declared.lower), number("upper", declared.upper)):
            raise InvalidParameterError(
                f"mechanism {mechanism.id!r} does not match lower = {declared.lower}, "
                f"upper = {declared.upper}")

    def describe(self, spec: MetricSpec) -> dict[str, Any]:
        low, high = bounds(spec)
        return {"lower": fraction_text(low), "upper": fraction_text(high)}

    def encode(self, spec: MetricSpec, value: object) -> Fraction:
        return in_range(spec, value, *bounds(spec))

    def refusal(self, spec: MetricSpec, value: object) -> str:
        return out_of_range(spec, value, *bounds(spec))

    def estimate(self, spec: MetricSpec, ones: Num, n: Num) -> Num:
        low, high = self.value_range(spec)
        share = super().estimate(spec, ones, n)
        return low + (high - low) * share  # type: ignore[operator, return-value]

    def scale(self, spec: MetricSpec) -> tuple[float, float] | None:
        return self.value_range(spec)

    def value_range(self, spec: MetricSpec) -> tuple[float, float]:
        low, high = bounds(spec)
        return (float(low), float(high))


def bounds(spec: MetricSpec) -> tuple[Fraction, Fraction]:
    """The declared [lower, upper] of a numeric spec (held by its mechanism)."""
    mechanism = spec.mechanism
    assert isinstance(mechanism, BitMean)
    return mechanism.lower, mechanism.upper


KIND = Numeric()
