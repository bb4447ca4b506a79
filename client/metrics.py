"""The metric catalogue a client reports against: name -> mechanism.

The collector publishes its registered metrics at ``GET /v1/metrics``; ``parse_catalogue``
turns that document into mechanisms, refusing any entry whose stated probabilities do not
match its mechanism id exactly.
"""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from deniable.client.errors import InvalidParameterError, UnknownMetricError, WireFormatError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.wire import is_metric_name

Catalogue = dict[str, RandomizedResponse]


def describe_metric(name: str, description: str, mechanism: RandomizedResponse) -> dict[str, Any]:
    """One entry of ``GET /v1/metrics``: the metric, its mechanism and its exact guarantee."""
    return {
        "name": name,
        "description": description,
        "mechanism": mechanism.id,
        "p_yes_given_yes": str(mechanism.p_yes_given_yes),
        "p_yes_given_no": str(mechanism.p_yes_given_no),
        "epsilon": mechanism.epsilon,
    }


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


def lookup(catalogue: Catalogue, metric: str) -> RandomizedResponse:
    """The mechanism of ``metric``, or UnknownMetricError."""
    try:
        return catalogue[metric]
    except KeyError:
        raise UnknownMetricError(
            f"metric {metric!r} is not one this client knows; known: {sorted(catalogue)}"
        ) from None
