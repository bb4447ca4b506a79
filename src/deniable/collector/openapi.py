"""The OpenAPI 3.1 document of the collector's HTTP API, served at ``/v1/openapi.json``.

``PATHS`` holds one dict per path, keyed by lowercase method. To document a new route, add its
operation to ``PATHS`` (or call ``add_operation`` from the module that defines it): the test
``tests/collector/test_openapi.py`` fails for any route in ``app.url_map`` that is missing here,
and for any operation here that no route serves.
"""
from __future__ import annotations

import copy
from typing import Any

import orjson
from flask import Flask, Response

from deniable.client.kinds import REGISTRY
from deniable.client.wire import DEFAULT_MAX_REPORTS, MEDIA_TYPE

OPENAPI_PATH = "/v1/openapi.json"
PROBLEM = "application/problem+json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _problem(description: str, retry_after: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {PROBLEM: {"schema": _ref("Problem")}}}
    if retry_after:
        response["headers"] = {"Retry-After": {"$ref": "#/components/headers/Retry-After"}}
    return response


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {MEDIA_TYPE: {"schema": schema}}}


UNAVAILABLE = _problem("Redis is down or failing over: retry after Retry-After seconds.",
                       retry_after=True)

POLICY_PROPERTIES: dict[str, Any] = {
    "memoization": {"type": "string", "enum": ["memoized", "instantaneous", "fresh"],
                    "description": "how devices perturb: a memoized answer (default), a "
                                   "memoized answer re-perturbed by an instantaneous layer, or "
                                   "fresh coins every report"},
    "instantaneous": {"type": ["string", "null"],
                      "description": "the instantaneous layer's mechanism id, with "
                                     "memoization 'instantaneous' only"},
    "period": {"type": "string", "enum": ["hour", "day", "week"],
               "description": "at most one report per device per UTC period (default day)"},
}

KIND_ENUM: list[str] = []
"""A stand-in for the kinds the schema names: ``document()`` puts the kinds registered when it
is called in its place (a kind plugin registered after this module's import is named too)."""
SPEC_PROPERTIES: dict[str, Any] = {
    "kind": {"type": "string", "enum": KIND_ENUM,
             "description": "what the metric asks (default boolean)"},
    "categories": {"type": "array", "items": {"type": "string"},
                   "description": "categorical: the declared labels, in order; histogram: "
                                  "the bucket labels"},
    "edges": {"type": "array", "items": {"type": "string"},
              "description": "histogram: the bucket edges as exact numbers"},
    "lower": {"type": "string", "description": "numeric: the lower bound, exact"},
    "upper": {"type": "string", "description": "numeric: the upper bound, exact"},
    "clamp": {"type": "boolean", "description": "out-of-range numbers are clamped, "
                                                "not refused"},
    "choice": {"type": "string", "description": "why this mechanism was chosen, when it "
                                                "was chosen from an epsilon"},
}
"""A metric version's declaration (``MetricSpec.describe``), as the catalogue states it."""

DIMENSION_PROPERTIES: dict[str, Any] = {
    "dimensions": {
        "type": "object", "maxProperties": 3,
        "propertyNames": {"pattern": "^[a-z][a-z0-9_]{0,31}$"},
        "description": "the metric's public dimensions (absent if none): each name with its "
                       "allowed values and whether others count as 'other'. Dimensions travel "
                       "and are counted in clear: they are NOT protected by local differential "
                       "privacy",
        "additionalProperties": {
            "type": "object", "required": ["values"], "additionalProperties": False,
            "properties": {"values": {"type": "array", "minItems": 1, "maxItems": 100,
                                      "items": {"type": "string",
                                                "pattern": "^[A-Za-z0-9][A-Za-z0-9._+-]{0,31}$"}},
                           "other": {"type": "boolean"}}}},
    "combinations": {
        "type": "array",
        "items": {"type": "array", "minItems": 2, "maxItems": 3,
                  "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,31}$"}},
        "description": "declared combinations of dimensions, also counted per combined value "
                       "(absent if none; otherwise each dimension is counted on its own)"},
}
"""A metric's public dimensions (``Dimensions.describe``), as the registry and catalogue state
them."""

BUCKET: dict[str, Any] = {
    "type": "object", "required": ["start", "n", "counts"],
    "properties": {"start": {"type": "string", "format": "date-time"},
                   "n": {"type": "integer", "minimum": 0},
                   "ones": {"type": "integer", "minimum": 0,
                            "description": "one-bit kinds (boolean, numeric) only: the "
                                           "perturbed ones"},
                   "counts": {"type": "array", "minItems": 2,
                              "items": {"type": "integer", "minimum": 0},
                              "description": "every counter slot: n, then one per label"}}}
