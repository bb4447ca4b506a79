"""CORS for the two routes a web page calls: ``POST /v1/reports`` and ``GET /v1/metrics``.

Off by default (``CORS_ORIGINS`` empty): the collector then answers exactly as without this
module, and a browser refuses to let any other origin read its answers. With origins set,
``cors_in_front_of`` wraps the WSGI app:

- a request to one of the two routes from an allowed ``Origin`` gets
  ``Access-Control-Allow-Origin: <that origin>`` and ``Access-Control-Expose-Headers:
  Retry-After, X-Request-ID`` (the web client honours ``Retry-After``); every answer on the two
  routes carries ``Vary: Origin``, so a cache never serves one origin's answer to another;
- a preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is answered
  here, before auth and rate limits, without touching Redis: 204 with the allowed method, the
  headers ``Authorization, Content-Type, Prefer`` (the web client asks for per-metric
  acceptance with ``Prefer: handling=lenient``) and a ``Max-Age``, when the origin, the method and
  every requested header are allowed; otherwise 403 (problem+json) with no CORS header;
- credentials (cookies) are never allowed: the web client sends its key in ``Authorization``
  and no cookies. Every other route (admin, counts, dashboard, metrics endpoint) gets nothing.

``"*"`` in the list allows every origin (for an ingest key shipped in public pages anyway).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from deniable.client.wire import METRICS_PATH, REPORTS_PATH
from deniable.collector.errors import PROBLEM_TYPE, CollectorError, problem_document

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

ROUTES: dict[str, str] = {REPORTS_PATH: "POST", METRICS_PATH: "GET"}
"""path -> the one method a cross-origin page may use on it."""
ALLOWED_HEADERS = frozenset({"authorization", "content-type", "prefer"})
EXPOSED_HEADERS = "Retry-After, X-Request-ID"
MAX_AGE_SECONDS = 600
_ORIGIN = re.compile(r"^https?://[a-z0-9.-]+(:[0-9]{1,5})?$|^https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?$")


def parse_origins(value: object) -> frozenset[str]:
    """The ``CORS_ORIGINS`` setting as a set of origins: a list, or a string of origins
    separated by commas or spaces. Each is ``scheme://host[:port]`` (no path, no trailing
    slash), or ``*``.

    Raises:
        CollectorError: a value that is not an origin.
    """
    if value is None or value == "":
        return frozenset()
    items = re.split(r"[,\s]+", value.strip()) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise CollectorError(f"CORS_ORIGINS must be a list of origins. Got {value!r} instead.")
    origins = set()
    for item in items:
        if not isinstance(item, str):
            raise CollectorError(f"CORS_ORIGINS entries must be strings. Got {item!r} instead.")
        origin = item.strip().lower()
        if origin == "":
            continue
        if origin != "*" and not _ORIGIN.match(origin):
            raise CollectorError(
                f"CORS_ORIGINS entries must be origins such as 'https://app.example.com' "
                f"(scheme, host, optional port; no path or trailing slash) or '*'. "
                f"Got {item!r} instead.")
        origins.add(origin)
    return frozenset(origins)


def cors_in_front_of(app: WSGIApp, origins: frozenset[str]) -> WSGIApp:
    """``app`` with CORS on the web client's routes; ``app`` itself when no origin is allowed."""
    if not origins:
        return app
    any_origin = "*" in origins

    def allowed(origin: str | None) -> bool:
        return origin is not None and (any_origin or origin in origins)

    def cors(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = ROUTES.get(environ.get("PATH_INFO", ""))
        if method is None:
            return app(environ, start_response)
        origin = environ.get("HTTP_ORIGIN")
        requested = environ.get("HTTP_ACCESS_CONTROL_REQUEST_METHOD")
        if environ.get("REQUEST_METHOD") == "OPTIONS" and origin is not None and requested:
            return _preflight(start_response, origin, allowed(origin), method, requested,
                              environ.get("HTTP_ACCESS_CONTROL_REQUEST_HEADERS", ""))
        extra = [("Vary", "Origin")]
        if allowed(origin):
            extra += [("Access-Control-Allow-Origin", str(origin)),
                      ("Access-Control-Expose-Headers", EXPOSED_HEADERS)]

        def with_cors(status: str, headers: list[tuple[str, str]],
                      exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *extra], exc_info)

        return app(environ, with_cors)

    return cors


def _preflight(start_response: Callable[..., Any], origin: str, origin_allowed: bool,
               method: str, requested: str, requested_headers: str) -> Iterable[bytes]:
    headers = {h.strip().lower() for h in requested_headers.split(",") if h.strip()}
    vary = ("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
    if not origin_allowed:
        refusal = f"the origin {origin} may not call this collector"
    elif requested != method:
        refusal = f"a cross-origin page may only {method} this route, not {requested}"
    elif not headers <= ALLOWED_HEADERS:
        refusal = (f"the headers {', '.join(sorted(headers - ALLOWED_HEADERS))} are not allowed "
                   f"(only Authorization and Content-Type)")
    else:
        start_response("204 No Content", [
            ("Access-Control-Allow-Origin", origin),
            ("Access-Control-Allow-Methods", method),
            ("Access-Control-Allow-Headers", "Authorization, Content-Type, Prefer"),
            ("Access-Control-Max-Age", str(MAX_AGE_SECONDS)), vary, ("Content-Length", "0")])
        return [b""]
    body = problem_document(403, f"CORS preflight refused: {refusal}")
    start_response("403 Forbidden", [("Content-Type", PROBLEM_TYPE),
                                     ("Content-Length", str(len(body))), vary])
    return [body]
