"""What a Reporter can tell the app about its queue: counts of reports, never their values."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stats:
    """Counts of reports (not batches) over the life of the queue file.

    With ``queue_path`` the counts survive app restarts; with the in-memory default they
    start at 0 with each Reporter.

    Attributes:
        queued: handed to ``report()`` and not yet acknowledged, dropped or dead-lettered
            (in memory awaiting commit, in SQLite awaiting a batch, or in a sealed batch).
        sent: acknowledged by the collector with a 2xx (a duplicate answer counts too: the
            collector had already counted that batch).
        dropped: removed unsent because the queue was over its size or age cap.
        dead_lettered: refused by the collector with a 4xx other than 429, kept in the
            dead-letter table with the reason.
        budget_refused: ``report()`` calls refused by the privacy budget (never queued).
    """

    queued: int
    sent: int
    dropped: int
    dead_lettered: int
    budget_refused: int


@dataclass(frozen=True)
class LedgerEntry:
    """Perturbed bits of one metric that were handed over to the queue and that were sent.

    ``handed_n``/``handed_ones`` count every report committed to the queue (with its perturbed
    bit); ``sent_n``/``sent_ones`` those acknowledged by the collector. Only perturbed bits are
    counted: the true values were never stored.
    """

    metric: str
    mechanism: str
    handed_n: int
    handed_ones: int
    sent_n: int
    sent_ones: int


@dataclass(frozen=True)
class DeadLetter:
    """A batch the collector refused: its id, size, HTTP status and the collector's reason."""

    batch_id: str
    n_reports: int
    status: int | None
    reason: str
    dead_at: float
