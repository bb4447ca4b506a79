"""HTTP errors as RFC 9457 problem documents (``application/problem+json``).

Every error the API returns is one JSON object::

    {"type": "about:blank", "title": "Unprocessable Content", "status": 422,
     "detail": "the batch breaks the v1 wire format",
     "errors": [{"pointer": "/reports/3/bit", "detail": "must be the integer 0 or 1"}]}

No error ever carries a stack trace, a report body or a client address.
"""
from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import orjson
from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from deniable.client.errors import DeniableError, Problem

PROBLEM_TYPE = "application/problem+json"
log = logging.getLogger("deniable.collector")


class CollectorError(DeniableError):
    """Root of the collector's own errors."""


class APIError(CollectorError):
    """An HTTP error answered as a problem document.

    Args:
        status: the HTTP status.
        detail: a human-readable explanation.
        problems: offending fields, as JSON pointers into the request body.
        parameters: offending query parameters, by name.
        headers: extra response headers, e.g. Retry-After.
        members: extension members of the problem document (RFC 9457), e.g. ``refused``.
    """

    def __init__(self, status: int, detail: str, problems: list[Problem] | None = None,
                 parameters: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None,
                 members: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.members = members or {}
        self.status = status
        self.detail = detail
        self.problems = problems or []
        self.parameters = parameters or {}
        self.headers = headers or {}

    def errors(self) -> list[dict[str, str]]:
        """The offending fields (``pointer``) and query parameters (``parameter``)."""
        found = [{"pointer": p.pointer, "detail": p.detail} for p in self.problems]
        return found + [{"parameter": name, "detail": d} for name, d in self.parameters.items()]

    def document(self) -> bytes:
        """This error as a problem+json body."""
        return problem_document(self.status, self.detail, self.errors(), self.members)


def problem_document(status: int, detail: str, errors: list[dict[str, str]] | None = None,
                     members: dict[str, Any] | None = None) -> bytes:
    """A problem+json body: type, title (the status phrase), status, detail and errors, then
    any extension ``members``."""
    body: dict[str, Any] = {"type": "about:blank", "title": HTTPStatus(status).phrase,
                            "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    if members:
        body.update(members)
    return orjson.dumps(body)


def problem_response(status: int, detail: str, errors: list[dict[str, str]] | None = None,
                     headers: dict[str, str] | None = None) -> Response:
    """Build a problem+json response."""
    response = Response(problem_document(status, detail, errors), status=status,
                        mimetype=PROBLEM_TYPE)
    response.headers.update(headers or {})
    return response


def storage_unavailable(exc: BaseException, retry_after_seconds: int) -> APIError:
    """The 503 for Redis being down or failing over: counted, logged (its class only), and
    carrying ``Retry-After``."""
    # Imported here: prometheus_client picks its multiprocess mode at import, which must come
    # after `deniable serve` (which imports this module) has set PROMETHEUS_MULTIPROC_DIR.
    from deniable.collector import observability

    observability.count_storage_error(exc)
    log.warning("storage unavailable: %s", type(exc).__name__)
    return APIError(503, "storage is unavailable; retry later",
                    headers={"Retry-After": str(retry_after_seconds)})


def internal_error(exc: BaseException) -> APIError:
    """The 500 for a bug: logged with its stack trace, answered without one."""
    from deniable.collector import observability

    observability.count_storage_error(exc)
    log.error("unhandled %s", type(exc).__name__, exc_info=exc)
    return APIError(500, "internal error")


def as_problem(exc: Exception, retry_after_seconds: int) -> APIError:
    """The problem to answer for any exception: itself if an APIError, 503 for Redis being
    unavailable, else 500 (a bug)."""
    from deniable.collector.store import unavailable

    if isinstance(exc, APIError):
        return exc
    if unavailable(exc):
        return storage_unavailable(exc, retry_after_seconds)
    return internal_error(exc)


def register_error_handlers(app: Flask, retry_after_seconds: int) -> None:
    """Answer every error, ours and werkzeug's, as problem+json.

    Args:
        app: the collector's app.
        retry_after_seconds: the ``Retry-After`` of a 503 while storage is unavailable (the
            ``redis.retry_after_seconds`` setting; settings.py imports this module, so the
            app factory passes it in).
    """

    @app.errorhandler(APIError)
    def _api_error(exc: APIError) -> Response:
        return problem_response(exc.status, exc.detail, exc.errors(), exc.headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        response = problem_response(status, exc.description or HTTPStatus(status).phrase)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(Exception)
    def _other(exc: Exception) -> Response:  # Redis unavailable (503) or a bug (500)
        return _api_error(as_problem(exc, retry_after_seconds))
