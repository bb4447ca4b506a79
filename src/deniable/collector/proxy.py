"""The client address behind trusted reverse proxies, and a warning when the count is wrong.

``DENIABLE_PROXY_FIX_X_FOR`` says how many trusted proxies stand in front of the collector
(nginx of deploy/vm/ is one; an ingress plus the pod's nginx are two). The per-IP rate limit
keys on the address this yields. With the wrong count every device behind a proxy shares the
proxy's bucket (too few) or a client can pick its own address (too many), so each process
logs one WARNING, on the first request that shows the mistake:

- requests carry ``X-Forwarded-For`` but the setting is 0;
- ``X-Forwarded-For`` holds fewer addresses than the setting (the proxy count is too high, or
  a proxy in front does not add the header).

The check costs one dict lookup per request until it has warned, and nothing afterwards.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

LOGGER = logging.getLogger("deniable.collector")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def client_address_app(app: WSGIApp, x_for: int) -> WSGIApp:
    """Wrap ``app`` so that ``REMOTE_ADDR`` is the client behind ``x_for`` trusted proxies."""
    if x_for > 0:
        from werkzeug.middleware.proxy_fix import ProxyFix

        app = ProxyFix(app, x_for=x_for, x_proto=0, x_host=0, x_port=0, x_prefix=0)
    return ProxyCountCheck(app, x_for)  # ProxyFix keeps the header: the check still reads it


class ProxyCountCheck:
    """WSGI middleware: warn once per process when ``X-Forwarded-For`` contradicts ``x_for``."""

    def __init__(self, app: WSGIApp, x_for: int) -> None:
        self.app = app
        self.x_for = x_for
        self.warned = False

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        if not self.warned:
            forwarded = environ.get("HTTP_X_FORWARDED_FOR")
            if forwarded is not None:
                self._check(forwarded)
        return self.app(environ, start_response)

    def _check(self, forwarded: str) -> None:
        hops = len([part for part in forwarded.split(",") if part.strip()])
        if self.x_for == 0:
            self.warned = True
            LOGGER.warning(
                "requests carry X-Forwarded-For but DENIABLE_PROXY_FIX_X_FOR is 0: every "
                "client behind the proxy shares the proxy's per-IP rate-limit bucket. Set it to "
                "the number of trusted proxies in front (1 for deploy/vm's nginx; see "
                "docs/operations.md, \"Behind a proxy\")")
        elif hops < self.x_for:
            self.warned = True
            LOGGER.warning(
                "X-Forwarded-For holds %d address(es) but DENIABLE_PROXY_FIX_X_FOR is %d: "
                "the client address cannot be found, so these clients share one per-IP "
                "rate-limit bucket. Set it to the number of trusted proxies in front",
                hops, self.x_for)
