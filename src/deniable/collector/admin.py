"""The admin API at /v1/admin: register, list and retire metrics at runtime (admin keys only).

``POST /v1/admin/metrics`` with ``{"name", "mechanism" | "epsilon", "kind"?, "categories"?,
"edges"?, "lower"?, "upper"?, "clamp"?, "description"?, "retention_days"?, "memoization"?,
"instantaneous"?, "period"?, "dimensions"?, "combinations"?}`` (the metrics file's fields,
``registry.declare`` and ``registry.declare_dimensions``): 201 when it
creates a metric or a new version (another mechanism: a changed category list, edges or bounds
is one), 200 when it only updates the description/retention or changes nothing, 409 for a
retired metric, a mechanism an older version used, or another policy or declaration for the
current mechanism. With ``epsilon`` the collector chooses the mechanism (GRR, OUE or subset
selection for categories, by exact variance) and the answer says which and why (``choice``).
A body states the whole registration: ``dimensions`` left out means none. Changing only the
dimensions (or description, retention) of the current mechanism is an update in place (200,
no new version): ingest applies the new declaration from then on.
``GET /v1/admin/metrics`` lists every metric with all versions, retired ones included.
``POST /v1/admin/metrics/<name>/retire`` retires one for good (idempotent).

Every register and retire call that succeeds writes one audit line (``deniable.audit``) naming
the metric, its mechanism and version, and the id of the admin key (never the key). A body
that repeats a JSON key is refused with 400, as at ingest.
"""
from __future__ import annotations

import orjson
from flask import Blueprint, Response, current_app, g

from deniable.client.errors import InvalidParameterError, Problem
from deniable.client.wire import API_VERSION, MEDIA_TYPE, is_metric_name
from deniable.collector.api import storage_guard
from deniable.collector.auth import require
from deniable.collector.errors import APIError
from deniable.collector.live_registry import (LiveRegistry, RegistryConflictError,
                                              UnknownMetricError, check_about, validate_policy)
from deniable.collector.observability import audit
from deniable.collector.params import json_body
from deniable.collector.registry import (DIMENSION_FIELDS, SPEC_FIELDS, declare,
                                         declare_dimensions)
from deniable.collector.settings import current_settings

bp = Blueprint("admin", __name__, url_prefix=f"/{API_VERSION}/admin")
FIELDS = frozenset({"name", "description", "retention_days", "memoization", "instantaneous",
                    "period", *SPEC_FIELDS, *DIMENSION_FIELDS})


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=MEDIA_TYPE)


def _registry() -> LiveRegistry:
    return current_app.extensions["deniable.registry"]


@bp.post("/metrics")
@require("admin")
def register_metric() -> Response:
    """Register a metric, or a new version of one."""
    doc = json_body()
    if type(doc) is not dict:
        raise APIError(422, "the body must be a JSON object", [Problem("", "must be an object")])
    unknown = sorted(doc.keys() - FIELDS)
    if unknown:
        raise APIError(422, "unknown field(s)", [Problem(f"/{k}", "unknown field")
                                                 for k in unknown])
    missing = [k for k in ("name",) if k not in doc]
    if "mechanism" not in doc and "epsilon" not in doc:
        missing.append("mechanism")
    if missing:
        raise APIError(422, "required field(s) missing", [Problem(
            f"/{k}", "is required" + (" (or epsilon)" if k == "mechanism" else ""))
            for k in missing])
    name = doc["name"]
    description = doc.get("description", "")
    retention = doc.get("retention_days", current_settings().metrics.retention_days)
    try:
        if not is_metric_name(name):
            raise InvalidParameterError("name: lowercase letters, digits and '_', at most 64 "
                                        "characters, starting with a letter")
        spec = declare(doc)
        check_about(description, retention)
        policy = validate_policy(spec.mechanism, doc)
        dimensions = declare_dimensions(doc)
    except InvalidParameterError as exc:
        field, _, detail = str(exc).partition(": ")
        pointer = "/" + field.replace(".", "/")  # dimensions.platform: /dimensions/platform
        raise APIError(422, "the metric is not valid", [Problem(pointer, detail)]) from exc
    with storage_guard():
        try:
            entry, what = _registry().register(name, spec, description, retention,
                                               policy=policy, dimensions=dimensions)
        except RegistryConflictError as exc:
            raise APIError(409, str(exc), [Problem(f"/{exc.field}", str(exc))]) from exc
    audit("metric_register", result=what, metric=entry.name,
          mechanism=entry.current.mechanism.id, version=entry.current.version,
          key_id=_actor())
    status = 201 if what in ("created", "new_version") else 200
    return _json({"result": what, "metric": entry.describe()}, status)


@bp.get("/metrics")
@require("admin")
def list_all_metrics() -> Response:
    """Every metric ever registered, with all its versions, retired ones included."""
    with storage_guard():
        entries = _registry().entries()
    return _json({"metrics": [e.describe() for _, e in sorted(entries.items())]})


@bp.post("/metrics/<name>/retire")
@require("admin")
def retire_metric(name: str) -> Response:
    """Stop accepting reports for a metric; its counts stay readable."""
    with storage_guard():
        try:
            entry = _registry().retire(name)
        except UnknownMetricError as exc:
            raise APIError(404, str(exc)) from exc
    audit("metric_retire", metric=entry.name, retired=entry.retired, key_id=_actor())
    return _json({"result": "retired", "metric": entry.describe()})


def _actor() -> str | None:
    """The id (never the secret) of the admin key behind this request; None in dev mode."""
    key = g.get("deniable_key")
    return key.key_id if key is not None else None
