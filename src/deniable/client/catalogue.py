"""The catalogue fetcher: ``GET /v1/metrics`` on a background thread, never the app's.

It fetches at once when started, retries failures with the sender's backoff (the long cap
after a refused key, a TLS failure or another configuration error), and refreshes every
``refresh`` seconds after a success. Each document fetched goes to ``on_document``, which
parses and applies it (and may raise, e.g. for a malformed document: that counts as a
failure and is retried). Requests have bounded connect and read timeouts, and ``stop`` never
waits for one in flight.
"""
from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

from deniable.client.doorbell import Doorbell
from deniable.client.errors import DeniableError, InvalidParameterError, UploadError
from deniable.client.sender import LONG_BACKOFF_KINDS, backoff_bound
from deniable.client.transport import Transport

log = logging.getLogger("deniable.client")

DEFAULT_CATALOGUE_REFRESH = 3600.0
"""Seconds between two fetches of the catalogue after a success."""


class CatalogueFetcher:
    """Fetches the collector's catalogue from a daemon thread.

    Args:
        transport_factory: makes the Transport (``retries=0``: this class owns the retries).
        on_document: called with each fetched document (parsed JSON, unvalidated).
        refresh: seconds between fetches after a success.
        backoff, max_backoff, max_config_backoff: the retry schedule (see ``Sender``).
        rand: the random source for delays; ``secrets.SystemRandom()`` by default.
    """

    def __init__(self, transport_factory: Callable[[], Transport],
                 on_document: Callable[[Any], None], *, refresh: float,
                 backoff: float, max_backoff: float, max_config_backoff: float,
                 rand: secrets.SystemRandom | None = None) -> None:
        if not (isinstance(refresh, (int, float)) and 0 < refresh < float("inf")):
            raise InvalidParameterError(
                f"catalogue_refresh must be a finite number of seconds > 0. "
                f"Got {refresh!r} instead.")
        self._transport_factory = transport_factory
        self._on_document = on_document
        self.refresh = float(refresh)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_config_backoff = max(max_config_backoff, max_backoff)
        self._rand = rand or secrets.SystemRandom()
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._wake = Doorbell()     # stop, or fetch now
        self.attempts = 0
        self.fetched = False
        """Whether a fetch succeeded in this process."""
        self.last_error: str | None = None
        self.last_kind: str | None = None

    def start(self) -> None:
        """Start the thread (a daemon); it fetches at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="deniable-catalogue",
                                            daemon=True)
            self._thread.start()

    def fetch_soon(self) -> None:
        """Cut the current wait short and fetch now (e.g. after the token changed)."""
        self.attempts = 0
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread without waiting: a request in flight is abandoned."""
        self._stopping = True
        self._wake.set()
        self._thread = None

    def after_fork_in_child(self) -> None:
        was_started = self._thread is not None
        self._init_runtime()
        if was_started:
            self.start()

    def _run(self) -> None:
        while not self._stopping:
            transport = self._transport_factory()
            try:
                document = transport.fetch_catalogue_document()
                if self._stopping:
                    return
                self._on_document(document)
            except (UploadError, DeniableError, ValueError) as exc:
                if self._stopping:
                    return
                kind = exc.kind if isinstance(exc, UploadError) else "config"
                if kind != self.last_kind:  # once per kind of failure, not once per retry
                    log.warning("deniable: fetching the catalogue failed (%s); will retry", exc)
                self.last_error, self.last_kind = f"catalogue: {exc}", kind
                self.attempts += 1
                cap = self.max_config_backoff if kind in LONG_BACKOFF_KINDS else self.max_backoff
                wait = self._rand.uniform(0, backoff_bound(self.attempts, self.backoff, cap))
            except Exception:  # a bug: never let it reach the app, retry later
                if self._stopping:
                    return
                log.exception("deniable: fetching the catalogue failed unexpectedly")
                self.attempts += 1
                wait = backoff_bound(self.attempts, self.backoff, self.max_config_backoff)
            else:
                self.fetched = True
                self.attempts = 0
                self.last_error = self.last_kind = None
                wait = self.refresh
            finally:
                transport.close()
            if self._wake.wait(wait):
                self._wake.clear()
