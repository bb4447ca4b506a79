"""The categorical kind: one of 2..1024 declared labels, under GRR (``grr:``, wire field
``index``), OUE or subset selection (``oue:``/``ss:``, wire field ``bits``).

The label list is digested into the mechanism id's tag: a changed list is a new metric
version. A refused new answer is sent as the lowest category index paid for.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from deniable.client.categorical import (MAX_CATEGORIES, MIN_CATEGORIES, KaryRandomizedResponse,
                                         SubsetSelection, UnaryEncoding, choose_categorical,
                                         domain_tag)
from deniable.client.errors import InvalidParameterError
from deniable.client.kinds.base import (GRR, OUE, SS, Declaration, Declared, Family, Kind,
                                        Mechanism, Substitute, shown)

if TYPE_CHECKING:
    from deniable.client.kinds import MetricSpec

MAX_CATEGORY_LENGTH = 100


class Categorical(Kind):
    """A label; one estimated share per category. The base of ``Histogram``."""

    name: ClassVar[str] = "categorical"
    families: ClassVar[tuple[Family, ...]] = (GRR, OUE, SS)
    declares: ClassVar[frozenset[Declared]] = frozenset({"categories"})
    requires: ClassVar[tuple[Declared, ...]] = ("categories",)
    substitute: ClassVar[Substitute] = "lowest"
    slot_word: ClassVar[str] = "category"
    per_category: ClassVar[bool] = True
    bare: ClassVar[bool] = False
    declared_word: ClassVar[str] = "categories"

    def labels(self, spec: MetricSpec) -> tuple[str, ...]:
        return spec.categories

    def tag_text(self, labels: Sequence[str], declared: Declaration) -> list[str]:
        """What the mechanism id's tag digests: the labels (a histogram: its edges)."""
        return list(labels)

    def check(self, spec: MetricSpec) -> None:
        labels = self.labels(spec)
        object.__setattr__(spec, "categories", labels)
        check_categories(labels)
        mechanism = spec.mechanism
        assert isinstance(mechanism, (KaryRandomizedResponse, UnaryEncoding, SubsetSelection))
        tag = domain_tag(self.tag_text(labels, Declaration(labels, spec.edges, None, None)))
        if mechanism.d != len(labels) or mechanism.tag != tag:
            raise InvalidParameterError(
                f"mechanism {mechanism.id!r} does not match the declared "
                f"{self.declared_word}: they need d = {len(labels)} and tag {tag}")
        object.__setattr__(spec, "_index", {label: i for i, label in enumerate(labels)})

    def choose(self, epsilon: float, declared: Declaration) -> tuple[Mechanism, str]:
        check_categories(declared.labels)
        tag = domain_tag(self.tag_text(declared.labels, declared))
        return choose_categorical(epsilon, len(declared.labels), tag)

    def describe(self, spec: MetricSpec) -> dict[str, Any]:
        return {"categories": list(spec.categories)}

    def encode(self, spec: MetricSpec, value: object) -> int:
        index = spec._index.get(value) if isinstance(value, str) else None
        if index is None:
            raise InvalidParameterError(
                f"the value must be one of the declared categories ({shown(spec.categories)})"
                + (f". Got a {type(value).__name__} instead." if not isinstance(value, str)
                   else " and it is not."))  # never echo the value: it is the secret
        return index

    def refusal(self, spec: MetricSpec, value: object) -> str:
        return (f"takes one of its declared categories ({shown(spec.categories)}); the value "
                f"given is not one" if isinstance(value, str) else
                f"takes one of its declared categories (a str). Got a {type(value).__name__}")

    def slot_labels(self, spec: MetricSpec) -> tuple[str, ...]:
        return spec.categories


def check_categories(labels: Sequence[str]) -> None:
    """Refuse a label list: too short or long, an empty or long label, or a repeat."""
    if not MIN_CATEGORIES <= len(labels) <= MAX_CATEGORIES:
        raise InvalidParameterError(
            f"a categorical metric declares {MIN_CATEGORIES} to {MAX_CATEGORIES} categories. "
            f"Got {len(labels)}.")
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label or len(label) > MAX_CATEGORY_LENGTH:
            raise InvalidParameterError(
                f"categories[{i}] must be a non-empty string of at most "
                f"{MAX_CATEGORY_LENGTH} characters. Got {label!r}.")
    if len(set(labels)) != len(labels):
        raise InvalidParameterError("categories must be distinct")


KIND = Categorical()
