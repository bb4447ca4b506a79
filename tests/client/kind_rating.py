"""A toy metric kind, for tests only: a star rating, 1 to 5 stars, under k-ary randomized
response (the ``grr:`` family, wire field ``index``); one estimated share per star.

It is issue 31's acceptance test ("a new kind needs new files and a registration"): this file
and ``deniable.client.kinds.register(Rating())`` are all it takes for the client, the
collector, the analysis and the report to handle it. Nothing outside this file names it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from deniable.client.categorical import KaryRandomizedResponse, domain_tag
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import GRR, Declaration, Family, Kind, Mechanism, Substitute

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec

STARS = ("1 star", "2 stars", "3 stars", "4 stars", "5 stars")
TAG = domain_tag(STARS)
"""The labels' digest in the mechanism id: the same for every rating metric."""


class Rating(Kind):
    """A whole number of stars in 1..5; one estimated share of devices per star."""

    name: ClassVar[str] = "rating"
    families: ClassVar[tuple[Family, ...]] = (GRR,)
    substitute: ClassVar[Substitute] = "nearest"  # stars are ordered
    slot_word: ClassVar[str] = "star"
    per_category: ClassVar[bool] = True
    bare: ClassVar[bool] = False  # a bare grr: id stays a categorical metric's

    def check(self, spec: MetricSpec) -> None:
        super().check(spec)
        mechanism = spec.mechanism
        if not isinstance(mechanism, KaryRandomizedResponse) or \
                (mechanism.d, mechanism.tag) != (len(STARS), TAG):
            raise InvalidParameterError(
                f"a rating metric needs a grr:5:...:{TAG} mechanism. Got {mechanism.id!r}.")

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        return KaryRandomizedResponse.from_epsilon(epsilon, len(STARS), TAG), ""

    def encode(self, spec: MetricSpec, value: object) -> int:
        if value.__class__ is not int or not 1 <= value <= len(STARS):  # type: ignore[operator]
            raise InvalidParameterError(f"a rating is a whole number of stars from 1 to "
                                        f"{len(STARS)}. Got a {type(value).__name__}.")
        return value - 1  # type: ignore[operator, no-any-return]

    def refusal(self, spec: MetricSpec, value: object) -> str:
        return f"takes a whole number of stars from 1 to {len(STARS)}. Got a " \
               f"{type(value).__name__}"

    def slot_labels(self, spec: MetricSpec) -> tuple[str, ...]:
        return STARS
