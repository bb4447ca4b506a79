"""The metric catalogue a client reports against: name -> ``MetricSpec`` (kind, mechanism,
and what the metric declares: categories, histogram edges, numeric bounds, clamp).

The collector publishes its registered metrics at ``GET /v1/metrics``; ``parse_catalogue``
turns that document into specs, refusing any entry whose stated probabilities or declared
fields do not match its mechanism id exactly. An entry of a kind or mechanism family this
client does not know (a newer collector's) is skipped, not fatal: the other metrics keep
working, and the skipped ones are named in ``skipped`` (the Reporter withholds them, says why
once in the log, and counts their reports in ``stats().withheld``). An app may declare its
metrics instead, in code (``coerce_catalogue``) or with the collector's own metrics TOML file
(``load_metrics_file``).

A metric may also declare public dimensions (``deniable.client.dimensions``): the catalogue
entry's ``dimensions``/``combinations``, or the same keys of a declaration table. They are
parsed beside the specs (``parse_catalogue``'s and ``coerce_catalogue``'s ``dimensions``
argument); a served entry whose dimensions do not parse is skipped like an unknown kind.

``resolve`` decides what each metric is reported under. **The app's declaration is the
privacy contract** (docs/client.md, "The declaration is the contract"):

- only declared metrics are reported; a served metric the app did not declare never is;
- kind, domain (categories, edges, bounds, clamp), the ε ceiling (the declared mechanism's ε),
  memoization, period and public dimensions come from the declaration alone;
- a served entry may only choose the mechanism (version) of a declared metric, and only if it
  asks the same question (same kind, categories, edges, bounds and clamp) with a likelihood
  ratio (hence ε) at most the declared one's; everything else it states is ignored, and each
  ignored part is named in ``Resolution.ignored`` (``Reporter.stats().ignored_served``);
- no mechanism above ``max_epsilon`` is ever used (the metric is withheld instead).
"""
from __future__ import annotations

import logging
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from deniable.client.dimensions import NONE, Dimensions
from deniable.client.errors import InvalidParameterError, UnknownMetricError, WireFormatError
from deniable.client.kinds import (REGISTRY, Mechanism, MetricSpec, family, is_mechanism, kind_of,
                                   kind_of_mechanism, parse_mechanism, spec_of_mechanism)
from deniable.client.mechanism import ROUNDING_SLACK, log_ratio_exceeds
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.period import DEFAULT_POLICY, POLICY_FIELDS, CollectionPolicy, parse_policy
from deniable.client.wire import is_metric_name

log = logging.getLogger("deniable.client")

Catalogue = dict[str, MetricSpec]
"""name -> the metric's spec (its kind, mechanism and declaration)."""
Declared = Mapping[str, "MetricSpec | Mechanism | str | Mapping[str, Any]"]
"""What an app may declare per metric: a spec, a mechanism or its id (boolean and numeric
only: a categorical id does not name its categories), or a declaration table as in the
metrics TOML file (``kind``, ``categories``/``edges``/``lower``/``upper``, ``clamp`` and
``mechanism`` or ``epsilon``)."""

AllDimensions = dict[str, Dimensions]
"""name -> the public dimensions a metric declares (metrics that declare none are absent)."""
AllPolicies = dict[str, CollectionPolicy]
"""name -> the collection policy a metric declares (memoization, instantaneous, period)."""
SPEC_FIELDS = frozenset({"kind", "mechanism", "epsilon", "categories", "edges", "lower",
                         "upper", "clamp", "max_bytes"})
"""The fields that declare what a metric asks and how (``MetricSpec.build``)."""
DIMENSION_FIELDS = frozenset({"dimensions", "combinations"})
"""The fields that declare a metric's public dimensions (``table_dimensions``)."""
DECLARATION_FIELDS = SPEC_FIELDS | POLICY_FIELDS | DIMENSION_FIELDS
"""Every field of a metrics-file table that is part of the app's declaration, its privacy
contract; the others (``description``, ``retention_days``) are the collector's business."""
SERVED_PARTS = ("mechanism", "memoization", "period", "dimensions")
"""The parts of a served catalogue entry a client may ignore for a declared metric, in the
order ``Resolution.ignored`` lists them: its mechanism (not used: another question, or a larger
ε), its memoization (or instantaneous layer), its period, its public dimensions."""

