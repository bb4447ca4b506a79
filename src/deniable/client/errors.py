"""Errors raised by deniable.client.

Every error the client raises derives from one root, so an app can catch them all at once::

    DeniableError
    ├── InvalidParameterError (also ValueError)   a mechanism parameter or epsilon is unusable
    ├── UnknownMetricError (also KeyError)        a metric the client was not configured with
    ├── WireFormatError (also ValueError)         a batch that breaks the v1 wire format
    ├── UploadError                               the collector could not be reached or refused
    ├── BudgetExceededError                       a report would overspend a privacy budget
    │   └── MetricCapError                        ... or a metric's cap over every version
    ├── PrivacyStateError                         the on-device privacy state is unusable
    ├── QueueError                                the on-device queue could not be used
    └── PluginError                               a kind plugin could not be registered
"""
from __future__ import annotations

from dataclasses import dataclass


class DeniableError(Exception):
    """Root of every error raised by Deniable's client library."""


class InvalidParameterError(DeniableError, ValueError):
    """A mechanism was asked for with parameters that give no privacy or no information."""


class UnknownMetricError(DeniableError, KeyError):
    """A metric (or its mechanism) is not one this client was configured with."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Problem:
    """One offending field: an RFC 6901 JSON pointer into the document, and what is wrong."""

    pointer: str
    detail: str


class WireFormatError(DeniableError, ValueError):
    """A batch document breaks the v1 wire format. ``problems`` names every offending field."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.problems: list[Problem] = list(problems or [])


class UploadError(DeniableError):
    """A request to the collector failed. ``status`` is the HTTP status, if one was received.

    ``kind`` says what failed, and so what the sender does with the batch (docs/client.md,
    "Network conditions"):

    - ``"network"``: no answer (connection refused or reset, timeout, DNS failure) or a 408,
      429 or 5xx: retried with the short backoff.
    - ``"tls"``: the TLS handshake failed (e.g. "certificate verify failed for host ...").
    - ``"key_refused"``: 401 or 403, the collector refused the ingest key.
    - ``"config"``: another 4xx that says the client is misconfigured, not the batch (404,
      405, 415, ...).
    - ``"bad_batch"``: 400, 409, 413 or 422, the collector can never accept this batch as it
      is: dead-lettered.

    All kinds but ``"bad_batch"`` keep the batch queued (``retryable``); ``"tls"``,
    ``"key_refused"`` and ``"config"`` back off up to the long cap, since only a change of
    configuration on one side can fix them.
    """

    KINDS = ("network", "tls", "key_refused", "config", "bad_batch")

    def __init__(self, message: str, status: int | None = None,
                 retryable: bool | None = None, retry_after: float | None = None,
                 kind: str | None = None, refused: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.refused: dict[str, str] = dict(refused or {})
        """A 422 refusing every metric of a batch sent with lenient handling: metric -> the
        collector's reason (``deniable.client.wire.parse_refused``); empty otherwise."""
        self.status = status
        if kind is None:
            kind = "network" if retryable is None or retryable else "bad_batch"
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}. Got {kind!r} instead.")
        self.kind = kind
        self.retryable = kind != "bad_batch" if retryable is None else retryable
        self.retry_after = retry_after
        """Seconds the collector asked us to wait (``Retry-After`` on 429/503), if it did."""


class BudgetExceededError(DeniableError):
    """A report was refused: it would take a metric past its privacy budget for the period.

    Nothing was perturbed, released or spent. ``cost`` and ``spent`` are in nats of epsilon;
    ``retry_at`` is the Unix time (seconds) at which the metric's next period starts.
    """

    def __init__(self, message: str, *, metric: str = "", cost: float = 0.0,
                 spent: float = 0.0, budget: float = 0.0, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.metric = metric
        self.cost = cost
        self.spent = spent
        self.budget = budget
        self.retry_at = retry_at


class MetricCapError(BudgetExceededError):
    """A report was refused: its new answer would take the metric's total epsilon, summed over
    every version (mechanism) it was ever reported under on this device, past the cap
    (``max_metric_epsilon``). Nothing was perturbed, released or spent; ``budget`` is the cap
    and ``retry_at`` is None (the cap never renews; a new metric name starts afresh).
    """


class PrivacyStateError(DeniableError):
    """The on-device privacy state (device secret, ledger) is corrupt, unreadable or in use.

    The client refuses to carry on rather than start afresh: a new secret would redraw every
    memoized answer and a reset ledger would forget what was spent, each costing privacy.
    """


class QueueError(DeniableError):
    """The on-device queue (a SQLite file) could not be opened, read or written."""


class PluginError(DeniableError):
    """A kind plugin (an entry point of the group ``deniable.kinds``, or a ``module:attribute``
    the operator named) could not be loaded or registered; the message names the entry."""
