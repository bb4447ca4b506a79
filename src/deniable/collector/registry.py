"""Registered metrics: the only metrics the collector accepts reports for.

Metrics are registered in a TOML file loaded at start::

    [metrics.feature_x_enabled]
    description = "Feature X is switched on"
    mechanism = "rr:1/2:1/2"
    retention_days = 90          # optional; defaults to DENIABLE_RETENTION_DAYS
    memoization = "memoized"     # optional: "memoized" (default), "instantaneous", "fresh"
    instantaneous = "rr:3/4:1/2" # only with memoization = "instantaneous": the layer
    period = "day"               # optional: at most one report per device per hour|day|week

    [metrics.os]                 # a categorical metric: one of 2..1024 declared labels
    kind = "categorical"
    categories = ["android", "ios", "windows", "macos", "linux", "other"]
    epsilon = 2.0                # GRR, OUE or SS, chosen by exact variance (``choice`` says why)

    [metrics.startup_ms]         # a histogram: a number put in [e_i, e_i+1) buckets
    kind = "histogram"
    edges = [0, 250, 500, 1000, 2000, 60000]
    clamp = true                 # optional: values outside [e_0, e_d] go to the end buckets
    epsilon = 1.5

    [metrics.crashes_per_week]   # numeric: the mean of a number in [lower, upper]
    kind = "numeric"
    lower = 0
    upper = 50
    epsilon = 1.0                # 1BitMean

    [metrics.dark_mode]          # any kind may declare up to 3 public dimensions
    mechanism = "rr:1/2:1/2"
    combinations = [["app_version", "platform"]]   # optional: cross products to count too
    [metrics.dark_mode.dimensions.app_version]
    values = ["2.3", "2.4", "2.5"]
    other = true                 # unlisted values count as "other" (else they are refused)
    [metrics.dark_mode.dimensions.platform]
    values = ["android", "ios", "web"]

``kind`` defaults to ``boolean``. Every metric declares either ``mechanism`` (an id) or
``epsilon`` (nats). The category list, the edges and the bounds are digested into the
mechanism id, so changing them makes a new metric version with its own counters.

The collection policy (memoization, instantaneous, period) is served in the catalogue, and the
analysis uses it for intervals over time (docs/analysis.md). Devices follow the app's own
declaration (the same file, shipped with the app), never the served one: a runtime change here
reaches a device only as a new version of the same question at an epsilon no larger than
declared (docs/client.md, "The declaration is the contract").

Public dimensions (``deniable.client.dimensions``) travel and are counted in clear: they are
not protected by local differential privacy. They are not part of the mechanism, so changing
them never makes a new version: the new declaration applies to the reports that arrive from
then on (docs/operations.md, "Public dimensions").
"""
from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deniable.client.composition import split
from deniable.client.dimensions import DIMENSION_NAME, NONE, Dimensions
from deniable.client.errors import DeniableError, InvalidParameterError
from deniable.client.kinds import (REGISTRY, Mechanism, MetricSpec, family, kind_of_mechanism,
                                   parse_mechanism, spec_of_mechanism)
from deniable.client.kinds.open import open_policy
from deniable.client.metrics import DIMENSION_FIELDS, SPEC_FIELDS, describe_metric
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.wire import is_metric_name

_FIELDS = {"description", "retention_days", "memoization", "instantaneous", "period",
           *SPEC_FIELDS, *DIMENSION_FIELDS}
_ONLY_FIELDS = ("categories", "edges", "lower", "upper", "clamp", "max_bytes")


def _only_for() -> dict[str, tuple[str, ...]]:
    """Fields that only some kinds take, and the kinds that take each (from each registered
    kind's ``declares``, read at the call: a kind registered at run time counts)."""
    return {name: tuple(k.name for k in REGISTRY.values() if name in k.declares)
            for name in _ONLY_FIELDS}


class RegistryError(DeniableError):
    """The metrics file is missing, not TOML, or registers a metric wrongly."""


