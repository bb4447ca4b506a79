"""Public dimensions: the few coarse, allow-listed facts a report may carry in clear.

    dims = Dimensions.parse({"app_version": {"values": ["2.3", "2.4"], "other": True},
                             "platform": {"values": ["android", "ios"]}})
    dims.normalize({"app_version": "2.5", "platform": "ios"})
    # {'app_version': 'other', 'platform': 'ios'}
    dims.series({"app_version": "2.4", "platform": "ios"})
    # ['app_version=2.4', 'platform=ios']  (+ 'app_version=2.4,platform=ios' if declared)

A metric may declare up to ``MAX_DIMENSIONS`` dimensions (e.g. ``app_version``, ``platform``,
``channel``), each a closed list of values. **Dimensions are not protected by local
differential privacy**: they travel and are counted in clear, so the allow-lists keep them
coarse. A value off a list is refused, or counted as ``other`` where the dimension declares
``other``. A report need not state every dimension; one it leaves out is counted in the
metric's total only (the analysis shows the rest as "not stated").

The collector counts marginals: one series per dimension value (``platform=ios``), never the
cross product, unless the metric declares a combination (``combinations`` lists dimension
name tuples), which adds one series per combined value (``app_version=2.4,platform=ios``).
Client, collector and analysis all use this module, so all agree on names, values and series.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deniable.client.errors import InvalidParameterError

MAX_DIMENSIONS = 3
MAX_VALUES = 100
"""At most this many listed values per dimension (plus ``other``)."""
OTHER = "other"
DIMENSION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
DIMENSION_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,31}\Z")
"""Values: letters, digits and ``._+-``, at most 32 characters (no ``:``, ``,`` or ``=``, so
a series label is unambiguous inside a Redis key)."""
SERIES = re.compile(r"^[a-z][a-z0-9_]{0,31}=[A-Za-z0-9][A-Za-z0-9._+-]{0,31}"
                    r"(?:,[a-z][a-z0-9_]{0,31}=[A-Za-z0-9][A-Za-z0-9._+-]{0,31}){0,2}\Z")


class DimensionError(InvalidParameterError):
    """A dimension or value the metric does not declare; ``field`` names the offending one."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Dimension:
    """One public dimension: its name, its allowed values, and whether others map to
    ``other`` (otherwise they are refused)."""

    name: str
    values: tuple[str, ...]
    other: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not DIMENSION_NAME.match(self.name):
            raise InvalidParameterError(
                "a dimension name is lowercase letters, digits and '_', at most 32 "
                f"characters. Got {self.name!r}.")
        values = self.values
        if isinstance(values, str) or not isinstance(values, (list, tuple)) or not values:
            raise InvalidParameterError(f"dimension {self.name!r} must list its values")
        if len(values) > MAX_VALUES:
            raise InvalidParameterError(
                f"dimension {self.name!r} lists {len(values)} values; the most is {MAX_VALUES}")
        for value in values:
            if not isinstance(value, str) or not DIMENSION_VALUE.match(value):
                raise InvalidParameterError(
                    f"dimension {self.name!r}: a value is letters, digits and '._+-', at most "
                    f"32 characters. Got {value!r}.")
        if len(set(values)) != len(values):
            raise InvalidParameterError(f"dimension {self.name!r} lists a value twice")
        if OTHER in values:
            raise InvalidParameterError(
                f"dimension {self.name!r}: {OTHER!r} is reserved (declare other = true)")
        if not isinstance(self.other, bool):
            raise InvalidParameterError(f"dimension {self.name!r}: other must be true or false")
        object.__setattr__(self, "values", tuple(values))

    @property
    def labels(self) -> tuple[str, ...]:
        """Every value a count can carry: the listed ones, then ``other`` if declared."""
        return self.values + ((OTHER,) if self.other else ())

    def normalize(self, value: object) -> str:
        """``value`` as counted: itself if listed, ``other`` if declared, else refused."""
        if isinstance(value, str) and value in self.values:
            return value
        if self.other and isinstance(value, str):
            return OTHER
        raise DimensionError(
            f"{value!r} is not a listed value of dimension {self.name!r} "
            f"({', '.join(self.values[:10])}{', ...' if len(self.values) > 10 else ''})",
            self.name)


