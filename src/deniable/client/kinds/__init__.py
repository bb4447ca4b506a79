"""Metric kinds: what a metric asks, which mechanism answers it, and how a value is encoded.

    spec = MetricSpec.build("categorical", epsilon=2.0,
                            categories=["android", "ios", "windows", "macos", "linux", "other"])
    spec.mechanism.id       # 'grr:6:...:<tag>', chosen by exact variance (spec.choice says why)
    spec.encode("ios")      # 1: the index the mechanism perturbs

One module per kind (boolean.py, categorical.py, histogram.py, numeric.py), each a ``Kind``
object (base.py) registered once in ``REGISTRY`` (or at run time with ``register(kind)``);
``kind_of(name)`` is how the rest of the code asks a kind instead of testing its name. The
built-in kinds (ids in ``parse_mechanism``; ``open`` in kinds/open.py):

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

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeGuard

from deniable.client.errors import InvalidParameterError
from deniable.client.kinds import boolean, categorical, histogram, numeric, open
from deniable.client.kinds.base import Declaration, Family, Kind, Mechanism
from deniable.client.kinds.base import number as _number
from deniable.client.kinds.categorical import MAX_CATEGORY_LENGTH

__all__ = ["BUILT_IN", "KINDS", "MAX_CATEGORY_LENGTH", "REGISTRY", "Kind", "Mechanism",
           "MetricSpec", "family", "is_mechanism", "kind_of", "kind_of_mechanism",
           "parse_mechanism", "payload", "payload_field", "register", "registered", "spec_of_mechanism",
           "unregister", "width"]

# The registry: the one table of kinds. A new kind is its module, imported above, and its
# ``KIND`` here (the order is the order of ``KINDS`` in messages).
REGISTRY: dict[str, Kind] = {k.name: k for k in (boolean.KIND, categorical.KIND, histogram.KIND,
                                                   numeric.KIND, open.KIND)}
KINDS = tuple(REGISTRY)
_FAMILIES: dict[str, Family] = {}
_TYPES: tuple[type, ...] = ()
_BARE: dict[str, Kind] = {}  # the kind of a bare mechanism id: the first that takes its family


def _index() -> None:
    """Derive the tables read per call (families by prefix, mechanism types, bare kinds, the
    ``KINDS`` names) from ``REGISTRY``; each is rebound whole, never seen half-built."""
    global KINDS, _TYPES, _FAMILIES, _BARE
    families: dict[str, Family] = {}
    bare: dict[str, Kind] = {}
    for kind in REGISTRY.values():
        for family_ in kind.families:
            families.setdefault(family_.prefix, family_)
            bare.setdefault(family_.prefix, kind)
    _FAMILIES, _BARE = families, bare
    KINDS = tuple(REGISTRY)
    _TYPES = tuple(f.type for f in families.values())
    parse_mechanism.cache_clear()


def register(kind: Kind) -> Kind:
    """Register ``kind`` after the built-in ones, at run time: what a kind's line in
    ``REGISTRY`` does at import. Every module that asks ``kind_of`` (the client, the
    collector's registry and ingest, the analysis, the CLI) then takes metrics of this kind;
    a process registers it before it reads a declaration of that kind
    (``deniable.client.plugins.load_plugins`` registers the installed kind plugins).

    Returns:
        ``kind``, so a module can write ``KIND = register(Rating())``.

    Raises:
        InvalidParameterError: a name already registered, or a family whose prefix another
            kind's family already uses with a different definition (one prefix, one parser).
    """
    if not isinstance(kind, Kind) or not isinstance(getattr(kind, "name", None), str):
        raise InvalidParameterError(f"a kind must be a Kind with a name. Got {kind!r} instead.")
    if kind.name in REGISTRY:
        raise InvalidParameterError(f"kind {kind.name!r} is registered already")
    for family_ in kind.families:
        known = _FAMILIES.get(family_.prefix)
        if known is not None and known != family_:
            raise InvalidParameterError(
                f"family {family_.prefix!r} is defined already as {known}; reuse that one")
    REGISTRY[kind.name] = kind
    _index()
    return kind


def unregister(name: str) -> Kind:
    """Remove a kind registered with ``register`` (tests); the built-in kinds stay.

    Raises:
        InvalidParameterError: a built-in kind or a name not registered.
    """
    if name in BUILT_IN or name not in REGISTRY:
        raise InvalidParameterError(f"kind {name!r} is not a kind registered at run time")
    kind = REGISTRY.pop(name)
    _index()
    return kind


@contextlib.contextmanager
def registered(kind: Kind) -> Iterator[Kind]:
    """``register(kind)`` for the duration of a ``with`` block, then ``unregister`` (tests)."""
    register(kind)
    try:
        yield kind
    finally:
        unregister(kind.name)


def kind_of(name: str) -> Kind:
    """The kind registered as ``name``.

    Raises:
        InvalidParameterError: a name no kind is registered as.
    """
    kind = REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        raise InvalidParameterError(f"kind must be one of {', '.join(KINDS)}. "
                                    f"Got {name!r} instead.")
    return kind


def family(mechanism_id: str) -> str:
    """The id's prefix: ``rr``, ``grr``, ``oue``, ``ss`` or ``bm`` (unchecked beyond that)."""
    prefix = mechanism_id.split(":", 1)[0] if isinstance(mechanism_id, str) else ""
    if prefix not in _FAMILIES:
        raise InvalidParameterError(
            f"mechanism id must start with one of {', '.join(sorted(_FAMILIES))} and ':'. "
            f"Got {str(mechanism_id)[:80]!r} instead.")
    return prefix


@functools.lru_cache(maxsize=4096)
def parse_mechanism(mechanism_id: str) -> Mechanism:
    """The mechanism of a canonical id of any kind; non-canonical spellings are refused.

    Raises:
        InvalidParameterError: an id no kind accepts.
    """
    return _FAMILIES[family(mechanism_id)].parse(mechanism_id)


BUILT_IN = frozenset(REGISTRY)
"""The names of the kinds in ``REGISTRY`` at import: ``register`` never replaces one."""
_index()


def payload_field(mechanism_id: str) -> str:
    """The wire field that carries a report's perturbed value: ``bit``, ``index`` or ``bits``."""
    return _FAMILIES[family(mechanism_id)].field


def width(mechanism_id: str) -> int:
    """Counter slots per hour for a mechanism id (2, or d + 1 for categorical ones)."""
    return _FAMILIES[family(mechanism_id)].width(mechanism_id)


def payload(mechanism: Mechanism, answer: int) -> int | str:
    """The wire value of a perturbed answer: the int itself, or a bitset as hex."""
    if _FAMILIES[family(mechanism.id)].bitset:
        return mechanism.encode_bits(answer)  # type: ignore[union-attr]
    return answer


def is_mechanism(value: object) -> TypeGuard[Mechanism]:
    """Whether ``value`` is a mechanism of a registered family."""
    return isinstance(value, _TYPES)


def kind_of_mechanism(mechanism: Mechanism) -> Kind:
    """The kind a bare mechanism reports (``categorical`` for the shared families)."""
    return _BARE[family(mechanism.id)]


def spec_of_mechanism(mechanism: Mechanism) -> MetricSpec:
    """The spec of a bare mechanism whose kind needs no declaration (boolean, numeric).

    Raises:
        InvalidParameterError: a mechanism whose kind declares its categories or edges.
    """
    kind = kind_of_mechanism(mechanism)
    if not kind.bare:
        raise InvalidParameterError(
            f"mechanism {mechanism.id} needs its declared categories (register a MetricSpec)")
    return MetricSpec(kind.name, mechanism)


@dataclass(frozen=True)
class MetricSpec:
    """What one metric version asks and how its reports are made: a value object that
    delegates everything kind-specific to its ``Kind`` (``spec.kind_object``).

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
        kind = kind_of(self.kind)
        prefix = family(self.mechanism.id)
        prefixes = tuple(f.prefix for f in kind.families)
        if prefix not in prefixes:
            raise InvalidParameterError(
                f"a {self.kind} metric needs a {' or '.join(prefixes)} mechanism. "
                f"Got {self.mechanism.id!r} instead.")
        if not isinstance(self.clamp, bool):
            raise InvalidParameterError(f"clamp must be true or false. Got {self.clamp!r}.")
        if self.clamp and "clamp" not in kind.declares:
            raise InvalidParameterError("clamp applies to histogram, numeric and open metrics only")
        kind.check(self)

    @property
    def kind_object(self) -> Kind:
        """The ``Kind`` this spec delegates to."""
        return REGISTRY[self.kind]

    # -- construction --------------------------------------------------------------------

    @classmethod
    def build(cls, kind: str = "boolean", *, mechanism: str | Mechanism | None = None,
              epsilon: float | None = None, categories: Sequence[str] = (),
              edges: Sequence[object] = (), lower: object = None, upper: object = None,
              clamp: bool = False, max_bytes: int | None = None) -> MetricSpec:
        """A spec from a declaration: either a ``mechanism`` (id or object) or an
        ``epsilon`` (the mechanism is then chosen: GRR, OUE or SS by exact variance).

        Raises:
            InvalidParameterError: any part of the declaration that does not hold.
        """
        kind_ = kind_of(kind)
        if (mechanism is None) == (epsilon is None):
            raise InvalidParameterError("declare exactly one of mechanism and epsilon")
        if isinstance(categories, str) or isinstance(edges, str):
            raise InvalidParameterError("categories and edges must be lists")
        exact_edges = tuple(_number(f"edges[{i}]", e) for i, e in enumerate(edges))
        labels = tuple(categories) if "categories" in kind_.declares else ()
        if "edges" in kind_.declares:
            labels = histogram.bucket_labels(exact_edges)
        if "lower" in kind_.declares:
            if lower is None or upper is None:
                raise InvalidParameterError(f"a {kind} metric declares lower and upper")
        elif lower is not None or upper is not None:
            raise InvalidParameterError(f"a {kind} metric takes no lower or upper")
        if max_bytes is not None and "max_bytes" not in kind_.declares:
            raise InvalidParameterError(f"a {kind} metric takes no max_bytes")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)):
            raise InvalidParameterError(f"max_bytes must be an int. Got {max_bytes!r} instead.")
        declared = Declaration(labels, exact_edges, lower, upper, max_bytes)
        choice = ""
        if mechanism is not None:
            chosen = parse_mechanism(mechanism) if isinstance(mechanism, str) else mechanism
        else:
            chosen, choice = kind_.choose(epsilon, declared)  # type: ignore[arg-type]
        kind_.check_mechanism(chosen, declared)
        return cls(kind, chosen, labels if "categories" in kind_.declares else (), exact_edges,
                   clamp, choice)

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], mechanism: Mechanism) -> MetricSpec:
        """The spec of a catalogue entry (``describe()``'s fields) under its ``mechanism``."""
        kind = doc.get("kind", "boolean")
        spec = cls.build(kind, mechanism=mechanism,
                         categories=doc.get("categories", ())
                         if "categories" in kind_of(kind).declares else (),
                         edges=doc.get("edges", ()), lower=doc.get("lower"),
                         upper=doc.get("upper"), clamp=doc.get("clamp", False),
                         max_bytes=doc.get("max_bytes"))
        choice = doc.get("choice", "")
        return dataclasses.replace(spec, choice=choice) if isinstance(choice, str) else spec

    # -- use -----------------------------------------------------------------------------

    @property
    def labels(self) -> tuple[str, ...]:
        """The label of each counted slot after ``n``: "yes", the categories, or "mean"."""
        return self.kind_object.slot_labels(self)

    def encode(self, value: object) -> bool | int | Fraction:
        """The true value as the mechanism takes it: a bool, a category index, or an exact
        number in range.

        Raises:
            InvalidParameterError: a value of the wrong type, an unknown category, NaN or an
                infinity, or a number out of range (unless the metric clamps).
        """
        return self.kind_object.encode(self, value)

    def describe(self) -> dict[str, Any]:
        """The catalogue fields of this spec (``GET /v1/metrics``), JSON-ready."""
        doc: dict[str, Any] = {"kind": self.kind}
        doc.update(self.kind_object.describe(self))
        if self.clamp:
            doc["clamp"] = True
        if self.choice:
            doc["choice"] = self.choice
        return doc