@dataclass(frozen=True)
class Metric:
    """A registered metric: its name, what it means, its mechanism, its retention (days),
    how devices collect it, (from the live registry) its version, its declaration
    (``spec``: kind, categories, edges or bounds; a boolean spec if none is given) and its
    public dimensions (none by default)."""

    name: str
    description: str
    mechanism: Mechanism
    retention_days: int
    policy: CollectionPolicy = DEFAULT_POLICY
    version: int | None = None
    spec: MetricSpec = None  # type: ignore[assignment]  # None: built from the mechanism
    dimensions: Dimensions = NONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", spec_for(self.mechanism, self.spec))

    def describe(self) -> dict[str, Any]:
        """This metric's entry in ``GET /v1/metrics``, with its dimensions if it declares any
        (``Dimensions.describe``: ``dimensions`` and ``combinations``)."""
        return {**describe_metric(self.name, self.description, self.spec, self.policy,
                                  self.version),
                **self.dimensions.describe()}


def mechanism_field(mechanism: object) -> Mechanism:
    """A declaration's ``mechanism``: a canonical id of any kind.

    Raises:
        InvalidParameterError: naming the field (``mechanism: ...``).
    """
    if not isinstance(mechanism, str):
        raise InvalidParameterError("mechanism: must be a mechanism id such as 'rr:1/2:1/2'")
    try:
        return parse_mechanism(mechanism)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"mechanism: {exc}") from exc


def spec_for(mechanism: Mechanism, spec: MetricSpec | None) -> MetricSpec:
    """``spec``, checked to be ``mechanism``'s; or, if None, the spec of the bare mechanism
    (``spec_of``). Metrics and registry versions hold both and agree through this.

    Raises:
        InvalidParameterError: the spec is another mechanism's, or a categorical mechanism
            comes without its declaration.
    """
    if spec is None:
        return spec_of(mechanism)
    if spec.mechanism != mechanism:
        raise InvalidParameterError(f"mechanism {mechanism.id} is not the spec's "
                                    f"{spec.mechanism.id}")
    return spec


def spec_of(mechanism: Mechanism | MetricSpec) -> MetricSpec:
    """The spec of a bare mechanism: a boolean one for ``rr:``, a numeric one for ``bm:``
    (its bounds are in its id). A categorical mechanism needs its categories: pass a spec.

    Raises:
        InvalidParameterError: a categorical mechanism without its declaration.
    """
    if isinstance(mechanism, MetricSpec):
        return mechanism
    try:
        family(getattr(mechanism, "id", None))  # type: ignore[arg-type]
    except InvalidParameterError:
        raise InvalidParameterError(f"not a mechanism: {mechanism!r}") from None
    return spec_of_mechanism(mechanism)


