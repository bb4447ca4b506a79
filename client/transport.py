"""HTTP transport to the collector: one ``requests.Session``, timeouts on every call.

Retries are safe because every batch carries an id the collector deduplicates: a retried POST
re-sends the same ``batch_id`` and is counted once. ``Transport(retries=0)`` makes exactly one
attempt per call and reports ``Retry-After`` on the raised ``UploadError``, for a caller (the
background ``Sender``) that owns its own retry policy.
"""
from __future__ import annotations

import email.utils
import http.cookiejar
import json
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from deniable.client.errors import InvalidParameterError, UploadError, WireFormatError
from deniable.client.metrics import Catalogue, parse_catalogue
from deniable.client.wire import MEDIA_TYPE, METRICS_PATH, REPORTS_PATH

DEFAULT_TIMEOUT = (3.05, 10.0)
"""(connect, read) timeouts in seconds for every request."""
RETRYABLE_STATUSES = (429, 502, 503, 504)


class Transport:
    """Talks to one collector.

    Args:
        collector_url: the collector's base URL, e.g. ``https://telemetry.example.com``.
        timeout: (connect, read) timeouts in seconds.
        retries: how many times one request is retried on connection errors, timeouts and
            429/502/503/504 (honouring ``Retry-After``), with exponential backoff. 0 means one
            attempt per call, no retry at all.
        token: an ingest key, sent as ``Authorization: Bearer``, if the collector wants one.
        session: a session to use instead of a new one.
    """

    def __init__(self, collector_url: str, *, timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 retries: int = 3, backoff: float = 0.5, token: str | None = None,
                 session: requests.Session | None = None) -> None:
        self.base_url = collector_url.rstrip("/")
        self.timeout = timeout
        self._session = session or requests.Session()
        # No cookies: a cookie jar would let a collector tie a device's batches together.
        self._session.cookies.set_policy(_NoCookies())
        if retries < 0:
            raise InvalidParameterError(f"retries must be at least 0. Got {retries} instead.")
        if retries == 0:
            retry = Retry(total=0, read=False, redirect=False, raise_on_status=False)
        else:
            retry = Retry(total=retries, connect=retries, read=retries, status=retries,
                          backoff_factor=backoff, status_forcelist=RETRYABLE_STATUSES,
                          allowed_methods=frozenset({"GET", "POST"}),
                          respect_retry_after_header=True, raise_on_status=False)
        adapter = HTTPAdapter(max_retries=retry)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._headers = {"Content-Type": MEDIA_TYPE, "Accept": "application/json",
                         "User-Agent": "deniable-client"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def fetch_catalogue(self) -> Catalogue:
        """GET /v1/metrics and parse it into name -> mechanism."""
        return parse_catalogue(self.fetch_catalogue_document())

    def fetch_catalogue_document(self) -> Any:
        """GET /v1/metrics and return the parsed JSON document, unvalidated."""
        response = self._request("GET", METRICS_PATH)
        try:
            return response.json()
        except ValueError as exc:
            raise WireFormatError(f"{self.base_url}{METRICS_PATH} did not return JSON") from exc

    def send(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST one batch document; return the collector's JSON answer (a 2xx).

        Raises:
            UploadError: with ``retryable`` False for a 4xx other than 429 (the batch itself
                was refused, so sending it again cannot help).
        """
        return self.send_raw(json.dumps(body, separators=(",", ":")).encode())

    def send_raw(self, data: bytes) -> dict[str, Any]:
        """POST one already encoded batch document (the exact bytes); return the JSON answer.

        Raises:
            UploadError: as ``send``; ``retry_after`` holds the collector's ``Retry-After``
                in seconds, if it sent one.
        """
        response = self._request("POST", REPORTS_PATH, data=data)
        try:
            return response.json() if response.content else {}
        except ValueError:
            return {}

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, path: str, data: bytes | None = None) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            response = self._session.request(method, url, data=data, headers=self._headers,
                                             timeout=self.timeout, allow_redirects=False)
        except requests.RequestException as exc:
            raise UploadError(f"{method} {url} failed: {type(exc).__name__}") from exc
        if response.status_code >= 400:
            retryable = response.status_code in RETRYABLE_STATUSES or response.status_code >= 500
            raise UploadError(
                f"{method} {url} answered {response.status_code}: {_problem_detail(response)}",
                status=response.status_code, retryable=retryable,
                retry_after=parse_retry_after(response.headers.get("Retry-After")))
        return response


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now (RFC 9110: delay-seconds or an HTTP-date).

    Returns None for a missing or unparsable header; never a negative number.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _problem_detail(response: requests.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        return response.reason or ""
    detail = str(doc.get("detail") or doc.get("title") or "")
    errors = doc.get("errors") or []
    if errors:
        detail += " (" + "; ".join(f"{e.get('pointer', '')} {e.get('detail', '')}"
                                   for e in errors[:5]) + ")"
    return detail


class _NoCookies(http.cookiejar.CookiePolicy):
    """A cookie policy that accepts and returns no cookies."""

    netscape = True
    rfc2965 = False
    hide_cookie2 = False

    def set_ok(self, cookie: Any, request: Any) -> bool:
        return False

    def return_ok(self, cookie: Any, request: Any) -> bool:
        return False

    def domain_return_ok(self, domain: str, request: Any) -> bool:
        return False

    def path_return_ok(self, path: str, request: Any) -> bool:
        return False