"""One bucket of perturbed counts."""

SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "description": "An RFC 9457 problem document. No error carries a stack trace, a "
                       "report body or a client address.",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "errors": {"type": "array", "items": {"oneOf": [
                {"type": "object", "required": ["pointer", "detail"],
                 "properties": {"pointer": {"type": "string",
                                            "description": "JSON pointer into the body"},
                                "detail": {"type": "string"}}},
                {"type": "object", "required": ["parameter", "detail"],
                 "properties": {"parameter": {"type": "string",
                                              "description": "query parameter name"},
                                "detail": {"type": "string"}}},
            ]}},
            "refused": {"type": "array", "items": _ref("Refused"),
                        "description": "with Prefer: handling=lenient, on a 422 that refused "
                                       "every metric of the batch: the metrics and why"},
        },
    },
    "Refused": {
        "type": "object", "required": ["metric", "reports", "problems"],
        "description": "one metric whose reports were refused (not counted) under "
                       "Prefer: handling=lenient; the client keeps them and may send them again "
                       "in a new batch",
        "properties": {
            "metric": {"type": "string"},
            "reports": {"type": "integer", "minimum": 1,
                        "description": "the metric's reports in the batch, all refused"},
            "problems": {"type": "array", "maxItems": 5, "items": {
                "type": "object", "required": ["pointer", "detail"],
                "properties": {"pointer": {"type": "string",
                                           "description": "JSON pointer into the body"},
                               "detail": {"type": "string"}}}},
        },
    },
    "Report": {
        "type": "object",
        "additionalProperties": False,
        "required": ["metric", "mechanism"],
        "oneOf": [{"required": ["bit"]}, {"required": ["index"]}, {"required": ["bits"]},
                  {"required": ["cell"]}],
        "description": "one perturbed value, in the one field its mechanism names: bit "
                       "(rr:, bm:), index (grr:), bits (oue:) or cell (od:)",
        "properties": {
            "metric": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$",
                       "description": "a registered metric (see GET /v1/metrics)"},
            "mechanism": {"type": "string", "examples": ["rr:1/2:1/2"],
                          "description": "the metric's registered mechanism id"},
            "bit": {"type": "integer", "enum": [0, 1],
                    "description": "the perturbed bit; never the true value"},
            "index": {"type": "integer", "minimum": 0, "maximum": 1023,
                      "description": "the perturbed category index, below the metric's d"},
            "bits": {"type": "string", "pattern": "^[0-9a-f]{1,256}$",
                     "description": "the perturbed bitset: bit i is category i, exactly "
                                    "ceil(d / 4) lowercase hex digits"},
            "cell": {"type": "integer", "minimum": 0,
                     "description": "the perturbed open-domain cell (level, seed, bucket), "
                                    "below the mechanism's levels x seeds x g"},
            "dims": {"type": "object", "maxProperties": 3,
                     "additionalProperties": {"type": "string"},
                     "description": "public dimension values of the metric's declared "
                                    "dimensions (e.g. {\"platform\": \"ios\"}), in clear: NOT "
                                    "protected by local differential privacy. A value off "
                                    "the list is refused, or counted as 'other' where the "
                                    "dimension declares it"},
        },
    },
    "Batch": {
        "type": "object",
        "additionalProperties": False,
        "required": ["batch_id", "reports"],
        "properties": {
            "batch_id": {"type": "string", "pattern": "^[0-9a-f]{32}$",
                         "description": "128 random bits, fresh per batch: a re-sent batch "
                                        "is counted once"},
            "reports": {"type": "array", "minItems": 1, "maxItems": DEFAULT_MAX_REPORTS,
                        "items": _ref("Report"),
                        "description": "at most DENIABLE_MAX_BATCH_REPORTS reports"},
        },
    },
    "Accepted": {
        "type": "object", "required": ["batch_id", "accepted"],
        "properties": {"batch_id": {"type": "string"},
                       "accepted": {"type": "integer", "minimum": 1,
                                    "description": "reports counted"},
                       "refused": {"type": "array", "items": _ref("Refused"),
                                   "description": "only with Prefer: handling=lenient: the "
                                                  "metrics whose reports were not counted"}},
    },
    "Duplicate": {
        "type": "object", "required": ["batch_id", "accepted", "duplicate"],
        "properties": {"batch_id": {"type": "string"}, "accepted": {"const": 0},
                       "duplicate": {"const": True},
                       "refused": {"type": "array", "items": _ref("Refused"),
                                   "description": "as the first answer's, recomputed"}}},
    "Metric": {
        "type": "object",
        "required": ["name", "description", "kind", "mechanism", "p1", "q", "epsilon"],
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            **SPEC_PROPERTIES,
            "mechanism": {"type": "string"},
            "p1": {"type": "string", "description": "P(a counted slot counts | the true value "
                                                    "is that slot's), exact"},
            "q": {"type": "string", "description": "P(a counted slot counts | the true value "
                                                   "is another), exact"},
            "p_yes_given_yes": {"type": "string",
                                "description": "boolean only: exact fraction, e.g. 3/4"},
            "p_yes_given_no": {"type": "string",
                               "description": "boolean only: exact fraction, e.g. 1/4"},
            "epsilon": {"type": "number", "description": "privacy loss per report"},
            **POLICY_PROPERTIES,
            "version": {"type": "integer", "minimum": 1,
                        "description": "the registry version this entry describes"},
            **DIMENSION_PROPERTIES,
        },
    },
    "Counts": {
        "type": "object",
        "required": ["metric", "kind", "labels", "mechanism", "from", "to", "buckets"],
        "properties": {
            "metric": {"type": "string"},
            **SPEC_PROPERTIES,
            "labels": {"type": "array", "items": {"type": "string"},
                       "description": "the label of each counted slot after n: 'yes', the "
                                      "categories, or 'mean'"},
            "mechanism": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "current_version": {"type": "integer", "minimum": 1,
                                "description": "the metric's newest version"},
            **POLICY_PROPERTIES,
            "retired": {"type": ["string", "null"],
                        "description": "when the metric was retired, if it was"},
            **DIMENSION_PROPERTIES,
            "granularity": {"type": "string", "enum": ["hour", "day", "week"]},
            "from": {"type": "string", "format": "date-time"},
            "to": {"type": "string", "format": "date-time"},
            "by": {"type": "string",
                   "description": "with ?by=: the dimension (or combination, names sorted) "
                                  "broken down"},
            "series": {"anyOf": [
                {"type": "string",
                 "description": "with ?series=: the series whose buckets these are"},
                {"type": "object", "additionalProperties": {"type": "array", "items": BUCKET},
                 "description": "with ?by=: every series label of the dimension ('other' "
                                "included) -> its non-empty buckets"}]},
            "buckets": {"type": "array", "items": BUCKET,
                        "description": "the total's buckets (with ?series=: that series')"},
        },
    },
}