DEFAULT_MAX_EPSILON = math.log(9)
"""The default ε ceiling of one report, in nats: ln 9 ≈ 2.20. One report is then at most 9
times as likely under one true value as under the other. It admits the mechanisms the
project ships (rr:1/2:1/2, ε = ln 3; rr:3/4:1/2, ε = ln 7) and is in line with deployed
systems; docs/client.md, "The ε ceiling", says why."""


def _channel(mechanism: Mechanism) -> tuple[Fraction, Fraction]:
    """(P1, Q) each counted slot follows; an open-domain sketch states its inner GRR's (p, q):
    the reported bucket given the level and seed drawn."""
    if isinstance(mechanism, OpenDomainSketch):
        return mechanism.p, mechanism.q
    return tuple(mechanism.channel)  # type: ignore[return-value]


def describe_metric(name: str, description: str, mechanism: Mechanism | MetricSpec,
                    policy: CollectionPolicy = DEFAULT_POLICY,
                    version: int | None = None) -> dict[str, Any]:
    """One entry of ``GET /v1/metrics``: the metric, its kind and what it declares
    (``MetricSpec.describe``), its mechanism and exact guarantee, how devices collect it
    (``memoization``, ``instantaneous``, ``period``) and, if known, the registry version it
    describes. ``mechanism`` may be a bare mechanism (a boolean metric's, or a kind whose
    spec the caller adds) or a whole ``MetricSpec``.

    Every entry states the channel each counted slot follows, ``p1`` and ``q`` (exact
    fractions); a boolean one also under its historical names ``p_yes_given_yes`` and
    ``p_yes_given_no``.
    """
    spec = mechanism if isinstance(mechanism, MetricSpec) else None
    chosen = spec.mechanism if spec is not None else mechanism
    assert not isinstance(chosen, MetricSpec)
    # An open-domain sketch's channel is its inner GRR's: P(the reported bucket is the true
    # one's) p, each other one q, given the level and seed drawn.
    p1, q = _channel(chosen)
    entry: dict[str, Any] = {"name": name, "description": description, "kind": chosen.kind}
    if spec is not None:
        entry.update(spec.describe())
    entry["mechanism"] = chosen.id
    names = kind_of(chosen.kind).channel_names
    if names is not None:
        entry[names[0]], entry[names[1]] = str(p1), str(q)
    entry["p1"], entry["q"] = str(p1), str(q)
    entry["epsilon"] = chosen.epsilon
    entry.update(policy.describe())
    if version is not None:
        entry["version"] = version
    return entry


def parse_catalogue(doc: Any, skipped: dict[str, str] | None = None,
                    dimensions: AllDimensions | None = None) -> Catalogue:
    """Parse a ``GET /v1/metrics`` document into name -> MetricSpec.

    Args:
        doc: the parsed JSON document.
        skipped: if given, receives name -> why for each entry of a kind or mechanism family
            this client does not know, or whose public dimensions do not parse; such entries
            are left out of the catalogue (without ``skipped`` a warning names them, once
            per process).
        dimensions: if given, receives name -> Dimensions for each kept entry that declares
            public dimensions.

    Raises:
        WireFormatError: the document is malformed, or an entry of a known kind is: its P1/Q
            disagree with its id, or its declared fields (categories, edges, bounds) with it.
    """
    entries = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise WireFormatError("the metrics document must hold a list under 'metrics'")
    catalogue: Catalogue = {}
    for i, entry in enumerate(entries):
        try:
            name, mechanism_id = entry["name"], entry["mechanism"]
            kind = entry.get("kind", "boolean")
        except (KeyError, TypeError, AttributeError) as exc:
            raise WireFormatError(f"metrics entry {i} is malformed: {exc!r}") from exc
        if not is_metric_name(name):
            raise WireFormatError(f"metrics entry {i} has an invalid name {name!r}")
        why = _unsupported(kind, mechanism_id)
        declared = _entry_dimensions(entry) if why is None else Dimensions()
        if isinstance(declared, str):
            why, declared = declared, Dimensions()
        if why is not None:
            if skipped is not None:
                skipped[name] = why
            elif (name, why) not in _WARNED:
                _WARNED.add((name, why))
                log.warning("deniable: skipping metric %r: %s", name, why)
            continue
        catalogue[name] = _entry_spec(i, name, entry)
        if declared and dimensions is not None:
            dimensions[name] = declared
    return catalogue


