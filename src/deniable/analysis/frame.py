"""pandas DataFrames for notebooks and pipelines. pandas is imported only when asked for."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deniable.analysis.breakdown import Breakdown
from deniable.analysis.compare import Comparison
from deniable.analysis.estimate import MetricSummary
from deniable.analysis.categorical import CategoryEstimates
from deniable.analysis.numeric import MeanEstimate
from deniable.analysis.report import series_rows, summary_rows
from deniable.analysis.sources import MetricCounts
from deniable.analysis.timeseries import TimeSeries, series

if TYPE_CHECKING:
    import pandas as pd

Framable = (TimeSeries | MetricSummary | Comparison | CategoryEstimates | MeanEstimate | Breakdown
            | MetricCounts)
_TYPES = (TimeSeries, MetricSummary, Comparison, CategoryEstimates, MeanEstimate, Breakdown,
          MetricCounts)


def to_frame(data: Framable | Sequence[Framable]) -> pd.DataFrame:
    """A DataFrame with one row per bucket (time series), metric (summaries) or comparison.

    Time series get the columns of ``report.SERIES_COLUMNS``, with ``start`` and ``end`` as
    UTC timestamps and NaN where a bucket has no reports; the ``clipped``, ``wide`` and
    ``flags`` columns carry the honest caveats. A categorical or histogram metric takes one
    row per (bucket, category), with ``category``, the per-category interval (``ci_low``,
    ``ci_high``) and the simultaneous one (``sim_low``, ``sim_high``). Summaries get one row
    per metric (per category for categorical ones), comparisons one per comparison (with
    ``category`` where it is one category's share), CategoryEstimates one per category and a
    MeanEstimate one row. A Breakdown gives ``breakdown_report.breakdown_rows``: one row per
    cell (per cell and category), suppressed cells with ``suppressed`` True, ``reason`` and
    no estimate, then the "not stated" row. A source's ``MetricCounts`` (what
    ``source.counts(metric)`` returns) is framed as its daily series, ``series(counts)``:
    debiased estimates, never the raw perturbed counts.

    Raises:
        ImportError: pandas is not installed (``pip install 'deniable[analysis]'``).
        TypeError: something else; the message says what to pass.
    """
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas ships with the analysis extra
        raise ImportError("to_frame needs pandas: pip install 'deniable[analysis]'") from exc
    items = [data] if isinstance(data, _TYPES) else list(data)  # type: ignore[arg-type]
    rows: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, MetricCounts):
            item = series(item)  # the daily series, as series() gives it by default
        if isinstance(item, Breakdown):
            from deniable.analysis.breakdown_report import breakdown_rows

            rows.extend(breakdown_rows(item))
        elif isinstance(item, TimeSeries):
            rows.extend(series_rows(item))
        elif isinstance(item, MetricSummary):
            rows.extend(summary_rows(item))
        elif isinstance(item, CategoryEstimates):
            rows.extend({**r, "confidence": item.confidence, "mechanism": item.mechanism,
                         "intervals": item.interval_note} for r in item.rows())
        elif isinstance(item, (Comparison, MeanEstimate)):
            rows.append(dataclasses.asdict(item))
        else:
            raise TypeError(
                f"to_frame takes what the analysis functions return: source.counts(metric) "
                f"(framed as its daily series), series(counts), summarize(counts), "
                f"compare_*(...), breakdown(...), or a list of them. Got "
                f"{type(item).__name__} instead.")
    frame = pd.DataFrame(rows)
    for column in ("start", "end", "range_from", "range_to"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    for column in ("yes_rate", "estimate", "stderr", "unclipped"):
        if column in frame:
            frame[column] = frame[column].astype("float64")
    return frame