SCHEMAS.update({
    "MetricRegistration": {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "description": "Declare either mechanism or epsilon (the collector then chooses the "
                       "mechanism and says why in choice).",
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"},
            "kind": SPEC_PROPERTIES["kind"],
            "mechanism": {"type": "string", "examples": ["rr:1/2:1/2"]},
            "epsilon": {"type": "number", "exclusiveMinimum": 0, "maximum": 20,
                        "description": "nats per report; the mechanism is chosen for it"},
            "categories": {"type": "array", "minItems": 2, "maxItems": 1024,
                           "items": {"type": "string", "minLength": 1, "maxLength": 100}},
            "edges": {"type": "array", "minItems": 3, "maxItems": 1025,
                      "items": {"type": ["number", "string"]}},
            "lower": {"type": ["number", "string"]},
            "upper": {"type": ["number", "string"]},
            "clamp": {"type": "boolean"},
            "description": {"type": "string"},
            "retention_days": {"type": "integer", "minimum": 1},
            **POLICY_PROPERTIES,
            **DIMENSION_PROPERTIES,
        },
    },
    "MetricEntry": {
        "type": "object",
        "required": ["name", "description", "retention_days", "retired", "version", "mechanism",
                     "versions"],
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "retention_days": {"type": "integer"},
            "retired": {"type": ["string", "null"]},
            "version": {"type": "integer", "description": "the current version"},
            "mechanism": {"type": "string", "description": "the current version's mechanism"},
            **SPEC_PROPERTIES,
            **DIMENSION_PROPERTIES,
            "versions": {"type": "array", "items": {
                "type": "object",
                "required": ["version", "registered", "kind", "mechanism", "p1", "q",
                             "epsilon"],
                "properties": {"version": {"type": "integer"}, "registered": {"type": "string"},
                               **SPEC_PROPERTIES,
                               "mechanism": {"type": "string"},
                               "p1": {"type": "string"}, "q": {"type": "string"},
                               "p_yes_given_yes": {"type": "string"},
                               "p_yes_given_no": {"type": "string"},
                               "epsilon": {"type": "number"}, **POLICY_PROPERTIES}}},
        },
    },
    "RegistryResult": {
        "type": "object", "required": ["result", "metric"],
        "properties": {"result": {"type": "string",
                                  "enum": ["created", "new_version", "updated", "unchanged",
                                           "retired"]},
                       "metric": _ref("MetricEntry")},
    },
})

