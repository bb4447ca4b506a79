"""HTTP transport to the collector: one ``requests.Session``, timeouts on every call.

Retries are safe because every batch carries an id the collector deduplicates: a retried POST
re-sends the same ``batch_id`` and is counted once. Every batch is sent with ``Prefer:
handling=lenient``: the collector counts the metrics it accepts and lists the others in the
answer's ``refused`` member (``deniable.client.wire``), so one mismatched metric never costs
the batch. ``Transport(retries=0)`` makes exactly one
attempt per call and reports ``Retry-After`` on the raised ``UploadError``, for a caller (the
background ``Sender``) that owns its own retry policy.
"""
from __future__ import annotations

import email.utils
import http.cookiejar
import json
import os
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from deniable.client.errors import InvalidParameterError, UploadError, WireFormatError
from deniable.client.kinds import Mechanism
from deniable.client.metrics import parse_catalogue
from deniable.client.wire import (LENIENT_PREFERENCE, MEDIA_TYPE, METRICS_PATH, PREFER_HEADER,
                                  REPORTS_PATH, parse_refused)

if TYPE_CHECKING:  # requests is imported when the first Transport is made: importing the
    import requests  # client (its mechanisms alone, say) does not load it

DEFAULT_TIMEOUT = (3.05, 10.0)
"""(connect, read) timeouts in seconds for every request."""
RETRYABLE_STATUSES = (429, 502, 503, 504)
BAD_BATCH_STATUSES = (400, 409, 413, 422)
"""The only answers that mean "this batch can never be accepted as it is": dead-lettered
(malformed, batch id used for other content, too large, breaks the wire rules)."""
KEY_REFUSED_STATUSES = (401, 403)

Verify = bool | str | os.PathLike[str]
"""TLS certificate verification, as ``requests`` takes it: True (the system's CA store, or
``certifi``'s), a path to a CA bundle (PEM) or a directory of CA certificates, or False."""


def status_kind(status: int) -> str:
    """The ``UploadError.kind`` of an HTTP error status (>= 400)."""
    if status in BAD_BATCH_STATUSES:
        return "bad_batch"
    if status in KEY_REFUSED_STATUSES:
        return "key_refused"
    if status in (408, 429) or status >= 500:
        return "network"
    return "config"


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
        verify: TLS verification (``Verify``), passed on every request, so the process-wide
            ``REQUESTS_CA_BUNDLE`` cannot replace a CA bundle given here.
    """

    def __init__(self, collector_url: str, *, timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 retries: int = 3, backoff: float = 0.5, token: str | None = None,
                 session: requests.Session | None = None, verify: Verify = True) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        self.base_url = collector_url.rstrip("/")
        self.host = urlsplit(self.base_url).hostname or self.base_url
        self.timeout = timeout
        self.verify: bool | str = verify if isinstance(verify, bool) else os.fspath(verify)
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
                         "User-Agent": "deniable-client", PREFER_HEADER: LENIENT_PREFERENCE}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def fetch_catalogue(self) -> dict[str, Mechanism]:
        """GET /v1/metrics and parse it into name -> mechanism (``parse_catalogue`` gives the
        whole ``MetricSpec`` of each)."""
        return {name: spec.mechanism
                for name, spec in parse_catalogue(self.fetch_catalogue_document()).items()}

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
            UploadError: with ``kind`` "bad_batch" (``retryable`` False) for a 400, 409,
                413 or 422: the batch itself was refused, so sending it again cannot help.
        """
        return self.send_raw(json.dumps(body, separators=(",", ":")).encode())

    def send_raw(self, data: bytes) -> dict[str, Any]:
        """POST one already encoded batch document (the exact bytes); return the JSON answer
        (its ``refused`` member lists the metrics refused, ``wire.parse_refused`` reads it).

        Raises:
            UploadError: as ``send``; ``retry_after`` holds the collector's ``Retry-After``
                in seconds, if it sent one; ``refused`` the metrics of a 422 that refused
                every metric of the batch.
        """
        response = self._request("POST", REPORTS_PATH, data=data)
        try:
            return response.json() if response.content else {}
        except ValueError:
            return {}

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, path: str, data: bytes | None = None) -> requests.Response:
        import requests

        url = f"{self.base_url}{path}"
        try:
            response = self._session.request(method, url, data=data, headers=self._headers,
                                             timeout=self.timeout, allow_redirects=False,
                                             verify=self.verify)
        except requests.exceptions.SSLError as exc:
            raise UploadError(f"{method} {url} failed: {_tls_failure(self.host, exc)}",
                              kind="tls") from exc
        except requests.RequestException as exc:
            raise UploadError(f"{method} {url} failed: {_network_failure(self.host, exc)}",
                              kind="network") from exc
        status = response.status_code
        if status >= 400:
            kind = status_kind(status)
            detail = _problem_detail(response)
            if kind == "key_refused":
                detail = f"the collector refused the ingest key ({detail})"
            raise UploadError(
                f"{method} {url} answered {status}: {detail}", status=status, kind=kind,
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
                refused=_refused_of(response) if status == 422 else None)
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


def _tls_failure(host: str, exc: Exception) -> str:
    """A TLS failure that names itself, e.g. "certificate verify failed for host x: ..."."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        reason = text.split("certificate verify failed", 1)[-1].strip(" :)'\"")
        reason = reason.split("(_ssl.c")[0].strip(" :(")
        return f"certificate verify failed for host {host}" + (f": {reason}" if reason else "")
    return f"TLS handshake failed for host {host} ({type(exc).__name__})"


def _network_failure(host: str, exc: Exception) -> str:
    """What kind of network failure: DNS, refused, timed out, or another (by class name)."""
    import requests

    text = str(exc)
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"connecting to host {host} timed out (ConnectTimeout)"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return f"host {host} did not answer in time (ReadTimeout)"
    if "NameResolutionError" in text or "Name or service not known" in text or \
            "getaddrinfo failed" in text or "nodename nor servname" in text:
        return f"DNS lookup failed for host {host} (ConnectionError)"
    if "Connection refused" in text or "ConnectionRefusedError" in text:
        return f"host {host} refused the connection (ConnectionError)"
    return f"{type(exc).__name__}"


def _refused_of(response: requests.Response) -> dict[str, str]:
    """The ``refused`` member of a problem document (metric -> reason), if any."""
    try:
        return parse_refused(response.json())
    except ValueError:
        return {}


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
