"""The OpenAPI document is true to the code: every route is documented, every documented
operation is served."""
from __future__ import annotations

import re

import pytest
import requests
import schemathesis

from deniable.collector import openapi

AUTOMATIC_METHODS = {"HEAD", "OPTIONS"}


def openapi_path(rule: str) -> str:
    """Flask's ``/v1/metrics/<name>/counts`` (or ``<string:name>``) as ``/v1/metrics/{name}/counts``."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def test_every_route_is_documented_and_every_operation_is_routed(app) -> None:  # type: ignore[no-untyped-def]
    served = {(openapi_path(rule.rule), method.lower())
              for rule in app.url_map.iter_rules()
              for method in (rule.methods or set()) - AUTOMATIC_METHODS}
    documented = {(path, method) for path, operations in openapi.document()["paths"].items()
                  for method in operations}
    assert served - documented == set(), "routes missing from src/deniable/collector/openapi.py"
    assert documented - served == set(), "documented operations that no route serves"


def test_path_parameters_match_the_routes(app) -> None:  # type: ignore[no-untyped-def]
    doc = openapi.document()
    for rule in app.url_map.iter_rules():
        path = openapi_path(rule.rule)
        for method, operation in doc["paths"][path].items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == set(rule.arguments), (path, method)


@pytest.mark.slow
def test_the_document_is_served_and_loads_as_openapi_3_1(live_collector) -> None:  # type: ignore[no-untyped-def]
    response = requests.get(f"{live_collector.url}{openapi.OPENAPI_PATH}", timeout=10)
    assert response.status_code == 200
    served = response.json()
    assert served == openapi.document()
    assert served["openapi"] == "3.1.0"
    schema = schemathesis.openapi.from_dict(served)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(ops) for ops in served["paths"].values())


def test_add_operation_documents_a_new_route() -> None:
    path = "/v1/example/{thing}"
    try:
        openapi.add_operation(path, "GET", {"responses": {"200": {"description": "ok"}}})
        assert "get" in openapi.document()["paths"][path]
        assert "500" in openapi.document()["paths"][path]["get"]["responses"]
    finally:
        openapi.PATHS.pop(path)
