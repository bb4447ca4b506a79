"""Schemathesis against a live collector (gunicorn, real Redis): every operation in the OpenAPI
document, a few hundred generated requests each, valid and invalid by the document. Pass bar:
no 5xx, and every answer conforms to the document (status code, content type, headers, body)."""
from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode, checks

from deniable.collector.openapi import OPENAPI_PATH, document

EXAMPLES = 300
CHECKS = [checks.not_a_server_error, checks.status_code_conformance,
          checks.content_type_conformance, checks.response_headers_conformance,
          checks.response_schema_conformance]
OPERATIONS = [(path, method) for path, operations in document()["paths"].items()
              for method in operations]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_every_operation_conforms_and_never_answers_5xx(live_collector, path: str,  # type: ignore[no-untyped-def]
                                                       method: str) -> None:
    served = requests.get(f"{live_collector.url}{OPENAPI_PATH}", timeout=10).json()
    schema = schemathesis.openapi.from_dict(served)
    operation = schema[path][method.upper()]
    strategy = (operation.as_strategy(GenerationMode.POSITIVE)
                | operation.as_strategy(GenerationMode.NEGATIVE))

    with requests.Session() as session:
        @given(case=strategy)
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case) -> None:  # type: ignore[no-untyped-def]
            case.call_and_validate(base_url=live_collector.url, session=session, checks=CHECKS)

        run()
