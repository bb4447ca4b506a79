"""Registered metrics: the only metrics the collector accepts reports for.

Metrics are registered in a TOML file loaded at start::

    [metrics.feature_x_enabled]
    description = "Feature X is switched on"
    mechanism = "rr:1/2:1/2"
    retention_days = 90          # optional; defaults to DENIABLE_RETENTION_DAYS
    memoization = "memoized"     # optional: "memoized" (default), "instantaneous", "fresh"
    instantaneous = "rr:3/4:1/2" # only with memoization = "instantaneous": the layer
    period = "day"               # optional: at most one report per device per hour|day|week

The collection policy (memoization, instantaneous, period) is served in the catalogue: devices
follow it, and the analysis uses it for intervals over time (docs/analysis.md).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deniable.client.errors import DeniableError, InvalidParameterError
from deniable.client.mechanism import RandomizedResponse
from deniable.client.composition import split
from deniable.client.metrics import describe_metric
from deniable.client.period import DEFAULT_POLICY, CollectionPolicy, parse_policy
from deniable.client.wire import is_metric_name

_FIELDS = {"description", "mechanism", "retention_days", "memoization", "instantaneous",
           "period"}


class RegistryError(DeniableError):
    """The metrics file is missing, not TOML, or registers a metric wrongly."""


@dataclass(frozen=True)
class Metric:
    """A registered metric: its name, what it means, its mechanism, its retention (days),
    how devices collect it, and (from the live registry) its version."""

    name: str
    description: str
    mechanism: RandomizedResponse
    retention_days: int
    policy: CollectionPolicy = DEFAULT_POLICY
    version: int | None = None

    def describe(self) -> dict[str, Any]:
        """This metric's entry in ``GET /v1/metrics``."""
        return describe_metric(self.name, self.description, self.mechanism, self.policy,
                               self.version)


def check_policy(mechanism: RandomizedResponse, doc: Any) -> CollectionPolicy:
    """Parse a registration's collection policy and check that it fits its mechanism.

    Raises:
        InvalidParameterError: naming the offending field.
    """
    policy = parse_policy(doc)
    if policy.instantaneous is not None:
        try:
            split(mechanism, policy.instantaneous)
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
        mechanism = RandomizedResponse.from_id(spec.get("mechanism", ""))
    except InvalidParameterError as exc:
        raise RegistryError(f"{where}.mechanism: {exc}") from exc
    retention = spec.get("retention_days", default_retention)
    if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
        raise RegistryError(f"{where}.retention_days must be a whole number of days >= 1")
    try:
        policy = check_policy(mechanism, spec)
    except InvalidParameterError as exc:
        raise RegistryError(f"{where}.{exc}") from exc
    return Metric(name, description, mechanism, retention, policy)
