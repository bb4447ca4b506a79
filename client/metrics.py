"""The metric catalogue a client reports against: name -> mechanism.

The collector publishes its registered metrics at ``GET /v1/metrics``; ``parse_catalogue``
turns that document into mechanisms, refusing any entry whose stated probabilities do not
match its mechanism id exactly. An app may declare its metrics instead, in code
(``coerce_catalogue``) or with the collector's own metrics TOML file (``load_metrics_file``).

``resolve`` decides which mechanism each metric is reported under, from what the app
declared, what the collector serves, and the ε ceiling ``max_epsilon``:

- no mechanism above ``max_epsilon`` is ever used (the metric is withheld instead);
- a declared mechanism is a privacy floor: a served mechanism with a larger ε is not used;
  the declared one is (the collector accepts any registered, unretired version).
"""
from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from deniable.client.errors import InvalidParameterError, UnknownMetricError, WireFormatError
from deniable.client.kinds import Mechanism, MetricSpec
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.wire import is_metric_name

Catalogue = dict[str, RandomizedResponse]

DEFAULT_MAX_EPSILON = math.log(9)
"""The default ε ceiling of one report, in nats: ln 9 ≈ 2.20. One report is then at most 9
times as likely under one true value as under the other. It admits the mechanisms the
project ships (rr:1/2:1/2, ε = ln 3; rr:3/4:1/2, ε = ln 7) and is in line with deployed
systems; docs/client.md, "The ε ceiling", says why."""


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
    p1, q = chosen.channel
    entry: dict[str, Any] = {"name": name, "description": description, "kind": chosen.kind}
    if spec is not None:
        entry.update(spec.describe())
    entry["mechanism"] = chosen.id
    if chosen.kind == "boolean":
        entry["p_yes_given_yes"], entry["p_yes_given_no"] = str(p1), str(q)
    entry["p1"], entry["q"] = str(p1), str(q)
    entry["epsilon"] = chosen.epsilon
    entry.update(policy.describe())
    if version is not None:
        entry["version"] = version
    return entry


def parse_catalogue(doc: Any) -> Catalogue:
    """Parse a ``GET /v1/metrics`` document into name -> mechanism.

    Raises:
        WireFormatError: the document is malformed, or an entry's P1/Q disagree with its id.
    """
    entries = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise WireFormatError("the metrics document must hold a list under 'metrics'")
    catalogue: Catalogue = {}
    for i, entry in enumerate(entries):
        try:
            name = entry["name"]
            mechanism = RandomizedResponse.from_id(entry["mechanism"])
            stated = (Fraction(entry["p_yes_given_yes"]), Fraction(entry["p_yes_given_no"]))
        except (KeyError, TypeError, ValueError, InvalidParameterError) as exc:
            raise WireFormatError(f"metrics entry {i} is malformed: {exc}") from exc
        if not is_metric_name(name):
            raise WireFormatError(f"metrics entry {i} has an invalid name {name!r}")
        if stated != (mechanism.p_yes_given_yes, mechanism.p_yes_given_no):
            raise WireFormatError(
                f"metric {name!r} states P1, Q = {stated[0]}, {stated[1]}, which do not match "
                f"its mechanism {mechanism.id}")
        catalogue[name] = mechanism
    return catalogue


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


def coerce_catalogue(metrics: Mapping[str, RandomizedResponse | str]) -> Catalogue:
    """Build a catalogue from code: each value a mechanism or a mechanism id."""
    catalogue: Catalogue = {}
    for name, mechanism in metrics.items():
        if not is_metric_name(name):
            raise InvalidParameterError(
                f"metric names are lowercase letters, digits and '_', at most 64 characters. "
                f"Got {name!r} instead.")
        catalogue[name] = (mechanism if isinstance(mechanism, RandomizedResponse)
                           else RandomizedResponse.from_id(mechanism))
    return catalogue


def load_metrics_file(path: str | os.PathLike[str]) -> Catalogue:
    """The metrics of a collector's metrics TOML file (``[metrics.<name>]`` with ``mechanism``).

    Other fields (description, retention, ...) are the collector's business and ignored.

    Raises:
        InvalidParameterError: the file cannot be read, is not TOML, or names a metric or
            mechanism wrongly.
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
    mechanisms: dict[str, RandomizedResponse | str] = {}
    for name, spec in table.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("mechanism"), str):
            raise InvalidParameterError(
                f"{os.fspath(path)}: metrics.{name} must be a table with a mechanism string")
        mechanisms[name] = spec["mechanism"]
    return coerce_catalogue(mechanisms)


def check_max_epsilon(max_epsilon: object) -> float:
    """``max_epsilon`` as a float, or InvalidParameterError if it is not a number > 0."""
    if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float)) or \
            not max_epsilon > 0:
        raise InvalidParameterError(
            f"max_epsilon must be a number of nats > 0 (math.inf turns the ceiling off). "
            f"Got {max_epsilon!r} instead.")
    return float(max_epsilon)


def above_ceiling(mechanism: RandomizedResponse, max_epsilon: float) -> bool:
    """Whether one report under ``mechanism`` loses more than ``max_epsilon`` nats."""
    return mechanism.epsilon > max_epsilon


@dataclass(frozen=True)
class Resolution:
    """What a reporter does with each metric.

    Attributes:
        usable: metric -> the mechanism its reports follow.
        withheld: metric -> why it is not reported (its reports are counted, not queued).
        floored: metric -> a note: the collector registers a mechanism with a larger ε than
            the app declared, so the declared mechanism is used.
    """

    usable: Catalogue
    withheld: dict[str, str] = field(default_factory=dict)
    floored: dict[str, str] = field(default_factory=dict)


def resolve(declared: Catalogue | None, served: Catalogue | None,
            max_epsilon: float) -> Resolution | None:
    """Choose each metric's mechanism; None while neither catalogue is known.

    With ``declared`` metrics, only those are reported. Each is reported under the served
    mechanism if its likelihood ratio (hence its ε) is at most the declared one's, else under
    the declared mechanism (the floor). Without, every served metric is reported under its
    served mechanism. Either way a mechanism above ``max_epsilon`` is never used.
    """
    if declared is None and served is None:
        return None
    result = Resolution(usable={})
    source = declared if declared is not None else served
    assert source is not None
    for name, mechanism in source.items():
        chosen = mechanism
        offered = served.get(name) if (declared is not None and served is not None) else None
        if offered is not None and offered != mechanism:
            if offered.likelihood_ratio <= mechanism.likelihood_ratio:
                chosen = offered
            else:
                result.floored[name] = (
                    f"the collector registers {offered.id} (epsilon {offered.epsilon:.3g}), "
                    f"above the declared {mechanism.id} (epsilon {mechanism.epsilon:.3g}); "
                    f"reporting under the declared mechanism")
        if above_ceiling(chosen, max_epsilon):
            result.withheld[name] = (
                f"its mechanism {chosen.id} has epsilon {chosen.epsilon:.3g}, above "
                f"max_epsilon {max_epsilon:.3g}; not reported")
            continue
        result.usable[name] = chosen
    return result


def lookup(catalogue: Catalogue, metric: str) -> RandomizedResponse:
    """The mechanism of ``metric``, or UnknownMetricError."""
    try:
        return catalogue[metric]
    except KeyError:
        raise UnknownMetricError(
            f"metric {metric!r} is not one this client knows; known: {sorted(catalogue)}"
        ) from None
