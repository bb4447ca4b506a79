"""The histogram kind: a number put in declared buckets [e_i, e_i+1) (the last closed),
under the categorical mechanisms; the edges are digested into the id's tag.

A refused new answer is sent as the nearest bucket paid for (buckets are ordered).
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from deniable.client.categorical import MAX_CATEGORIES, MIN_CATEGORIES
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import (Declaration, Declared, Substitute, in_range, label,
                                        out_of_range)
from deniable.client.kinds.categorical import Categorical
from deniable.client.mechanism import fraction_text

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec


class Histogram(Categorical):
    """A number, counted in its bucket; one estimated share per bucket."""

    name: ClassVar[str] = "histogram"
    declares: ClassVar[frozenset[Declared]] = frozenset({"edges", "clamp"})
    requires: ClassVar[tuple[Declared, ...]] = ("edges",)
    substitute: ClassVar[Substitute] = "nearest"
    slot_word: ClassVar[str] = "bucket"
    declared_word: ClassVar[str] = "edges"
    buckets: ClassVar[bool] = True

    def labels(self, spec: MetricSpec) -> tuple[str, ...]:
        return bucket_labels(spec.edges)

    def tag_text(self, labels: Sequence[str], declared: Declaration) -> list[str]:
        return [fraction_text(e) for e in declared.edges]

    def describe(self, spec: MetricSpec) -> dict[str, Any]:
        return {"edges": [fraction_text(e) for e in spec.edges],
                "categories": list(spec.categories)}

    def encode(self, spec: MetricSpec, value: object) -> int:
        number = in_range(spec, value, spec.edges[0], spec.edges[-1])
        return min(bisect.bisect_right(spec.edges, number) - 1, len(spec.edges) - 2)

    def refusal(self, spec: MetricSpec, value: object) -> str:
        return out_of_range(spec, value, spec.edges[0], spec.edges[-1])


def bucket_labels(edges: Sequence[Fraction]) -> tuple[str, ...]:
    """The bucket labels of strictly increasing ``edges``: "[0, 10)", ..., "[90, 100]".

    Raises:
        InvalidParameterError: too few or many edges, or edges that do not increase.
    """
    if not MIN_CATEGORIES + 1 <= len(edges) <= MAX_CATEGORIES + 1:
        raise InvalidParameterError(
            f"a histogram declares {MIN_CATEGORIES + 1} to {MAX_CATEGORIES + 1} edges "
            f"({MIN_CATEGORIES} to {MAX_CATEGORIES} buckets). Got {len(edges)}.")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise InvalidParameterError("histogram edges must increase strictly")
    last = len(edges) - 2
    return tuple(f"[{label(a)}, {label(b)}{']' if i == last else ')'}"
                 for i, (a, b) in enumerate(zip(edges, edges[1:])))


KIND = Histogram()