TIME_RANGE: list[dict[str, Any]] = [
    {"name": "from", "in": "query", "required": False,
     "schema": {"type": "string", "format": "date-time"},
     "description": "ISO 8601 start (UTC if no offset); default: 'to' minus 7 days"},
    {"name": "to", "in": "query", "required": False,
     "schema": {"type": "string", "format": "date-time"},
     "description": "ISO 8601 end, excluded (UTC if no offset); default: now"},
]
"""The ``from``/``to`` query range, parsed by ``params.time_range`` for every endpoint taking it."""

PUBLIC: list[dict[str, list[str]]] = []
"""The ``security`` of operations that need no key."""

PATHS: dict[str, dict[str, Any]] = {
    "/v1/reports": {"post": {
        "operationId": "postReports",
        "summary": "Send one batch of perturbed values (bits, category indexes, bitsets)",
        "description": "Accepted whole or not at all; with Prefer: handling=lenient "
                       "(RFC 7240), per metric: the metrics whose reports break a rule are "
                       "listed in refused[] and not counted, the others are. A re-sent "
                       "batch_id with the same content is acknowledged and counted once; with "
                       "other content, 409. A body with duplicate JSON keys is rejected with "
                       "400.",
        "parameters": [{"name": "Prefer", "in": "header", "required": False,
                        "schema": {"type": "string", "example": "handling=lenient"},
                        "description": "handling=lenient: accept per metric (answered with "
                                       "Preference-Applied: handling=lenient)"}],
        "requestBody": {"required": True, "content": {MEDIA_TYPE: {"schema": _ref("Batch")}}},
        "responses": {
            "202": _json("The batch was counted.", _ref("Accepted")),
            "200": _json("This batch was already counted; nothing changed.", _ref("Duplicate")),
            "400": _problem("The body is not valid UTF-8 JSON, or repeats a key."),
            "409": _problem("The batch_id was used for a batch with other content."),
            "413": _problem("The body is larger than DENIABLE_MAX_BODY_BYTES."),
            "415": _problem("The body is not application/json."),
            "422": _problem("The batch breaks the wire format; errors[] holds JSON pointers. "
                            "With handling=lenient: every metric was refused (refused[] "
                            "lists them), or the batch itself breaks the format."),
            "503": UNAVAILABLE,
        },
    }},
    "/v1/metrics": {"get": {
        "operationId": "listMetrics",
        "summary": "The registered metrics, each with its mechanism and exact guarantee",
        "responses": {
            "200": _json("The registered metrics.", {
                "type": "object", "required": ["metrics"],
                "properties": {"metrics": {"type": "array", "items": _ref("Metric")}}}),
        },
    }},
    "/v1/metrics/{name}/counts": {"get": {
        "operationId": "metricCounts",
        "summary": "Perturbed counts per UTC hour over [from, to); by default the last 7 days",
        "parameters": [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
            *TIME_RANGE,
            {"name": "granularity", "in": "query", "required": False,
             "schema": {"type": "string", "enum": ["hour", "day", "week"]},
             "description": "hour buckets (default), or sums per UTC day or ISO week "
                            "(Monday); the range widens to whole days or weeks"},
            {"name": "version", "in": "query", "required": False,
             "schema": {"type": "string", "pattern": "^[0-9]{1,9}$"},
             "description": "read this version of the metric (default: the current one)"},
            {"name": "mechanism", "in": "query", "required": False,
             "schema": {"type": "string"},
             "description": "read the version that used this mechanism id"},
            {"name": "series", "in": "query", "required": False,
             "schema": {"type": "string", "examples": ["platform=ios"]},
             "description": "read one public-dimension series instead of the total: "
                            "dimension=value, or a declared combination's "
                            "a=x,b=y; not with 'by'"},
            {"name": "by", "in": "query", "required": False,
             "schema": {"type": "string", "examples": ["platform"]},
             "description": "also read every series of this dimension (or declared "
                            "combination a,b), 'other' included, in one round trip"},
        ],
        "responses": {
            "200": _json("Non-empty buckets, oldest first.", _ref("Counts")),
            "404": _problem("No metric of that name, no such version, or no such series or "
                            "dimension; errors[] names the parameter."),
            "422": _problem("A bad or too long time range, a malformed series or by, or both; "
                            "errors[] names the parameter."),
            "503": UNAVAILABLE,
        },
    }},
    "/v1/admin/metrics": {
        "post": {
            "operationId": "registerMetric",
            "summary": "Register a metric, or a new version of one (admin key)",
            "description": "A metric's mechanism and declaration never change in place: "
                           "another mechanism (a changed category list, edges or bounds "
                           "makes one) is a new version with its own counters.",
            "requestBody": {"required": True,
                            "content": {MEDIA_TYPE: {"schema": _ref("MetricRegistration")}}},
            "responses": {
                "201": _json("Created, or a new version.", _ref("RegistryResult")),
                "200": _json("Description or retention updated, or nothing changed.",
                             _ref("RegistryResult")),
                "400": _problem("The body is not valid JSON, or repeats a key."),
                "409": _problem("The metric is retired, an older version used that "
                                "mechanism, or the current mechanism is registered again with "
                                "another policy or declaration; errors[] names the field."),
                "415": _problem("The body is not application/json."),
                "422": _problem("Invalid fields; errors[] holds JSON pointers."),
                "503": UNAVAILABLE,
            },
        },
        "get": {
            "operationId": "listAllMetrics",
            "summary": "Every metric with all its versions, retired ones included (admin key)",
            "responses": {
                "200": _json("All metrics.", {
                    "type": "object", "required": ["metrics"],
                    "properties": {"metrics": {"type": "array",
                                               "items": _ref("MetricEntry")}}}),
                "503": UNAVAILABLE,
            },
        },
    },
    "/v1/admin/metrics/{name}/retire": {"post": {
        "operationId": "retireMetric",
        "summary": "Stop accepting reports for a metric; its counts stay readable (admin key)",
        "parameters": [{"name": "name", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {
            "200": _json("Retired (idempotent).", _ref("RegistryResult")),
            "404": _problem("No metric of that name."),
            "503": UNAVAILABLE,
        },
    }},
    "/dashboard": {"get": {
        "operationId": "dashboard",
        "summary": "The live dashboard page. It holds no data: its script fetches the "
                   "catalogue and the numbers with a read key, given as #token=... in the "
                   "URL fragment or typed into the page",
        "security": PUBLIC,
        "responses": {"200": {"description": "The page.",
                              "content": {"text/html": {"schema": {"type": "string"}}}}},
    }},
    "/dashboard/data": {"get": {
        "operationId": "dashboardData",
        "summary": "One metric's debiased time series and summary for the dashboard (read key)",
        "parameters": [
            {"name": "metric", "in": "query", "required": True, "schema": {"type": "string"}},
            *TIME_RANGE,
            {"name": "every", "in": "query", "required": False,
             "schema": {"type": "string", "enum": ["hour", "day", "week"]}},
            {"name": "rolling", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            {"name": "version", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000000}},
        ],
        "responses": {
            "200": _json("The metric's version, collection policy, estimand and range; buckets "
                         "with estimates, window intervals, n, periods and flags; for a "
                         "boolean or numeric metric its versions and (history) each older "
                         "version's buckets with reports in the range, debiased with its own "
                         "mechanism.", {"type": "object"}),
            "404": _problem("No metric of that name, or no such version."),
            "422": _problem("A bad parameter; errors[] names it."),
            "503": UNAVAILABLE,
        },
    }},
    "/dashboard/breakdown": {"get": {
        "operationId": "dashboardBreakdown",
        "summary": "One metric broken down by a public dimension it declares, for the "
                   "dashboard (read key); cells with fewer than min_reports devices (the "
                   "most reports in one period) are suppressed",
        "parameters": [
            {"name": "metric", "in": "query", "required": True, "schema": {"type": "string"}},
            {"name": "by", "in": "query", "required": True, "schema": {"type": "string"}},
            {"name": "min_reports", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000000000}},
            *TIME_RANGE,
        ],
        "responses": {
            "200": _json("One cell per value (label, n, devices, suppressed, reason, and for "
                         "shown cells "
                         "the estimate of the metric's kind), the not-stated count and a note "
                         "naming what was suppressed.", {"type": "object"}),
            "404": _problem("No metric of that name, or no such dimension or combination."),
            "422": _problem("A bad parameter; errors[] names it."),
            "503": UNAVAILABLE,
        },
    }},
    "/dashboard/static/{filename}": {"get": {
        "operationId": "dashboardStatic",
        "summary": "The dashboard's script and style sheet",
        "security": PUBLIC,
        "parameters": [{"name": "filename", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {"200": {"description": "The file."},
                      "404": _problem("No such file.")},
    }},
    OPENAPI_PATH: {"get": {
        "operationId": "openapi",
        "security": PUBLIC,
        "summary": "This document",
        "responses": {"200": _json("The OpenAPI 3.1 document.", {"type": "object"})},
    }},
    "/healthz": {"get": {
        "operationId": "healthz",
        "security": PUBLIC,
        "summary": "Liveness: the process answers (does not look at Redis)",
        "responses": {"200": _json("Alive.", {
            "type": "object", "required": ["status"],
            "properties": {"status": {"const": "ok"}}})},
    }},
    "/readyz": {"get": {
        "operationId": "readyz",
        "security": PUBLIC,
        "summary": "Readiness: every Redis master would take a write now",
        "responses": {
            "200": _json("Ready.", {"type": "object", "required": ["status"],
                                    "properties": {"status": {"const": "ready"}}}),
            "503": UNAVAILABLE,
        },
    }},
    "/metrics": {"get": {
        "operationId": "prometheusMetrics",
        "security": PUBLIC,
        "summary": "Prometheus metrics, summed over all workers (keep it off the internet)",
        "responses": {"200": {"description": "Prometheus text exposition format.",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}},
    }},
}

COMMON_RESPONSES = {
    "405": _problem("The path does not take this method."),
    "413": _problem("The body is larger than DENIABLE_MAX_BODY_BYTES."),
    "500": _problem("A bug: the response carries no stack trace."),
}
"""Answers any operation may give, added to every operation that does not list its own."""

AUTH_RESPONSES = {
    "401": _problem("No key, a malformed header, or an unknown or revoked key "
                    "(with WWW-Authenticate: Bearer)."),
    "403": _problem("A valid key of a role this operation does not take."),
    "429": _problem("A rate limit was exceeded: retry after Retry-After seconds.",
                    retry_after=True),
}
"""Answers of every operation that wants a key (when DENIABLE_AUTH is on)."""


def add_operation(path: str, method: str, operation: dict[str, Any]) -> None:
    """Document one more route: ``path`` in OpenAPI form (``/v1/x/{name}``), ``method`` lower."""
    PATHS.setdefault(path, {})[method.lower()] = operation


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document, as a fresh dict; its ``kind`` enums name the kinds
    registered now."""
    paths = copy.deepcopy(PATHS)
    for operations in paths.values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            extra = COMMON_RESPONSES if operation.get("security") == PUBLIC \
                else {**COMMON_RESPONSES, **AUTH_RESPONSES}
            for status, response in extra.items():
                responses.setdefault(status, copy.deepcopy(response))
            for response in responses.values():
                response.setdefault("headers", {})["X-Request-Id"] = {
                    "$ref": "#/components/headers/X-Request-Id"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Deniable collector", "version": "1",
                 "description": "Collects perturbed bits under local differential privacy "
                                "(randomized response) and serves perturbed counts."},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "An API key (dnk_...) of the role the operation takes: ingest "
                               "sends reports, read reads counts, admin registers metrics. "
                               "Not needed when the collector runs with DENIABLE_AUTH=off."}},
            "schemas": copy.deepcopy(SCHEMAS, {id(KIND_ENUM): list(REGISTRY)}),
            "headers": {
                "Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "string", "pattern": "^[0-9]+$"}},
                "X-Request-Id": {"description": "The request's id: the caller's, if it was "
                                                "8-64 of [A-Za-z0-9_-], else a fresh one.",
                                 "schema": {"type": "string"}},
            },
        },
    }


def init_app(app: Flask) -> None:
    """Serve the document at ``/v1/openapi.json``."""

    @app.get(OPENAPI_PATH)
    def openapi_document() -> Response:
        """This API's OpenAPI 3.1 document."""
        return Response(orjson.dumps(document()), mimetype=MEDIA_TYPE)
