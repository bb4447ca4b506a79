"""Security headers on every answer of the Flask app (the ingest endpoint answers JSON only).

- ``X-Content-Type-Options: nosniff`` everywhere: a browser never reads JSON or a problem
  document as HTML or script.
- HTML pages (the dashboard): a Content-Security-Policy that allows only same-origin script,
  style, images and fetches, no inline script or style, no plugins, no framing
  (``frame-ancestors 'none'``, and ``X-Frame-Options: DENY`` for older browsers), and no
  Referer (the page URL may have carried a key in its fragment).
- Everything else: ``Content-Security-Policy: default-src 'none'; frame-ancestors 'none'``,
  so a JSON answer opened in a browser can run and load nothing.
"""
from __future__ import annotations

from flask import Flask, Response

HTML_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
               "connect-src 'self'; form-action 'self'; base-uri 'none'; "
               "frame-ancestors 'none'")
"""The dashboard's policy: its own script and stylesheet, fetches to its own origin."""
API_POLICY = "default-src 'none'; frame-ancestors 'none'"


def init_app(app: Flask) -> None:
    """Add the security headers to every response ``app`` builds."""

    @app.after_request
    def _secure(response: Response) -> Response:
        headers = response.headers
        headers["X-Content-Type-Options"] = "nosniff"
        if response.mimetype == "text/html":
            headers["Content-Security-Policy"] = HTML_POLICY
            headers["X-Frame-Options"] = "DENY"
            headers["Referrer-Policy"] = "no-referrer"
        else:
            headers.setdefault("Content-Security-Policy", API_POLICY)
        return response