def _entry_dimensions(entry: Mapping[str, Any]) -> Dimensions | str:
    """The public dimensions a catalogue entry declares, or why they do not parse."""
    try:
        return table_dimensions(entry)
    except InvalidParameterError as exc:
        return (f"its public dimensions are malformed ({str(exc)[:200]}); fix the "
                f"registration, or upgrade the client, to report it")


def table_dimensions(table: Mapping[str, Any]) -> Dimensions:
    """The public dimensions of a catalogue entry or declaration table (its ``dimensions``
    and ``combinations``); empty when it declares none.

    Raises:
        InvalidParameterError: they do not parse (``Dimensions.parse``).
    """
    if table.get("dimensions") is None and not table.get("combinations"):
        return Dimensions()
    return Dimensions.parse(table.get("dimensions"), table.get("combinations") or ())


_WARNED: set[tuple[str, str]] = set()


def _unsupported(kind: object, mechanism_id: object) -> str | None:
    """Why this client cannot report an entry of ``kind`` under ``mechanism_id``, or None."""
    if not isinstance(kind, str) or kind not in REGISTRY:
        return (f"its kind {str(kind)[:40]!r} is not one this client knows "
                f"({', '.join(REGISTRY)}); upgrade the client to report it")
    if not isinstance(mechanism_id, str):
        return None  # malformed, not unknown: _entry_spec refuses it
    try:
        family(mechanism_id)
    except InvalidParameterError:
        return (f"its mechanism {mechanism_id[:80]!r} is not one this client knows; upgrade "
                f"the client to report it")
    return None


def _entry_spec(i: int, name: str, entry: Mapping[str, Any]) -> MetricSpec:
    """The spec of catalogue entry ``i``, checked against everything the entry states."""
    try:
        mechanism = parse_mechanism(entry["mechanism"])
        names = kind_of(entry.get("kind", "boolean")).channel_names
        claims = []  # a boolean entry states P1, Q under their historical names (required)
        if names is not None:
            claims.append((Fraction(entry[names[0]]), Fraction(entry[names[1]])))
        if names is None or "p1" in entry or "q" in entry:
            claims.append((Fraction(entry["p1"]), Fraction(entry["q"])))
        spec = MetricSpec.from_document(entry, mechanism)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, InvalidParameterError) as exc:
        raise WireFormatError(f"metrics entry {i} is malformed: {exc}") from exc
    for stated in claims:
        if stated != _channel(mechanism):
            raise WireFormatError(
                f"metric {name!r} states P1, Q = {stated[0]}, {stated[1]}, which do not match "
                f"its mechanism {mechanism.id}")
    return spec


def parse_policies(doc: Any) -> dict[str, CollectionPolicy]:
    """Each metric's collection policy in a ``GET /v1/metrics`` document (the default,
    memoized and daily, where an older collector states none).

    Raises:
        WireFormatError: an entry states a policy that does not parse.
    """
    entries = doc.get("metrics") if isinstance(doc, dict) else None
    policies: dict[str, CollectionPolicy] = {}
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        try:
            policies[entry["name"]] = parse_policy(entry)
        except InvalidParameterError as exc:
            raise WireFormatError(f"metrics entry {i} has a malformed policy: {exc}") from exc
    return policies


def coerce_catalogue(metrics: Declared, dimensions: AllDimensions | None = None,
                     policies: AllPolicies | None = None) -> Catalogue:
    """Build a catalogue from code. Each value is a ``MetricSpec``; a mechanism or its id
    (a boolean metric's ``rr:``, or a numeric metric's ``bm:``, which carries its bounds);
    or a declaration table as in the metrics TOML file, which may declare public
    ``dimensions`` and ``combinations`` too (put in ``dimensions`` if given), and its
    collection policy, ``memoization``, ``instantaneous`` and ``period`` (put in ``policies``
    if given; a table that states none of them is absent, i.e. takes the default).

    Raises:
        InvalidParameterError: an invalid name, or a declaration that does not hold (e.g. a
            bare ``grr:``/``oue:`` id, which does not name its categories, or malformed
            dimensions).
    """
    catalogue: Catalogue = {}
    for name, declared in metrics.items():
        if not is_metric_name(name):
            raise InvalidParameterError(
                f"metric names are lowercase letters, digits and '_', at most 64 characters. "
                f"Got {name!r} instead.")
        catalogue[name] = declared_spec(name, declared)
        if isinstance(declared, Mapping):
            try:
                found = table_dimensions(declared)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"metric {name!r}: {exc}") from exc
            if found and dimensions is not None:
                dimensions[name] = found
            kind = catalogue[name].kind_object
            if kind.fresh_only or (policies is not None and POLICY_FIELDS & set(declared)):
                try:
                    policy = kind.policy(declared)
                except InvalidParameterError as exc:
                    raise InvalidParameterError(f"metric {name!r}: {exc}") from exc
                if policies is not None:
                    policies[name] = policy
    return catalogue