def declare(doc: Mapping[str, Any]) -> MetricSpec:
    """The spec of a registration's ``kind``, ``mechanism`` or ``epsilon``, ``categories``,
    ``edges``, ``lower``, ``upper`` and ``clamp`` (metrics file or admin API).

    Raises:
        InvalidParameterError: ``"<field>: <what is wrong>"``, naming the offending field.
    """
    kind = doc.get("kind", "boolean")
    if kind not in REGISTRY:
        raise InvalidParameterError(f"kind: must be one of {', '.join(REGISTRY)}")
    for name, kinds in _only_for().items():
        if name in doc and kind not in kinds:
            raise InvalidParameterError(f"{name}: a {kind} metric takes no {name} (only "
                                        f"{' and '.join(kinds)} metrics do)")
    mechanism, epsilon = doc.get("mechanism"), doc.get("epsilon")
    if (mechanism is None) == (epsilon is None):
        raise InvalidParameterError(
            f"{'mechanism' if mechanism is None else 'epsilon'}: declare exactly one of "
            "mechanism (an id such as 'rr:1/2:1/2') and epsilon (nats)")
    parsed: Mechanism | None = None
    if mechanism is not None:
        parsed = mechanism_field(mechanism)
    elif isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
            or not math.isfinite(epsilon) or not 0 < epsilon <= MAX_EPSILON:
        raise InvalidParameterError(f"epsilon: must be a number of nats in (0, {MAX_EPSILON}]")
    categories, edges = doc.get("categories", ()), doc.get("edges", ())
    for name in REGISTRY[kind].requires:
        if name in ("categories", "edges") and name not in doc:
            raise InvalidParameterError(_REQUIRED[name])
    for name, value in (("categories", categories), ("edges", edges)):
        if not isinstance(value, (list, tuple)):
            raise InvalidParameterError(f"{name}: must be a list")
    for i, edge in enumerate(edges):
        if isinstance(edge, bool) or not isinstance(edge, (int, float, str)):
            raise InvalidParameterError(f"edges: edges[{i}] must be a number")
    for name in ("lower", "upper"):
        value = doc.get(name)
        if name in REGISTRY[kind].requires and value is None:
            raise InvalidParameterError(f"{name}: a numeric metric declares lower and upper")
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, float, str))):
            raise InvalidParameterError(f"{name}: must be a number")
    clamp = doc.get("clamp", False)
    if not isinstance(clamp, bool):
        raise InvalidParameterError("clamp: must be true or false")
    try:
        spec = MetricSpec.build(kind, mechanism=parsed, epsilon=epsilon, categories=categories,
                                edges=edges, lower=doc.get("lower"), upper=doc.get("upper"),
                                clamp=clamp, max_bytes=doc.get("max_bytes"))
    except InvalidParameterError as exc:
        raise InvalidParameterError(
            f"{_field_of(str(exc), kind, parsed)}: {_shorten(str(exc))}") from exc
    stated = spec.describe()
    for name in ("edges", "lower", "upper"):
        texts = stated.get(name, [])
        for text in texts if isinstance(texts, list) else [texts]:
            if len(text) > MAX_NUMBER_TEXT:
                raise InvalidParameterError(
                    f"{name}: {_shorten(text, 40)} is too long as an exact number (at most "
                    f"{MAX_NUMBER_TEXT} characters, e.g. 0.001 or 1/3)")
    return spec


MAX_NUMBER_TEXT = 40
"""The longest exact number (``n`` or ``n/m``) an edge or bound may be: it is part of the
mechanism id of a numeric metric, hence of every counter key."""


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


MAX_EPSILON = 20.0
"""The largest epsilon (nats) a registration may ask for: e^20 is past any useful privacy."""

_REQUIRED = {"categories": "categories: a categorical metric declares its categories",
             "edges": "edges: a histogram declares its bucket edges"}


def _field_of(message: str, kind: str, mechanism: Mechanism | None) -> str:
    """The field a MetricSpec.build error is about (the fields' types are checked before)."""
    if "does not match" in message or " metric needs a" in message:
        return "mechanism"
    if message.startswith("epsilon"):
        return "epsilon"
    if message.startswith(("lower", "upper")):
        return message[:5]
    if "categor" in message or "edge" in message or "histogram" in message:
        requires = REGISTRY[kind].requires  # the field the kind declares first
        return requires[0] if requires else "mechanism"
    return "mechanism" if mechanism is not None else "epsilon"


MAX_COMBINED_SERIES = 1024
"""The most series one declared combination may have (the product of its dimensions' value
counts, ``other`` included): a breakdown by it reads every one of them."""