@dataclass(frozen=True)
class Dimensions:
    """A metric's public dimensions (at most three) and declared combinations."""

    dimensions: tuple[Dimension, ...] = ()
    combinations: tuple[tuple[str, ...], ...] = ()
    _by_name: Mapping[str, Dimension] = field(default_factory=dict, init=False, repr=False,
                                              compare=False)

    def __post_init__(self) -> None:
        if len(self.dimensions) > MAX_DIMENSIONS:
            raise InvalidParameterError(
                f"a metric declares at most {MAX_DIMENSIONS} dimensions. "
                f"Got {len(self.dimensions)}.")
        by_name = {d.name: d for d in self.dimensions}
        if len(by_name) != len(self.dimensions):
            raise InvalidParameterError("a dimension is declared twice")
        combos = []
        for combo in self.combinations:
            names = tuple(sorted(combo)) if isinstance(combo, (list, tuple)) and \
                all(isinstance(n, str) for n in combo) else ()  # [1, "a"] cannot sort
            if len(names) < 2 or len(set(names)) != len(names) or \
                    any(n not in by_name for n in names):
                raise InvalidParameterError(
                    f"a combination names two or three declared dimensions. Got {combo!r}.")
            combos.append(names)
        if len(set(combos)) != len(combos):
            raise InvalidParameterError("a combination is declared twice")
        object.__setattr__(self, "combinations", tuple(combos))
        object.__setattr__(self, "_by_name", by_name)

    @classmethod
    def parse(cls, doc: object, combinations: object = ()) -> Dimensions:
        """From a declaration: ``{name: {"values": [...], "other": bool}}`` (the metrics file,
        the admin API and the catalogue all use this shape) and a list of name lists."""
        if doc is None:
            doc = {}
        if not isinstance(doc, Mapping):
            raise InvalidParameterError("dimensions must map each name to {values, other}")
        if not isinstance(combinations, (list, tuple)):
            raise InvalidParameterError("combinations must be a list of dimension-name lists")
        found = []
        for name, spec in doc.items():
            if not isinstance(spec, Mapping) or set(spec) - {"values", "other"}:
                raise InvalidParameterError(
                    f"dimension {name!r} must be {{values = [...], other = true|false}}")
            found.append(Dimension(name, spec.get("values", ()), spec.get("other", False)))
        return cls(tuple(found), tuple(tuple(c) if isinstance(c, (list, tuple)) else c
                                       for c in combinations))

    def describe(self) -> dict[str, Any]:
        """The declaration, JSON-ready (``parse`` reads it back); empty when none."""
        if not self.dimensions:
            return {}
        doc: dict[str, Any] = {"dimensions": {
            d.name: {"values": list(d.values), "other": d.other} for d in self.dimensions}}
        if self.combinations:
            doc["combinations"] = [list(c) for c in self.combinations]
        return doc

    def __bool__(self) -> bool:
        return bool(self.dimensions)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    def get(self, name: str) -> Dimension | None:
        """The dimension called ``name``, or None."""
        return self._by_name.get(name)

    def normalize(self, stated: Mapping[str, object]) -> dict[str, str]:
        """The dimension values a report carries, as counted (``other`` applied).

        Raises:
            DimensionError: a dimension the metric does not declare, or an unlisted value of
                one without ``other``; ``field`` names the dimension.
        """
        counted = {}
        for name, value in stated.items():
            dimension = self._by_name.get(name) if isinstance(name, str) else None
            if dimension is None:
                raise DimensionError(
                    f"{name!r} is not a dimension of this metric"
                    + (f" (it declares {', '.join(self.names)})" if self.dimensions else
                       " (it declares none)"), str(name))
            counted[name] = dimension.normalize(value)
        return counted

    def series(self, counted: Mapping[str, str]) -> list[str]:
        """The series a report with these (normalized) values adds to, besides the total:
        one per stated dimension, and one per declared combination whose dimensions are all
        stated."""
        labels = [f"{name}={counted[name]}" for name in sorted(counted)]
        for combo in self.combinations:
            if all(name in counted for name in combo):
                labels.append(",".join(f"{name}={counted[name]}" for name in combo))
        return labels

    def all_series(self, dimension: str) -> list[str]:
        """Every series label of one dimension (or a combination written ``a,b``), in order."""
        names = tuple(sorted(dimension.split(",")))
        if len(names) == 1:
            found = self._by_name.get(names[0])
            if found is None:
                raise DimensionError(f"{dimension!r} is not a dimension of this metric",
                                     dimension)
            return [f"{found.name}={v}" for v in found.labels]
        if names not in self.combinations:
            raise DimensionError(f"{dimension!r} is not a declared combination", dimension)
        labels = [""]
        for name in names:
            labels = [f"{head},{name}={v}" if head else f"{name}={v}"
                      for head in labels for v in self._by_name[name].labels]
        return labels


NONE = Dimensions()


def series_values(label: str) -> dict[str, str]:
    """``{"platform": "ios"}`` of ``"platform=ios"`` (any series label)."""
    if not SERIES.match(label):
        raise InvalidParameterError(f"not a series label: {label!r}")
    return dict(part.split("=", 1) for part in label.split(","))


def check_stated(stated: object) -> Mapping[str, object]:
    """A report's ``dims`` as given by an app: a mapping of names to values."""
    if not isinstance(stated, Mapping):
        raise InvalidParameterError(
            f"dims must map dimension names to values. Got {type(stated).__name__}.")
    return stated


def union_names(all_dims: Iterable[Dimensions]) -> Sequence[str]:
    """Every dimension name declared by any of ``all_dims``, sorted."""
    return sorted({name for dims in all_dims for name in dims.names})
