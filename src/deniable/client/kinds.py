"""Metric kinds: what a metric asks, which mechanism answers it, and how a value is encoded.

    spec = MetricSpec.build("categorical", epsilon=2.0,
                            categories=["android", "ios", "windows", "macos", "linux", "other"])
    spec.mechanism.id       # 'grr:6:...:<tag>', chosen by exact variance (spec.choice says why)
    spec.encode("ios")      # 1: the index the mechanism perturbs

Four kinds, each with one mechanism family (ids in ``parse_mechanism``):

==============  ====================================  =========================  ===========
kind            the true value                        mechanism                  wire field
==============  ====================================  =========================  ===========
``boolean``     a bool                                ``rr:`` randomized resp.   ``bit``
``categorical`` one of 2..1024 declared labels        ``grr:``, ``oue:`` or      ``index`` /
                                                      ``ss:`` (subset select.)   ``bits``
``histogram``   a number, put in declared buckets     ``grr:``, ``oue:`` or      as above
                                                      ``ss:``
``numeric``     a number in [lower, upper]            ``bm:`` 1BitMean           ``bit``
==============  ====================================  =========================  ===========

A category list (or a histogram's edges) is digested into the id's tag, so changing it makes
a new mechanism id: a new metric version, counted apart. Values outside the declaration raise
``InvalidParameterError`` at the call, unless the metric declares ``clamp`` (numbers only).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Union

from deniable.client.categorical import (MAX_CATEGORIES, MIN_CATEGORIES, KaryRandomizedResponse,
                                         SubsetSelection, UnaryEncoding, choose_categorical,
                                         domain_tag)
from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import RandomizedResponse, fraction_text
from deniable.client.numeric import BitMean, exact_number

Mechanism = Union[RandomizedResponse, KaryRandomizedResponse, UnaryEncoding, SubsetSelection,
                  BitMean]
KINDS = ("boolean", "categorical", "histogram", "numeric")
_PARSERS: dict[str, Callable[[str], Mechanism]] = {"rr": RandomizedResponse.from_id, "grr": KaryRandomizedResponse.from_id,
            "oue": UnaryEncoding.from_id, "ss": SubsetSelection.from_id, "bm": BitMean.from_id}
_FIELDS = {"rr": "bit", "grr": "index", "oue": "bits", "ss": "bits", "bm": "bit"}
_FAMILY = {"boolean": ("rr",), "categorical": ("grr", "oue", "ss"),
           "histogram": ("grr", "oue", "ss"),
           "numeric": ("bm",)}
MAX_CATEGORY_LENGTH = 100


def family(mechanism_id: str) -> str:
    """The id's prefix: ``rr``, ``grr``, ``oue``, ``ss`` or ``bm`` (unchecked beyond that)."""
    prefix = mechanism_id.split(":", 1)[0] if isinstance(mechanism_id, str) else ""
    if prefix not in _PARSERS:
        raise InvalidParameterError(
            f"mechanism id must start with one of {', '.join(sorted(_PARSERS))} and ':'. "
            f"Got {str(mechanism_id)[:80]!r} instead.")
    return prefix


@functools.lru_cache(maxsize=4096)
def parse_mechanism(mechanism_id: str) -> Mechanism:
    """The mechanism of a canonical id of any kind; non-canonical spellings are refused.

    Raises:
        InvalidParameterError: an id no kind accepts.
    """
    return _PARSERS[family(mechanism_id)](mechanism_id)


def payload_field(mechanism_id: str) -> str:
    """The wire field that carries a report's perturbed value: ``bit``, ``index`` or ``bits``."""
    return _FIELDS[family(mechanism_id)]


def width(mechanism_id: str) -> int:
    """Counter slots per hour for a mechanism id (2, or d + 1 for categorical ones)."""
    prefix = family(mechanism_id)
    if prefix in ("rr", "bm"):
        return 2
    return int(mechanism_id.split(":", 2)[1]) + 1


def _number(name: str, value: object) -> Fraction:
    """A declared number, exact: a float is read as the decimal it prints as (0.1 is 1/10),
    which is what a declaration means; a string as a fraction or decimal."""
    if isinstance(value, str):
        try:
            parsed = Fraction(value)
        except (ValueError, ZeroDivisionError) as exc:
            raise InvalidParameterError(f"{name} must be a number. Got {value!r}.") from exc
        return parsed
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(repr(value))
    return exact_number(name, value)


def _label(value: Fraction) -> str:
    """A bucket edge as people write it: an integer, a short decimal, or a fraction."""
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    return repr(as_float) if Fraction(repr(as_float)) == value else fraction_text(value)