def declared_spec(name: str, declared: object) -> MetricSpec:
    """The spec of one declared metric (see ``coerce_catalogue``)."""
    if isinstance(declared, MetricSpec):
        return declared
    if isinstance(declared, Mapping):
        return _table_spec(name, declared)
    mechanism = parse_mechanism(declared) if isinstance(declared, str) else declared
    if is_mechanism(mechanism) and kind_of_mechanism(mechanism).bare:
        return spec_of_mechanism(mechanism)
    if is_mechanism(mechanism):
        raise InvalidParameterError(
            f"metric {name!r}: a categorical mechanism id does not name its categories; "
            f"declare it as MetricSpec.build('categorical', categories=[...], "
            f"mechanism={mechanism.id!r}) or as a table with its categories")
    raise InvalidParameterError(
        f"metric {name!r} must be declared as a MetricSpec, a mechanism, a mechanism id or a "
        f"table. Got a {type(declared).__name__} instead.")


def _table_spec(name: str, table: Mapping[str, Any]) -> MetricSpec:
    """A spec from a declaration table: ``kind`` (boolean by default), ``mechanism`` or
    ``epsilon``, and the kind's fields."""
    kind = table.get("kind", "boolean")
    try:
        return MetricSpec.build(kind, mechanism=table.get("mechanism"),
                                epsilon=table.get("epsilon"),
                                categories=table.get("categories", ()),
                                edges=table.get("edges", ()), lower=table.get("lower"),
                                upper=table.get("upper"), clamp=table.get("clamp", False),
                                max_bytes=table.get("max_bytes"))
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"metric {name!r}: {exc}") from exc


