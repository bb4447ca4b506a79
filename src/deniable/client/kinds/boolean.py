"""The boolean kind: a yes/no answer under randomized response (``rr:``, wire field ``bit``).

A refused new answer is sent as the other value's answer if that one is paid for.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import (RR, Declaration, Family, Guard, Kind, Mechanism,
                                        Substitute)
from deniable.client.mechanism import RandomizedResponse

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec


class Boolean(Kind):
    """A bool (or 0/1); the estimate is the share answering yes."""

    name: ClassVar[str] = "boolean"
    families: ClassVar[tuple[Family, ...]] = (RR,)
    substitute: ClassVar[Substitute] = "other"
    slot_word: ClassVar[str] = "yes"
    layered: ClassVar[bool] = True
    channel_names: ClassVar[tuple[str, str] | None] = ("p_yes_given_yes", "p_yes_given_no")

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        return RandomizedResponse.from_epsilon(epsilon), ""

    def encode(self, spec: MetricSpec, value: object) -> bool:
        # One test for both values: a chain of `is True or is False` costs a false value one
        # more step, a timing difference that `deniable audit` measures.
        if value.__class__ is not bool and value not in (0, 1):
            raise InvalidParameterError(
                f"true_value must be a bool. Got a {type(value).__name__} instead.")
        return bool(value)

    def answer(self, guard: Guard, metric: str, mechanism: Mechanism,
               value: bool | int | Fraction) -> int:
        # The boolean memo: one permanent answer per value, an optional instantaneous layer,
        # constant time in the value; a refused new answer is the other value's if paid.
        return guard.perturb(metric, mechanism, value)  # type: ignore[arg-type]

    def refusal(self, spec: MetricSpec, value: object) -> str:
        return f"takes a bool. Got a {type(value).__name__}"

    def refusal_message(self, metric: str, spec: MetricSpec, value: object) -> str:
        return f"true_value must be a bool. Got a {type(value).__name__} instead."


KIND = Boolean()