@dataclass(frozen=True)
class MetricSpec:
    """What one metric version asks and how its reports are made.

    Attributes:
        kind: ``boolean``, ``categorical``, ``histogram`` or ``numeric``.
        mechanism: the mechanism every report follows.
        categories: categorical: the labels, in order; histogram: the bucket labels.
        edges: histogram: the bucket edges e_0 < ... < e_d; bucket i is [e_i, e_i+1), the
            last one closed.
        lower, upper: numeric: the declared range (also in the mechanism).
        clamp: numbers outside the declaration are clamped into it instead of refused.
        choice: why this mechanism was chosen (automatic choice), or "" if it was given.
    """

    kind: str
    mechanism: Mechanism
    categories: tuple[str, ...] = ()
    edges: tuple[Fraction, ...] = ()
    clamp: bool = False
    choice: str = ""
    _index: Mapping[str, int] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidParameterError(f"kind must be one of {', '.join(KINDS)}. "
                                        f"Got {self.kind!r} instead.")
        prefix = family(self.mechanism.id)
        if prefix not in _FAMILY[self.kind]:
            raise InvalidParameterError(
                f"a {self.kind} metric needs a {' or '.join(_FAMILY[self.kind])} mechanism. "
                f"Got {self.mechanism.id!r} instead.")
        if not isinstance(self.clamp, bool):
            raise InvalidParameterError(f"clamp must be true or false. Got {self.clamp!r}.")
        if self.clamp and self.kind not in ("histogram", "numeric"):
            raise InvalidParameterError("clamp applies to histogram and numeric metrics only")
        if self.kind in ("categorical", "histogram"):
            labels = self.categories
            if self.kind == "histogram":
                labels = _bucket_labels(self.edges)
                object.__setattr__(self, "categories", labels)
            _check_categories(labels)
            mechanism = self.mechanism
            assert isinstance(mechanism, (KaryRandomizedResponse, UnaryEncoding,
                                          SubsetSelection))
            tag = domain_tag(self._tag_text())
            if mechanism.d != len(labels) or mechanism.tag != tag:
                raise InvalidParameterError(
                    f"mechanism {mechanism.id!r} does not match the declared "
                    f"{'edges' if self.kind == 'histogram' else 'categories'}: they need "
                    f"d = {len(labels)} and tag {tag}")
            object.__setattr__(self, "_index", {label: i for i, label in enumerate(labels)})
        elif self.categories or self.edges:
            raise InvalidParameterError(f"a {self.kind} metric takes no categories or edges")

    def _tag_text(self) -> list[str]:
        return [fraction_text(e) for e in self.edges] if self.kind == "histogram" \
            else list(self.categories)

    # -- construction --------------------------------------------------------------------

    @classmethod
    def build(cls, kind: str = "boolean", *, mechanism: str | Mechanism | None = None,
              epsilon: float | None = None, categories: Sequence[str] = (),
              edges: Sequence[object] = (), lower: object = None, upper: object = None,
              clamp: bool = False) -> MetricSpec:
        """A spec from a declaration: either a ``mechanism`` (id or object) or an
        ``epsilon`` (the mechanism is then chosen: GRR, OUE or SS by exact variance).

        Raises:
            InvalidParameterError: any part of the declaration that does not hold.
        """
        if kind not in KINDS:
            raise InvalidParameterError(f"kind must be one of {', '.join(KINDS)}. "
                                        f"Got {kind!r} instead.")
        if (mechanism is None) == (epsilon is None):
            raise InvalidParameterError("declare exactly one of mechanism and epsilon")
        if isinstance(categories, str) or isinstance(edges, str):
            raise InvalidParameterError("categories and edges must be lists")
        exact_edges = tuple(_number(f"edges[{i}]", e) for i, e in enumerate(edges))
        labels = tuple(categories) if kind == "categorical" else ()
        if kind == "histogram":
            labels = _bucket_labels(exact_edges)
        if kind == "numeric":
            if lower is None or upper is None:
                raise InvalidParameterError("a numeric metric declares lower and upper")
        elif lower is not None or upper is not None:
            raise InvalidParameterError(f"a {kind} metric takes no lower or upper")
        choice = ""
        if mechanism is not None:
            chosen = parse_mechanism(mechanism) if isinstance(mechanism, str) else mechanism
        elif kind == "boolean":
            chosen = RandomizedResponse.from_epsilon(epsilon)  # type: ignore[arg-type]
        elif kind == "numeric":
            chosen = BitMean.from_epsilon(epsilon,  # type: ignore[arg-type]
                                          _number("lower", lower), _number("upper", upper))
        else:
            _check_categories(labels)
            tag = domain_tag([fraction_text(e) for e in exact_edges] if kind == "histogram"
                             else list(labels))
            chosen, choice = choose_categorical(epsilon, len(labels), tag)  # type: ignore[arg-type]
        if kind == "numeric" and isinstance(chosen, BitMean) and (
                chosen.lower, chosen.upper) != (_number("lower", lower), _number("upper", upper)):
            raise InvalidParameterError(
                f"mechanism {chosen.id!r} does not match lower = {lower}, upper = {upper}")
        return cls(kind, chosen, labels if kind == "categorical" else (), exact_edges, clamp,
                   choice)

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], mechanism: Mechanism) -> MetricSpec:
        """The spec of a catalogue entry (``describe()``'s fields) under its ``mechanism``."""
        kind = doc.get("kind", "boolean")
        spec = cls.build(kind, mechanism=mechanism,
                         categories=doc.get("categories", ()) if kind == "categorical" else (),
                         edges=doc.get("edges", ()), lower=doc.get("lower"),
                         upper=doc.get("upper"), clamp=doc.get("clamp", False))
        choice = doc.get("choice", "")
        return dataclasses.replace(spec, choice=choice) if isinstance(choice, str) else spec

    # -- use -----------------------------------------------------------------------------

    @property
    def labels(self) -> tuple[str, ...]:
        """The label of each counted slot after ``n``: "yes", the categories, or "mean"."""
        if self.kind == "boolean":
            return ("yes",)
        if self.kind == "numeric":
            return ("mean",)
        return self.categories

    def encode(self, value: object) -> bool | int | Fraction:
        """The true value as the mechanism takes it: a bool, a category index, or an exact
        number in range.

        Raises:
            InvalidParameterError: a value of the wrong type, an unknown category, NaN or an
                infinity, or a number out of range (unless the metric clamps).
        """
        if self.kind == "boolean":
            if value.__class__ is not bool and value not in (0, 1):
                raise InvalidParameterError(
                    f"true_value must be a bool. Got a {type(value).__name__} instead.")
            return bool(value)
        if self.kind == "categorical":
            index = self._index.get(value) if isinstance(value, str) else None
            if index is None:
                shown = ", ".join(self.categories[:8]) + (", ..." if len(self.categories) > 8
                                                          else "")
                raise InvalidParameterError(
                    f"the value must be one of the declared categories ({shown})"
                    + (f". Got a {type(value).__name__} instead." if not isinstance(value, str)
                       else " and it is not."))  # never echo the value: it is the secret
            return index
        number = exact_number("the value", value, secret=True)  # never echo the value
        low, high = (self.edges[0], self.edges[-1]) if self.kind == "histogram" else \
            (self.mechanism.lower, self.mechanism.upper)  # type: ignore[union-attr]
        if not low <= number <= high:
            if not self.clamp:
                raise InvalidParameterError(
                    f"the value must lie in [{_label(low)}, {_label(high)}] (the metric does "
                    "not declare clamp)")
            number = min(high, max(low, number))
        if self.kind == "numeric":
            return number
        return min(bisect.bisect_right(self.edges, number) - 1, len(self.edges) - 2)

    def describe(self) -> dict[str, Any]:
        """The catalogue fields of this spec (``GET /v1/metrics``), JSON-ready."""
        doc: dict[str, Any] = {"kind": self.kind}
        if self.kind == "categorical":
            doc["categories"] = list(self.categories)
        if self.kind == "histogram":
            doc["edges"] = [fraction_text(e) for e in self.edges]
            doc["categories"] = list(self.categories)
        if self.kind == "numeric":
            doc["lower"] = fraction_text(self.mechanism.lower)  # type: ignore[union-attr]
            doc["upper"] = fraction_text(self.mechanism.upper)  # type: ignore[union-attr]
        if self.clamp:
            doc["clamp"] = True
        if self.choice:
            doc["choice"] = self.choice
        return doc



def _bucket_labels(edges: Sequence[Fraction]) -> tuple[str, ...]:
    if not MIN_CATEGORIES + 1 <= len(edges) <= MAX_CATEGORIES + 1:
        raise InvalidParameterError(
            f"a histogram declares {MIN_CATEGORIES + 1} to {MAX_CATEGORIES + 1} edges "
            f"({MIN_CATEGORIES} to {MAX_CATEGORIES} buckets). Got {len(edges)}.")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise InvalidParameterError("histogram edges must increase strictly")
    last = len(edges) - 2
    return tuple(f"[{_label(a)}, {_label(b)}{']' if i == last else ')'}"
                 for i, (a, b) in enumerate(zip(edges, edges[1:])))


def _check_categories(labels: Sequence[str]) -> None:
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