def declare_dimensions(doc: Mapping[str, Any]) -> Dimensions:
    """The public dimensions of a registration's ``dimensions`` (``{name: {values, other}}``)
    and ``combinations`` (a list of dimension-name lists), metrics file or admin API.

    Raises:
        InvalidParameterError: ``"<field>: <what is wrong>"``: ``dimensions``,
            ``dimensions.<name>`` (a valid name whose declaration is wrong) or
            ``combinations``.
    """
    declared, combinations = doc.get("dimensions"), doc.get("combinations")
    if combinations is None:
        combinations = ()
    if declared is None:
        if combinations:
            raise InvalidParameterError("combinations: a combination names declared "
                                        "dimensions, and this metric declares none")
        return NONE
    if not isinstance(declared, Mapping):
        raise InvalidParameterError("dimensions: must map each dimension name to "
                                    "{values = [...], other = true|false}")
    for name, one in declared.items():
        field = (f"dimensions.{name}" if isinstance(name, str) and DIMENSION_NAME.match(name)
                 else "dimensions")
        try:
            Dimensions.parse({name: one})
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{field}: {_shorten(str(exc))}") from exc
    if not isinstance(combinations, (list, tuple)) or not all(
            isinstance(c, (list, tuple)) and all(isinstance(n, str) for n in c)
            for c in combinations):
        raise InvalidParameterError("combinations: must be a list of lists of dimension names, "
                                    'such as [["app_version", "platform"]]')
    try:
        dimensions = Dimensions.parse(declared, combinations)
    except InvalidParameterError as exc:
        field = "combinations" if "combination" in str(exc) else "dimensions"
        raise InvalidParameterError(f"{field}: {_shorten(str(exc))}") from exc
    for combo in dimensions.combinations:
        size = 1
        for name in combo:
            size *= len(dimensions.get(name).labels)  # type: ignore[union-attr]
        if size > MAX_COMBINED_SERIES:
            raise InvalidParameterError(
                f"combinations: {','.join(combo)} has {size} combined values; the most is "
                f"{MAX_COMBINED_SERIES} (declare fewer values, or count the dimensions "
                "apart)")
    return dimensions


def check_policy(mechanism: Mechanism, doc: Any) -> CollectionPolicy:
    """Parse a registration's collection policy and check that it fits its mechanism.

    An instantaneous layer (a second randomized response over the memoized bit) exists for
    boolean metrics only.

    Raises:
        InvalidParameterError: naming the offending field.
    """
    if isinstance(mechanism, OpenDomainSketch):
        return open_policy(doc)  # always fresh; a declared memoization is refused
    policy = parse_policy(doc)
    if policy.instantaneous is not None:
        if not kind_of_mechanism(mechanism).layered:
            raise InvalidParameterError(
                f"instantaneous: an instantaneous layer applies to boolean metrics only; "
                f"a {mechanism.kind} metric ({mechanism.id}) is memoized or fresh")
        try:
            split(mechanism, policy.instantaneous)  # type: ignore[arg-type]
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"instantaneous: {exc}") from exc
    return policy


def load_metrics_file(path: str | Path, default_retention_days: int = 90) -> dict[str, Metric]:
    """Parse and check a metrics TOML file; return name -> Metric.

    Raises:
        RegistryError: naming the file and the offending metric and field.
    """
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except OSError as exc:
        raise RegistryError(f"cannot read metrics file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"metrics file {path} is not valid TOML: {exc}") from exc
    table = doc.get("metrics")
    if not isinstance(table, dict) or not table:
        raise RegistryError(f"metrics file {path} registers no [metrics.<name>] tables")
    return {name: _parse_metric(path, name, spec, default_retention_days)
            for name, spec in table.items()}


def _parse_metric(path: str | Path, name: str, spec: Any, default_retention: int) -> Metric:
    where = f"{path}: metrics.{name}"
    if not is_metric_name(name):
        raise RegistryError(f"{where}: names are lowercase letters, digits and '_', "
                            "at most 64 characters, starting with a letter")
    if not isinstance(spec, dict):
        raise RegistryError(f"{where} must be a table")
    unknown = set(spec) - _FIELDS
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {sorted(unknown)}")
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise RegistryError(f"{where}.description must be a string")
    try:
        declared = declare(spec)
    except InvalidParameterError as exc:
        raise RegistryError(f"{where}.{exc}") from exc
    retention = spec.get("retention_days", default_retention)
    if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
        raise RegistryError(f"{where}.retention_days must be a whole number of days >= 1")
    try:
        policy = check_policy(declared.mechanism, spec)
        dimensions = declare_dimensions(spec)
    except InvalidParameterError as exc:
        raise RegistryError(f"{where}.{exc}") from exc
    return Metric(name, description, declared.mechanism, retention, policy, spec=declared,
                  dimensions=dimensions)
