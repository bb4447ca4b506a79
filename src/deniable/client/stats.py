"""What a Reporter can tell the app about its queue: counts of reports, never their values."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
        dead_lettered: refused by the collector with a 400, 409, 413 or 422, kept in the
            dead-letter table with the reason.
        budget_refused: ``report()`` calls refused by the privacy budget with no answer of
            the metric paid for to send instead (they raised; never queued). One sent as a
            paid answer is not counted here (the ledger counts it).
        not_ready: always 0 from this version on (declared metrics need no catalogue, and
            an undeclared one raises); older queue files may hold earlier counts.
        withheld: ``report()`` calls not queued because the metric is withheld: it is of a
            kind this client does not know, or cannot be used on this device
            (``withheld_metrics`` says which and why). Nothing of them was kept.
        cap_refused: ``report()`` calls whose new answer the cap over every version
            (``max_metric_epsilon``) refused: each was sent as an answer already paid for
            (free), or, while none of the metric's mechanism is paid, not queued. Counted in
            the privacy state, so over its life, by every Reporter sharing it.
        period_skipped: ``report()`` calls of a metric already reported in its period (the
            first of a period is sent; the rest are no-ops, never queued). In memory: it
            counts this Reporter's calls only.
        refused: reports the collector refused per metric (its registry does not accept
            them: an unregistered metric, another mechanism, ...) while counting the rest of
            their batch. Kept in the queue file, not sent, until ``Reporter.retry_refused``.

    The fields below describe the reporter now, not the queue file's history:

        withheld_metrics: metric -> why it is not reported (e.g. above the ε ceiling).
        floored_metrics: metric -> how the declared privacy floor applied: the collector
            registers a mechanism with a larger ε than the app declared, so the declared one
            is used.
        key_refused: the collector refused the ingest key (401/403) on the latest attempt;
            the data stays queued until a valid key is given.
        last_error: the latest upload or catalogue failure, as text (None after success).
        dimension_problems: metric -> why its device-wide dimension values
            (``Reporter(dimensions=...)``) are refused by its allow-list: its ``report()``
            raises unless the call gives its own value.
        ignored_served: declared metric -> how many parts of the collector's catalogue entry
            for it the reporter ignores (its mechanism, memoization, period, dimensions:
            ``deniable.client.metrics.SERVED_PARTS``), because they differ from what the app
            declared; metrics whose served entry agrees (or that it does not list) are
            absent. The web client's ``stats().ignoredServed`` is the same.
        refused_metrics: metric -> the collector's latest reason for refusing its reports
            (those counted in ``refused``, still kept).
        enabled: whether the reporter collects (``Reporter.set_enabled``); after
            ``set_enabled(False)`` every count above starts again from 0.

    New fields always come with a default, so code that builds or compares ``Stats`` keeps
    working as they are added.
    """

    queued: int
    sent: int
    dropped: int
    dead_lettered: int
    budget_refused: int
    not_ready: int = 0
    withheld: int = 0
    withheld_metrics: Mapping[str, str] = field(default_factory=dict)
    floored_metrics: Mapping[str, str] = field(default_factory=dict)
    key_refused: bool = False
    last_error: str | None = None
    cap_refused: int = 0
    period_skipped: int = 0
    dimension_problems: Mapping[str, str] = field(default_factory=dict)
    ignored_served: Mapping[str, int] = field(default_factory=dict)
    refused: int = 0
    refused_metrics: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True


@dataclass(frozen=True)
class LedgerEntry:
    """Perturbed reports of one metric that were handed over to the queue and that were sent.

    ``handed_n``/``handed_ones`` count every report committed to the queue (with its perturbed
    bit); ``sent_n``/``sent_ones`` those acknowledged by the collector. Only perturbed reports
    are counted: the true values were never stored. ``*_ones`` counts the ones of the one-bit
    kinds (boolean ``rr:``, numeric ``bm:``); a categorical or histogram metric's reports count
    in ``n`` only (its ``*_ones`` stay 0: its per-category counts are the collector's).
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