def load_metrics_file(path: str | os.PathLike[str],
                      skipped: dict[str, str] | None = None,
                      dimensions: AllDimensions | None = None,
                      policies: AllPolicies | None = None) -> Catalogue:
    """The metrics of a collector's metrics TOML file: each ``[metrics.<name>]`` table's
    ``kind`` (boolean by default), ``mechanism`` or ``epsilon``, and its ``categories``,
    ``edges``, ``lower``/``upper`` and ``clamp``; its public ``dimensions`` and
    ``combinations`` (put in ``dimensions`` if given); and its ``memoization``,
    ``instantaneous`` and ``period`` (put in ``policies`` if given).

    Other fields (description, retention, ...) are the collector's business and ignored. A
    table of a kind or mechanism family this client does not know is skipped (named in
    ``skipped`` if given, else in a warning).

    Raises:
        InvalidParameterError: the file cannot be read, is not TOML, or declares a metric
            wrongly.
    """
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except OSError as exc:
        raise InvalidParameterError(f"cannot read metrics file {os.fspath(path)}: "
                                    f"{exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameterError(f"metrics file {os.fspath(path)} is not TOML: {exc}") from exc
    table = doc.get("metrics")
    if not isinstance(table, dict) or not table:
        raise InvalidParameterError(
            f"metrics file {os.fspath(path)} registers no [metrics.<name>] tables")
    declared: dict[str, Mapping[str, Any]] = {}
    for name, spec in table.items():
        mechanism, epsilon = (spec.get("mechanism"), spec.get("epsilon")) \
            if isinstance(spec, dict) else (None, None)
        if not isinstance(spec, dict) or not (isinstance(mechanism, str) or (
                mechanism is None and isinstance(epsilon, (int, float))
                and not isinstance(epsilon, bool))):
            raise InvalidParameterError(
                f"{os.fspath(path)}: metrics.{name} must be a table with a mechanism string "
                f"or an epsilon")
        why = _unsupported(spec.get("kind", "boolean"), mechanism) \
            if mechanism is not None else _unsupported(spec.get("kind", "boolean"), "rr:")
        if why is not None:
            if skipped is not None:
                skipped[name] = why
            else:
                log.warning("deniable: %s: skipping metric %r: %s", os.fspath(path), name, why)
            continue
        declared[name] = spec
    try:
        return coerce_catalogue(declared, dimensions, policies)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{os.fspath(path)}: {exc}") from exc


def declaration_document(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The metrics file's declaration as the web client takes it
    (``new Reporter(url, {metrics})``): each ``[metrics.<name>]`` table's declaration fields
    (``DECLARATION_FIELDS``), with the same keys and values, JSON-ready. The file is checked
    first as this client reads it (``load_metrics_file``).

    Raises:
        InvalidParameterError: the file does not declare its metrics correctly.
    """
    load_metrics_file(path, skipped={})
    with open(path, "rb") as handle:
        tables = tomllib.load(handle)["metrics"]
    return {name: {key: table[key] for key in sorted(table) if key in DECLARATION_FIELDS}
            for name, table in tables.items()}


def check_max_epsilon(max_epsilon: object) -> float:
    """``max_epsilon`` as a float, or InvalidParameterError if it is not a number > 0."""
    if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float)) or \
            not max_epsilon > 0:
        raise InvalidParameterError(
            f"max_epsilon must be a number of nats > 0 (math.inf turns the ceiling off). "
            f"Got {max_epsilon!r} instead.")
    return float(max_epsilon)


def above_ceiling(mechanism: MetricSpec | Mechanism, max_epsilon: float) -> bool:
    """Whether one report under ``mechanism`` (or a spec's) loses more than ``max_epsilon``
    nats, whatever its kind: ln of its exact likelihood ratio against the exact value of
    ``max_epsilon``, allowing ``max_epsilon`` a relative 2**-40 for its own rounding (so
    ``math.log(9)`` admits a ratio of exactly 9 whichever way the float rounded). The float
    epsilon only settles what lies far (a relative 1e-9) from the limit."""
    if math.isinf(max_epsilon):
        return False
    chosen = mechanism.mechanism if isinstance(mechanism, MetricSpec) else mechanism
    # The float epsilon is within a few units in the last place of ln(ratio): a relative 1e-9
    # from the limit decides alone; only nearer does the exact comparison run (~30 us).
    if chosen.epsilon < max_epsilon * (1 - 1e-9):
        return False
    if chosen.epsilon > max_epsilon * (1 + 1e-9):
        return True
    return log_ratio_exceeds(chosen.likelihood_ratio,
                             Fraction(max_epsilon) * (1 + ROUNDING_SLACK))


@dataclass(frozen=True)
class Resolution:
    """What a reporter does with each declared metric.

    Attributes:
        usable: metric -> the spec (kind, mechanism) its reports follow.
        withheld: metric -> why it is not reported (its reports are counted, not queued).
        floored: metric -> a note: the collector registers a mechanism with a larger ε than
            the app declared (or a different question under the same name), so the declared
            mechanism is used.
        ignored: metric -> the parts of its served entry that were ignored (``SERVED_PARTS``
            that differ from the declaration, in that order); declared metrics the catalogue
            states nothing against are absent.
    """

    usable: Catalogue
    withheld: dict[str, str] = field(default_factory=dict)
    floored: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Served:
    """What a collector's catalogue states (``GET /v1/metrics``), parsed: each entry's spec,
    collection policy (None where it does not parse) and public dimensions."""

    specs: Catalogue
    policies: Mapping[str, CollectionPolicy | None] = field(default_factory=dict)
    dimensions: AllDimensions = field(default_factory=dict)

    @classmethod
    def parse(cls, doc: Any, skipped: dict[str, str] | None = None) -> Served:
        """``parse_catalogue`` with each entry's policy read too.

        Raises:
            WireFormatError: see ``parse_catalogue``.
        """
        dimensions: AllDimensions = {}
        specs = parse_catalogue(doc, skipped, dimensions)
        policies: dict[str, CollectionPolicy | None] = {}
        for entry in doc["metrics"]:
            name = entry["name"]
            if name in specs:
                try:
                    policies[name] = parse_policy(entry)
                except InvalidParameterError:
                    policies[name] = None  # unlike any declared policy: ignored, counted
        return cls(specs, policies, dimensions)


def resolve(declared: Catalogue, served: Catalogue | Served | None, max_epsilon: float, *,
            policies: Mapping[str, CollectionPolicy] | None = None,
            dimensions: Mapping[str, Dimensions] | None = None) -> Resolution:
    """Choose each declared metric's spec, and name what the served catalogue says that is
    ignored.

    Only ``declared`` metrics are reported. Each is reported under the served spec if it asks
    the same question (same kind, categories, edges, bounds and clamp) and its likelihood ratio
    (hence its ε) is at most the declared one's, else under the declared spec (the floor).
    A mechanism above ``max_epsilon`` is never used (the metric is withheld). The served
    memoization, period and dimensions are never followed: where they differ from the
    declared ones (``policies``, ``dimensions``: the default policy and no dimensions where
    absent) they are named in ``Resolution.ignored``, as is a served mechanism not used.
    """
    if served is None:
        served = Served({})
    elif not isinstance(served, Served):
        served = Served(served)
    result = Resolution(usable={})
    for name, spec in declared.items():
        chosen = spec
        offered = served.specs.get(name)
        if offered is not None and offered.mechanism != spec.mechanism:
            if not _same_question(offered, spec):
                result.floored[name] = (
                    f"the collector registers it as a different {offered.kind} metric "
                    f"({offered.mechanism.id}) than the declared {spec.kind} one "
                    f"({spec.mechanism.id}); reporting under the declared one")
            elif offered.mechanism.likelihood_ratio <= spec.mechanism.likelihood_ratio:
                chosen = offered
            else:
                result.floored[name] = (
                    f"the collector registers {offered.mechanism.id} (epsilon "
                    f"{offered.mechanism.epsilon:.3g}), above the declared {spec.mechanism.id} "
                    f"(epsilon {spec.mechanism.epsilon:.3g}); reporting under the declared "
                    f"mechanism")
        if offered is not None:
            ignored = _ignored_parts(
                offered, chosen, (policies or {}).get(name, DEFAULT_POLICY),
                served.policies.get(name, DEFAULT_POLICY),
                (dimensions or {}).get(name, NONE), served.dimensions.get(name, NONE))
            if ignored:
                result.ignored[name] = ignored
        mechanism = chosen.mechanism
        if above_ceiling(mechanism, max_epsilon):
            result.withheld[name] = (
                f"its mechanism {mechanism.id} has epsilon {mechanism.epsilon:.3g}, above "
                f"max_epsilon {max_epsilon:.3g}; not reported")
            continue
        result.usable[name] = chosen
    return result


def _ignored_parts(offered: MetricSpec, chosen: MetricSpec, policy: CollectionPolicy,
                   served_policy: CollectionPolicy | None, dims: Dimensions,
                   served_dims: Dimensions) -> tuple[str, ...]:
    """The ``SERVED_PARTS`` of a served entry that differ from what the metric follows."""
    differ = {
        "mechanism": offered.mechanism != chosen.mechanism,
        "memoization": served_policy is None or (
            served_policy.memoization, served_policy.instantaneous) != (
            policy.memoization, policy.instantaneous),
        "period": served_policy is None or served_policy.period != policy.period,
        "dimensions": _dimension_key(served_dims) != _dimension_key(dims),
    }
    return tuple(part for part in SERVED_PARTS if differ[part])


def _dimension_key(dims: Dimensions) -> tuple[object, ...]:
    """What a dimension declaration allows, whatever the order it lists things in."""
    return (frozenset((d.name, frozenset(d.values), d.other) for d in dims.dimensions),
            frozenset(dims.combinations))


def _same_question(a: MetricSpec, b: MetricSpec) -> bool:
    """Whether two specs take the same values the same way: kind, categories, edges, numeric
    bounds and clamp (which decides whether a value outside is clamped or refused)."""
    bounds = [(getattr(s.mechanism, "lower", None), getattr(s.mechanism, "upper", None))
              for s in (a, b)]
    return (a.kind, a.categories, a.edges, a.clamp, bounds[0]) == (
        b.kind, b.categories, b.edges, b.clamp, bounds[1])


def lookup(catalogue: Catalogue, metric: str) -> MetricSpec:
    """The spec of ``metric``, or UnknownMetricError."""
    try:
        return catalogue[metric]
    except KeyError:
        raise UnknownMetricError(
            f"metric {metric!r} is not one this client knows; known: {sorted(catalogue)}"
        ) from None
