"""Errors raised by deniable.client.

Every error the client raises derives from one root, so an app can catch them all at once::

    DeniableError
    ├── InvalidParameterError (also ValueError)   a mechanism parameter or epsilon is unusable
    ├── UnknownMetricError (also KeyError)        a metric the client was not configured with
    ├── WireFormatError (also ValueError)         a batch that breaks the v1 wire format
    ├── UploadError                               the collector could not be reached or refused
    ├── BudgetExceededError                       a report would overspend a privacy budget
    ├── PrivacyStateError                         the on-device privacy state is unusable
    └── QueueError                                the on-device queue could not be used
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
    """A batch could not be delivered. ``status`` is the HTTP status, if one was received."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = True,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
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


class PrivacyStateError(DeniableError):
    """The on-device privacy state (device secret, ledger) is corrupt, unreadable or in use.

    The client refuses to carry on rather than start afresh: a new secret would redraw every
    memoized answer and a reset ledger would forget what was spent, each costing privacy.
    """


class QueueError(DeniableError):
    """The on-device queue (a SQLite file) could not be opened, read or written."""
